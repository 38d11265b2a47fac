// The decoder's block sequence, written once for training and generation:
//
//   x_0 = embed[tokens]
//   per layer l:  h = RMSNorm(x) ; [q k v] = h Wqkv^T (+ bqkv) ; q, k = RoPE(q, k; position)
//                 x = x + Attention_l(q, k, v) Wo^T
//                 h = RMSNorm(x) ; [g u] = h Wgu^T ; x = x + (silu(g) * u) Wdown^T
//   hidden = RMSNorm(x_L[rows])     the rows the FP32 head reads; its
//                                   weights are lm_head, or embed when tied
//
// Only the attention differs between the two users, and it is theirs
// (BlockAttention): tree attention over a packed bin (PolicyModel, which
// trains) or paged attention over the KV cache (RolloutEngine, which
// generates). Training keeps every layer's activations for backward();
// generation overwrites one set layer after layer and updates the residual
// stream in place. An architecture variant of the block is written here once
// and holds in both training and generation.
//
// Where the backend keeps activations as bf16 (Backend::activation_value_bytes
// = 2, the CUDA bf16 mode), training computes every layer in one FP32 set
// and keeps per layer only bf16 copies of x_in, q|k|v (after RoPE), the
// attention output, x_mid and g|u (and the FP32 lse); backward() recomputes
// h1 = RMSNorm(x_in), h2 = RMSNorm(x_mid) and silu(g) * u from them. Each
// is written as bf16 by the operation that reads or makes it in the forward
// and read as bf16 by those of the backward: RMSNorm its x
// (Backend::rmsnorm_fwd_keep, rmsnorm_*_bf16), the attention its q|k|v
// (TreeAttentionArgs::qkv_bf16), SwiGLU its g|u (swiglu_fwd_keep,
// swiglu_*_bf16); only the attention output goes through pack_bf16 and
// unpack_bf16. The GEMMs and the attention read bf16-rounded operands in
// that mode anyway; RMSNorm's and SwiGLU's backward and the attention's
// D_i = dO . O see the rounded activations.
//
// Where the backend's GEMMs also round both operands to bf16
// (Backend::bf16_operands, the CUDA bf16 mode), the working activations whose
// only consumers are GEMMs are made as bf16 too: the normalised h (forward,
// and recomputed in the backward just before its GEMM), silu(g) u, and the
// backward's dg|du; the attention output's GEMMs and D_i read its kept bf16
// copy (no unpack); RoPE writes q|k|v, and in the backward dq|dk|dv, as
// bf16 (Backend::rope_bf16) for the attention and the GEMMs. The GEMMs and
// the attention would have rounded exactly those values, so
// results are bit for bit those of FP32 working buffers, with half their
// bytes and no rounding passes (Backend::linear_fwd_bf16, linear_backward_bf16).
//
// Activation gradients, with activations kept as bf16: those that a GEMM's
// backward makes (dx = dy W) and an elementwise backward or the attention
// reads are bf16 values, as under torch's autocast (a bf16 GEMM's output):
// RMSNorm's incoming dh (both norms), SwiGLU's incoming d(silu(g) u) and the
// attention's dO. With bf16 operands the GEMM writes them as bf16
// (linear_backward_bf16's dx16) and their readers take them so
// (rmsnorm_bwd_bf16's dy16, swiglu_bwd_bf16's dout16,
// TreeAttentionGrads::dout_bf16); with FP32 working buffers they are
// rounded in place, the same values. The residual stream's dx stays FP32,
// as do dq|dk|dv (the attention's output, accumulated in FP32).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device_array.hpp"
#include "model/model_config.hpp"

