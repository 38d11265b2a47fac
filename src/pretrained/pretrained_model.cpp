#include "pretrained/pretrained_model.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/cache_dir.hpp"
#include "core/error.hpp"
#include "pretrained/json_file.hpp"
#include "pretrained/gguf_file.hpp"
#include "pretrained/safetensors_file.hpp"

namespace forge {
namespace {

using nlohmann::json;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// Fills the forge layout tensor by tensor from a source that returns a named
// source tensor with its shape (checked here).
class LayoutFiller {
 public:
  LayoutFiller(const ModelConfig& c, std::string source) : layout_(c), source_(std::move(source)) {
    weights_.assign(layout_.total, 0.0f);
  }
  float* at(const std::string& name) { return weights_.data() + layout_.find(name).offset; }
  // Copies src (already checked to have `want` elements) to `dst`.
  void put(float* dst, const std::vector<float>& src) { std::copy(src.begin(), src.end(), dst); }
  void check(const std::string& tensor, const std::vector<int64_t>& got, const std::vector<int64_t>& want) const {
    if (got != want)
      throw InputError("'" + source_ + "': tensor '" + tensor + "' has shape " + shape_text(got) +
                       " but the model's configuration needs " + shape_text(want));
  }
  std::vector<float> take() { return std::move(weights_); }

