// Tree-masked attention on the CPU, blocked like FlashAttention.
//
// Forward, per (head, query block of BQ rows): stream over key blocks with an
// online softmax (running max m, running sum l, unnormalized output O), then
// out = O / l and lse = m + log l. A key block is skipped when no key in it
// is visible to the query block: max(subtree_end) over the block <= q0.
// When every key of the block is an ancestor-or-self of every query (the
// block ends at or before q0 and min(subtree_end) >= q1), the mask is not
// evaluated.
//
// Backward (recomputing P = exp(S - lse)), per (kv head, key block):
//   dV_j += sum_i P_ij dO_i ;  dP_ij = dO_i . V_j ;  dS_ij = P_ij (dP_ij - D_i)
//   dK_j += scale sum_i dS_ij Q_i ;  dQ_i += scale sum_j dS_ij K_j
// with D_i = dO_i . O_i. Query blocks visited for key block [k0, k1) are those
// in [k0, max subtree_end); dQ goes to per-thread buffers summed at the end,
// so no atomics are needed. Kernels are compiled for head dimensions 16, 32,
// 64 and 128 (accumulators in registers) with a generic fallback.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

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

// 8-float vectors (GCC/Clang vector extensions): accumulators stay in
// registers, which plain loops over a local array do not guarantee.
constexpr int kVecPerRow = kBK / 8;

// max_j s[j] over one score row (-inf for a fully masked row).
inline float row_max(const float* s) {
  v8 m = load8(s);
#pragma GCC unroll 8
  for (int k = 1; k < kVecPerRow; ++k) {
    const v8 x = load8(s + 8 * k);
    m = m > x ? m : x;
  }
  float r = m[0];
  for (int l = 1; l < 8; ++l) r = std::max(r, m[l]);
  return r;
}

// S[i][j] = sum_d A[i][d] * Bt[d][j] for i < nq, all kBK columns; two rows
// at a time so that each load of Bt feeds two FMAs.
template <int DC>
inline void block_scores(const float* A, const float* Bt, int nq, int Drt, float* S) {
  const int D = DC ? DC : Drt;
  int i = 0;
  for (; i + 1 < nq; i += 2) {
    v8 a0[kVecPerRow] = {}, a1[kVecPerRow] = {};
    const float* r0 = A + i * D;
    const float* r1 = r0 + D;
    for (int d = 0; d < D; ++d) {
      const v8 x0 = bcast(r0[d]), x1 = bcast(r1[d]);
      const float* bt = Bt + d * kBK;
#pragma GCC unroll 8
      for (int k = 0; k < kVecPerRow; ++k) {
        const v8 b = load8(bt + 8 * k);
        a0[k] += x0 * b;
        a1[k] += x1 * b;
      }
    }
#pragma GCC unroll 8
    for (int k = 0; k < kVecPerRow; ++k) {
      store8(S + i * kBK + 8 * k, a0[k]);
      store8(S + (i + 1) * kBK + 8 * k, a1[k]);
    }
  }
  if (i < nq) {
    v8 a0[kVecPerRow] = {};
    const float* r0 = A + i * D;
    for (int d = 0; d < D; ++d) {
      const v8 x0 = bcast(r0[d]);
#pragma GCC unroll 8
      for (int k = 0; k < kVecPerRow; ++k) a0[k] += x0 * load8(Bt + d * kBK + 8 * k);
    }
#pragma GCC unroll 8
    for (int k = 0; k < kVecPerRow; ++k) store8(S + i * kBK + 8 * k, a0[k]);
  }
}

// Sets S[i][j] = -inf where query q0+i may not see key k0+j (or j >= nk).
inline void apply_tree_mask(float* S, int q0, int nq, int k0, int nk, const int32_t* se) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < nq; ++i) {
    const int qi = q0 + i;
    float* s = S + i * kBK;
    for (int j = 0; j < nk; ++j) {
      const int kj = k0 + j;
      if (kj > qi || qi >= se[kj]) s[j] = ninf;
    }
    for (int j = nk; j < kBK; ++j) s[j] = ninf;
  }
}

