// Failure causes of agent episodes (agent/failure_mode.hpp): episodes driven
// by scripted fake policies land in the cause their mistake names, the
// precedence between causes holds on hand-built records, and `forge eval`'s
// shares of the causes sum to the failure rate (its success by the number of
// calls a task needs, to the success rate).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>

#include "agent/agent_eval.hpp"
#include "agent/failure_mode.hpp"
#include "agent/scripted_policy.hpp"
#include "env/process_signals.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

void PrintTo(FailureMode m, std::ostream* os) { *os << to_string(m); }  // gtest messages

namespace {

using Policy = std::function<Tokens(const AgentEpisode&, int turn)>;

Tokens text(const std::string& s) {
  Tokens t = ByteTokenizer().encode_ordinary(s);
  t.push_back(kEndOfTurn);
  return t;
}

// Plays one episode of `domain` (default scaffold style) with `policy` and
// returns its record.
Trajectory play(const EnvConfig& env, const Policy& policy, int max_turns = 4,
                const std::string& domain = "calc") {
  const EnvMix mix(env);
  uint64_t seed = 0;
  while (mix.pick(seed) != domain) ++seed;
  AgentConfig a;
  a.max_turns = max_turns;
  a.max_context_tokens = 4096;
  a.max_episode_tokens = 4096;
  AgentEpisode ep(mix.make_for(seed), seed, ScaffoldStyle{}, a, 1);
  int turn = 0;
  while (!ep.done()) {
    const auto req = ep.next_request();
    if (!req) break;
    GenerationResult r;
    r.id = req->id;
    r.tokens = policy(ep, turn++);
    r.logprobs.assign(r.tokens.size(), -0.5f);
    r.versions.assign(r.tokens.size(), 0);
    ep.on_generation(r);
  }
  return ep.take_trajectory();
}

EnvConfig quiet() {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  return c;
}

// The solver's actions, with its answer replaced by `answer` when not empty.
Policy solver(std::string answer = "") {
  auto p = std::make_shared<std::unique_ptr<ScriptedPolicy>>();
  return [p, answer](const AgentEpisode& ep, int) {
    if (!*p) *p = std::make_unique<ScriptedPolicy>(ep);
    Tokens t = (*p)->next(ep);
    if (!answer.empty() && ByteTokenizer().decode(t).rfind("answer(", 0) == 0) return text(answer);
    return t;
  };
}

Policy constant(const std::string& s) {
  return [s](const AgentEpisode&, int) { return text(s); };
}

FailureMode cause(const Trajectory& t) {
  const std::optional<FailureMode> m = classify_failure(t);
  EXPECT_TRUE(m.has_value()) << "a failed episode has a cause";
  return m.value_or(FailureMode::kWrongAnswer);
}

TEST(FailureModeTest, EpisodesLandInTheCauseTheirMistakeNames) {
  EXPECT_EQ(classify_failure(play(quiet(), solver())), std::nullopt);  // solved
  EXPECT_EQ(cause(play(quiet(), constant("hello"))), FailureMode::kMalformed);
  EXPECT_EQ(cause(play(quiet(), constant("nope(1)"))), FailureMode::kMalformed);  // unknown tool
  EXPECT_EQ(cause(play(quiet(), constant("calc(three)"))), FailureMode::kBadArgs);
  // 1+1 is a valid operation but never one of a task's (two-digit operands):
  // the miscopied operand the main job's calc failures show.
  const Policy miscopy = [](const AgentEpisode&, int turn) {
    return text(turn == 0 ? "calc(1+1)" : "answer(2)");
  };
  EXPECT_EQ(cause(play(quiet(), miscopy)), FailureMode::kOffPath);
  EXPECT_EQ(cause(play(quiet(), constant("answer(-1)"))), FailureMode::kStoppedShort);
  EXPECT_EQ(cause(play(quiet(), solver("answer(-1)"))), FailureMode::kWrongAnswer);

  // Every call fails; the agent makes the solver's first call, then answers.
  EnvConfig noisy = quiet();
  noisy.tool_error_rate = 1;
  const Policy gives_up = [first = solver()](const AgentEpisode& ep, int turn) {
    return turn == 0 ? first(ep, turn) : text("answer(-1)");
  };
  const Trajectory t = play(noisy, gives_up);
  EXPECT_EQ(t.tool_errors, 1);
  EXPECT_EQ(cause(t), FailureMode::kUnrecoveredError);

  // The solver's calls, but no turn left for the answer.
  const Trajectory cut = play(quiet(), solver(), /*max_turns=*/1);
  EXPECT_EQ(cut.end_reason, "turn_budget");
  EXPECT_EQ(cause(cut), FailureMode::kNoAnswer);
}

Trajectory record(std::vector<const char*> signals, int needed_calls, const char* end = "answer") {
  Trajectory t;
  t.needed_turns = needed_calls + 1;
  t.end_reason = end;
  for (const char* k : signals) {
    t.signals.push_back({0, k, 0.0f});
    t.tool_errors += std::string(k) == signal::kToolError;
    t.recoveries += std::string(k) == signal::kRecovered;
  }
  return t;
}

TEST(FailureModeTest, TheFirstCauseThatAppliesWins) {
  using namespace signal;
  // An abandoned episode (an opening over the budget, a verifier that could
  // not run) is no mistake of the policy's, whatever it wrote before: it was
  // filed under no_answer or what its calls showed.
  Trajectory abandoned = record({kMalformedCall}, 2, "verifier_error: the sandbox did not start");
  abandoned.abandoned = true;
  EXPECT_EQ(cause(abandoned), FailureMode::kAbandoned);
  Trajectory over_budget = record({}, 1, "context_budget");
  over_budget.abandoned = true;
  EXPECT_EQ(cause(over_budget), FailureMode::kAbandoned);
  // A call the agent wrote wrongly outranks what followed from it.
  EXPECT_EQ(cause(record({kUsefulCall, kBadArgs, kMalformedCall}, 2)), FailureMode::kMalformed);
  EXPECT_EQ(cause(record({kValidCall, kBadArgs}, 2)), FailureMode::kBadArgs);
  EXPECT_EQ(cause(record({kToolError, kValidCall}, 2)), FailureMode::kOffPath);
  EXPECT_EQ(cause(record({kOverBudget}, 1, "turn_budget")), FailureMode::kOffPath);
  // An error a successful retry followed is not the cause; one after it is.
  EXPECT_EQ(cause(record({kToolError, kUsefulCall, kRecovered}, 2)), FailureMode::kStoppedShort);
  EXPECT_EQ(cause(record({kToolError, kUsefulCall, kRecovered, kToolError}, 2)),
            FailureMode::kUnrecoveredError);
  EXPECT_EQ(cause(record({kToolError}, 1, "turn_budget")), FailureMode::kUnrecoveredError);
  // A later error's recovery does not close an earlier one the agent left.
  EXPECT_EQ(cause(record({kToolError, kUsefulCall, kToolError, kUsefulCall, kRecovered}, 3)),
            FailureMode::kUnrecoveredError);
  // A retry that failed again, then succeeded, recovered.
  EXPECT_EQ(cause(record({kToolError, kToolError, kUsefulCall, kRecovered}, 2)), FailureMode::kStoppedShort);
  // Every needed call made: an error left behind did not cost the task.
  EXPECT_EQ(cause(record({kUsefulCall, kToolError}, 1)), FailureMode::kWrongAnswer);
  EXPECT_EQ(cause(record({kUsefulCall}, 2, "token_budget")), FailureMode::kNoAnswer);
  Trajectory solved = record({}, 2);
  solved.success = true;
  EXPECT_EQ(classify_failure(solved), std::nullopt);
}

TEST(FailureModeTest, EvalSharesOfTheCausesSumToTheFailureRate) {
  const Policy miscopy = [](const AgentEpisode&, int turn) {
    return text(turn == 0 ? "calc(1+1)" : "answer(2)");
  };
  std::vector<Trajectory> eps = {play(quiet(), solver()),
                                 play(quiet(), solver(), 8, "search"),
                                 play(quiet(), constant("hello")),
                                 play(quiet(), constant("calc(three)")),
                                 play(quiet(), miscopy),
                                 play(quiet(), solver("answer(-1)")),
                                 play(quiet(), constant("answer(-1)")),
                                 play(quiet(), constant("answer(nobody)"), 4, "search")};
  const AgentEval e = summarize_episodes(eps);
  ASSERT_EQ(e.all.episodes, 8);
  EXPECT_DOUBLE_EQ(e.all.success, 2.0 / 8);
  for (FailureMode m : {FailureMode::kMalformed, FailureMode::kBadArgs, FailureMode::kOffPath,
                        FailureMode::kWrongAnswer})
    EXPECT_DOUBLE_EQ(e.all.failures[static_cast<int>(m)], 1.0 / 8) << to_string(m);
  EXPECT_DOUBLE_EQ(e.all.failures[static_cast<int>(FailureMode::kStoppedShort)], 2.0 / 8);
  EXPECT_DOUBLE_EQ(e.by_domain.at("search").failures[static_cast<int>(FailureMode::kStoppedShort)], 0.5);
  for (const auto* d : {&e.all, &e.by_domain.at("calc"), &e.by_domain.at("search")}) {
    double sum = 0;
    for (double f : d->failures) sum += f;
    EXPECT_NEAR(sum, 1 - d->success, 1e-12);
    int episodes = 0;
    double solved = 0;
    for (const auto& [calls, len] : d->by_needed_calls) {
      EXPECT_GE(calls, 1);
      episodes += len.episodes;
      solved += len.success * len.episodes;
    }
    EXPECT_EQ(episodes, d->episodes);
    EXPECT_NEAR(solved / episodes, d->success, 1e-12);
  }
}

}  // namespace
}  // namespace forge
