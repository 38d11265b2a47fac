// How long the lead learner waits for the next finished group before it ends
// the job, and which keys set that time (named in the error).
//
// The wait spans an environment rank's wait for generation (and the
// watchdog's), so it lasts at least 2 x mpi.deadline_s: a stalled rollout
// rank is named by those inner deadlines, not blamed on the environment rank
// that waits for it. A healthy but long episode is abandoned by its rank
// after pool.episode_deadline_s, once the work it has under way ends: a tool
// run, with code tasks in the mix, or, under the gateway, a generation an
// agent asked for (at most gateway.request_deadline_s; an environment rank
// cancels its own). A tool run waits its turn in the rank's sandbox pool:
// each of the rank's mpi.env_groups x train.group episodes may have one
// queued, sandbox.concurrency run at once, each for at most sandbox.wall_s,
// so the last ends within wall_s x rounds, rounds = ceil(episodes /
// concurrency). One tool call may queue two runs, one after the other
// (run_tests: the unittest run, then the module's cases; a verdict: a run
// that did not start, then once more), so the work under way ends within
// 2 x wall_s x rounds. The wait outlasts that by mpi.deadline_s:
//
//   wait = max(2 x deadline, episode_deadline + busy + deadline, agent_wait)
//   busy = max(2 x wall_s x rounds (code tasks), request_deadline (gateway))
//
// where agent_wait (gateway.agent_wait_s) applies only with the gateway:
// black-box agents close groups at their own pace.
#pragma once
#include <string>

namespace forge {

struct GroupWaitKeys {
  double deadline_s = 120;          // mpi.deadline_s
  double episode_deadline_s = 300;  // pool.episode_deadline_s
  double tool_s = 0;                // sandbox.wall_s with code tasks in the mix, else 0
  int tool_rounds = 1;              // ceil(mpi.env_groups x train.group / sandbox.concurrency)
  bool gateway = false;             // gateway.enabled
  double request_deadline_s = 120;  // gateway.request_deadline_s (with the gateway)
  double agent_wait_s = 600;        // gateway.agent_wait_s (with the gateway)
};

struct GroupWait {
  double seconds = 0;
  std::string keys;  // e.g. "pool.episode_deadline_s + 2 x sandbox.wall_s x 4 + mpi.deadline_s"
};

GroupWait group_wait(const GroupWaitKeys& k);

}  // namespace forge
