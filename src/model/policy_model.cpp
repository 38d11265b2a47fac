#include "model/policy_model.hpp"

#include <malloc.h>

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace forge {

namespace {

// Tree attention over the bin: every layer's softmax statistics are kept.
class TreeAttention final : public BlockAttention {
 public:
  TreeAttention(Backend& backend, const ModelConfig& c) : B_(backend), c_(c) {}
  const int32_t* subtree_end = nullptr;
  int T = 0;

  void forward(int, const float* qkv, int ld, float* out, float* lse, const AttentionBf16& bf16) override {
    B_.tree_attention_fwd(args(qkv, ld, out, lse, bf16));
  }
  void backward(int, const float* qkv, int ld, const float* out, const float* lse, const AttentionBf16& bf16,
                const float* dout, float* dqkv) override {
    B_.tree_attention_bwd(args(qkv, ld, const_cast<float*>(out), const_cast<float*>(lse), bf16),
                          fused_tree_attention_grads(c_.n_heads, c_.n_kv_heads, c_.head_dim(), dout, dqkv, bf16.dout));
  }

 private:
  TreeAttentionArgs args(const float* qkv, int ld, float* out, float* lse, const AttentionBf16& bf16) const {
    TreeAttentionArgs a =
        fused_tree_attention_args(T, c_.n_heads, c_.n_kv_heads, c_.head_dim(), qkv, ld, subtree_end, out, lse);
    a.qkv_bf16 = bf16.qkv;
    a.qkv_bf16_given = bf16.qkv_given;
    a.out_bf16 = bf16.out;
    return a;
  }
  Backend& B_;
  ModelConfig c_;
};

}  // namespace

struct PolicyModel::Pass {
  Pass(Backend& backend, const ModelConfig& c) : attention(backend, c) {}
  // Bin inputs
  DeviceArray<int32_t> token, position, subtree_end, head_row, row_begin, target;
  int E = 0;
  float inv_temperature = 1.0f;
  TreeAttention attention;
  TransformerActivations act{true};
  DeviceArray<float> head_lse, d_hf, dlogprob;
  bool ready = false;  // forward ran and backward has not consumed it
};

namespace {

// The configuration, validated before the layout divides by its head count.
const ModelConfig& validated(const ModelConfig& c) {
  c.validate();
  return c;
}

// InputError naming model.head_dim where it passes `most` (0: any): "the
// <backend> backend <does> heads of at most <most> dimensions<why>".
void require_heads_at_most(const ModelConfig& m, const Backend& backend, int most, const std::string& does,
                           const std::string& why) {
  if (most <= 0 || m.head_dim() <= most) return;
  throw InputError("model.head_dim = " + std::to_string(m.head_dim()) +
                   (m.head_dim_override > 0 ? "" : " (model.d_model / model.n_heads)") + ": the " + backend.name() +
                   " backend " + does + " heads of at most " + std::to_string(most) + " dimensions" + why);
}

}  // namespace

PolicyModel::PolicyModel(const ModelConfig& config, Backend& backend)
    : config_(validated(config)), layout_(config), backend_(backend), transformer_(config_, layout_, backend) {
  require_heads_at_most(config_, backend_, backend_.max_head_dim(), "takes",
                        " (its paged attention, which generates): use this model with --run.backend=cpu");
  pass_ = std::make_unique<Pass>(backend_, config_);
  params_.resize(backend_, layout_.total);
  grads_.resize(backend_, layout_.total);
  backend_.fill(params_.data(), 0.0f, layout_.total);
  zero_grads();
}

PolicyModel::~PolicyModel() = default;

void require_trainable_heads(const ModelConfig& m, const Backend& backend) {
  require_heads_at_most(m, backend, backend.max_trained_head_dim(), "trains",
                        " (its tree attention; generation takes larger ones): train this model with --run.backend=cpu");
}

size_t PolicyModel::activation_bytes() const { return pass_->act.bytes(); }

void PolicyModel::release_activations() {
  pass_ = std::make_unique<Pass>(backend_, config_);
  backend_.release_scratch();
  if (backend_.host_memory()) malloc_trim(0);  // hand the freed heap pages back to the system
}

void PolicyModel::init_random(uint64_t seed, float std) {
  Rng rng(seed);
  std::vector<float> host(layout_.total);
  const float out_std = std / std::sqrt(2.0f * config_.n_layers);
  for (const auto& t : layout_.tensors) {
    float* p = host.data() + t.offset;
    const bool is_norm = t.name.ends_with("norm");
    const bool is_bias = t.name.ends_with(".bqkv");
    const bool is_out = t.name.ends_with(".wo") || t.name.ends_with(".w_down");
    const float s = is_out ? out_std : std;
    for (size_t i = 0; i < t.numel; ++i)
      p[i] = is_norm ? 1.0f : is_bias ? 0.0f : static_cast<float>(rng.normal()) * s;
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
  ++params_version_;
}

const uint16_t* PolicyModel::params_bf16() {
  if (!backend_.bf16_operands()) return nullptr;
  if (params16_version_ != params_version_) {
    params16_.ensure(backend_, layout_.total);
    backend_.pack_bf16(params_.data(), params16_.data(), layout_.total);
    params16_version_ = params_version_;
  }
  return params16_.data();
}

void PolicyModel::zero_grads() { backend_.fill(grads_.data(), 0.0f, layout_.total); }

HeadArgs PolicyModel::head_args() {
  Pass& p = *pass_;
  HeadArgs h;
  h.R = p.act.rows();
  h.d = config_.d_model;
  h.V = config_.vocab;
  h.hidden = p.act.head_hidden();
  h.weight = transformer_.head_weight(params_.data());
  h.inv_temperature = p.inv_temperature;
  h.E = p.E;
  h.row_begin = p.row_begin.data();
  h.target = p.target.data();
  h.lse = p.head_lse.data();
  return h;
}

void PolicyModel::forward(const PackedBin& bin, float inv_temperature, BinForward* out) {
  Pass& p = *pass_;
  Backend& B = backend_;
  const int T = bin.tokens(), R = bin.rows(), E = bin.entries();
  FORGE_CHECK(T > 0, "empty bin");
  p.E = E;
  p.inv_temperature = inv_temperature;
  p.token.upload(B, bin.token);
  p.position.upload(B, bin.position);
  p.subtree_end.upload(B, bin.subtree_end);
  p.head_row.upload(B, bin.head_row);
  p.row_begin.upload(B, bin.row_begin);
  p.target.upload(B, bin.target);
  p.attention.subtree_end = p.subtree_end.data();
  p.attention.T = T;
  transformer_.forward(params_.data(), params_bf16(), p.token.data(), p.position.data(), T, p.head_row.data(), R,
                       p.attention, p.act);

  p.head_lse.ensure(B, R);
  DeviceArray<float> logprob(B, E), entropy(B, R), logits;
  if (out->want_logits) logits.resize(B, static_cast<size_t>(R) * config_.vocab);
  if (R > 0) {
    HeadArgs h = head_args();
    h.logprob = logprob.data();
    h.entropy = entropy.data();
    h.logits = out->want_logits ? logits.data() : nullptr;
    B.head_fwd(h);
  }
  if (out->want_logits) out->logits = logits.download();
  out->logprob = logprob.download();
  out->entropy = entropy.download();
  p.ready = true;
}

void PolicyModel::backward(const std::vector<float>& dlogprob) {
  Pass& p = *pass_;
  Backend& B = backend_;
  FORGE_CHECK(p.ready, "backward() without a preceding forward()");
  FORGE_CHECK(static_cast<int>(dlogprob.size()) == p.E, "dlogprob size does not match the bin's entries");
  p.ready = false;
  const int R = p.act.rows();
  p.d_hf.ensure(B, static_cast<size_t>(R) * config_.d_model);
  if (R > 0) {
    p.dlogprob.upload(B, dlogprob);
    HeadGrads hg;
    hg.dlogprob = p.dlogprob.data();
    hg.dhidden = p.d_hf.data();
    hg.dweight = transformer_.head_weight_grad(grads_.data());
    B.head_bwd(head_args(), hg);
  }
  transformer_.backward(params_.data(), params_bf16(), grads_.data(), p.d_hf.data(), p.token.data(), p.attention,
                        p.act);
}

}  // namespace forge
