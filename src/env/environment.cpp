#include "env/environment.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "env/process_signals.hpp"

namespace forge {

const char* to_string(ObservationKind k) {
  switch (k) {
    case ObservationKind::kOk: return "ok";
    case ObservationKind::kToolError: return "tool_error";
    case ObservationKind::kTimeout: return "timeout";
    case ObservationKind::kBadCall: return "bad_call";
  }
  return "?";
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

Observation bad_call_observation(const char* kind, const std::string& message) {
  Observation o;
  o.kind = ObservationKind::kBadCall;
  o.text = "error: " + message;
  o.signals.push_back({0, kind, signal::kBadCallValue});
  return o;
}

Task Environment::reset(uint64_t seed) {
  step_ = 0;
  last_failed_.reset();
  task_ = generate(seed);
  task_.seed = seed;
  task_.domain = name();
  ready_ = true;
  return task_;
}

Observation Environment::step(const ToolCall& call) {
  FORGE_CHECK(ready_, "Environment::step before reset()");
  const int index = step_++;
  const std::optional<ToolCall> failed = std::exchange(last_failed_, std::nullopt);
  if (index >= config_.max_tool_calls)
    return bad_call_observation(signal::kOverBudget,
                                "over budget: at most " + std::to_string(config_.max_tool_calls) +
                                    " tool calls");
  const bool known = std::any_of(task_.tools.begin(), task_.tools.end(),
                                 [&](const ToolSpec& t) { return t.name == call.tool; });
  if (!known) return bad_call_observation(signal::kUnknownTool, "unknown tool '" + call.tool + "'");

  const double u = counter_uniform(task_.seed ^ 0x0150C0FFEEull, static_cast<uint64_t>(index));
  if (u < config_.tool_error_rate + config_.timeout_rate) {
    static const char* kReasons[] = {"service unavailable", "rate limited", "internal error"};
    Observation o;
    if (u < config_.tool_error_rate) {
      o.kind = ObservationKind::kToolError;
      o.text = std::string("error: ") + kReasons[static_cast<size_t>(u / config_.tool_error_rate * 3) % 3];
    } else {
      o.kind = ObservationKind::kTimeout;
      o.text = "timeout";
    }
    o.signals.push_back({0, signal::kToolError, 0.0f});
    last_failed_ = call;
    return o;
  }

  const ToolResult r = call_tool(call);
  if (!r.ok) return bad_call_observation(signal::kBadArgs, r.text);
  Observation o;
  o.text = r.text;
  o.signals.push_back({0, r.useful ? signal::kUsefulCall : signal::kValidCall,
                       r.useful ? signal::kUsefulValue : 0.0f});
  if (failed && *failed == call) {
    o.recovered = true;
    o.signals.push_back({0, signal::kRecovered, signal::kRecoveredValue});
  }
  return o;
}

float Environment::verify(std::string_view answer) const {
  if (!ready_) return 0;
  return std::clamp(score(trim(answer)), 0.0f, 1.0f);
}

}  // namespace forge
