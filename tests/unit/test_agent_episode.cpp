// The scaffold state machine driven by scripted fake policies: success in
// every scaffold style, exact recorded contexts, noise and recovery, bad
// outputs, budgets, and context management branching at the right point.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <functional>

#include "agent/agent_episode.hpp"
#include "agent/failure_mode.hpp"
#include "agent/scripted_policy.hpp"
#include "core/error.hpp"
#include "env/process_signals.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

using Policy = std::function<Tokens(const AgentEpisode&, const GenerationRequest&)>;

EnvConfig quiet() {
  EnvConfig c;
  c.tool_error_rate = 0;
  c.timeout_rate = 0;
  return c;
}

AgentConfig roomy() {
  AgentConfig a;
  a.max_context_tokens = 4096;
  a.max_episode_tokens = 4096;
  a.sampling.temperature = 0.7f;
  a.sampling.seed = 99;
  return a;
}

// Runs the episode with `policy`; returns the prompts the "model" saw.
std::vector<Tokens> drive(AgentEpisode& ep, const Policy& policy) {
  std::vector<Tokens> seen;
  while (!ep.done()) {
    auto req = ep.next_request();
    EXPECT_TRUE(req.has_value());
    if (!req) break;
    EXPECT_FALSE(ep.next_request().has_value()) << "two requests in flight";
    seen.push_back(req->prompt);
    GenerationResult r;
    r.id = req->id;
    r.tokens = policy(ep, *req);
    r.finish = FinishReason::kStop;
    if (static_cast<int>(r.tokens.size()) > req->sampling.max_new_tokens) {
      r.tokens.resize(req->sampling.max_new_tokens);
      r.finish = FinishReason::kLength;
    }
    r.logprobs.assign(r.tokens.size(), -0.5f);
    r.versions.assign(r.tokens.size(), 3);
    ep.on_generation(r);
  }
  return seen;
}

Policy scripted(const AgentEpisode& ep) {
  auto p = std::make_shared<ScriptedPolicy>(ep);
  return [p](const AgentEpisode& e, const GenerationRequest&) { return p->next(e); };
}

Policy constant(const std::string& text, bool eot = true) {
  return [=](const AgentEpisode&, const GenerationRequest&) {
    Tokens t = ByteTokenizer().encode_ordinary(text);
    if (eot) t.push_back(kEndOfTurn);
    return t;
  };
}

bool extends(const Tokens& longer, const Tokens& prefix) {
  return longer.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), longer.begin());
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<ScaffoldStyle> all_styles() {
  std::vector<ScaffoldStyle> out;
  for (int t = 0; t < 3; ++t)
    for (int s = 0; s < 3; ++s)
      for (int c = 0; c < 4; ++c)
        for (int f = 0; f < 4; ++f)
          for (int r = 0; r < 3; ++r) {
            ScaffoldStyle st;
            st.tools = static_cast<ToolsStyle>(t);
            st.system = static_cast<SystemStyle>(s);
            st.chat_template = static_cast<TemplateStyle>(c);
            st.call = static_cast<CallFormat>(f);
            st.response = static_cast<ResponseFormat>(r);
            out.push_back(st);
          }
  return out;
}

uint64_t seed_of(const EnvMix& mix, const std::string& domain, uint64_t from = 0) {
  for (uint64_t s = from;; ++s)
    if (mix.pick(s) == domain) return s;
}

