// The tiny policy the agent tests run episodes with (random weights): one
// layer, d_model 32, grouped-query attention (2 query heads, 1 kv head).
#pragma once
#include "model/model_config.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

inline ModelConfig tiny_agent_model_config() {
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;
  c.d_model = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 48;
  return c;
}

}  // namespace forge
