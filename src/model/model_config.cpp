#include "model/model_config.hpp"

#include <cmath>

#include "core/error.hpp"

namespace forge {

namespace {

// The rules across fields, for a configuration whose sizes are each positive.
void check_across_fields(const ModelConfig& m) {
  if (m.head_dim_override == 0 && m.d_model % m.n_heads != 0)
    throw InputError("model.n_heads = " + std::to_string(m.n_heads) + " must divide model.d_model = " +
                     std::to_string(m.d_model) + " (or set model.head_dim)");
  if (m.n_heads % m.n_kv_heads != 0)
    throw InputError("model.n_kv_heads = " + std::to_string(m.n_kv_heads) + " must divide model.n_heads = " +
                     std::to_string(m.n_heads));
  if (m.head_dim() % 2 != 0)
    throw InputError("the head dimension " + std::to_string(m.head_dim()) + " must be even for RoPE (model.head_dim, or " +
                     "model.d_model / model.n_heads when it is 0)");
  const RopeScaling& r = m.rope_scaling;
  if (r.enabled() && r.factor < 1)
    throw InputError("model.rope_scaling = " + format_float(r.factor) + " must be 0 (none) or >= 1");
  if (r.enabled() && r.high_freq_factor <= r.low_freq_factor)
    throw InputError("model.rope_high_freq_factor = " + format_float(r.high_freq_factor) +
                     " must exceed model.rope_low_freq_factor = " + format_float(r.low_freq_factor) +
                     " when model.rope_scaling is set");
  if (r.enabled() && r.original_max_positions <= 0)
    throw InputError("model.rope_original_max_positions must be positive when model.rope_scaling is set");
}

}  // namespace

void ModelConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("model: " + what);
  };
  // The ranges of the [model] keys, also for a pretrained model's
  // config.json: within them every size product below fits its type.
  const auto within = [&](int64_t v, int64_t hi, const std::string& key) {
    if (v < 1 || v > hi)
      throw InputError(key + " = " + std::to_string(v) + " is outside [1, " + std::to_string(hi) + "]");
  };
  within(vocab, kMaxVocab, "the vocabulary size");
  within(d_model, 65536, "model.d_model");
  within(n_layers, 1024, "model.n_layers");
  within(n_heads, 1024, "model.n_heads");
  within(n_kv_heads, 1024, "model.n_kv_heads");
  within(ffn_dim, 1 << 20, "model.ffn_dim");
  if (head_dim_override < 0 || head_dim_override > 4096)
    throw InputError("model.head_dim = " + std::to_string(head_dim_override) + " is outside [0, 4096]");
  need(rope_base > 1.0f, "model.rope_base must exceed 1");
  need(norm_eps > 0.0f, "model.norm_eps must be positive");
  check_across_fields(*this);
  need(head_dim() > 0, "the head dimension must be positive");
}

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  const int hd = c.head_dim();
  std::vector<double> f(hd / 2);
  const RopeScaling& s = c.rope_scaling;
  const double kPi = 3.14159265358979323846;
  for (int i = 0; i < hd / 2; ++i) {
    double x = std::pow(static_cast<double>(c.rope_base), -2.0 * i / hd);
    if (s.enabled()) {
      const double wavelen = 2 * kPi / x;
      const double low_wavelen = s.original_max_positions / s.low_freq_factor;
      const double high_wavelen = s.original_max_positions / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        x /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (s.original_max_positions / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        x = (1 - smooth) * x / s.factor + smooth * x;
      }
    }
    f[i] = x;
  }
  return f;
}

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t d = c.d_model, V = c.vocab, F = c.ffn_dim, hd = c.head_dim();
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    ParamTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.numel = 1;
    for (auto s : t.shape) t.numel *= static_cast<size_t>(s);
    t.offset = total;
    t.decay = decay;
    total += t.numel;
    tensors.push_back(std::move(t));
  };
  add("embed", {V, d}, c.tied_embeddings);  // as the head, it decays like the head
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", {d}, false);
    add(p + "wqkv", {(c.n_heads + 2 * c.n_kv_heads) * hd, d}, true);
    if (c.qkv_bias) add(p + "bqkv", {(c.n_heads + 2 * c.n_kv_heads) * hd}, false);
    add(p + "wo", {d, c.n_heads * hd}, true);
    add(p + "mlp_norm", {d}, false);
    add(p + "w_gate_up", {2 * F, d}, true);
    add(p + "w_down", {d, F}, true);
  }
  add("final_norm", {d}, false);
  if (!c.tied_embeddings) add("lm_head", {V, d}, true);
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  throw Error("no parameter tensor named '" + name + "'");
}

size_t ParamLayout::layer_offset(int layer, const char* what) const {
  return find("layers." + std::to_string(layer) + "." + what).offset;
}