TEST(AgentEpisodeTest, ScriptedPolicySucceedsInEveryStyleWithExactContexts) {
  const EnvMix mix(quiet());
  const auto styles = all_styles();
  ASSERT_EQ(styles.size(), 432u);
  uint64_t id = 0;
  for (const ScaffoldStyle& style : styles)
    for (const char* domain : {"calc", "search"}) {
      const uint64_t seed = seed_of(mix, domain, id * 13);
      AgentEpisode ep(mix.make_for(seed), seed, style, roomy(), id++);
      const auto seen = drive(ep, scripted(ep));
      const Trajectory t = ep.take_trajectory();
      ASSERT_TRUE(t.success) << style.name() << " " << domain << " answer " << t.final_answer;
      EXPECT_EQ(t.end_reason, "answer");
      EXPECT_EQ(t.env, domain);
      EXPECT_EQ(t.template_family, style.name());
      EXPECT_EQ(t.turns, t.needed_turns);
      EXPECT_EQ(t.reward.outcome, 1.0f);
      EXPECT_FLOAT_EQ(t.reward.efficiency, 0.0f);
      EXPECT_NEAR(t.reward.process, signal::kUsefulValue * (t.needed_turns - 1), 1e-5);
      ASSERT_EQ(t.calls.size(), seen.size());
      for (size_t i = 0; i < t.calls.size(); ++i) {
        EXPECT_EQ(t.calls[i].context, seen[i]) << "call " << i << " recorded another context";
        EXPECT_EQ(t.calls[i].logprobs, std::vector<float>(t.calls[i].generated.size(), -0.5f));
        EXPECT_EQ(t.calls[i].versions, std::vector<int32_t>(t.calls[i].generated.size(), 3));
        if (i > 0) {  // token-in/token-out: the history is appended, never re-encoded
          EXPECT_TRUE(extends(t.calls[i].context,
                              concat(t.calls[i - 1].context, t.calls[i - 1].generated)));
        }
      }
    }
}

TEST(AgentEpisodeTest, RequestsCarrySessionStopTokenAndPerTurnSeeds) {
  const EnvMix mix(quiet());
  AgentEpisode ep(mix.make_for(3), 3, ScaffoldStyle{}, roomy(), 42);
  ScriptedPolicy policy(ep);
  std::vector<uint64_t> seeds;
  while (!ep.done()) {
    const auto req = ep.next_request();
    ASSERT_TRUE(req);
    EXPECT_EQ(req->session, "episode-42");
    EXPECT_EQ(req->sampling.stop_tokens, Tokens{kEndOfTurn});
    EXPECT_EQ(req->sampling.temperature, 0.7f);
    EXPECT_EQ(req->sampling.max_new_tokens, roomy().max_new_tokens);
    seeds.push_back(req->sampling.seed);
    GenerationResult r;
    r.tokens = policy.next(ep);
    r.logprobs.assign(r.tokens.size(), 0);
    r.versions.assign(r.tokens.size(), 0);
    ep.on_generation(r);
  }
  ASSERT_GE(seeds.size(), 2u);
  EXPECT_NE(seeds[0], seeds[1]);
  EXPECT_THROW(ep.on_generation(GenerationResult{}), Error);
}

TEST(AgentEpisodeTest, NoisyToolsAreRetriedAndRecoveriesCounted) {
  EnvConfig c;
  c.tool_error_rate = 0.3;
  c.timeout_rate = 0.1;
  c.max_tool_calls = 60;
  const EnvMix mix(c);
  const PerturbationSampler sampler(true, {});
  AgentConfig a = roomy();
  a.max_turns = 60;
  int errors = 0, recoveries = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    AgentEpisode ep = make_episode(mix, sampler, a, 1000 + i, i, StyleMode::kTrain);
    drive(ep, scripted(ep));
    const Trajectory t = ep.take_trajectory();
    ASSERT_TRUE(t.success) << t.end_reason;
    int error_signals = 0, recovery_signals = 0;
    for (const auto& s : t.signals) {
      error_signals += s.kind == signal::kToolError;
      recovery_signals += s.kind == signal::kRecovered;
    }
    EXPECT_EQ(error_signals, t.tool_errors);
    EXPECT_EQ(recovery_signals, t.recoveries);
    EXPECT_LE(t.recoveries, t.tool_errors);
    EXPECT_EQ(t.recoveries > 0, t.tool_errors > 0);  // the retry eventually succeeds
    EXPECT_EQ(t.turns, t.needed_turns + t.tool_errors);
    if (t.tool_errors > 0) {
      EXPECT_LT(t.reward.efficiency, 0);
    }
    errors += t.tool_errors;
    recoveries += t.recoveries;
  }
  EXPECT_GT(errors, 50);
  EXPECT_GT(recoveries, 30);
}

