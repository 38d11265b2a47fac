#include "model/policy_model.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace forge {

struct PolicyModel::Activations {
  // Bin inputs
  DeviceArray<int32_t> token, position, subtree_end, head_row, row_begin, target;
  int T = 0, R = 0, E = 0;
  float inv_temperature = 1.0f;
  // Per layer (index l), saved for backward
  std::vector<DeviceArray<float>> x_in, h1, rstd1, qkv, att, lse, x_mid, h2, rstd2, gu, act;
  DeviceArray<float> x_final;          // residual stream after the last layer [T, d]
  DeviceArray<float> xf_rows, hf, rstd_f, head_lse;  // head rows [R, d]
  // Backward scratch
  DeviceArray<float> dx, d_act, d_gu, d_h, d_att, d_qkv, d_hf, d_xf_rows, dlogprob;
  bool ready = false;  // forward ran and backward has not consumed it
};

PolicyModel::PolicyModel(const ModelConfig& config, Backend& backend)
    : config_(config), layout_(config), backend_(backend), act_(std::make_unique<Activations>()) {
  config_.validate();
  params_.resize(backend_, layout_.total);
  grads_.resize(backend_, layout_.total);
  backend_.fill(params_.data(), 0.0f, layout_.total);
  zero_grads();
  const int L = config_.n_layers;
  auto& a = *act_;
  for (auto* v : {&a.x_in, &a.h1, &a.rstd1, &a.qkv, &a.att, &a.lse, &a.x_mid, &a.h2, &a.rstd2,
                  &a.gu, &a.act})
    v->resize(L);
}

PolicyModel::~PolicyModel() = default;

void PolicyModel::init_random(uint64_t seed, float std) {
  Rng rng(seed);
  std::vector<float> host(layout_.total);
  const float out_std = std / std::sqrt(2.0f * config_.n_layers);
  for (const auto& t : layout_.tensors) {
    float* p = host.data() + t.offset;
    const bool is_norm = t.shape.size() == 1;
    const bool is_out = t.name.ends_with(".wo") || t.name.ends_with(".w_down");
    const float s = is_out ? out_std : std;
    for (size_t i = 0; i < t.numel; ++i)
      p[i] = is_norm ? 1.0f : static_cast<float>(rng.normal()) * s;
  }
  set_params(host);
}

std::vector<float> PolicyModel::get_params() const { return params_.download(); }
std::vector<float> PolicyModel::get_grads() const { return grads_.download(); }

void PolicyModel::set_params(const std::vector<float>& host) {
  if (host.size() != layout_.total)
    throw InputError("parameter vector has " + std::to_string(host.size()) +
                     " values, the model needs " + std::to_string(layout_.total));
  params_.upload(backend_, host);
}

void PolicyModel::zero_grads() { backend_.fill(grads_.data(), 0.0f, layout_.total); }

TreeAttentionArgs PolicyModel::attention_args(int layer) {
  auto& a = *act_;
  const int hd = config_.head_dim(), HD = config_.n_heads * hd;
  TreeAttentionArgs at;
  at.T = a.T;
  at.n_heads = config_.n_heads;
  at.n_kv_heads = config_.n_kv_heads;
  at.head_dim = hd;
  at.q = a.qkv[layer].data();
  at.k = at.q + HD;
  at.v = at.k + config_.n_kv_heads * hd;
  at.ld_qkv = config_.qkv_dim();
  at.subtree_end = a.subtree_end.data();
  at.out = a.att[layer].data();
  at.lse = a.lse[layer].data();
  return at;
}

HeadArgs PolicyModel::head_args() {
  auto& a = *act_;
  HeadArgs h;
  h.R = a.R;
  h.d = config_.d_model;
  h.V = config_.vocab;
  h.hidden = a.hf.data();
  h.weight = params_.data() + layout_.find("lm_head").offset;
  h.inv_temperature = a.inv_temperature;
  h.E = a.E;
  h.row_begin = a.row_begin.data();
  h.target = a.target.data();
  h.lse = a.head_lse.data();
  return h;
}

