#include "pretrained/tokenizer_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "pretrained/json_file.hpp"

namespace forge {
namespace {

using nlohmann::json;


// The ids of tokens the vocabulary does not cover from 0..V-1 are an error.
void check_dense(const std::vector<std::string>& tokens, const std::vector<uint8_t>& seen, const std::string& src) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!seen[i]) throw InputError("tokenizer '" + src + "': no token has id " + std::to_string(i));
}

PreTokenizer pre_from_json(const json& pre, const std::string& src) {
  const auto bad = [&](const std::string& why) {
    return InputError("tokenizer '" + src + "': pre_tokenizer " + pre.dump().substr(0, 300) + " is not one forge reads (" + why +
                      "; forge reads GPT-2's ByteLevel, SmolLM2's Digits + ByteLevel, and Llama 3's and Qwen2's Split patterns)");
  };
  if (!pre.is_object()) throw bad("missing");
  const std::string type = pre.value("type", "");
  const auto byte_level = [](const json& p, bool regex) {
    return p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == regex && !p.value("add_prefix_space", false);
  };
  if (byte_level(pre, true)) return PreTokenizer::kGpt2;
  if (type != "Sequence" || !pre.contains("pretokenizers") || pre["pretokenizers"].size() != 2) throw bad("an unknown type");
  const json& a = pre["pretokenizers"][0];
  const json& b = pre["pretokenizers"][1];
  if (a.value("type", "") == "Digits" && a.value("individual_digits", false) && byte_level(b, true))
    return PreTokenizer::kSmolLm;
  if (a.value("type", "") == "Split" && byte_level(b, false) && a.value("behavior", "") == "Isolated" &&
      !a.value("invert", false) && a.contains("pattern") && a["pattern"].contains("Regex")) {
    const std::string p = a["pattern"]["Regex"].get<std::string>();
    if (p == split_pattern(PreTokenizer::kLlama3)) return PreTokenizer::kLlama3;
    if (p == split_pattern(PreTokenizer::kQwen2)) return PreTokenizer::kQwen2;
    throw bad("an unknown Split pattern");
  }
  throw bad("an unknown sequence");
}

std::string token_content(const json& t) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content")) return t["content"].get<std::string>();
  return "";
}

// tokenizer_config.json: the chat template and the bos and eos tokens' text
// ("" where it names none), its own file named in any InputError.
void read_tokenizer_config(const std::string& path, std::string* chat_template, std::string* bos, std::string* eos) {
  const json tc = read_json_file(path);
  try {
    if (!tc.is_object()) throw InputError("'" + path + "' is not a JSON object");
    const json& ct = tc.value("chat_template", json());
    if (ct.is_string()) {
      *chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const json& t : ct)
        if (t.value("name", "") == "default") *chat_template = t.value("template", "");
    }
    *bos = token_content(tc.value("bos_token", json()));
    *eos = token_content(tc.value("eos_token", json()));
  } catch (const json::exception& e) {
    throw InputError("'" + path + "': unexpected structure: " + e.what());
  }
}

}  // namespace

PretrainedTokenizer tokenizer_from_gguf(const GgufFile& g) {
  const std::string src = g.path();
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  if (model != "gpt2")
    throw InputError("GGUF file '" + src + "': tokenizer.ggml.model is '" + model +
                     "'; forge reads byte-level BPE tokenizers ('gpt2')");
  BpeVocabulary v;
  v.tokens = g.get_strings("tokenizer.ggml.tokens");
  // JSON (the Hugging Face files export writes) holds UTF-8 text only.
  const auto utf8 = [&](const std::string& text, const std::string& what) {
    if (valid_utf8(text) != text) throw InputError("GGUF file '" + src + "': " + what + " is not valid UTF-8");
  };
  for (size_t i = 0; i < v.tokens.size(); ++i)
    utf8(v.tokens[i], "token " + std::to_string(i) + " of tokenizer.ggml.tokens");
  const std::vector<int64_t> types =
      g.has("tokenizer.ggml.token_type") ? g.get_ints("tokenizer.ggml.token_type") : std::vector<int64_t>();
  if (!types.empty() && types.size() != v.tokens.size())
    throw InputError("GGUF file '" + src + "': tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                     " entries for " + std::to_string(v.tokens.size()) + " tokens");
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i] == 3 || types[i] == 4) v.added.push_back({static_cast<int32_t>(i), types[i] == 3});
  for (const std::string& m : g.get_strings("tokenizer.ggml.merges")) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) throw InputError("GGUF file '" + src + "': merge '" + m + "' is not two tokens");
    v.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
  if (pre == "smollm") v.pre = PreTokenizer::kSmolLm;
  else if (pre == "llama-bpe" || pre == "llama3") v.pre = PreTokenizer::kLlama3;
  else if (pre == "qwen2") v.pre = PreTokenizer::kQwen2;
  else if (pre == "gpt-2" || pre == "gpt2" || pre == "default") v.pre = PreTokenizer::kGpt2;
  else
    throw InputError("GGUF file '" + src + "': tokenizer.ggml.pre '" + pre +
                     "' is not a pre-tokenizer forge knows (smollm, llama-bpe, qwen2, gpt-2)");
  v.ignore_merges = v.pre == PreTokenizer::kLlama3;
  PretrainedTokenizer out;
  out.tokenizer = std::make_shared<BpeTokenizer>(std::move(v), src);
  out.chat_template = g.get_string("tokenizer.chat_template", "");
  utf8(out.chat_template, "tokenizer.chat_template");
  const int64_t last = out.tokenizer->vocab_size() - 1;
  out.bos_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.bos_token_id", 0, last, -1));
  out.eos_id = static_cast<int32_t>(g.get_int("tokenizer.ggml.eos_token_id", 0, last, -1));
  out.source = src;
  return out;
}

