// The compute backend interface. The policy model, the trainer and the rollout
// engine call only these operations, on buffers the backend allocated (host
// memory for the CPU backend, device memory for CUDA). Row-major throughout.
// Backends are created by name (backend_registry.hpp); their implementations
// (backend/cpu, backend/cuda) are included by nothing outside this folder.
//
// Tree attention (docs/architecture.md, "Prefix tree"): tokens of a packed bin in
// DFS pre-order; query i sees key j iff j <= i < subtree_end[j]. Scale
// 1/sqrt(head_dim); grouped-query heads: query head h reads kv head h / group.
//
// FP32 head: for hidden rows H[R, d] and head weights W[V, d],
//   z = (H W^T) * inv_temperature,  lse_r = log sum_v exp z_rv,
//   logprob_e = z[row_e, target_e] - lse[row_e],  entropy_r = lse_r - sum_v p_rv z_rv,
// computed in FP32, chunked over V so that [R, V] is never stored (unless the
// caller asks for the logits, as the sampler does).
//
// Policy loss (the math in algo/policy_loss.hpp): per sample, its masks and
// the per-token coefficients before the batch denominator, plus the sums the
// statistics need; the caller adds the sums over learners and scales.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace forge {

struct TreeAttentionArgs {
  int T = 0;            // tokens in the bin
  int n_heads = 0;      // query heads
  int n_kv_heads = 0;   // key/value heads (n_heads % n_kv_heads == 0)
  int head_dim = 0;
  const float* q = nullptr;  // row t at q + t * ld_qkv, head h at + h * head_dim
  const float* k = nullptr;  // row t at k + t * ld_qkv
  const float* v = nullptr;
  int ld_qkv = 0;
  const int32_t* subtree_end = nullptr;  // [T]
  float* out = nullptr;  // [T, n_heads * head_dim]
  float* lse = nullptr;  // [n_heads, T] (forward output, backward input)
  // Training on a backend that keeps activations as bf16
  // (activation_value_bytes() == 2); null otherwise (other backends refuse
  // it). Q, K and V as bf16 bit patterns, packed [T][(n_heads + 2 n_kv_heads)
  // * head_dim] (row t: its query heads, key heads, value heads): the forward
  // writes it (rounded to nearest even, as pack_bf16 of q|k|v), the backward
  // reads Q, K and V from it and not from q, k, v. The transformer keeps it
  // as the layer's saved q|k|v, so neither pass rounds them again.
  uint16_t* qkv_bf16 = nullptr;
  // Training on a backend with bf16 GEMM operands (Backend::bf16_operands()):
  // the output as bf16 ([T, n_heads * head_dim], the layer's kept copy),
  // which the forward writes (rounded to nearest even, as pack_bf16 of out)
  // instead of out and the backward reads for D_i = dO . O instead of out;
  // out may then be null. Null otherwise (other backends refuse it).
  uint16_t* out_bf16 = nullptr;
  // Forward only, with qkv_bf16: it already holds Q, K and V rounded (the
  // caller's Backend::rope_bf16 wrote them), and the forward reads them
  // there, not from q, k, v (which may then be null).
  bool qkv_bf16_given = false;
};

struct TreeAttentionGrads {
  const float* dout = nullptr;  // [T, n_heads * head_dim]
  // Where dout is null: dO as bf16 ([T, n_heads * head_dim], packed), which
  // the backward reads as it is (a backend that keeps activations as bf16,
  // with qkv_bf16; other backends refuse it). The bf16 mode's dO, as the
  // o-projection's backward writes it (Backend::linear_backward_bf16, dx16).
  const uint16_t* dout_bf16 = nullptr;
  float* dq = nullptr;          // same layout as q (ld_qkv); overwritten
  float* dk = nullptr;          // overwritten
  float* dv = nullptr;          // overwritten
};

