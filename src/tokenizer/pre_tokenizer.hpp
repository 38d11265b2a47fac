// The pre-tokenizers of byte-level BPE models: text is split into pieces,
// and BPE never merges across a piece boundary. Each pattern is matched the
// way the Hugging Face tokenizers library matches its regular expression
// (Oniguruma: leftmost match, alternatives tried in order, greedy with
// backtracking), and the text between two matches is a piece of its own
// (the "isolated" split):
//
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   smollm  every \p{N} alone first (Digits, individual; Unicode 15's new
//           number blocks too, as Rust's is_numeric), then gpt2 on the rest
//   llama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2   llama3 with \p{N} instead of \p{N}{1,3}
//
// Pieces are byte ranges of the text (a piece never splits a UTF-8 sequence;
// invalid bytes are characters of their own, see unicode.hpp).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace forge {

enum class PreTokenizer { kGpt2, kSmolLm, kLlama3, kQwen2 };

// "gpt2", "smollm", "llama3", "qwen2"; InputError naming the others.
PreTokenizer parse_pre_tokenizer(const std::string& name);
const char* to_string(PreTokenizer p);

// The regular expression of llama3 and qwen2 as a Hugging Face tokenizer.json
// writes it in its Split pre-tokenizer; "" for gpt2 and smollm (whose
// ByteLevel and Digits pre-tokenizers carry no pattern).
std::string split_pattern(PreTokenizer p);

// [begin, end) byte ranges covering the text, in order.
std::vector<std::pair<uint32_t, uint32_t>> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace forge