// env.error_names_call: the tool message after an injected failure names the
// call as the agent wrote it (displayed name, call format), so a retry can
// copy it; off, it names nothing.
TEST(AgentEpisodeTest, NamedFailuresShowTheCallAsTheAgentWroteIt) {
  const ByteTokenizer tok;
  for (bool names : {false, true}) {
    EnvConfig c;
    c.tool_error_rate = 0.3;
    c.timeout_rate = 0.1;
    c.max_tool_calls = 60;
    c.error_names_call = names;
    const EnvMix mix(c);
    AgentConfig a = roomy();
    a.max_turns = 60;
    for (CallFormat call : {CallFormat::kParen, CallFormat::kJson, CallFormat::kXml, CallFormat::kSpecial}) {
      ScaffoldStyle style;
      style.tools = ToolsStyle::kAlias;
      style.call = call;
      int errors = 0, named = 0;
      for (uint64_t i = 0; i < 20; ++i) {
        AgentEpisode ep(mix.make_for(500 + i), 500 + i, style, a, i);
        drive(ep, scripted(ep));
        const Trajectory t = ep.take_trajectory();
        ASSERT_TRUE(t.success) << t.end_reason;
        errors += t.tool_errors;
        for (size_t k = 0; k + 1 < t.calls.size(); ++k) {
          Tokens written = t.calls[k].generated;
          if (!written.empty() && written.back() == kEndOfTurn) written.pop_back();
          const std::string text = tok.decode(written);
          EXPECT_TRUE(text.find("calc") == std::string::npos && text.find("lookup") == std::string::npos)
              << "the agent writes the aliases: " << text;
          // The tokens after this call: its end, the tool message, the next
          // assistant start. A named failure ends its message with ": " and
          // the generated tokens themselves (call.special's tool-call tokens too).
          const Tokens shown(t.calls[k + 1].context.begin() + t.calls[k].context.size(), t.calls[k + 1].context.end());
          Tokens suffix = tok.encode_ordinary(": ");
          suffix.insert(suffix.end(), written.begin(), written.end());
          suffix.push_back(kEndOfTurn);
          named += std::search(shown.begin(), shown.end(), suffix.begin(), suffix.end()) != shown.end();
        }
      }
      EXPECT_GT(errors, 5);
      EXPECT_EQ(named, names ? errors : 0) << "call format " << static_cast<int>(call);
    }
  }
}

TEST(AgentEpisodeTest, BadOutputsBecomeErrorObservationsAndNegativeSignals) {
  const EnvMix mix(quiet());
  AgentConfig a = roomy();
  a.max_turns = 4;
  struct Case {
    ScaffoldStyle style;
    std::string output;
    const char* kind;
  };
  ScaffoldStyle alias;
  alias.tools = ToolsStyle::kAlias;
  ScaffoldStyle json;
  json.call = CallFormat::kJson;
  const std::vector<Case> cases = {{ScaffoldStyle{}, "hello", signal::kMalformedCall},
                                   {json, "calc(3+4)", signal::kMalformedCall},
                                   {alias, "calc(3+4)", signal::kUnknownTool},
                                   {ScaffoldStyle{}, "calc(three)", signal::kBadArgs},
                                   {ScaffoldStyle{}, "nope(1)", signal::kUnknownTool}};
  const uint64_t seed = seed_of(mix, "calc");
  for (const Case& k : cases) {
    AgentEpisode ep(mix.make_for(seed), seed, k.style, a, 1);
    ASSERT_NO_THROW(drive(ep, constant(k.output)));
    const Trajectory t = ep.take_trajectory();
    EXPECT_FALSE(t.success);
    EXPECT_EQ(t.end_reason, "turn_budget");
    EXPECT_EQ(t.turns, 4);
    EXPECT_EQ(t.reward.outcome, 0.0f);
    ASSERT_EQ(t.signals.size(), 4u) << k.output;
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(t.signals[i].kind, k.kind) << k.output;
      EXPECT_EQ(t.signals[i].turn, i);
      EXPECT_LT(t.signals[i].value, 0);
    }
    EXPECT_NEAR(t.reward.process, 4 * signal::kBadCallValue, 1e-5);
    EXPECT_LT(t.reward.efficiency, 0);
    const std::string last = ByteTokenizer().decode(ep.context());
    EXPECT_NE(last.find("error: "), std::string::npos);
  }
}

