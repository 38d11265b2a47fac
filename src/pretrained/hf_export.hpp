// A trained model leaving forge as a Hugging Face folder that transformers
// loads (AutoModelForCausalLM, AutoTokenizer) and serving tools read:
//
//   config.json             LlamaForCausalLM or Qwen2ForCausalLM with the
//                           model's sizes, rope_theta and rope_scaling,
//                           head_dim, tie_word_embeddings, bos/eos ids
//   model.safetensors       FP32 (or BF16) weights under Hugging Face's
//                           names; q and k rows (and biases) permuted back to
//                           the half-split RoPE layout; no lm_head when tied
//   tokenizer.json          the BPE vocabulary, merges, added tokens, the
//                           pre-tokenizer and a ByteLevel decoder
//   tokenizer_config.json   the chat template, bos/eos tokens
//   generation_config.json  bos/eos ids
//
// The inverse of pretrained_model.hpp's loading: loading the folder back
// gives the same weights bit for bit (FP32) and transformers gives the same
// logits (tests/reference/test_hf_oracle.py). A head_dim other than
// hidden_size / num_attention_heads needs transformers 4.45 (Llama) or 4.48
// (Qwen2) or newer, which read it (the export warns); unknown bos/eos ids
// are written as null.
#pragma once
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "pretrained/tokenizer_files.hpp"

namespace forge {

struct HfExport {
  std::string architecture;      // "llama" or "qwen2"
  ModelConfig config;
  int max_positions = 2048;
  const std::vector<float>* weights = nullptr;  // ParamLayout(config) order
  PretrainedTokenizer tokenizer;
  bool bf16 = false;             // store the weights as BF16
};

// Creates (or fills) folder: InputError when it cannot be created, Error
// when a file cannot be written (a failed final flush included).
void export_hf_folder(const HfExport& model, const std::string& folder);

// tokenizer.json of a byte-level BPE vocabulary (the format
// tokenizer_from_hf_folder reads back): its NFC normalizer if it has one,
// and `post_processor` (JSON, "" for none) as given.
std::string tokenizer_json(const BpeVocabulary& vocab, const std::string& post_processor = "");

}  // namespace forge