// Loads rows [k0, k0+nk) of one head, transposed to [D][kBK] and/or as rows
// [kBK][D]; rows past nk are zero.
inline void load_block(const float* base, int ld, int k0, int nk, int D, float* tr, float* rows) {
  for (int j = 0; j < kBK; ++j) {
    const float* src = base + static_cast<size_t>(k0 + j) * ld;
    for (int d = 0; d < D; ++d) {
      const float x = j < nk ? src[d] : 0.0f;
      if (tr) tr[d * kBK + j] = x;
      if (rows) rows[j * D + d] = x;
    }
  }
}

bool block_fully_visible(const KeyBlockBounds& b, int kb, int k1, int nk, int q0, int q1) {
  return nk == kBK && k1 - 1 <= q0 && b.min_end[kb] >= q1;
}

// o = o * corr + sum_j p[j * stride] X[j] over n rows X[j] of length D
// (the P V product of one query row with stride 1, or one column of a score
// block with stride kBK). Two accumulator sets hide the FMA latency.
template <int DC>
inline void accumulate_rows(float* o, float corr, const float* p, int stride, const float* X,
                            int n, int Drt) {
  if constexpr (DC > 0 && DC % 8 == 0) {
    constexpr int kV = DC / 8;
    v8 acc[kV], acc2[kV];
    const v8 c = bcast(corr);
#pragma GCC unroll 16
    for (int k = 0; k < kV; ++k) {
      acc[k] = load8(o + 8 * k) * c;
      acc2[k] = v8{};
    }
    int j = 0;
    for (; j + 1 < n; j += 2) {
      const v8 p0 = bcast(p[j * stride]), p1 = bcast(p[(j + 1) * stride]);
      const float* x0 = X + j * DC;
#pragma GCC unroll 16
      for (int k = 0; k < kV; ++k) {
        acc[k] += p0 * load8(x0 + 8 * k);
        acc2[k] += p1 * load8(x0 + DC + 8 * k);
      }
    }
    if (j < n) {
      const v8 p0 = bcast(p[j * stride]);
#pragma GCC unroll 16
      for (int k = 0; k < kV; ++k) acc[k] += p0 * load8(X + j * DC + 8 * k);
    }
#pragma GCC unroll 16
    for (int k = 0; k < kV; ++k) store8(o + 8 * k, acc[k] + acc2[k]);
  } else {
    for (int d = 0; d < Drt; ++d) o[d] *= corr;
    for (int j = 0; j < n; ++j)
      for (int d = 0; d < Drt; ++d) o[d] += p[j * stride] * X[j * Drt + d];
  }
}

// Keys of every kv head transposed per key block, [Hkv][nkb][D][kBK], and
// values as contiguous rows, [Hkv][nkb * kBK][D]; rows past T are zero.
struct PackedKV {
  std::vector<float> kt, v;
};

// Filled into a per-calling-thread buffer that keeps its capacity, so that
// steps after the first touch no fresh pages.
const PackedKV& pack_kv(const TreeAttentionArgs& a, int D) {
  const int T = a.T, Hkv = a.n_kv_heads, nkb = (T + kBK - 1) / kBK;
  // A thread_local named inside the parallel region would be each worker's
  // own copy: the region uses the reference p to the caller's buffer.
  static thread_local PackedKV caller_buffer;
  PackedKV& p = caller_buffer;
  p.kt.assign(static_cast<size_t>(Hkv) * nkb * D * kBK, 0.0f);
  p.v.assign(static_cast<size_t>(Hkv) * nkb * kBK * D, 0.0f);
#pragma omp parallel for collapse(2) schedule(static)
  for (int kvh = 0; kvh < Hkv; ++kvh)
    for (int kb = 0; kb < nkb; ++kb) {
      const int k0 = kb * kBK, nk = std::min(T, k0 + kBK) - k0;
      float* kt = p.kt.data() + (static_cast<size_t>(kvh) * nkb + kb) * D * kBK;
      float* v = p.v.data() + (static_cast<size_t>(kvh) * nkb * kBK + k0) * D;
      for (int j = 0; j < nk; ++j) {
        const float* ks = a.k + static_cast<size_t>(k0 + j) * a.ld_qkv + kvh * D;
        const float* vs = a.v + static_cast<size_t>(k0 + j) * a.ld_qkv + kvh * D;
        for (int d = 0; d < D; ++d) kt[d * kBK + j] = ks[d];
        std::copy(vs, vs + D, v + j * D);
      }
    }
  return p;
}

