#include "pretrained/pretrained_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "core/cache_dir.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "pretrained/json_file.hpp"
#include "pretrained/gguf_file.hpp"
#include "pretrained/safetensors_file.hpp"

namespace forge {
namespace {

using nlohmann::json;

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// v as the float a ModelConfig holds: finite (1e39 is a finite double but no
// float) and above `above`; `what` names the file and the key.
float float_above(double v, double above, const std::string& what) {
  const float f = static_cast<float>(v);
  if (!std::isfinite(f) || !(f > above)) {
    std::ostringstream m;
    m << what << " is " << v << "; it must be a finite number above " << above;
    throw InputError(m.str());
  }
  return f;
}

// validate() names forge's keys (model.n_heads); the InputError names the file too.
void validate_config(const ModelConfig& c, const std::string& file) {
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError("'" + file + "': " + e.what());
  }
}

// One tensor of the source and its place in forge's layout: from value `at`
// of forge's tensor `dst`; q and k (and their biases) with rope_heads > 0
// are permuted from the half-split RoPE layout.
struct Piece {
  std::string name;            // the source's
  std::vector<int64_t> shape;  // slowest first, as the configuration needs it
  std::string dst;             // forge's (ParamLayout)
  int64_t at = 0;
  int rope_heads = 0;
};

using LayerName = std::function<std::string(int, const char*)>;

// Every piece of the model, in layout order, to f.
void each_piece(const ModelConfig& c, const LayerName& layer_name, const std::string& embed, const std::string& norm,
                const std::string& head, bool permute_qk, const std::function<void(const Piece&)>& f) {
  const int64_t d = c.d_model, V = c.vocab, F = c.ffn_dim, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const int qh = permute_qk ? c.n_heads : 0, kh = permute_qk ? c.n_kv_heads : 0;
  f({embed, {V, d}, "embed"});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const auto src = [&](const char* what) { return layer_name(l, what); };
    f({src("attn_norm"), {d}, p + "attn_norm"});
    f({src("q"), {H * hd, d}, p + "wqkv", 0, qh});
    f({src("k"), {Hkv * hd, d}, p + "wqkv", H * hd * d, kh});
    f({src("v"), {Hkv * hd, d}, p + "wqkv", (H + Hkv) * hd * d});
    if (c.qkv_bias) {
      f({src("q_bias"), {H * hd}, p + "bqkv", 0, qh});
      f({src("k_bias"), {Hkv * hd}, p + "bqkv", H * hd, kh});
      f({src("v_bias"), {Hkv * hd}, p + "bqkv", (H + Hkv) * hd});
    }
    f({src("o"), {d, H * hd}, p + "wo"});
    f({src("mlp_norm"), {d}, p + "mlp_norm"});
    f({src("gate"), {F, d}, p + "w_gate_up"});
    f({src("up"), {F, d}, p + "w_gate_up", F * d});
    f({src("down"), {d, F}, p + "w_down"});
  }
  f({norm, {d}, "final_norm"});
  if (!c.tied_embeddings) f({head, {V, d}, "lm_head"});
}

// A model's tensors by name (InputError when absent): shape() from the
// file's header, slowest first (InputError for a type read() cannot
// convert); read() the values in FP32.
struct Source {
  std::function<std::vector<int64_t>(const std::string&)> shape;
  std::function<std::vector<float>(const std::string&)> read;
  std::function<std::vector<std::string>()> names;  // every tensor the source holds
};

// Tensors the source holds that no piece takes: a GGUF file's are refused
// (llama.cpp would use them: attn_output.bias, attn_qkv), a Hugging Face
// folder's warned about (transformers ignores unexpected keys too). Rotary
// inv_freq buffers and a tied model's stored head are expected.
void check_unused(const PretrainedModel& m, const Source& src, std::vector<std::string> used, bool refuse) {
  std::sort(used.begin(), used.end());
  std::vector<std::string> unused;
  for (const std::string& n : src.names()) {
    if (std::binary_search(used.begin(), used.end(), n)) continue;
    if (n.ends_with(".rotary_emb.inv_freq")) continue;
    if (m.config.tied_embeddings && n == "lm_head.weight") continue;
    unused.push_back(n);
  }
  if (unused.empty()) return;
  std::sort(unused.begin(), unused.end());
  std::string shown;
  for (size_t i = 0; i < unused.size() && i < 4; ++i) shown += (i ? ", '" : "'") + unused[i] + "'";
  if (unused.size() > 4) shown += " and " + std::to_string(unused.size() - 4) + " more";
  const std::string what = "'" + m.path + "' holds " + std::to_string(unused.size()) + " tensor(s) forge's " +
                           m.architecture + " has no place for: " + shown;
  if (refuse) throw InputError(what + " (a bias or layer forge does not implement)");
  log_warn(what + "; they are ignored, as transformers ignores them");
}

