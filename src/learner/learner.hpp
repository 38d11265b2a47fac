// The learner: one RL step from a batch of finished episodes, written once
// for the synchronous `forge train` and the learner ranks of an MPI run
// (mpi_roles/learner_rank.hpp).
//
//   load_learner_start   weights (and AdamW state) for the first step: the
//                        run's newest checkpoint on --resume, else
//                        train.init, else the model as constructed
//   Learner::update      composite rewards, group advantages and the policy
//                        loss on prefix-tree bins (algo/policy_update.hpp),
//                        the gradient sum over learners (data parallelism),
//                        AdamW
//   Learner::record      the lead learner only: episodes and the step's row
//                        into RUN_DIR/rollouts.h5, the progress line every
//                        run.log_every steps, a checkpoint when due (with the
//                        caller's data-stream state: its RNG or the data
//                        pool), the evaluation every train.eval_every steps
//   Learner::finish      closes rollouts.h5 and evaluates the final policy
//
// The caller publishes the new weights between update and record (the
// rollout engine's version, or the MPI weight channel), so that generation
// never waits for the store, checkpoints or evaluations.
#pragma once
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_config.hpp"
#include "algo/policy_update.hpp"
#include "env/env_config.hpp"
#include "episode/trajectory.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/rollout_store.hpp"
#include "learner/learner_config.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"

namespace forge {

struct LearnerSetup {
  RunConfig run;
  TrainConfig train;
  PolicyUpdateConfig update;      // [loss] and [reward]; packing and temperature come from below
  float sampling_temperature = 1;  // of the behaviour policy (0 = greedy: 1)
  EnvConfig env;                  // evaluation tasks and rollout-store domains
  AgentConfig agent;              // evaluation episodes
  std::string config_ini;         // the resolved configuration of the run
  std::string model_fingerprint;  // its model's, for the checkpoints (pretrained/model_fingerprint.hpp)
  bool lead = true;               // writes the run folder, logs, checkpoints, evaluates
  // Data parallelism: this learner's shard, the sum of statistics over the
  // learners (policy_update.hpp) and of their gradients (in place, backend
  // memory); empty for one learner.
  int shard = 0, shards = 1;
  ShardSum sum_across_shards;
  std::function<void(float* grads, size_t n)> gradient_sum;
  // SIGTERM: ends an evaluation under way (the step boundary's checkpoint
  // waits on it, and Slurm's SIGKILL follows within KillWait).
  const volatile std::sig_atomic_t* terminate = nullptr;
  // The lead's stages, for a watchdog's progress (mpi_roles/watchdog.hpp):
  // called as an evaluation goes on (each engine step); empty: none.
  std::function<void(const char* stage)> progress;
};

struct LearnerStart {
  int step = 0;                 // the first step to run
  std::string resumed_from;     // the checkpoint resumed, "" when none
  CheckpointState checkpoint;   // its state (RNG streams, sections) when resumed
};

// Loads the starting weights into model (and opt on resume). InputError when
// --resume finds no checkpoint in RUN_DIR/checkpoints or train.init none.
LearnerStart load_learner_start(PolicyModel& model, AdamW& opt, const RunConfig& run, const TrainConfig& train,
                                bool resume);

// Wall times of a step, measured by the caller.
struct StepTiming {
  double generation_seconds = 0;  // over which the batch was generated (tokens/s)
  double step_seconds = 0;        // the whole step, waiting and update included
};

// Groups the staleness cap kept out of a step's batch (the MPI learner).
struct StaleGroups {
  int dropped = 0, masked = 0;
};

class Learner {
 public:
  // The lead creates run.dir with config.ini and opens RUN_DIR/rollouts.h5
  // (on a resume at start_step, its rows of later steps are cut).
  Learner(const LearnerSetup& setup, PolicyModel& model, AdamW& opt, const LearnerStart& start);
  ~Learner();

  // Gradients of the batch summed over learners, then one AdamW step (none
  // when no sample is left to train). Every learner calls it. `version`: the
  // weights' version (the step), from which token staleness is counted.
  PolicyUpdateStats update(const std::vector<Trajectory>& episodes, int64_t version, double* grad_norm);

  // The lead's bookkeeping of step `step` (0-based), after update.
  // progress_suffix is appended to the progress line; stream_state gives the
  // data stream's state for a checkpoint.
  void record(int step, const std::vector<Trajectory>& episodes, const PolicyUpdateStats& stats,
              double grad_norm, const StepTiming& timing, const std::string& progress_suffix,
              const std::function<CheckpointState()>& stream_state, StaleGroups stale = {});

  // A checkpoint after `steps_done` steps now (rollouts.h5 flushed first, so
  // that it never covers steps the file lacks); returns its path. One of the
  // same step is not written again (a SIGTERM right after a periodic one:
  // Slurm's KillWait is short).
  std::string checkpoint(int steps_done, CheckpointState stream_state);

  // Flushes and closes rollouts.h5, then evaluates the final policy.
  void finish(int steps_done);

  const PolicyUpdateConfig& update_config() const { return update_; }

 private:
  void evaluate(int steps_done);

  LearnerSetup setup_;
  PolicyUpdateConfig update_;
  PolicyModel& model_;
  AdamW& opt_;
  std::unique_ptr<RolloutStore> rollouts_;  // lead only
  int start_step_ = 0;
  bool warned_all_masked_ = false;  // said once a run: a step whose every token was masked
  double applied_lr_ = 0;  // by update's optimizer step, 0 when it took none
  int saved_step_ = -1;    // the step of the last checkpoint written, and its path
  std::string saved_path_;
};

}  // namespace forge
