#include "pretrained/tokenizer_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/utf8.hpp"
#include "pretrained/json_file.hpp"

namespace forge {
namespace {

using nlohmann::json;


// The ids Hugging Face's post_processor writes before one encoded text
// (tokenizer(text)): TemplateProcessing's special tokens ahead of the text
// ("single"), Roberta/Bert's cls, each processor's in turn inside a
// Sequence. What a template writes after the text (an EOS) is left out: a
// completion prompt goes on from its end. Ids are checked against the
// vocabulary.
void add_text_prefix(const json& pp, int32_t vocab, const std::string& path, std::vector<int32_t>* out) {
  if (!pp.is_object()) return;
  const std::string type = pp.value("type", "");
  const auto add = [&](const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
      throw InputError("tokenizer '" + path + "': post_processor names token id " + id.dump() +
                       ", outside the vocabulary of " + std::to_string(vocab));
    out->push_back(static_cast<int32_t>(id.get<int64_t>()));
  };
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const json& p : pp["processors"]) {
      if (!p.is_object())
        throw InputError("tokenizer '" + path + "': post_processor's Sequence holds " + p.dump().substr(0, 40) +
                         ", not a processor object");
      add_text_prefix(p, vocab, path, out);
    }
  } else if ((type == "RobertaProcessing" || type == "BertProcessing") && pp.contains("cls") &&
             pp["cls"].is_array() && pp["cls"].size() == 2) {
    add(pp["cls"][1]);
  } else if (type == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array()) {
    for (const json& piece : pp["single"]) {
      if (!piece.is_object() || !piece.contains("SpecialToken")) break;  // the text itself: the prefix ends
      const json& name = piece["SpecialToken"].value("id", json());
      const json* ids = nullptr;
      if (name.is_string() && pp.contains("special_tokens") && pp["special_tokens"].contains(name.get<std::string>()))
        ids = &pp["special_tokens"][name.get<std::string>()]["ids"];
      if (ids == nullptr || !ids->is_array())
        throw InputError("tokenizer '" + path + "': post_processor's template names special token " + name.dump() +
                         " that its special_tokens do not list with ids");
      for (const json& id : *ids) add(id);
    }
  }
}

// The ids of tokens the vocabulary does not cover from 0..V-1 are an error.
void check_dense(const std::vector<std::string>& tokens, const std::vector<uint8_t>& seen, const std::string& src) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (!seen[i]) throw InputError("tokenizer '" + src + "': no token has id " + std::to_string(i));
}

