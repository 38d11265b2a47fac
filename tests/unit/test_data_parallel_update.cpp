// Data-parallel learners: the batch's samples split over K learners, each
// running policy_forward_backward on its shard with whole-batch denominators
// (sum_across_shards), give gradients whose sum equals one learner's gradient
// on the whole batch, for every loss and masking mode. The learners run as
// threads here, with a barrier-based sum in place of MPI_Allreduce. Also:
// abandoned episodes leave the loss, several bins give one bin's gradient,
// and a merged batch reports the statistics of a linear one.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "algo/policy_update.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "unit/tiny_agent_episodes.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

// Scaffold-produced episodes (8 groups of 2) with outcomes and behaviour
// logprobs perturbed so that advantages, clipping and masks all occur.
std::vector<Trajectory> episodes(PolicyModel& model) {
  std::vector<Trajectory> out = tiny_agent_episodes(model, 16, 500, /*perturb=*/true, /*sampling_seed=*/3);
  Rng rng(11);
  for (Trajectory& t : out) {
    t.reward.outcome = static_cast<float>(rng.uniform());
    for (auto& c : t.calls)
      for (float& lp : c.logprobs) lp += static_cast<float>(0.6 * (rng.uniform() - 0.5));
  }
  return out;
}

// Sums over `parties` threads, in call order (every party makes the same calls).
class ThreadSum {
 public:
  explicit ThreadSum(int parties) : parties_(parties), barrier_(parties) {}
  void operator()(double* v, int n) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (acc_.size() < static_cast<size_t>(n)) acc_.resize(n, 0.0);
      for (int i = 0; i < n; ++i) acc_[i] += v[i];
    }
    barrier_.arrive_and_wait();
    for (int i = 0; i < n; ++i) v[i] = acc_[i];
    barrier_.arrive_and_wait();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (++read_ == parties_) acc_.assign(acc_.size(), 0.0), read_ = 0;
    }
    barrier_.arrive_and_wait();
  }

 private:
  int parties_;
  std::barrier<> barrier_;
  std::mutex mutex_;
  std::vector<double> acc_;
  int read_ = 0;
};

// One learner per shard, each a copy of `model` on its own thread, with a
// ThreadSum as sum_across_shards; learner k takes shard shard_of(k) of
// `shards`. Errors are caught per learner.
struct ShardRun {
  std::vector<std::unique_ptr<PolicyModel>> models;
  std::vector<PolicyUpdateStats> stats;
  std::vector<std::string> errors;
};

ShardRun run_shards(PolicyModel& model, const std::vector<Trajectory>& trajs, const PolicyUpdateConfig& cfg,
                    int shards, const std::function<int(int)>& shard_of) {
  ShardRun run;
  for (int k = 0; k < shards; ++k) {
    run.models.push_back(std::make_unique<PolicyModel>(tiny_agent_model_config(), model.backend()));
    run.models.back()->set_params(model.get_params());
    run.models.back()->zero_grads();
  }
  run.stats.resize(shards);
  run.errors.resize(shards);
  ThreadSum sum(shards);
  std::vector<std::thread> threads;
  for (int k = 0; k < shards; ++k)
    threads.emplace_back([&, k] {
      PolicyUpdateConfig c = cfg;
      c.shard = shard_of(k);
      c.shards = shards;
      c.sum_across_shards = [&sum](double* v, int n) { sum(v, n); };
      try {
        run.stats[k] = policy_forward_backward(*run.models[k], trajs, c);
      } catch (const Error& e) {
        run.errors[k] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return run;
}

struct Case {
  const char* algorithm;
  const char* is_mask;
};

class DataParallelUpdate : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelUpdate, ShardGradientsSumToTheWholeBatchGradient) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(21);
  const std::vector<Trajectory> trajs = episodes(model);

  PolicyUpdateConfig cfg;
  cfg.loss.algorithm = GetParam().algorithm;
  cfg.loss.is_mask = GetParam().is_mask;
  cfg.loss.is_low = 0.85f;
  cfg.loss.is_high = 1.15f;
  cfg.max_tokens = 512;  // several bins
  model.zero_grads();
  const PolicyUpdateStats whole = policy_forward_backward(model, trajs, cfg);
  const std::vector<float> g1 = model.get_grads();
  ASSERT_GT(whole.samples, 8);
  ASSERT_GT(whole.loss.kept_tokens, 0);

  for (int shards : {2, 3}) {
    const ShardRun run = run_shards(model, trajs, cfg, shards, [](int k) { return k; });
    for (const std::string& e : run.errors) ASSERT_EQ(e, "");
    const auto& models = run.models;
    const auto& stats = run.stats;
    std::vector<double> g(g1.size(), 0.0);
    for (auto& m : models) {
      const std::vector<float> gk = m->get_grads();
      for (size_t i = 0; i < g.size(); ++i) g[i] += gk[i];
    }
    double err = 0, ref = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      err = std::max(err, std::abs(g[i] - g1[i]));
      ref = std::max(ref, std::abs(double(g1[i])));
    }
    ASSERT_GT(ref, 0);
    EXPECT_LE(err / ref, 1e-5) << shards << " shards";
    for (const auto& s : stats) {  // every learner reports the whole batch
      EXPECT_EQ(s.samples, whole.samples);
      EXPECT_EQ(s.loss.tokens, whole.loss.tokens);
      EXPECT_EQ(s.loss.kept_tokens, whole.loss.kept_tokens);
      EXPECT_NEAR(s.loss.objective, whole.loss.objective, 1e-5 * (1 + std::abs(whole.loss.objective)));
    }
    // Each shard holds only part of the gradient.
    const std::vector<float> g0 = models[0]->get_grads();
    double part = 0;
    for (size_t i = 0; i < g.size(); ++i) part = std::max(part, std::abs(double(g0[i]) - g1[i]));
    EXPECT_GT(part / ref, 1e-2);
  }
}