// Q, K and V fused in one buffer, the transformer's layout: row t at
// qkv + t * ld holds the n_heads query heads, then the n_kv_heads key heads,
// then the value heads (ld >= (n_heads + 2 n_kv_heads) head_dim); dqkv, the
// gradients, has the same layout.
inline TreeAttentionArgs fused_tree_attention_args(int T, int n_heads, int n_kv_heads, int head_dim,
                                                   const float* qkv, int ld, const int32_t* subtree_end,
                                                   float* out, float* lse) {
  TreeAttentionArgs a;
  a.T = T;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.q = qkv;
  a.k = qkv + n_heads * head_dim;
  a.v = a.k + n_kv_heads * head_dim;
  a.ld_qkv = ld;
  a.subtree_end = subtree_end;
  a.out = out;
  a.lse = lse;
  return a;
}
inline TreeAttentionGrads fused_tree_attention_grads(int n_heads, int n_kv_heads, int head_dim, const float* dout,
                                                     float* dqkv, const uint16_t* dout_bf16 = nullptr) {
  return {.dout = dout,
          .dout_bf16 = dout_bf16,
          .dq = dqkv,
          .dk = dqkv + n_heads * head_dim,
          .dv = dqkv + (n_heads + n_kv_heads) * head_dim};
}

struct HeadArgs {
  int R = 0, d = 0, V = 0;
  const float* hidden = nullptr;  // [R, d]
  const float* weight = nullptr;  // [V, d]
  float inv_temperature = 1.0f;
  // Loss entries grouped by row: entries of row r are [row_begin[r], row_begin[r+1]).
  int E = 0;
  const int32_t* row_begin = nullptr;  // [R + 1]
  const int32_t* target = nullptr;     // [E]
  float* logprob = nullptr;            // [E] out
  float* lse = nullptr;                // [R] out (needed by backward)
  float* entropy = nullptr;            // [R] out, optional
  float* logits = nullptr;             // [R, V] out, optional (sampling)
  int vocab_chunk = 4096;
};

struct HeadGrads {
  const float* dlogprob = nullptr;  // [E]: dLoss / dlogprob_e
  float* dhidden = nullptr;         // [R, d] overwritten
  float* dweight = nullptr;         // [V, d] accumulated
};

struct AdamWParams {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-15f, weight_decay = 0;
  int step = 1;             // 1-based, for bias correction
  float grad_scale = 1.0f;  // multiplies the gradient (clipping)
};

