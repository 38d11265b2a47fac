// Tree-masked attention on the CPU, blocked like FlashAttention.
//
// Forward, per (head, query block of BQ rows): stream over key blocks with an
// online softmax (running max m, running sum l, unnormalized output O), then
// out = O / l and lse = m + log l. The scores are computed transposed
// (S^T = K Q^T, a key a row), so that the softmax runs down the columns a
// vector of queries at a time. A key block is skipped when no key in it
// is visible to the query block: max(subtree_end) over the block <= q0.
// When every key of the block is an ancestor-or-self of every query (the
// block ends at or before q0 and min(subtree_end) >= q1), the mask is not
// evaluated. Otherwise only the 8-key groups that some query of the block
// sees (key j: j < q1 and subtree_end[j] > q0) enter the products, packed to
// the front: in agent bins (short turns off shared prefixes) a third of the
// groups in computed blocks is seen by no query. The kept sums are the full
// block's term for term, less exact zeros, so packing changes no result.
//
// Backward (recomputing P = exp(S - lse)), per (kv head, key block):
//   dV_j += sum_i P_ij dO_i ;  dP_ij = dO_i . V_j ;  dS_ij = P_ij (dP_ij - D_i)
//   dK_j += scale sum_i dS_ij Q_i ;  dQ_i += scale sum_j dS_ij K_j
// with D_i = dO_i . O_i. Query blocks visited for key block [k0, k1) are those
// in [k0, max subtree_end), with the key groups each one sees packed as in
// the forward (their scaled queries and dO read from per-head [T][D] copies
// made once per call); dQ goes to per-thread buffers summed at the end,
// so no atomics are needed. Kernels are compiled for head dimensions 16, 32,
// 64 and 128 (accumulators in registers) with a generic fallback.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"

#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"

namespace forge::FORGE_CPU_NS {
namespace {

constexpr int kBQ = 64;
constexpr int kBK = 64;

struct KeyBlockBounds {
  std::vector<int32_t> max_end, min_end;
};

KeyBlockBounds key_block_bounds(const int32_t* subtree_end, int T) {
  const int nkb = (T + kBK - 1) / kBK;
  KeyBlockBounds b;
  b.max_end.resize(nkb);
  b.min_end.resize(nkb);
  for (int kb = 0; kb < nkb; ++kb) {
    const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK);
    int32_t mx = 0, mn = T;
    for (int j = k0; j < k1; ++j) {
      mx = std::max(mx, subtree_end[j]);
      mn = std::min(mn, subtree_end[j]);
    }
    b.max_end[kb] = mx;
    b.min_end[kb] = mn;
  }
  return b;
}

// Every product of the kernels is one form, a few output rows of width W at
// a time held in registers:
//   C[r][0:W) = c_r C[r][0:W) + sum_{k<n} a(r, k) X[k][0:W),  a(r, k) = A[r sa_r + k sa_k]
// with c_r = 0 (overwrite), 1, or corr[r] (the online softmax's rescale).
// Scores (A = Q rows, X = K^T rows), P V and dS K (A = a score row), and
// P^T dO, dS^T Q (A = a score column: sa_r = 1, sa_k = kBK). The columns go
// in panels of PW and the rows in blocks of R, R x PW / kLanes accumulators
// within the variant's kAccumulators (vec_math.hpp), so that each load of X
// feeds R FMAs (at least 3): measured with bench_cpu_attention.
constexpr int largest_divisor_at_most(int n, int cap) {
  int d = std::max(1, std::min(n, cap));
  while (n % d != 0) --d;
  return d;
}

template <int W>
struct Blocking {
  static_assert(W % kLanes == 0, "compiled widths are multiples of the vector");
  static constexpr int kVectors = W / kLanes;
  static constexpr int kPanelVectors = largest_divisor_at_most(kVectors, kAccumulators / 3);
  static constexpr int PW = kPanelVectors * kLanes;
  static constexpr int R = std::max(1, std::min(8, kAccumulators / kPanelVectors));
};

template <int PW, int R>
inline void rows_block(float* C, int ldc, const float* A, int sa_r, int sa_k, const float* X, int ldx, int n,
                       bool overwrite, const float* corr) {
  constexpr int kV = PW / kLanes;
  vf acc[R][kV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const vf c = bcastv(corr ? corr[r] : 1.0f);
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) acc[r][v] = overwrite ? vf{} : loadv(C + r * ldc + v * kLanes) * c;
  }
  for (int k = 0; k < n; ++k) {
    const float* x = X + k * ldx;
    const float* a = A + k * sa_k;
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) {
      const vf xv = loadv(x + v * kLanes);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][v] += bcastv(a[r * sa_r]) * xv;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < kV; ++v) storev(C + r * ldc + v * kLanes, acc[r][v]);
}

