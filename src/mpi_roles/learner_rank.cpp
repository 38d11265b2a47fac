#include "mpi_roles/learner_rank.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "backend/host_pins.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "core/timer.hpp"
#include "episode/trajectory_codec.hpp"
#include "learner/run_checkpoints.hpp"
#include "mpi_roles/int_pieces.hpp"
#include "mpi_roles/learner_agreement.hpp"
#include "mpi_roles/learner_gradient_sum.hpp"
#include "mpi_roles/watchdog.hpp"

namespace forge {
namespace {

// A finished group the lead holds outside the pool: restored from a
// checkpoint, or taken from the pool by a batch that SIGTERM interrupted.
struct HeldGroup {
  uint64_t slot = 0;
  int64_t version = 0;
  int producer = -1;  // -1: from the checkpoint
  std::vector<uint8_t> payload;
  double head_wait_s = 0;  // the learner's wait with this group at the pool's head
};

// One step's batch as the lead took it.
struct TakenBatch {
  std::vector<Trajectory> episodes;
  std::vector<int64_t> staleness;  // per group
  int dropped = 0, masked = 0;
  double waited_s = 0;
  double straggler_wait_s = 0;  // waiting on groups that came back with abandoned episodes

  // Counts a group the staleness cap keeps out; true when it is out.
  bool keeps_out(Verdict v) {
    if (v == Verdict::kDrop) ++dropped;
    if (v == Verdict::kMask) ++masked;
    return v != Verdict::kTrain;
  }
};

class BatchTaker {
 public:
  BatchTaker(DataPool& pool, const RoleLayout& layout, const LearnerRankConfig& cfg, const DataPoolState* resumed,
             int32_t vocab)
      : pool_(pool), layout_(layout), cfg_(cfg), vocab_(vocab) {
    if (resumed)
      for (size_t i = 0; i < resumed->kept_slot.size(); ++i)
        held_.push_back({static_cast<uint64_t>(resumed->kept_slot[i]), resumed->kept_version[i], -1,
                         resumed->kept_payload(i), 0});
  }

  size_t held() const { return held_.size(); }