// Paged KV cache (the rollout engine). The K (and V) cache of one layer is a
// pool of slots, row s at value s * n_kv_heads * head_dim of k_cache; a value
// is Backend::kv_cache_value_bytes() wide (FP32, or bf16 in the CUDA
// backend's bf16 mode), so the cache is untyped memory here. Slots come in
// blocks of block_size, slot = block * block_size + offset. A sequence's
// block table lists its blocks in position order: its position p lives in
// slot table[p / block_size] * block_size + p % block_size.
struct KvCacheWriteArgs {
  int T = 0;
  int row_dim = 0;                // n_kv_heads * head_dim
  const float* k = nullptr;       // row t at k + t * ld
  const float* v = nullptr;       // row t at v + t * ld
  int ld = 0;
  const int32_t* slot = nullptr;  // [T] destination slot of row t
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

// Query row t attends to positions 0..position[t] of its own sequence in the
// cache (causal), FP32 with an online softmax, scale 1/sqrt(head_dim);
// query head h reads kv head h / (n_heads / n_kv_heads). max_len: an upper
// bound of position[t] + 1 over the rows, for backends that split long
// contexts across blocks (the CUDA split-K decode); 0 = not known (one split).
struct PagedAttentionArgs {
  int T = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  const float* q = nullptr;  // row t at q + t * ld_q, head h at + h * head_dim
  int ld_q = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int max_len = 0;
  const int32_t* position = nullptr;     // [T]
  const int32_t* block_table = nullptr;  // the tables of all sequences, concatenated
  const int32_t* table_begin = nullptr;  // [T] start of row t's sequence table
  float* out = nullptr;                  // [T, n_heads * head_dim]
};

// cispo; ppo and dapo (clipped, token mean); grpo (clipped, sequence mean).
enum class PolicyObjective : int32_t { cispo, clipped_token_mean, clipped_sequence_mean };
enum class ImportanceMask : int32_t { none, token, sequence };

// Generated tokens packed flat: sample s owns tokens [sample_begin[s], sample_begin[s+1]).
// coef[t] = w_t times the batch denominator (kept tokens N, or for the sequence
// mean kept samples S; the sequence mean's 1/|o_s| is applied here); 0 where masked.
struct PolicyLossArgs {
  PolicyObjective objective = PolicyObjective::cispo;
  ImportanceMask mask = ImportanceMask::none;
  double clip_low = 0, clip_high = 0;  // r^ = clip(r, clip_low, clip_high)
  double is_low = 0, is_high = 0;      // kept iff is_low <= ratio <= is_high
  int samples = 0;
  const int32_t* sample_begin = nullptr;       // [samples + 1]
  const float* advantage = nullptr;            // [samples]
  const float* logprob = nullptr;              // [tokens] current lp
  const float* behaviour_logprob = nullptr;    // [tokens] mu
  float* coef = nullptr;                       // [tokens] out
};

// Sums over this backend's samples (FP64), returned to the host.
struct PolicyLossSums {
  double tokens = 0, kept_tokens = 0, kept_samples = 0, clipped_tokens = 0;
  double objective = 0;  // sum of the kept terms, times the batch denominator
  double ratio = 0, kl = 0, logprob_mismatch = 0;  // sums of r, r - 1 - log r, |lp - mu|
  double max_ratio = 0;
};

// Compute precision of a backend. fp32: FP32 throughout. bf16 (cuda only):
// GEMM inputs, the tree-attention Q/K/V and the head's hidden states are
// rounded to bf16 (round to nearest even), and in training the activation
// gradients a GEMM hands to RMSNorm, SwiGLU and the attention
// (model/transformer.hpp); accumulation, the head weights,
// softmax statistics, master weights and optimizer state stay FP32
// (docs/cuda.md, "Precision").
enum class Precision { kFp32, kBf16 };

class DeviceCollectives;
struct CollectiveBootstrap;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether alloc() returns host memory that the host may read directly.
  virtual bool host_memory() const { return false; }
  // Returns when every operation issued so far has finished (a device
  // backend's queue drained; the CPU backend's operations finish before they
  // return).
  virtual void synchronize() {}

  // Memory. Pointers from alloc belong to the backend's address space.
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // The most memory the backend has held at once so far: its alloc'd
  // buffers and its own scratch (0 where not measured: the CPU backend).
  virtual size_t peak_device_bytes() const { return 0; }
  // Frees the scratch the operations keep between calls for the calling
  // thread (so that a step's buffers do not stay held through the
  // generation after it); returns the bytes freed. The next call re-grows it.
  virtual size_t release_scratch() { return 0; }
  // The largest head dimension the backend's training attention takes (0:
  // any); a model past it is refused before training (require_trainable_heads).
  virtual int max_trained_head_dim() const { return 0; }
  // The largest head dimension any of its attention takes (generation's
  // paged attention too; 0: any): a model past it is refused at
  // construction (PolicyModel).
  virtual int max_head_dim() const { return 0; }
  virtual void to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Page-locks host memory [p, p + bytes), which to_host and to_device then
  // move by DMA rather than through the driver's pageable staging (a device
  // backend; the memory must stay allocated until unpin_host_memory(p)).
  // False where it was not pinned (it stays pageable; transfers work as
  // before): host backends, or a refusal, which the backend reports.
  // Callers use HostPins (backend/host_pins.hpp).
  virtual bool pin_host_memory(void* /*p*/, size_t /*bytes*/) { return false; }
  virtual void unpin_host_memory(void* /*p*/) {}
  virtual void fill(float* x, float value, size_t n) = 0;