// The product above for output rows [0, rows); W is the compiled width
// (a multiple of kLanes) or 0 (generic: the runtime width w, plain loops).
template <int W>
inline void rows_times(float* C, int ldc, const float* A, int sa_r, int sa_k, const float* X, int ldx, int n,
                       int rows, bool overwrite, const float* corr, int w) {
  if constexpr (W > 0) {
    using B = Blocking<W>;
    for (int p = 0; p < W; p += B::PW) {
      int r = 0;
      for (; r + B::R <= rows; r += B::R)
        rows_block<B::PW, B::R>(C + r * ldc + p, ldc, A + r * sa_r, sa_r, sa_k, X + p, ldx, n, overwrite,
                                corr ? corr + r : nullptr);
      for (; r < rows; ++r)
        rows_block<B::PW, 1>(C + r * ldc + p, ldc, A + r * sa_r, sa_r, sa_k, X + p, ldx, n, overwrite,
                             corr ? corr + r : nullptr);
    }
  } else {
    for (int r = 0; r < rows; ++r) {
      float* c = C + r * ldc;
      const float f = overwrite ? 0.0f : corr ? corr[r] : 1.0f;
      for (int d = 0; d < w; ++d) c[d] = overwrite ? 0.0f : c[d] * f;
      for (int k = 0; k < n; ++k) {
        const float ak = A[r * sa_r + k * sa_k];
        for (int d = 0; d < w; ++d) c[d] += ak * X[k * ldx + d];
      }
    }
  }
}

bool block_fully_visible(const KeyBlockBounds& b, int kb, int k1, int nk, int q0, int q1) {
  return nk == kBK && k1 - 1 <= q0 && b.min_end[kb] >= q1;
}

// The 8-key groups of a key block that some query of the query block sees.
// Key j is seen by a query of [q0, q1) iff j < q1 and subtree_end[j] > q0
// (its subtree [j, subtree_end[j]) is contiguous and holds j). The products
// run over the kept groups only, packed to the front of the block in their
// order: a group nobody sees has scores -inf and P and dS exactly 0, so every
// kept sum is the full block's sum term for term, less exact zeros.
struct KeyGroups {
  static constexpr int kMax = kBK / 8;
  int n = 0;                // groups kept
  int index[kMax] = {};     // their group numbers in the block, ascending
  bool masked = true;       // false: every query sees every key (no mask to apply)
  bool all() const { return n == kMax; }
  int keys() const { return 8 * n; }  // packed width (past nk: masked, zero k and v)
  // Keys the products over keys run through: the block's nk when nothing
  // was packed, else the packed width.
  int product_keys(int nk) const { return all() ? nk : keys(); }
};

// The groups of key block kb ([k1 - nk, k1)) that queries [q0, q1) see.
KeyGroups key_groups(const KeyBlockBounds& b, const int32_t* se, int kb, int k1, int nk, int q0, int q1) {
  KeyGroups g;
  g.masked = !block_fully_visible(b, kb, k1, nk, q0, q1);
  const int k0 = k1 - nk;
  for (int i = 0; i < KeyGroups::kMax; ++i) {
    bool seen = !g.masked;
    for (int j = 8 * i; j < std::min(nk, 8 * i + 8) && !seen; ++j) seen = k0 + j < q1 && se[k0 + j] > q0;
    if (seen) g.index[g.n++] = i;
  }
  return g;
}

// S[i][0:w) = sum_d A[i][d] Bt[d][0:w) for i < nq (scores of a block's first
// w packed keys), at the narrowest compiled width (a multiple of kLanes) >= w.
template <int DC, int W = kBK>
inline void block_scores(const float* A, const float* Bt, int nq, int D, float* S, int w) {
  if constexpr (W > kLanes) {
    if (w <= W - kLanes) return block_scores<DC, W - kLanes>(A, Bt, nq, D, S, w);
  }
  rows_times<W>(S, kBK, A, D, 1, Bt, kBK, DC ? DC : D, nq, true, nullptr, W);
}