void PolicyModel::forward(const PackedBin& bin, float inv_temperature, BinForward* out) {
  auto& a = *act_;
  auto& B = backend_;
  const ModelConfig& c = config_;
  const int T = bin.tokens(), R = bin.rows(), E = bin.entries();
  const int d = c.d_model, F = c.ffn_dim, hd = c.head_dim(), H = c.n_heads;
  const int HD = H * hd, QKV = c.qkv_dim();
  FORGE_CHECK(T > 0, "empty bin");
  a.T = T;
  a.R = R;
  a.E = E;
  a.inv_temperature = inv_temperature;
  a.token.upload(B, bin.token);
  a.position.upload(B, bin.position);
  a.subtree_end.upload(B, bin.subtree_end);
  a.head_row.upload(B, bin.head_row);
  a.row_begin.upload(B, bin.row_begin);
  a.target.upload(B, bin.target);

  const float* P = params_.data();
  const size_t Td = static_cast<size_t>(T) * d;
  a.x_in[0].ensure(B, Td);
  B.embedding_fwd(a.token.data(), P + layout_.find("embed").offset, a.x_in[0].data(), T, d);
  for (int l = 0; l < c.n_layers; ++l) {
    a.h1[l].ensure(B, Td);
    a.rstd1[l].ensure(B, T);
    a.qkv[l].ensure(B, static_cast<size_t>(T) * QKV);
    a.att[l].ensure(B, static_cast<size_t>(T) * HD);
    a.lse[l].ensure(B, static_cast<size_t>(H) * T);
    a.x_mid[l].ensure(B, Td);
    a.h2[l].ensure(B, Td);
    a.rstd2[l].ensure(B, T);
    a.gu[l].ensure(B, static_cast<size_t>(T) * 2 * F);
    a.act[l].ensure(B, static_cast<size_t>(T) * F);
    DeviceArray<float>& x_out = l + 1 < c.n_layers ? a.x_in[l + 1] : a.x_final;
    x_out.ensure(B, Td);

    B.rmsnorm_fwd(a.x_in[l].data(), P + layout_.layer_offset(l, "attn_norm"), a.h1[l].data(),
                  a.rstd1[l].data(), T, d, c.norm_eps);
    B.gemm(false, true, T, QKV, d, 1.0f, a.h1[l].data(), d, P + layout_.layer_offset(l, "wqkv"),
           d, 0.0f, a.qkv[l].data(), QKV);
    B.rope(a.qkv[l].data(), a.position.data(), T, H + c.n_kv_heads, hd, QKV, c.rope_base, false);
    const TreeAttentionArgs at = attention_args(l);
    B.tree_attention_fwd(at);
    B.copy(a.x_mid[l].data(), a.x_in[l].data(), Td * sizeof(float));
    B.gemm(false, true, T, d, HD, 1.0f, a.att[l].data(), HD, P + layout_.layer_offset(l, "wo"),
           HD, 1.0f, a.x_mid[l].data(), d);
    B.rmsnorm_fwd(a.x_mid[l].data(), P + layout_.layer_offset(l, "mlp_norm"), a.h2[l].data(),
                  a.rstd2[l].data(), T, d, c.norm_eps);
    B.gemm(false, true, T, 2 * F, d, 1.0f, a.h2[l].data(), d,
           P + layout_.layer_offset(l, "w_gate_up"), d, 0.0f, a.gu[l].data(), 2 * F);
    B.swiglu_fwd(a.gu[l].data(), a.act[l].data(), T, F);
    B.copy(x_out.data(), a.x_mid[l].data(), Td * sizeof(float));
    B.gemm(false, true, T, d, F, 1.0f, a.act[l].data(), F, P + layout_.layer_offset(l, "w_down"),
           F, 1.0f, x_out.data(), d);
  }

  // Final norm and FP32 head on the loss rows only.
  a.xf_rows.ensure(B, static_cast<size_t>(R) * d);
  a.hf.ensure(B, static_cast<size_t>(R) * d);
  a.rstd_f.ensure(B, R);
  a.head_lse.ensure(B, R);
  DeviceArray<float> logprob(B, E), entropy(B, R), logits;
  if (out->want_logits) logits.resize(B, static_cast<size_t>(R) * c.vocab);
  if (R > 0) {
    B.gather_rows(a.x_final.data(), a.head_row.data(), a.xf_rows.data(), R, d);
    B.rmsnorm_fwd(a.xf_rows.data(), P + layout_.find("final_norm").offset, a.hf.data(),
                  a.rstd_f.data(), R, d, c.norm_eps);
    HeadArgs h = head_args();
    h.logprob = logprob.data();
    h.entropy = entropy.data();
    h.logits = out->want_logits ? logits.data() : nullptr;
    B.head_fwd(h);
  }
  if (out->want_logits) out->logits = logits.download();
  out->logprob = logprob.download();
  out->entropy = entropy.download();
  a.ready = true;
}