void fill_weights(PretrainedModel& m, const Source& src, const LayerName& layer_name, const std::string& embed,
                  const std::string& norm, const std::string& head, bool hf) {
  const ModelConfig& c = m.config;
  const auto pieces = [&](const std::function<void(const Piece&)>& f) {
    each_piece(c, layer_name, embed, norm, head, /*permute_qk=*/hf, f);
  };
  std::vector<std::string> used;
  pieces([&](const Piece& p) { used.push_back(p.name); });
  check_unused(m, src, std::move(used), /*refuse=*/!hf);
  // Every tensor's presence and shape first, from the headers alone: sizes
  // the file does not hold (an intermediate_size of 2e9, 2^31 - 1 blocks)
  // are refused before the weights' buffer is allocated.
  pieces([&](const Piece& p) {
    const std::vector<int64_t> got = src.shape(p.name);
    if (got != p.shape)
      throw InputError("'" + m.path + "': tensor '" + p.name + "' has shape " + shape_text(got) +
                       " but the model's configuration needs " + shape_text(p.shape));
  });
  const ParamLayout layout(c);
  std::vector<float> w(layout.total);
  pieces([&](const Piece& p) {
    std::vector<float> v = src.read(p.name);
    // A NaN or infinity (a damaged file, an F16 overflow, a bad quant scale)
    // would only show as non-finite logits, naming neither file nor tensor.
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end())
      throw InputError("'" + m.path + "': tensor '" + p.name + "' holds " + std::to_string(*bad) + " at value " +
                       std::to_string(bad - v.begin()) + " (a damaged or wrongly converted file)");
    if (p.rope_heads) v = permute_rope_rows(v, p.rope_heads, c.head_dim(), p.shape.size() == 2 ? p.shape[1] : 1, true);
    std::copy(v.begin(), v.end(), w.begin() + static_cast<std::ptrdiff_t>(layout.find(p.dst).offset + p.at));
  });
  m.weights = std::move(w);
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

