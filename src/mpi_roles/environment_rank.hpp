// An environment rank: runs many agent episodes at once, asks rollout ranks
// for their generations (generation_rpc.hpp) and delivers finished groups to
// the data pool (data_pool.hpp), until the learner's stop word.
//
// Per data-pool slot s (numbered in the order the pool started them):
//   task seed  = hash(run.seed, s): slot numbers name tasks, so a resumed run
//                regenerates exactly the tasks that were in flight
//   episodes   s * G + g for g < G (train.group), one advantage group,
//              perturbed scaffold styles as in the synchronous loop
//   rollout    episode e talks to rollout rank (e mod R): its cached prefix
//              stays on one engine
// A rank plays at most mpi.env_groups slots at once, each started when the
// pool admits it (data_pool.hpp); a slot that a resumed pool already holds
// (trained, or finished and kept in the checkpoint) is never handed out. An
// episode still running pool.episode_deadline_s after its group started is
// abandoned (a straggler must not hold the pool's head for ever): recorded,
// counted, never trained on; a generation still in flight for it is
// discarded when it arrives. When every episode of the group is done, the
// group is encoded (trajectory_codec.hpp) and completes slot s with the
// oldest policy version among its tokens. A tool call that runs programs
// (the code domain's, in the sandbox) runs on a thread of its own
// (agent/episode_actions.hpp): the rank's other episodes keep generating
// while it runs, and the episode is abandoned at the deadline only once its
// call has returned (the sandbox's wall deadline bounds it).
#pragma once
#include <cstdint>

#include "agent/agent_config.hpp"
#include "env/env_config.hpp"
#include "mpi_roles/data_pool.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/weight_channel.hpp"

namespace forge {

struct EnvironmentRankConfig {
  EnvConfig env;
  AgentConfig agent;  // sampling included
  uint64_t run_seed = 0;
  int group = 4;          // episodes per slot (the advantage group)
  int groups_in_flight = 2;  // slots played at once
  double episode_deadline_s = 300;  // then a running episode is abandoned
  double startup_s = 1800;          // the wait for learner 0's first weights
};

struct EnvironmentRankStats {
  int64_t groups = 0, episodes = 0, requests = 0;
  int64_t abandoned = 0;  // episodes ended by the deadline, or recorded without calls (a group past its slot)
};

// The task seed of slot s.
uint64_t slot_task_seed(uint64_t run_seed, uint64_t slot);
// The id of episode g of slot s's group of G: s * G + g.
inline uint64_t slot_episode_id(uint64_t slot, int group, int g) {
  return slot * static_cast<uint64_t>(group) + static_cast<uint64_t>(g);
}

EnvironmentRankStats run_environment_rank(const RoleLayout& layout, DataPool& pool,
                                          WeightChannel& control, GenerationClient& client,
                                          const EnvironmentRankConfig& config);

}  // namespace forge
