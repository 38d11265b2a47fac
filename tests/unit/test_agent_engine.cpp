// Episodes against the real rollout engine with a tiny random model: they
// run to completion, the trajectories are well formed, the engine reuses the
// episodes' cached prefixes, and a greedy or sampled run is reproducible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "agent/run_episodes.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

EngineConfig engine_config(int max_batch = 16) {
  EngineConfig e;
  e.max_batch = max_batch;
  e.max_seq_len = 384;
  e.kv_cache_tokens = 16 * 384;
  e.block_size = 16;
  e.prefill_chunk = 512;
  return e;
}

AgentConfig agent_config(float temperature) {
  AgentConfig a;
  a.max_turns = 3;
  a.max_new_tokens = 24;
  a.max_context_tokens = 320;
  a.max_episode_tokens = 64;
  a.sampling.temperature = temperature;
  a.sampling.seed = 7;
  return a;
}

std::vector<Trajectory> run(PolicyModel& model, float temperature, EngineStats* stats = nullptr, int max_batch = 16) {
  EnvConfig env;
  const EnvMix mix(env);
  const PerturbationSampler sampler(true, env.heldout_list());
  std::vector<AgentEpisode> episodes;
  for (uint64_t i = 0; i < 12; ++i)
    episodes.push_back(make_episode(mix, sampler, agent_config(temperature), 100 + i / 2, i,
                                    i % 3 == 2 ? StyleMode::kHeldOut : StyleMode::kTrain,
                                    static_cast<int32_t>(i / 2)));
  RolloutEngine engine(model, engine_config(max_batch));
  engine.set_policy_version(4);
  std::vector<size_t> done_counts;  // after each step: the progress a caller reports
  const DriverStats d = run_episodes(engine, episodes, nullptr, [&](size_t done) { done_counts.push_back(done); });
  EXPECT_TRUE(engine.idle());
  EXPECT_GE(d.requests, 12);
  EXPECT_EQ(done_counts.size(), static_cast<size_t>(d.engine_steps));
  EXPECT_TRUE(std::is_sorted(done_counts.begin(), done_counts.end()));
  if (!done_counts.empty()) {
    EXPECT_EQ(done_counts.back(), episodes.size());
  }
  if (stats) *stats = engine.stats();
  std::vector<Trajectory> out;
  for (auto& ep : episodes) {
    EXPECT_TRUE(ep.done());
    out.push_back(ep.take_trajectory());
  }
  return out;
}

TEST(AgentEngine, EpisodesRunToCompletionWithWellFormedTrajectories) {
  CpuBackend backend;
  PolicyModel model(tiny_agent_model_config(), backend);
  model.init_random(3, 0.1f);
  EngineStats stats;
  std::vector<Trajectory> ts;
  ASSERT_NO_THROW(ts = run(model, 1.0f, &stats));
  const std::set<std::string> reasons = {"answer", "turn_budget", "token_budget", "context_budget"};
  std::set<uint64_t> ids;
  for (const Trajectory& t : ts) {
    ids.insert(t.episode_id);
    EXPECT_TRUE(reasons.count(t.end_reason)) << t.end_reason;
    EXPECT_FALSE(t.abandoned);
    ASSERT_FALSE(t.calls.empty());
    EXPECT_EQ(static_cast<int>(t.calls.size()), t.turns);
    EXPECT_LE(t.turns, 3);
    int generated = 0;
    for (const LlmCall& c : t.calls) {
      EXPECT_FALSE(c.context.empty());
      EXPECT_LE(c.context.size(), 320u);
      EXPECT_EQ(c.context[0], kBos);
      EXPECT_LE(c.generated.size(), 24u);
      ASSERT_EQ(c.logprobs.size(), c.generated.size());
      ASSERT_EQ(c.versions.size(), c.generated.size());
      for (float lp : c.logprobs) EXPECT_TRUE(std::isfinite(lp) && lp <= 0);
      for (int32_t v : c.versions) EXPECT_EQ(v, 4);
      for (int32_t tok : c.generated) EXPECT_TRUE(tok >= 0 && tok < ByteTokenizer::kVocabSize);
      generated += static_cast<int>(c.generated.size());
    }
    EXPECT_LE(generated, 64);
    EXPECT_EQ(t.oldest_version(), 4);
    for (const auto& s : t.signals) EXPECT_LT(s.turn, t.turns);
    EXPECT_TRUE(std::isfinite(t.reward.process) && std::isfinite(t.reward.efficiency));
    EXPECT_GE(t.reward.outcome, 0);
    EXPECT_LE(t.reward.outcome, 1);
    EXPECT_LE(t.reward.efficiency, 0);
  }
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_GT(stats.prefill_reused, 0) << "later calls should reuse the episode's cached prefix";
}

TEST(AgentEngine, GreedyRunsAreReproducible) {
  CpuBackend backend;
  PolicyModel model(tiny_agent_model_config(), backend);
  model.init_random(5, 0.1f);
  const auto a = run(model, 0.0f), b = run(model, 0.0f);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].calls.size(), b[i].calls.size());
    for (size_t k = 0; k < a[i].calls.size(); ++k) {
      EXPECT_EQ(a[i].calls[k].context, b[i].calls[k].context);
      EXPECT_EQ(a[i].calls[k].generated, b[i].calls[k].generated);
    }
  }
}

// Sampling draws from per-call seeds (the episode's and the call's), so a
// sampled run is reproducible too, whatever the engine's batching.
TEST(AgentEngine, SampledRunsAreReproducibleAcrossBatchSizes) {
  CpuBackend backend;
  PolicyModel model(tiny_agent_model_config(), backend);
  model.init_random(5, 0.1f);
  const auto a = run(model, 1.0f), b = run(model, 1.0f), c = run(model, 1.0f, nullptr, 3);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  std::set<Tokens> distinct;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].calls.size(), b[i].calls.size());
    ASSERT_EQ(a[i].calls.size(), c[i].calls.size()) << "episode " << i;
    for (size_t k = 0; k < a[i].calls.size(); ++k) {
      EXPECT_EQ(a[i].calls[k].context, b[i].calls[k].context);
      EXPECT_EQ(a[i].calls[k].generated, b[i].calls[k].generated);
      EXPECT_EQ(a[i].calls[k].logprobs, b[i].calls[k].logprobs);
      EXPECT_EQ(a[i].calls[k].generated, c[i].calls[k].generated) << "episode " << i << " call " << k;
      ASSERT_EQ(a[i].calls[k].logprobs.size(), c[i].calls[k].logprobs.size());
      for (size_t t = 0; t < a[i].calls[k].logprobs.size(); ++t)
        EXPECT_NEAR(a[i].calls[k].logprobs[t], c[i].calls[k].logprobs[t], 1e-4);  // other GEMM shapes
    }
    distinct.insert(a[i].calls[0].generated);
  }
  EXPECT_GT(distinct.size(), 6u);  // sampled: the episodes' first replies differ
}

TEST(AgentEngine, ContextBudgetMustFitTheEngine) {
  CpuBackend backend;
  PolicyModel model(tiny_agent_model_config(), backend);
  model.init_random(3, 0.1f);
  RolloutEngine engine(model, engine_config());
  AgentConfig a = agent_config(1.0f);
  a.max_context_tokens = 380;
  const EnvMix mix(EnvConfig{});
  std::vector<AgentEpisode> episodes;
  episodes.push_back(AgentEpisode(mix.make_for(1), 1, ScaffoldStyle{}, a, 0));
  EXPECT_THROW(run_episodes(engine, episodes), InputError);
}

}  // namespace
}  // namespace forge
