#include "model/transformer.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace forge {

void BlockAttention::backward(int, const float*, int, const float*, const float*, const AttentionBf16&, const float*,
                              float*) {
  throw Error("this attention has no backward (generation only)");
}

Transformer::Transformer(const ModelConfig& config, const ParamLayout& layout, Backend& backend)
    : c_(config), B_(backend) {
  embed_ = layout.find("embed").offset;
  final_norm_ = layout.find("final_norm").offset;
  head_ = c_.tied_embeddings ? embed_ : layout.find("lm_head").offset;
  for (int l = 0; l < c_.n_layers; ++l)
    layer_.push_back({layout.layer_offset(l, "attn_norm"), layout.layer_offset(l, "wqkv"),
                      c_.qkv_bias ? layout.layer_offset(l, "bqkv") : 0, layout.layer_offset(l, "wo"),
                      layout.layer_offset(l, "mlp_norm"), layout.layer_offset(l, "w_gate_up"),
                      layout.layer_offset(l, "w_down")});
  inv_freq_ = rope_inv_freq(c_);
}

const float* Transformer::head_weight(const float* params) const { return params + head_; }
float* Transformer::head_weight_grad(float* grads) const { return grads + head_; }

namespace {

// The head rows are distinct positions: backward scatters into them without
// atomics (Backend::scatter_add_rows). Debug builds check it.
[[maybe_unused]] void check_distinct_rows(Backend& B, const int32_t* rows, int R) {
  std::vector<int32_t> h(static_cast<size_t>(R));
  if (R > 0) B.to_host(h.data(), rows, sizeof(int32_t) * h.size());
  std::sort(h.begin(), h.end());
  const auto twice = std::adjacent_find(h.begin(), h.end());
  FORGE_CHECK(twice == h.end(), "head row " + std::to_string(twice == h.end() ? 0 : *twice) +
                                    " appears twice: scatter_add_rows needs distinct rows");
}

// The sizes of a packed layer's parts (Layer::packed) in order:
// x_in [T, d], q|k|v [T, QKV], attention output [T, HD], x_mid [T, d], g|u [T, 2F].
// x_in and x_mid are written and read as bf16 by RMSNorm (Backend::rmsnorm_fwd_keep,
// rmsnorm_*_bf16), q|k|v by the attention (TreeAttentionArgs::qkv_bf16), g|u by
// SwiGLU (swiglu_fwd_keep, swiglu_*_bf16); the attention output by pack/unpack_bf16.
constexpr int kXinPart = 0, kQkvPart = 1, kAttPart = 2, kXmidPart = 3, kGuPart = 4;
struct PackedParts {
  size_t sizes[5];
  size_t offset(int part) const {
    size_t o = 0;
    for (int i = 0; i < part; ++i) o += sizes[i];
    return o;
  }
  PackedParts(const ModelConfig& c, int T) {
    const size_t rows = static_cast<size_t>(T);
    sizes[0] = sizes[3] = rows * c.d_model;
    sizes[1] = rows * c.qkv_dim();
    sizes[2] = rows * c.n_heads * c.head_dim();
    sizes[4] = rows * 2 * c.ffn_dim;
  }
  size_t total() const { return sizes[0] + sizes[1] + sizes[2] + sizes[3] + sizes[4]; }
};

}  // namespace

size_t TransformerActivations::bytes() const {
  size_t b = 0;
  auto add = [&](const auto& a) { b += a.capacity() * sizeof(*a.data()); };
  for (const Layer& l : layers_) {
    for (const auto* a : {&l.x_in, &l.h1, &l.rstd1, &l.qkv, &l.att, &l.lse, &l.x_mid, &l.h2, &l.rstd2, &l.gu, &l.act})
      add(*a);
    for (const auto* a : {&l.packed, &l.h16, &l.act16}) add(*a);
  }
  for (const auto* a : {&x_final_, &xf_rows_, &hf_, &rstd_f_, &ones_, &dx_, &d_act_, &d_gu_, &d_h_, &d_att_, &d_qkv_,
                        &d_xf_rows_})
    add(*a);
  add(dy16_);
  add(dgrad16_);
  return b;
}

