#include "tokenizer/byte_tokenizer.hpp"

#include <algorithm>
#include <string_view>

#include "core/error.hpp"

namespace forge {
namespace {
const char* kSpecialNames[] = {"pad",       "bos",           "system",         "user",
                               "assistant", "tool",          "tool_call",      "/tool_call",
                               "eot"};
constexpr int kNamedSpecials = sizeof(kSpecialNames) / sizeof(kSpecialNames[0]);

// Bytes of the longest named special token's markup, "<|name|>".
size_t longest_special_markup() {
  static const size_t n = [] {
    size_t m = 0;
    for (const char* name : kSpecialNames) m = std::max(m, std::string_view(name).size());
    return m + 4;
  }();
  return n;
}
}  // namespace

std::vector<int32_t> ByteTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(static_cast<int32_t>(c));
  return out;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (const auto& [id, plain] : split_special(text)) {
    if (id >= 0) out.push_back(id);
    else for (unsigned char c : plain) out.push_back(static_cast<int32_t>(c));
  }
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
      // "|>" within the longest name's reach: a search to the end of the
      // text made a text of many "<|" quadratic (2 s at 40 KB).
      const size_t reach = text.substr(i, longest_special_markup()).find("|>", 2);
      const size_t end = reach == std::string_view::npos ? reach : i + reach;
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
