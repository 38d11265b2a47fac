#include "tokenizer/nfc.hpp"

#include <algorithm>
#include <vector>

namespace forge::unicode {
namespace {

using namespace nfc_data;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRange* end = kCombining + kCombiningRanges;
  const CombiningRange* it =
      std::upper_bound(kCombining, end, cp, [](char32_t c, const CombiningRange& r) { return c < r.first; });
  return it != kCombining && cp <= (it - 1)->last ? (it - 1)->ccc : 0;
}

bool quick_yes(char32_t cp) {
  if (cp < 0x300) return true;
  const CodeRange* end = kNotQuickYes + kNotQuickYesRanges;
  const CodeRange* it = std::upper_bound(kNotQuickYes, end, cp, [](char32_t c, const CodeRange& r) { return c < r.first; });
  return !(it != kNotQuickYes && cp <= (it - 1)->last);
}

// A code point of the text being normalized; raw >= 0: a byte that is not
// UTF-8, kept as it is.
struct Item {
  char32_t cp;
  int raw;
  uint8_t ccc;
};

void decompose(char32_t cp, std::vector<Item>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back({kLBase + s / kNCount, -1, 0});
    out.push_back({kVBase + (s % kNCount) / kTCount, -1, 0});
    if (s % kTCount) out.push_back({kTBase + s % kTCount, -1, 0});
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it =
      std::lower_bound(kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back({cp, -1, combining_class(cp)});
    return;
  }
  for (int k = 0; k < it->count; ++k) {
    const char32_t part = kDecompositionParts[it->first + k];
    out.push_back({part, -1, combining_class(part)});
  }
}

// The primary composite of a and b, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto key) {
    return c.first < key.first || (c.first == key.first && c.second < key.second);
  });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

bool is_nfc_quick(std::string_view text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    // Every code point from U+0300 on has a lead byte from 0xCC on: the
    // bytes below (ASCII, Latin-1, ..., continuation bytes) need no decoding.
    if (b[i] < 0xCC) {
      ++i;
      continue;
    }
    const size_t len = b[i] < 0xE0 ? 2 : b[i] < 0xF0 ? 3 : 4;
    char32_t cp = b[i] & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    size_t k = 1;
    for (; k < len && i + k < n && (b[i + k] & 0xC0) == 0x80; ++k) cp = (cp << 6) | (b[i + k] & 0x3F);
    // A sequence cut short is bytes kept as they are (they compose with nothing).
    if (k == len && !quick_yes(cp)) return false;
    i += k;
  }
  return true;
}

std::string nfc(std::string_view text) {
  if (is_nfc_quick(text)) return std::string(text);
  const std::vector<CodePoint> cps = decode_utf8(text);
  std::vector<Item> d;
  d.reserve(cps.size() + 8);
  for (const CodePoint& c : cps) {
    const auto byte = static_cast<unsigned char>(text[c.offset]);
    if (c.bytes == 1 && byte >= 0x80) d.push_back({0xFFFD, byte, 0});  // not UTF-8
    else decompose(c.cp, d);
  }
  // Canonical order: a stable sort of each run of marks by class.
  for (size_t i = 0; i < d.size();) {
    if (d[i].ccc == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && d[j].ccc != 0) ++j;
    std::stable_sort(d.begin() + i, d.begin() + j, [](const Item& a, const Item& b) { return a.ccc < b.ccc; });
    i = j;
  }
  // Composition onto the last starter, unless blocked.
  std::vector<Item> out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  for (const Item& it : d) {
    if (starter >= 0 && it.raw < 0 && out[starter].raw < 0) {
      const bool adjacent = static_cast<std::ptrdiff_t>(out.size()) - 1 == starter;
      const uint8_t last = out.back().ccc;
      if (adjacent || (last != 0 && last < it.ccc)) {
        if (const char32_t c = compose(out[starter].cp, it.cp)) {
          out[starter].cp = c;
          continue;
        }
      }
    }
    if (it.ccc == 0) starter = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(it);
  }
  std::string s;
  s.reserve(text.size() + 8);
  for (const Item& it : out) {
    if (it.raw >= 0) s += static_cast<char>(it.raw);
    else append_utf8(it.cp, s);
  }
  return s;
}

}  // namespace forge::unicode
