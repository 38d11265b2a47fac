// The policy: a Llama-style decoder, forward and backward written by hand.
//
//   x_0 = embed[tokens]
//   per layer:  h = RMSNorm(x) ; [q k v] = h Wqkv^T ; q, k = RoPE(q, k; depth)
//               x = x + TreeAttention(q, k, v; subtree_end) Wo^T
//               h = RMSNorm(x) ; [g u] = h Wgu^T ; x = x + (silu(g) * u) Wdown^T
//   h_f = RMSNorm(x_L) ; logprobs from the FP32 head on the loss rows only
//
// A pass works on one PackedBin. forward() keeps the activations that
// backward() needs; backward() takes dLoss/dlogprob per loss entry (the loss
// lives in src/algo) and accumulates parameter gradients, so several bins
// make one optimizer step.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/backend.hpp"
#include "model/device_array.hpp"
#include "model/model_config.hpp"
#include "model/packed_batch.hpp"

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
  Backend& backend() { return backend_; }

  // Flat parameter and gradient buffers (backend memory), layout().total floats.
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }

  // Normal(0, std) for matrices (output projections scaled by 1/sqrt(2 L)), ones for norms.
  void init_random(uint64_t seed, float std = 0.02f);
  std::vector<float> get_params() const;
  void set_params(const std::vector<float>& host);
  std::vector<float> get_grads() const;
  void zero_grads();

  void forward(const PackedBin& bin, float inv_temperature, BinForward* out);
  void backward(const std::vector<float>& dlogprob);

 private:
  struct Activations;
  // Arguments of one layer's tree attention and of the FP32 head over the
  // activations of the current bin (outputs set by the caller where needed).
  TreeAttentionArgs attention_args(int layer);
  HeadArgs head_args();
  ModelConfig config_;
  ParamLayout layout_;
  Backend& backend_;
  DeviceArray<float> params_;
  DeviceArray<float> grads_;
  std::unique_ptr<Activations> act_;
};

}  // namespace forge