// `recovered` is an identical call right after the failure: an output the
// scaffold refused in between (malformed, a tool the task does not show)
// makes the repeat a plain call, as failure_mode.cpp classifies it.
TEST(AgentEpisodeTest, ARetryComesRightAfterTheFailure) {
  const EnvMix mix(quiet());
  const uint64_t seed = seed_of(mix, "calc");
  for (const std::string between : {"", "hello", "nope(1)"}) {
    AgentConfig a = roomy();
    a.max_turns = between.empty() ? 2 : 3;
    AgentEpisode ep(mix.make_for(seed), seed, ScaffoldStyle{}, a, 1);
    ep.fail_call(0, ObservationKind::kToolError);
    Tokens first;
    int turn = 0;
    drive(ep, [&](const AgentEpisode& e, const GenerationRequest& r) {
      if (turn++ == 0) return first = ScriptedPolicy(e).next(e);  // the task's first call: it fails
      if (turn == 2 && !between.empty()) return constant(between)(e, r);
      return first;
    });
    const Trajectory t = ep.take_trajectory();
    EXPECT_EQ(t.tool_errors, 1) << between;
    EXPECT_EQ(t.recoveries, between.empty() ? 1 : 0) << between;
    const bool signalled = std::any_of(t.signals.begin(), t.signals.end(),
                                       [](const ProcessSignal& s) { return s.kind == signal::kRecovered; });
    EXPECT_EQ(signalled, between.empty()) << between;
  }
}

TEST(AgentEpisodeTest, AGenerationCutByLengthIsClosedWithEot) {
  const EnvMix mix(quiet());
  AgentConfig a = roomy();
  a.max_turns = 2;
  AgentEpisode ep(mix.make_for(1), 1, ScaffoldStyle{}, a, 1);
  drive(ep, constant("calc(1+", false));
  const Trajectory t = ep.take_trajectory();
  ASSERT_EQ(t.calls.size(), 2u);
  Tokens expect = concat(t.calls[0].context, t.calls[0].generated);
  expect.push_back(kEndOfTurn);
  EXPECT_TRUE(extends(t.calls[1].context, expect));
}

TEST(AgentEpisodeTest, TokenBudgetCapsGenerationAndEndsTheEpisode) {
  const EnvMix mix(quiet());
  AgentConfig a = roomy();
  a.max_episode_tokens = 20;
  AgentEpisode ep(mix.make_for(1), 1, ScaffoldStyle{}, a, 1);
  std::vector<int> caps;
  drive(ep, [&](const AgentEpisode&, const GenerationRequest& r) {
    caps.push_back(r.sampling.max_new_tokens);
    return ByteTokenizer().encode_ordinary("xxxxxxxxxxxx");  // 12 tokens, no call
  });
  const Trajectory t = ep.take_trajectory();
  EXPECT_EQ(caps, (std::vector<int>{20, 8}));
  EXPECT_EQ(t.end_reason, "token_budget");
}

