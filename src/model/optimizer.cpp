#include "model/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace forge {

float learning_rate_at(const OptimConfig& c, int step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps)
    return c.lr * static_cast<float>(step + 1) / static_cast<float>(c.warmup_steps);
  if (c.schedule == "constant") return c.lr;
  if (c.schedule == "cosine") {
    const int span = std::max(1, c.total_steps - c.warmup_steps);
    const float progress =
        std::min(1.0f, static_cast<float>(step - c.warmup_steps) / static_cast<float>(span));
    const float cosine = 0.5f * (1.0f + std::cos(3.14159265358979f * progress));
    return c.lr * (c.min_lr_ratio + (1.0f - c.min_lr_ratio) * cosine);
  }
  throw InputError("optim.schedule: '" + c.schedule + "' is not one of constant, cosine");
}

AdamW::AdamW(const OptimConfig& config, PolicyModel& model) : config_(config), model_(model) {
  Backend& b = model.backend();
  const size_t n = model.layout().total;
  m_.resize(b, n);
  v_.resize(b, n);
  b.fill(m_.data(), 0.0f, n);
  b.fill(v_.data(), 0.0f, n);
}

double AdamW::step() {
  Backend& b = model_.backend();
  const size_t n = model_.layout().total;
  const double norm = std::sqrt(b.sum_squares(model_.grads(), n));
  if (!std::isfinite(norm))
    throw Error("gradient norm is not finite at optimizer step " + std::to_string(step_ + 1));
  AdamWParams p;
  p.lr = learning_rate_at(config_, step_);
  p.beta1 = config_.beta1;
  p.beta2 = config_.beta2;
  p.eps = config_.eps;
  p.step = step_ + 1;
  p.grad_scale = (config_.grad_clip > 0 && norm > config_.grad_clip)
                     ? static_cast<float>(config_.grad_clip / norm)
                     : 1.0f;
  for (const auto& t : model_.layout().tensors) {
    p.weight_decay = t.decay ? config_.weight_decay : 0.0f;
    b.adamw(model_.params() + t.offset, model_.grads() + t.offset, m_.data() + t.offset,
            v_.data() + t.offset, t.numel, p);
  }
  ++step_;
  return norm;
}

void add_optim_options(OptionSet& opts, OptimConfig& o) {
  opts.describe_section("optim", "AdamW, gradient clipping and the learning-rate schedule");
  opts.add("optim.lr", &o.lr, "peak learning rate", in_range(0, 10, Interval::kOpenLow));
  opts.add("optim.beta1", &o.beta1, "AdamW first-moment decay", in_range(0, 1, Interval::kOpenHigh));
  opts.add("optim.beta2", &o.beta2, "AdamW second-moment decay",
           in_range(0, 1, Interval::kOpenHigh));
  opts.add("optim.eps", &o.eps, "AdamW epsilon", in_range(0, 1, Interval::kOpenLow));
  opts.add("optim.weight_decay", &o.weight_decay,
           "decoupled weight decay (weight matrices and the LM head; a tied embedding is the head)", in_range(0, 10));
  opts.add("optim.grad_clip", &o.grad_clip, "clip the global gradient L2 norm to this; 0 disables",
           at_least(0));
  opts.add("optim.warmup_steps", &o.warmup_steps, "steps of linear learning-rate warm-up",
           at_least(0));
  opts.add("optim.schedule", &o.schedule, "learning rate after warm-up",
           one_of({"constant", "cosine"}));
  opts.add("optim.total_steps", &o.total_steps,
           "horizon of the cosine schedule, in optimizer steps; 0: the run's steps (train.steps or sft.steps)",
           at_least(0));
  opts.add("optim.min_lr_ratio", &o.min_lr_ratio,
           "where the cosine schedule decays to at step optim.total_steps (one past the last), as a fraction "
           "of optim.lr",
           in_range(0, 1));
  // Decoupled decay multiplies a weight by 1 - lr * weight_decay each step:
  // at a product of 1 or more it zeroes or flips every decayed weight.
  opts.add_check([&o] {
    if (static_cast<double>(o.lr) * o.weight_decay >= 1.0)
      throw InputError("optim.lr x optim.weight_decay = " + format_float(o.lr) + " x " +
                       format_float(o.weight_decay) +
                       " is 1 or more: decoupled decay scales each decayed weight by 1 - lr x weight_decay "
                       "per step, which would zero or flip it; lower one of them");
  });
  // A cosine horizon set below the warm-up: the rate would climb past the
  // horizon, then fall back to optim.lr and straight to the floor.
  opts.add_check([&o] {
    if (o.schedule == "cosine" && o.total_steps > 0 && o.warmup_steps > o.total_steps)
      throw InputError("optim.total_steps = " + std::to_string(o.total_steps) + " is below optim.warmup_steps = " +
                       std::to_string(o.warmup_steps) +
                       ": the cosine schedule's warm-up would end past its horizon; raise optim.total_steps "
                       "(0: the run's steps) or lower optim.warmup_steps");
  });
}

}  // namespace forge
