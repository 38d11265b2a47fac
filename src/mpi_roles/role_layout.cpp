#include "mpi_roles/role_layout.hpp"

#include "core/error.hpp"

namespace forge {

const char* to_string(Role role) {
  switch (role) {
    case Role::kLearner: return "learner";
    case Role::kRollout: return "rollout";
    case Role::kEnvironment: return "environment";
  }
  return "?";
}

RoleLayout::RoleLayout(int world_size, const RoleCounts& c)
    : world_(world_size), learners_(c.learners), rollouts_(c.rollouts), gateway_(c.gateway) {
  if (c.learners < 1) throw InputError("mpi.learners = " + std::to_string(c.learners) + ": at least 1");
  if (c.rollouts < 1) throw InputError("mpi.rollouts = " + std::to_string(c.rollouts) + ": at least 1");
  if (world_size < c.learners + c.rollouts + 1)
    throw InputError("a world of " + std::to_string(world_size) + " ranks cannot hold mpi.learners = " +
                     std::to_string(c.learners) + " + mpi.rollouts = " + std::to_string(c.rollouts) +
                     " + at least 1 environment rank; launch with -np " +
                     std::to_string(c.learners + c.rollouts + 1) + " or more, or lower the counts");
}

Role RoleLayout::role_of(int rank) const {
  FORGE_CHECK(rank >= 0 && rank < world_, "rank out of range");
  if (rank < learners_) return Role::kLearner;
  if (rank < learners_ + rollouts_) return Role::kRollout;
  return Role::kEnvironment;
}

int RoleLayout::first(Role role) const {
  switch (role) {
    case Role::kLearner: return 0;
    case Role::kRollout: return learners_;
    case Role::kEnvironment: return learners_ + rollouts_;
  }
  return 0;
}

int RoleLayout::count(Role role) const {
  switch (role) {
    case Role::kLearner: return learners_;
    case Role::kRollout: return rollouts_;
    case Role::kEnvironment: return world_ - learners_ - rollouts_;
  }
  return 0;
}

std::string RoleLayout::name(int rank) const {
  const Role role = role_of(rank);
  return std::string(role == Role::kEnvironment && gateway_ ? "gateway" : to_string(role)) + " rank " +
         std::to_string(rank);
}

}  // namespace forge