// A generation cut by the episode's token budget (capped below
// agent.max_new_tokens) ends the episode as token_budget, not as a
// malformed call: the policy had no room to finish its action.
TEST(AgentEpisodeTest, AGenerationCutByTheEpisodesBudgetIsNotMalformed) {
  const EnvMix mix(quiet());
  AgentConfig a = roomy();
  a.max_episode_tokens = 20;
  AgentEpisode ep(mix.make_for(1), 1, ScaffoldStyle{}, a, 1);
  int call = 0;
  drive(ep, [&](const AgentEpisode& e, const GenerationRequest& r) {
    // a well-formed call of 10 tokens, then an answer of 14 cut to the 10 left
    return constant(call++ == 0 ? "calc(1+1)" : "answer(12345)")(e, r);
  });
  const Trajectory t = ep.take_trajectory();
  EXPECT_EQ(t.end_reason, "token_budget");
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.calls[0].generated.size(), 10u);
  EXPECT_EQ(t.calls[1].generated.size(), 10u);
  for (const ProcessSignal& s : t.signals) EXPECT_NE(s.kind, signal::kMalformedCall) << "turn " << s.turn;
  EXPECT_NE(classify_failure(t), FailureMode::kMalformed);
}

TEST(AgentEpisodeTest, OpeningOverTheContextBudgetEndsAtOnce) {
  const EnvMix mix(quiet());
  AgentConfig a = roomy();
  a.max_context_tokens = 16;
  AgentEpisode ep(mix.make_for(1), 1, ScaffoldStyle{}, a, 1);
  EXPECT_TRUE(ep.done());
  EXPECT_FALSE(ep.next_request());
  const Trajectory t = ep.take_trajectory();
  EXPECT_EQ(t.end_reason, "context_budget");
  EXPECT_TRUE(t.abandoned);  // out of its group's advantages
  EXPECT_TRUE(t.calls.empty());
  EXPECT_THROW(ep.take_trajectory(), Error);
}

TEST(AgentEpisodeTest, EngineErrorAbandonsTheEpisode) {
  const EnvMix mix(quiet());
  AgentEpisode ep(mix.make_for(1), 1, ScaffoldStyle{}, roomy(), 1);
  EXPECT_THROW(ep.take_trajectory(), Error);
  ASSERT_TRUE(ep.next_request());
  GenerationResult r;
  r.finish = FinishReason::kError;
  r.error = "prompt too long";
  ep.on_generation(r);
  const Trajectory t = ep.take_trajectory();
  EXPECT_TRUE(t.abandoned);
  EXPECT_EQ(t.end_reason, "engine_error: prompt too long");
}

// Context management: with the budget set to the size of call 2's context,
// appending turn 2 passes it, so call 3's context is compacted: calls 0..2 are
// as without a budget, call 3 no longer extends call 2 (the trie branches).
void check_context_management(ContextPolicy policy) {
  EnvConfig c = quiet();
  c.calc_min_ops = 4;
  c.calc_weight = 1;
  c.search_weight = 0;
  const EnvMix mix(c);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    AgentConfig a = roomy();
    a.context_policy = policy == ContextPolicy::kDrop ? "drop" : "summarize";
    AgentEpisode free_ep(mix.make_for(seed), seed, ScaffoldStyle{}, a, 5);
    drive(free_ep, scripted(free_ep));
    const Trajectory free_t = free_ep.take_trajectory();
    ASSERT_EQ(free_t.calls.size(), 5u);
    EXPECT_EQ(free_t.context_compactions, 0);

    a.max_context_tokens = static_cast<int>(free_t.calls[2].context.size());
    AgentEpisode ep(mix.make_for(seed), seed, ScaffoldStyle{}, a, 5);
    drive(ep, scripted(ep));
    const Trajectory t = ep.take_trajectory();
    ASSERT_TRUE(t.success) << t.end_reason;
    ASSERT_EQ(t.calls.size(), 5u);
    for (int i = 0; i <= 2; ++i) EXPECT_EQ(t.calls[i].context, free_t.calls[i].context);
    EXPECT_TRUE(extends(t.calls[2].context, concat(t.calls[1].context, t.calls[1].generated)));
    EXPECT_FALSE(extends(t.calls[3].context, concat(t.calls[2].context, t.calls[2].generated)))
        << "the context after compaction must branch";
    for (const auto& call : t.calls) EXPECT_LE(call.context.size(), a.max_context_tokens);
    EXPECT_GE(t.context_compactions, 1);
    bool signalled = false;
    for (const auto& s : t.signals) signalled |= s.kind == signal::kContextCompacted && s.turn == 2;
    EXPECT_TRUE(signalled);
    // The compacted context keeps the opening, so the branch is after it.
    const Tokens& opening_end = free_t.calls[0].context;
    EXPECT_TRUE(extends(t.calls[3].context, Tokens(opening_end.begin(), opening_end.end() - 1)));
    const std::string text = ByteTokenizer().decode(t.calls[3].context);
    if (policy == ContextPolicy::kDrop) {
      EXPECT_EQ(text.find("notes: "), std::string::npos);
    } else if (t.calls[3].context.size() > free_t.calls[0].context.size()) {
      EXPECT_NE(text.find("notes: calc("), std::string::npos) << text;
    }
  }
}

