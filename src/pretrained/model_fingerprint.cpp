#include "pretrained/model_fingerprint.hpp"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <vector>

#include "core/fnv1a.hpp"
#include "core/wire_codec.hpp"

namespace forge {
namespace {

// A part's digest: 16 hex digits of FNV-1a over its fields in the wire
// encoding (strings and vectors length-prefixed, so that no two different
// sequences of fields share their bytes).
std::string hex_digest(const std::vector<uint8_t>& bytes) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, fnv1a64(bytes));
  return text;
}

std::string tokenizer_digest(const PretrainedTokenizer& t) {
  WireWriter w;
  const BpeVocabulary& v = t.tokenizer->vocabulary();
  w.put(static_cast<uint64_t>(v.tokens.size()));
  for (const std::string& token : v.tokens) w.put_str(token);
  w.put(static_cast<uint64_t>(v.merges.size()));
  for (const auto& [a, b] : v.merges) {
    w.put_str(a);
    w.put_str(b);
  }
  w.put(static_cast<uint64_t>(v.added.size()));
  for (const BpeVocabulary::Added& a : v.added) {
    w.put(a.id);
    w.put(a.special);
  }
  w.put(v.pre);
  w.put(v.ignore_merges);
  w.put(v.nfc);
  w.put(t.bos_id);
  w.put(t.eos_id);
  w.put_vec(t.end_ids);
  w.put_vec(t.text_prefix);
  return hex_digest(w.bytes());
}

std::string config_digest(const ModelConfig& c) {
  WireWriter w;
  for (const int32_t v : {c.vocab, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim(), c.ffn_dim,
                          c.rope_scaling.original_max_positions, int32_t{c.tied_embeddings}, int32_t{c.qkv_bias}})
    w.put(v);
  for (const float v : {c.rope_base, c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                        c.rope_scaling.high_freq_factor, c.norm_eps})
    w.put(v);
  return hex_digest(w.bytes());
}

// "key=value" parts after the leading name, by key.
std::map<std::string, std::string> parts_of(const std::string& fingerprint) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < fingerprint.size()) {
    size_t end = fingerprint.find("; ", pos);
    if (end == std::string::npos) end = fingerprint.size();
    const std::string part = fingerprint.substr(pos, end - pos);
    if (const size_t eq = part.find('='); eq != std::string::npos) out[part.substr(0, eq)] = part.substr(eq + 1);
    pos = end + 2;
  }
  return out;
}

}  // namespace

std::string model_fingerprint(const ModelSource& source) {
  if (!source.is_pretrained()) return "";
  const std::string& chat = source.pretrained_tokenizer.chat_template;
  return "forge-model 1; tokenizer=" + tokenizer_digest(source.pretrained_tokenizer) +
         "; chat_template=" + hex_digest(std::vector<uint8_t>(chat.begin(), chat.end())) +
         "; config=" + config_digest(source.config);
}

std::string fingerprint_differences(const std::string& stored, const std::string& now) {
  const std::map<std::string, std::string> a = parts_of(stored), b = parts_of(now);
  std::string out;
  for (const auto& [key, shown] : {std::pair<std::string, std::string>{"tokenizer", "tokenizer"},
                                   {"chat_template", "chat template"},
                                   {"config", "configuration"}}) {
    const auto x = a.find(key), y = b.find(key);
    if (x != a.end() && y != b.end() && x->second != y->second) out += (out.empty() ? "" : ", ") + shown;
  }
  return out;
}

}  // namespace forge
