#include "model/rollout_engine.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.hpp"
#include "core/host_resources.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"

namespace forge {

namespace {
int ceil_div(int64_t a, int b) { return static_cast<int>((a + b - 1) / b); }
// Fewest prompt tokens a sequence copies from another, or waits a step for:
// random prompts share a first token or two by chance.
constexpr int kMinShared = 8;
// The length of the common prefix of a and b, at most cap.
int common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int cap) {
  const int n = std::min({cap, static_cast<int>(a.size()), static_cast<int>(b.size())});
  int i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}
// A host backend allocates the KV cache whole, and zeroed, so resident at
// once: past a quarter of this process's share of the node's usable memory
// (a cgroup's limit if lower; shared by the launcher's processes on the
// node) it is cut to that (host_kv_cache_tokens), with a warning once per
// process; sequences then queue for blocks. An agent's engine (up to 256
// sequences x (context + new tokens) x 2) took 11 GB with SmolLM2-135M's
// rows, 190 GB with its contexts raised to 8192.
EngineConfig fitted_to_host(EngineConfig c, PolicyModel& model) {
  c.validate();
  if (!model.backend().host_memory()) return c;
  const ModelConfig& m = model.config();
  const double row_bytes = 2.0 * m.n_layers * m.n_kv_heads * m.head_dim() * model.backend().kv_cache_value_bytes();
  const double share = static_cast<double>(usable_host_memory()) / node_local_size();
  const int64_t fitted = host_kv_cache_tokens(c, row_bytes, share);
  if (c.kv_cache_tokens <= fitted) return c;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    char line[360];
    std::snprintf(line, sizeof line,
                  "rollout engine: a KV cache of %lld tokens would take %.1f GiB, over a quarter of this process's "
                  "%.1f GiB of the node's memory: it holds %lld tokens (%.1f GiB), so fewer sequences generate at "
                  "once",
                  static_cast<long long>(c.kv_cache_tokens), c.kv_cache_tokens * row_bytes / (1 << 30),
                  share / (1 << 30), static_cast<long long>(fitted), fitted * row_bytes / (1 << 30));
    log_warn(line);
  }
  c.kv_cache_tokens = fitted;
  return c;
}
}  // namespace

int64_t host_kv_cache_tokens(const EngineConfig& c, double row_bytes, double host_bytes) {
  const int64_t budget = static_cast<int64_t>(host_bytes / 4 / row_bytes) / c.block_size * c.block_size;
  const int64_t one_sequence = (static_cast<int64_t>(c.max_seq_len) + c.block_size - 1) / c.block_size * c.block_size;
  return std::min(c.kv_cache_tokens, std::max(budget, one_sequence));
}

void EngineConfig::validate() const {
  auto need = [](bool ok, const std::string& key, int64_t value, const std::string& rule) {
    if (!ok) throw InputError(key + " = " + std::to_string(value) + ": " + rule);
  };
  need(max_batch >= 1, "rollout engine: max_batch", max_batch, "must be at least 1");
  need(max_seq_len >= 2, "rollout engine: max_seq_len", max_seq_len,
       "must be at least 2 (a prompt token and a generated one)");
  need(block_size >= 1, "rollout engine: block_size", block_size, "must be at least 1");
  need(kv_cache_tokens >= block_size, "rollout engine: kv_cache_tokens", kv_cache_tokens,
       "must hold at least one block of block_size tokens");
  need(prefill_chunk >= 1, "rollout engine: prefill_chunk", prefill_chunk, "must be at least 1");
}

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kContextLimit: return "context_limit";
    case FinishReason::kCacheLimit: return "cache_limit";
    case FinishReason::kError: return "error";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

struct RolloutEngine::Sequence {
  GenerationRequest req;        // sampling parameters and session (prompt moved to tokens)
  GenerationResult res;
  std::vector<int32_t> tokens;  // prompt, then generated
  int computed = 0;             // positions whose k/v are in the cache
  int first_version = -1;       // the engine's version when its k/v began to be computed
  std::vector<int32_t> blocks;  // block table (the whole reservation)
  bool find_donor = false;      // look for a shared prefix to copy at the next step
  bool done = false;