void Transformer::forward(const float* P, const uint16_t* P16, const int32_t* token, const int32_t* position, int T,
                          const int32_t* rows, int R, BlockAttention& attention,
                          TransformerActivations& act) const {
  Backend& B = B_;
  const int d = c_.d_model, F = c_.ffn_dim, hd = c_.head_dim(), H = c_.n_heads;
  const int HD = H * hd, QKV = c_.qkv_dim(), L = c_.n_layers;
  const size_t Td = static_cast<size_t>(T) * d;
  const bool keep = act.keep_layers_;
  const bool pack = keep && B.activation_value_bytes() == 2;
  const bool narrow = pack && B.bf16_operands();
  const PackedParts parts(c_, T);
  FORGE_CHECK(T > 0, "a forward pass over no rows");
  act.packed_ = pack;
  act.bf16_working_ = narrow;
  if (act.layers_.empty()) act.layers_.resize(keep ? L : 1);
  act.T_ = T;
  act.R_ = R;
  act.position_ = position;
  act.rows_ = rows;
#ifndef NDEBUG
  check_distinct_rows(B, rows, R);
#endif

  if (c_.qkv_bias) {
    act.ones_.ensure(B, T);
    B.fill(act.ones_.data(), 1.0f, T);
  }
  act.layer(0).x_in.ensure(B, Td);
  B.embedding_fwd(token, P + embed_, act.layer(0).x_in.data(), T, d);
  for (int l = 0; l < L; ++l) {
    TransformerActivations::Layer& kept = act.layer(l);
    TransformerActivations::Layer& a = pack ? act.layers_[0] : kept;  // where the layer computes
    const LayerOffsets& o = layer_[l];
    // The normalised h and silu(g) u feed only GEMMs: with bf16 operands
    // they are made as bf16 (h16, act16) and the GEMMs read them as they are.
    if (narrow) {
      a.h16.ensure(B, Td);
      a.act16.ensure(B, static_cast<size_t>(T) * F);
    } else {
      a.h1.ensure(B, Td);
      a.h2.ensure(B, Td);
      a.act.ensure(B, static_cast<size_t>(T) * F);
    }
    a.rstd1.ensure(B, T);
    a.qkv.ensure(B, static_cast<size_t>(T) * QKV);
    if (!narrow) a.att.ensure(B, static_cast<size_t>(T) * HD);
    a.rstd2.ensure(B, T);
    a.gu.ensure(B, static_cast<size_t>(T) * 2 * F);
    uint16_t* h16 = narrow ? a.h16.data() : nullptr;
    uint16_t* act16 = narrow ? a.act16.data() : nullptr;
    float* h1 = narrow ? nullptr : a.h1.data();
    float* h2 = narrow ? nullptr : a.h2.data();
    float* act32 = narrow ? nullptr : a.act.data();
    // y = x W^T + beta y, x in FP32 or (x16) as bf16, W from the bf16 copy where there is one
    const auto linear = [&](int in, int out, const float* x, const uint16_t* x16, size_t w, float beta, float* y,
                            int ld_y) {
      if (x16 || P16)
        B.linear_fwd_bf16(T, in, out, x, x16, P + w, P16 ? P16 + w : nullptr, beta, y, ld_y);
      else
        B.gemm(false, true, T, out, in, 1.0f, x, in, P + w, in, beta, y, ld_y);
    };
    // Residual stream: training keeps x_in, x_mid and x_out of every layer;
    // packed, it keeps x_in and x_mid as bf16 (RMSNorm packs each as it
    // reads it) and, as generation, updates one FP32 buffer in place.
    float* x_in = a.x_in.data();
    float* x_mid = x_in;
    float* x_out = x_in;
    if (keep) kept.lse.ensure(B, static_cast<size_t>(H) * T);
    if (keep && !pack) {
      a.x_mid.ensure(B, Td);
      x_mid = a.x_mid.data();
      DeviceArray<float>& next = l + 1 < L ? act.layer(l + 1).x_in : act.x_final_;
      next.ensure(B, Td);
      x_out = next.data();
    }

    // Packed: each kept part is written as bf16 by the operation that reads
    // or makes it (RMSNorm x_in and x_mid, the attention q|k|v, SwiGLU g|u);
    // the attention output by pack_bf16.
    if (pack) kept.packed.ensure(B, parts.total());
    const auto kept16 = [&](int part) { return pack ? kept.packed.data() + parts.offset(part) : nullptr; };

    if (pack)
      B.rmsnorm_fwd_keep(x_in, P + o.attn_norm, h1, h16, a.rstd1.data(), kept16(kXinPart), T, d, c_.norm_eps);
    else
      B.rmsnorm_fwd(x_in, P + o.attn_norm, h1, a.rstd1.data(), T, d, c_.norm_eps);
    linear(d, QKV, h1, h16, o.wqkv, 0.0f, a.qkv.data(), QKV);
    if (c_.qkv_bias)  // qkv += 1 bqkv^T
      B.gemm(false, false, T, QKV, 1, 1.0f, act.ones_.data(), 1, P + o.bqkv, QKV, 1.0f, a.qkv.data(), QKV);
    if (narrow)
      B.rope_bf16(a.qkv.data(), position, T, H + c_.n_kv_heads, hd, QKV, inv_freq_.data(), false, kept16(kQkvPart));
    else
      B.rope(a.qkv.data(), position, T, H + c_.n_kv_heads, hd, QKV, inv_freq_.data(), false);
    // With bf16 operands the attention writes its output as bf16 straight
    // into the kept copy, which the o-projection reads.
    const AttentionBf16 att16{kept16(kQkvPart), narrow, narrow ? kept16(kAttPart) : nullptr};
    attention.forward(l, narrow ? nullptr : a.qkv.data(), QKV, narrow ? nullptr : a.att.data(),
                      keep ? kept.lse.data() : nullptr, att16);
    if (pack && !narrow) B.pack_bf16(a.att.data(), kept16(kAttPart), parts.sizes[kAttPart]);
    if (x_mid != x_in) B.copy(x_mid, x_in, Td * sizeof(float));
    linear(HD, d, a.att.data(), att16.out, o.wo, 1.0f, x_mid, d);
    if (pack)
      B.rmsnorm_fwd_keep(x_mid, P + o.mlp_norm, h2, h16, a.rstd2.data(), kept16(kXmidPart), T, d, c_.norm_eps);
    else
      B.rmsnorm_fwd(x_mid, P + o.mlp_norm, h2, a.rstd2.data(), T, d, c_.norm_eps);
    linear(d, 2 * F, h2, h16, o.w_gate_up, 0.0f, a.gu.data(), 2 * F);
    if (pack)
      B.swiglu_fwd_keep(a.gu.data(), act32, act16, kept16(kGuPart), T, F);
    else
      B.swiglu_fwd(a.gu.data(), act32, T, F);
    if (x_out != x_mid) B.copy(x_out, x_mid, Td * sizeof(float));
    linear(F, d, act32, act16, o.w_down, 1.0f, x_out, d);
  }

  // Final norm on the head rows only.
  act.xf_rows_.ensure(B, static_cast<size_t>(R) * d);
  act.hf_.ensure(B, static_cast<size_t>(R) * d);
  act.rstd_f_.ensure(B, R);
  if (R == 0) return;
  const float* x_last = keep && !pack ? act.x_final_.data() : act.layer(0).x_in.data();
  B.gather_rows(x_last, rows, act.xf_rows_.data(), R, d);
  B.rmsnorm_fwd(act.xf_rows_.data(), P + final_norm_, act.hf_.data(), act.rstd_f_.data(), R, d, c_.norm_eps);
}