// Sets S[i][c] = -inf where query q0+i may not see the key of packed column
// c < 8 g.n (group g.index[c / 8] of the block at k0; keys past nk: never
// seen): visible iff key <= q0+i < subtree_end[key].
inline void apply_tree_mask(float* S, int q0, int nq, int k0, int nk, const int32_t* se, const KeyGroups& g) {
  alignas(32) int32_t ends[kBK];  // subtree ends of the packed keys; 0 (seen by no query) past nk
  for (int c = 0; c < g.keys(); ++c) {
    const int j = 8 * g.index[c / 8] + c % 8;
    ends[c] = j < nk ? se[k0 + j] : 0;
  }
  const v8 ninf = bcast(-std::numeric_limits<float>::infinity());
  const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int i = 0; i < nq; ++i) {
    const int qi = q0 + i;
    float* s = S + i * kBK;
    for (int c = 0; c < g.keys(); c += 8) {
      const v8i key = lane + (k0 + 8 * g.index[c / 8]);
      const v8i end = *reinterpret_cast<const v8i*>(ends + c);
      const v8i visible = (key <= qi) & (end > qi);
      store8(s + c, visible ? load8(s + c) : ninf);
    }
  }
}

// The forward's scores are a transposed block, S^T[c][i] for packed key c
// and query i < kBQ, so that its softmax runs down the columns, a wide vector
// of queries at a time: no horizontal max or sum, no scalar exp per row.
// Sets S^T[c][i] = -inf where query q0+i may not see packed key c < 8 g.n
// (group g.index[c / 8] of the block at k0; keys past nk: never seen):
// visible iff key <= q0+i < subtree_end[key].
inline void apply_tree_mask_columns(float* St, int q0, int k0, int nk, const int32_t* se, const KeyGroups& g) {
  static_assert(kBQ % kWideLanes == 0, "query blocks are whole wide vectors");
  const vw ninf = bcastw(-std::numeric_limits<float>::infinity());
  vwi lane{};
  for (int l = 0; l < kWideLanes; ++l) lane[l] = l;
  for (int c = 0; c < g.keys(); ++c) {
    const int j = 8 * g.index[c / 8] + c % 8;
    const int32_t key = k0 + j, end = j < nk ? se[k0 + j] : 0;
    float* s = St + c * kBQ;
#pragma GCC unroll 8
    for (int i = 0; i < kBQ; i += kWideLanes) {
      const vwi qi = lane + (q0 + i);
      const vwi visible = (qi >= key) & (qi < end);
      storew(s + i, visible ? loadw(s + i) : ninf);
    }
  }
}

// Online softmax down the columns of S^T over its first w rows, per query i:
// m' = max(m, max_c s_ci), corr = e^{m - m'}, s_ci = e^{s_ci - m'},
// l' = l corr + sum_c s_ci (summed in row order: a packed block's sums are
// the full block's less exact zeros). A query that has seen nothing yet
// (m' = -inf) keeps corr = 1 and gets weights 0.
inline void online_softmax_columns(float* St, int w, float* m, float* l, float* corr) {
  const vw ninf = bcastw(-std::numeric_limits<float>::infinity()), zero{}, one = bcastw(1.0f);
#pragma GCC unroll 4
  for (int i = 0; i < kBQ; i += kWideLanes) {
    vw mx = loadw(m + i);
    for (int c = 0; c < w; ++c) {
      const vw x = loadw(St + c * kBQ + i);
      mx = mx > x ? mx : x;
    }
    const vwi unseen = mx == ninf;
    const vw shift = unseen ? zero : mx;  // e^{-inf - 0} = 0
    const vw cr = unseen ? one : expw(loadw(m + i) - mx);
    vw sum{};
    for (int c = 0; c < w; ++c) {
      float* s = St + c * kBQ + i;
      const vw e = expw(loadw(s) - shift);
      storew(s, e);
      sum += e;
    }
    storew(l + i, loadw(l + i) * cr + sum);
    storew(m + i, mx);
    storew(corr + i, cr);
  }
}

