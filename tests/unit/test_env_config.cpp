// [env] and [agent] options: keys, validators, cross-key checks; the domain
// mix follows its weights.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "agent/agent_config.hpp"
#include "agent/opening_fit.hpp"
#include "core/error.hpp"
#include "env/env_mix.hpp"

namespace forge {
namespace {

struct Options {
  EnvConfig env;
  AgentConfig agent;
  OptionSet opts{"test"};
  Options() {
    add_env_options(opts, env);
    add_agent_options(opts, agent);
  }
  void parse(std::vector<std::string> args) { opts.parse(args); }
};

TEST(EnvConfigOptions, KeysParse) {
  Options o;
  o.parse({"--env.calc_weight=2", "--env.search_weight=0.5", "--env.tool_error_rate=0.25",
           "--env.timeout_rate=0.1", "--env.heldout_families=call.xml, template.text",
           "--agent.max_turns=5", "--agent.context_policy=drop", "--agent.max_context_tokens=300"});
  EXPECT_EQ(o.env.calc_weight, 2.0);
  EXPECT_EQ(o.env.tool_error_rate, 0.25);
  EXPECT_EQ(o.env.heldout_list(), (std::vector<std::string>{"call.xml", "template.text"}));
  EXPECT_EQ(o.agent.max_turns, 5);
  EXPECT_EQ(o.agent.policy(), ContextPolicy::kDrop);
  EXPECT_EQ(o.agent.max_context_tokens, 300);
}

TEST(EnvConfigOptions, BadValuesAreInputErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--env.tool_error_rate=1.5"},
           {"--env.calc_weight=-1"},
           {"--env.calc_weight=0", "--env.search_weight=0"},
           {"--env.tool_error_rate=0.7", "--env.timeout_rate=0.4"},
           {"--env.calc_min_ops=4", "--env.calc_max_ops=2"},
           // 6 hops visit 7 entities
           {"--env.search_min_hops=6", "--env.search_max_hops=6", "--env.search_entities=6", "--env.max_tool_calls=20"},
           {"--env.heldout_families=template.bogus"},
           {"--env.perturb_dims=template,colour"},
           {"--env.perturb_dims=,"},  // no dimension named
           {"--agent.context_policy=forget"},
           {"--agent.max_turns=0"},
           {"--agent.keep_turns=0", "--agent.context_policy=drop"},  // would drop every result unread
           {"--env.nonsense=1"}}) {
    Options o;
    EXPECT_THROW(o.parse(args), InputError) << args[0];
  }
  // The budget must hold the largest task's solution, of a domain drawn.
  for (const auto& [args, need] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--env.max_tool_calls=3", "--env.calc_max_ops=4"}, "below the 4 tool calls"},
           {{"--env.max_tool_calls=3", "--env.search_max_hops=3", "--env.calc_max_ops=2"}, "below the 4 tool calls"},
           {{"--env.max_tool_calls=2", "--env.search_weight=0", "--env.calc_max_ops=2", "--env.code_weight=1"},
            "below the 3 tool calls"}}) {
    Options o;
    try {
      o.parse(args);
      ADD_FAILURE() << args[0] << " " << args[1] << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(need), std::string::npos) << e.what();
    }
  }
  Options fits;
  EXPECT_NO_THROW(fits.parse({"--env.max_tool_calls=3", "--env.search_max_hops=3", "--env.search_obfuscate=0",
                              "--env.calc_weight=0"}));
  Options keep_none;  // summarize keeps the newest result's note
  EXPECT_NO_THROW(keep_none.parse({"--agent.keep_turns=0", "--agent.context_policy=summarize"}));
  Options o;
  EXPECT_NO_THROW(o.parse({"--env.heldout_families", ""}));
  EXPECT_TRUE(o.env.heldout_list().empty());
  Options dims;
  EXPECT_NO_THROW(dims.parse({"--env.perturb_dims= template , response"}));
  const PerturbationSampler sampler = dims.env.perturbation_sampler();
  for (uint64_t seed = 0; seed < 50; ++seed) {  // call and tools are not named: never perturbed
    const ScaffoldStyle style = sampler.draw(seed, StyleMode::kTrain);
    EXPECT_EQ(style.call, CallFormat::kParen);
    EXPECT_EQ(style.tools, ToolsStyle::kShort);
  }
}

