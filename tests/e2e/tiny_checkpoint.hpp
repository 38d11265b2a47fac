// The weights and AdamW moments of a checkpoint of the e2e tests' tiny model
// (d_model 32, 1 layer, 2 heads, 2 KV heads, FFN 64, the byte tokenizer's
// vocabulary), for comparing a resumed run with an uninterrupted one.
#pragma once
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge_e2e {

// The weights; the first moment into m and the second (where asked) into v.
inline std::vector<float> params_of(const std::string& checkpoint, std::vector<float>* m,
                                    std::vector<float>* v = nullptr) {
  forge::ModelConfig c;
  c.vocab = forge::ByteTokenizer::kVocabSize;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_dim = 64;
  auto backend = forge::make_backend("cpu");
  forge::PolicyModel model(c, *backend);
  forge::OptimConfig oc;
  forge::AdamW opt(oc, model);
  forge::load_checkpoint(checkpoint, model, &opt);
  *m = opt.m().download();
  if (v) *v = opt.v().download();
  return model.get_params();
}

}  // namespace forge_e2e
