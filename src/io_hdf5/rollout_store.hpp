// The writer of RUN_DIR/rollouts.h5 (layout: rollout_schema.hpp and
// docs/hdf5-schema.md). One writer per file:
//
//   create   latest file format, every dataset and attribute, then
//            H5Fstart_swmr_write: from here on SWMR readers (h5py with
//            swmr=True, `forge inspect`) can follow the file.
//   append   episodes and steps go to in-memory buffers (cheap: a copy);
//   flush    at the first append once flush_seconds have passed since the last
//            flush, when the buffers hold max_buffered_tokens, on flush() and
//            on close(): the buffers are appended to the datasets (extend,
//            write) in schema order and the file is flushed.
// After a SIGKILL the file holds everything up to the last completed flush;
// it must then be opened in SWMR-read mode (RolloutReader does; h5py needs
// swmr=True, or `h5clear -s` first) because its "open for writing" flag stays set.
//
// Resume (options.resume_step >= 0): an existing file is reopened instead of
// truncated; the rows of steps >= resume_step (which the resumed run will
// produce again) and any partial rows a killed writer left are cut off, and
// appending continues after the rest. A missing file is created.
//
// Staleness of an episode = learner_version - its oldest token version (-1
// when it generated nothing). steps/staleness_hist of step s counts the
// episodes appended with consumed_step == s since the previous append_step.
#pragma once
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/timer.hpp"
#include "episode/trajectory.hpp"
#include "io_hdf5/h5_file.hpp"
#include "io_hdf5/rollout_schema.hpp"

namespace forge {

// One row of steps/* (learner/train_progress.hpp fills it from a step's
// statistics).
struct StepMetrics {
  int64_t step = 0;
  double objective = 0, reward_mean = 0;
  double outcome_mean = 0, process_mean = 0, efficiency_mean = 0, success_rate = 0;
  double safety_mean = 0;  // NaN from files before schema 5
  double clip_fraction = 0, masked_fraction = 0, kl = 0, entropy = 0;
  // |log pi_learner - log pi_behaviour| (algo/policy_update.hpp): at
  // staleness 0 (the engine/learner mismatch), at staleness >= 1 (drift), and
  // per staleness (bins as staleness_hist); NaN where no token fell in.
  double engine_mismatch = std::numeric_limits<double>::quiet_NaN();
  double stale_drift = std::numeric_limits<double>::quiet_NaN();
  std::array<double, rollout_schema::kStalenessBins> drift_by_staleness = [] {
    std::array<double, rollout_schema::kStalenessBins> a;
    a.fill(std::numeric_limits<double>::quiet_NaN());
    return a;
  }();
  double mixed_mismatch = std::numeric_limits<double>::quiet_NaN();  // read from schema <= 2 files only
  double tree_token_ratio = 1, tokens_per_s = 0;
  double step_seconds = 0;   // wall time of the training step
  // The optimizer step: the gradient norm before clipping and the learning
  // rate applied, both 0 when no step was taken (nothing left to train).
  double grad_norm = 0, lr = 0;
  // Groups: trained on (zero-variance ones included), of zero variance,
  // kept out by the staleness cap (dropped or masked; the MPI learner only),
  // and episodes left out as abandoned. -1 in files before schema 5.
  int32_t groups = 0, zero_variance_groups = 0, dropped_groups = 0, masked_groups = 0, abandoned = 0;
  double store_seconds = 0;  // time spent in the store since the previous step (set by the store)
  std::array<int32_t, rollout_schema::kStalenessBins> staleness_hist{};  // set by the store
};

struct RolloutStoreOptions {
  std::string config_ini;                      // root attribute "config"
  std::vector<std::string> domains;            // names of episodes/env codes
  std::vector<std::string> template_families;  // names of episodes/template_family codes
  double flush_seconds = 10;
  int64_t max_buffered_tokens = int64_t{1} << 22;
  int64_t resume_step = -1;  // >= 0: keep the file's rows of earlier steps (see above)
};

class RolloutStore {
 public:
  // Creates (truncating) path. InputError if it cannot be created.
  RolloutStore(const std::string& path, RolloutStoreOptions options);
  ~RolloutStore();  // close(); errors are logged, not thrown
  RolloutStore(const RolloutStore&) = delete;
  RolloutStore& operator=(const RolloutStore&) = delete;

  // Error for a domain or template family not declared in the options.
  void append_episodes(const std::vector<Trajectory>& episodes, int consumed_step,
                       int learner_version);
  void append_step(StepMetrics metrics);
  void flush();
  // flush(), then the file to the disk (fsync): before a checkpoint names
  // its steps, so a crash of the node cannot leave the checkpoint without them.
  void sync();
  void close();

  const std::string& path() const { return path_; }
  double seconds_spent() const { return seconds_spent_; }  // in appends and flushes so far

 private:
  class Series;
  Series& col(const std::string& name);
  void create();
  void reopen();
  void maybe_flush();
  void write_buffers();
  void start_swmr();
  // A copy of the file at the current schema (reopen renames it over the
  // file once checked); returns its path.
  std::string upgrade(int64_t from_version, const std::array<int64_t, 4>& rows);
  // Opens `file` for appending and every column's series, checking each.
  void open_checked(const std::string& file, const std::array<int64_t, 4>& kept, int64_t file_version,
                    int64_t record_rows);
  void commit();  // buffers a commit record of the rows appended, if they changed

  std::string path_;
  RolloutStoreOptions options_;
  std::map<std::string, int16_t> domain_code_, family_code_;
  h5::File file_;
  std::vector<std::unique_ptr<Series>> series_;  // schema order
  std::map<std::string, Series*> by_name_;
  int64_t n_tokens_ = 0, n_calls_ = 0, n_episodes_ = 0, n_steps_ = 0;  // rows appended so far
  std::array<int64_t, 4> committed_{-1, -1, -1, -1};  // the last commit record written (flushes)
  int64_t buffered_tokens_ = 0;
  std::map<int64_t, std::array<int32_t, rollout_schema::kStalenessBins>> pending_hist_;
  Stopwatch since_flush_;
  double seconds_spent_ = 0, seconds_at_last_step_ = 0;
};

}  // namespace forge
