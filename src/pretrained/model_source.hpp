// The policy the [model] section names, resolved:
//
//   model.pretrained = PATH   a real model: its configuration (architecture,
//                             sizes, variants, vocabulary) replaces the
//                             section's sizes, its weights initialise the
//                             policy, its BPE tokenizer and native chat format
//                             are the scaffold's (pretrained_model.hpp)
//   model.pretrained = ""     the built-in policy: the section's sizes over
//                             the byte tokenizer, initialised at random
//
// Every command resolves its model here, so that sft, train (one process or
// every rank of an MPI job), eval, generate, export and the gateway agree.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "pretrained/tokenizer_files.hpp"
#include "tokenizer/chat_format.hpp"
#include "tokenizer/tokenizer.hpp"

namespace forge {

struct ModelSource {
  ModelConfig config;  // resolved, vocab set
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatFormat> chat;  // the native chat format; null for the built-in policy
  PretrainedTokenizer pretrained_tokenizer;  // its files' content (export); empty for the built-in policy
  std::string architecture;  // "llama" / "qwen2"; "forge" for the built-in policy
  int max_positions = 0;     // the pretrained context length; 0 = unbounded
  std::vector<float> weights;  // pretrained weights when asked for; empty otherwise
  bool is_pretrained() const { return chat != nullptr; }
};

// InputError for a pretrained model that cannot be read (pretrained_model.hpp).
ModelSource resolve_model(const ModelConfig& model, bool load_weights);

// A warning when sequences of up to `longest` tokens (`what`: the keys that
// make it) run past a pretrained model's context length: its positions
// beyond were never trained, so generation there degrades.
void warn_past_context(const ModelSource& source, int64_t longest, const std::string& what);

// Whether a path names a pretrained model (a .gguf file, or a folder with a
// config.json) rather than a forge checkpoint or run folder; "$FORGE_CACHE/"
// at its start is the cache (core/cache_dir.hpp).
bool is_pretrained_path(const std::string& path);

}  // namespace forge
