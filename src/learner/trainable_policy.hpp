// A policy ready to train, as every trainer sets it up: the run's backend
// (run.backend, run.precision), the model the [model] section names
// (pretrained/model_source.hpp: a pretrained model's weights, or the
// built-in policy initialised from run.seed), and AdamW over it
// (optim.total_steps is the cosine schedule's horizon: 0, the default, is
// the run's `steps`, with_horizon; a cosine horizon below the warm-up is an
// InputError, a warm-up not below the run's steps a warning).
#pragma once
#include <memory>

#include "backend/backend.hpp"
#include "learner/learner_config.hpp"
#include "model/model_config.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "pretrained/model_source.hpp"

namespace forge {

struct TrainablePolicy {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PolicyModel> model;
  std::unique_ptr<AdamW> opt;
  ModelSource source;  // its tokenizer and chat format (weights moved into the model)
};

// `model` is resolved in place (a pretrained model's sizes replace its own,
// so that the run's config.ini and checkpoints record them). InputError for
// an unknown or unavailable backend or precision, an unreadable model, or
// heads the backend cannot train (require_trainable_heads).
TrainablePolicy make_trainable_policy(ModelConfig& model, const OptimConfig& optim, const RunConfig& run, int steps);

}  // namespace forge
