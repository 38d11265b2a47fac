#include "pretrained/model_fingerprint.hpp"

#include <cinttypes>
#include <cstdio>
#include <map>
#include <string_view>

namespace forge {
namespace {

// 64-bit FNV-1a; each item is written with its length first, so that no two
// different sequences of items share their bytes.
class Digest {
 public:
  void bytes(std::string_view s) {
    number(static_cast<int64_t>(s.size()));
    for (const char c : s) mix(static_cast<uint8_t>(c));
  }
  void number(int64_t v) {
    for (int i = 0; i < 8; ++i) mix(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  void real(float v) {
    char text[32];
    std::snprintf(text, sizeof text, "%a", static_cast<double>(v));
    bytes(text);
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016" PRIx64, h_);
    return text;
  }

 private:
  void mix(uint8_t b) {
    h_ ^= b;
    h_ *= 1099511628211ULL;
  }
  uint64_t h_ = 14695981039346656037ULL;
};

std::string tokenizer_digest(const PretrainedTokenizer& t) {
  Digest d;
  const BpeVocabulary& v = t.tokenizer->vocabulary();
  d.number(static_cast<int64_t>(v.tokens.size()));
  for (const std::string& token : v.tokens) d.bytes(token);
  d.number(static_cast<int64_t>(v.merges.size()));
  for (const auto& [a, b] : v.merges) {
    d.bytes(a);
    d.bytes(b);
  }
  d.number(static_cast<int64_t>(v.added.size()));
  for (const BpeVocabulary::Added& a : v.added) {
    d.number(a.id);
    d.number(a.special);
  }
  d.number(static_cast<int64_t>(v.pre));
  d.number(v.ignore_merges);
  d.number(v.nfc);
  d.number(t.bos_id);
  d.number(t.eos_id);
  d.number(static_cast<int64_t>(t.end_ids.size()));
  for (const int32_t id : t.end_ids) d.number(id);
  d.number(static_cast<int64_t>(t.text_prefix.size()));
  for (const int32_t id : t.text_prefix) d.number(id);
  return d.hex();
}

std::string config_digest(const ModelConfig& c) {
  Digest d;
  for (const int64_t v : {int64_t{c.vocab}, int64_t{c.d_model}, int64_t{c.n_layers}, int64_t{c.n_heads},
                          int64_t{c.n_kv_heads}, int64_t{c.head_dim()}, int64_t{c.ffn_dim},
                          int64_t{c.rope_scaling.original_max_positions}, int64_t{c.tied_embeddings},
                          int64_t{c.qkv_bias}})
    d.number(v);
  for (const float v : {c.rope_base, c.rope_scaling.factor, c.rope_scaling.low_freq_factor,
                        c.rope_scaling.high_freq_factor, c.norm_eps})
    d.real(v);
  return d.hex();
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
  Digest chat;
  chat.bytes(source.pretrained_tokenizer.chat_template);
  return "forge-model 1; tokenizer=" + tokenizer_digest(source.pretrained_tokenizer) +
         "; chat_template=" + chat.hex() + "; config=" + config_digest(source.config);
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