namespace forge {

// A training layer's bf16 copies the attention writes or reads (activations
// kept as bf16; all null otherwise): qkv, q|k|v (TreeAttentionArgs::qkv_bf16),
// which the forward writes, or finds there already where qkv_given (bf16
// operands: RoPE wrote them; the FP32 q|k|v are then not read); out, the
// output (bf16 operands: TreeAttentionArgs::out_bf16), which the forward
// writes instead of the FP32 out and the backward reads.
struct AttentionBf16 {
  uint16_t* qkv = nullptr;
  bool qkv_given = false;
  uint16_t* out = nullptr;
  const uint16_t* dout = nullptr;  // backward: dO as bf16 (TreeAttentionGrads::dout_bf16), in place of the FP32 dO
};

// The attention of one pass over T rows. forward() reads the layer's q, k, v
// (rows of ld floats, RoPE applied: q heads, then k heads, then v heads) and
// writes out [T, n_heads * head_dim]; lse [n_heads, T] is where a training
// attention keeps its softmax statistics (null when not kept).
class BlockAttention {
 public:
  virtual ~BlockAttention() = default;
  virtual void forward(int layer, const float* qkv, int ld, float* out, float* lse, const AttentionBf16& bf16) = 0;
  // dq, dk, dv into dqkv (same layout, overwritten) from dout, or, where
  // dout is null, from bf16.dout (dO as bf16); training only.
  virtual void backward(int layer, const float* qkv, int ld, const float* out, const float* lse,
                        const AttentionBf16& bf16, const float* dout, float* dqkv);
};

// What a pass keeps. With keep_layers (training) every layer has its own
// buffers and backward() can run; otherwise one set is reused.
class TransformerActivations {
 public:
  explicit TransformerActivations(bool keep_layers) : keep_layers_(keep_layers) {}
  // Rows of the last pass's head input: hidden [R, d] after the final norm.
  const float* head_hidden() const { return hf_.data(); }
  int rows() const { return R_; }
  // Backend memory held (allocated, which the largest pass so far sized), in bytes.
  size_t bytes() const;

 private:
  friend class Transformer;
  struct Layer {
    DeviceArray<float> x_in, h1, rstd1, qkv, att, lse, x_mid, h2, rstd2, gu, act;
    // bf16 storage of x_in, q|k|v, att, x_mid and g|u, in that order (sizes:
    // PackedParts in transformer.cpp). A field added here: count it in bytes().
    DeviceArray<uint16_t> packed;
    // With bf16 operands (Backend::bf16_operands), the working h (h1, then
    // h2) and silu(g) u as bf16, in place of h1, h2 and act.
    DeviceArray<uint16_t> h16, act16;
  };
  Layer& layer(int l) { return layers_[keep_layers_ ? l : 0]; }

  bool keep_layers_;
  bool packed_ = false;  // the last pass kept its layers as bf16 (layers_[0] computes)
  bool bf16_working_ = false;  // ... and made its working activations as bf16 (Backend::bf16_operands)
  int T_ = 0, R_ = 0;
  const int32_t* position_ = nullptr;  // the pass's positions (caller's memory)
  std::vector<Layer> layers_;
  DeviceArray<float> x_final_;                  // residual after the last layer [T, d]
  DeviceArray<float> xf_rows_, hf_, rstd_f_;    // head rows [R, d]
  DeviceArray<float> ones_;                     // [T] of 1 (bias terms as GEMMs)
  const int32_t* rows_ = nullptr;               // head rows (caller's memory)
  // backward scratch
  DeviceArray<float> dx_, d_act_, d_gu_, d_h_, d_att_, d_qkv_, d_xf_rows_;
  // With bf16 operands: the gradient a linear_backward reads as bf16, dg|du
  // (in place of d_gu_) and then dq|dk|dv after RoPE's backward; and the
  // gradient one writes as bf16, d(silu(g) u), dh and dO (in place of
  // d_act_, d_h_ and d_att_). With FP32 working buffers, dgrad16_ is the
  // scratch of their rounding in place.
  DeviceArray<uint16_t> dy16_, dgrad16_;
};

class Transformer {
 public:
  Transformer(const ModelConfig& config, const ParamLayout& layout, Backend& backend);

  // Embedding and every block over T rows (token and position: backend
  // memory), then the final norm of the head rows (rows: backend memory,
  // R of them, distinct). params: the flat parameter buffer; params16: null,
  // or (a backend with bf16_operands()) the same rounded to bf16, which the
  // linear layers then read instead of rounding their weights at each call.
  void forward(const float* params, const uint16_t* params16, const int32_t* token, const int32_t* position, int T,
               const int32_t* rows, int R, BlockAttention& attention, TransformerActivations& act) const;

  // The weights of the FP32 head [V, d] in params.
  const float* head_weight(const float* params) const;
  float* head_weight_grad(float* grads) const;

  // From dL/d(head hidden) [R, d] to parameter gradients (accumulated into
  // grads) through the last forward, which must have kept its layers.
  void backward(const float* params, const uint16_t* params16, float* grads, const float* d_head_hidden,
                const int32_t* token, BlockAttention& attention, TransformerActivations& act) const;

 private:
  struct LayerOffsets {
    size_t attn_norm, wqkv, bqkv, wo, mlp_norm, w_gate_up, w_down;  // bqkv: qkv_bias only
  };
  ModelConfig c_;
  Backend& B_;
  size_t embed_, final_norm_, head_;
  std::vector<LayerOffsets> layer_;
  std::vector<double> inv_freq_;  // RoPE, head_dim / 2
};

}  // namespace forge