// Backward (rows i < nq, their first w columns, w a multiple of 8):
// P = e^{S - lse_i} in place, dS = P (dP - D_i) in place of dP.
inline void probs_and_score_grads(float* P, float* dS, int nq, int w, const float* lse, const float* di) {
  for (int i = 0; i < nq; ++i) {
    float* p = P + i * kBK;
    float* ds = dS + i * kBK;
    const vw vl = bcastw(lse[i]), vd = bcastw(di[i]);
    int j = 0;
    // not unrolled: in the SSE2 baseline 8 inlined exps on two-register
    // vectors spilled (backward 4% slower); AVX2 and AVX-512 time the same
#pragma GCC unroll 1
    for (; j + kWideLanes <= w; j += kWideLanes) {
      const vw pj = expw(loadw(p + j) - vl);
      storew(p + j, pj);
      storew(ds + j, pj * (loadw(ds + j) - vd));
    }
    if (j < w) {  // one step of 8
      const v8 pj = exp8(load8(p + j) - bcast(lse[i]));
      store8(p + j, pj);
      store8(ds + j, pj * (load8(ds + j) - bcast(di[i])));
    }
  }
}

// The kept groups' keys packed to the front: columns of a transposed block
// [D][kBK] (tr) and rows of a row block [kBK][D] (rows); either may be null.
inline void pack_key_groups(const KeyGroups& g, int D, const float* tr, float* tr_packed, const float* rows,
                            float* rows_packed) {
  for (int c = 0; c < g.n; ++c) {
    const int j = 8 * g.index[c];
    if (tr)
      for (int d = 0; d < D; ++d) std::copy(tr + d * kBK + j, tr + d * kBK + j + 8, tr_packed + d * kBK + 8 * c);
    if (rows) std::copy(rows + j * D, rows + (j + 8) * D, rows_packed + 8 * c * D);
  }
}

// Keys and values of every kv head as contiguous rows, [Hkv][nkb * kBK][D]
// each; rows past T are zero. Read in place, rows at the q|k|v row stride
// conflict in the L1 cache (D 128, GQA 8/2: 13% slower forward).
struct PackedKV {
  std::vector<float> k, v;
};

// Scratch kept per calling thread across calls (no page faults per step),
// freed by release_scratch(): the packed K/V of the forward, and the
// backward's D, per-thread dQ parts, scaled queries and dO.
struct AttentionScratch {
  PackedKV kv;
  std::vector<float> delta, dq_part, qs, dout;
};
thread_local AttentionScratch caller_scratch;

// dst[0:D) = src[0:D) by vector moves where D is compiled (DC > 0).
template <int DC>
inline void copy_row(const float* src, float* dst, int D) {
  if constexpr (DC > 0 && DC % kLanes == 0) {
#pragma GCC unroll 8
    for (int d = 0; d < DC; d += kLanes) storev(dst + d, loadv(src + d));
  } else {
    std::copy(src, src + D, dst);
  }
}

// Filled into a per-calling-thread buffer that keeps its capacity, so that
// steps after the first touch no fresh pages. Every element is written in
// the parallel loop (the rows past T as zeros), by vector moves: zeros
// first on the calling thread (the other threads waiting), then the rows
// copied by a memmove call each, took 15% of the train-step forward's perf
// samples.
template <int DC>
const PackedKV& pack_kv(const TreeAttentionArgs& a) {
  const int T = a.T, Hkv = a.n_kv_heads, nkb = (T + kBK - 1) / kBK, D = DC ? DC : a.head_dim;
  // A thread_local named inside the parallel region would be each worker's
  // own copy: the region uses the reference p to the caller's buffer.
  PackedKV& p = caller_scratch.kv;
  p.k.resize(static_cast<size_t>(Hkv) * nkb * kBK * D);
  p.v.resize(static_cast<size_t>(Hkv) * nkb * kBK * D);
#pragma omp parallel for collapse(2) schedule(static)
  for (int kvh = 0; kvh < Hkv; ++kvh)
    for (int kb = 0; kb < nkb; ++kb) {
      const int k0 = kb * kBK, nk = std::min(T, k0 + kBK) - k0;
      const size_t at = (static_cast<size_t>(kvh) * nkb * kBK + k0) * D;
      float* k = p.k.data() + at;
      float* v = p.v.data() + at;
      for (int j = 0; j < nk; ++j) {
        const size_t row = static_cast<size_t>(k0 + j) * a.ld_qkv + kvh * D;
        copy_row<DC>(a.k + row, k + j * D, D);
        copy_row<DC>(a.v + row, v + j * D, D);
      }
      std::fill(k + nk * D, k + kBK * D, 0.0f);
      std::fill(v + nk * D, v + kBK * D, 0.0f);
    }
  return p;
}