void Transformer::backward(const float* P, const uint16_t* P16, float* G, const float* d_head_hidden,
                           const int32_t* token, BlockAttention& attention, TransformerActivations& act) const {
  Backend& B = B_;
  FORGE_CHECK(act.keep_layers_, "backward through a pass that did not keep its activations");
  const int T = act.T_, R = act.R_, d = c_.d_model, F = c_.ffn_dim, hd = c_.head_dim(), H = c_.n_heads;
  const int HD = H * hd, QKV = c_.qkv_dim();
  const size_t Td = static_cast<size_t>(T) * d;
  const bool pack = act.packed_;
  const PackedParts parts(c_, T);

  act.dx_.ensure(B, Td);
  B.fill(act.dx_.data(), 0.0f, Td);
  if (R > 0) {
    act.d_xf_rows_.ensure(B, static_cast<size_t>(R) * d);
    B.fill(act.d_xf_rows_.data(), 0.0f, static_cast<size_t>(R) * d);
    B.rmsnorm_bwd(act.xf_rows_.data(), P + final_norm_, act.rstd_f_.data(), d_head_hidden, act.d_xf_rows_.data(),
                  G + final_norm_, R, d);
    B.scatter_add_rows(act.d_xf_rows_.data(), act.rows_, act.dx_.data(), R, d);
  }

  // With bf16 operands (forward()): h and silu(g) u recomputed as bf16,
  // dg|du and dq|dk|dv made as bf16, each read as it is by its layer's
  // linear_backward; the attention output read from its kept bf16 copy;
  // d(silu(g) u), dh and dO made as bf16 by their GEMMs (dgrad16) and read
  // so. With bf16 activations and FP32 working buffers, those three rounded
  // in place: the same values.
  const bool narrow = act.bf16_working_;
  const size_t grad16 = static_cast<size_t>(T) * std::max({F, d, HD});
  if (pack) act.dgrad16_.ensure(B, grad16);
  if (narrow) {
    act.dy16_.ensure(B, static_cast<size_t>(T) * std::max(2 * F, QKV));
  } else {
    act.d_gu_.ensure(B, static_cast<size_t>(T) * 2 * F);
    act.d_act_.ensure(B, static_cast<size_t>(T) * F);
    act.d_h_.ensure(B, Td);
    act.d_att_.ensure(B, static_cast<size_t>(T) * HD);
  }
  act.d_qkv_.ensure(B, static_cast<size_t>(T) * QKV);
  float* dx = act.dx_.data();
  uint16_t* dgrad16 = narrow ? act.dgrad16_.data() : nullptr;
  float* d_act = narrow ? nullptr : act.d_act_.data();
  float* d_h = narrow ? nullptr : act.d_h_.data();
  float* d_att = narrow ? nullptr : act.d_att_.data();
  const auto to_bf16_values = [&](float* g, size_t n) {  // FP32 working buffers (callers: not narrow)
    if (!pack) return;
    B.pack_bf16(g, act.dgrad16_.data(), n);
    B.unpack_bf16(act.dgrad16_.data(), g, n);
  };
  for (int l = c_.n_layers - 1; l >= 0; --l) {
    TransformerActivations::Layer& kept = act.layer(l);
    TransformerActivations::Layer& a = pack ? act.layers_[0] : kept;
    const LayerOffsets& o = layer_[l];
    const auto kept16 = [&](int part) { return pack ? kept.packed.data() + parts.offset(part) : nullptr; };
    uint16_t* h16 = narrow ? a.h16.data() : nullptr;
    const auto w16 = [&](size_t w) { return P16 ? P16 + w : nullptr; };
    // Packed: the attention output unpacked into the FP32 set; h1, h2 and
    // silu(g) u recomputed from the bf16 x_in, x_mid and g|u, which the
    // backward operations read as they are (as the attention its q|k|v).
    // With bf16 operands each recomputation comes just before its GEMM.
    if (pack && !narrow) {
      B.unpack_bf16(kept16(kAttPart), a.att.data(), parts.sizes[kAttPart]);
      B.rmsnorm_fwd_bf16(kept16(kXinPart), P + o.attn_norm, a.h1.data(), nullptr, a.rstd1.data(), T, d, c_.norm_eps);
      B.rmsnorm_fwd_bf16(kept16(kXmidPart), P + o.mlp_norm, a.h2.data(), nullptr, a.rstd2.data(), T, d, c_.norm_eps);
      B.swiglu_fwd_bf16(kept16(kGuPart), a.act.data(), nullptr, T, F);
    }
    // MLP: x_out = x_mid + act Wd^T
    if (narrow) {
      B.swiglu_fwd_bf16(kept16(kGuPart), nullptr, a.act16.data(), T, F);
      B.linear_backward_bf16(T, F, d, dx, d, nullptr, P + o.w_down, w16(o.w_down), a.act16.data(), nullptr, dgrad16,
                             F, G + o.w_down);
      B.swiglu_bwd_bf16(kept16(kGuPart), nullptr, dgrad16, nullptr, act.dy16_.data(), T, F);
      B.rmsnorm_fwd_bf16(kept16(kXmidPart), P + o.mlp_norm, nullptr, h16, a.rstd2.data(), T, d, c_.norm_eps);
      B.linear_backward_bf16(T, d, 2 * F, nullptr, 2 * F, act.dy16_.data(), P + o.w_gate_up, w16(o.w_gate_up), h16,
                             nullptr, dgrad16, d, G + o.w_gate_up);
    } else {
      B.linear_backward(T, F, d, dx, d, P + o.w_down, a.act.data(), F, d_act, F, G + o.w_down);
      to_bf16_values(d_act, static_cast<size_t>(T) * F);
      if (pack)
        B.swiglu_bwd_bf16(kept16(kGuPart), d_act, nullptr, act.d_gu_.data(), nullptr, T, F);
      else
        B.swiglu_bwd(a.gu.data(), d_act, act.d_gu_.data(), T, F);
      B.linear_backward(T, d, 2 * F, act.d_gu_.data(), 2 * F, P + o.w_gate_up, a.h2.data(), d, d_h, d,
                        G + o.w_gate_up);
      to_bf16_values(d_h, Td);
    }
    if (pack)
      B.rmsnorm_bwd_bf16(kept16(kXmidPart), P + o.mlp_norm, a.rstd2.data(), d_h, dgrad16, dx, G + o.mlp_norm, T, d);
    else
      B.rmsnorm_bwd(a.x_mid.data(), P + o.mlp_norm, a.rstd2.data(), d_h, dx, G + o.mlp_norm, T, d);
    // Attention: x_mid = x_in + att Wo^T
    const AttentionBf16 att16{kept16(kQkvPart), false, narrow ? kept16(kAttPart) : nullptr, dgrad16};
    if (narrow) {
      B.linear_backward_bf16(T, HD, d, dx, d, nullptr, P + o.wo, w16(o.wo), att16.out, nullptr, dgrad16, HD,
                             G + o.wo);
    } else {
      B.linear_backward(T, HD, d, dx, d, P + o.wo, a.att.data(), HD, d_att, HD, G + o.wo);
      to_bf16_values(d_att, static_cast<size_t>(T) * HD);
    }
    attention.backward(l, narrow ? nullptr : a.qkv.data(), QKV, narrow ? nullptr : a.att.data(), kept.lse.data(),
                       att16, d_att, act.d_qkv_.data());
    if (narrow) {
      uint16_t* dqkv16 = act.dy16_.data();
      B.rope_bf16(act.d_qkv_.data(), act.position_, T, H + c_.n_kv_heads, hd, QKV, inv_freq_.data(), true, dqkv16);
      if (c_.qkv_bias) {  // dbqkv += 1^T dqkv, on the rounded values the GEMM would read
        B.unpack_bf16(dqkv16, act.d_qkv_.data(), static_cast<size_t>(T) * QKV);
        B.gemm(true, false, 1, QKV, T, 1.0f, act.ones_.data(), 1, act.d_qkv_.data(), QKV, 1.0f, G + o.bqkv, QKV);
      }
      B.rmsnorm_fwd_bf16(kept16(kXinPart), P + o.attn_norm, nullptr, h16, a.rstd1.data(), T, d, c_.norm_eps);
      B.linear_backward_bf16(T, d, QKV, nullptr, QKV, dqkv16, P + o.wqkv, w16(o.wqkv), h16, nullptr, dgrad16, d,
                             G + o.wqkv);
    } else {
      B.rope(act.d_qkv_.data(), act.position_, T, H + c_.n_kv_heads, hd, QKV, inv_freq_.data(), true);
      if (c_.qkv_bias)  // dbqkv += 1^T dqkv
        B.gemm(true, false, 1, QKV, T, 1.0f, act.ones_.data(), 1, act.d_qkv_.data(), QKV, 1.0f, G + o.bqkv, QKV);
      B.linear_backward(T, d, QKV, act.d_qkv_.data(), QKV, P + o.wqkv, a.h1.data(), d, d_h, d, G + o.wqkv);
      to_bf16_values(d_h, Td);
    }
    if (pack)
      B.rmsnorm_bwd_bf16(kept16(kXinPart), P + o.attn_norm, a.rstd1.data(), d_h, dgrad16, dx, G + o.attn_norm, T, d);
    else
      B.rmsnorm_bwd(a.x_in.data(), P + o.attn_norm, a.rstd1.data(), d_h, dx, G + o.attn_norm, T, d);
  }
  B.embedding_bwd(token, dx, G + embed_, T, d);
}

}  // namespace forge