// Shards that do not partition the batch (two learners on shard 0) and
// several shards without the sum of their statistics are refused.
TEST(PolicyUpdate, ShardsThatDoNotPartitionTheBatchAreRefused) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(21);
  const std::vector<Trajectory> trajs = episodes(model);
  PolicyUpdateConfig cfg;
  cfg.shards = 2;
  EXPECT_THROW(policy_forward_backward(model, trajs, cfg), Error);  // no sum_across_shards
  const ShardRun run = run_shards(model, trajs, cfg, 2, [](int) { return 0; });  // both on shard 0
  for (const std::string& e : run.errors) EXPECT_NE(e.find("shards hold"), std::string::npos) << e;
}

// Abandoned episodes (a dead agent, an engine error) are left out of the
// rewards, the advantages and the loss: the gradient is the one of the
// batch without them.
TEST(PolicyUpdate, AbandonedEpisodesAreLeftOut) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(22);
  std::vector<Trajectory> all = episodes(model), kept;
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].abandoned = i % 5 == 1;
    if (!all[i].abandoned) kept.push_back(all[i]);
  }
  PolicyUpdateConfig cfg;
  model.zero_grads();
  const PolicyUpdateStats with = policy_forward_backward(model, all, cfg);
  const std::vector<float> g_with = model.get_grads();
  model.zero_grads();
  const PolicyUpdateStats without = policy_forward_backward(model, kept, cfg);
  const std::vector<float> g_without = model.get_grads();
  EXPECT_EQ(with.abandoned, static_cast<int>(all.size() - kept.size()));
  EXPECT_EQ(with.samples, without.samples);
  EXPECT_GT(with.samples, 0);
  EXPECT_DOUBLE_EQ(with.reward_mean, without.reward_mean);
  EXPECT_EQ(g_with, g_without);
  double norm = 0;
  for (float g : g_with) norm += double(g) * g;
  EXPECT_GT(norm, 0);
}

// The update packs the batch into bins of at most max_tokens; pass 2 reuses
// the activations pass 1 left of bin 0 and recomputes the others. Several
// bins must give the gradient and loss of one.
TEST(PolicyUpdate, SeveralBinsGiveTheGradientOfOne) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(23);
  const std::vector<Trajectory> trajs = episodes(model);
  PolicyUpdateConfig cfg;
  cfg.max_tokens = 1 << 20;
  model.zero_grads();
  const PolicyUpdateStats one = policy_forward_backward(model, trajs, cfg);
  const std::vector<float> g_one = model.get_grads();
  cfg.max_tokens = 512;
  model.zero_grads();
  const PolicyUpdateStats several = policy_forward_backward(model, trajs, cfg);
  const std::vector<float> g_several = model.get_grads();
  ASSERT_GT(several.tree_tokens, 3 * 512) << "the batch should need several bins";
  // and a tree larger than a bin, split: its parts repeat the shared path
  ASSERT_GT(several.tree_tokens, one.tree_tokens) << "no tree was split";
  EXPECT_NEAR(several.loss.objective, one.loss.objective, 1e-5 * (1 + std::abs(one.loss.objective)));
  double err = 0, ref = 0;
  for (size_t i = 0; i < g_one.size(); ++i) {
    err = std::max(err, std::abs(double(g_several[i]) - g_one[i]));
    ref = std::max(ref, std::abs(double(g_one[i])));
  }
  ASSERT_GT(ref, 0);
  EXPECT_LE(err / ref, 1e-5);
}