  // Its k/v begin now (a reuse, a copy or a computed chunk), under version v:
  // its tokens are stamped with the version of the first.
  void begin_kv(int v) {
    if (first_version < 0) first_version = v;
  }
};

RolloutEngine::RolloutEngine(PolicyModel& model, const EngineConfig& config)
    : model_(model),
      config_(fitted_to_host(config, model)),
      cache_(model.backend(), model.config(), config_.kv_cache_tokens, config_.block_size) {}

RolloutEngine::~RolloutEngine() = default;

bool RolloutEngine::idle() const { return waiting_.empty() && running_.empty() && done_.empty(); }
size_t RolloutEngine::num_running() const { return running_.size(); }

void RolloutEngine::submit(GenerationRequest r) {
  const std::string who = "generation request " + std::to_string(r.id) + ": ";
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  const int V = model_.config().vocab;
  const SamplingParams& sp = r.sampling;
  if (P == 0) throw InputError(who + "empty prompt");
  if (P > config_.max_seq_len)
    throw InputError(who + "prompt of " + std::to_string(P) + " tokens exceeds the engine's max_seq_len (" +
                     std::to_string(config_.max_seq_len) +
                     " tokens: agent.max_context_tokens + agent.max_new_tokens in agent commands); shorten the context");
  for (int64_t i = 0; i < P; ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= V)
      throw InputError(who + "prompt token " + std::to_string(i) + " is " +
                       std::to_string(r.prompt[i]) + ", outside the vocabulary [0, " +
                       std::to_string(V) + ")");
  if (sp.max_new_tokens < 1) throw InputError(who + "max_new_tokens must be at least 1");
  if (!temperature_allowed(sp.temperature))
    throw InputError(who + "temperature must be " + kTemperaturesAllowed);
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) throw InputError(who + "top_p must lie in (0, 1]");
  if (sp.top_k < 0) throw InputError(who + "top_k must be >= 0 (0 = all)");
  // An id names one request until step() returns its result: a second one
  // would make results and cancel(id) ambiguous.
  if (holds(r.id)) throw InputError(who + "this id is already waiting, running or unreturned");

  GenerationResult early;
  early.id = r.id;
  if (P == config_.max_seq_len) {  // no room for a generated token
    early.finish = FinishReason::kContextLimit;
    done_.push_back(std::move(early));
  } else if (P > cache_.capacity_tokens()) {
    early.finish = FinishReason::kError;
    early.error = who + "prompt of " + std::to_string(P) + " tokens cannot fit the KV cache of " +
                  std::to_string(cache_.capacity_tokens()) +
                  " tokens (kv_cache_tokens, sized from the engine's batch and max_seq_len); shorten the context";
    done_.push_back(std::move(early));
  } else {
    waiting_.push_back(std::move(r));
  }
}

bool RolloutEngine::holds(uint64_t id) const {
  return std::any_of(waiting_.begin(), waiting_.end(), [&](const GenerationRequest& r) { return r.id == id; }) ||
         std::any_of(running_.begin(), running_.end(), [&](const Sequence& s) { return s.req.id == id; }) ||
         std::any_of(done_.begin(), done_.end(), [&](const GenerationResult& r) { return r.id == id; });
}

