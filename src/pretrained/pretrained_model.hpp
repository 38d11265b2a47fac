// A pretrained model entering forge: its architecture, weights and
// tokenizer, from a Hugging Face folder or a GGUF file.
//
// Architectures, from the checkpoint's own configuration:
//   llama   Llama 3, SmolLM2: RMSNorm, GQA, SwiGLU, RoPE (rope_theta, Llama 3
//           rope_scaling), head_dim that need not be hidden / heads, tied or
//           untied embeddings
//   qwen2   as llama, plus a bias on q, k and v
// Anything else (Qwen3's QK-norm, Mistral's sliding window, a bias on the
// output projection or the MLP, another activation or RoPE scaling, a
// partial rotary factor) is refused by name at load time: an InputError,
// never a model loaded wrongly. RoPE comes from rope_theta and rope_scaling
// (transformers 4) or rope_parameters (transformers 5); both present must
// agree. A GGUF tensor no piece below takes is refused (llama.cpp would use
// it); a Hugging Face folder's is warned about (transformers ignores it).
//
// Weights become FP32 in forge's layout (model/model_config.hpp):
//   HF    model.embed_tokens, model.layers.N.{input_layernorm,
//         self_attn.{q,k,v,o}_proj, post_attention_layernorm,
//         mlp.{gate,up,down}_proj}, model.norm, lm_head (absent when tied).
//         q and k rows are permuted from the half-split RoPE layout
//         (rotate_half: pair (i, i + hd/2)) to forge's interleaved pairs
//         (2i, 2i + 1): forge row h hd + 2i = HF row h hd + i, forge row
//         h hd + 2i + 1 = HF row h hd + i + hd/2 (biases alike).
//   GGUF  token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
//         ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm, output (absent
//         when tied). llama.cpp's converter already stores q and k in the
//         interleaved layout, so they are taken as they are.
// The configuration's keys are checked by type and range (an InputError
// naming the file and the key: num_attention_heads 0, hidden_size 2^32 + 576,
// rope_theta 1e39), then every tensor's shape against the configuration,
// from the file's header before the weights' buffer is allocated (InputError
// naming the file, the tensor, its shape and the expected one), as is the
// tokenizer's vocabulary against the model's.
#pragma once
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "pretrained/tokenizer_files.hpp"

namespace forge {

struct PretrainedModel {
  std::string path;          // the folder or file given
  std::string format;        // "hf" or "gguf"
  std::string architecture;  // "llama" or "qwen2"
  std::string name;          // the model's own name where it states one
  ModelConfig config;        // vocab included
  int max_positions = 0;     // its context length (max_position_embeddings)
  std::vector<float> weights;  // ParamLayout(config) order
  PretrainedTokenizer tokenizer;
};

// A folder (config.json, safetensors, tokenizer files) or a .gguf file
// ("$FORGE_CACHE/..." is in the cache, core/cache_dir.hpp). With
// weights = false only the configuration and tokenizer are read.
PretrainedModel load_pretrained(const std::string& path, bool weights = true);

// The permutation between the two RoPE layouts of q and k rows (rows of
// n_heads heads of head_dim, `cols` values each): to_interleaved = true maps
// Hugging Face's half-split rows to forge's, false maps back.
std::vector<float> permute_rope_rows(const std::vector<float>& w, int n_heads, int head_dim, int64_t cols,
                                     bool to_interleaved);

}  // namespace forge
