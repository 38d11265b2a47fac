// The rollout engine ("LLM engine"): batched generation for one PolicyModel
// with continuous batching over a paged KV cache (model/kv_cache.hpp).
//
// submit() validates a request (InputError) and queues it. step():
//  1. Admission, FIFO: while fewer than max_batch sequences run, the oldest
//     waiting request reserves the blocks for every position it may write,
//     min(P + max_new_tokens, max_seq_len) - 1 for a prompt of P tokens (the
//     last token never needs k/v), capped at the pool; free blocks and
//     evictable session blocks count. A request that does not fit waits
//     (later ones wait behind it). A running sequence thus never waits for
//     memory and nothing is preempted; a request whose prompt alone exceeds
//     the pool gets an error result instead of waiting forever.
//  2. One ragged batch: every running sequence contributes its tokens whose
//     k/v are not computed yet: its newly sampled token (decode), or the next
//     chunk of its prompt (prefill; at most prefill_chunk prompt tokens per
//     step over all sequences, decodes not counted).
//  3. The model's block sequence (model/transformer.hpp: the same code and
//     parameters as training), RoPE at each token's position in its
//     sequence, with paged attention: each layer writes the batch's k/v into
//     the cache and a query at position p attends to positions 0..p of its
//     own sequence there.
//  4. Every sequence whose tokens all have k/v now samples from its last row:
//     z = FP32 head at inv_temperature 1/temperature (1 for greedy), token =
//     sample_token(z, counter_uniform(seed, i)) for its i-th generated token,
//     behaviour logprob = z[token] - lse - log_kept: the token's log
//     probability under the sampler that drew it (the log-softmax at the
//     request's temperature, renormalized over the top_k / top_p candidates,
//     whose share of the mass is e^log_kept, at most 0; with the whole
//     vocabulary, the plain log-softmax. Under top_k / top_p the learner's
//     ratio against its full-vocabulary logprob is the kept mass, below 1,
//     even on policy), version = the engine's policy version when the sequence's
//     k/v began to be computed: new weights may arrive between steps (a
//     chunked prefill or a decode may span them), and every later token
//     attends to k/v of the older ones, so a token is stamped with the oldest
//     weights it depends on. A request and seed get the same random numbers
//     whatever else is in the batch; its tokens are the same up to the
//     logits' rounding, which the batch's size and prefill chunking change by
//     a few ulps (a draw within that of a boundary can differ).
//  5. A sequence finishes when it emitted a stop token (kStop), generated
//     max_new_tokens (kLength), reached max_seq_len tokens in all
//     (kContextLimit), or filled its reservation because the pool is smaller
//     than its need (kCacheLimit), or was cancelled (kCancelled: cancel(),
//     an episode its environment abandoned). step() returns the finished
//     results.
//
// Prefix reuse: a request may carry a session key (e.g. the episode). When a
// sequence with a key finishes, its blocks and the tokens whose k/v they hold
// (prompt + generated, all but the last token) are kept under the key, LRU-
// evicted when admission needs room. A later request with that key reuses the
// longest common prefix of its prompt and the cached tokens, exactly (token
// granularity): an appended history prefills only the new tokens, a rewritten
// one falls back to the shared part (nothing if the first token differs). At
// least the last prompt token is always computed, for its logits. Cached k/v
// were computed by the weights of their time: call clear_prefix_cache() after
// new weights when the prefix must be recomputed by them; a sequence that
// began before the last set_policy_version() is not kept (its k/v mix
// versions), so after a clear the cache holds the current version's only.
//
// Shared prefixes (EngineConfig::share_prefixes): the episodes of a group
// start from one prompt, and the tasks of an environment from one system
// prompt. A new sequence copies the k/v of its longest common prefix with
// any other sequence (running, begun under the current weights, over the
// positions it has computed) or session entry stored under the current
// version, beyond what its own session gave it (8 tokens or more): k/v are
// a function of the tokens before them and the weights, so the copy is what
// the sequence would compute (up to the rounding its batch would give the
// products, as in any batch). A copy moves 2 x layers rows a token, where
// computing it runs the whole model. Sequences admitted together share
// nothing yet: a sequence in prefill whose prompt an earlier sequence of the
// step's batch computes on the same tokens (8 positions past its own or
// more) sits that step out and copies them at the next one. A sequence's
// k/v, and the version its tokens are stamped with, begin with its first
// reuse, copy or computed chunk.
//
// The engine reads model.params() at every step, so new weights apply from
// the next step. Not thread-safe: one thread drives it.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "backend/device_array.hpp"
#include "model/kv_cache.hpp"
#include "model/policy_model.hpp"
#include "model/sampling.hpp"
#include "model/transformer.hpp"