bool RolloutEngine::admit(GenerationRequest& r) {
  const int bs = config_.block_size;
  const int P = static_cast<int>(r.prompt.size());
  const int64_t final_len =
      std::min<int64_t>(static_cast<int64_t>(P) + r.sampling.max_new_tokens, config_.max_seq_len);
  const int need = ceil_div(std::min(final_len - 1, cache_.capacity_tokens()), bs);

  int reuse = 0;
  const PagedKvCache::Prefix* cached = r.session.empty() ? nullptr : cache_.find_session(r.session);
  if (cached && cached->version != version_) {
    // Keys and values of older weights (a caller that did not clear the
    // cache on a new version): reusing them under this version's stamp
    // would launder their version. Dropped.
    cache_.release(cache_.take_session(r.session).blocks);
    cached = nullptr;
  }
  if (cached) {
    const size_t n = std::min(cached->tokens.size(), r.prompt.size());
    while (reuse < static_cast<int>(n) && cached->tokens[reuse] == r.prompt[reuse]) ++reuse;
    reuse = std::min(reuse, P - 1);  // the last prompt token is computed for its logits
  }
  // The kept prefix blocks count on both sides: the reservation fits if all
  // free and session blocks (this session's included) cover it.
  if (need > cache_.free_blocks() + cache_.cached_blocks()) return false;
  const int keep = ceil_div(reuse, bs);

  Sequence s;
  if (cached) {
    PagedKvCache::Prefix p = cache_.take_session(r.session);
    cache_.release(std::vector<int32_t>(p.blocks.begin() + keep, p.blocks.end()));
    s.blocks.assign(p.blocks.begin(), p.blocks.begin() + keep);
  }
  const std::vector<int32_t> more = cache_.allocate(need - keep);
  s.blocks.insert(s.blocks.end(), more.begin(), more.end());
  s.tokens = std::move(r.prompt);  // the sequence keeps the prompt, the request its parameters
  s.computed = reuse;
  if (reuse > 0) s.begin_kv(version_);
  s.res.id = r.id;
  s.res.prefill_reused = reuse;
  s.req = std::move(r);
  s.find_donor = config_.share_prefixes;
  stats_.prefill_reused += reuse;
  running_.push_back(std::move(s));
  return true;
}

// s (in prefill) copies the k/v of its longest common prefix with a running
// sequence begun under the current weights (over the positions that one has
// computed) or a session entry of the current version, where that goes
// kMinShared or more past s.computed. The last prompt token stays s's to
// compute, for its logits. s's k/v begin with the copy (begin_kv): its
// tokens are stamped with this version even if newer weights arrive before
// it runs.
void RolloutEngine::copy_shared_prefix(Sequence& s) {
  const int cap = static_cast<int>(s.tokens.size()) - 1;
  int best = s.computed;
  const std::vector<int32_t>* donor = nullptr;
  const auto consider = [&](int shared, const std::vector<int32_t>& blocks) {
    if (shared > best) {
      best = shared;
      donor = &blocks;
    }
  };
  for (const Sequence& t : running_)
    if (&t != &s && t.first_version == version_)
      consider(common_prefix(s.tokens, t.tokens, std::min(cap, t.computed)), t.blocks);
  cache_.for_each_session([&](const PagedKvCache::Prefix& p) {
    if (p.version == version_) consider(common_prefix(s.tokens, p.tokens, cap), p.blocks);
  });
  if (donor == nullptr || best < s.computed + kMinShared) return;
  s.begin_kv(version_);
  cache_.copy_positions(*donor, s.blocks, s.computed, best);
  s.res.prefill_shared += best - s.computed;
  stats_.prefill_shared += best - s.computed;
  s.computed = best;
}

// Whether an earlier prefill sequence of this step's batch, begun under the
// current weights, holds after this step the k/v of kMinShared or more
// positions past s.computed on the same tokens (mostly those it computes in
// this step): then s waits the step and copies them (copy_shared_prefix)
// instead of computing them too.
bool RolloutEngine::computed_by_earlier(const Sequence& s, const std::vector<Sequence*>& batch,
                                        const std::vector<int>& counts) const {
  const int cap = static_cast<int>(s.tokens.size()) - 1;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& t = *batch[i];
    if (!t.res.tokens.empty() || t.first_version != version_) continue;
    if (common_prefix(s.tokens, t.tokens, std::min(cap, t.computed + counts[i])) >= s.computed + kMinShared)
      return true;
  }
  return false;
}