// The 8 x 8 block at src (row stride lds) transposed into dst (row stride
// ldd), times scale: three rounds of two-source shuffles (pairs of floats,
// of pairs, of quads), 24 in all, where element-wise stores took one
// extract and one store a float (7% of the forward's perf samples at D 32;
// the forward ran 2% faster for it).
[[gnu::always_inline]] inline void transpose8x8(const float* src, int lds, float* dst, int ldd, float scale) {
  v8 r[8], a[8], b[8];
  for (int k = 0; k < 8; ++k) r[k] = load8(src + k * lds);
  for (int k = 0; k < 8; k += 2) {
    a[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 2, 10, 3, 11);
    a[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 4, 12, 5, 13, 6, 14, 7, 15);
  }
  for (int k = 0; k < 8; k += 4)
    for (int h = 0; h < 2; ++h) {
      b[k + 2 * h] = __builtin_shufflevector(a[k + h], a[k + h + 2], 0, 1, 8, 9, 2, 3, 10, 11);
      b[k + 2 * h + 1] = __builtin_shufflevector(a[k + h], a[k + h + 2], 4, 5, 12, 13, 6, 7, 14, 15);
    }
  for (int c = 0; c < 4; ++c) {
    store8(dst + (2 * c) * ldd, __builtin_shufflevector(b[c], b[c + 4], 0, 1, 2, 3, 8, 9, 10, 11) * scale);
    store8(dst + (2 * c + 1) * ldd, __builtin_shufflevector(b[c], b[c + 4], 4, 5, 6, 7, 12, 13, 14, 15) * scale);
  }
}

// Qt[d][i] = scale q_i[d] for the block's nq query rows (row stride ld),
// Qt [D][kBQ], the columns past nq zero.
template <int DC>
inline void transpose_queries(const float* q, int ld, int nq, int D, float scale, float* Qt) {
  int i0 = 0;
  if constexpr (DC > 0 && DC % 8 == 0) {
    for (; i0 + 8 <= nq; i0 += 8)
      for (int d0 = 0; d0 < DC; d0 += 8)
        transpose8x8(q + static_cast<size_t>(i0) * ld + d0, ld, Qt + d0 * kBQ + i0, kBQ, scale);
  }
  for (int d = 0; d < D; ++d) std::fill(Qt + d * kBQ + i0, Qt + (d + 1) * kBQ, 0.0f);
  for (int i = i0; i < nq; ++i)
    for (int d = 0; d < D; ++d) Qt[d * kBQ + i] = q[static_cast<size_t>(i) * ld + d] * scale;
}

// Loads rows [k0, k0+nk) of one head, transposed to [D][kBK] and/or as rows
// [kBK][D]; rows past nk are zero. A full block at a compiled D (a multiple
// of 8) goes by 8 x 8 register transposes and vector row copies.
template <int DC>
inline void load_block(const float* base, int ld, int k0, int nk, int D, float* tr, float* rows) {
  if constexpr (DC > 0 && DC % 8 == 0) {
    if (nk == kBK) {
      for (int j0 = 0; j0 < kBK; j0 += 8) {
        const float* src = base + static_cast<size_t>(k0 + j0) * ld;
        if (tr)
          for (int d0 = 0; d0 < DC; d0 += 8) transpose8x8(src + d0, ld, tr + d0 * kBK + j0, kBK, 1.0f);
        if (rows)
          for (int j = 0; j < 8; ++j) copy_row<DC>(src + static_cast<size_t>(j) * ld, rows + (j0 + j) * DC, DC);
      }
      return;
    }
  }
  for (int j = 0; j < kBK; ++j) {
    const float* src = base + static_cast<size_t>(k0 + j) * ld;
    for (int d = 0; d < D; ++d) {
      const float x = j < nk ? src[d] : 0.0f;
      if (tr) tr[d * kBK + j] = x;
      if (rows) rows[j * D + d] = x;
    }
  }
}

