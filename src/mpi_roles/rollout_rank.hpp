// A rollout rank: the LLM engine as a server. One loop, until the learner's
// stop word:
//   1. receive every generation request that arrived (any environment rank)
//      and submit it to the engine under an engine-local id; a request the
//      engine refuses gets an error result at once, and one that needs newer
//      weights than the engine's (min_version) is held until they are loaded
//      (held_requests.hpp);
//   2. between decode steps, pull the newest published weights
//      (weight_channel.hpp): the engine's policy version becomes the
//      learner's version, and cached session prefixes (k/v of the old
//      weights) are dropped; running sequences continue with the new
//      weights, each token stamped with the oldest version it depends on;
//   3. one engine step (continuous batching over all clients); every
//      finished result goes back to its environment rank. A cancel (an
//      episode abandoned at its deadline) ends its request at once, freeing
//      its batch place and KV blocks.
// The rank serves nothing before the learner's first publication (version 0),
// and waits for it at most startup_s (mpi.startup_s: learner 0 loads the
// model first).
#pragma once
#include <mpi.h>

#include <cstdint>

#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/weight_channel.hpp"

namespace forge {

struct RolloutRankStats {
  int64_t requests = 0, weight_pulls = 0, engine_steps = 0, generated = 0;
  double pull_seconds = 0;  // reading new versions and loading them into the model
  int64_t held = 0;          // requests that waited for their slot's weights (held_requests.hpp)
  double longest_hold_s = 0;
};

RolloutRankStats run_rollout_rank(MPI_Comm world, const RoleLayout& layout, PolicyModel& model,
                                  RolloutEngine& engine, WeightChannel& weights, SendQueue& sends,
                                  double startup_s);

}  // namespace forge
