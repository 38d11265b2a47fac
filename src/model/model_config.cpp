#include "model/model_config.hpp"

#include "core/error.hpp"

namespace forge {

void ModelConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw InputError("model: " + what);
  };
  need(vocab > 0, "vocab must be positive");
  need(d_model > 0, "model.d_model must be positive");
  need(n_layers > 0, "model.n_layers must be positive");
  need(n_heads > 0 && d_model % n_heads == 0,
       "model.n_heads must divide model.d_model (" + std::to_string(d_model) + ")");
  need(n_kv_heads > 0 && n_heads % n_kv_heads == 0,
       "model.n_kv_heads must divide model.n_heads (" + std::to_string(n_heads) + ")");
  need(head_dim() % 2 == 0, "head dimension d_model/n_heads must be even for RoPE");
  need(ffn_dim > 0, "model.ffn_dim must be positive");
  need(rope_base > 1.0f, "model.rope_base must exceed 1");
  need(norm_eps > 0.0f, "model.norm_eps must be positive");
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
  add("embed", {V, d}, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn_norm", {d}, false);
    add(p + "wqkv", {(c.n_heads + 2 * c.n_kv_heads) * hd, d}, true);
    add(p + "wo", {d, c.n_heads * hd}, true);
    add(p + "mlp_norm", {d}, false);
    add(p + "w_gate_up", {2 * F, d}, true);
    add(p + "w_down", {d, F}, true);
  }
  add("final_norm", {d}, false);
  add("lm_head", {V, d}, true);
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
  opts.describe_section("model", "policy size (a Llama-style transformer)");
  opts.add("model.d_model", &m.d_model, "width of the residual stream", in_range(8, 65536));
  opts.add("model.n_layers", &m.n_layers, "number of transformer blocks", in_range(1, 1024));
  opts.add("model.n_heads", &m.n_heads, "attention (query) heads; must divide d_model",
           in_range(1, 1024));
  opts.add("model.n_kv_heads", &m.n_kv_heads,
           "key/value heads (grouped-query attention); must divide n_heads", in_range(1, 1024));
  opts.add("model.ffn_dim", &m.ffn_dim, "hidden width of the SwiGLU MLP", in_range(1, 1 << 20));
  opts.add("model.rope_base", &m.rope_base, "RoPE frequency base",
           in_range(1, 1e9, Interval::kOpenLow));
  opts.add("model.norm_eps", &m.norm_eps, "epsilon of RMSNorm", in_range(0, 1, Interval::kOpen));
  // The same cross-field rules as ModelConfig::validate(), checked at parse
  // time (validate() also needs the vocabulary, which config does not set).
  opts.add_check([&m] {
    if (m.d_model % m.n_heads != 0)
      throw InputError("model.n_heads = " + std::to_string(m.n_heads) +
                       " must divide model.d_model = " + std::to_string(m.d_model));
    if (m.n_heads % m.n_kv_heads != 0)
      throw InputError("model.n_kv_heads = " + std::to_string(m.n_kv_heads) +
                       " must divide model.n_heads = " + std::to_string(m.n_heads));
    if ((m.d_model / m.n_heads) % 2 != 0)
      throw InputError("model.d_model / model.n_heads = " + std::to_string(m.d_model / m.n_heads) +
                       " (the head dimension) must be even for RoPE");
  });
}

}  // namespace forge
