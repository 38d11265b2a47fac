// The reader of rollouts.h5 (layout: rollout_schema.hpp), for `forge
// inspect`, `forge export` and the tests. It opens the file in SWMR-read mode,
// so a file that is being written, or whose writer was killed, reads like a
// finished one; refresh() shows the rows flushed since.
//
// Validation on open: InputError naming the file for a missing, non-HDF5 or
// truncated file, a file whose format attribute is not "forge-rollouts"
// (foreign), a schema_version newer than this build reads, and a dataset that
// is missing or has the wrong type or shape; reads that fail (corrupted
// chunks) and offsets that point outside their tables are InputErrors too.
//
// Each table is clamped to a consistent prefix: the calls whose tokens are
// all present, the episodes whose calls are all present (a writer killed
// mid-flush may have extended some datasets and not others). A whole row
// after one that is not is damage, an InputError naming the row: a table cut
// there would hide (and a resume would delete) every row after it.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "episode/trajectory.hpp"
#include "io_hdf5/h5_file.hpp"
#include "io_hdf5/rollout_store.hpp"

namespace forge {

// episodes/* as columns, plus lengths derived from calls/*.
struct EpisodeTable {
  std::vector<uint64_t> episode_id, task_id;
  std::vector<int64_t> call_offset;
  std::vector<int32_t> n_calls, group, turns, tool_errors, recoveries, staleness, consumed_step, safety_events,
      test_runs;
  std::vector<int16_t> env, template_family;
  std::vector<float> outcome, process, efficiency, safety;
  std::vector<uint8_t> success, abandoned;
  std::vector<int64_t> generated_tokens;  // sum of generated_len over the episode's calls
  std::vector<int64_t> final_length;      // context + generated tokens of its last call
  size_t size() const { return episode_id.size(); }
};

class RolloutReader {
 public:
  explicit RolloutReader(const std::string& path);

  // Re-reads the extents (SWMR mode: rows flushed by the writer since).
  void refresh();

  const std::string& path() const { return file_.path(); }
  bool swmr() const { return swmr_; }  // opened in SWMR-read mode (refresh() follows a writer)
  int64_t schema_version() const { return schema_version_; }
  const std::string& config_ini() const { return config_; }
  const std::vector<std::string>& domains() const { return domains_; }
  const std::vector<std::string>& template_families() const { return families_; }

  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_calls() const { return n_calls_; }
  int64_t n_episodes() const { return n_episodes_; }
  int64_t n_steps() const { return n_steps_; }
  // Rows of the commit record up to its last written one (0 without one):
  // a resume appends after them.
  int64_t record_rows() const { return record_rows_; }

  EpisodeTable episodes() const;
  std::vector<StepMetrics> steps() const;  // staleness_hist and store_seconds included
  // Episode i with its calls (context, generated, logprobs, versions) and
  // the per-episode fields the file keeps; InputError if out of range.
  Trajectory episode(int64_t i) const;

  // Rows [start, start + count) of a 1-D dataset of the schema.
  template <typename T>
  std::vector<T> read(const std::string& name, int64_t start, int64_t count) const;

 private:
  struct Dataset {
    h5::Handle id;
    rollout_schema::Column column;
    int64_t rows = 0;
  };
  const Dataset& dataset(const std::string& name) const;
  void check_rows(const Dataset& d, int64_t start, int64_t count) const;  // corrupted() unless inside d
  void read_raw(const Dataset& d, int64_t start, int64_t count, void* out) const;
  std::vector<std::string> read_names(const std::string& dataset) const;
  [[noreturn]] void corrupted(const std::string& what) const;
  // The record's last written row; *rows = its index + 1 (0: none).
  std::array<int64_t, 4> last_record(const Dataset& record, int64_t* rows) const;

  bool swmr_ = false;  // before file_: set while file_ is initialized
  h5::File file_;
  int64_t schema_version_ = 0;
  std::string config_;
  std::vector<std::string> domains_, families_;
  std::map<std::string, Dataset> datasets_;
  int64_t n_tokens_ = 0, n_calls_ = 0, n_episodes_ = 0, n_steps_ = 0;
  int64_t record_rows_ = 0;
};

}  // namespace forge