template <int DC>
void fwd_impl(const TreeAttentionArgs& a, const KeyBlockBounds& kbb) {
  const int T = a.T, H = a.n_heads, D = DC ? DC : a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int HD = H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nqb = (T + kBQ - 1) / kBQ, nkb = (T + kBK - 1) / kBK;
  const float ninf = -std::numeric_limits<float>::infinity();
  const PackedKV& kv = pack_kv<DC>(a);

#pragma omp parallel
  {
    // Qt: the block's scaled queries transposed, [D][kBQ] (columns past nq
    // zero); St: the scores transposed, [kBK packed keys][kBQ queries].
    std::vector<float> Qt(D * kBQ), St(kBK * kBQ), O(kBQ * D), m(kBQ), l(kBQ), corr(kBQ);
    std::vector<float> Kp(kBK * D), Vp(kBK * D);  // the kept key groups, packed
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) {
      for (int qb = 0; qb < nqb; ++qb) {
        const int kvh = h / group;
        const int q0 = qb * kBQ, q1 = std::min(T, q0 + kBQ), nq = q1 - q0;
        transpose_queries<DC>(a.q + static_cast<size_t>(q0) * a.ld_qkv + h * D, a.ld_qkv, nq, D, scale, Qt.data());
        std::fill(O.begin(), O.end(), 0.0f);
        std::fill(m.begin(), m.end(), ninf);
        std::fill(l.begin(), l.end(), 0.0f);
        const int last_kb = (q1 - 1) / kBK;
        for (int kb = 0; kb <= last_kb; ++kb) {
          if (kbb.max_end[kb] <= q0) continue;  // nothing in this key block is visible
          const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
          const KeyGroups g = key_groups(kbb, a.subtree_end, kb, k1, nk, q0, q1);
          if (g.n == 0) continue;  // its keys' weights are all 0
          const size_t at = (static_cast<size_t>(kvh) * nkb * kBK + k0) * D;
          const float* Kr = kv.k.data() + at;
          const float* Vr = kv.v.data() + at;
          if (!g.all()) {
            pack_key_groups(g, D, nullptr, nullptr, Kr, Kp.data());
            pack_key_groups(g, D, nullptr, nullptr, Vr, Vp.data());
            Kr = Kp.data();
            Vr = Vp.data();
          }
          const int w = g.keys();  // packed keys; those past nk are masked
          // S^T[c][i] = K_c . Qs_i for the w packed keys and every query column
          rows_times<kBQ>(St.data(), kBQ, Kr, D, 1, Qt.data(), kBQ, D, w, true, nullptr, kBQ);
          if (g.masked) apply_tree_mask_columns(St.data(), q0, k0, nk, a.subtree_end, g);
          online_softmax_columns(St.data(), w, m.data(), l.data(), corr.data());
          // O_i = corr_i O_i + sum_c P^T[c][i] V_c
          rows_times<DC>(O.data(), D, St.data(), 1, kBQ, Vr, D, g.product_keys(nk), nq, false, corr.data(), D);
        }
        for (int i = 0; i < nq; ++i) {
          float* out = a.out + static_cast<size_t>(q0 + i) * HD + h * D;
          const float inv = 1.0f / l[i];
          for (int d = 0; d < D; ++d) out[d] = O[i * D + d] * inv;
          a.lse[static_cast<size_t>(h) * T + q0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
  }
}

// Key block i (of n) of a head in the threads' round-robin order: runs of
// nt blocks, every other run reversed (0 1 | 3 2 | 4 5 | 7 6 for 2
// threads), so that blocks of decreasing work (those of a causal sequence)
// alternate between the threads evenly. Plain round-robin left one of 2
// threads idle 10% of the train-step shape's backward (causal sequences of
// 8 key blocks: 20 against 16 query-block visits). A permutation of [0, n),
// fixed by n and nt: each block keeps one thread from run to run.
inline int snake(int i, int nt, int n) {
  const int run = i / nt, at = i % nt, len = std::min(nt, n - run * nt);
  return run % 2 == 0 ? i : run * nt + (len - 1 - at);
}

template <int DC>
void bwd_impl(const TreeAttentionArgs& a, const TreeAttentionGrads& g, const KeyBlockBounds& kbb) {
  const int T = a.T, H = a.n_heads, Hkv = a.n_kv_heads, D = DC ? DC : a.head_dim;
  const int group = H / Hkv, HD = H * D, ld = a.ld_qkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nkb = (T + kBK - 1) / kBK;

  // D_i = dO_i . O_i per head; and per head, contiguous [T][D], the scaled
  // queries (Qs = scale q, as the forward computes them) and dO, which every
  // key block visiting a query block reads (copied once here, not per visit).
  // The parallel regions use these references, not the thread_local.
  std::vector<float>& delta = caller_scratch.delta;
  std::vector<float>& dq_part = caller_scratch.dq_part;
  std::vector<float>& qs_all = caller_scratch.qs;
  std::vector<float>& do_all = caller_scratch.dout;
  delta.resize(static_cast<size_t>(H) * T);
  qs_all.resize(static_cast<size_t>(H) * T * D);
  do_all.resize(static_cast<size_t>(H) * T * D);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float* o = a.out + static_cast<size_t>(t) * HD + h * D;
      const float* d_o = g.dout + static_cast<size_t>(t) * HD + h * D;
      const float* q = a.q + static_cast<size_t>(t) * ld + h * D;
      float* qs = qs_all.data() + (static_cast<size_t>(h) * T + t) * D;
      float* dst = do_all.data() + (static_cast<size_t>(h) * T + t) * D;
      float s = 0;
      // 8 partial sums: a scalar chain was 6% of the backward's perf samples at D 32
      if constexpr (DC > 0 && DC % 8 == 0) {
        v8 acc{};
#pragma GCC unroll 16
        for (int d = 0; d < DC; d += 8) {
          acc += load8(o + d) * load8(d_o + d);
          store8(qs + d, load8(q + d) * scale);
          store8(dst + d, load8(d_o + d));
        }
        s = hsum8(acc);
      } else {
        for (int d = 0; d < D; ++d) {
          s += o[d] * d_o[d];
          qs[d] = q[d] * scale;
          dst[d] = d_o[d];
        }
      }
      delta[static_cast<size_t>(h) * T + t] = s;
    }

  dq_part.resize(static_cast<size_t>(omp_get_max_threads()) * T * HD);
  int team = 1;  // the parts the region wrote

#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), me = omp_get_thread_num();
    if (me == 0) team = nt;
    float* dq_mine = dq_part.data() + static_cast<size_t>(me) * T * HD;
    std::fill(dq_mine, dq_mine + static_cast<size_t>(T) * HD, 0.0f);
    std::vector<float> Kt(D * kBK), Vt(D * kBK), Kr(kBK * D);
    std::vector<float> P(kBQ * kBK), dS(kBQ * kBK), dK(kBK * D), dV(kBK * D);
    std::vector<float> Ktp(D * kBK), Vtp(D * kBK), Krp(kBK * D);  // the kept key groups, packed
    // Static round-robin (in snake order): a fixed thread per key block
    // makes the dQ sums (per-thread buffers) bitwise reproducible from run
    // to run.
#pragma omp for schedule(static, 1)
    for (int it = 0; it < Hkv * nkb; ++it) {
      const int kvh = it / nkb, kb = snake(it % nkb, nt, nkb);
      const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
      load_block<DC>(a.k + kvh * D, ld, k0, nk, D, Kt.data(), Kr.data());
      for (float& x : Kr) x *= scale;  // dQ = scale * dS K
      load_block<DC>(a.v + kvh * D, ld, k0, nk, D, Vt.data(), nullptr);
      std::fill(dK.begin(), dK.end(), 0.0f);
      std::fill(dV.begin(), dV.end(), 0.0f);
      const int q_end = kbb.max_end[kb];  // queries at or beyond never see this block
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int q0 = (k0 / kBQ) * kBQ; q0 < q_end; q0 += kBQ) {
          const int q1 = std::min(T, q0 + kBQ), nq = q1 - q0;
          const float* Qs = qs_all.data() + (static_cast<size_t>(h) * T + q0) * D;
          const float* dO = do_all.data() + (static_cast<size_t>(h) * T + q0) * D;
          const KeyGroups g = key_groups(kbb, a.subtree_end, kb, k1, nk, q0, q1);
          if (g.n == 0) continue;  // P and dS are 0 for every key of the block
          const float *kt = Kt.data(), *vt = Vt.data(), *kr = Kr.data();
          if (!g.all()) {
            pack_key_groups(g, D, Kt.data(), Ktp.data(), Kr.data(), Krp.data());
            pack_key_groups(g, D, Vt.data(), Vtp.data(), nullptr, nullptr);
            kt = Ktp.data();
            vt = Vtp.data();
            kr = Krp.data();
          }
          const int w = g.keys();  // packed columns; keys past nk are masked
          block_scores<DC>(Qs, kt, nq, D, P.data(), w);
          if (g.masked) apply_tree_mask(P.data(), q0, nq, k0, nk, a.subtree_end, g);
          block_scores<DC>(dO, vt, nq, D, dS.data(), w);
          probs_and_score_grads(P.data(), dS.data(), nq, w, a.lse + static_cast<size_t>(h) * T + q0,
                                delta.data() + static_cast<size_t>(h) * T + q0);
          // dQ_i += scale sum_j dS_ij K_j (Kr carries the scale)
          rows_times<DC>(dq_mine + static_cast<size_t>(q0) * HD + h * D, HD, dS.data(), kBK, 1, kr, D,
                         g.product_keys(nk), nq, false, nullptr, D);
          // dV_j += sum_i P_ij dO_i ;  dK_j += sum_i dS_ij Qs_i (Qs carries the scale): the whole
          // block, or each kept group (packed columns 8 c ..) into its own keys' rows
          const auto accumulate = [&](int j, int col, int rows) {
            rows_times<DC>(dV.data() + j * D, D, P.data() + col, 1, kBK, dO, D, nq, rows, false, nullptr, D);
            rows_times<DC>(dK.data() + j * D, D, dS.data() + col, 1, kBK, Qs, D, nq, rows, false, nullptr, D);
          };
          if (g.all()) accumulate(0, 0, nk);
          else
            for (int c = 0; c < g.n; ++c) accumulate(8 * g.index[c], 8 * c, std::min(8, nk - 8 * g.index[c]));
        }
      }
      for (int j = 0; j < nk; ++j)
        for (int d = 0; d < D; ++d) {
          g.dk[static_cast<size_t>(k0 + j) * ld + kvh * D + d] = dK[j * D + d];
          g.dv[static_cast<size_t>(k0 + j) * ld + kvh * D + d] = dV[j * D + d];
        }
    }
  }
  // dq = sum of the per-thread parts
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* dst = g.dq + static_cast<size_t>(t) * ld;
    const float* first = dq_part.data() + static_cast<size_t>(t) * HD;
    std::copy(first, first + HD, dst);
    for (int p = 1; p < team; ++p) {
      const float* part = dq_part.data() + (static_cast<size_t>(p) * T + t) * HD;
#pragma omp simd
      for (int c = 0; c < HD; ++c) dst[c] += part[c];
    }
  }
}

}  // namespace