void RolloutEngine::finish(Sequence& s, FinishReason reason) {
  s.done = true;
  s.res.finish = reason;
  // A sequence that began under older weights holds stale k/v: it is not
  // kept for reuse (the prefix cache holds the current version's only).
  if (s.req.session.empty() || s.first_version != version_) {
    cache_.release(s.blocks);
  } else {
    const int keep = ceil_div(s.computed, config_.block_size);
    cache_.release(std::vector<int32_t>(s.blocks.begin() + keep, s.blocks.end()));
    s.blocks.resize(keep);
    PagedKvCache::Prefix p;
    p.tokens.assign(s.tokens.begin(), s.tokens.begin() + s.computed);
    p.version = version_;
    p.blocks = std::move(s.blocks);
    cache_.store_session(s.req.session, std::move(p));
  }
  s.blocks.clear();
  done_.push_back(std::move(s.res));
}

bool RolloutEngine::cancel(uint64_t id) {
  const auto waiting = std::find_if(waiting_.begin(), waiting_.end(), [&](const GenerationRequest& r) { return r.id == id; });
  if (waiting != waiting_.end()) {
    GenerationResult r;
    r.id = id;
    r.finish = FinishReason::kCancelled;
    done_.push_back(std::move(r));
    waiting_.erase(waiting);
    return true;
  }
  const auto running = std::find_if(running_.begin(), running_.end(), [&](const Sequence& s) { return s.req.id == id; });
  if (running == running_.end() || running->done) return false;
  // Its k/v are kept under its session as a finished request's are: a retry
  // (the gateway's after a 504) reuses them; LRU eviction frees them else.
  finish(*running, FinishReason::kCancelled);
  running_.erase(running);  // not a donor of k/v from here on
  return true;
}