template <int DC>
void fwd_impl(const TreeAttentionArgs& a, const KeyBlockBounds& kbb) {
  const int T = a.T, H = a.n_heads, D = DC ? DC : a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int HD = H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nqb = (T + kBQ - 1) / kBQ, nkb = (T + kBK - 1) / kBK;
  const float ninf = -std::numeric_limits<float>::infinity();
  const PackedKV& kv = pack_kv(a, D);

#pragma omp parallel
  {
    std::vector<float> Qs(kBQ * D), S(kBQ * kBK), O(kBQ * D), m(kBQ), l(kBQ);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) {
      for (int qb = 0; qb < nqb; ++qb) {
        const int kvh = h / group;
        const int q0 = qb * kBQ, q1 = std::min(T, q0 + kBQ), nq = q1 - q0;
        for (int i = 0; i < nq; ++i) {
          const float* q = a.q + static_cast<size_t>(q0 + i) * a.ld_qkv + h * D;
#pragma omp simd
          for (int d = 0; d < D; ++d) Qs[i * D + d] = q[d] * scale;
        }
        std::fill(O.begin(), O.end(), 0.0f);
        std::fill(m.begin(), m.end(), ninf);
        std::fill(l.begin(), l.end(), 0.0f);
        const int last_kb = (q1 - 1) / kBK;
        for (int kb = 0; kb <= last_kb; ++kb) {
          if (kbb.max_end[kb] <= q0) continue;  // nothing in this key block is visible
          const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
          const float* Kt = kv.kt.data() + (static_cast<size_t>(kvh) * nkb + kb) * D * kBK;
          const float* Vr = kv.v.data() + (static_cast<size_t>(kvh) * nkb * kBK + k0) * D;
          block_scores<DC>(Qs.data(), Kt, nq, D, S.data());
          if (!block_fully_visible(kbb, kb, k1, nk, q0, q1))
            apply_tree_mask(S.data(), q0, nq, k0, nk, a.subtree_end);
          for (int i = 0; i < nq; ++i) {
            float* s = S.data() + i * kBK;
            const float mx = std::max(m[i], row_max(s));
            if (mx == ninf) continue;  // the row sees nothing here yet
            const float corr = fast_exp(m[i] - mx);
            const float sum = exp_inplace_sum(s, kBK, mx);
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            accumulate_rows<DC>(O.data() + i * D, corr, s, 1, Vr, nk, D);
          }
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

template <int DC>
void bwd_impl(const TreeAttentionArgs& a, const TreeAttentionGrads& g, const KeyBlockBounds& kbb) {
  const int T = a.T, H = a.n_heads, Hkv = a.n_kv_heads, D = DC ? DC : a.head_dim;
  const int group = H / Hkv, HD = H * D, ld = a.ld_qkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nkb = (T + kBK - 1) / kBK;

  // D_i = dO_i . O_i per head
  // Scratch kept per calling thread across calls (no page faults per step);
  // the parallel regions use these references, not the thread_locals.
  static thread_local std::vector<float> caller_delta, caller_dq_part;
  std::vector<float>& delta = caller_delta;
  std::vector<float>& dq_part = caller_dq_part;
  delta.resize(static_cast<size_t>(H) * T);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const float* o = a.out + static_cast<size_t>(t) * HD + h * D;
      const float* d_o = g.dout + static_cast<size_t>(t) * HD + h * D;
      float s = 0;
      for (int d = 0; d < D; ++d) s += o[d] * d_o[d];
      delta[static_cast<size_t>(h) * T + t] = s;
    }

  const int nthreads = omp_get_max_threads();
  dq_part.assign(static_cast<size_t>(nthreads) * T * HD, 0.0f);

#pragma omp parallel
  {
    float* dq_mine = dq_part.data() + static_cast<size_t>(omp_get_thread_num()) * T * HD;
    std::vector<float> Kt(D * kBK), Vt(D * kBK), Kr(kBK * D), Qs(kBQ * D), dO(kBQ * D);
    std::vector<float> P(kBQ * kBK), dS(kBQ * kBK), dK(kBK * D), dV(kBK * D);
    // Static round-robin: a fixed thread per key block makes the dQ sums
    // (per-thread buffers) bitwise reproducible from run to run.
#pragma omp for collapse(2) schedule(static, 1)
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      for (int kb = 0; kb < nkb; ++kb) {
        const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
        load_block(a.k + kvh * D, ld, k0, nk, D, Kt.data(), Kr.data());
        for (float& x : Kr) x *= scale;  // dQ = scale * dS K
        load_block(a.v + kvh * D, ld, k0, nk, D, Vt.data(), nullptr);
        std::fill(dK.begin(), dK.end(), 0.0f);
        std::fill(dV.begin(), dV.end(), 0.0f);
        const int q_end = kbb.max_end[kb];  // queries at or beyond never see this block
        for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
          for (int q0 = (k0 / kBQ) * kBQ; q0 < q_end; q0 += kBQ) {
            const int q1 = std::min(T, q0 + kBQ), nq = q1 - q0;
            for (int i = 0; i < nq; ++i) {
              const float* q = a.q + static_cast<size_t>(q0 + i) * ld + h * D;
              const float* d_o = g.dout + static_cast<size_t>(q0 + i) * HD + h * D;
              for (int d = 0; d < D; ++d) {
                Qs[i * D + d] = q[d] * scale;
                dO[i * D + d] = d_o[d];
              }
            }
            block_scores<DC>(Qs.data(), Kt.data(), nq, D, P.data());
            if (!block_fully_visible(kbb, kb, k1, nk, q0, q1))
              apply_tree_mask(P.data(), q0, nq, k0, nk, a.subtree_end);
            block_scores<DC>(dO.data(), Vt.data(), nq, D, dS.data());
            for (int i = 0; i < nq; ++i) {
              const float lse = a.lse[static_cast<size_t>(h) * T + q0 + i];
              const float di = delta[static_cast<size_t>(h) * T + q0 + i];
              float* p = P.data() + i * kBK;
              float* ds = dS.data() + i * kBK;
              const v8 vl = bcast(lse), vd = bcast(di);
              for (int j = 0; j < kBK; j += 8) {
                const v8 pj = exp8(load8(p + j) - vl);
                store8(p + j, pj);
                store8(ds + j, pj * (load8(ds + j) - vd));
              }
              // dQ_i += scale * sum_j dS_ij K_j
              accumulate_rows<DC>(dq_mine + static_cast<size_t>(q0 + i) * HD + h * D, 1.0f, ds,
                                  1, Kr.data(), nk, D);
            }
            // dV_j += sum_i P_ij dO_i ;  dK_j += sum_i dS_ij Qs_i (Qs carries the scale)
            for (int j = 0; j < nk; ++j) {
              accumulate_rows<DC>(dV.data() + j * D, 1.0f, P.data() + j, kBK, dO.data(), nq, D);
              accumulate_rows<DC>(dK.data() + j * D, 1.0f, dS.data() + j, kBK, Qs.data(), nq, D);
            }
          }
        }
        for (int j = 0; j < nk; ++j)
          for (int d = 0; d < D; ++d) {
            g.dk[static_cast<size_t>(k0 + j) * ld + kvh * D + d] = dK[j * D + d];
            g.dv[static_cast<size_t>(k0 + j) * ld + kvh * D + d] = dV[j * D + d];
          }
      }
    }
  }
  // dq = sum of the per-thread parts
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* dst = g.dq + static_cast<size_t>(t) * ld;
    const float* first = dq_part.data() + static_cast<size_t>(t) * HD;
    std::copy(first, first + HD, dst);
    for (int p = 1; p < nthreads; ++p) {
      const float* part = dq_part.data() + (static_cast<size_t>(p) * T + t) * HD;
#pragma omp simd
      for (int c = 0; c < HD; ++c) dst[c] += part[c];
    }
  }
}

}  // namespace

void CpuBackend::tree_attention_fwd(const TreeAttentionArgs& a) {
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