// RoPE from config.json: rope_theta and rope_scaling (transformers 4), or
// rope_parameters holding both (transformers 5, which writes rope_theta
// null at the top). Both spellings present must agree; a per-layer-type
// rope_parameters, a partial rotary factor and scaling types other than
// llama3 are refused.
void read_rope(const JsonObject& cfg, ModelConfig& c, const std::function<InputError(const std::string&)>& refuse) {
  std::optional<JsonObject> params;  // transformers 5's rope_parameters
  if (cfg.has("rope_parameters")) {
    params.emplace(cfg.object("rope_parameters"));
    for (const auto& [key, value] : params->value().items())
      if (value.is_object())
        throw refuse("rope_parameters." + key + " (RoPE per layer type) is not supported; forge uses one RoPE");
  }
  for (const JsonObject* o : {&cfg, params ? &*params : static_cast<const JsonObject*>(nullptr)})
    if (o && o->number("partial_rotary_factor", 1.0) != 1.0)
      throw InputError(o->name("partial_rotary_factor") +
                       " != 1 (a partial rotary embedding) is not supported; forge rotates whole heads");
  const bool inner_theta = params && params->has("rope_theta");
  double theta = cfg.number("rope_theta", 10000);
  if (inner_theta) {
    const double inner = params->number("rope_theta", 10000);
    if (cfg.has("rope_theta") && inner != theta)
      throw refuse("rope_theta " + std::to_string(theta) + " and rope_parameters.rope_theta " +
                   std::to_string(inner) + " differ");
    theta = inner;
  }
  c.rope_base = float_above(theta, 1, cfg.name(inner_theta ? "rope_parameters.rope_theta" : "rope_theta"));
  // The scaling: rope_parameters wins; a rope_scaling beside it must say the
  // same. `untyped`: the type of one that names none.
  const auto read_scaling = [&](const JsonObject& rs, const std::string& key, const char* untyped) {
    RopeScaling r;
    const std::string rt = rs.string("rope_type", rs.string("type", untyped));
    if (rt == "llama3") {
      // Every key, as transformers requires (a guessed context length moves
      // the frequencies without a word).
      const auto need = [&](const char* k) {
        if (!rs.has(k))
          throw refuse(key + " of type llama3 without " + k + " (it needs factor, low_freq_factor, "
                       "high_freq_factor and original_max_position_embeddings)");
        return k;
      };
      r.factor = float_above(rs.number(need("factor"), 0), 0, rs.name("factor"));
      r.low_freq_factor = float_above(rs.number(need("low_freq_factor"), 0), 0, rs.name("low_freq_factor"));
      r.high_freq_factor = float_above(rs.number(need("high_freq_factor"), 0), 0, rs.name("high_freq_factor"));
      r.original_max_positions =
          static_cast<int>(rs.integer(need("original_max_position_embeddings"), 1, kMaxInt, 0));
      // model_config's rules, by the file's names.
      if (r.factor < 1) throw InputError(rs.name("factor") + " is " + format_number(r.factor) + "; it must be >= 1");
      if (!(r.high_freq_factor > r.low_freq_factor))
        throw InputError(rs.name("high_freq_factor") + " is " + format_number(r.high_freq_factor) +
                         "; it must exceed low_freq_factor (" + format_number(r.low_freq_factor) + ")");
    } else if (rt != "default") {
      throw refuse(key + " type '" + rt + "' is not supported (forge: none or llama3)");
    }
    return r;
  };
  std::optional<RopeScaling> old_style, new_style;
  if (cfg.has("rope_scaling")) old_style = read_scaling(cfg.object("rope_scaling"), "rope_scaling", "");
  if (params) new_style = read_scaling(*params, "rope_parameters", "default");
  if (old_style && new_style && !(*old_style == *new_style))
    throw refuse("rope_scaling and rope_parameters describe different RoPE scalings");
  if (new_style) c.rope_scaling = *new_style;
  else if (old_style) c.rope_scaling = *old_style;
}