 private:
  ParamLayout layout_;
  std::string source_;
  std::vector<float> weights_;
};

// Reads a tensor's rows into the forge buffer; get(name) gives (shape, data).
using Source = std::function<std::pair<std::vector<int64_t>, std::vector<float>>(const std::string&)>;

void fill_weights(PretrainedModel& m, const Source& get, const std::function<std::string(int, const char*)>& layer_name,
                  const std::string& embed, const std::string& norm, const std::string& head, bool permute_qk) {
  const ModelConfig& c = m.config;
  LayoutFiller f(c, m.path);
  const int64_t d = c.d_model, V = c.vocab, F = c.ffn_dim, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const auto take = [&](const std::string& name, const std::vector<int64_t>& want) {
    auto [shape, data] = get(name);
    f.check(name, shape, want);
    return data;
  };
  f.put(f.at("embed"), take(embed, {V, d}));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    f.put(f.at(p + "attn_norm"), take(layer_name(l, "attn_norm"), {d}));
    std::vector<float> q = take(layer_name(l, "q"), {H * hd, d});
    std::vector<float> k = take(layer_name(l, "k"), {Hkv * hd, d});
    const std::vector<float> v = take(layer_name(l, "v"), {Hkv * hd, d});
    if (permute_qk) {
      q = permute_rope_rows(q, static_cast<int>(H), static_cast<int>(hd), d, true);
      k = permute_rope_rows(k, static_cast<int>(Hkv), static_cast<int>(hd), d, true);
    }
    float* wqkv = f.at(p + "wqkv");
    std::copy(q.begin(), q.end(), wqkv);
    std::copy(k.begin(), k.end(), wqkv + q.size());
    std::copy(v.begin(), v.end(), wqkv + q.size() + k.size());
    if (c.qkv_bias) {
      std::vector<float> bq = take(layer_name(l, "q_bias"), {H * hd});
      std::vector<float> bk = take(layer_name(l, "k_bias"), {Hkv * hd});
      const std::vector<float> bv = take(layer_name(l, "v_bias"), {Hkv * hd});
      if (permute_qk) {
        bq = permute_rope_rows(bq, static_cast<int>(H), static_cast<int>(hd), 1, true);
        bk = permute_rope_rows(bk, static_cast<int>(Hkv), static_cast<int>(hd), 1, true);
      }
      float* b = f.at(p + "bqkv");
      std::copy(bq.begin(), bq.end(), b);
      std::copy(bk.begin(), bk.end(), b + bq.size());
      std::copy(bv.begin(), bv.end(), b + bq.size() + bk.size());
    }
    f.put(f.at(p + "wo"), take(layer_name(l, "o"), {d, H * hd}));
    f.put(f.at(p + "mlp_norm"), take(layer_name(l, "mlp_norm"), {d}));
    const std::vector<float> gate = take(layer_name(l, "gate"), {F, d});
    const std::vector<float> up = take(layer_name(l, "up"), {F, d});
    float* gu = f.at(p + "w_gate_up");
    std::copy(gate.begin(), gate.end(), gu);
    std::copy(up.begin(), up.end(), gu + gate.size());
    f.put(f.at(p + "w_down"), take(layer_name(l, "down"), {d, F}));
  }
  f.put(f.at("final_norm"), take(norm, {d}));
  if (!c.tied_embeddings) f.put(f.at("lm_head"), take(head, {V, d}));
  m.weights = f.take();
}

void check_vocabulary(const PretrainedModel& m) {
  const int32_t tv = m.tokenizer.tokenizer->vocab_size();
  if (tv > m.config.vocab)
    throw InputError("'" + m.path + "': the tokenizer (" + m.tokenizer.source + ") has " + std::to_string(tv) +
                     " tokens but the model's embedding only " + std::to_string(m.config.vocab) +
                     " rows: they do not belong together");
  if (tv < m.config.vocab / 2)
    throw InputError("'" + m.path + "': the tokenizer (" + m.tokenizer.source + ") has " + std::to_string(tv) +
                     " tokens for a model of " + std::to_string(m.config.vocab) + ": they do not belong together");
}

PretrainedModel load_hf(const std::string& folder, bool weights) {
  PretrainedModel m;
  m.path = folder;
  m.format = "hf";
  const std::string cpath = folder + "/config.json";
  if (!std::filesystem::exists(cpath)) throw InputError("'" + folder + "' has no config.json (not a Hugging Face model folder)");
  const json cfg = read_json_file(cpath);
  const auto refuse = [&](const std::string& what) { return InputError("'" + cpath + "': " + what); };
  const std::string type = cfg.value("model_type", "");
  if (type == "llama") m.architecture = "llama";
  else if (type == "qwen2") m.architecture = "qwen2";
  else
    throw refuse("architecture '" + (type.empty() ? std::string("(no model_type)") : type) +
                 "' is not supported; forge loads llama (Llama 2/3, SmolLM2) and qwen2" +
                 (type == "qwen3" ? " (Qwen3's QK-norm is not implemented)" : ""));
  try {
    ModelConfig& c = m.config;
    if (cfg.value("hidden_act", "silu") != "silu") throw refuse("hidden_act '" + cfg.value("hidden_act", "") + "' (forge: silu)");
    if (cfg.value("mlp_bias", false)) throw refuse("mlp_bias = true is not supported");
    if (m.architecture == "llama" && cfg.value("attention_bias", false))
      throw refuse("attention_bias = true (a bias on q, k, v and o) is not supported");
    if (cfg.value("use_sliding_window", false)) throw refuse("use_sliding_window = true is not supported");
    c.d_model = cfg.at("hidden_size").get<int>();
    c.n_layers = cfg.at("num_hidden_layers").get<int>();
    c.n_heads = cfg.at("num_attention_heads").get<int>();
    c.n_kv_heads = cfg.value("num_key_value_heads", c.n_heads);
    c.ffn_dim = cfg.at("intermediate_size").get<int>();
    c.vocab = cfg.at("vocab_size").get<int>();
    c.norm_eps = cfg.value("rms_norm_eps", 1e-6f);
    c.rope_base = cfg.value("rope_theta", 10000.0f);
    const json& hdj = cfg.value("head_dim", json());
    c.head_dim_override = hdj.is_number() && hdj.get<int>() != c.d_model / c.n_heads ? hdj.get<int>() : 0;
    c.tied_embeddings = cfg.value("tie_word_embeddings", false);
    c.qkv_bias = m.architecture == "qwen2";
    const json& rs = cfg.value("rope_scaling", json());
    if (rs.is_object()) {
      const std::string rt = rs.value("rope_type", rs.value("type", ""));
      if (rt == "llama3") {
        c.rope_scaling.factor = rs.at("factor").get<float>();
        c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0f);
        c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0f);
        c.rope_scaling.original_max_positions = rs.value("original_max_position_embeddings", 8192);
      } else if (rt != "default") {
        throw refuse("rope_scaling type '" + rt + "' is not supported (forge: none or llama3)");
      }
    }
    m.max_positions = cfg.value("max_position_embeddings", 2048);
    const json& names = cfg.value("_name_or_path", json());
    m.name = names.is_string() ? names.get<std::string>() : type;
  } catch (const json::exception& e) {
    throw refuse(std::string("a key is missing or of the wrong type: ") + e.what());
  }
  m.config.validate();
  m.tokenizer = tokenizer_from_hf_folder(folder);
  check_vocabulary(m);
  if (!weights) return m;
  const SafetensorsModel st(folder);
  const Source get = [&](const std::string& name) { return std::make_pair(st.shape(name), st.read(name)); };
  const auto layer = [](int l, const char* what) -> std::string {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string w = what;
    if (w == "attn_norm") return p + "input_layernorm.weight";
    if (w == "mlp_norm") return p + "post_attention_layernorm.weight";
    if (w == "q" || w == "k" || w == "v" || w == "o") return p + "self_attn." + w + "_proj.weight";
    if (w == "q_bias" || w == "k_bias" || w == "v_bias") return p + "self_attn." + w.substr(0, 1) + "_proj.bias";
    return p + "mlp." + w + "_proj.weight";
  };
  fill_weights(m, get, layer, "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", true);
  return m;
}

