// Which rank does what. The world is cut in contiguous blocks:
//
//   ranks [0, L)          learners (rank 0 hosts the data pool and the
//                         published weights, and consumes the pool)
//   ranks [L, L + R)      rollout ranks (the LLM engine)
//   ranks [L + R, world)  environment ranks (scaffolds, tools, rewards)
//
// L = mpi.learners, R = mpi.rollouts, and at least one environment rank, so a
// job needs world >= L + R + 1. Learners come first so that a heterogeneous
// Slurm job whose first component is the learner nodes lines up with it.
#pragma once
#include <string>

namespace forge {

enum class Role { kLearner, kRollout, kEnvironment };
const char* to_string(Role role);  // "learner" | "rollout" | "environment"

struct RoleCounts {
  int learners = 1;
  int rollouts = 1;
  bool gateway = false;  // gateway.enabled: the environment ranks are gateway ranks (in names)
};

class RoleLayout {
 public:
  // InputError naming mpi.learners / mpi.rollouts when the world is too small.
  RoleLayout(int world_size, const RoleCounts& counts);

  int world() const { return world_; }
  Role role_of(int rank) const;
  int first(Role role) const;
  int count(Role role) const;
  int index_in_role(int rank) const { return rank - first(role_of(rank)); }
  // "rollout rank 2", "gateway rank 3": what messages call a peer.
  std::string name(int rank) const;

 private:
  int world_, learners_, rollouts_;
  bool gateway_;
};

}  // namespace forge