std::vector<GenerationResult> RolloutEngine::step() {
  if (!failed_.empty()) throw Error(failed_ + " (the engine stopped at this error)");
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_batch &&
         admit(waiting_.front()))
    waiting_.pop_front();
  FORGE_CHECK(!running_.empty() || waiting_.empty(),
              "a waiting request could not be admitted into an empty KV cache");
  for (Sequence& s : running_)
    if (s.find_donor) {
      s.find_donor = false;
      copy_shared_prefix(s);
    }

  // The ragged batch, in admission order.
  std::vector<Sequence*> batch;
  std::vector<int> counts;
  std::vector<uint8_t> samples;
  int budget = config_.prefill_chunk;
  for (Sequence& s : running_) {
    const int remaining = static_cast<int>(s.tokens.size()) - s.computed;
    int n = remaining;  // a decode: the one sampled token
    if (s.res.tokens.empty()) {
      if (config_.share_prefixes && computed_by_earlier(s, batch, counts)) {
        s.find_donor = true;
        continue;
      }
      n = std::min(remaining, budget);
      budget -= n;
      s.res.prefill_computed += n;
      stats_.prefill_computed += n;
    }
    if (n == 0) continue;
    s.begin_kv(version_);
    batch.push_back(&s);
    counts.push_back(n);
    samples.push_back(n == remaining);
  }

  if (!batch.empty()) {
    Backend& B = model_.backend();
    forward(batch, counts, samples);
    ++stats_.steps;
    const int V = model_.config().vocab;
    const float* logits = logits_.data();  // read in place where the backend's memory is the host's
    const float* lse = lse_.data();
    if (!B.host_memory()) {
      logits_host_.resize(logits_.size());
      lse_host_.resize(lse_.size());
      B.to_host(logits_host_.data(), logits_.data(), logits_.size() * sizeof(float));
      B.to_host(lse_host_.data(), lse_.data(), lse_.size() * sizeof(float));
      logits = logits_host_.data();
      lse = lse_host_.data();
    }
    // Draws first, one row per thread (each row's draw depends only on its
    // logits and its request's seed), then the bookkeeping in batch order.
    std::vector<Sequence*> sampled;
    for (size_t i = 0; i < batch.size(); ++i)
      if (samples[i]) sampled.push_back(batch[i]);
    const int R = static_cast<int>(sampled.size());
    std::vector<int32_t> drawn(R);
    std::vector<double> log_kept(R);
    std::vector<uint8_t> finite(R);
#pragma omp parallel for schedule(dynamic, 1) if (R > 1)
    for (int r = 0; r < R; ++r) {
      const float* z = logits + static_cast<size_t>(r) * V;
      // A NaN would make the top-k / top-p sort's order invalid (undefined
      // behaviour): rows are checked before any draw.
      finite[r] = std::isfinite(lse[r]) && std::none_of(z, z + V, [](float x) { return std::isnan(x); });
      if (!finite[r]) continue;
      const SamplingParams& sp = sampled[r]->req.sampling;
      const int gen = static_cast<int>(sampled[r]->res.tokens.size());
      drawn[r] = sample_token(z, V, sp, counter_uniform(sp.seed, gen), &log_kept[r]);
    }
    for (int r = 0; r < R; ++r)
      if (!finite[r]) {
        failed_ = "rollout engine: the logits of request " + std::to_string(sampled[r]->req.id) +
                  " at generated token " + std::to_string(sampled[r]->res.tokens.size()) +
                  " are not finite (NaN or inf): the weights of version " + std::to_string(version_) +
                  " hold non-finite values";
        throw Error(failed_);
      }
    int r = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      Sequence& s = *batch[i];
      s.computed += counts[i];
      stats_.forward_tokens += counts[i];
      if (!samples[i]) continue;
      const SamplingParams& sp = s.req.sampling;
      const float* z = logits + static_cast<size_t>(r) * V;
      const int gen = static_cast<int>(s.res.tokens.size());
      const int32_t tok = drawn[r];
      s.tokens.push_back(tok);
      s.res.tokens.push_back(tok);
      s.res.logprobs.push_back(std::min(0.0f, static_cast<float>(z[tok] - lse[r] - log_kept[r])));
      s.res.versions.push_back(s.first_version);
      ++stats_.generated;
      ++r;
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      if (std::find(sp.stop_tokens.begin(), sp.stop_tokens.end(), tok) != sp.stop_tokens.end())
        finish(s, FinishReason::kStop);
      else if (gen + 1 >= sp.max_new_tokens)
        finish(s, FinishReason::kLength);
      else if (len >= config_.max_seq_len)
        finish(s, FinishReason::kContextLimit);
      else if (len - 1 >= static_cast<int64_t>(s.blocks.size()) * config_.block_size)
        finish(s, FinishReason::kCacheLimit);
    }
  }
  std::erase_if(running_, [](const Sequence& s) { return s.done; });

  std::vector<GenerationResult> out = std::move(done_);
  done_.clear();
  for (const GenerationResult& g : out) {
    ++stats_.finished;
    if (g.finish == FinishReason::kError) ++stats_.errors;
    if (g.finish == FinishReason::kCancelled) ++stats_.cancelled;
  }
  return out;
}