  // How a training pass keeps its activations for the backward
  // (model/transformer.hpp): sizeof(float), or 2 where it packs them to bf16
  // (the CUDA backend's bf16 mode). pack_bf16: dst[i] = bf16(src[i]) as bit
  // patterns, rounded to nearest even; unpack_bf16: dst[i] = src[i] widened.
  virtual size_t activation_value_bytes() const { return sizeof(float); }
  virtual void pack_bf16(const float* src, uint16_t* dst, size_t n) = 0;
  virtual void unpack_bf16(const uint16_t* src, float* dst, size_t n) = 0;
  // True where every GEMM rounds both operands to bf16 and the backend takes
  // them made as bf16 ahead (the CUDA backend's bf16 mode, unless
  // FORGE_CUDA_BF16_WORKING=fp32; false never changes a result). There a
  // training pass stores its working activations whose only consumers are
  // GEMMs or the bf16 attention (the normalised h, silu(g) u, q|k|v after
  // RoPE, the attention output; the backward's dg|du and dq|dk|dv) as bf16
  // where they are made, the model keeps a bf16 copy of its weights
  // (PolicyModel::params_bf16), and the consumers read them as they are:
  // the same values they would have rounded, half the bytes, no rounding
  // pass (model/transformer.hpp).
  virtual bool bf16_operands() const { return false; }

