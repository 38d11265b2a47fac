// A pretrained model's tokenizer, from a GGUF file's metadata or a Hugging
// Face folder's tokenizer.json and tokenizer_config.json:
//
//   GGUF    tokenizer.ggml.model = "gpt2" (byte-level BPE), tokens, merges,
//           token_type (3 = control: a special added token, 4 = user
//           defined: an added token), tokenizer.ggml.pre names the
//           pre-tokenizer (smollm, llama-bpe, qwen2, gpt-2; a missing key
//           or llama.cpp's "default" is refused),
//           bos/eos ids, tokenizer.chat_template
//   HF      model.type = "BPE" with vocab, merges (strings "a b" or pairs),
//           ignore_merges; added_tokens with their special flag; the
//           pre_tokenizer (ByteLevel; Digits + ByteLevel; Split(pattern) +
//           ByteLevel) whose pattern must be one forge knows; the chat
//           template and bos/eos tokens from tokenizer_config.json
//
// Anything else (a SentencePiece model, an unknown pre-tokenizer pattern,
// byte fallback, a normalizer other than NFC) is refused by name: an
// InputError naming the file, never a tokenizer that encodes differently.
// So are damaged files: a token id outside the vocabulary (added_tokens,
// bos/eos), a GGUF token or chat template that is not UTF-8 text. An NFC
// normalizer (Qwen2's tokenizer.json) is applied (tokenizer/nfc.hpp: Unicode
// 14's tables, where tokenizers 0.19 composes as Unicode 9 did, so text
// with characters added since may differ); a GGUF file has none, as
// llama.cpp applies none. Added tokens match as Hugging Face matches them,
// the special ones left as text in encode_ordinary; a normalized = true
// token that can overlap a normalized = false one is refused (Hugging Face
// matches the two kinds in two passes).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pretrained/gguf_file.hpp"
#include "tokenizer/bpe_tokenizer.hpp"

namespace forge {

struct PretrainedTokenizer {
  std::shared_ptr<const BpeTokenizer> tokenizer;
  std::string chat_template;  // Jinja source as the model ships it; "" if none
  int32_t bos_id = -1, eos_id = -1;
  // Every token that ends a generation besides the chat format's end of
  // turn: eos_id, a GGUF's eot/eom ids, a Hugging Face folder's
  // generation_config.json eos_token_id (one id or a list).
  std::vector<int32_t> end_ids;
  std::string source;  // the file(s) it came from
  // What Hugging Face adds around an encoded text (tokenizer.json's
  // post_processor, as JSON; a GGUF's add_bos_token as a template), for an
  // export to write back; "" for none. forge itself renders BOS explicitly.
  std::string post_processor;
  // The ids it writes before one text, as tokenizer(text) does (Llama 3's
  // BOS; a GGUF's add_bos_token): what a completion prompt given as text
  // starts with (ChatFormat::text_prefix).
  std::vector<int32_t> text_prefix;
  // tokenizer_config.json's clean_up_tokenization_spaces: transformers'
  // decode then drops the space before punctuation (" ," -> ","); forge's
  // decode does not, an export writes it back.
  bool clean_up_spaces = false;
};

PretrainedTokenizer tokenizer_from_gguf(const GgufFile& gguf);
// folder: a Hugging Face model folder with tokenizer.json (and optionally
// tokenizer_config.json).
PretrainedTokenizer tokenizer_from_hf_folder(const std::string& folder);

}  // namespace forge