std::vector<GenerationResult> RolloutEngine::run_until_done() {
  std::vector<GenerationResult> all;
  while (!idle()) {
    std::vector<GenerationResult> r = step();
    all.insert(all.end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
  }
  return all;
}

namespace {

// Paged attention over the KV cache: each layer first writes the batch's
// k/v rows into their cache slots, then every query row attends to
// positions 0..position of its own sequence there.
class CacheAttention final : public BlockAttention {
 public:
  CacheAttention(Backend& backend, const ModelConfig& c, PagedKvCache& cache) : B_(backend), c_(c), cache_(cache) {}
  int T = 0, block_size = 0, max_len = 0;
  const int32_t *slot = nullptr, *position = nullptr, *block_table = nullptr, *table_begin = nullptr;

  void forward(int layer, const float* qkv, int ld, float* out, float*, const AttentionBf16& bf16) override {
    FORGE_CHECK(bf16.qkv == nullptr && bf16.out == nullptr, "generation keeps no bf16 q|k|v or output");
    const int hd = c_.head_dim(), Hkv = c_.n_kv_heads;
    KvCacheWriteArgs w;
    w.T = T;
    w.row_dim = Hkv * hd;
    w.k = qkv + c_.n_heads * hd;
    w.v = w.k + Hkv * hd;
    w.ld = ld;
    w.slot = slot;
    w.k_cache = cache_.k(layer);
    w.v_cache = cache_.v(layer);
    B_.kv_cache_write(w);
    PagedAttentionArgs at;
    at.T = T;
    at.n_heads = c_.n_heads;
    at.n_kv_heads = Hkv;
    at.head_dim = hd;
    at.block_size = block_size;
    at.q = qkv;
    at.ld_q = ld;
    at.k_cache = cache_.k(layer);
    at.v_cache = cache_.v(layer);
    at.max_len = max_len;
    at.position = position;
    at.block_table = block_table;
    at.table_begin = table_begin;
    at.out = out;
    B_.paged_attention_fwd(at);
  }

 private:
  Backend& B_;
  const ModelConfig& c_;
  PagedKvCache& cache_;
};

}  // namespace

void RolloutEngine::forward(const std::vector<Sequence*>& batch, const std::vector<int>& counts,
                            const std::vector<uint8_t>& samples) {
  Backend& B = model_.backend();
  const ModelConfig& c = model_.config();
  const int bs = config_.block_size;

  // Rows: each sequence's uncomputed tokens at their positions and cache slots.
  std::vector<int32_t> token, position, slot, table_begin, table, rows;
  int max_len = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& s = *batch[i];
    const int32_t tb = static_cast<int32_t>(table.size());
    table.insert(table.end(), s.blocks.begin(), s.blocks.end());
    for (int p = s.computed; p < s.computed + counts[i]; ++p) {
      token.push_back(s.tokens[p]);
      position.push_back(p);
      slot.push_back(s.blocks[p / bs] * bs + p % bs);
      table_begin.push_back(tb);
      max_len = std::max(max_len, p + 1);
    }
    if (samples[i]) rows.push_back(static_cast<int32_t>(token.size()) - 1);
  }
  const int T = static_cast<int>(token.size()), R = static_cast<int>(rows.size());
  token_.upload(B, token);
  position_.upload(B, position);
  slot_.upload(B, slot);
  table_begin_.upload(B, table_begin);
  table_.upload(B, table);
  rows_.upload(B, rows);

  CacheAttention attention(B, c, cache_);
  attention.T = T;
  attention.block_size = bs;
  attention.max_len = max_len;
  attention.slot = slot_.data();
  attention.position = position_.data();
  attention.block_table = table_.data();
  attention.table_begin = table_begin_.data();
  const float* P = std::as_const(model_).params();  // read only: the bf16 copy stays current
  model_.transformer().forward(P, model_.params_bf16(), token_.data(), position_.data(), T, rows_.data(), R, attention,
                               act_);

  // The FP32 head on the sampling rows, logits kept for the sampler; one call
  // per run of rows with the same temperature (usually one run).
  logits_.ensure(B, static_cast<size_t>(R) * c.vocab);
  lse_.ensure(B, R);
  std::vector<float> inv_temperature;
  for (size_t i = 0; i < batch.size(); ++i)
    if (samples[i]) {
      const float t = batch[i]->req.sampling.temperature;
      inv_temperature.push_back(t > 0.0f ? 1.0f / t : 1.0f);
    }
  for (int r0 = 0, r1 = 0; r0 < R; r0 = r1) {
    while (r1 < R && inv_temperature[r1] == inv_temperature[r0]) ++r1;
    HeadArgs h;
    h.R = r1 - r0;
    h.d = c.d_model;
    h.V = c.vocab;
    h.hidden = act_.head_hidden() + static_cast<size_t>(r0) * c.d_model;
    h.weight = model_.transformer().head_weight(P);
    h.inv_temperature = inv_temperature[r0];
    h.lse = lse_.data() + r0;
    h.logits = logits_.data() + static_cast<size_t>(r0) * c.vocab;
    B.head_fwd(h);
  }
}

}  // namespace forge