PretrainedTokenizer tokenizer_from_hf_folder(const std::string& folder) {
  const std::string path = folder + "/tokenizer.json";
  if (!std::filesystem::exists(path)) throw InputError("'" + folder + "' has no tokenizer.json");
  const json tj = read_json_file(path);
  const std::string where = "tokenizer '" + path + "': ";
  const auto bad = [&](const std::string& why) { return InputError(where + why); };
  try {
    const json& model = tj.at("model");
    if (model.value("type", "") != "BPE") throw bad("model type '" + model.value("type", "") + "'; forge reads BPE");
    if (model.value("byte_fallback", false)) throw bad("byte_fallback BPE (SentencePiece-style) is not byte-level BPE");
    if (!model.value("dropout", json()).is_null() && model["dropout"].get<double>() > 0) throw bad("BPE dropout");
    const json& norm = tj.value("normalizer", json());
    if (!norm.is_null() && norm.value("type", "") != "NFC")
      throw bad("normalizer " + norm.dump().substr(0, 200) + " (forge applies none)");
    BpeVocabulary v;
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) throw bad("model.vocab is not an object");
    const json added = tj.value("added_tokens", json::array());
    if (!added.is_array()) throw bad("added_tokens is not an array");
    // Added tokens may take ids of the vocabulary or follow it: every id is
    // below the two counts together (and every id in 0..n-1 is a token).
    const int64_t last_id = std::min<int64_t>(static_cast<int64_t>(vocab.size() + added.size()) - 1,
                                              std::numeric_limits<int32_t>::max() - 1);
    std::vector<int32_t> added_ids;
    size_t n = vocab.size();
    for (size_t i = 0; i < added.size(); ++i) {
      added_ids.push_back(static_cast<int32_t>(
          json_int(added[i].at("id"), 0, last_id, where + "added_tokens[" + std::to_string(i) + "].id")));
      n = std::max<size_t>(n, static_cast<size_t>(added_ids.back()) + 1);
    }
    v.tokens.resize(n);
    std::vector<uint8_t> seen(n, 0);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = static_cast<size_t>(
          json_int(it.value(), 0, static_cast<int64_t>(n) - 1, where + "model.vocab['" + it.key() + "']"));
      v.tokens[id] = it.key();
      seen[id] = 1;
    }
    for (size_t i = 0; i < added.size(); ++i) {
      const int32_t id = added_ids[i];
      v.tokens[id] = added[i].at("content").get<std::string>();
      seen[id] = 1;
      v.added.push_back({id, added[i].value("special", false)});
    }
    check_dense(v.tokens, seen, path);
    for (const json& m : model.at("merges")) {
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) throw bad("merge '" + s + "' is not two tokens");
        v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        v.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      }
    }
    v.ignore_merges = model.value("ignore_merges", false);
    v.pre = pre_from_json(tj.value("pre_tokenizer", json()), path);
    PretrainedTokenizer out;
    out.source = path;
    std::string bos, eos;
    const std::string config_path = folder + "/tokenizer_config.json";
    if (std::filesystem::exists(config_path)) read_tokenizer_config(config_path, &out.chat_template, &bos, &eos);
    out.tokenizer = std::make_shared<BpeTokenizer>(std::move(v), path);
    out.bos_id = bos.empty() ? -1 : out.tokenizer->token_id(bos);
    out.eos_id = eos.empty() ? -1 : out.tokenizer->token_id(eos);
    return out;
  } catch (const json::exception& e) {
    throw bad(std::string("unexpected structure: ") + e.what());
  }
}

}  // namespace forge