  // `groups` groups for step `version`, held ones first; nullopt after
  // SIGTERM, with the groups taken so far held again.
  std::optional<TakenBatch> take(int groups, int64_t version) {
    TakenBatch batch;
    std::vector<HeldGroup> taken;
    Stopwatch waited, since_group;
    while (static_cast<int>(taken.size()) < groups) {
      if (*cfg_.terminate) {
        held_.insert(held_.begin(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
        return std::nullopt;
      }
      if (!held_.empty()) {
        HeldGroup g = std::move(held_.front());
        held_.pop_front();
        const int64_t staleness = version - g.version;
        // One restored from a checkpoint meets the staleness cap as a take
        // from the pool does (one held after SIGTERM met it at this version).
        if (g.producer < 0 && batch.keeps_out(pool_.take_held(staleness))) continue;
        batch.staleness.push_back(staleness);
        taken.push_back(std::move(g));
        continue;
      }
      if (cfg_.watchdog) cfg_.watchdog->progress("learner rank 0's wait for groups");  // its own deadline below
      std::optional<TakenTrajectory> t = pool_.try_take();
      if (!t) {
        if (since_group.seconds() > cfg_.group_wait_s)
          throw Error("waited " + std::to_string(static_cast<int>(cfg_.group_wait_s)) + " s (" +
                      cfg_.group_wait_key + ") for a group from the environment ranks: " + pool_.describe_head());
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      since_group.reset();
      if (batch.keeps_out(t->verdict)) continue;
      batch.staleness.push_back(t->staleness);
      taken.push_back({t->slot, t->version, t->producer, std::move(t->payload), t->head_wait_s});
    }
    batch.waited_s = waited.seconds();
    pool_.return_taken_cells();  // the batch's cells are free while the step trains
    for (const HeldGroup& g : taken) {
      const std::string source = "slot " + std::to_string(g.slot) +
                                 (g.producer >= 0 ? " from " + layout_.name(g.producer) : " (from the checkpoint)");
      bool straggler = false;
      for (Trajectory& t : decode_trajectories(g.payload.data(), g.payload.size(), vocab_, source)) {
        straggler = straggler || t.abandoned;
        batch.episodes.push_back(std::move(t));
      }
      if (straggler) batch.straggler_wait_s += g.head_wait_s;
    }
    return batch;
  }

  // The pool's state plus the groups the lead holds (they are SKIP or
  // consumed in the pool, and must be kept, not forgotten, by a resume).
  CheckpointState checkpoint_state() {
    DataPoolState st = pool_.snapshot();
    for (const HeldGroup& g : held_) {
      std::erase(st.consumed, static_cast<int64_t>(g.slot));
      st.keep(static_cast<int64_t>(g.slot), g.version, g.payload);
    }
    last_kept_ = st.kept_slot.size();
    CheckpointState cs;
    cs.sections[kDataPoolSection] = st.to_section();
    return cs;
  }
  // The finished groups the last checkpoint_state kept, untrained.
  size_t last_kept() const { return last_kept_; }

 private:
  DataPool& pool_;
  const RoleLayout& layout_;
  const LearnerRankConfig& cfg_;
  int32_t vocab_;  // token ids of a payload lie in [0, vocab)
  size_t last_kept_ = 0;
  std::deque<HeldGroup> held_;
};

std::string pool_view(const TakenBatch& b, const PolicyUpdateStats& st) {
  int64_t smax = 0;
  double smean = 0;
  for (int64_t s : b.staleness) smax = std::max(smax, s), smean += double(s) / b.staleness.size();
  char line[192], abandoned[96] = "";
  if (st.abandoned)
    std::snprintf(abandoned, sizeof abandoned, "  abandoned %d (held the head %.1f s)", st.abandoned,
                  b.straggler_wait_s);
  std::snprintf(line, sizeof line, "  staleness mean %.2f max %lld  waited %.1f s  dropped %d masked %d%s", smean,
                static_cast<long long>(smax), b.waited_s, b.dropped, b.masked, abandoned);
  return line;
}

// "weights: N versions of P floats (M MB) published, median X ms each
// (device to host Y ms)": the learner's cost of one weights version.
std::string publish_summary(std::vector<double> publish_ms, std::vector<double> download_ms, size_t floats) {
  const auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  char line[224];
  std::snprintf(line, sizeof line, "weights: %zu versions of %zu floats (%.1f MB) published, median %.2f ms each",
                publish_ms.size(), floats, floats * 4.0 / 1e6, median(publish_ms));
  std::string out = line;
  if (!download_ms.empty()) {
    std::snprintf(line, sizeof line, " (device to host %.2f ms)", median(download_ms));
    out += line;
  }
  return out;
}

// Broadcasts the lead's bytes to every learner (size first: 0 = stop),
// watched by `watchdog` (the lead's: the others wait for it here after their
// step, so a learner that has not come, stuck in its optimizer step, holds
// the payload's broadcast; the others pass none, as they wait for the lead's
// next batch, which may take the pool's time).
std::vector<uint8_t> broadcast_batch(MPI_Comm learners, std::vector<uint8_t> bytes, Watchdog* watchdog,
                                     const std::vector<int>& other_learners) {
  const Watchdog::WatchedWait watched(watchdog, "the learners' receipt of the lead's batch", other_learners);
  uint64_t size = bytes.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, learners);
  bytes.resize(size);
  for_int_pieces(size, [&](size_t offset, int count) {  // a batch may pass 2 GiB
    MPI_Bcast(bytes.data() + offset, count, MPI_BYTE, 0, learners);
  }, kMpiPieceBytes);
  return bytes;
}

}  // namespace

int run_learner_rank(MPI_Comm learners, const RoleLayout& layout, DataPool& pool, WeightChannel& weights,
                     SendQueue& sends, PolicyModel& model, AdamW& opt, LearnerRankConfig cfg,
                     const LearnerStart& start, const DataPoolState* resumed_pool) {
  int learner_rank = 0, learner_count = 1;
  MPI_Comm_rank(learners, &learner_rank);
  MPI_Comm_size(learners, &learner_count);
  const bool lead = learner_rank == 0;
  LearnerSetup& setup = cfg.setup;
  setup.lead = lead;
  setup.terminate = cfg.terminate;
  setup.shard = learner_rank;
  setup.shards = learner_count;
  // The other learners (world ranks [0, L)): the collective sums below wait
  // for them, each after the same work, watched by the watchdog.
  std::vector<int> other_learners;
  for (int r = 0; r < learner_count; ++r)
    if (r != learner_rank) other_learners.push_back(r);
  Watchdog* const watchdog = cfg.watchdog;
  // The lead's stages, each watched for progress (a lead alive but stuck,
  // e.g. in I/O on a hung file system, ends the job naming its stage).
  Watchdog* const lead_dog = lead ? watchdog : nullptr;
  const auto stage = [lead_dog](const char* what) {
    if (lead_dog) lead_dog->progress(what);
  };
  if (lead_dog) setup.progress = stage;
  // Device collectives, or MPI on host memory. Set up under a watched wait:
  // NCCL's is a broadcast of its id and a blocking communicator init across
  // the learners, which a stuck learner would hold forever. The learners
  // meet here first after each loaded the model (and a checkpoint): the
  // wait is mpi.startup_s's, as the other ranks' for the first weights.
  const Watchdog::Deadline first_meeting{cfg.startup_s, "mpi.startup_s"};
  std::optional<LearnerGradientSum> gradient_sum;
  {
    const Watchdog::WatchedWait watched(learner_count > 1 ? watchdog : nullptr,
                                        "the learners' collective set-up (the NCCL communicator)", other_learners,
                                        first_meeting);
    gradient_sum.emplace(learners, model.backend());
  }
  if (learner_count > 1) {
    setup.sum_across_shards = [learners, watchdog, other_learners](double* v, int n) {
      const Watchdog::WatchedWait watched(watchdog, "the learners' sum of loss terms", other_learners);
      MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, learners);
    };
    Backend* const backend = &model.backend();
    setup.gradient_sum = [&gradient_sum, watchdog, other_learners, backend](float* g, size_t n) {
      // This rank's own queued kernels first, outside the watch: a hang in
      // them is not the other learners' (the wait would name them).
      backend->synchronize();
      const Watchdog::WatchedWait watched(watchdog, "the learners' gradient sum", other_learners);
      (*gradient_sum)(g, n);
    };
  }
  if (learner_count > 1) {
    const Watchdog::WatchedWait watched(watchdog, "the learners' start-step check", other_learners, first_meeting);
    check_learners_start_together(learners, start.step);
  }
  Learner learner(setup, model, opt, start);
  BatchTaker taker(pool, layout, cfg, lead ? resumed_pool : nullptr, model.config().vocab);

