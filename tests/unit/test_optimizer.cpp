// AdamW and the learning-rate schedule (model/optimizer.hpp) against an
// independent double-precision statement of their math, for two models
// (tied and untied embeddings, a Qwen2-style q/k/v bias): 10 steps of
// random gradients with clipping active, warm-up 3 and cosine decay to
// min_lr_ratio at total_steps; weight decay on matrices (the LM head, and a
// tied embedding) only, never on norms, biases or an untied embedding.
// Every other test compares AdamW with itself (CPU against CUDA, resumed
// against uninterrupted): a mistake both shared would pass them.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/optimizer.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

// Which tensors decay, by name: the rule the optimizer must follow.
bool decays(const std::string& name, bool tied) {
  if (name.find("norm") != std::string::npos || name.find("bqkv") != std::string::npos) return false;
  if (name == "embed") return tied;
  return true;
}

double schedule(const OptimConfig& c, int t) {
  if (t < c.warmup_steps) return c.lr * (t + 1.0) / c.warmup_steps;
  const double progress = std::min(1.0, (t - c.warmup_steps) / double(c.total_steps - c.warmup_steps));
  return c.lr * (c.min_lr_ratio + (1 - c.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

TEST(AdamW, MatchesADoublePrecisionReference) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied embeddings" : "untied embeddings");
    ModelConfig mc = tiny_agent_model_config();
    mc.tied_embeddings = tied;
    mc.qkv_bias = true;
    const auto backend = make_backend("cpu");
    PolicyModel model(mc, *backend);
    model.init_random(3, 0.1f);
    OptimConfig oc;
    oc.lr = 1e-2f;
    oc.weight_decay = 0.1f;
    oc.grad_clip = 0.5f;
    oc.warmup_steps = 3;
    oc.schedule = "cosine";
    oc.total_steps = 10;
    oc.min_lr_ratio = 0.1f;
    AdamW opt(oc, model);
    for (const auto& t : model.layout().tensors) EXPECT_EQ(t.decay, decays(t.name, tied)) << t.name;

    const size_t n = model.layout().total;
    const std::vector<float> start = model.get_params();
    std::vector<double> p(start.begin(), start.end()), m(n, 0.0), v(n, 0.0);
    Rng rng(5);
    double worst = 0;
    for (int step = 0; step < 10; ++step) {
      std::vector<float> g(n);
      for (auto& x : g) x = static_cast<float>(rng.normal() * 0.05);
      backend->copy(model.grads(), g.data(), n * sizeof(float));
      double norm = 0;
      for (const float x : g) norm += static_cast<double>(x) * x;
      norm = std::sqrt(norm);
      ASSERT_GT(norm, oc.grad_clip) << "the case must clip";
      const double scale = oc.grad_clip / norm, lr = schedule(oc, step);
      EXPECT_NEAR(learning_rate_at(oc, step), lr, 1e-7 * oc.lr) << "step " << step;
      EXPECT_NEAR(opt.step(), norm, 1e-9 * norm) << "the returned norm is the one before clipping";
      for (const auto& t : model.layout().tensors) {
        const double wd = decays(t.name, tied) ? oc.weight_decay : 0.0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
          const double gi = g[i] * scale;
          m[i] = oc.beta1 * m[i] + (1 - oc.beta1) * gi;
          v[i] = oc.beta2 * v[i] + (1 - oc.beta2) * gi * gi;
          const double mh = m[i] / (1 - std::pow(oc.beta1, step + 1)), vh = v[i] / (1 - std::pow(oc.beta2, step + 1));
          p[i] -= lr * (mh / (std::sqrt(vh) + oc.eps) + wd * p[i]);
        }
      }
      const std::vector<float> q = model.get_params();
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(q[i] - p[i]) / std::max(1e-3, std::fabs(p[i])));
    }
    EXPECT_LT(worst, 5e-5);
    EXPECT_NEAR(learning_rate_at(oc, 10), oc.lr * oc.min_lr_ratio, 1e-9);  // min_lr at total_steps
  }
}

// The cases the reference above leaves out: no warm-up, the constant
// schedule, clipping off (0) or not reached (a norm below it: both leave
// the gradient as it is), and a gradient that is not finite (an Error
// naming the step; the parameters and moments as they were).
TEST(AdamW, ScheduleEdgesUnclippedStepsAndNonFiniteGradients) {
  OptimConfig c;
  c.lr = 0.5f;
  c.warmup_steps = 0;
  c.schedule = "constant";
  EXPECT_EQ(learning_rate_at(c, 0), 0.5f);
  EXPECT_EQ(learning_rate_at(c, 1000), 0.5f);
  c.schedule = "cosine";
  c.total_steps = 4;
  c.min_lr_ratio = 0.2f;
  EXPECT_NEAR(learning_rate_at(c, 0), 0.5, 1e-7);  // no warm-up: the peak at step 0
  EXPECT_NEAR(learning_rate_at(c, 2), 0.5 * (0.2 + 0.8 * 0.5), 1e-7);
  EXPECT_NEAR(learning_rate_at(c, 4), 0.1, 1e-7);
  EXPECT_NEAR(learning_rate_at(c, 40), 0.1, 1e-7);  // past the horizon: the floor

  const ModelConfig mc = tiny_agent_model_config();
  const auto backend = make_backend("cpu");
  // The first moment after one step, (1 - beta1) times the gradient as
  // clipped (the step itself is about lr g / |g|: a clip would not show).
  const auto after_one_step = [&](float grad_clip, float grad_value) {
    PolicyModel model(mc, *backend);
    model.init_random(3, 0.1f);
    OptimConfig oc;
    oc.grad_clip = grad_clip;
    AdamW opt(oc, model);
    const std::vector<float> g(model.layout().total, grad_value);
    backend->copy(model.grads(), g.data(), g.size() * sizeof(float));
    opt.step();
    return opt.m().download();
  };
  // Norm sqrt(N) 1e-3 (N in the tens of thousands): above 1e-2, below 1e9.
  const std::vector<float> off = after_one_step(0.0f, 1e-3f), not_reached = after_one_step(1e9f, 1e-3f),
                           clipped = after_one_step(1e-2f, 1e-3f);
  EXPECT_EQ(off, not_reached);
  EXPECT_FLOAT_EQ(off[0], (1 - OptimConfig{}.beta1) * 1e-3f);
  EXPECT_LT(clipped[0], 0.5f * off[0]);  // the case can tell clipping from none

  PolicyModel model(mc, *backend);
  model.init_random(3, 0.1f);
  AdamW opt(OptimConfig{}, model);
  const std::vector<float> before = model.get_params();
  std::vector<float> g(model.layout().total, 1e-3f);
  g[7] = std::numeric_limits<float>::infinity();
  backend->copy(model.grads(), g.data(), g.size() * sizeof(float));
  try {
    opt.step();
    ADD_FAILURE() << "an infinite gradient was applied";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient norm is not finite at optimizer step 1"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(model.get_params(), before);
  EXPECT_EQ(opt.m().download(), std::vector<float>(g.size(), 0.0f));
  EXPECT_EQ(opt.steps_taken(), 0);
}

}  // namespace
}  // namespace forge