  // C = alpha op(A) op(B) + beta C; op(A) is M x K, op(B) is K x N.
  virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                    const float* A, int lda, const float* B, int ldb, float beta,
                    float* C, int ldc) = 0;
  // A linear layer's backward, for y = x W^T with x [T, in] (row stride
  // ld_x), W [out, in] and dy [T, out] (row stride ld_dy):
  //   dx = dy W      [T, in], row stride ld_dx, overwritten
  //   dW += dy^T x   [out, in]
  // One operation so that a backend can prepare dy once for both products
  // (the CUDA backend's bf16 mode rounds it to bf16 once, not twice); the
  // results are those of the two gemm calls of this default, bit for bit.
  virtual void linear_backward(int T, int in, int out, const float* dy, int ld_dy, const float* W,
                               const float* x, int ld_x, float* dx, int ld_dx, float* dW) {
    gemm(false, false, T, in, out, 1.0f, dy, ld_dy, W, in, 0.0f, dx, ld_dx);
    gemm(true, false, out, in, T, 1.0f, dy, ld_dy, x, ld_x, 1.0f, dW, in);
  }
  // The linear layer with operands already bf16 (bf16_operands()): x [T, in]
  // as FP32 or (x16, where not null) packed bf16 rows; W [out, in] as FP32
  // or (W16, where not null) bf16; in the backward dy [T, out] as FP32 (row
  // stride ld_dy) or (dy16, where not null) packed bf16 rows.
  // linear_fwd_bf16: y = x W^T + beta y (row stride ld_y);
  // linear_backward_bf16: linear_backward on the widened values, dx written
  // in FP32 (row stride ld_dx) or, where dx is null, as bf16 (dx16, packed
  // [T, in]: pack_bf16 of the FP32 dx; for a consumer that reads it as
  // bf16, the activation gradients of the bf16 mode). The defaults widen
  // into scratch; the CUDA backend hands bf16 operands to the GEMM as they
  // are, rounds only the FP32 ones and has the GEMM write dx16: bit for bit
  // the same, but that on a GPU cuBLAS may sum a bf16 dx16 in another order
  // (another kernel) than an FP32 dx, and a value may round to its
  // neighbouring bf16.
  virtual void linear_fwd_bf16(int T, int in, int out, const float* x, const uint16_t* x16, const float* W,
                               const uint16_t* W16, float beta, float* y, int ld_y) {
    const Widened xw(*this, x16, size_t(T) * in), ww(*this, W16, size_t(out) * in);
    gemm(false, true, T, out, in, 1.0f, x16 ? xw.data : x, in, W16 ? ww.data : W, in, beta, y, ld_y);
  }
  virtual void linear_backward_bf16(int T, int in, int out, const float* dy, int ld_dy, const uint16_t* dy16,
                                    const float* W, const uint16_t* W16, const uint16_t* x16, float* dx,
                                    uint16_t* dx16, int ld_dx, float* dW) {
    const Widened x(*this, x16, size_t(T) * in), g(*this, dy16, size_t(T) * out), w(*this, W16, size_t(out) * in);
    const Result r(*this, dx, dx16, size_t(T) * in);
    linear_backward(T, in, out, dy16 ? g.data : dy, dy16 ? out : ld_dy, W16 ? w.data : W, x.data, in, r.data,
                    dx ? ld_dx : in, dW);
  }
  virtual void add_inplace(float* y, const float* x, size_t n) = 0;  // y += x
  virtual void scale(float* x, float s, size_t n) = 0;
  virtual double sum_squares(const float* x, size_t n) = 0;

  virtual void embedding_fwd(const int32_t* tokens, const float* table, float* out, int T,
                             int d) = 0;
  // dtable[tokens[t]] += dout[t]
  virtual void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T,
                             int d) = 0;
  // y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)
  virtual void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                           float eps) = 0;
  // dx += ..., dw += ...
  virtual void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                           float* dx, float* dw, int T, int d) = 0;
  // Rotates pairs (2i, 2i+1) of n_heads heads per row, head h at x + t*ld + h*head_dim,
  // by angle pos[t] * inv_freq[i] (inv_freq: host memory, head_dim / 2 values,
  // model/model_config.hpp's rope_inv_freq); inverse = true rotates back (the backward).
  virtual void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                    const double* inv_freq, bool inverse) = 0;
  // rope into bf16, for bf16_operands() (q|k|v and their gradients, whose
  // next readers round them): y16 [T, ld], packed, = pack_bf16 of x's rows
  // (ld floats each: the n_heads heads rotated, the columns after them as
  // they are) after rope(x, ...); x is not changed. The default rotates a
  // scratch copy; the CUDA backend does it in one pass, bit for bit the same.
  virtual void rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                         const double* inv_freq, bool inverse, uint16_t* y16) {
    const Result r(*this, nullptr, y16, size_t(T) * ld);
    copy(r.data, x, size_t(T) * ld * sizeof(float));
    rope(r.data, pos, T, n_heads, head_dim, ld, inv_freq, inverse);
  }
  // gu row = [gate (F) | up (F)]; out = silu(gate) * up
  virtual void swiglu_fwd(const float* gu, float* out, int T, int F) = 0;
  virtual void swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) = 0;
  // RMSNorm and SwiGLU with their input kept as bf16 for the backward
  // (training with bf16 activations): *_fwd_keep is *_fwd plus
  // x16 = pack_bf16(x) (gu16 for SwiGLU); the _bf16 forms are *_fwd and
  // *_bwd on x16 widened. Each writes its result either in FP32 (y, out,
  // dgu) or, where that pointer is null, as bf16 (y16, out16, dgu16:
  // pack_bf16 of the FP32 result; with bf16_operands(), for a GEMM). The
  // backward forms read their incoming gradient in FP32 (dy, dout) or,
  // where that pointer is null, as bf16 (dy16, dout16: packed [T, d] and
  // [T, F], widened; as linear_backward_bf16's dx16 writes it). The
  // defaults do exactly that in steps (through scratch copies); the CUDA
  // backend fuses each into one pass, bit for bit the same.
  virtual void rmsnorm_fwd_keep(const float* x, const float* w, float* y, uint16_t* y16, float* rstd, uint16_t* x16,
                                int T, int d, float eps) {
    const Result r(*this, y, y16, size_t(T) * d);
    rmsnorm_fwd(x, w, r.data, rstd, T, d, eps);
    pack_bf16(x, x16, size_t(T) * d);
  }
  virtual void rmsnorm_fwd_bf16(const uint16_t* x16, const float* w, float* y, uint16_t* y16, float* rstd, int T,
                                int d, float eps) {
    const Widened x(*this, x16, size_t(T) * d);
    const Result r(*this, y, y16, size_t(T) * d);
    rmsnorm_fwd(x.data, w, r.data, rstd, T, d, eps);
  }
  virtual void rmsnorm_bwd_bf16(const uint16_t* x16, const float* w, const float* rstd, const float* dy,
                                const uint16_t* dy16, float* dx, float* dw, int T, int d) {
    const Widened x(*this, x16, size_t(T) * d), g(*this, dy ? nullptr : dy16, size_t(T) * d);
    rmsnorm_bwd(x.data, w, rstd, dy ? dy : g.data, dx, dw, T, d);
  }
  virtual void swiglu_fwd_keep(const float* gu, float* out, uint16_t* out16, uint16_t* gu16, int T, int F) {
    const Result r(*this, out, out16, size_t(T) * F);
    swiglu_fwd(gu, r.data, T, F);
    pack_bf16(gu, gu16, size_t(T) * 2 * F);
  }
  virtual void swiglu_fwd_bf16(const uint16_t* gu16, float* out, uint16_t* out16, int T, int F) {
    const Widened gu(*this, gu16, size_t(T) * 2 * F);
    const Result r(*this, out, out16, size_t(T) * F);
    swiglu_fwd(gu.data, r.data, T, F);
  }
  virtual void swiglu_bwd_bf16(const uint16_t* gu16, const float* dout, const uint16_t* dout16, float* dgu,
                               uint16_t* dgu16, int T, int F) {
    const Widened gu(*this, gu16, size_t(T) * 2 * F), g(*this, dout ? nullptr : dout16, size_t(T) * F);
    const Result r(*this, dgu, dgu16, size_t(T) * 2 * F);
    swiglu_bwd(gu.data, dout ? dout : g.data, r.data, T, F);
  }

  virtual void tree_attention_fwd(const TreeAttentionArgs& a) = 0;
  virtual void tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) = 0;

  virtual void head_fwd(const HeadArgs& a) = 0;
  virtual void head_bwd(const HeadArgs& a, const HeadGrads& g) = 0;

  // dst[r] = src[rows[r]]; scatter: dst[rows[r]] += src[r]. The rows of a
  // scatter are distinct (the caller's contract: the head's rows are distinct
  // positions; Transformer::forward checks it in debug builds): kernels add
  // without atomics, so a repeated row would race.
  virtual void gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) = 0;
  virtual void scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R,
                                int d) = 0;

  virtual void adamw(float* param, const float* grad, float* m, float* v, size_t n,
                     const AdamWParams& p) = 0;

  // Paged KV cache: k_cache/v_cache[slot[t]] = k/v row t (rounded to the
  // cache's value type); then attention of query rows over their sequences'
  // cached positions. The cache's values are kv_cache_value_bytes() wide.
  virtual size_t kv_cache_value_bytes() const { return sizeof(float); }
  virtual void kv_cache_write(const KvCacheWriteArgs& a) = 0;
  virtual void paged_attention_fwd(const PagedAttentionArgs& a) = 0;

  // Writes a.coef; returns the sums (synchronizes).
  virtual PolicyLossSums policy_loss(const PolicyLossArgs& a) = 0;

  // Collectives over this backend's memory among the ranks of `peers`
  // (collectives.hpp), or nullptr when the memory is host memory that the
  // caller's own transport (MPI) reduces directly.
  virtual std::unique_ptr<DeviceCollectives> make_collectives(const CollectiveBootstrap& peers);

 private:
  // n bf16 values unpacked into backend scratch for the lifetime of the
  // object; nothing (data null) where src is null.
  struct Widened {
    Backend& b;
    float* data;
    Widened(Backend& backend, const uint16_t* src, size_t n)
        : b(backend), data(src ? static_cast<float*>(backend.alloc(n * sizeof(float))) : nullptr) {
      if (src) b.unpack_bf16(src, data, n);
    }
    ~Widened() {
      if (data) b.release(data);
    }
    Widened(const Widened&) = delete;
    Widened& operator=(const Widened&) = delete;
  };
  // Where an operation of n values writes its FP32 result: f32 where not
  // null, else backend scratch that the destructor packs into bf16 and frees.
  struct Result {
    Backend& b;
    uint16_t* bf16;
    size_t n;
    float* data;
    Result(Backend& backend, float* f32, uint16_t* to_bf16, size_t count)
        : b(backend), bf16(f32 ? nullptr : to_bf16), n(count),
          data(f32 ? f32 : static_cast<float*>(backend.alloc(count * sizeof(float)))) {}
    ~Result() {
      if (!bf16) return;
      b.pack_bf16(data, bf16, n);
      b.release(data);
    }
    Result(const Result&) = delete;
    Result& operator=(const Result&) = delete;
  };
};

}  // namespace forge