TEST(AgentEpisodeTest, ContextManagementDropBranchesAtTheBudget) {
  check_context_management(ContextPolicy::kDrop);
}

TEST(AgentEpisodeTest, ContextManagementSummarizeBranchesAtTheBudget) {
  check_context_management(ContextPolicy::kSummarize);
}

TEST(AgentEpisodeTest, SameSeedsSameTrajectory) {
  EnvConfig c;
  c.tool_error_rate = 0.2;
  const EnvMix mix(c);
  const PerturbationSampler sampler(true, {});
  for (uint64_t i = 0; i < 20; ++i) {
    AgentEpisode x = make_episode(mix, sampler, roomy(), i, i, StyleMode::kTrain);
    AgentEpisode y = make_episode(mix, sampler, roomy(), i, i, StyleMode::kTrain);
    EXPECT_EQ(x.style(), y.style());
    drive(x, scripted(x));
    drive(y, scripted(y));
    const Trajectory tx = x.take_trajectory(), ty = y.take_trajectory();
    ASSERT_EQ(tx.calls.size(), ty.calls.size());
    for (size_t k = 0; k < tx.calls.size(); ++k) EXPECT_EQ(tx.calls[k].context, ty.calls[k].context);
    EXPECT_EQ(tx.signals.size(), ty.signals.size());
  }
}

TEST(AgentEpisodeTest, DemonstrationsAreNoiseFreeAndSucceed) {
  EnvConfig c;
  c.tool_error_rate = 0.5;
  const PerturbationSampler sampler(true, {});
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const Trajectory t =
        make_demonstration(c, roomy(), seed, sampler.draw(seed, StyleMode::kTrain), seed);
    EXPECT_TRUE(t.success);
    EXPECT_EQ(t.tool_errors, 0);
    EXPECT_EQ(t.turns, t.needed_turns);
  }
}

// sft.retry_share's demonstrations: exactly one of the solver's calls fails
// (errors and timeouts in the configured proportion), the next call repeats
// it, and the episode still succeeds.
TEST(AgentEpisodeTest, RetryDemonstrationsShowOneFailedCallAndItsRepeat) {
  EnvConfig c;
  c.tool_error_rate = 0.1;
  c.timeout_rate = 0.1;
  const PerturbationSampler sampler(true, {});
  const AgentConfig agent = roomy();
  const ScaffoldVocabulary& vocab = agent.vocab();
  int timeouts = 0, errors = 0;
  std::set<size_t> failed_positions;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    const ScaffoldStyle style = sampler.draw(seed, StyleMode::kTrain);
    const Trajectory t = make_demonstration(c, agent, seed, style, seed, /*retry=*/true);
    EXPECT_TRUE(t.success);
    ASSERT_EQ(t.tool_errors, 1);
    EXPECT_EQ(t.recoveries, 1);
    EXPECT_EQ(t.turns, t.needed_turns + 1);
    for (const auto& s : t.signals)
      if (s.kind == signal::kToolError) {
        const size_t k = static_cast<size_t>(s.turn);
        failed_positions.insert(k);
        ASSERT_LT(k + 1, t.calls.size());
        EXPECT_EQ(t.calls[k].generated, t.calls[k + 1].generated) << "the retry repeats the call";
        // The failure is in the next call's context, right after the call.
        const std::string after = vocab.decode(
            Tokens(t.calls[k + 1].context.begin() + static_cast<long>(t.calls[k].context.size()),
                   t.calls[k + 1].context.end()));
        timeouts += after.find("timeout") != std::string::npos;
        for (const char* reason : {"service unavailable", "rate limited", "internal error"})
          errors += after.find(reason) != std::string::npos;
      }
  }
  EXPECT_GT(timeouts, 10);
  EXPECT_GT(errors, 10);
  EXPECT_GE(failed_positions.size(), 2u);  // not always the first call
}

