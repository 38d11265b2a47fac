// The policy as it trains: the parameters (one flat buffer) and their
// gradients, and a pass over one PackedBin: the block sequence of
// transformer.hpp with tree attention (query i sees key j iff
// j <= i < subtree_end[j], RoPE at each token's depth), then logprobs from
// the FP32 head on the loss rows only.
//
// forward() keeps the activations that backward() needs; backward() takes
// dLoss/dlogprob per loss entry (the loss lives in src/algo) and accumulates
// parameter gradients, so several bins make one optimizer step.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device_array.hpp"
#include "model/model_config.hpp"
#include "model/transformer.hpp"
#include "tree/packed_batch.hpp"

namespace forge {

struct BinForward {
  bool want_logits = false;    // in: also return the head rows' logits
  std::vector<float> logprob;  // [E] per loss entry
  std::vector<float> entropy;  // [R] per head row
  std::vector<float> logits;   // [R, V] when want_logits
};

class PolicyModel {
 public:
  PolicyModel(const ModelConfig& config, Backend& backend);
  ~PolicyModel();

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const Transformer& transformer() const { return transformer_; }
  Backend& backend() { return backend_; }

  // Flat parameter and gradient buffers (backend memory), layout().total
  // floats. Taking the parameters for writing (the non-const form) marks
  // them changed: the bf16 copy is made again before its next use.
  float* params() {
    ++params_version_;
    return params_.data();
  }
  const float* params() const { return params_.data(); }
  // The parameters rounded to bf16 (same offsets) on a backend that takes
  // its GEMM operands as bf16 (Backend::bf16_operands), which the linear layers
  // read instead of rounding every weight at every call (a decode step read
  // each weight three times over); made on first use after a change
  // (set_params, params()). Null on other backends.
  const uint16_t* params_bf16();
  float* grads() { return grads_.data(); }

  // Normal(0, std) for matrices (output projections scaled by 1/sqrt(2 L)), ones for norms.
  void init_random(uint64_t seed, float std = 0.02f);
  std::vector<float> get_params() const;
  void set_params(const std::vector<float>& host);
  std::vector<float> get_grads() const;
  void zero_grads();

  void forward(const PackedBin& bin, float inv_temperature, BinForward* out);
  void backward(const std::vector<float>& dlogprob);
  // Frees the activations the last training pass kept and the backend's
  // scratch for this thread (the next forward allocates them again): before
  // a long generation phase such as the final evaluation, so that its KV
  // cache does not stack on them.
  void release_activations();
  // Backend bytes the last training pass keeps for backward (activations
  // and backward scratch; bf16-packed where the backend keeps them so).
  size_t activation_bytes() const;

 private:
  struct Pass;
  // Arguments of the FP32 head over the current bin's head rows (outputs set
  // by the caller where needed).
  HeadArgs head_args();
  ModelConfig config_;
  ParamLayout layout_;
  Backend& backend_;
  Transformer transformer_;
  DeviceArray<float> params_;
  DeviceArray<uint16_t> params16_;                // params_bf16()
  uint64_t params_version_ = 1, params16_version_ = 0;  // params16_ is current when equal
  DeviceArray<float> grads_;
  std::unique_ptr<Pass> pass_;
};

// InputError naming model.head_dim when `backend`'s training kernels
// (tree attention) do not take the model's heads (Backend::max_trained_head_dim);
// the constructor refuses heads past Backend::max_head_dim alike.
void require_trainable_heads(const ModelConfig& model, const Backend& backend);

}  // namespace forge
