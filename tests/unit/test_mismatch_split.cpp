// The split of |log pi_learner - log pi_behaviour| by token staleness
// (algo/policy_update.hpp): on tokens the same weights generated (staleness
// 0) it is the engine/learner numerical mismatch, at most 1e-5 in FP32 on the
// CPU; the same tokens counted as generated two versions back land in bin 2
// with the same value; behaviour logprobs shifted on the stale half show up
// as stale_drift and leave engine_mismatch alone; a call whose weights
// changed midway counts wholly at its oldest version.
#include <gtest/gtest.h>

#include <cmath>

#include "algo/policy_update.hpp"
#include "backend/backend_registry.hpp"
#include "unit/tiny_agent_episodes.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

std::vector<Trajectory> generated_at(PolicyModel& model, int32_t version) {
  std::vector<Trajectory> out = tiny_agent_episodes(model, 8, 700, /*perturb=*/false, /*sampling_seed=*/5, version);
  for (size_t i = 0; i < out.size(); ++i) out[i].reward.outcome = static_cast<float>(i % 2);  // no zero-variance group
  return out;
}

int64_t generated_tokens(const std::vector<Trajectory>& trajs) {
  int64_t n = 0;
  for (const auto& t : trajs)
    for (const auto& c : t.calls) n += static_cast<int64_t>(c.generated.size());
  return n;
}

class MismatchSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    set_compute_threads(1);
    backend_ = make_backend("cpu");
    model_ = std::make_unique<PolicyModel>(tiny_agent_model_config(), *backend_);
    model_->init_random(31);
    trajs_ = generated_at(*model_, 5);
    ASSERT_GT(generated_tokens(trajs_), 50);
  }
  PolicyUpdateStats update(const std::vector<Trajectory>& trajs, int64_t version) {
    PolicyUpdateConfig cfg;
    cfg.policy_version = version;
    model_->zero_grads();
    return policy_forward_backward(*model_, trajs, cfg);
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<PolicyModel> model_;
  std::vector<Trajectory> trajs_;
};

TEST_F(MismatchSplit, SameVersionTokensMeasureTheEngineLearnerMismatch) {
  const PolicyUpdateStats st = update(trajs_, 5);
  EXPECT_EQ(st.tokens_by_staleness[0], generated_tokens(trajs_));
  EXPECT_LE(st.engine_mismatch, 1e-5);
  EXPECT_TRUE(std::isnan(st.stale_drift));
  for (int b = 1; b < kDriftBuckets; ++b) EXPECT_EQ(st.tokens_by_staleness[b], 0);

  const PolicyUpdateStats later = update(trajs_, 7);
  EXPECT_TRUE(std::isnan(later.engine_mismatch));
  EXPECT_EQ(later.tokens_by_staleness[2], generated_tokens(trajs_));
  EXPECT_NEAR(later.drift_by_staleness[2], st.engine_mismatch, 1e-12);
  EXPECT_NEAR(later.stale_drift, st.engine_mismatch, 1e-12);

  const PolicyUpdateStats far = update(trajs_, 5 + 40);
  EXPECT_EQ(far.tokens_by_staleness[kDriftBuckets - 1], generated_tokens(trajs_)) << "the last bin holds >= 15";
}

TEST_F(MismatchSplit, StaleTokensCarryTheDriftAndLeaveTheMismatchAlone) {
  std::vector<Trajectory> mixed = trajs_;
  int64_t stale = 0;
  for (size_t i = 0; i < mixed.size(); i += 2)
    for (auto& c : mixed[i].calls) {
      for (auto& v : c.versions) v = 4;  // one version behind
      for (auto& lp : c.logprobs) lp -= 0.25f;
      stale += static_cast<int64_t>(c.generated.size());
    }
  ASSERT_GT(stale, 0);
  const PolicyUpdateStats st = update(mixed, 5);
  EXPECT_EQ(st.tokens_by_staleness[1], stale);
  EXPECT_EQ(st.tokens_by_staleness[0], generated_tokens(mixed) - stale);
  EXPECT_LE(st.engine_mismatch, 1e-5);
  EXPECT_NEAR(st.stale_drift, 0.25, 1e-4);
  EXPECT_NEAR(st.drift_by_staleness[1], 0.25, 1e-4);
}

TEST_F(MismatchSplit, CallThatChangedWeightsMidwayCountsAtItsOldestVersion) {
  std::vector<Trajectory> mixed = trajs_;
  LlmCall* call = nullptr;
  for (auto& t : mixed)
    for (auto& c : t.calls)
      if (!call && c.generated.size() >= 4) call = &c;
  ASSERT_NE(call, nullptr);
  for (size_t j = 0; j < call->versions.size() / 2; ++j) call->versions[j] = 3;  // then 5 from the middle on
  const PolicyUpdateStats st = update(mixed, 5);
  EXPECT_EQ(st.tokens_by_staleness[2], static_cast<int64_t>(call->generated.size()));
  EXPECT_EQ(st.tokens_by_staleness[0], generated_tokens(mixed) - static_cast<int64_t>(call->generated.size()));
}

}  // namespace
}  // namespace forge
