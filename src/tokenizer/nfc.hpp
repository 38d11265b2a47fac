// Unicode Normalization Form C (UAX #15) of UTF-8 text, as Qwen2's
// tokenizer.json applies it before pre-tokenizing:
//   1. decompose every code point canonically, fully (Hangul syllables by
//      arithmetic: S = 0xAC00 + (L * 21 + V) * 28 + T);
//   2. order each run of combining marks by canonical combining class
//      (stably: marks of one class keep their order);
//   3. compose: a mark (or jamo) joins the last starter before it into its
//      primary composite unless blocked (a mark between them of class 0 or
//      of a class >= its own).
// Text in which every code point passes the quick check (no combining mark,
// no second part of a composite, nothing NFC changes) is returned as it is,
// at the cost of one scan. A byte that is not valid UTF-8 stays as it is and
// composes with nothing. Tables: nfc_tables.cpp (tools/gen_unicode_tables.py
// --nfc, the Unicode version of unicode_tables.cpp: 14.0). Hugging Face
// tokenizers' NFC (0.19) behaves as Unicode 9: text with a combining mark
// assigned since (U+1DFA, U+16FF0, ...) normalizes differently there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/unicode.hpp"

namespace forge::unicode {

std::string nfc(std::string_view text);
// True when every code point passes the quick check, so nfc(text) == text
// (one scan, no allocation); false means nfc may change the text.
bool is_nfc_quick(std::string_view text);

namespace nfc_data {
struct CombiningRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t first, count;  // parts in kDecompositionParts
};
struct Composition {
  char32_t first, second, composite;
};
extern const CombiningRange kCombining[];
extern const size_t kCombiningRanges;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const char32_t kDecompositionParts[];
extern const Composition kCompositions[];
extern const size_t kCompositionCount;
extern const CodeRange kNotQuickYes[];
extern const size_t kNotQuickYesRanges;
}  // namespace nfc_data

}  // namespace forge::unicode