// One step merged and one with each call alone, from the same weights: the
// gradient, loss, entropy and token counts agree; the merge ran fewer rows.
// Returns the linear step's statistics.
PolicyUpdateStats expect_merged_equals_linear(PolicyModel& model, const std::vector<Trajectory>& trajs,
                                              PolicyUpdateConfig cfg) {
  cfg.merge = true;
  model.zero_grads();
  const PolicyUpdateStats merged = policy_forward_backward(model, trajs, cfg);
  const std::vector<float> g_merged = model.get_grads();
  cfg.merge = false;
  model.zero_grads();
  const PolicyUpdateStats linear = policy_forward_backward(model, trajs, cfg);
  const std::vector<float> g_linear = model.get_grads();
  double err = 0, ref = 0;  // and the gradient, through pass 2's coefficients per reference
  for (size_t i = 0; i < g_linear.size(); ++i) {
    err = std::max(err, std::abs(double(g_merged[i]) - g_linear[i]));
    ref = std::max(ref, std::abs(double(g_linear[i])));
  }
  EXPECT_GT(ref, 0);
  EXPECT_LE(err / ref, 1e-5);
  EXPECT_LT(merged.tree_tokens, linear.tree_tokens) << "the episodes should share prefixes";
  EXPECT_EQ(merged.linear_tokens, linear.linear_tokens);
  EXPECT_EQ(merged.loss.kept_tokens, linear.loss.kept_tokens);
  EXPECT_NEAR(merged.loss.objective, linear.loss.objective, 1e-5 * (1 + std::abs(linear.loss.objective)));
  EXPECT_GT(linear.entropy_mean, 0);
  EXPECT_NEAR(merged.entropy_mean, linear.entropy_mean, 1e-5 * linear.entropy_mean);
  return linear;
}

// Prefix-tree merging changes how many rows run, not what the step reports:
// loss, entropy, token counts and the gradient equal those of every call run
// alone.
TEST(PolicyUpdate, MergedStatsEqualLinearStats) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(24);
  // Unperturbed: a group's episodes share their opening, so one row (the
  // opening's last token) predicts both first tokens.
  std::vector<Trajectory> trajs = tiny_agent_episodes(model, 16, 500, /*perturb=*/false, /*sampling_seed=*/3);
  for (size_t i = 0; i < trajs.size(); ++i) trajs[i].reward.outcome = static_cast<float>(i % 3);
  PolicyUpdateConfig cfg;
  cfg.max_tokens = 1 << 20;
  cfg.inv_temperature = 40;  // peaked: entropies that differ from row to row
  expect_merged_equals_linear(model, trajs, cfg);
}

// The same for every loss and mask, with behaviour logprobs that differ
// from episode to episode on the tokens their trees share (as they do
// off-policy): a merge that kept one old logprob per tree node instead of
// one per sample would fail. (At the sampling temperature: the ratios must
// be near 1 for the clip and the masks to keep tokens.)
TEST(PolicyUpdate, MergedEqualsLinearForEveryLossOffPolicy) {
  set_compute_threads(1);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_agent_model_config(), *backend);
  model.init_random(24);
  std::vector<Trajectory> trajs = tiny_agent_episodes(model, 16, 500, /*perturb=*/false, /*sampling_seed=*/3);
  // Pairs of episodes with one first call: its generated tokens are shared
  // trainable nodes of the tree.
  for (size_t i = 0; i + 1 < trajs.size(); i += 2) trajs[i + 1].calls[0] = trajs[i].calls[0];
  for (size_t i = 0; i < trajs.size(); ++i) {
    trajs[i].reward.outcome = static_cast<float>(i % 3);
    for (LlmCall& c : trajs[i].calls)
      for (size_t t = 0; t < c.logprobs.size(); ++t)
        // Ratios e^-0.8 .. e^0.8 (clipped, and masked outside [0.5, 2]),
        // about 1 over a sequence (kept by the sequence mask).
        c.logprobs[t] += std::array<float, 4>{-0.8f, -0.1f, 0.1f, 0.8f}[(i + t) % 4];
  }
  // Bins of one call's worth too: the merged trees are then split, their parts
  // repeat the shared path, and pass 1's logprobs and the entropy weights are
  // gathered across bins.
  size_t longest = 0;
  for (const Trajectory& t : trajs)
    for (const LlmCall& c : t.calls) longest = std::max(longest, c.context.size() + c.generated.size());
  const int32_t tight = static_cast<int32_t>(longest + 2);
  {
    PolicyUpdateConfig one, split;
    one.max_tokens = 1 << 20;
    split.max_tokens = tight;
    ASSERT_GT(policy_forward_backward(model, trajs, split).tree_tokens,
              policy_forward_backward(model, trajs, one).tree_tokens)
        << "bins of " << tight << " tokens split no tree";
  }
  for (const int32_t max_tokens : {int32_t{1} << 20, tight})
    for (const Case& loss : {Case{"cispo", "none"}, Case{"cispo", "token"}, Case{"ppo", "none"},
                             Case{"grpo", "sequence"}, Case{"dapo", "token"}}) {
      SCOPED_TRACE(std::string(loss.algorithm) + " " + loss.is_mask + " bins of " + std::to_string(max_tokens));
      PolicyUpdateConfig cfg;
      cfg.max_tokens = max_tokens;
      cfg.loss.algorithm = loss.algorithm;
      cfg.loss.is_mask = loss.is_mask;
      EXPECT_GT(expect_merged_equals_linear(model, trajs, cfg).loss.clipped_tokens, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Losses, DataParallelUpdate,
                         ::testing::Values(Case{"cispo", "none"}, Case{"cispo", "token"},
                                           Case{"ppo", "none"}, Case{"grpo", "sequence"},
                                           Case{"dapo", "token"}),
                         [](const auto& info) {
                           return std::string(info.param.algorithm) + "_" + info.param.is_mask;
                         });

}  // namespace
}  // namespace forge
