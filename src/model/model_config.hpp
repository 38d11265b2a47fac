// Sizes and variants of the Llama-style policy, and the layout of its
// parameters in one flat FP32 buffer (so that AdamW, gradient norms,
// all-reduce and checkpoints each touch one array). Weights follow the torch
// Linear convention [out, in]: y = x W^T. With hd the head dimension:
//
//   embed                 [V, d]
//   layers.L.attn_norm    [d]
//   layers.L.wqkv         [(H + 2 Hkv) * hd, d]   rows: q heads, k heads, v heads
//   layers.L.bqkv         [(H + 2 Hkv) * hd]      qkv_bias only (Qwen2)
//   layers.L.wo           [d, H * hd]
//   layers.L.mlp_norm     [d]
//   layers.L.w_gate_up    [2 F, d]               rows: gate, then up
//   layers.L.w_down       [d, F]
//   final_norm            [d]
//   lm_head               [V, d]                 absent with tied_embeddings (the head is embed)
//
// RoPE rotates pairs (2i, 2i+1) of each q and k head by pos * inv_freq[i],
// inv_freq[i] = rope_base^(-2i / hd), rescaled per Llama 3's rope_scaling
// when it is set (rope_inv_freq). Checkpoints in the half-split convention
// (Hugging Face's rotate_half) are permuted into this one when loaded.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace forge {

// Llama 3's frequency-dependent RoPE rescaling (rope_scaling.rope_type =
// "llama3"): wavelengths above original_max / low_freq_factor are divided by
// factor, those below original_max / high_freq_factor kept, and the band
// between interpolated.
struct RopeScaling {
  float factor = 0;  // 0: none
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  int original_max_positions = 8192;
  bool enabled() const { return factor > 0; }
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string pretrained;  // a Hugging Face folder or GGUF file whose sizes, weights and tokenizer
                           // this model takes (pretrained/model_source.hpp); "" = built-in
  int vocab = 0;  // set from the tokenizer
  int d_model = 256;
  int n_layers = 4;
  int n_heads = 8;
  int n_kv_heads = 8;
  int head_dim_override = 0;  // 0: d_model / n_heads
  int ffn_dim = 688;
  float rope_base = 10000.0f;
  RopeScaling rope_scaling;
  float norm_eps = 1e-5f;
  bool tied_embeddings = false;  // the head's weights are the embedding's
  bool qkv_bias = false;         // a bias on the q, k and v projections

  static constexpr int kMaxVocab = 1 << 22;  // validate()'s bound
  int head_dim() const { return head_dim_override > 0 ? head_dim_override : d_model / n_heads; }
  int qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
  // Throws InputError naming the offending field.
  void validate() const;
};

// The fields that make two models compute differently (sizes, heads, RoPE,
// norm epsilon, tying, biases) where `here` and `there` differ, as
// "model.n_heads 8 against 4, ..."; "" when they compute alike. Shapes alone
// miss some (8 heads of 16 and 4 heads of 32 have the same weights' shapes).
std::string model_differences(const ModelConfig& here, const ModelConfig& there);
// The same, one item per field: key ("model.n_heads", "head dimension",
// "vocab") and both values as text.
struct ModelFieldDifference {
  std::string key, here, there;
};
std::vector<ModelFieldDifference> model_field_differences(const ModelConfig& here, const ModelConfig& there);

// The inverse frequencies of RoPE, head_dim / 2 of them (FP64).
std::vector<double> rope_inv_freq(const ModelConfig& c);

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
// that config can check (the vocabulary comes from the tokenizer). A
// pretrained model (model.pretrained) replaces these sizes with its own.
void add_model_options(OptionSet& opts, ModelConfig& model);

}  // namespace forge
