#include "pretrained/hf_export.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "pretrained/pretrained_model.hpp"
#include "pretrained/safetensors_file.hpp"

namespace forge {
namespace {

using nlohmann::ordered_json;


ordered_json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

ordered_json pre_tokenizer_json(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::kGpt2: return byte_level(true);
    case PreTokenizer::kSmolLm:
      return {{"type", "Sequence"},
              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
    case PreTokenizer::kLlama3:
    case PreTokenizer::kQwen2: {
      ordered_json split = {{"type", "Split"},
                            {"pattern", {{"Regex", split_pattern(p)}}},
                            {"behavior", "Isolated"},
                            {"invert", false}};
      return {{"type", "Sequence"}, {"pretokenizers", {split, byte_level(false)}}};
    }
  }
  return {};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();  // its final flush can fail too
  if (!out) throw Error("cannot write '" + path + "'");
}

// A float as the decimal a person wrote (1e-05, not 9.999999747378752e-06):
// the shortest text that reads back as the float, as a double.
double as_written(float f) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, f).ptr;
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

std::string token_or_null(const BpeVocabulary& v, int32_t id) {
  return id >= 0 && id < static_cast<int32_t>(v.tokens.size()) ? v.tokens[id] : "";
}

}  // namespace

std::string tokenizer_json(const BpeVocabulary& v, const std::string& post_processor) {
  ordered_json added = ordered_json::array();
  for (const auto& a : v.added)
    added.push_back({{"id", a.id},
                     {"content", v.tokens[a.id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", a.special}});
  std::vector<uint8_t> is_added(v.tokens.size(), 0);
  for (const auto& a : v.added) is_added[a.id] = 1;
  // tokenizer.json's vocabulary maps a text to one id: two ordinary tokens
  // of one text (a GGUF may list them) would lose one id, and the folder
  // would not load. An ordinary token's text takes the place of an added
  // token's. Entries are kept in id order of their text's first token
  // (ordered_json looks a key up by a linear scan: filled by key, a 150k
  // vocabulary took minutes).
  struct Entry {
    std::string text;
    size_t id;
    bool ordinary;  // the id is an ordinary token's
  };
  std::vector<Entry> entries;
  std::unordered_map<std::string_view, size_t> entry_of;  // text -> index in entries
  entries.reserve(v.tokens.size());
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& text = v.tokens[id];
    const auto [it, fresh] = entry_of.emplace(text, entries.size());
    if (fresh) {
      entries.push_back({text, id, !is_added[id]});
      continue;
    }
    Entry& e = entries[it->second];
    if (is_added[id]) continue;  // the text already has an id
    if (e.ordinary)
      throw InputError("export: tokens " + std::to_string(e.id) + " and " + std::to_string(id) + " are both '" +
                       text + "'; a tokenizer.json vocabulary gives a text one id");
    e.id = id;
    e.ordinary = true;
  }
  ordered_json vocab = ordered_json::object();
  auto& vocab_entries = static_cast<ordered_json::object_t::Container&>(vocab.get_ref<ordered_json::object_t&>());
  vocab_entries.reserve(entries.size());
  for (Entry& e : entries) vocab_entries.emplace_back(std::move(e.text), e.id);  // keys known distinct
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  ordered_json t = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", v.nfc ? ordered_json{{"type", "NFC"}} : ordered_json(nullptr)},
                    {"pre_tokenizer", pre_tokenizer_json(v.pre)},
                    {"post_processor", post_processor.empty() ? ordered_json(nullptr)
                                                              : ordered_json::parse(post_processor)},
                    {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", v.ignore_merges},
                      {"vocab", vocab},
                      {"merges", merges}}}};
  return t.dump(1);
}

void export_hf_folder(const HfExport& m, const std::string& folder) {
  if (m.architecture != "llama" && m.architecture != "qwen2")
    throw InputError("export: architecture '" + m.architecture + "' (forge exports llama and qwen2)");
  FORGE_CHECK(m.weights && m.tokenizer.tokenizer, "export without weights or tokenizer");
  const ModelConfig& c = m.config;
  const ParamLayout layout(c);
  FORGE_CHECK(m.weights->size() == layout.total, "export: the weights do not fit the configuration");
  const BpeVocabulary& v = m.tokenizer.tokenizer->vocabulary();

  // The JSON files' text (config.json, generation_config.json, the two
  // tokenizer files), all made before any file is written: a text that
  // cannot be made leaves no folder half written.
  const int hd = c.head_dim();
  if (hd * c.n_heads != c.d_model)
    log_warn("export: head_dim " + std::to_string(hd) + " is not hidden_size / num_attention_heads (" +
             std::to_string(c.d_model) + " / " + std::to_string(c.n_heads) +
             "): transformers reads head_dim from 4.45 (Llama) and 4.48 (Qwen2); older versions cannot load the folder");
  ordered_json cfg = {{"architectures", {m.architecture == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", m.architecture},
                      {"hidden_size", c.d_model},
                      {"intermediate_size", c.ffn_dim},
                      {"num_hidden_layers", c.n_layers},
                      {"num_attention_heads", c.n_heads},
                      {"num_key_value_heads", c.n_kv_heads},
                      {"head_dim", hd},
                      {"hidden_act", "silu"},
                      {"max_position_embeddings", m.max_positions},
                      {"rms_norm_eps", as_written(c.norm_eps)},
                      {"rope_theta", as_written(c.rope_base)},
                      {"tie_word_embeddings", c.tied_embeddings},
                      {"vocab_size", c.vocab},
                      {"torch_dtype", m.bf16 ? "bfloat16" : "float32"},
                      {"use_cache", true}};
  if (m.architecture == "llama") cfg["attention_bias"] = false, cfg["mlp_bias"] = false;
  cfg["rope_scaling"] = nullptr;
  if (c.rope_scaling.enabled())
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", as_written(c.rope_scaling.factor)},
                           {"low_freq_factor", as_written(c.rope_scaling.low_freq_factor)},
                           {"high_freq_factor", as_written(c.rope_scaling.high_freq_factor)},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
  // An unknown id is written as null: left out, transformers' config takes
  // its defaults (bos 1, eos 2) and generate would stop at token 2.
  const auto id_or_null = [](int32_t id) { return id >= 0 ? ordered_json(id) : ordered_json(nullptr); };
  cfg["bos_token_id"] = id_or_null(m.tokenizer.bos_id);
  cfg["eos_token_id"] = id_or_null(m.tokenizer.eos_id);
  ordered_json gen = {{"_from_model_config", true}};
  gen["bos_token_id"] = id_or_null(m.tokenizer.bos_id);
  // What generate stops at: every end id (the eos id, a GGUF's eot/eom ids).
  std::vector<int32_t> ends;
  for (const int32_t id : m.tokenizer.end_ids)
    if (std::find(ends.begin(), ends.end(), id) == ends.end()) ends.push_back(id);
  if (ends.empty() && m.tokenizer.eos_id >= 0) ends.push_back(m.tokenizer.eos_id);
  if (ends.size() > 1) gen["eos_token_id"] = ends;
  else gen["eos_token_id"] = ends.empty() ? ordered_json(nullptr) : ordered_json(ends[0]);
  ordered_json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                     {"clean_up_tokenization_spaces", m.tokenizer.clean_up_spaces},
                     {"model_max_length", m.max_positions}};
  if (!m.tokenizer.chat_template.empty()) tc["chat_template"] = m.tokenizer.chat_template;
  const std::string bos = token_or_null(v, m.tokenizer.bos_id), eos = token_or_null(v, m.tokenizer.eos_id);
  tc["bos_token"] = bos.empty() ? ordered_json(nullptr) : ordered_json(bos);
  tc["eos_token"] = eos.empty() ? ordered_json(nullptr) : ordered_json(eos);
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"config.json", cfg.dump(2) + "\n"},
      {"generation_config.json", gen.dump(2) + "\n"},
      {"tokenizer.json", tokenizer_json(v, m.tokenizer.post_processor) + "\n"},
      {"tokenizer_config.json", tc.dump(2) + "\n"}};

  // model.safetensors: split fused tensors, un-permute q and k.
  std::vector<std::vector<float>> keep;  // owners of the split tensors
  std::vector<NamedTensor> tensors;
  const float* W = m.weights->data();
  const auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    keep.push_back(std::move(data));
    tensors.push_back({name, std::move(shape), keep.back().data()});
  };
  const auto slice = [&](size_t offset, size_t n) { return std::vector<float>(W + offset, W + offset + n); };
  const int64_t d = c.d_model, F = c.ffn_dim, H = c.n_heads, Hkv = c.n_kv_heads, V = c.vocab;
  keep.reserve(16 * c.n_layers + 8);
  add("model.embed_tokens.weight", {V, d}, slice(layout.find("embed").offset, V * d));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", f = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d}, slice(layout.find(f + "attn_norm").offset, d));
    const size_t qkv = layout.find(f + "wqkv").offset;
    add(p + "self_attn.q_proj.weight", {H * hd, d},
        permute_rope_rows(slice(qkv, H * hd * d), static_cast<int>(H), hd, d, false));
    add(p + "self_attn.k_proj.weight", {Hkv * hd, d},
        permute_rope_rows(slice(qkv + H * hd * d, Hkv * hd * d), static_cast<int>(Hkv), hd, d, false));
    add(p + "self_attn.v_proj.weight", {Hkv * hd, d}, slice(qkv + (H + Hkv) * hd * d, Hkv * hd * d));
    if (c.qkv_bias) {
      const size_t b = layout.find(f + "bqkv").offset;
      add(p + "self_attn.q_proj.bias", {H * hd}, permute_rope_rows(slice(b, H * hd), static_cast<int>(H), hd, 1, false));
      add(p + "self_attn.k_proj.bias", {Hkv * hd},
          permute_rope_rows(slice(b + H * hd, Hkv * hd), static_cast<int>(Hkv), hd, 1, false));
      add(p + "self_attn.v_proj.bias", {Hkv * hd}, slice(b + (H + Hkv) * hd, Hkv * hd));
    }
    add(p + "self_attn.o_proj.weight", {d, H * hd}, slice(layout.find(f + "wo").offset, d * H * hd));
    add(p + "post_attention_layernorm.weight", {d}, slice(layout.find(f + "mlp_norm").offset, d));
    const size_t gu = layout.find(f + "w_gate_up").offset;
    add(p + "mlp.gate_proj.weight", {F, d}, slice(gu, F * d));
    add(p + "mlp.up_proj.weight", {F, d}, slice(gu + F * d, F * d));
    add(p + "mlp.down_proj.weight", {d, F}, slice(layout.find(f + "w_down").offset, d * F));
  }
  add("model.norm.weight", {d}, slice(layout.find("final_norm").offset, d));
  if (!c.tied_embeddings) add("lm_head.weight", {V, d}, slice(layout.find("lm_head").offset, V * d));

  // Written beside the folder and moved into place whole: a failed export (a
  // full disk) leaves no half-written model where a reader would take it.
  // The folder by its last name ("out/" and "." too), so that the partial
  // one lies beside it, not inside.
  std::filesystem::path target = std::filesystem::absolute(folder).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  // A folder of its own (mkdtemp): one named like it may be the user's.
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  std::string pattern = target.string() + ".partial.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw InputError("export: cannot create a folder beside '" + folder + "': " + std::strerror(errno));
  const std::string partial = pattern;
  // mkdtemp's 0700 would stay the model folder's mode: an empty folder given
  // keeps its own (it is replaced by this one), a new one gets the umask's.
  struct stat given {};
  if (::stat(target.c_str(), &given) == 0 && S_ISDIR(given.st_mode)) {
    ::chmod(partial.c_str(), given.st_mode & 07777);
    if (::chown(partial.c_str(), given.st_uid, given.st_gid) != 0) {
      // Not the owner's to give (forge not root): the folder is forge's user's.
    }
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::chmod(partial.c_str(), 0777 & ~mask);
  }
  try {
    for (const auto& [name, text] : texts) write_text(partial + "/" + name, text);
    write_safetensors(partial + "/model.safetensors", tensors, m.bf16);
  } catch (...) {
    std::filesystem::remove_all(partial, ec);
    throw;
  }
  std::filesystem::rename(partial, target, ec);  // replaces an empty folder, never a full one
  if (ec) {
    std::filesystem::remove_all(partial, ec);
    throw InputError("export: cannot move the model into '" + folder + "' (it must be empty or absent)");
  }
}

}  // namespace forge
