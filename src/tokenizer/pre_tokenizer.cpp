#include "tokenizer/pre_tokenizer.hpp"

#include <cstdint>

#include "core/error.hpp"
#include "tokenizer/unicode.hpp"

namespace forge {
namespace {

using unicode::CodePoint;
using unicode::is_letter;
using unicode::is_number;
using unicode::is_space;

// A character the Digits pre-tokenizer splits off. Hugging Face tests it with
// Rust's char::is_numeric, at a newer Unicode than the regex classes (14):
// the number blocks Unicode 15 added count too (Kawi digits, Kaktovik
// numerals, Nag Mundari digits; tokenizers 0.19.1, checked on every code point).
bool is_digits_split(char32_t cp) {
  return is_number(cp) || (cp >= 0x11F50 && cp <= 0x11F59) || (cp >= 0x1D2C0 && cp <= 0x1D2D3) ||
         (cp >= 0x1E4F0 && cp <= 0x1E4F9);
}

// The characters of one piece and a cursor over them; every matcher returns
// the length (in characters) of its match at position i, 0 for none.
struct Text {
  const std::vector<CodePoint>& c;
  size_t begin, end;  // the characters this pass looks at
  char32_t at(size_t i) const { return i < end ? c[i].cp : 0; }
  bool valid(size_t i) const { return i < end; }
};

bool is_other(char32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }
bool is_newline(char32_t cp) { return cp == '\r' || cp == '\n'; }

char32_t fold(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to s
  return cp;
}

// 's|'t|'re|'ve|'m|'ll|'d, in that order; case-insensitive for (?i:...).
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t.at(i) != '\'') return 0;
  const auto ch = [&](size_t k) { return ignore_case ? fold(t.at(k)) : t.at(k); };
  static const char* const kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (const char* s : kSuffixes) {
    size_t k = 0;
    while (s[k] && t.valid(i + 1 + k) && ch(i + 1 + k) == static_cast<char32_t>(s[k])) ++k;
    if (!s[k]) return 1 + k;
  }
  return 0;
}

template <class Pred>
size_t run(const Text& t, size_t i, Pred pred, size_t at_most = SIZE_MAX) {
  size_t j = i;
  while (j - i < at_most && t.valid(j) && pred(t.at(j))) ++j;
  return j - i;
}

// " ?X+": an optional space, then a run of class X.
template <class Pred>
size_t space_then_run(const Text& t, size_t i, Pred pred) {
  if (t.at(i) == ' ' && t.valid(i + 1) && pred(t.at(i + 1))) return 1 + run(t, i + 1, pred);
  return t.valid(i) && pred(t.at(i)) ? run(t, i, pred) : 0;
}

// \s+(?!\S): a whitespace run, less its last character when a non-space follows.
size_t spaces_not_before_text(const Text& t, size_t i) {
  const size_t n = run(t, i, is_space);
  if (n == 0) return 0;
  if (!t.valid(i + n)) return n;
  return n >= 2 ? n - 1 : 0;
}

size_t match_gpt2(const Text& t, size_t i) {
  if (size_t n = contraction(t, i, false)) return n;
  if (size_t n = space_then_run(t, i, is_letter)) return n;
  if (size_t n = space_then_run(t, i, is_number)) return n;
  if (size_t n = space_then_run(t, i, is_other)) return n;
  return spaces_not_before_text(t, i);
}

size_t match_llama3(const Text& t, size_t i, size_t max_digits) {
  if (size_t n = contraction(t, i, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const char32_t c = t.at(i);
  if (t.valid(i) && !is_newline(c) && !is_letter(c) && !is_number(c) && t.valid(i + 1) && is_letter(t.at(i + 1)))
    return 1 + run(t, i + 1, is_letter);
  if (t.valid(i) && is_letter(c)) return run(t, i, is_letter);
  // \p{N}{1,max}
  // (looking no further than max: a run of n digits scanned whole at each
  // of its n / max matches took quadratic time, 22 s for 100k digits)
  if (size_t n = run(t, i, is_number, max_digits)) return n;
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  if (size_t n = space_then_run(t, i, is_other)) return n + run(t, i + n, is_newline);
  // \s*[\r\n]+: the whitespace run up to and including its last newline.
  const size_t ws = run(t, i, is_space);
  for (size_t k = ws; k > 0; --k)
    if (is_newline(t.at(i + k - 1))) return k;
  // \s+(?!\S), then \s+
  if (size_t n = spaces_not_before_text(t, i)) return n;
  return ws;
}

// Splits characters [begin, end) by a pattern: matches and the gaps between
// them, as byte ranges.
template <class Match>
void split(const std::vector<CodePoint>& cps, size_t begin, size_t end, Match match,
           std::vector<std::pair<uint32_t, uint32_t>>* out) {
  const Text t{cps, begin, end};
  const auto bytes = [&](size_t a, size_t b) {
    const uint32_t lo = cps[a].offset;
    const uint32_t hi = cps[b - 1].offset + cps[b - 1].bytes;
    out->emplace_back(lo, hi);
  };
  size_t gap = begin;
  for (size_t i = begin; i < end;) {
    const size_t n = match(t, i);
    if (n == 0) {
      ++i;
      continue;
    }
    if (gap < i) bytes(gap, i);
    bytes(i, i + n);
    i += n;
    gap = i;
  }
  if (gap < end) bytes(gap, end);
}

}  // namespace

PreTokenizer parse_pre_tokenizer(const std::string& name) {
  if (name == "gpt2") return PreTokenizer::kGpt2;
  if (name == "smollm") return PreTokenizer::kSmolLm;
  if (name == "llama3") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  throw InputError("unknown pre-tokenizer '" + name + "' (forge has gpt2, smollm, llama3, qwen2)");
}

std::string split_pattern(PreTokenizer p) {
  if (p == PreTokenizer::kLlama3)
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (p == PreTokenizer::kQwen2)
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return "";
}

const char* to_string(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::kGpt2: return "gpt2";
    case PreTokenizer::kSmolLm: return "smollm";
    case PreTokenizer::kLlama3: return "llama3";
    case PreTokenizer::kQwen2: return "qwen2";
  }
  return "?";
}

std::vector<std::pair<uint32_t, uint32_t>> pre_tokenize(PreTokenizer kind, std::string_view text) {
  const std::vector<CodePoint> cps = unicode::decode_utf8(text);
  std::vector<std::pair<uint32_t, uint32_t>> out;
  const size_t n = cps.size();
  switch (kind) {
    case PreTokenizer::kGpt2: split(cps, 0, n, match_gpt2, &out); break;
    case PreTokenizer::kSmolLm: {
      // Each number character alone, then gpt2 within the spans between them.
      size_t start = 0;
      for (size_t i = 0; i <= n; ++i) {
        if (i < n && !is_digits_split(cps[i].cp)) continue;
        if (start < i) split(cps, start, i, match_gpt2, &out);
        if (i < n) out.emplace_back(cps[i].offset, cps[i].offset + cps[i].bytes);
        start = i + 1;
      }
      break;
    }
    case PreTokenizer::kLlama3:
      split(cps, 0, n, [](const Text& t, size_t i) { return match_llama3(t, i, 3); }, &out);
      break;
    case PreTokenizer::kQwen2:
      split(cps, 0, n, [](const Text& t, size_t i) { return match_llama3(t, i, 1); }, &out);
      break;
  }
  return out;
}

}  // namespace forge