size_t CpuBackend::release_scratch() {
  AttentionScratch& s = caller_scratch;
  size_t bytes = (s.kv.k.capacity() + s.kv.v.capacity() + s.delta.capacity() + s.dq_part.capacity() +
                  s.qs.capacity() + s.dout.capacity()) *
                 sizeof(float);
  s = AttentionScratch{};
  return bytes + release_head_tile();
}

void CpuBackend::tree_attention_fwd(const TreeAttentionArgs& a) {
  FORGE_CHECK(a.qkv_bf16 == nullptr && a.out_bf16 == nullptr,
              "cpu tree attention: bf16 q|k|v and output (qkv_bf16, out_bf16) are for backends with bf16 activations");
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, a.T);
  switch (a.head_dim) {
    case 16: return fwd_impl<16>(a, kbb);
    case 32: return fwd_impl<32>(a, kbb);
    case 64: return fwd_impl<64>(a, kbb);
    case 128: return fwd_impl<128>(a, kbb);
    default: return fwd_impl<0>(a, kbb);
  }
}

void CpuBackend::tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) {
  FORGE_CHECK(a.qkv_bf16 == nullptr && a.out_bf16 == nullptr && g.dout_bf16 == nullptr,
              "cpu tree attention: bf16 q|k|v, output and dO (qkv_bf16, out_bf16, dout_bf16) are for backends with "
              "bf16 activations");
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, a.T);
  switch (a.head_dim) {
    case 16: return bwd_impl<16>(a, g, kbb);
    case 32: return bwd_impl<32>(a, g, kbb);
    case 64: return bwd_impl<64>(a, g, kbb);
    case 128: return bwd_impl<128>(a, g, kbb);
    default: return bwd_impl<0>(a, g, kbb);
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
