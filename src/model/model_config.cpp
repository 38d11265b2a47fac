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

}  // namespace forge