TEST(EnvMixTest, DomainsFollowTheWeights) {
  EnvConfig c;
  c.calc_weight = 3;
  c.search_weight = 1;
  const EnvMix mix(c), again(c);  // a second mix: a pick depends on the seed alone
  int calc = 0;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    calc += mix.pick(seed) == "calc";
    EXPECT_EQ(mix.pick(seed), again.pick(seed));
  }
  EXPECT_NEAR(calc / 4000.0, 0.75, 0.03);
  // Weights whose sum is beyond a double draw as their shares say (the sum
  // was inf, and every task went to the last domain).
  c.calc_weight = c.search_weight = 1e308;
  const EnvMix huge(c);
  calc = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) calc += huge.pick(seed) == "calc";
  EXPECT_NEAR(calc / 1000.0, 0.5, 0.06);
  c.calc_weight = 3;
  c.search_weight = 0;
  const EnvMix only_calc(c);
  for (uint64_t seed = 0; seed < 500; ++seed) EXPECT_EQ(only_calc.pick(seed), "calc");
  EXPECT_EQ(only_calc.make_for(3)->name(), "calc");
  EXPECT_THROW(only_calc.make("maze"), InputError);
}

TEST(EnvMixTest, NewDomainsRegister) {
  EnvConfig c;
  c.calc_weight = 0;
  c.search_weight = 0;
  EnvMix mix(c);
  EXPECT_THROW(mix.pick(1), InputError);
  mix.add("calc2", 1.0, [](const EnvConfig& cfg) { return EnvMix(cfg).make("calc"); });
  EXPECT_EQ(mix.pick(1), "calc2");
  EXPECT_THROW(mix.add("calc2", 1.0, nullptr), InputError);
  // Not finite: an infinite weight was never drawn (inf / inf is NaN).
  for (const double w : {std::numeric_limits<double>::infinity(), std::nan(""), -1.0})
    EXPECT_THROW(mix.add("calc3", w, nullptr), InputError) << w;
}

// The openings are measured as episodes build them: a budget below all of
// them is refused by name, one below some is a warning, a wide one passes.
TEST(EnvConfigOptions, ContextBudgetBelowTheTaskOpeningsIsRefused) {
  Options o;
  o.parse({});
  const OpeningFit fit = opening_fit(o.env, o.agent, StyleMode::kTrain, 16);
  EXPECT_EQ(fit.sampled, 16);
  EXPECT_EQ(fit.over, 0);  // the default budget holds every opening
  ASSERT_GT(fit.shortest, 16u);
  EXPECT_GE(fit.longest, fit.shortest);
  o.agent.max_context_tokens = static_cast<int>(fit.shortest) - 1;
  EXPECT_EQ(opening_fit(o.env, o.agent, StyleMode::kTrain, 16).over, 16);
  try {
    check_openings_fit(o.env, o.agent);
    ADD_FAILURE() << "a budget below every opening was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("agent.max_context_tokens = " + std::to_string(fit.shortest - 1)),
              std::string::npos)
        << e.what();
  }
  ASSERT_GT(fit.longest, fit.shortest);  // styles differ in length
  o.agent.max_context_tokens = static_cast<int>(fit.longest) - 1;  // below some: a warning, the run goes on
  const OpeningFit some = opening_fit(o.env, o.agent, StyleMode::kTrain, 16);
  EXPECT_GT(some.over, 0);
  EXPECT_LT(some.over, 16);
  EXPECT_NO_THROW(check_openings_fit(o.env, o.agent));
}

// The held-out template families (the evaluation's styles) are measured too:
// a budget every trained style fits and some held-out ones do not is named
// for those.
TEST(EnvConfigOptions, HeldOutFamiliesOpeningsAreMeasuredToo) {
  Options o;
  o.parse({"--env.heldout_families=tools.long"});  // the longest tool descriptions: evaluation only
  const OpeningFit trained = opening_fit(o.env, o.agent, StyleMode::kTrain);
  o.agent.max_context_tokens = static_cast<int>(trained.longest);
  const OpeningFit held = opening_fit(o.env, o.agent, StyleMode::kHeldOut);
  ASSERT_GT(held.over, 0) << "held-out openings " << held.shortest << " to " << held.longest << ", trained up to "
                          << trained.longest;
  testing::internal::CaptureStderr();
  std::string thrown;
  try {
    check_openings_fit(o.env, o.agent);
  } catch (const InputError& e) {
    thrown = e.what();
  }
  const std::string said = thrown + testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("sampled episodes in the held-out template families"), std::string::npos) << said;
  EXPECT_EQ(said.find("in the trained styles"), std::string::npos) << said;
}

}  // namespace
}  // namespace forge
