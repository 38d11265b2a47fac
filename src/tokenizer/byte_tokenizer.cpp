#include "tokenizer/byte_tokenizer.hpp"

#include "core/error.hpp"

namespace forge {
namespace {
const char* kSpecialNames[] = {"pad",       "bos",           "system",         "user",
                               "assistant", "tool",          "tool_call",      "/tool_call",
                               "eot"};
constexpr int kNamedSpecials = sizeof(kSpecialNames) / sizeof(kSpecialNames[0]);
}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(static_cast<int32_t>(c));
  return out;
}

std::string ByteTokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= kVocabSize) throw InputError("token id " + std::to_string(id) + " out of range");
  if (id < 256) return std::string(1, static_cast<char>(id));
  if (id - 256 < kNamedSpecials) return std::string("<|") + kSpecialNames[id - 256] + "|>";
  return "<|reserved_" + std::to_string(id - 256) + "|>";
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& tokens) const {
  std::string out;
  for (int32_t t : tokens) out += token_text(t);
  return out;
}

std::vector<std::pair<int32_t, std::string>> ByteTokenizer::split_special(std::string_view text) const {
  std::vector<std::pair<int32_t, std::string>> out;
  std::string plain;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 2, "<|") == 0) {
      const size_t end = text.find("|>", i + 2);
      const int32_t id = end == std::string_view::npos ? -1 : special_id(text.substr(i, end + 2 - i));
      if (id >= 0) {
        if (!plain.empty()) out.emplace_back(-1, std::move(plain));
        plain.clear();
        out.emplace_back(id, "");
        i = end + 2;
        continue;
      }
    }
    plain.push_back(text[i++]);
  }
  if (!plain.empty()) out.emplace_back(-1, std::move(plain));
  return out;
}

int32_t ByteTokenizer::special_id(std::string_view name) const {
  if (name.size() > 4 && name.substr(0, 2) == "<|" && name.substr(name.size() - 2) == "|>")
    name = name.substr(2, name.size() - 4);
  for (int i = 0; i < kNamedSpecials; ++i)
    if (name == kSpecialNames[i]) return 256 + i;
  return -1;
}

}  // namespace forge
