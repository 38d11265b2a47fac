// NFC (tokenizer/nfc.hpp) on the examples of UAX #15 and the Unicode
// standard's composition rules; tests/reference/test_hf_tokenizer.py
// compares it with Python's unicodedata on 15,000 strings.
#include <gtest/gtest.h>

#include <string>

#include "core/rng.hpp"
#include "tokenizer/nfc.hpp"

namespace forge {
namespace {

using unicode::nfc;

TEST(Nfc, ComposesReordersAndKeepsExclusionsApart) {
  EXPECT_EQ(nfc("cafe\u0301"), "caf\u00E9");                     // e + acute
  EXPECT_EQ(nfc("\u212B"), "\u00C5");                              // ANGSTROM SIGN: a singleton
  EXPECT_EQ(nfc("A\u030A"), "\u00C5");
  EXPECT_EQ(nfc("a\u0302\u0323"), "\u1EAD");                     // marks reordered: dot below (220) first
  EXPECT_EQ(nfc("a\u0323\u0302"), "\u1EAD");
  EXPECT_EQ(nfc("\u1E9B\u0323"), "\u1E9B\u0323");                // UAX #15's example: stays
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093C");                      // a composition exclusion
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");                      // a non-starter decomposition
  EXPECT_EQ(nfc("\u0B47\u0B3E"), "\u0B4B");                      // two starters compose
  EXPECT_EQ(nfc("\u1100\u1161\u11A8"), "\uAC01");                // Hangul L V T
  EXPECT_EQ(nfc("\u1100\u1161"), "\uAC00");
  EXPECT_EQ(nfc("\uAC00\u11A8"), "\uAC01");                      // LV + T
  EXPECT_EQ(nfc("\uAC01\u11A8"), "\uAC01\u11A8");                // LVT + T: no composite
  EXPECT_EQ(nfc("e\u0301\u0301"), "\u00E9\u0301");               // no composite of é and a second acute
  EXPECT_EQ(nfc("e\u0327\u0301"), "\u0229\u0301");               // cedilla (202) composes first
  EXPECT_EQ(nfc("\u0301e"), "\u0301e");                          // a mark with no starter before it
}

TEST(Nfc, TextThatIsNfcAndBytesThatAreNotUtf8StayAsTheyAre) {
  const std::string latin = "Z\u00FCrich, na\u00EFve, \u00C5ngstr\u00F6m: <|im_end|> \u4E2D\u6587 \U0001F600";
  EXPECT_EQ(nfc(latin), latin);
  EXPECT_EQ(nfc("a\xFF\u0301"), "a\xFF\u0301");    // a bad byte blocks: the mark does not reach the a
  EXPECT_EQ(nfc("e\u0301\xC3"), "\u00E9\xC3");     // a truncated sequence is kept
  EXPECT_EQ(nfc(""), "");
}

// NFC is idempotent: normalizing its own output changes nothing.
TEST(Nfc, IsIdempotentOnMarkHeavyText) {
  Rng rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::u32string cps;
    for (int k = 0, n = 1 + static_cast<int>(rng.below(8)); k < n; ++k)
      cps += static_cast<char32_t>(rng.below(3) ? 0x300 + rng.below(0x70) : 0x41 + rng.below(0x1000));
    std::string s;
    for (char32_t c : cps) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      if (c < 0x80) s += static_cast<char>(c);
      else if (c < 0x800) s += static_cast<char>(0xC0 | (c >> 6)), s += static_cast<char>(0x80 | (c & 0x3F));
      else
        s += static_cast<char>(0xE0 | (c >> 12)), s += static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
            s += static_cast<char>(0x80 | (c & 0x3F));
    }
    const std::string once = nfc(s);
    EXPECT_EQ(nfc(once), once) << i;
  }
}

}  // namespace
}  // namespace forge
