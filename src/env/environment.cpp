#include "env/environment.hpp"

#include <algorithm>
#include <cmath>
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

Task Environment::reset(uint64_t seed, uint64_t noise) {
  step_ = 0;
  forced_ = {};
  last_failed_.reset();
  uint64_t x = (seed ^ 0x0150C0FFEEull) + noise * 0x9E3779B97F4A7C15ull;
  noise_seed_ = splitmix64(x);
  task_ = generate(seed);
  task_.seed = seed;
  task_.domain = name();
  ready_ = true;
  return task_;
}

void Environment::fail_at(int index, ObservationKind kind) {
  FORGE_CHECK(kind == ObservationKind::kToolError || kind == ObservationKind::kTimeout,
              "Environment::fail_at: a failure is a tool error or a timeout");
  forced_ = {index, kind};
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

  const double u = counter_uniform(noise_seed_, static_cast<uint64_t>(index));
  const bool forced = index == forced_.index;
  if (u < config_.tool_error_rate + config_.timeout_rate || forced) {
    const bool error = forced ? forced_.kind == ObservationKind::kToolError : u < config_.tool_error_rate;
    static const char* kReasons[] = {"service unavailable", "rate limited", "internal error"};
    Observation o;
    o.kind = error ? ObservationKind::kToolError : ObservationKind::kTimeout;
    o.text = error ? std::string("error: ") + kReasons[(noise_seed_ + static_cast<uint64_t>(index)) % 3] : "timeout";
    o.names_call = config_.error_names_call;
    o.signals.push_back({0, signal::kToolError, 0.0f});
    last_failed_ = call;
    return o;
  }

  const ToolResult r = call_tool(call);
  if (!r.ok) return bad_call_observation(signal::kBadArgs, r.text);
  Observation o;
  o.text = r.text;
  o.test_run = r.test_run;
  o.signals.push_back({0, r.useful ? signal::kUsefulCall : signal::kValidCall,
                       r.useful ? signal::kUsefulValue : 0.0f});
  if (!r.unsafe.empty()) o.signals.push_back({0, signal::kUnsafe, signal::kUnsafeValue});
  if (failed && *failed == call) {
    o.recovered = true;
    if (r.useful) o.signals.push_back({0, signal::kRecovered, signal::kRecoveredValue});
  }
  return o;
}

float Environment::verify(std::string_view answer) const {
  if (!ready_) return 0;
  // NaN passes std::clamp: a domain whose score is not a number has a bug.
  const float s = score(trim(answer));
  if (!std::isfinite(s)) throw Error("environment '" + name() + "': score() returned " + std::to_string(s));
  return std::clamp(s, 0.0f, 1.0f);
}

}  // namespace forge