void add_model_options(OptionSet& opts, ModelConfig& m) {
  opts.describe_section("model", "policy size and variant (a Llama-style transformer)");
  opts.add("model.pretrained", &m.pretrained,
           "a pretrained model to start from: a Hugging Face folder or a GGUF file (Llama, SmolLM2, Qwen2); "
           "its own configuration replaces the sizes below; empty = the built-in policy on the byte tokenizer");
  opts.add("model.d_model", &m.d_model, "width of the residual stream", in_range(8, 65536));
  opts.add("model.n_layers", &m.n_layers, "number of transformer blocks", in_range(1, 1024));
  opts.add("model.n_heads", &m.n_heads, "attention (query) heads; must divide d_model unless model.head_dim is set",
           in_range(1, 1024));
  opts.add("model.n_kv_heads", &m.n_kv_heads,
           "key/value heads (grouped-query attention); must divide n_heads", in_range(1, 1024));
  opts.add("model.head_dim", &m.head_dim_override, "dimension of each head; 0 = d_model / n_heads",
           in_range(0, 4096));
  opts.add("model.ffn_dim", &m.ffn_dim, "hidden width of the SwiGLU MLP", in_range(1, 1 << 20));
  opts.add("model.rope_base", &m.rope_base, "RoPE frequency base (rope_theta)",
           in_range(1, 1e12, Interval::kOpenLow));
  opts.add("model.rope_scaling", &m.rope_scaling.factor,
           "Llama 3 RoPE rescaling factor", satisfies("0 (none) or >= 1", [](double x) { return x == 0 || x >= 1; }));
  opts.add("model.rope_low_freq_factor", &m.rope_scaling.low_freq_factor, "Llama 3 RoPE rescaling: low_freq_factor",
           greater_than(0));
  opts.add("model.rope_high_freq_factor", &m.rope_scaling.high_freq_factor,
           "Llama 3 RoPE rescaling: high_freq_factor (> rope_low_freq_factor when rope_scaling is set)",
           greater_than(0));
  opts.add("model.rope_original_max_positions", &m.rope_scaling.original_max_positions,
           "Llama 3 RoPE rescaling: original_max_position_embeddings", at_least(1));
  opts.add("model.norm_eps", &m.norm_eps, "epsilon of RMSNorm", in_range(0, 1, Interval::kOpen));
  opts.add("model.tied_embeddings", &m.tied_embeddings, "the LM head uses the embedding's weights");
  opts.add("model.qkv_bias", &m.qkv_bias, "a bias on the q, k and v projections (Qwen2)");
  // The rules across fields of ModelConfig::validate(), checked at parse
  // time (validate() also needs the vocabulary, which config does not set).
  opts.add_check([&m] { check_across_fields(m); });
}

std::vector<ModelFieldDifference> model_field_differences(const ModelConfig& here, const ModelConfig& there) {
  std::vector<ModelFieldDifference> out;
  const auto differ = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) out.push_back({key, a, b});
  };
  const auto i = [](int x) { return std::to_string(x); };
  const auto f = [](float x) { return format_float(x); };
  differ("vocab", i(here.vocab), i(there.vocab));
  differ("model.d_model", i(here.d_model), i(there.d_model));
  differ("model.n_layers", i(here.n_layers), i(there.n_layers));
  differ("model.n_heads", i(here.n_heads), i(there.n_heads));
  differ("model.n_kv_heads", i(here.n_kv_heads), i(there.n_kv_heads));
  differ("head dimension", i(here.head_dim()), i(there.head_dim()));
  differ("model.ffn_dim", i(here.ffn_dim), i(there.ffn_dim));
  differ("model.rope_base", f(here.rope_base), f(there.rope_base));
  differ("model.rope_scaling", f(here.rope_scaling.factor), f(there.rope_scaling.factor));
  if (here.rope_scaling.enabled() && there.rope_scaling.enabled()) {
    differ("model.rope_low_freq_factor", f(here.rope_scaling.low_freq_factor), f(there.rope_scaling.low_freq_factor));
    differ("model.rope_high_freq_factor", f(here.rope_scaling.high_freq_factor),
           f(there.rope_scaling.high_freq_factor));
    differ("model.rope_original_max_positions", i(here.rope_scaling.original_max_positions),
           i(there.rope_scaling.original_max_positions));
  }
  differ("model.norm_eps", f(here.norm_eps), f(there.norm_eps));
  differ("model.tied_embeddings", here.tied_embeddings ? "true" : "false", there.tied_embeddings ? "true" : "false");
  differ("model.qkv_bias", here.qkv_bias ? "true" : "false", there.qkv_bias ? "true" : "false");
  return out;
}

std::string model_differences(const ModelConfig& here, const ModelConfig& there) {
  std::string out;
  for (const ModelFieldDifference& d : model_field_differences(here, there))
    out += (out.empty() ? "" : ", ") + d.key + " " + d.here + " against " + d.there;
  return out;
}

}  // namespace forge