// A budget that cannot hold the solver's calls, a retry and the answer
// (7-operation tasks, 8 turns) is an InputError naming agent.max_turns, not
// demonstrations that stop short and teach it.
TEST(AgentEpisodeTest, DemonstrationsTheBudgetCutShortAreAnInputError) {
  EnvConfig c;
  c.search_weight = 0;
  c.calc_min_ops = c.calc_max_ops = 7;
  AgentConfig agent = roomy();
  agent.max_turns = 8;
  const ScaffoldStyle style = PerturbationSampler(false, {}).draw(3, StyleMode::kTrain);
  EXPECT_TRUE(make_demonstration(c, agent, 3, style, 3, /*retry=*/false).success);
  try {
    make_demonstration(c, agent, 3, style, 3, /*retry=*/true);
    FAIL() << "a demonstration cut short was made";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("agent.max_turns = 8"), std::string::npos) << e.what();
  }
}

// Tasks whose solution and retry exceed env.max_tool_calls are refused: the
// last call would be shown refused over budget while the answer is right.
TEST(AgentEpisodeTest, DemonstrationsPastTheToolCallBudgetAreAnInputError) {
  EnvConfig c;
  c.search_weight = 0;
  c.calc_min_ops = c.calc_max_ops = 8;
  c.max_tool_calls = 8;
  AgentConfig agent = roomy();
  agent.max_turns = 20;  // room for every call, the retry and the answer
  const ScaffoldStyle style = PerturbationSampler(false, {}).draw(3, StyleMode::kTrain);
  EXPECT_TRUE(make_demonstration(c, agent, 3, style, 3, /*retry=*/false).success);
  try {
    make_demonstration(c, agent, 3, style, 3, /*retry=*/true);
    FAIL() << "a demonstration past the tool-call budget was made";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("env.max_tool_calls = 8"), std::string::npos) << e.what();
  }
}

// Demonstration calls longer than agent.max_new_tokens lets the policy write
// are counted (forge sft reports them), the stop token aside.
TEST(AgentEpisodeTest, DemonstrationCallsPastMaxNewTokensAreCounted) {
  EnvConfig c;
  c.search_weight = 0;
  AgentConfig agent = roomy();
  const ScaffoldStyle style = PerturbationSampler(false, {}).draw(3, StyleMode::kTrain);
  const Trajectory t = make_demonstration(c, agent, 3, style, 3, /*retry=*/false);
  std::vector<size_t> written;  // without the stop token: a call cut just before it parses whole
  for (const LlmCall& call : t.calls) {
    ASSERT_EQ(call.generated.back(), agent.vocab().stop_token());
    written.push_back(call.generated.size() - 1);
  }
  ASSERT_GE(written.size(), 2u);
  const size_t longest = *std::max_element(written.begin(), written.end());
  agent.max_new_tokens = static_cast<int>(longest);
  EXPECT_EQ(calls_past_max_new_tokens(t, agent), 0);
  agent.max_new_tokens = static_cast<int>(longest) - 1;
  EXPECT_EQ(calls_past_max_new_tokens(t, agent), std::count(written.begin(), written.end(), longest));
  agent.max_new_tokens = 1;
  EXPECT_EQ(calls_past_max_new_tokens(t, agent), std::count_if(written.begin(), written.end(), [](size_t w) { return w > 1; }));
}

}  // namespace
}  // namespace forge
