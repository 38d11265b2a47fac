// The perturbation pipeline: every family is drawn, held-out families never
// in training, always in held-out mode; bad held-out lists are input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.hpp"
#include "env/perturbation.hpp"

namespace forge {
namespace {

std::map<std::string, int> count_families(const PerturbationSampler& s, StyleMode mode, int n) {
  std::map<std::string, int> counts;
  for (int i = 0; i < n; ++i)
    for (const auto& f : s.draw(static_cast<uint64_t>(i) * 7919u + 1, mode).families()) ++counts[f];
  return counts;
}

TEST(EnvPerturbation, TrainingDrawsEveryFamilyButTheHeldOut) {
  const PerturbationSampler s(true, {"template.tool_as_user", "call.xml"});
  const auto counts = count_families(s, StyleMode::kTrain, 5000);
  for (const auto& f : all_families()) {
    if (f == "template.tool_as_user" || f == "call.xml")
      EXPECT_EQ(counts.count(f), 0u) << f << " drawn in training";
    else
      EXPECT_GT(counts.count(f) ? counts.at(f) : 0, 500) << f << " rarely drawn";
  }
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(s.draw(i, StyleMode::kTrain).heldout);
}

TEST(EnvPerturbation, HeldOutModeUsesTheHeldOutFamilies) {
  const PerturbationSampler s(true, {"template.tool_as_user", "call.xml", "call.json"});
  const auto counts = count_families(s, StyleMode::kHeldOut, 2000);
  EXPECT_EQ(counts.at("template.tool_as_user"), 2000);
  EXPECT_GT(counts.at("call.xml"), 800);
  EXPECT_GT(counts.at("call.json"), 800);
  EXPECT_EQ(counts.at("call.xml") + counts.at("call.json"), 2000);
  EXPECT_GT(counts.at("response.json"), 400);  // other dimensions still vary
  EXPECT_TRUE(s.draw(3, StyleMode::kHeldOut).heldout);
}

TEST(EnvPerturbation, WithoutPerturbationTheDefaultsAreUsed) {
  const PerturbationSampler plain(false, {});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(plain.draw(i, StyleMode::kTrain), ScaffoldStyle{});
  const PerturbationSampler held(false, {"template.special"});
  const ScaffoldStyle s = held.draw(1, StyleMode::kTrain);
  EXPECT_EQ(s.chat_template, TemplateStyle::kText);  // first variant not held out
  EXPECT_EQ(s.call, CallFormat::kParen);
  EXPECT_EQ(held.draw(1, StyleMode::kHeldOut).chat_template, TemplateStyle::kSpecial);
}

// env.perturb_share: one coin per episode; a perturbed episode draws every
// dimension uniformly (so it can still land on all defaults, 1/324).
TEST(EnvPerturbation, ShareIsTheFractionOfPerturbedEpisodes) {
  const int n = 4000;
  for (double share : {0.0, 0.3, 1.0}) {
    const PerturbationSampler s(true, {"template.tool_as_user"}, share);
    int non_default = 0, heldout_defaults = 0;
    for (int i = 0; i < n; ++i) {
      non_default += !(s.draw(static_cast<uint64_t>(i), StyleMode::kTrain) == ScaffoldStyle{});
      ScaffoldStyle h = s.draw(static_cast<uint64_t>(i), StyleMode::kHeldOut);
      EXPECT_EQ(h.chat_template, TemplateStyle::kToolAsUser);
      h.chat_template = TemplateStyle::kSpecial;
      h.heldout = false;
      heldout_defaults += h == ScaffoldStyle{};  // the other dimensions follow the same coin
    }
    const double expected = share * (1 - 1.0 / 324);
    EXPECT_NEAR(non_default / static_cast<double>(n), expected, 0.025) << "share " << share;
    EXPECT_NEAR(heldout_defaults / static_cast<double>(n), 1 - share * (1 - 1.0 / 108), 0.025) << "share " << share;
  }
  EXPECT_THROW(PerturbationSampler(true, {}, 1.5), InputError);
  EXPECT_THROW(PerturbationSampler(true, {}, -0.1), InputError);
}

// env.perturb_dims: a perturbed episode draws only the named dimensions;
// the held-out family is still shown in held-out mode.
TEST(EnvPerturbation, PerturbDimsLimitTheDrawToTheNamedDimensions) {
  const PerturbationSampler s(true, {"template.tool_as_user"}, 1.0, {"template", "response"});
  std::set<std::string> templates, responses;
  for (int i = 0; i < 400; ++i) {
    const ScaffoldStyle t = s.draw(static_cast<uint64_t>(i), StyleMode::kTrain);
    EXPECT_EQ(t.tools, ToolsStyle::kShort);
    EXPECT_EQ(t.system, SystemStyle::kTerse);
    EXPECT_EQ(t.call, CallFormat::kParen);
    EXPECT_NE(t.chat_template, TemplateStyle::kToolAsUser);
    templates.insert(t.families()[2]);
    responses.insert(t.families()[4]);
    const ScaffoldStyle h = s.draw(static_cast<uint64_t>(i), StyleMode::kHeldOut);
    EXPECT_EQ(h.chat_template, TemplateStyle::kToolAsUser);
    EXPECT_EQ(h.call, CallFormat::kParen);
  }
  EXPECT_EQ(templates, (std::set<std::string>{"template.special", "template.text", "template.tool_as_system"}));
  EXPECT_EQ(responses.size(), 3u);
  EXPECT_THROW(PerturbationSampler(true, {}, 1.0, {"templates"}), InputError);
  EXPECT_EQ(perturbation_dimensions(), (std::vector<std::string>{"tools", "system", "template", "call", "response"}));
}

TEST(EnvPerturbation, DrawIsAFunctionOfTheSeed) {
  const PerturbationSampler s(true, {});
  int differ = 0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(s.draw(i, StyleMode::kTrain), s.draw(i, StyleMode::kTrain));
    differ += !(s.draw(i, StyleMode::kTrain) == s.draw(i + 1, StyleMode::kTrain));
  }
  EXPECT_GT(differ, 90);
}

TEST(EnvPerturbation, BadHeldOutListsAreInputErrors) {
  EXPECT_THROW(PerturbationSampler(true, {"template.nope"}), InputError);
  EXPECT_THROW(PerturbationSampler(true, {"response.plain", "response.tagged", "response.json"}),
               InputError);
  EXPECT_THROW(PerturbationSampler(true, {}).draw(1, StyleMode::kHeldOut), InputError);
  EXPECT_EQ(all_families().size(), 17u);
  EXPECT_EQ(ScaffoldStyle{}.name(),
            "tools.short/system.terse/template.special/call.paren/response.plain");
}

TEST(EnvPerturbation, AliasesRenameTools) {
  EXPECT_EQ(displayed_tool_name(ToolsStyle::kShort, "calc"), "calc");
  EXPECT_EQ(displayed_tool_name(ToolsStyle::kAlias, "calc"), "math");
  EXPECT_EQ(displayed_tool_name(ToolsStyle::kAlias, "lookup"), "fetch");
  EXPECT_EQ(displayed_tool_name(ToolsStyle::kAlias, "maze"), "tool_maze");
}

}  // namespace
}  // namespace forge
