// The policy update's group handling (algo/policy_update.hpp), through
// policy_forward_backward: a zero-variance group leaves the batch (the same
// gradient and objective as the batch without it, counted as such), and
// loss.adv_std_norm reaches the advantages (off: Dr. GRPO's mean-centred
// rewards, whose objective is the std-normalized one times the group's
// reward std). Mutants that trained zero-variance groups with advantage 0,
// or ignored adv_std_norm, passed every other test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "algo/policy_update.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "learner/train_progress.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

Trajectory episode(int group, float outcome, int salt) {
  Trajectory t;
  t.group = group;
  t.reward.outcome = outcome;
  LlmCall c;
  c.context = {1, 2, 3 + salt};
  c.generated = {4, 5, static_cast<int32_t>(6 + salt)};
  c.logprobs.assign(c.generated.size(), -5.5f);
  c.versions.assign(c.generated.size(), 0);
  t.calls.push_back(c);
  return t;
}

struct Update {
  PolicyUpdateStats stats;
  std::vector<float> grads;
};

Update update(const std::vector<Trajectory>& batch, const PolicyUpdateConfig& config) {
  static const auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(5);
  model.zero_grads();
  Update u;
  u.stats = policy_forward_backward(model, batch, config);
  u.grads = model.get_grads();
  return u;
}

TEST(PolicyUpdate, AZeroVarianceGroupLeavesTheBatch) {
  const std::vector<Trajectory> varying = {episode(0, 0.0f, 0), episode(0, 0.5f, 1)};
  std::vector<Trajectory> with_flat = varying;
  with_flat.push_back(episode(1, 1.0f, 2));
  with_flat.push_back(episode(1, 1.0f, 3));
  const PolicyUpdateConfig config;
  const Update a = update(varying, config), b = update(with_flat, config);
  EXPECT_EQ(b.stats.groups, 2);
  EXPECT_EQ(b.stats.zero_variance_groups, 1);
  EXPECT_EQ(b.stats.samples, a.stats.samples);
  EXPECT_EQ(b.stats.loss.kept_tokens, a.stats.loss.kept_tokens);
  EXPECT_NEAR(b.stats.loss.objective, a.stats.loss.objective, 1e-6 * std::abs(a.stats.loss.objective));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.grads[i] - b.grads[i])));
    norm = std::max(norm, static_cast<double>(std::fabs(a.grads[i])));
  }
  EXPECT_GT(norm, 0);
  EXPECT_LE(diff, 1e-6 * norm);
}

// A batch of zero-variance groups only trains nothing: its entropy is NaN
// (shown "-"), not 0, which read as a collapsed policy.
TEST(PolicyUpdate, NoTrainedTokenHasNoEntropyNorKl) {
  const Update flat = update({episode(0, 1.0f, 0), episode(0, 1.0f, 1)}, PolicyUpdateConfig{});
  EXPECT_EQ(flat.stats.samples, 0);
  EXPECT_TRUE(std::isnan(flat.stats.entropy_mean)) << flat.stats.entropy_mean;
  EXPECT_NE(format_train_progress(1, flat.stats, 0, 0, 0).find("entropy -  "), std::string::npos);
  // Nor a KL estimate: 0 read as exactly on-policy.
  EXPECT_TRUE(std::isnan(flat.stats.loss.kl)) << flat.stats.loss.kl;
  EXPECT_NE(format_train_progress(1, flat.stats, 0, 0, 0).find("kl -  "), std::string::npos);
  const Update varying = update({episode(0, 0.0f, 0), episode(0, 0.5f, 1)}, PolicyUpdateConfig{});
  EXPECT_GT(varying.stats.entropy_mean, 0);
  char shown[32];
  std::snprintf(shown, sizeof shown, "entropy %.2f  ", varying.stats.entropy_mean);
  EXPECT_NE(format_train_progress(1, varying.stats, 0, 0, 0).find(shown), std::string::npos);
}

TEST(PolicyUpdate, AdvStdNormReachesTheAdvantages) {
  const std::vector<Trajectory> batch = {episode(0, 0.0f, 0), episode(0, 0.5f, 1)};
  PolicyUpdateConfig config;
  config.loss.adv_std_norm = true;
  const Update normalized = update(batch, config);
  config.loss.adv_std_norm = false;
  const Update centred = update(batch, config);
  // Rewards 0 and 0.5: advantages -+1 normalized, -+0.25 centred.
  ASSERT_NE(normalized.stats.loss.objective, 0.0);
  EXPECT_NEAR(centred.stats.loss.objective, 0.25 * normalized.stats.loss.objective,
              1e-5 * std::abs(normalized.stats.loss.objective));
}

// A reward component that is not finite is an Error naming the episode
// (it turned every advantage NaN and ended the run at AdamW's norm check).
TEST(PolicyUpdate, ANonFiniteRewardNamesItsEpisode) {
  std::vector<Trajectory> batch = {episode(0, 0.0f, 0), episode(0, 0.5f, 1)};
  batch[1].episode_id = 77;
  batch[1].reward.process = std::nanf("");
  try {
    update(batch, PolicyUpdateConfig());
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("episode 77"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  // Finite components whose weighted sum overflows (weights near FLT_MAX,
  // which the config accepts): named too, not NaN advantages.
  batch[1].reward.process = 0.3f;
  batch[1].reward.outcome = 1.0f;
  PolicyUpdateConfig heavy;
  heavy.reward.outcome_weight = heavy.reward.process_weight = 3e38f;
  try {
    update(batch, heavy);
    FAIL() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("episode 77"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("composite reward is not finite"), std::string::npos) << e.what();
  }
}

// The version the staleness cap judges a group by is its trained episodes'
// oldest token: an abandoned episode's old tokens (an agent that called
// early, then went idle) do not age the group.
TEST(PolicyUpdate, AbandonedEpisodesDoNotAgeTheirGroup) {
  std::vector<Trajectory> group = {episode(0, 0.0f, 0), episode(0, 0.5f, 1)};
  group[0].calls[0].versions.assign(group[0].calls[0].versions.size(), 3);
  group[1].calls[0].versions.assign(group[1].calls[0].versions.size(), 9);
  EXPECT_EQ(oldest_version(group), 3);
  group[0].abandoned = true;
  EXPECT_EQ(oldest_version(group), 9);
  group[1].abandoned = true;
  EXPECT_EQ(oldest_version(group), -1);
  // Tokens without a version (-1) do not count, wherever they lie (a later
  // one reset the minimum).
  Trajectory t = episode(0, 0.0f, 0);
  t.calls[0].versions.assign(t.calls[0].versions.size(), 5);
  t.calls[0].versions.front() = 4;
  t.calls[0].versions.back() = -1;
  EXPECT_EQ(t.oldest_version(), 4);
}

}  // namespace
}  // namespace forge
