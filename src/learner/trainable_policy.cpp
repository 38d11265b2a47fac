#include "learner/trainable_policy.hpp"

#include "backend/backend_registry.hpp"
#include "core/log.hpp"

namespace forge {

TrainablePolicy make_trainable_policy(ModelConfig& model, const OptimConfig& optim, const RunConfig& run) {
  TrainablePolicy p;
  p.backend = make_backend(run.backend, parse_precision(run.precision));
  p.source = resolve_model(model, true);
  model = p.source.config;
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
  p.opt = std::make_unique<AdamW>(optim, *p.model);
  return p;
}

}  // namespace forge
