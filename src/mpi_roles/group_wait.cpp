// The lead learner's wait for the next group (group_wait.hpp has the rule).
#include "mpi_roles/group_wait.hpp"

#include <algorithm>

namespace forge {

GroupWait group_wait(const GroupWaitKeys& k) {
  // The longest work an episode past its deadline may still have under way.
  const int rounds = std::max(1, k.tool_rounds);
  // Two runs a tool call, each behind the rounds queued before it.
  double busy_s = 2 * k.tool_s * rounds;
  std::string busy_key = k.tool_s <= 0 ? "" : rounds == 1 ? " + 2 x sandbox.wall_s"
                                                          : " + 2 x sandbox.wall_s x " + std::to_string(rounds);
  if (k.gateway && k.request_deadline_s > busy_s) {
    busy_s = k.request_deadline_s;
    busy_key = " + gateway.request_deadline_s";
  }
  GroupWait w{2 * k.deadline_s, "2 x mpi.deadline_s"};
  const double episode_s = k.episode_deadline_s + busy_s + k.deadline_s;
  if (episode_s > w.seconds) w = {episode_s, "pool.episode_deadline_s" + busy_key + " + mpi.deadline_s"};
  if (k.gateway && k.agent_wait_s > w.seconds) w = {k.agent_wait_s, "gateway.agent_wait_s"};
  return w;
}

}  // namespace forge
