// The lead learner's wait for the next group outlasts every way a healthy
// group may still be running (src/mpi_roles/group_wait.hpp).
#include <gtest/gtest.h>

#include "mpi_roles/group_wait.hpp"

namespace forge {
namespace {

TEST(GroupWait, TwiceTheDeadlineWhenEpisodesAreShort) {
  const GroupWait w = group_wait({.deadline_s = 120, .episode_deadline_s = 60});
  EXPECT_DOUBLE_EQ(w.seconds, 240);
  EXPECT_EQ(w.keys, "2 x mpi.deadline_s");
}

TEST(GroupWait, ALongEpisodeIsAbandonedFirst) {
  const GroupWait w = group_wait({.deadline_s = 120, .episode_deadline_s = 300});
  EXPECT_DOUBLE_EQ(w.seconds, 420);
  EXPECT_EQ(w.keys, "pool.episode_deadline_s + mpi.deadline_s");
}

// An episode past its deadline in the middle of a tool call is abandoned when
// the call ends: up to two sandbox runs (run_tests runs the tests, then the
// module's cases), 2 x sandbox.wall_s later.
TEST(GroupWait, TheToolRunUnderWayIsWaitedFor) {
  GroupWait w = group_wait({.deadline_s = 120, .episode_deadline_s = 300, .tool_s = 600});
  EXPECT_DOUBLE_EQ(w.seconds, 1620);
  EXPECT_EQ(w.keys, "pool.episode_deadline_s + 2 x sandbox.wall_s + mpi.deadline_s");
  // ... each run after the runs queued before it in the rank's sandbox pool.
  w = group_wait({.deadline_s = 120, .episode_deadline_s = 300, .tool_s = 300, .tool_rounds = 8});
  EXPECT_DOUBLE_EQ(w.seconds, 5220);
  EXPECT_EQ(w.keys, "pool.episode_deadline_s + 2 x sandbox.wall_s x 8 + mpi.deadline_s");
}

// Under the gateway an agent's generation is not cancelled at the deadline:
// it runs up to gateway.request_deadline_s, longer than the tool run here.
TEST(GroupWait, AnAgentsGenerationUnderWayIsWaitedFor) {
  GroupWaitKeys k{.deadline_s = 120, .episode_deadline_s = 300, .tool_s = 10, .gateway = true,
                  .request_deadline_s = 900, .agent_wait_s = 600};
  GroupWait w = group_wait(k);
  EXPECT_DOUBLE_EQ(w.seconds, 1320);
  EXPECT_EQ(w.keys, "pool.episode_deadline_s + gateway.request_deadline_s + mpi.deadline_s");
  k.agent_wait_s = 2000;  // agents' own pace, longer still
  w = group_wait(k);
  EXPECT_DOUBLE_EQ(w.seconds, 2000);
  EXPECT_EQ(w.keys, "gateway.agent_wait_s");
  k.gateway = false;  // without the gateway neither gateway key counts
  w = group_wait(k);
  EXPECT_DOUBLE_EQ(w.seconds, 440);
  EXPECT_EQ(w.keys, "pool.episode_deadline_s + 2 x sandbox.wall_s + mpi.deadline_s");
}

}  // namespace
}  // namespace forge