void PolicyModel::backward(const std::vector<float>& dlogprob) {
  auto& a = *act_;
  auto& B = backend_;
  const ModelConfig& c = config_;
  FORGE_CHECK(a.ready, "backward() without a preceding forward()");
  FORGE_CHECK(static_cast<int>(dlogprob.size()) == a.E, "dlogprob size does not match the bin's entries");
  a.ready = false;
  const int T = a.T, R = a.R, d = c.d_model, F = c.ffn_dim, hd = c.head_dim(), H = c.n_heads;
  const int HD = H * hd, QKV = c.qkv_dim();
  const size_t Td = static_cast<size_t>(T) * d;
  const float* P = params_.data();
  float* G = grads_.data();

  a.dx.ensure(B, Td);
  B.fill(a.dx.data(), 0.0f, Td);
  if (R > 0) {
    a.dlogprob.upload(B, dlogprob);
    a.d_hf.ensure(B, static_cast<size_t>(R) * d);
    a.d_xf_rows.ensure(B, static_cast<size_t>(R) * d);
    const HeadArgs h = head_args();
    HeadGrads hg;
    hg.dlogprob = a.dlogprob.data();
    hg.dhidden = a.d_hf.data();
    hg.dweight = G + layout_.find("lm_head").offset;
    B.head_bwd(h, hg);
    B.fill(a.d_xf_rows.data(), 0.0f, static_cast<size_t>(R) * d);
    B.rmsnorm_bwd(a.xf_rows.data(), P + layout_.find("final_norm").offset, a.rstd_f.data(),
                  a.d_hf.data(), a.d_xf_rows.data(), G + layout_.find("final_norm").offset, R, d);
    B.scatter_add_rows(a.d_xf_rows.data(), a.head_row.data(), a.dx.data(), R, d);
  }

  a.d_act.ensure(B, static_cast<size_t>(T) * F);
  a.d_gu.ensure(B, static_cast<size_t>(T) * 2 * F);
  a.d_h.ensure(B, Td);
  a.d_att.ensure(B, static_cast<size_t>(T) * HD);
  a.d_qkv.ensure(B, static_cast<size_t>(T) * QKV);
  for (int l = c.n_layers - 1; l >= 0; --l) {
    // MLP: x_out = x_mid + act Wd^T
    const size_t o_down = layout_.layer_offset(l, "w_down");
    const size_t o_gu = layout_.layer_offset(l, "w_gate_up");
    B.gemm(false, false, T, F, d, 1.0f, a.dx.data(), d, P + o_down, F, 0.0f, a.d_act.data(), F);
    B.gemm(true, false, d, F, T, 1.0f, a.dx.data(), d, a.act[l].data(), F, 1.0f, G + o_down, F);
    B.swiglu_bwd(a.gu[l].data(), a.d_act.data(), a.d_gu.data(), T, F);
    B.gemm(false, false, T, d, 2 * F, 1.0f, a.d_gu.data(), 2 * F, P + o_gu, d, 0.0f,
           a.d_h.data(), d);
    B.gemm(true, false, 2 * F, d, T, 1.0f, a.d_gu.data(), 2 * F, a.h2[l].data(), d, 1.0f,
           G + o_gu, d);
    const size_t o_mn = layout_.layer_offset(l, "mlp_norm");
    B.rmsnorm_bwd(a.x_mid[l].data(), P + o_mn, a.rstd2[l].data(), a.d_h.data(), a.dx.data(),
                  G + o_mn, T, d);
    // Attention: x_mid = x_in + att Wo^T
    const size_t o_wo = layout_.layer_offset(l, "wo");
    const size_t o_qkv = layout_.layer_offset(l, "wqkv");
    B.gemm(false, false, T, HD, d, 1.0f, a.dx.data(), d, P + o_wo, HD, 0.0f, a.d_att.data(), HD);
    B.gemm(true, false, d, HD, T, 1.0f, a.dx.data(), d, a.att[l].data(), HD, 1.0f, G + o_wo, HD);
    const TreeAttentionArgs at = attention_args(l);
    TreeAttentionGrads ag;
    ag.dout = a.d_att.data();
    ag.dq = a.d_qkv.data();
    ag.dk = ag.dq + HD;
    ag.dv = ag.dk + c.n_kv_heads * hd;
    B.tree_attention_bwd(at, ag);
    B.rope(a.d_qkv.data(), a.position.data(), T, H + c.n_kv_heads, hd, QKV, c.rope_base, true);
    B.gemm(false, false, T, d, QKV, 1.0f, a.d_qkv.data(), QKV, P + o_qkv, d, 0.0f, a.d_h.data(),
           d);
    B.gemm(true, false, QKV, d, T, 1.0f, a.d_qkv.data(), QKV, a.h1[l].data(), d, 1.0f,
           G + o_qkv, d);
    const size_t o_an = layout_.layer_offset(l, "attn_norm");
    B.rmsnorm_bwd(a.x_in[l].data(), P + o_an, a.rstd1[l].data(), a.d_h.data(), a.dx.data(),
                  G + o_an, T, d);
  }
  B.embedding_bwd(a.token.data(), a.dx.data(), G + layout_.find("embed").offset, T, d);
}

}  // namespace forge
