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

#include "cpu/cpu_backend.hpp"
#include "cpu/vec_math.hpp"

namespace forge {
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

// S[i][j] = sum_d A[i][d] * Bt[d][j] for i < nq, all kBK columns.
template <int DC>
inline void block_scores(const float* A, const float* Bt, int nq, int Drt, float* S) {
  const int D = DC ? DC : Drt;
  for (int i = 0; i < nq; ++i) {
    float acc[kBK];
#pragma omp simd
    for (int j = 0; j < kBK; ++j) acc[j] = 0.0f;
    const float* a = A + i * D;
    for (int d = 0; d < D; ++d) {
      const float ad = a[d];
      const float* bt = Bt + d * kBK;
#pragma omp simd
      for (int j = 0; j < kBK; ++j) acc[j] += ad * bt[j];
    }
    float* s = S + i * kBK;
#pragma omp simd
    for (int j = 0; j < kBK; ++j) s[j] = acc[j];
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

// o = o * corr + sum_j p[j] V[j] (accumulator in registers for fixed D).
template <int DC>
inline void accumulate_pv(float* o, float corr, const float* p, const float* V, int nk, int Drt) {
  if constexpr (DC > 0) {
    // Two accumulators (even and odd j) hide the FMA latency.
    float acc[DC], acc2[DC];
#pragma omp simd
    for (int d = 0; d < DC; ++d) {
      acc[d] = o[d] * corr;
      acc2[d] = 0.0f;
    }
    int j = 0;
    for (; j + 1 < nk; j += 2) {
      const float p0 = p[j], p1 = p[j + 1];
      const float* v0 = V + j * DC;
      const float* v1 = v0 + DC;
#pragma omp simd
      for (int d = 0; d < DC; ++d) {
        acc[d] += p0 * v0[d];
        acc2[d] += p1 * v1[d];
      }
    }
    if (j < nk) {
      const float pj = p[j];
      const float* v = V + j * DC;
#pragma omp simd
      for (int d = 0; d < DC; ++d) acc[d] += pj * v[d];
    }
#pragma omp simd
    for (int d = 0; d < DC; ++d) o[d] = acc[d] + acc2[d];
  } else {
    for (int d = 0; d < Drt; ++d) o[d] *= corr;
    for (int j = 0; j < nk; ++j)
      for (int d = 0; d < Drt; ++d) o[d] += p[j] * V[j * Drt + d];
  }
}

// o += sum_i p[i * kBK] X[i] (column j of a score block against rows X).
template <int DC>
inline void accumulate_column(float* o, const float* p, const float* X, int nq, int Drt) {
  if constexpr (DC > 0) {
    float acc[DC], acc2[DC];
#pragma omp simd
    for (int d = 0; d < DC; ++d) {
      acc[d] = o[d];
      acc2[d] = 0.0f;
    }
    int i = 0;
    for (; i + 1 < nq; i += 2) {
      const float p0 = p[i * kBK], p1 = p[(i + 1) * kBK];
      const float* x0 = X + i * DC;
      const float* x1 = x0 + DC;
#pragma omp simd
      for (int d = 0; d < DC; ++d) {
        acc[d] += p0 * x0[d];
        acc2[d] += p1 * x1[d];
      }
    }
    if (i < nq) {
      const float pi = p[i * kBK];
      const float* x = X + i * DC;
#pragma omp simd
      for (int d = 0; d < DC; ++d) acc[d] += pi * x[d];
    }
#pragma omp simd
    for (int d = 0; d < DC; ++d) o[d] = acc[d] + acc2[d];
  } else {
    for (int i = 0; i < nq; ++i)
      for (int d = 0; d < Drt; ++d) o[d] += p[i * kBK] * X[i * Drt + d];
  }
}

// Keys of every kv head transposed per key block, [Hkv][nkb][D][kBK], and
// values as contiguous rows, [Hkv][nkb * kBK][D]; rows past T are zero.
struct PackedKV {
  std::vector<float> kt, v;
};

PackedKV pack_kv(const TreeAttentionArgs& a, int D) {
  const int T = a.T, Hkv = a.n_kv_heads, nkb = (T + kBK - 1) / kBK;
  PackedKV p;
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
  const PackedKV kv = pack_kv(a, D);

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
            float mx = m[i];
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < kBK; ++j) mx = std::max(mx, s[j]);
            if (mx == ninf) continue;  // the row sees nothing here yet
            const float corr = fast_exp(m[i] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < kBK; ++j) {
              s[j] = fast_exp(s[j] - mx);
              sum += s[j];
            }
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            accumulate_pv<DC>(O.data() + i * D, corr, s, Vr, nk, D);
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
  std::vector<float> delta(static_cast<size_t>(H) * T);
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
  std::vector<float> dq_part(static_cast<size_t>(nthreads) * T * HD, 0.0f);

#pragma omp parallel
  {
    float* dq_mine = dq_part.data() + static_cast<size_t>(omp_get_thread_num()) * T * HD;
    std::vector<float> Kt(D * kBK), Vt(D * kBK), Kr(kBK * D), Qs(kBQ * D), dO(kBQ * D);
    std::vector<float> P(kBQ * kBK), dS(kBQ * kBK), dK(kBK * D), dV(kBK * D);
#pragma omp for collapse(2) schedule(dynamic, 1)
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
#pragma omp simd
              for (int j = 0; j < kBK; ++j) {
                p[j] = fast_exp(p[j] - lse);
                ds[j] = p[j] * (ds[j] - di);
              }
              // dQ_i += scale * sum_j dS_ij K_j
              accumulate_pv<DC>(dq_mine + static_cast<size_t>(q0 + i) * HD + h * D, 1.0f, ds,
                                Kr.data(), nk, D);
            }
            // dV_j += sum_i P_ij dO_i ;  dK_j += sum_i dS_ij Qs_i (Qs carries the scale)
            for (int j = 0; j < nk; ++j) {
              accumulate_column<DC>(dV.data() + j * D, P.data() + j, dO.data(), nq, D);
              accumulate_column<DC>(dK.data() + j * D, dS.data() + j, Qs.data(), nq, D);
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

void cpu_tree_attention_fwd(const TreeAttentionArgs& a) {
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, a.T);
  switch (a.head_dim) {
    case 16: return fwd_impl<16>(a, kbb);
    case 32: return fwd_impl<32>(a, kbb);
    case 64: return fwd_impl<64>(a, kbb);
    case 128: return fwd_impl<128>(a, kbb);
    default: return fwd_impl<0>(a, kbb);
  }
}

void cpu_tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) {
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, a.T);
  switch (a.head_dim) {
    case 16: return bwd_impl<16>(a, g, kbb);
    case 32: return bwd_impl<32>(a, g, kbb);
    case 64: return bwd_impl<64>(a, g, kbb);
    case 128: return bwd_impl<128>(a, g, kbb);
    default: return bwd_impl<0>(a, g, kbb);
  }
}

}  // namespace forge
