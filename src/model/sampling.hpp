// Sampling parameters of one generation request. Sampling draws from
// softmax(logits / temperature) restricted to the top_k tokens and to the
// smallest set whose probability reaches top_p (within kTopPSlack); the random number for a
// request's i-th generated token is counter_uniform(seed, i), so the same
// request and seed give the same tokens whatever else is in the batch.
#pragma once
#include <cstdint>
#include <vector>

#include "core/config.hpp"

namespace forge {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0 = all
  int max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one
  uint64_t seed = 0;
};

// How far below top_p a nucleus's mass may fall and still reach it: top_p
// is held as a float, which rounds 0.3 up to 0.30000001.
inline constexpr double kTopPSlack = 1e-6;

// Picks a token from one row of logits (already divided by the temperature):
// the inverse CDF at uniform01 over the candidates, in token-id order when
// every token is a candidate (top_k 0, top_p 1), else in descending logit
// order (ties by id). Greedy (temperature 0) is the argmax.
// *log_kept (when given): log of the top_k / top_p candidates' share of
// softmax(logits), <= 0; 0 when every token is a candidate, and for greedy
// (whose logprob stays the plain log-softmax: forge train refuses
// temperature 0).
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, double uniform01,
                     double* log_kept = nullptr);

// The [sample] section's keys on an OptionSet (stop_tokens come from the
// tokenizer or the task, not from config).
// The temperatures sampling takes: 0 (greedy) or [0.01, 100]. Below 0.01,
// 1/T overflows the scaled logits of a large model to inf (NaN logprobs).
inline constexpr const char* kTemperaturesAllowed = "0 (greedy) or in [0.01, 100]";
// In float, as SamplingParams holds it (0.01 read from a config is 0.01f).
inline bool temperature_allowed(float t) { return t == 0.0f || (t >= 0.01f && t <= 100.0f); }

void add_sampling_options(OptionSet& opts, SamplingParams& sample);

}  // namespace forge