  // Version v to the rollout ranks (weights) and the pool (staleness). The
  // parameters are written straight into the weight channel's buffer: a
  // device backend downloads them there. Each publication is timed: the
  // download, then the whole of it (a device backend's stream drained
  // first, so that the optimizer's last kernels do not count as download).
  // A device backend downloads into page-locked memory (HostPins), pinned
  // here, once, before the first publication's clock starts.
  std::vector<double> publish_ms, download_ms;
  HostPins pins(model.backend());
  if (lead && !model.backend().host_memory()) {
    const auto [memory, memory_bytes] = weights.publish_memory();
    pins.pin(memory, memory_bytes);
  }
  const auto publish = [&](int64_t version) {
    const size_t bytes = model.layout().total * sizeof(float);
    if (!model.backend().host_memory()) {
      float drained;
      model.backend().to_host(&drained, std::as_const(model).params(), sizeof drained);
    }
    Stopwatch sw;
    float* dst = weights.begin_publish(version);
    if (model.backend().host_memory()) {
      std::memcpy(dst, std::as_const(model).params(), bytes);
    } else {
      model.backend().to_host(dst, std::as_const(model).params(), bytes);
      download_ms.push_back(sw.seconds() * 1e3);
    }
    // The pool's version first: a group with no generated token is stamped
    // with it, and once environment ranks see the weights (after a resume,
    // V was 0 until here) such a group must not read an older one.
    pool.publish_version(version);
    weights.commit_publish(version);
    publish_ms.push_back(sw.seconds() * 1e3);
  };
  const int steps = setup.train.steps;
  if (lead) {
    if (!start.resumed_from.empty())
      log_info("resumed from " + start.resumed_from + resumed_at(start.step, steps, "train.steps") + "; pool head " +
               std::to_string(resumed_pool ? resumed_pool->head : 0) + ", " + std::to_string(taker.held()) +
               " finished groups restored, in-flight groups generated again");
    else if (!setup.train.init.empty())
      log_info("initial weights from " + setup.train.init);
    publish(start.step);
    const WindowConfig& w = pool.config().window;
    log_info("train: " + std::to_string(model.layout().total) + " parameters; " +
             std::to_string(layout.count(Role::kLearner)) + " learner, " + std::to_string(layout.count(Role::kRollout)) +
             " rollout and " + std::to_string(layout.count(Role::kEnvironment)) + " environment ranks; " +
             std::to_string(setup.train.tasks) + " groups of " + std::to_string(setup.train.group) +
             " episodes per step; pool " + to_string(w.kind) + " N=" + std::to_string(w.n_running) +
             " M=" + std::to_string(w.memory) +
             (w.kind == WindowKind::kGreedy ? std::string() : " W=" + std::to_string(w.effective_window())) +
             (w.kind == WindowKind::kGreedy
                  ? std::string(" (staleness unbounded)")
                  : " (staleness <= " +
                        std::to_string(staleness_bound(w, static_cast<uint64_t>(setup.train.tasks))) + ")") +
             "; loss " + setup.update.loss.algorithm + "; run folder " + setup.run.dir);
  }