PretrainedModel load_hf(const std::string& folder, bool weights) {
  PretrainedModel m;
  m.path = folder;
  m.format = "hf";
  const std::string cpath = folder + "/config.json";
  if (!std::filesystem::exists(cpath)) throw InputError("'" + folder + "' has no config.json (not a Hugging Face model folder)");
  const json file = read_json_file(cpath);
  const JsonObject cfg(file, cpath);
  const auto refuse = [&](const std::string& what) { return InputError("'" + cpath + "': " + what); };
  const std::string type = cfg.string("model_type", "");
  if (type == "llama") m.architecture = "llama";
  else if (type == "qwen2") m.architecture = "qwen2";
  else
    throw refuse("architecture '" + (type.empty() ? std::string("(no model_type)") : type) +
                 "' is not supported; forge loads llama (Llama 3, SmolLM2) and qwen2" +
                 (type == "qwen3" ? " (Qwen3's QK-norm is not implemented)" : ""));
  ModelConfig& c = m.config;
  const std::string act = cfg.string("hidden_act", "silu");
  if (act != "silu") throw refuse("hidden_act '" + act + "' (forge: silu)");
  if (cfg.boolean("mlp_bias", false)) throw refuse("mlp_bias = true is not supported");
  if (m.architecture == "llama" && cfg.boolean("attention_bias", false))
    throw refuse("attention_bias = true (a bias on q, k, v and o) is not supported");
  if (cfg.boolean("use_sliding_window", false)) throw refuse("use_sliding_window = true is not supported");
  // Sizes are positive ints, checked before hidden_size / num_attention_heads.
  const auto size = [&](const char* key) { return static_cast<int>(cfg.integer(key, 1, kMaxInt)); };
  c.d_model = size("hidden_size");
  c.n_layers = size("num_hidden_layers");
  c.n_heads = size("num_attention_heads");
  c.n_kv_heads = static_cast<int>(cfg.integer("num_key_value_heads", 1, kMaxInt, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    throw InputError(cfg.name("num_key_value_heads") + " is " + std::to_string(c.n_kv_heads) +
                     "; it must divide num_attention_heads (" + std::to_string(c.n_heads) + ")");
  c.ffn_dim = size("intermediate_size");
  c.vocab = size("vocab_size");
  c.norm_eps = float_above(cfg.number("rms_norm_eps", 1e-6), 0, cfg.name("rms_norm_eps"));
  read_rope(cfg, c, refuse);
  // An explicit head_dim is honoured as given (Hugging Face's rule), even
  // where hidden / heads does not divide.
  if (cfg.has("head_dim")) c.head_dim_override = static_cast<int>(cfg.integer("head_dim", 1, kMaxInt));
  if (c.head_dim_override == c.d_model / c.n_heads && c.d_model % c.n_heads == 0) c.head_dim_override = 0;
  c.tied_embeddings = cfg.boolean("tie_word_embeddings", false);
  c.qkv_bias = m.architecture == "qwen2";
  // LlamaConfig's and Qwen2Config's defaults.
  const int64_t default_positions = m.architecture == "qwen2" ? 32768 : 2048;
  m.max_positions = static_cast<int>(cfg.integer("max_position_embeddings", 1, kMaxInt, default_positions));
  m.name = cfg.string("_name_or_path", type);
  validate_config(c, cpath);
  m.tokenizer = tokenizer_from_hf_folder(folder);
  check_vocabulary(m);
  if (!weights) return m;
  const SafetensorsModel st(folder);
  const Source src{[&](const std::string& name) { return st.shape(name); },
                   [&](const std::string& name) { return st.read(name); }, [&] { return st.names(); }};
  const auto layer = [](int l, const char* what) -> std::string {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string w = what;
    if (w == "attn_norm") return p + "input_layernorm.weight";
    if (w == "mlp_norm") return p + "post_attention_layernorm.weight";
    if (w == "q" || w == "k" || w == "v" || w == "o") return p + "self_attn." + w + "_proj.weight";
    if (w == "q_bias" || w == "k_bias" || w == "v_bias") return p + "self_attn." + w.substr(0, 1) + "_proj.bias";
    return p + "mlp." + w + "_proj.weight";
  };
  fill_weights(m, src, layer, "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", true);
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
  const auto size = [&](const char* key) { return static_cast<int>(g.get_int(a + key, 1, kMaxInt)); };
  const auto number = [&](const char* key, double fallback, double above) {
    return float_above(g.get_float(a + key, fallback), above, "GGUF file '" + path + "': metadata '" + a + key + "'");
  };
  ModelConfig& c = m.config;
  c.d_model = size("embedding_length");
  c.n_layers = size("block_count");
  c.n_heads = size("attention.head_count");
  c.n_kv_heads = static_cast<int>(g.get_int(a + "attention.head_count_kv", 1, kMaxInt, c.n_heads));
  if (c.n_heads % c.n_kv_heads != 0)
    throw InputError("GGUF file '" + path + "': metadata '" + a + "attention.head_count_kv' = " +
                     std::to_string(c.n_kv_heads) + " must divide '" + a + "attention.head_count' = " +
                     std::to_string(c.n_heads));
  c.ffn_dim = size("feed_forward_length");
  c.norm_eps = number("attention.layer_norm_rms_epsilon", 1e-5, 0);
  c.rope_base = number("rope.freq_base", 10000, 1);
  const int hd = static_cast<int>(g.get_int(a + "attention.key_length", 1, kMaxInt, c.d_model / c.n_heads));
  if (g.get_int(a + "attention.value_length", 1, kMaxInt, hd) != hd)
    throw InputError("GGUF file '" + path + "': key and value head sizes differ; forge needs them equal");
  // Kept where the width does not give it; heads that do not divide the
  // width need a stated one whatever its value (as in the folder path).
  const bool stated_uneven = g.has(a + "attention.key_length") && c.d_model % c.n_heads != 0;
  c.head_dim_override = hd != c.d_model / c.n_heads || stated_uneven ? hd : 0;
  if (g.has(a + "rope.scaling.type") && g.get_string(a + "rope.scaling.type") != "none")
    throw InputError("GGUF file '" + path + "': rope scaling '" + g.get_string(a + "rope.scaling.type") +
                     "' is not supported");
  // llama.cpp scales linearly by either factor when the type is absent
  // (2023 converters wrote only rope.scale_linear): refused by name too.
  // A factor of 0 is llama.cpp's "none", as 1 is.
  for (const char* key : {"rope.scaling.factor", "rope.scale_linear"}) {
    const double factor = g.get_float(a + key, 1.0);
    if (factor != 1.0 && factor != 0.0)
      throw InputError("GGUF file '" + path + "': metadata '" + a + key + "' = " + std::to_string(factor) +
                       " (linear RoPE scaling) is not supported");
  }
  if (g.has(a + "rope.dimension_count") && g.get_int(a + "rope.dimension_count", 0, kMaxInt) != hd)
    throw InputError("GGUF file '" + path + "': metadata '" + a + "rope.dimension_count' = " +
                     std::to_string(g.get_int(a + "rope.dimension_count", 0, kMaxInt)) +
                     " (partial rotary embedding) differs from the head size " + std::to_string(hd) +
                     "; forge rotates whole heads");
  if (g.has(a + "expert_count") && g.get_int(a + "expert_count", 0, kMaxInt) > 0)
    throw InputError("GGUF file '" + path + "': metadata '" + a + "expert_count' = " +
                     std::to_string(g.get_int(a + "expert_count", 0, kMaxInt)) +
                     " (a mixture of experts) is not supported; forge loads dense llama models");
  if (g.find("rope_freqs.weight"))
    throw InputError("GGUF file '" + path +
                     "': per-frequency RoPE factors (rope_freqs, Llama 3.1 scaling) are not supported from GGUF; load "
                     "the Hugging Face folder instead");
  c.tied_embeddings = g.find("output.weight") == nullptr;
  m.max_positions = static_cast<int>(g.get_int(a + "context_length", 1, kMaxInt, 2048));
  m.architecture = "llama";
  m.name = g.get_string("general.name", "llama");
  m.tokenizer = tokenizer_from_gguf(g);
  const GgufFile::TensorInfo* embed = g.find("token_embd.weight");
  if (!embed || embed->dims.size() != 2) throw InputError("GGUF file '" + path + "' has no 2-D token_embd.weight");
  if (embed->dims[1] > kMaxInt)
    throw InputError("GGUF file '" + path + "': token_embd.weight has " + std::to_string(embed->dims[1]) +
                     " rows, more than a vocabulary forge holds");
  c.vocab = static_cast<int>(embed->dims[1]);
  validate_config(c, path);
  check_vocabulary(m);
  if (!weights) return m;
  const auto info = [&](const std::string& name) {
    const GgufFile::TensorInfo* t = g.find(name);
    if (!t) throw InputError("GGUF file '" + path + "' has no tensor '" + name + "'");
    return t;
  };
  const Source src{[&](const std::string& name) {
                     const GgufFile::TensorInfo* t = info(name);
                     g.require_supported(*t);  // before the weights' buffer is allocated
                     return std::vector<int64_t>(t->dims.rbegin(), t->dims.rend());  // slowest first
                   },
                   [&](const std::string& name) { return g.tensor(*info(name)); },
                   [&] {
                     std::vector<std::string> names;
                     for (const GgufFile::TensorInfo& t : g.tensors()) names.push_back(t.name);
                     return names;
                   }};
  const auto layer = [](int l, const char* what) -> std::string {
    const std::string p = "blk." + std::to_string(l) + ".";
    const std::string w = what;
    if (w == "attn_norm") return p + "attn_norm.weight";
    if (w == "mlp_norm") return p + "ffn_norm.weight";
    if (w == "o") return p + "attn_output.weight";
    if (w == "q" || w == "k" || w == "v") return p + "attn_" + w + ".weight";
    return p + "ffn_" + w + ".weight";
  };
  fill_weights(m, src, layer, "token_embd.weight", "output_norm.weight", "output.weight", false);
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
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw InputError("pretrained model '" + path + "': " + ec.message());
  if (std::filesystem::is_directory(st)) return load_hf(path, weights);
  if (!std::filesystem::exists(st)) throw InputError("pretrained model '" + path + "' does not exist");
  return load_gguf(path, weights);
}

}  // namespace forge
