// Byte-level BPE, as GPT-2, Llama 3, Qwen2 and SmolLM2 use it.
//
//   encode(text):
//     1. added tokens: the text is split at every occurrence of an added
//        token's content (leftmost, longest first); each becomes its id
//        (encode_ordinary, for text that is not the scaffold's: the added
//        tokens that are not special only)
//     2. each remaining span is cut into pieces by the pre-tokenizer
//        (pre_tokenizer.hpp); BPE never merges across pieces
//     3. a piece's UTF-8 bytes map to the byte-level alphabet (GPT-2's
//        bytes_to_unicode: printable bytes stand for themselves, the others
//        for U+0100 onwards; a byte the vocabulary has no token for is
//        dropped, as the reference drops it); with ignore_merges a piece that is a token
//        already is that token; otherwise, starting from one symbol per
//        byte, the adjacent pair of lowest merge rank is merged (leftmost
//        first among equal ranks) until no pair has a merge
//   decode(ids): the tokens' byte-level text mapped back to bytes; added
//     tokens, and a token with a character outside the byte-level
//     alphabet, as their text. (Hugging Face's ByteLevel decoder maps an
//     added token's byte-level characters too: "ĠĠx" decodes to "  x"
//     there, to its text here. The models forge reads have ASCII added
//     tokens only, where the two agree.)
//
// This is what the Hugging Face tokenizers library computes for a BPE model
// without dropout, unknown token or byte fallback (tests/reference checks it
// token for token on a corpus of 12,000 strings). Pieces of at most 256
// bytes are cached (65,536 of them, then the cache starts over).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

namespace forge {

struct BpeVocabulary {
  std::vector<std::string> tokens;  // by id: byte-level text, or an added token's content
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  struct Added {
    int32_t id = 0;
    bool special = true;  // a control token (the chat template's), not text
  };
  std::vector<Added> added;  // their content is tokens[id]
  PreTokenizer pre = PreTokenizer::kGpt2;
  bool ignore_merges = false;
  bool nfc = false;  // text is normalized to NFC before pre-tokenizing (tokenizer/nfc.hpp)
};

class BpeTokenizer final : public Tokenizer {
 public:
  // InputError naming `source` when a merge names a token the vocabulary
  // lacks, most bytes have no token, or an id is out of range.
  BpeTokenizer(BpeVocabulary vocab, const std::string& source);

  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode_ordinary(std::string_view text) const override;
  std::vector<std::pair<int32_t, std::string>> split_special(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_text(int32_t id) const override;
  int32_t special_id(std::string_view text) const override;
  bool is_special(int32_t id) const override;

  const BpeVocabulary& vocabulary() const { return vocab_; }
  // The id of a token's byte-level text; -1 if none.
  int32_t token_id(std::string_view token) const;
  // Pieces in the cache now.
  size_t cached_pieces() const;

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
  void encode_plain(std::string_view text, std::vector<int32_t>* out) const;
  // split_special over the added tokens of one table.
  std::vector<std::pair<int32_t, std::string>> split_added(
      std::string_view text, const std::vector<std::vector<int32_t>>& by_first_byte) const;

  BpeVocabulary vocab_;
  std::unordered_map<std::string, int32_t> id_of_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_;  // (left, right) -> (rank, merged)
  int32_t byte_token_[256];
  std::vector<std::string> bytes_of_;   // id -> the bytes it decodes to
  std::vector<uint8_t> special_;        // id -> is a special added token
  std::vector<std::vector<int32_t>> added_by_first_byte_;  // added ids by their first byte, longest first
  std::vector<std::vector<int32_t>> ordinary_added_by_first_byte_;  // the same, those not special only
  bool has_ordinary_added_ = false;                                  // any added token not special
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// GPT-2's byte-level alphabet: the code point that stands for byte b, and
// the UTF-8 text of a byte string in that alphabet.
char32_t byte_level_char(uint8_t b);
std::string to_byte_level(std::string_view bytes);

}  // namespace forge