namespace forge {

struct EngineConfig {
  int max_batch = 64;               // running sequences at most
  int max_seq_len = 4096;           // prompt + generated tokens at most
  int64_t kv_cache_tokens = 65536;  // pool size in tokens (rounded down to whole blocks; on a
                                    // host backend at most host_kv_cache_tokens, below)
  int block_size = 16;              // tokens per cache block
  int prefill_chunk = 2048;         // prompt tokens computed per step at most
  bool share_prefixes = true;       // copy common prompt prefixes between sequences (above)
  void validate() const;            // InputError naming the field
};

// The KV cache tokens an engine on a host backend holds (it allocates them
// whole): kv_cache_tokens, cut to a quarter of `host_bytes` (the process's
// share of the node's usable memory, core/host_resources.hpp) at
// `row_bytes` a token in whole blocks, but no less than one max_seq_len
// sequence's.
int64_t host_kv_cache_tokens(const EngineConfig& c, double row_bytes, double host_bytes);

struct GenerationRequest {
  uint64_t id = 0;  // echoed in the result
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::string session;  // prefix-reuse key; empty = no reuse
  // Weights of at least this version must serve it: a rollout rank holds the
  // request until it has loaded them (mpi_roles/held_requests.hpp). The
  // engine itself ignores it.
  int32_t min_version = 0;
};

// Wire values (generation_rpc.hpp) in this order: new reasons go last.
enum class FinishReason { kStop, kLength, kContextLimit, kCacheLimit, kError, kCancelled };
const char* to_string(FinishReason r);

struct GenerationResult {
  uint64_t id = 0;
  std::vector<int32_t> tokens;    // generated tokens
  std::vector<float> logprobs;    // behaviour logprob of each generated token
  std::vector<int32_t> versions;  // oldest policy version each token depends on (see above)
  FinishReason finish = FinishReason::kStop;
  std::string error;              // why, for kError
  int prefill_computed = 0;       // prompt tokens whose k/v this request computed
  int prefill_reused = 0;         // prompt tokens served from the session cache
  int prefill_shared = 0;         // prompt tokens copied from another sequence or session
};

struct EngineStats {
  int64_t steps = 0;
  int64_t forward_tokens = 0;    // rows of all batches
  int64_t prefill_computed = 0;  // prompt tokens computed
  int64_t prefill_reused = 0;    // prompt tokens reused from session caches
  int64_t prefill_shared = 0;    // prompt tokens copied from other sequences' k/v
  int64_t generated = 0;         // sampled tokens
  int64_t finished = 0;          // results returned, errors included
  int64_t errors = 0;
  int64_t cancelled = 0;
};

class RolloutEngine {
 public:
  RolloutEngine(PolicyModel& model, const EngineConfig& config);
  ~RolloutEngine();

  // InputError for an empty prompt, a prompt longer than max_seq_len, a token
  // outside the vocabulary, bad sampling parameters, or an id the engine
  // still holds (waiting, running, or its result not yet returned).
  void submit(GenerationRequest request);
  // An Error from step() (non-finite logits) leaves the engine failed:
  // every later step() throws it again (the rank that owns it stops).
  std::vector<GenerationResult> step();
  std::vector<GenerationResult> run_until_done();
  // Ends request `id` if it is waiting or running: its batch place and
  // reservation go back to the pool (what it computed is kept under its
  // session, as a finished request's, for a retry; LRU-evicted) and the next
  // step() returns it as kCancelled with the tokens generated so far. False
  // when the engine does not hold it (finished, or never submitted). Between
  // steps only.
  bool cancel(uint64_t id);

  void set_policy_version(int version) { version_ = version; }
  int policy_version() const { return version_; }
  void clear_prefix_cache() { cache_.clear_sessions(); }

  bool idle() const;  // nothing waiting, running or left to return
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const;
  const EngineConfig& config() const { return config_; }
  const PagedKvCache& cache() const { return cache_; }
  const EngineStats& stats() const { return stats_; }

 private:
  struct Sequence;
  bool holds(uint64_t id) const;
  bool admit(GenerationRequest& request);
  void copy_shared_prefix(Sequence& s);
  bool computed_by_earlier(const Sequence& s, const std::vector<Sequence*>& batch,
                           const std::vector<int>& counts) const;
  void forward(const std::vector<Sequence*>& batch, const std::vector<int>& counts,
               const std::vector<uint8_t>& samples);
  void finish(Sequence& s, FinishReason reason);

  PolicyModel& model_;
  EngineConfig config_;
  PagedKvCache cache_;
  int version_ = 0;
  std::deque<GenerationRequest> waiting_;
  std::vector<Sequence> running_;
  std::vector<GenerationResult> done_;  // finished, not yet returned by step()
  EngineStats stats_;
  std::string failed_;  // the Error that stopped step(), if one did

  // Step buffers (backend memory), grown as needed.
  DeviceArray<int32_t> token_, position_, slot_, table_begin_, table_, rows_;
  TransformerActivations act_{false};  // one set of layer buffers, reused
  DeviceArray<float> logits_, lse_;
  std::vector<float> logits_host_, lse_host_;  // device backends: kept between steps
};

}  // namespace forge
