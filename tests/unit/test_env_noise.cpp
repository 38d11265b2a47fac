// The common step protocol: noise rates and determinism, recovery, and the
// bad-call classes (each an error observation with a negative signal, never
// an exception).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "env/calc_env.hpp"
#include "env/env_mix.hpp"
#include "env/process_signals.hpp"
#include "env/search_env.hpp"

namespace forge {
namespace {

TEST(EnvNoise, RatesMatchTheConfig) {
  EnvConfig c;
  c.tool_error_rate = 0.2;
  c.timeout_rate = 0.1;
  c.max_tool_calls = 100;
  CalcEnv env(c);
  int errors = 0, timeouts = 0, ok = 0;
  for (uint64_t seed = 0; seed < 500; ++seed) {
    env.reset(seed);
    const ToolCall call = env.solve().calls[0];
    for (int i = 0; i < 20; ++i) {
      const Observation o = env.step(call);
      errors += o.kind == ObservationKind::kToolError;
      timeouts += o.kind == ObservationKind::kTimeout;
      ok += o.kind == ObservationKind::kOk;
      if (o.kind == ObservationKind::kToolError) {
        EXPECT_TRUE(o.text.starts_with("error: "));
      }
      if (o.kind == ObservationKind::kTimeout) {
        EXPECT_EQ(o.text, "timeout");
      }
    }
  }
  const double n = 500 * 20;
  EXPECT_NEAR(errors / n, 0.2, 0.02);
  EXPECT_NEAR(timeouts / n, 0.1, 0.015);
  EXPECT_EQ(errors + timeouts + ok, n);
}

TEST(EnvNoise, ZeroRatesGiveNoNoise) {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  SearchEnv env(c);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    env.reset(seed);
    for (const ToolCall& call : env.solve().calls) EXPECT_FALSE(env.step(call).is_error());
  }
}

TEST(EnvNoise, SameSeedAndCallsGiveSameObservations) {
  EnvConfig c;
  c.tool_error_rate = 0.3;
  c.timeout_rate = 0.2;
  const EnvMix mix(c);
  // `a`: one environment per domain, reset from task to task (what an
  // environment rank does); `b`: a fresh one per task.
  std::map<std::string, std::unique_ptr<Environment>> reused;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    auto b = mix.make_for(seed);
    auto& a = reused[b->name()];
    if (!a) a = mix.make_for(seed);
    a->reset(seed);
    b->reset(seed);
    std::vector<ToolCall> calls = a->solve().calls;
    calls.push_back({"nope", "1"});
    calls.push_back(calls[0]);
    calls.push_back(calls[0]);
    for (const ToolCall& call : calls) {
      const Observation x = a->step(call), y = b->step(call);
      EXPECT_EQ(x.kind, y.kind) << "seed " << seed;
      EXPECT_EQ(x.text, y.text) << "seed " << seed;
      EXPECT_EQ(x.names_call, y.names_call);
      EXPECT_EQ(x.recovered, y.recovered);
      EXPECT_EQ(x.test_run, y.test_run);
      ASSERT_EQ(x.signals.size(), y.signals.size()) << "seed " << seed;
      for (size_t i = 0; i < x.signals.size(); ++i) {
        EXPECT_EQ(x.signals[i].kind, y.signals[i].kind);
        EXPECT_EQ(x.signals[i].value, y.signals[i].value);
      }
    }
  }
  EXPECT_GE(reused.size(), 2u);  // the mix's domains, each reset across its tasks
}

TEST(EnvNoise, IdenticalRetryAfterAnErrorIsARecovery) {
  EnvConfig c;
  c.tool_error_rate = 0.5;
  c.timeout_rate = 0;
  c.max_tool_calls = 50;
  CalcEnv env(c);
  int recoveries = 0, other_after_error = 0, paid = 0, unpaid = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    env.reset(seed);
    const auto calls = env.solve().calls;
    ToolCall prev_call = calls[0];
    Observation prev = env.step(prev_call);
    for (int i = 0; i < 6; ++i) {
      const ToolCall next = i % 3 == 2 ? ToolCall{"calc", "1+1"} : calls[0];
      const Observation o = env.step(next);
      const bool after_error = prev.kind == ObservationKind::kToolError && !o.is_error();
      const bool expect = after_error && prev_call == next;
      EXPECT_EQ(o.recovered, expect);
      bool has_signal = false, useful = false;
      for (const auto& s : o.signals) {
        has_signal |= s.kind == std::string(signal::kRecovered);
        useful |= s.kind == std::string(signal::kUsefulCall);
      }
      // The signal is paid only when the retry also advances the task.
      EXPECT_EQ(has_signal, expect && useful);
      paid += has_signal;
      unpaid += expect && !useful;
      recoveries += expect;
      other_after_error += after_error && !(prev_call == next);
      prev = o;
      prev_call = next;
    }
  }
  EXPECT_GT(recoveries, 50);
  EXPECT_GT(other_after_error, 20);  // a different call after an error is no recovery
  EXPECT_GT(paid, 20);                // the first successful retry of a solution call
  EXPECT_GT(unpaid, 20);              // repeating a call already done earns nothing
}

