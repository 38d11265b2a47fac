#include "learner/trainable_policy.hpp"

#include "backend/backend_registry.hpp"
#include "model/tokenizer.hpp"

namespace forge {

TrainablePolicy make_trainable_policy(ModelConfig model, const OptimConfig& optim, const RunConfig& run) {
  TrainablePolicy p;
  p.backend = make_backend(run.backend, parse_precision(run.precision));
  model.vocab = Tokenizer::kVocabSize;
  p.model = std::make_unique<PolicyModel>(model, *p.backend);
  p.model->init_random(run.seed);
  p.opt = std::make_unique<AdamW>(optim, *p.model);
  return p;
}

}  // namespace forge
