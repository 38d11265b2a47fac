// One table of a Trajectory's fields: every field by name, in the order the
// trajectory codec encodes them. The codec (trajectory_codec.cpp), the
// rollout store and its reader (io_hdf5: episodes/<name> columns, where the
// schema has one) go through it, so that a new field is one line here plus
// its column.
//
//   for_each_field(t, [](const char* name, auto& value) { ... });
//
// value is a field of t: an integer, float, bool or string, or one of the two
// lists (calls: std::vector<LlmCall>, signals: std::vector<ProcessSignal>).
// The reward components appear as outcome, process, efficiency and safety.
#pragma once
#include "episode/trajectory.hpp"

namespace forge {

template <class Episode, class Visitor>  // Episode: Trajectory or const Trajectory
void for_each_field(Episode& t, Visitor&& v) {
  v("episode_id", t.episode_id);
  v("env", t.env);
  v("task_id", t.task_id);
  v("group", t.group);
  v("template_family", t.template_family);
  v("calls", t.calls);
  v("signals", t.signals);
  v("outcome", t.reward.outcome);
  v("process", t.reward.process);
  v("efficiency", t.reward.efficiency);
  v("safety", t.reward.safety);
  v("success", t.success);
  v("abandoned", t.abandoned);
  v("turns", t.turns);
  v("tool_errors", t.tool_errors);
  v("recoveries", t.recoveries);
  v("final_answer", t.final_answer);
  v("end_reason", t.end_reason);
  v("needed_turns", t.needed_turns);
  v("needed_tokens", t.needed_tokens);
  v("context_compactions", t.context_compactions);
  v("safety_events", t.safety_events);
  v("test_runs", t.test_runs);
}

}  // namespace forge
