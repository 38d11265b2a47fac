// Sizes of the Llama-style policy and the layout of its parameters in one flat
// FP32 buffer (so that AdamW, gradient norms, all-reduce and checkpoints each
// touch one array). Weights follow the torch Linear convention [out, in]:
// y = x W^T.
//
//   embed                 [V, d]
//   layers.L.attn_norm    [d]
//   layers.L.wqkv         [(H + 2 Hkv) * hd, d]   rows: q heads, k heads, v heads
//   layers.L.wo           [d, H * hd]
//   layers.L.mlp_norm     [d]
//   layers.L.w_gate_up    [2 F, d]               rows: gate, then up
//   layers.L.w_down       [d, F]
//   final_norm            [d]
//   lm_head               [V, d]                 untied from embed
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace forge {

struct ModelConfig {
  int vocab = 0;  // set from the tokenizer
  int d_model = 256;
  int n_layers = 4;
  int n_heads = 8;
  int n_kv_heads = 8;
  int ffn_dim = 688;
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;

  int head_dim() const { return d_model / n_heads; }
  int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
  // Throws InputError naming the offending field.
  void validate() const;
};

struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats, into the flat buffer
  size_t numel = 0;
  bool decay = true;  // weight decay applies (matrices yes, norms no)
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  size_t total = 0;

  explicit ParamLayout(const ModelConfig& c);
  ParamLayout() = default;
  const ParamTensor& find(const std::string& name) const;  // throws Error if absent
  // Offsets of per-layer tensors.
  size_t layer_offset(int layer, const char* what) const;
};

// The [model] section: its keys on an OptionSet (configs/default.ini and
// docs/configuration.md list them), with the cross-field rules of validate()
// that config can check (the vocabulary comes from the tokenizer).
void add_model_options(OptionSet& opts, ModelConfig& model);

}  // namespace forge