// The pre-tokenizer of tokenizer.json's object `pre`; bad(why) for one
// forge does not read.
template <class Bad>
PreTokenizer pre_tokenizer_of(const json& pre, const Bad& bad) {
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

PreTokenizer pre_from_json(const json& pre, const std::string& src) {
  const auto bad = [&](const std::string& why) {
    return InputError("tokenizer '" + src + "': pre_tokenizer " + pre.dump().substr(0, 300) + " is not one forge reads (" + why +
                      "; forge reads GPT-2's ByteLevel, SmolLM2's Digits + ByteLevel, and Llama 3's and Qwen2's Split patterns)");
  };
  if (!pre.is_object()) throw bad("missing");
  try {
    return pre_tokenizer_of(pre, bad);
  } catch (const json::exception& e) {  // a value of an unexpected type inside
    throw bad(std::string("unexpected structure: ") + e.what());
  }
}

// A special token as tokenizer_config.json gives it: its text, or an object
// with its "content" ("" where it names none).
std::string token_content(const JsonObject& tc, const std::string& key) {
  if (!tc.has(key)) return "";
  if (tc.has_string(key)) return tc.string(key, "");
  return tc.object(key).string("content", "");
}

// What forge reads of tokenizer_config.json.
struct TokenizerConfig {
  std::string chat_template;
  std::string bos, eos;  // the tokens' text; "" where it names none
  // Set for the classes whose constructor rebuilds the post-processor from
  // add_bos_token / add_eos_token (LlamaTokenizerFast's family): whether
  // tokenizer(text) starts with BOS; otherwise tokenizer.json's decides.
  std::optional<bool> adds_bos;
  bool clean_up_spaces = false;  // clean_up_tokenization_spaces (decoding)
};

// Hugging Face's form of "BOS before every text" (Llama 3's tokenizer.json).
std::string bos_template_processing(const std::string& bos, int32_t bos_id) {
  const json special = {{"id", bos}, {"type_id", 0}};
  return json{{"type", "TemplateProcessing"},
              {"single", {{{"SpecialToken", special}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
              {"pair",
               {{{"SpecialToken", special}},
                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
              {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}}
      .dump();
}

// tokenizer_config.json; an InputError names the file and the key.
// `template_beside`: a chat_template.jinja will be used instead of any here.
TokenizerConfig read_tokenizer_config(const std::string& path, bool template_beside) {
  TokenizerConfig out;
  const json tc_json = read_json_file(path);
  const JsonObject tc(tc_json, path);
  if (const json& templates = tc.raw("chat_template"); templates.is_array()) {
    // Named templates: [{"name": "default", "template": "..."}, ...].
    std::string names;
    for (size_t i = 0; i < templates.size(); ++i) {
      const JsonObject t(templates[i], path, "chat_template[" + std::to_string(i) + "].");
      if (t.string("name", "") == "default") out.chat_template = t.string("template", "");
      names += (names.empty() ? "" : ", ") + t.string("name", "");
    }
    if (out.chat_template.empty() && !template_beside)
      throw InputError("'" + path + "': chat_template lists named templates (" + names +
                       ") but none named \"default\", the one forge renders");
  } else {
    out.chat_template = tc.string("chat_template", "");
  }
  out.bos = token_content(tc, "bos_token");
  out.eos = token_content(tc, "eos_token");
  out.clean_up_spaces = tc.boolean("clean_up_tokenization_spaces", false);
  // transformers' LlamaTokenizerFast (and its subclasses) replaces
  // tokenizer.json's post-processor by one of these two keys (defaults: BOS
  // yes, EOS no); PreTrainedTokenizerFast keeps the file's.
  const std::string cls = tc.has_string("tokenizer_class") ? tc.string("tokenizer_class", "") : "";
  if (cls == "LlamaTokenizerFast" || cls == "CodeLlamaTokenizerFast") {
    out.adds_bos = tc.boolean("add_bos_token", true);
    if (tc.boolean("add_eos_token", false))
      throw InputError("'" + path + "': tokenizer_class " + cls +
                       " with add_eos_token = true (transformers then ends every encoded text with EOS; forge's "
                       "prompts do not)");
  }
  return out;
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
  // One text at two ids: text would encode to the first (a control token,
  // where one shares an ordinary token's text), and the Hugging Face files
  // export writes could not be read back. A tokenizer.json cannot hold it.
  std::unordered_map<std::string_view, size_t> id_of_text;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    utf8(v.tokens[i], "token " + std::to_string(i) + " of tokenizer.ggml.tokens");
    if (const auto [it, fresh] = id_of_text.emplace(v.tokens[i], i); !fresh)
      throw InputError("GGUF file '" + src + "': tokenizer.ggml.tokens holds '" + v.tokens[i] + "' twice, as token " +
                       std::to_string(it->second) + " and token " + std::to_string(i) + " (one text, two ids)");
  }
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
  // No key, or "default" (llama.cpp's own split, not GPT-2's), leaves the
  // split unknown: early Llama 3 conversions lack the key, and reading them
  // with GPT-2's would tokenize differently from the model's training.
  if (!g.has("tokenizer.ggml.pre"))
    throw InputError("GGUF file '" + src + "' has no tokenizer.ggml.pre: forge cannot tell how the model splits "
                     "text (convert it again with a newer llama.cpp, or load the Hugging Face folder)");
  const std::string pre = g.get_string("tokenizer.ggml.pre", "");
  if (pre == "smollm") v.pre = PreTokenizer::kSmolLm;
  else if (pre == "llama-bpe" || pre == "llama3") v.pre = PreTokenizer::kLlama3;
  else if (pre == "qwen2") v.pre = PreTokenizer::kQwen2;
  else if (pre == "gpt-2" || pre == "gpt2") v.pre = PreTokenizer::kGpt2;
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
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const int64_t id = g.get_int(key, 0, last, -1); id >= 0) out.end_ids.push_back(static_cast<int32_t>(id));
  out.source = src;
  if (out.bos_id >= 0 && g.has("tokenizer.ggml.add_bos_token") && g.get_bool("tokenizer.ggml.add_bos_token")) {
    out.text_prefix = {out.bos_id};
    out.post_processor = bos_template_processing(out.tokenizer->token_text(out.bos_id), out.bos_id);
  }
  return out;
}

PretrainedTokenizer tokenizer_from_hf_folder(const std::string& folder) {
  const std::string path = folder + "/tokenizer.json";
  if (!std::filesystem::exists(path)) throw InputError("'" + folder + "' has no tokenizer.json");
  const json tj = read_json_file(path);
  const std::string where = "tokenizer '" + path + "': ";
  const auto bad = [&](const std::string& why) { return InputError(where + why); };
  const JsonObject file(tj, path);
  const JsonObject model = file.object("model");
  const std::string type = model.string("type", "");
  if (type != "BPE") throw bad("model type '" + type + "'; forge reads BPE");
  if (model.boolean("byte_fallback", false)) throw bad("byte_fallback BPE (SentencePiece-style) is not byte-level BPE");
  if (model.number("dropout", 0) > 0) throw bad("BPE dropout");
  if (file.has("normalizer") && file.object("normalizer").string("type", "") != "NFC")
    throw bad("normalizer " + json_shown(tj["normalizer"]) + " (forge applies NFC or none)");
  // Options that change how Hugging Face encodes or decodes, which forge's
  // byte-level BPE does not apply: refused rather than tokenized otherwise.
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.string(key, "").empty())
      throw bad("model." + std::string(key) + " = '" + model.string(key, "") + "' (WordPiece-style; forge's BPE uses none)");
  // No decoder (absent or null): Hugging Face joins the tokens' texts with
  // spaces ("hello wor ld !"), not byte-level decoding.
  if (!file.has("decoder")) throw bad("no decoder (Hugging Face then joins tokens with spaces; forge decodes byte-level BPE: ByteLevel)");
  if (file.object("decoder").string("type", "") != "ByteLevel")
    throw bad("decoder " + json_shown(tj["decoder"]) + " (forge decodes byte-level BPE: ByteLevel)");
  BpeVocabulary v;
  const json& vocab = model.object("vocab").value();
  const json& added = file.raw("added_tokens");
  if (!added.is_null() && !added.is_array()) throw bad("added_tokens is " + json_shown(added) + ", not an array");
  const size_t n_added = added.is_array() ? added.size() : 0;
  // Added tokens may take ids of the vocabulary or follow it: every id is
  // below the two counts together (and every id in 0..n-1 is a token).
  const int64_t last_id = std::min<int64_t>(static_cast<int64_t>(vocab.size() + n_added) - 1,
                                            std::numeric_limits<int32_t>::max() - 1);
  std::vector<JsonObject> added_tokens;
  std::vector<int32_t> added_ids;
  size_t n = vocab.size();
  for (size_t i = 0; i < n_added; ++i) {
    added_tokens.emplace_back(added[i], path, "added_tokens[" + std::to_string(i) + "].");
    added_ids.push_back(static_cast<int32_t>(added_tokens.back().integer("id", 0, last_id)));
    n = std::max<size_t>(n, static_cast<size_t>(added_ids.back()) + 1);
  }
  v.tokens.resize(n);
  std::vector<uint8_t> seen(n, 0);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = static_cast<size_t>(
        json_int(it.value(), 0, static_cast<int64_t>(n) - 1, where + "model.vocab['" + it.key() + "']"));
    if (seen[id])  // else the second text replaced the first, and its id read as missing
      throw bad("model.vocab gives tokens '" + v.tokens[id] + "' and '" + it.key() + "' one id, " +
                std::to_string(id));
    v.tokens[id] = it.key();
    seen[id] = 1;
  }
  for (size_t i = 0; i < n_added; ++i) {
    const int32_t id = added_ids[i];
    const std::string content = added_tokens[i].string("content");
    const std::string previous = v.tokens[id];
    v.tokens[id] = content;
    // Content the vocabulary holds at another id: Hugging Face encodes it as
    // the vocabulary's id and decodes this one to nothing.
    if (const auto in_vocab = vocab.find(v.tokens[id]);
        in_vocab != vocab.end() && in_vocab->is_number_integer() && in_vocab->get<int64_t>() != id)
      throw bad("added token '" + v.tokens[id] + "' (id " + std::to_string(id) + ") is also the vocabulary's token " +
                std::to_string(in_vocab->get<int64_t>()) + " (one text, two ids)");
    // An id the vocabulary gives another text: one of the two would be lost.
    if (seen[id] && previous != content)
      throw bad("added token '" + content + "' takes id " + std::to_string(id) + ", which is already the token '" +
                previous + "' (two texts, one id)");
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      if (added_tokens[i].boolean(key, false))
        throw bad("added token '" + v.tokens[id] + "' has " + key + " = true (forge matches added tokens exactly)");
    // Hugging Face matches such a token on the normalized text; forge
    // matches every added token on the text as given, before NFC.
    if (file.has("normalizer") && added_tokens[i].boolean("normalized", !added_tokens[i].boolean("special", false)))
      throw bad("added token '" + v.tokens[id] +
                "' has normalized = true with an NFC normalizer (forge matches added tokens on the text as given)");
    seen[id] = 1;
    v.added.push_back({id, added_tokens[i].boolean("special", false)});
  }
  // Hugging Face matches the normalized = false added tokens first, then the
  // normalized = true ones in the text between; forge matches all in one
  // pass (leftmost, longest). The two agree unless a token of one kind can
  // overlap one of the other: refused by name.
  {
    std::vector<std::string> normalized, verbatim;
    for (size_t i = 0; i < n_added; ++i)
      (added_tokens[i].boolean("normalized", !added_tokens[i].boolean("special", false)) ? normalized : verbatim)
          .push_back(v.tokens[added_ids[i]]);
    // Each pair costs up to min(|a|, |b|)^2 byte comparisons: a file whose
    // pairs would take minutes (tens of thousands of each kind; real
    // tokenizers have a few hundred added tokens) is refused first.
    constexpr double kMaxPairs = 1e8, kMaxWork = 4e9;  // a few seconds at most
    const double pairs = static_cast<double>(normalized.size()) * static_cast<double>(verbatim.size());
    double work = 0;
    if (pairs <= kMaxPairs)
      for (const std::string& a : normalized)
        for (const std::string& b : verbatim) {
          const double m = static_cast<double>(std::min(a.size(), b.size()));
          work += m * m + static_cast<double>(a.size() + b.size());
        }
    if (pairs > kMaxPairs || work > kMaxWork)
      throw bad(std::to_string(normalized.size()) + " added tokens with normalized = true and " +
                std::to_string(verbatim.size()) +
                " with normalized = false: too many (or too long) to check that none of one kind overlaps one of "
                "the other");
    const auto overlap = [](const std::string& a, const std::string& b) {
      if (a.find(b) != std::string::npos || b.find(a) != std::string::npos) return true;
      for (size_t k = 1; k < std::min(a.size(), b.size()); ++k)
        if (a.compare(a.size() - k, k, b, 0, k) == 0 || b.compare(b.size() - k, k, a, 0, k) == 0) return true;
      return false;
    };
    for (const std::string& a : normalized)
      for (const std::string& b : verbatim)
        if (overlap(a, b))
          throw bad("added tokens '" + a + "' (normalized = true) and '" + b +
                    "' (normalized = false) can overlap in a text: Hugging Face matches them in two passes, forge "
                    "in one, and the two would encode differently");
  }
  check_dense(v.tokens, seen, path);
  // An unknown token stands, in Hugging Face's encoding, for a byte the
  // vocabulary has no token of; forge leaves such a byte out. Refused where
  // it would matter (a full byte alphabet never needs it).
  if (model.has("unk_token")) {
    std::set<std::string> texts(v.tokens.begin(), v.tokens.end());
    for (int b = 0; b < 256; ++b)
      if (!texts.count(to_byte_level(std::string(1, static_cast<char>(b)))))
        throw bad("model.unk_token = " + json_shown(model.raw("unk_token")) + " with no token for byte " +
                  std::to_string(b) + " (Hugging Face encodes such a byte as the unknown token; forge's byte-level "
                  "BPE has none)");
  }
  // Merges: "a b" strings, or ["a", "b"] pairs.
  const json& merges = model.raw("merges");
  if (!merges.is_array()) throw bad("model.merges is " + json_shown(merges) + ", not an array");
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const auto not_a_merge = [&] {
      return bad("model.merges[" + std::to_string(i) + "] is " + json_shown(m) +
                 ", not a merge (\"a b\" or [\"a\", \"b\"])");
    };
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) throw not_a_merge();
      v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      throw not_a_merge();
    }
  }
  // A pair listed twice ranks at its last place, as Hugging Face's map of
  // merges keeps it (llama.cpp, reading a GGUF, keeps the first).
  {
    std::set<std::pair<std::string, std::string>> later;
    std::vector<std::pair<std::string, std::string>> kept;
    for (auto it = v.merges.rbegin(); it != v.merges.rend(); ++it)
      if (later.insert(*it).second) kept.push_back(*it);
    v.merges.assign(kept.rbegin(), kept.rend());
  }
  v.ignore_merges = model.boolean("ignore_merges", false);
  v.pre = pre_from_json(file.raw("pre_tokenizer"), path);
  v.nfc = file.has("normalizer");  // NFC, the one normalizer accepted above
  PretrainedTokenizer out;
  out.source = path;
  if (file.has("post_processor")) out.post_processor = tj["post_processor"].dump();
  const std::string config_path = folder + "/tokenizer_config.json";
  // Newer transformers save the template beside it, not in it.
  const std::string jinja_path = folder + "/chat_template.jinja";
  const bool has_jinja = std::filesystem::exists(jinja_path);
  TokenizerConfig config;
  if (std::filesystem::exists(config_path)) config = read_tokenizer_config(config_path, has_jinja);
  out.chat_template = config.chat_template;
  out.clean_up_spaces = config.clean_up_spaces;
  if (has_jinja) {
    refuse_unless_regular_file(jinja_path, "chat template");
    std::ifstream in(jinja_path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw InputError("cannot read '" + jinja_path + "'");
    if (valid_utf8(text) != text) throw InputError("'" + jinja_path + "' is not valid UTF-8 text");
    out.chat_template = std::move(text);
  }
  out.tokenizer = std::make_shared<BpeTokenizer>(std::move(v), path);
  const auto id_of = [&](const std::string& token, const char* key) {
    if (token.empty()) return int32_t{-1};
    const int32_t id = out.tokenizer->token_id(token);
    if (id < 0)
      throw InputError("'" + config_path + "': " + key + " '" + token + "' is not a token of " + path);
    return id;
  };
  out.bos_id = id_of(config.bos, "bos_token");
  out.eos_id = id_of(config.eos, "eos_token");
  if (out.eos_id >= 0) out.end_ids.push_back(out.eos_id);
  if (config.adds_bos) {  // the class's post-processor, not the file's
    if (*config.adds_bos && out.bos_id < 0)
      throw InputError("'" + config_path + "': add_bos_token = true but no bos_token");
    out.text_prefix = *config.adds_bos ? std::vector<int32_t>{out.bos_id} : std::vector<int32_t>{};
    out.post_processor = *config.adds_bos ? bos_template_processing(config.bos, out.bos_id) : "";
  } else if (file.has("post_processor")) {
    try {
      add_text_prefix(tj["post_processor"], out.tokenizer->vocab_size(), path, &out.text_prefix);
    } catch (const json::exception& e) {  // a member of another JSON type than Hugging Face writes
      throw InputError("tokenizer '" + path + "': post_processor is malformed (" + e.what() + ")");
    }
  }
  // generation_config.json's eos_token_id: what transformers' generate stops at.
  const std::string generation_path = folder + "/generation_config.json";
  if (std::filesystem::exists(generation_path)) {
    const json gc = read_json_file(generation_path);
    if (!gc.is_object()) throw InputError("'" + generation_path + "' is not a JSON object");
    if (const auto it = gc.find("eos_token_id"); it != gc.end() && !it->is_null()) {
      const int64_t last = out.tokenizer->vocab_size() - 1;
      const std::string what = "'" + generation_path + "': eos_token_id";
      if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i)
          out.end_ids.push_back(static_cast<int32_t>(json_int((*it)[i], 0, last, what + "[" + std::to_string(i) + "]")));
      } else {
        out.end_ids.push_back(static_cast<int32_t>(json_int(*it, 0, last, what)));
      }
    }
  }
  return out;
}

}  // namespace forge
