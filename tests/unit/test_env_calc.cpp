// calc: determinism, the reference solver, the verifier, usefulness signals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "core/error.hpp"
#include "env/calc_env.hpp"
#include "env/process_signals.hpp"

namespace forge {
namespace {

EnvConfig quiet() {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  return c;
}

// A used environment gives a seed's task as a fresh one does (no state
// from earlier tasks leaks into the next).
TEST(EnvCalc, SameSeedSameTaskAndSolution) {
  CalcEnv a(quiet());
  std::set<std::string> requests;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    CalcEnv b(quiet());
    const Task ta = a.reset(seed), tb = b.reset(seed);
    EXPECT_EQ(ta.request, tb.request);
    EXPECT_EQ(a.solve().calls, b.solve().calls);
    EXPECT_EQ(a.solve().answer, b.solve().answer);
    requests.insert(ta.request);
  }
  EXPECT_GT(requests.size(), 45u) << "different seeds should give different tasks";
}

TEST(EnvCalc, SolverSolvesEveryTaskWithUsefulCalls) {
  EnvConfig c = quiet();
  CalcEnv env(c);
  for (uint64_t seed = 0; seed < 500; ++seed) {
    const Task t = env.reset(seed);
    const Solution s = env.solve();
    ASSERT_GE(t.steps_needed, c.calc_min_ops);
    ASSERT_LE(t.steps_needed, c.calc_max_ops);
    ASSERT_EQ(static_cast<int>(s.calls.size()), t.steps_needed);
    EXPECT_LE(t.request.size(), 60u) << t.request;  // short in tokens (bytes)
    for (const ToolCall& call : s.calls) {
      const Observation o = env.step(call);
      ASSERT_EQ(o.kind, ObservationKind::kOk) << t.request << " " << call.args << ": " << o.text;
      ASSERT_EQ(o.signals.size(), 1u);
      EXPECT_EQ(o.signals[0].kind, signal::kUsefulCall) << t.request << " " << call.args;
      EXPECT_GT(o.signals[0].value, 0);
    }
    EXPECT_EQ(env.verify(s.answer), 1.0f) << t.request << " = " << s.answer;
  }
}

TEST(EnvCalc, ToolComputesAndRepeatsAreNotUseful) {
  CalcEnv env(quiet());
  env.reset(7);
  const ToolCall first = env.solve().calls[0];
  const Observation o1 = env.step(first);
  CalcEnv::Op op;
  ASSERT_TRUE(CalcEnv::parse_op(first.args, op));
  EXPECT_EQ(o1.text, std::to_string(op.result()));
  const Observation o2 = env.step(first);
  EXPECT_EQ(o2.kind, ObservationKind::kOk);
  EXPECT_EQ(o2.signals[0].kind, signal::kValidCall);
  EXPECT_EQ(env.step({"calc", "2 * 3"}).text, "6");
  EXPECT_EQ(env.step({"calc", "-4-5"}).text, "-9");
  EXPECT_EQ(env.step({"calc", "999999999999*9"}).text, "8999999999991");
}

TEST(EnvCalc, VerifierRejectsWrongAnswers) {
  CalcEnv env(quiet());
  for (uint64_t seed = 0; seed < 100; ++seed) {
    env.reset(seed);
    const std::string a = env.solve().answer;
    EXPECT_EQ(env.verify(" " + a + " "), 1.0f);
    EXPECT_EQ(env.verify(std::to_string(std::stoll(a) + 1)), 0.0f);
    EXPECT_EQ(env.verify(a + "1"), 0.0f);
    EXPECT_EQ(env.verify(""), 0.0f);
    EXPECT_EQ(env.verify("the answer is " + a), 0.0f);
    EXPECT_EQ(env.verify(a + "+0"), 0.0f);
    // The integer written as another number (a JSON number 31.0, "+31",
    // "3.1e1") is right; a near miss, a fraction or a non-decimal is not.
    const int64_t v = std::stoll(a);
    EXPECT_EQ(env.verify(a + ".0"), 1.0f) << a;
    EXPECT_EQ(env.verify(a + "."), 1.0f) << a;
    EXPECT_EQ(env.verify(a + "e0"), 1.0f) << a;
    EXPECT_EQ(env.verify(a + "0e-1"), 1.0f) << a;
    if (v >= 0) EXPECT_EQ(env.verify("+" + a), 1.0f) << a;
    EXPECT_EQ(env.verify(a + ".5"), 0.0f) << a;
    EXPECT_EQ(env.verify(a + ".0000001"), 0.0f) << a;
    // Read exactly: a decimal a double would round onto the answer is not it.
    if (v > 0) EXPECT_EQ(env.verify(std::to_string(v - 1) + ".99999999999999999999"), 0.0f) << a;
    EXPECT_EQ(env.verify(std::to_string(v + 1) + ".0"), 0.0f) << a;
    EXPECT_EQ(env.verify(a + "e1"), v == 0 ? 1.0f : 0.0f) << a;
    EXPECT_EQ(env.verify("0x" + a), 0.0f) << a;
    EXPECT_EQ(env.verify(a + ".0 apples"), 0.0f) << a;
  }
  EXPECT_EQ(env.verify("inf"), 0.0f);
  EXPECT_EQ(env.verify("nan"), 0.0f);
  EXPECT_EQ(env.verify("1e999"), 0.0f);
  EXPECT_EQ(env.verify("1e99999999999999999999"), 0.0f);
  EXPECT_EQ(env.verify("."), 0.0f);
  EXPECT_EQ(env.verify("+"), 0.0f);
}

TEST(EnvCalc, BadArgumentsAreErrorObservations) {
  CalcEnv env(quiet());
  // 999999999999*999999999999 leaves int64 (it once came back as 2003762205206896641).
  for (const char* args : {"", "3+", "3+4+5", "abc", "3/4", "1234567890123*2", "(3+4)", "999999999999*999999999999",
                           "-999999999999*999999999999"}) {
    env.reset(1);  // each call within the episode's tool budget
    Observation o;
    ASSERT_NO_THROW(o = env.step({"calc", args})) << args;
    EXPECT_EQ(o.kind, ObservationKind::kBadCall) << args;
    EXPECT_TRUE(o.text.starts_with("error: ")) << o.text;
    ASSERT_EQ(o.signals.size(), 1u);
    EXPECT_EQ(o.signals[0].kind, signal::kBadArgs);
    EXPECT_LT(o.signals[0].value, 0);
    EXPECT_EQ(o.text.find("beyond 64-bit integers") != std::string::npos,
              std::string(args).find("999999999999*") != std::string::npos)
        << o.text;
  }
}

// verify() keeps a domain's score in [0, 1], and a score that is not a
// number is a domain's bug it names (found by review: NaN passed
// std::clamp as the episode's outcome).
class ScoreAs : public Environment {
 public:
  explicit ScoreAs(float score) : Environment(quiet()), score_(score) {}
  std::string name() const override { return "score_as"; }
  Solution solve() const override { return {{}, "x"}; }

 protected:
  Task generate(uint64_t seed) override { return {seed, "score_as", "answer x", {}, 1}; }
  ToolResult call_tool(const ToolCall&) override { return {}; }
  float score(std::string_view) const override { return score_; }

 private:
  float score_;
};

TEST(Environment, VerifyClampsTheScoreAndRefusesANonNumber) {
  const auto verified = [](float score) {
    ScoreAs env(score);
    EXPECT_EQ(env.verify("x"), 0.0f) << "before reset()";
    env.reset(1);
    return env.verify("x");
  };
  EXPECT_EQ(verified(0.25f), 0.25f);
  EXPECT_EQ(verified(7.0f), 1.0f);
  EXPECT_EQ(verified(-3.0f), 0.0f);
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    try {
      verified(bad);
      FAIL() << "verify() passed a score of " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("environment 'score_as': score() returned"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace forge
