// AdamW with decoupled weight decay, global-norm gradient clipping and a
// learning-rate schedule (linear warm-up, then constant or cosine decay to
// min_lr_ratio * lr). Defaults beta2 = 0.95 and eps = 1e-15 follow MiniMax-M1.
//
//   g' = g * min(1, clip / ||g||)          (clip <= 0: no clipping)
//   m = b1 m + (1 - b1) g' ;  v = b2 v + (1 - b2) g'^2
//   p -= lr_t * ( m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
#pragma once
#include <string>
#include <vector>

#include "backend/device_array.hpp"
#include "core/config.hpp"
#include "model/policy_model.hpp"

namespace forge {

struct OptimConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-15f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;      // global L2 norm; <= 0 disables
  int warmup_steps = 20;
  std::string schedule = "constant";  // constant | cosine
  int total_steps = 0;         // horizon of the cosine schedule (0: the run's steps, with_horizon)
  float min_lr_ratio = 0.1f;
};

// c with a total_steps of 0 resolved to the run's `steps` (the config as
// given, 0 included, is what a run's config.ini keeps).
inline OptimConfig with_horizon(OptimConfig c, int steps) {
  if (c.total_steps == 0) c.total_steps = steps;
  return c;
}

float learning_rate_at(const OptimConfig& c, int step);  // step is 0-based

class AdamW {
 public:
  AdamW(const OptimConfig& config, PolicyModel& model);
  // Applies one update from the model's accumulated gradients; returns the
  // global gradient norm before clipping. Does not zero the gradients.
  double step();
  int steps_taken() const { return step_; }
  void set_steps_taken(int s) { step_ = s; }
  DeviceArray<float>& m() { return m_; }
  DeviceArray<float>& v() { return v_; }
  const OptimConfig& config() const { return config_; }

 private:
  OptimConfig config_;
  PolicyModel& model_;
  DeviceArray<float> m_, v_;
  int step_ = 0;
};

// The [optim] section's keys on an OptionSet.
void add_optim_options(OptionSet& opts, OptimConfig& optim);

}  // namespace forge
