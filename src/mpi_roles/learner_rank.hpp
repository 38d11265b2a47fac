// A learner rank: the consumer of the data pool and the trainer. Learner 0
// (the lead) takes the batch, every learner trains its shard of it:
//
//   1. take      the lead takes train.tasks groups (one group per slot):
//                groups it holds first (restored from a checkpoint, or
//                taken by a batch SIGTERM interrupted), then the pool's
//                Windowed FIFO; groups over the staleness cap are dropped
//                or masked (counted, not trained). Each payload is decoded
//                once, naming its slot and producer in errors; the group id
//                is the one its producer set (the slot).
//   2. share     the lead encodes the batch with the trajectory codec and
//                broadcasts it over the learners' communicator; an empty
//                batch (SIGTERM on the lead) stops every learner.
//   3. train     Learner::update on each learner's shard (whole-batch
//                denominators, gradients summed over learners, AdamW).
//   4. publish   the lead publishes version step + 1 to the rollout ranks
//                (weight channel) and to the pool (staleness), then
//                Learner::record: rollouts.h5, progress line with the pool's
//                view (staleness, wait, dropped, masked, abandoned),
//                checkpoints holding the pool state, evaluations.
// After the last step (or SIGTERM: a checkpoint at the step boundary, exit
// 143) the lead sets the stop word; every rank drains and meets at quiesce;
// then the lead evaluates the final policy.
#pragma once
#include <mpi.h>

#include <csignal>
#include <optional>
#include <string>

#include "learner/learner.hpp"
#include "mpi_roles/data_pool.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/weight_channel.hpp"

namespace forge {

struct LearnerRankConfig {
  LearnerSetup setup;           // lead, shards and sums are set by run_learner_rank
  double deadline_s = 120;      // mpi.deadline_s: every other wait
  double shutdown_s = 120;      // the final barrier's (async_train.cpp: shutdown_deadline)
  double startup_s = 1800;      // mpi.startup_s: the learners' first meeting, after each loaded the model
  double group_wait_s = 120;    // how long the lead waits for the next group
  std::string group_wait_key;   // the key that sets it, for the error message
  const volatile std::sig_atomic_t* terminate = nullptr;  // set by SIGTERM
  Watchdog* watchdog = nullptr;  // the job's: quiesce names the ranks it waits for
};

// Runs the role until the last step or SIGTERM; returns the exit code (0, or
// 143 after SIGTERM). `resumed_pool` is the lead's restored pool state.
int run_learner_rank(MPI_Comm learners, const RoleLayout& layout, DataPool& pool, WeightChannel& weights,
                     SendQueue& sends, PolicyModel& model, AdamW& opt, LearnerRankConfig config,
                     const LearnerStart& start, const DataPoolState* resumed_pool);

}  // namespace forge