// The noise stream (an agent episode's id) decides which calls fail: one
// task's episodes differ, one stream repeats itself.
TEST(EnvNoise, GroupMembersDifferInWhichCallsFail) {
  EnvConfig c;
  c.tool_error_rate = 0.2;
  c.timeout_rate = 0.1;
  c.max_tool_calls = 100;
  CalcEnv env(c);
  auto pattern = [&](uint64_t seed, uint64_t noise) {
    env.reset(seed, noise);
    const ToolCall call = env.solve().calls[0];
    std::string p;
    for (int i = 0; i < 16; ++i) p += to_string(env.step(call).kind)[0];
    return p;
  };
  int differing_groups = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::set<std::string> members;
    for (uint64_t noise = 0; noise < 4; ++noise) {
      const std::string p = pattern(seed, noise);
      EXPECT_EQ(p, pattern(seed, noise)) << "seed " << seed << " noise " << noise;
      members.insert(p);
    }
    differing_groups += members.size() > 1;
  }
  EXPECT_GE(differing_groups, 48);  // (0.7^16)^3: nearly every group differs
}

TEST(EnvNoise, FailAtForcesOneFailureUntilReset) {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  SearchEnv env(c);
  for (ObservationKind kind : {ObservationKind::kToolError, ObservationKind::kTimeout}) {
    env.reset(5);
    const auto calls = env.solve().calls;
    ASSERT_FALSE(calls.empty());
    env.fail_at(0, kind);
    const Observation failed = env.step(calls[0]);
    EXPECT_EQ(failed.kind, kind);
    const Observation retry = env.step(calls[0]);
    EXPECT_EQ(retry.kind, ObservationKind::kOk);
    EXPECT_TRUE(retry.recovered);
    env.reset(5);
    EXPECT_EQ(env.step(calls[0]).kind, ObservationKind::kOk);  // reset() clears it
  }
  EXPECT_THROW(env.fail_at(0, ObservationKind::kBadCall), Error);
}

// env.error_names_call: the environment marks an injected failure of either
// kind (Observation::names_call) and keeps the bare reason as its text; the
// scaffold writes the call (AgentEpisodeTest.NamedFailuresShowTheCallAsTheAgentWroteIt).
TEST(EnvNoise, ErrorNamesCallMarksTheInjectedFailure) {
  for (bool names : {false, true}) {
    EnvConfig c;
    c.tool_error_rate = 0;
    c.timeout_rate = 0;
    c.error_names_call = names;
    SearchEnv env(c);
    for (ObservationKind kind : {ObservationKind::kToolError, ObservationKind::kTimeout}) {
      env.reset(7);
      const auto calls = env.solve().calls;
      ASSERT_FALSE(calls.empty());
      env.fail_at(0, kind);
      const Observation failed = env.step(calls[0]);
      ASSERT_EQ(failed.kind, kind);
      EXPECT_EQ(failed.names_call, names);
      std::set<std::string> expected;
      if (kind == ObservationKind::kTimeout) expected.insert("timeout");
      else
        for (const char* reason : {"service unavailable", "rate limited", "internal error"})
          expected.insert(std::string("error: ") + reason);
      EXPECT_TRUE(expected.count(failed.text)) << failed.text;
      const Observation retry = env.step(calls[0]);
      EXPECT_TRUE(retry.recovered);  // naming changes only the rendering: a retry still recovers
      EXPECT_FALSE(retry.names_call);
    }
  }
}

TEST(EnvBadCalls, EachClassIsAnErrorObservationWithANegativeSignal) {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  c.max_tool_calls = 3;
  struct Case {
    const char* domain;
    ToolCall call;
    const char* kind;
  };
  const std::vector<Case> cases = {
      {"calc", {"lookup", "a,b"}, signal::kUnknownTool},
      {"calc", {"", ""}, signal::kUnknownTool},
      {"calc", {"calc", "3 plus 4"}, signal::kBadArgs},
      {"search", {"calc", "3+4"}, signal::kUnknownTool},
      {"search", {"lookup", "nobody,friend"}, signal::kBadArgs},
      {"search", {"lookup", ""}, signal::kBadArgs},
  };
  const EnvMix mix(c);
  for (const Case& k : cases) {
    auto env = mix.make(k.domain);
    env->reset(11);
    Observation o;
    ASSERT_NO_THROW(o = env->step(k.call));
    EXPECT_EQ(o.kind, ObservationKind::kBadCall) << k.domain << " " << k.call.tool;
    EXPECT_TRUE(o.text.starts_with("error: ")) << o.text;
    ASSERT_EQ(o.signals.size(), 1u);
    EXPECT_EQ(o.signals[0].kind, k.kind);
    EXPECT_LT(o.signals[0].value, 0);
  }
  // Over budget: the fourth call of a 3-call budget, even a valid one.
  auto env = mix.make("calc");
  env->reset(2);
  const ToolCall good = env->solve().calls[0];
  for (int i = 0; i < 3; ++i) EXPECT_EQ(env->step(good).kind, ObservationKind::kOk);
  const Observation over = env->step(good);
  EXPECT_EQ(over.kind, ObservationKind::kBadCall);
  EXPECT_EQ(over.signals[0].kind, signal::kOverBudget);
  EXPECT_LT(over.signals[0].value, 0);
}

TEST(EnvBadCalls, RandomArgumentsNeverThrow) {
  EnvConfig c;
  c.max_tool_calls = 100000;
  const EnvMix mix(c);
  Rng rng(9);
  for (const char* domain : {"calc", "search"}) {
    auto env = mix.make(domain);
    env->reset(3);
    for (int i = 0; i < 3000; ++i) {
      std::string args;
      const int n = static_cast<int>(rng.below(12));
      for (int j = 0; j < n; ++j) args += static_cast<char>(rng.below(256));
      const std::vector<std::string> tools = {"calc", "find", "lookup", "x"};
      ASSERT_NO_THROW(env->step({tools[rng.below(4)], args}));
    }
  }
}

}  // namespace
}  // namespace forge
