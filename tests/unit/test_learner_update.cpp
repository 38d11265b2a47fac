// Learner::update (learner/learner.hpp) steps AdamW only when the batch
// trains something: with every token masked by the importance-sampling mask
// (the behaviour logprobs far from the learner's), the weights, AdamW's
// moments and its step count stay as they were (momentum and weight decay
// once moved them with no signal); the same batch unmasked takes a step.
#include <gtest/gtest.h>

#include "backend/backend_registry.hpp"
#include "learner/learner.hpp"
#include "unit/tiny_agent_episodes.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

struct LearnerUpdate : ::testing::Test {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PolicyModel> model;
  std::vector<Trajectory> episodes;

  void SetUp() override {
    set_compute_threads(1);
    backend = make_backend("cpu");
    model = std::make_unique<PolicyModel>(tiny_agent_model_config(), *backend);
    model->init_random(31);
    episodes = tiny_agent_episodes(*model, 8, 700, /*perturb=*/false, /*sampling_seed=*/5, /*version=*/0);
    for (size_t i = 0; i < episodes.size(); ++i) episodes[i].reward.outcome = static_cast<float>(i % 2);
  }

  std::unique_ptr<AdamW> opt;

  // One update under the token mask with the fixture's optimizer (its
  // moments carry over between calls); its steps after it.
  int update(const std::vector<Trajectory>& batch, double* grad_norm, PolicyUpdateStats* st) {
    if (!opt) {
      OptimConfig optim;
      optim.weight_decay = 0.1f;
      opt = std::make_unique<AdamW>(optim, *model);
    }
    LearnerSetup setup;
    setup.lead = false;
    setup.update.loss.is_mask = "token";
    Learner learner(setup, *model, *opt, LearnerStart{});
    *st = learner.update(batch, 0, grad_norm);
    return opt->steps_taken();
  }
};

TEST_F(LearnerUpdate, EveryTokenMaskedTakesNoStep) {
  // A step first, so that the moments are not zero.
  double norm = -1;
  PolicyUpdateStats st;
  std::vector<float> before = model->get_params();
  EXPECT_EQ(update(episodes, &norm, &st), 1);
  EXPECT_GT(st.loss.kept_tokens, 0);
  EXPECT_GT(norm, 0.0);
  EXPECT_NE(model->get_params(), before);
  const std::vector<float> m = opt->m().download(), v = opt->v().download();
  ASSERT_NE(m, std::vector<float>(m.size(), 0.0f));

  std::vector<Trajectory> far = episodes;
  for (Trajectory& t : far)
    for (auto& c : t.calls)
      for (float& lp : c.logprobs) lp -= 5.0f;  // ratio e^5, outside [0.5, 2]
  before = model->get_params();
  EXPECT_EQ(update(far, &norm, &st), 1);
  ASSERT_GT(st.samples, 0);
  EXPECT_EQ(st.loss.kept_tokens, 0);
  EXPECT_EQ(norm, 0.0);
  EXPECT_EQ(model->get_params(), before);
  EXPECT_EQ(opt->m().download(), m);
  EXPECT_EQ(opt->v().download(), v);

  // The same batch as generated again: a step, and the weights move.
  EXPECT_EQ(update(episodes, &norm, &st), 2);
  EXPECT_GT(st.loss.kept_tokens, 0);
  EXPECT_NE(model->get_params(), before);
}

}  // namespace
}  // namespace forge