  int stop = kStopFinished;
  int step = start.step;
  Stopwatch since_step;
  for (; step < steps; ++step) {
    Stopwatch sw;
    std::optional<TakenBatch> batch;
    if (lead) batch = taker.take(setup.train.tasks, step);
    std::vector<uint8_t> bytes;
    if (learner_count > 1)
      bytes = broadcast_batch(learners, batch ? encode_trajectories(batch->episodes) : bytes,
                              lead ? watchdog : nullptr, other_learners);
    if (lead ? !batch : bytes.empty()) {  // SIGTERM on the lead: every learner stops here
      stop = kStopSignal;
      break;
    }
    const std::vector<Trajectory> episodes =
        lead ? std::move(batch->episodes)
             : decode_trajectories(bytes.data(), bytes.size(), model.config().vocab, "the lead learner's batch");
    double grad_norm = 0;
    stage("learner rank 0's training step");
    const PolicyUpdateStats st = learner.update(episodes, step, &grad_norm);
    if (checkpoint_due(setup.run, step + 1, steps)) {
      const uint64_t hash = parameter_hash(model);  // this rank's own work, outside the watch
      const Watchdog::WatchedWait watched(learner_count > 1 ? watchdog : nullptr, "the learners' agreement check",
                                          other_learners);
      check_learners_agree(learners, hash, step + 1);
    }
    if (!lead) continue;
    stage("learner rank 0's publication of weights");
    publish(step + 1);
    const double since_previous = since_step.seconds();
    since_step.reset();
    stage("learner rank 0's record of the step (rollouts.h5, a checkpoint, an evaluation)");
    learner.record(step, episodes, st, grad_norm, {since_previous, sw.seconds()}, pool_view(*batch, st),
                   [&] { return taker.checkpoint_state(); }, {batch->dropped, batch->masked});
  }

  if (lead) {
    log_info(publish_summary(publish_ms, download_ms, model.layout().total));
    if (stop == kStopSignal) {
      stage("learner rank 0's checkpoint at a stop signal (SIGTERM, SIGINT)");
      log_stopped_at_step(step, learner.checkpoint(step, taker.checkpoint_state()));
    }
    // What the run leaves untrained: finished groups the checkpoint keeps
    // (a resume trains them first), groups still being played (discarded; a
    // resume plays their tasks again).
    log_info("pool at the end: " + std::to_string(taker.last_kept()) +
             " finished groups not trained, kept in the last checkpoint; " + std::to_string(pool.counts().running) +
             " groups still running, discarded");
    if (lead_dog) lead_dog->progress_done();  // the final barrier has its own deadline
    weights.request_stop(stop);
  } else {
    // The lead's last publish and record (a checkpoint, an evaluation) or
    // its SIGTERM checkpoint may outlast mpi.deadline_s: the other learners
    // wait for its stop word, as the other roles do (the watchdog reports a
    // dead or stopped lead), and only then meet everyone in quiesce.
    while (weights.stop_code() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  quiesce(MPI_COMM_WORLD, sends, cfg.shutdown_s, cfg.watchdog);
  if (stop == kStopFinished) {
    // The run's last checkpoint is written: a SIGTERM by now skips the final
    // evaluation, and one during it ends it. Only the lead evaluates, and
    // only its SIGTERM stops the run: one another learner caught alone
    // leaves the complete run's exit code 0 (it was 143 from that rank).
    const bool caught = stop_signal_before_final_evaluation(setup.run.dir, lead);
    if (caught && lead) return kSigtermExit;
    if (caught)
      log_info(stop_signal_name() + " on learner " + std::to_string(learner_rank) +
               " alone: only learner 0 stops a run; the run is complete");
    stage("learner rank 0's final evaluation (after closing rollouts.h5)");
    learner.finish(step);
    if (lead_dog) lead_dog->progress_done();
  }
  return stop == kStopSignal ? kSigtermExit : 0;
}

}  // namespace forge