PretrainedModel load_gguf(const std::string& path, bool weights) {
  PretrainedModel m;
  m.path = path;
  m.format = "gguf";
  const GgufFile g(path);
  const std::string arch = g.get_string("general.architecture", "");
  if (arch != "llama")
    throw InputError("GGUF file '" + path + "': architecture '" + arch + "' is not supported; forge loads llama GGUF files");
  const std::string a = "llama.";
  ModelConfig& c = m.config;
  c.d_model = static_cast<int>(g.get_int(a + "embedding_length"));
  c.n_layers = static_cast<int>(g.get_int(a + "block_count"));
  c.n_heads = static_cast<int>(g.get_int(a + "attention.head_count"));
  c.n_kv_heads = static_cast<int>(g.get_int(a + "attention.head_count_kv", c.n_heads));
  c.ffn_dim = static_cast<int>(g.get_int(a + "feed_forward_length"));
  c.norm_eps = static_cast<float>(g.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_base = static_cast<float>(g.get_float(a + "rope.freq_base", 10000.0));
  const int hd = static_cast<int>(g.get_int(a + "attention.key_length", c.d_model / std::max(1, c.n_heads)));
  if (g.get_int(a + "attention.value_length", hd) != hd)
    throw InputError("GGUF file '" + path + "': key and value head sizes differ; forge needs them equal");
  c.head_dim_override = hd != c.d_model / std::max(1, c.n_heads) ? hd : 0;
  if (g.has(a + "rope.scaling.type") && g.get_string(a + "rope.scaling.type") != "none")
    throw InputError("GGUF file '" + path + "': rope scaling '" + g.get_string(a + "rope.scaling.type") +
                     "' is not supported");
  if (g.find("rope_freqs.weight"))
    throw InputError("GGUF file '" + path +
                     "': per-frequency RoPE factors (rope_freqs, Llama 3.1 scaling) are not supported from GGUF; load "
                     "the Hugging Face folder instead");
  c.tied_embeddings = g.find("output.weight") == nullptr;
  m.max_positions = static_cast<int>(g.get_int(a + "context_length", 2048));
  m.architecture = "llama";
  m.name = g.get_string("general.name", "llama");
  m.tokenizer = tokenizer_from_gguf(g);
  const GgufFile::TensorInfo* embed = g.find("token_embd.weight");
  if (!embed || embed->dims.size() != 2) throw InputError("GGUF file '" + path + "' has no 2-D token_embd.weight");
  c.vocab = static_cast<int>(embed->dims[1]);
  c.validate();
  check_vocabulary(m);
  if (!weights) return m;
  const Source get = [&](const std::string& name) {
    const GgufFile::TensorInfo* t = g.find(name);
    if (!t) throw InputError("GGUF file '" + path + "' has no tensor '" + name + "'");
    std::vector<int64_t> shape(t->dims.rbegin(), t->dims.rend());  // slowest first
    return std::make_pair(shape, g.tensor(*t));
  };
  const auto layer = [](int l, const char* what) -> std::string {
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::string w = what;
    if (w == "attn_norm") return p + "attn_norm.weight";
    if (w == "mlp_norm") return p + "ffn_norm.weight";
    if (w == "o") return p + "attn_output.weight";
    if (w == "q" || w == "k" || w == "v") return p + "attn_" + w + ".weight";
    return p + "ffn_" + w + ".weight";
  };
  fill_weights(m, get, layer, "token_embd.weight", "output_norm.weight", "output.weight", false);
  return m;
}

}  // namespace

std::vector<float> permute_rope_rows(const std::vector<float>& w, int n_heads, int head_dim, int64_t cols,
                                     bool to_interleaved) {
  std::vector<float> out(w.size());
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h)
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j) {
        const int64_t inter = static_cast<int64_t>(h) * head_dim + 2 * i + j;   // forge row
        const int64_t split = static_cast<int64_t>(h) * head_dim + i + j * half;  // HF row
        const int64_t from = to_interleaved ? split : inter, to = to_interleaved ? inter : split;
        std::memcpy(out.data() + to * cols, w.data() + from * cols, sizeof(float) * cols);
      }
  return out;
}

PretrainedModel load_pretrained(const std::string& given, bool weights) {
  const std::string path = expand_cache_path(given);
  if (std::filesystem::is_directory(path)) return load_hf(path, weights);
  if (!std::filesystem::exists(path)) throw InputError("pretrained model '" + path + "' does not exist");
  return load_gguf(path, weights);
}

}  // namespace forge
