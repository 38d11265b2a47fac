#include "learner/trainable_policy.hpp"

#include <cstdio>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace forge {

TrainablePolicy make_trainable_policy(ModelConfig& model, const OptimConfig& configured, const RunConfig& run,
                                      int steps) {
  const OptimConfig optim = with_horizon(configured, steps);
  TrainablePolicy p;
  p.backend = make_backend(run.backend, parse_precision(run.precision));
  p.source = resolve_model(model, true);
  model = p.source.config;
  require_trainable_heads(model, *p.backend);
  p.model = std::make_unique<PolicyModel>(model, *p.backend);
  if (p.source.is_pretrained()) {
    p.model->set_params(p.source.weights);
    p.source.weights = {};
    p.source.weights.shrink_to_fit();
    log_info("model: " + p.source.architecture + " from " + model.pretrained + " (" +
             std::to_string(p.model->layout().total) + " parameters, vocabulary " + std::to_string(model.vocab) + ")");
  } else {
    p.model->init_random(run.seed);
  }
  // A warm-up longer than the run: the rate rises all along and never gets
  // to optim.lr; as long as a cosine run: its decay never starts. Against
  // the run's steps, not the cosine horizon (optim.total_steps may differ).
  const bool cosine = optim.schedule == "cosine";
  if (steps > 0 && optim.warmup_steps > 0 &&
      (optim.warmup_steps > steps || (cosine && optim.warmup_steps == steps))) {
    char rates[96];
    std::snprintf(rates, sizeof rates, "ends at %.3g, not optim.lr = %.3g",
                  static_cast<double>(learning_rate_at(optim, steps - 1)), static_cast<double>(optim.lr));
    const bool short_of_lr = optim.warmup_steps > steps;
    log_warn("optim.warmup_steps = " + std::to_string(optim.warmup_steps) + " is not below the run's " +
             std::to_string(steps) + " steps: the learning rate rises all run" +
             (short_of_lr ? std::string(" and ") + rates : std::string()) +
             (cosine ? " (the cosine decay never starts)" : "") + "; lower optim.warmup_steps");
  }
  p.opt = std::make_unique<AdamW>(optim, *p.model);
  return p;
}

}  // namespace forge
