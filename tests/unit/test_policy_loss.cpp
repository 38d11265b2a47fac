// Properties of the policy losses (src/algo/policy_loss.hpp), each able to
// fail: ratios of 1 make CISPO, DAPO and REINFORCE agree (also as model
// gradients through the tree trainer); no gradient flows through the ratio;
// CISPO keeps the gradient of a clipped token that PPO/DAPO drop; masked
// tokens leave numerator and denominator; zero-variance groups give zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "algo/advantages.hpp"
#include "algo/composite_reward.hpp"
#include "algo/policy_loss.hpp"
#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {
namespace {

std::vector<SampleTokens> random_batch(Rng& rng, int samples, bool on_policy) {
  std::vector<SampleTokens> b(samples);
  for (auto& s : b) {
    s.advantage = static_cast<float>(rng.normal());
    const int n = 1 + static_cast<int>(rng.below(6));
    for (int t = 0; t < n; ++t) {
      const float mu = static_cast<float>(-3.0 * rng.uniform());
      s.behaviour_logprob.push_back(mu);
      s.logprob.push_back(on_policy ? mu : mu + static_cast<float>(0.3 * rng.normal()));
    }
  }
  return b;
}

// The reference backend the per-sample coefficients run on.
Backend& cpu() {
  static const std::unique_ptr<Backend> backend = make_backend("cpu");
  return *backend;
}

PolicyLossConfig algo(const std::string& name) {
  PolicyLossConfig c;
  c.algorithm = name;
  return c;
}

TEST(PolicyLoss, RatiosOfOneMakeCispoDapoAndReinforceAgree) {
  Rng rng(1);
  const auto batch = random_batch(rng, 7, true);
  int64_t N = 0;
  for (const auto& s : batch) N += static_cast<int64_t>(s.logprob.size());
  const auto cispo = policy_coefficients(cpu(), algo("cispo"), batch, nullptr);
  const auto dapo = policy_coefficients(cpu(), algo("dapo"), batch, nullptr);
  for (size_t s = 0; s < batch.size(); ++s)
    for (size_t t = 0; t < batch[s].logprob.size(); ++t) {
      const float reinforce = batch[s].advantage / static_cast<float>(N);
      EXPECT_FLOAT_EQ(cispo[s][t], reinforce);
      EXPECT_FLOAT_EQ(dapo[s][t], reinforce);
    }
}

// The same statement as parameter gradients of the policy, through tree
// batches: equal coefficients per (sample, position) give equal gradients,
// and an off-policy batch gives different ones (so the check can fail).
TEST(PolicyLoss, RatiosOfOneGiveEqualModelGradients) {
  Rng rng(2);
  ModelConfig mc;
  mc.vocab = ByteTokenizer::kVocabSize;
  mc.d_model = 32;
  mc.n_layers = 1;
  mc.n_heads = 2;
  mc.n_kv_heads = 2;
  mc.ffn_dim = 48;
  auto backend = make_backend("cpu");
  PolicyModel model(mc, *backend);
  model.init_random(4, 0.2f);
  std::vector<Sample> samples;
  for (int s = 0; s < 4; ++s) {
    Sample x;
    for (int t = 0; t < 6 + s; ++t) {
      x.tokens.push_back(static_cast<int32_t>(t < 4 ? 10 + t : rng.below(200)));
      x.trainable.push_back(t >= 4);
    }
    samples.push_back(x);
  }
  const auto bins = pack_forest(build_prefix_forest(samples, true), 4096);
  ASSERT_EQ(bins.size(), 1u);
  BinForward fwd;
  model.forward(bins[0], 1.0f, &fwd);
  // Current logprobs per (sample, position) from the forward.
  std::vector<SampleTokens> on(samples.size()), off(samples.size());
  for (size_t s = 0; s < samples.size(); ++s) on[s].advantage = off[s].advantage = static_cast<float>(s) - 1.5f;
  std::vector<std::vector<int>> pos(samples.size());
  for (int e = 0; e < bins[0].entries(); ++e)
    for (int r = bins[0].ref_begin[e]; r < bins[0].ref_begin[e + 1]; ++r) {
      const SampleRef ref = bins[0].refs[r];
      pos[ref.sample].push_back(ref.position);
      on[ref.sample].logprob.push_back(fwd.logprob[e]);
      on[ref.sample].behaviour_logprob.push_back(fwd.logprob[e]);
      off[ref.sample].logprob.push_back(fwd.logprob[e]);
      off[ref.sample].behaviour_logprob.push_back(fwd.logprob[e] - 0.5f);
    }
  auto grads_for = [&](const std::vector<std::vector<float>>& w) {
    model.zero_grads();
    BinForward f;
    model.forward(bins[0], 1.0f, &f);
    const auto ew = entry_weights(bins[0], [&](const SampleRef& ref) {
      const auto& p = pos[ref.sample];
      const size_t k = std::find(p.begin(), p.end(), ref.position) - p.begin();
      return w[ref.sample][k];
    });
    std::vector<float> dl(ew.size());
    for (size_t e = 0; e < ew.size(); ++e) dl[e] = -ew[e];
    model.backward(dl);
    return model.get_grads();
  };
  const auto g_cispo = grads_for(policy_coefficients(cpu(), algo("cispo"), on, nullptr));
  const auto g_dapo = grads_for(policy_coefficients(cpu(), algo("dapo"), on, nullptr));
  const auto g_off = grads_for(policy_coefficients(cpu(), algo("cispo"), off, nullptr));
  double diff = 0, diff_off = 0, norm = 0;
  for (size_t i = 0; i < g_cispo.size(); ++i) {
    diff += std::abs(g_cispo[i] - g_dapo[i]);
    diff_off += std::abs(g_cispo[i] - g_off[i]);
    norm += std::abs(g_cispo[i]);
  }
  EXPECT_GT(norm, 0.0);
  EXPECT_LE(diff, 1e-6 * norm);
  EXPECT_GT(diff_off, 1e-3 * norm);
}

TEST(PolicyLoss, NoGradientThroughTheRatio) {
  // CISPO's coefficient is sg(r^) A / N; the derivative of the same expression
  // without the stop-gradient has the extra term A lp dr^/dlp = A lp r inside
  // the clip range, so the two differ wherever lp != 0.
  SampleTokens s;
  s.advantage = 1.3f;
  s.behaviour_logprob = {-1.0f};
  s.logprob = {-0.9f};
  const auto w = policy_coefficients(cpu(), algo("cispo"), {s}, nullptr);
  const double r = std::exp(0.1);
  EXPECT_NEAR(w[0][0], r * 1.3, 1e-6);
  const double without_stop_gradient = r * 1.3 + 1.3 * (-0.9) * r;
  EXPECT_GT(std::abs(w[0][0] - without_stop_gradient), 0.1);
}

TEST(PolicyLoss, ClippedPositiveTokenKeepsGradientOnlyUnderCispo) {
  SampleTokens s;
  s.advantage = 2.0f;
  s.behaviour_logprob = {-2.0f};
  s.logprob = {-1.0f};  // r = e > 1 + eps_high
  PolicyLossStats st;
  const auto cispo = policy_coefficients(cpu(), algo("cispo"), {s}, &st);
  EXPECT_NEAR(cispo[0][0], (1.0f + 0.28f) * 2.0f, 1e-6);  // clipped weight, gradient kept
  EXPECT_EQ(st.clipped_tokens, 1);
  EXPECT_FLOAT_EQ(policy_coefficients(cpu(), algo("ppo"), {s}, nullptr)[0][0], 0.0f);
  EXPECT_FLOAT_EQ(policy_coefficients(cpu(), algo("dapo"), {s}, nullptr)[0][0], 0.0f);
  // A negative advantage with r > 1 + eps keeps PPO's gradient (min picks r A).
  s.advantage = -2.0f;
  EXPECT_NEAR(policy_coefficients(cpu(), algo("ppo"), {s}, nullptr)[0][0], std::exp(1.0) * -2.0, 1e-5);
}

// Each algorithm's default clip range, from both sides of each bound:
// PPO and GRPO [0.8, 1.2], DAPO [0.8, 1.28], CISPO [no lower bound, 1.28]
// (CISPO keeps a clipped token's gradient at the clipped weight; the others
// drop a token whose clipped term is the minimum). A changed default passed
// every other test (their ratios sat past both 1.2 and 1.28).
TEST(PolicyLoss, DefaultClipRangesOfEachAlgorithm) {
  const auto coefficient = [](const char* algorithm, double r, float advantage) {
    SampleTokens s;
    s.advantage = advantage;
    s.behaviour_logprob = {-1.0f};
    s.logprob = {static_cast<float>(-1.0 + std::log(r))};
    return static_cast<double>(policy_coefficients(cpu(), algo(algorithm), {s}, nullptr)[0][0]);
  };
  // A > 0: the upper bound.
  for (const char* a : {"ppo", "grpo"}) {
    EXPECT_NEAR(coefficient(a, 1.15, 1.0f), 1.15, 1e-5) << a;
    EXPECT_EQ(coefficient(a, 1.25, 1.0f), 0.0) << a;
  }
  EXPECT_NEAR(coefficient("dapo", 1.25, 1.0f), 1.25, 1e-5);
  EXPECT_EQ(coefficient("dapo", 1.3, 1.0f), 0.0);
  EXPECT_NEAR(coefficient("cispo", 1.25, 1.0f), 1.25, 1e-5);
  EXPECT_NEAR(coefficient("cispo", 1.3, 1.0f), 1.28, 1e-5);
  // A < 0: the lower bound.
  for (const char* a : {"ppo", "grpo", "dapo"}) {
    EXPECT_NEAR(coefficient(a, 0.85, -1.0f), -0.85, 1e-5) << a;
    EXPECT_EQ(coefficient(a, 0.75, -1.0f), 0.0) << a;
  }
  EXPECT_NEAR(coefficient("cispo", 0.5, -1.0f), -0.5, 1e-5);
}

TEST(PolicyLoss, MaskedTokensLeaveNumeratorAndDenominator) {
  Rng rng(3);
  auto batch = random_batch(rng, 5, false);
  for (auto& s : batch)
    for (size_t t = 0; t < s.logprob.size(); ++t)
      s.logprob[t] = s.behaviour_logprob[t] + 0.05f;  // all inside [0.5, 2]
  PolicyLossConfig c = algo("cispo");
  c.is_mask = "token";
  const auto base = policy_coefficients(cpu(), c, batch, nullptr);
  // Add one token far off policy to sample 2: it is masked, the rest unchanged.
  auto with_outlier = batch;
  with_outlier[2].behaviour_logprob.push_back(-5.0f);
  with_outlier[2].logprob.push_back(-1.0f);  // r = e^4
  PolicyLossStats st;
  const auto w = policy_coefficients(cpu(), c, with_outlier, &st);
  EXPECT_EQ(st.masked_tokens, 1);
  EXPECT_FLOAT_EQ(w[2].back(), 0.0f);
  for (size_t s = 0; s < batch.size(); ++s)
    for (size_t t = 0; t < batch[s].logprob.size(); ++t) EXPECT_FLOAT_EQ(w[s][t], base[s][t]);
  // Without masking the outlier changes the denominator of every token.
  const auto unmasked = policy_coefficients(cpu(), algo("cispo"), with_outlier, nullptr);
  EXPECT_NE(unmasked[0][0], policy_coefficients(cpu(), algo("cispo"), batch, nullptr)[0][0]);
}

// A NaN logprob (a damaged record, a rollout bug) gives its token no
// gradient under every objective and is never kept by a mask: clip() once
// turned its NaN ratio into clip_low, and the token mask kept it. Without a
// mask it is not in N either: the other tokens' coefficients are those of
// the batch without it (it once diluted them).
TEST(PolicyLoss, ANaNRatioCarriesNoGradient) {
  Rng rng(5);
  auto batch = random_batch(rng, 3, false);
  const auto clean = batch;
  batch[1].behaviour_logprob.push_back(std::nanf(""));
  batch[1].logprob.push_back(-1.0f);
  for (const char* name : {"cispo", "ppo", "grpo", "dapo"})
    for (const char* mask : {"none", "token", "sequence"}) {
      SCOPED_TRACE(std::string(name) + " mask " + mask);
      PolicyLossConfig c = algo(name);
      c.is_mask = mask;
      PolicyLossStats st;
      const auto w = policy_coefficients(cpu(), c, batch, &st);
      EXPECT_EQ(w[1].back(), 0.0f);
      EXPECT_TRUE(std::isfinite(st.objective));
      for (const auto& row : w)
        for (const float x : row) EXPECT_TRUE(std::isfinite(x));
      EXPECT_GE(st.masked_tokens, 1);
      if (std::string(mask) != "sequence") {  // "sequence" drops sample 1 whole
        const auto base = policy_coefficients(cpu(), c, clean, nullptr);
        for (size_t s = 0; s < base.size(); ++s)
          for (size_t t = 0; t < base[s].size(); ++t) EXPECT_FLOAT_EQ(w[s][t], base[s][t]) << s << " " << t;
      }
    }
}

// A current logprob of -inf (r = 0) under CISPO: no gradient, and the
// objective stays finite (r^ A lp was 0 * -inf = NaN).
TEST(PolicyLoss, AnInfiniteLogprobLeavesTheCispoObjectiveFinite) {
  SampleTokens s;
  s.advantage = 1.0f;
  s.behaviour_logprob = {-1, -2};
  s.logprob = {-std::numeric_limits<float>::infinity(), -2};
  PolicyLossStats st;
  const auto w = policy_coefficients(cpu(), algo("cispo"), {s}, &st);
  EXPECT_EQ(w[0][0], 0.0f);
  EXPECT_FLOAT_EQ(w[0][1], 0.5f);  // r = 1, N = 2
  EXPECT_TRUE(std::isfinite(st.objective)) << st.objective;
  EXPECT_DOUBLE_EQ(st.objective, -1.0);  // (0 + 1 * 1 * -2) / 2
  // With a lower clip, r^ = 0.8 keeps the token's gradient; its term would
  // be 0.8 * -inf (the objective was -inf).
  PolicyLossConfig clipped = algo("cispo");
  clipped.eps_low = 0.2f;
  const auto wc = policy_coefficients(cpu(), clipped, {s}, &st);
  EXPECT_FLOAT_EQ(wc[0][0], 0.4f);  // 0.8 * 1 / 2
  EXPECT_TRUE(std::isfinite(st.objective)) << st.objective;
  EXPECT_DOUBLE_EQ(st.objective, -1.0);
}

TEST(PolicyLoss, SequenceMaskDropsWholeSamples) {
  SampleTokens a, b;
  a.advantage = b.advantage = 1.0f;
  a.behaviour_logprob = {-1, -1};
  a.logprob = {-1, -1};
  b.behaviour_logprob = {-3, -3};
  b.logprob = {-1, -1};  // geometric mean ratio e^2 > 2
  PolicyLossConfig c = algo("cispo");
  c.is_mask = "sequence";
  PolicyLossStats st;
  const auto w = policy_coefficients(cpu(), c, {a, b}, &st);
  EXPECT_EQ(st.masked_tokens, 2);
  EXPECT_FLOAT_EQ(w[1][0], 0.0f);
  EXPECT_FLOAT_EQ(w[0][0], 0.5f);  // N = 2 kept tokens
}

TEST(Advantages, WithoutStdDivisionSmallDifferencesStaySmall) {
  // Two failed episodes whose rewards differ only by a process term, and a
  // group with a real outcome difference.
  const std::vector<float> r = {-0.10f, -0.11f, 1.0f, 0.0f};
  const std::vector<int32_t> g = {1, 1, 2, 2};
  const auto grpo = group_advantages(r, g, true);
  const auto dr = group_advantages(r, g, false);
  EXPECT_NEAR(grpo.advantage[0], 1.0f, 1e-3);   // std division blows 0.005 up to 1
  EXPECT_NEAR(dr.advantage[0], 0.005f, 1e-6);   // Dr. GRPO keeps it at 0.005
  EXPECT_NEAR(dr.advantage[1], -0.005f, 1e-6);
  EXPECT_NEAR(dr.advantage[2], 0.5f, 1e-6);
  EXPECT_NEAR(grpo.advantage[2], 1.0f, 1e-4);
  EXPECT_EQ(dr.zero_variance_groups, 0);
}

TEST(PolicyLoss, ZeroVarianceGroupsGiveZeroGradient) {
  const auto adv = group_advantages({1, 1, 1, 0, 1, 0.5f}, {7, 7, 7, 9, 9, 9});
  EXPECT_EQ(adv.groups, 2);
  EXPECT_EQ(adv.zero_variance_groups, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(adv.advantage[i], 0.0f);
  EXPECT_LT(adv.advantage[3], 0.0f);
  EXPECT_GT(adv.advantage[4], 0.0f);
  SampleTokens s;
  s.advantage = adv.advantage[0];
  s.behaviour_logprob = {-1, -2};
  s.logprob = {-0.5, -2.5};
  // No term that does not scale with A (a KL penalty, an entropy bonus) enters the coefficients.
  for (const char* name : {"cispo", "ppo", "grpo", "dapo"}) {
    const auto w = policy_coefficients(cpu(), algo(name), {s}, nullptr);
    for (float x : w[0]) EXPECT_EQ(x, 0.0f) << name;
  }
}

TEST(PolicyLoss, GrpoUsesSequenceMean) {
  SampleTokens a, b;
  a.advantage = b.advantage = 1.0f;
  a.behaviour_logprob = a.logprob = {-1};
  b.behaviour_logprob = b.logprob = {-1, -1, -1};
  const auto w = policy_coefficients(cpu(), algo("grpo"), {a, b}, nullptr);
  EXPECT_FLOAT_EQ(w[0][0], 0.5f);         // 1 / (|o_a| * S) = 1 / (1 * 2)
  EXPECT_FLOAT_EQ(w[1][0], 1.0f / 6.0f);  // 1 / (3 * 2)
}

TEST(CompositeReward, WeightsAndBatchNormalization) {
  RewardConfig c;
  c.outcome_weight = 1.0f;
  c.process_weight = 0.5f;
  c.efficiency_weight = 0.0f;
  std::vector<RewardComponents> comps(2);
  comps[0].outcome = 1;
  comps[0].process = 0.4f;
  comps[1].outcome = 0;
  comps[1].process = -0.2f;
  auto r = composite_rewards(c, comps);
  EXPECT_FLOAT_EQ(r[0], 1.2f);
  EXPECT_FLOAT_EQ(r[1], -0.1f);
  c.process_norm = "batch";  // process becomes +-1
  r = composite_rewards(c, comps);
  EXPECT_NEAR(r[0], 1.0 + 0.5, 1e-5);
  EXPECT_NEAR(r[1], 0.0 - 0.5, 1e-5);
  c.outcome_norm = "group";
  EXPECT_THROW(composite_rewards(c, comps), InputError);
}

// Each component's batch normalization is its own: efficiency's reaches
// only efficiency, and a component equal across the batch becomes 0 (std 0,
// no division by it), not NaN.
TEST(CompositeReward, EachComponentNormalizesOnItsOwn) {
  RewardConfig c;
  c.outcome_weight = 1.0f;
  c.process_weight = 0.25f;
  c.efficiency_weight = 2.0f;
  c.efficiency_norm = "batch";
  std::vector<RewardComponents> comps(3);
  for (int i = 0; i < 3; ++i) {
    comps[i].outcome = 0.5f;  // equal: unchanged here, 0 when normalized
    comps[i].process = 0.1f * static_cast<float>(i);
    comps[i].efficiency = -0.1f * static_cast<float>(i);  // 0, -0.1, -0.2: z ~ 1.2247, 0, -1.2247
  }
  const double z = 0.1 / (0.1 * std::sqrt(2.0 / 3.0) + 1e-6);  // (x - mean) / (std + 1e-6)
  std::vector<float> r = composite_rewards(c, comps);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(r[i], 0.5 + 0.25 * 0.1 * i + 2.0 * z * (1 - i), 1e-5) << i;
  c.outcome_norm = "batch";
  r = composite_rewards(c, comps);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(std::isfinite(r[i])) << i;
    EXPECT_NEAR(r[i], 0.25 * 0.1 * i + 2.0 * z * (1 - i), 1e-5) << i;
  }
}

// Safety adds w_s * safety and is never standardized: an episode without
// safety events keeps 0 from it whatever the batch holds.
TEST(CompositeReward, SafetyIsWeightedAndNeverNormalized) {
  RewardConfig c;
  c.outcome_weight = 1.0f;
  c.process_weight = 0.0f;
  c.efficiency_weight = 0.0f;
  c.safety_weight = 0.5f;
  c.outcome_norm = "batch";
  std::vector<RewardComponents> comps(2);
  comps[0].outcome = 1;
  comps[0].safety = -2;  // two safety events
  comps[1].outcome = 0;
  const auto r = composite_rewards(c, comps);
  EXPECT_NEAR(r[0], 1.0 - 1.0, 1e-5);
  EXPECT_NEAR(r[1], -1.0, 1e-5);
}

}  // namespace
}  // namespace forge
