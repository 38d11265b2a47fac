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
// so no atomics are needed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.hpp"

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

// S[i][j] = sum_d Q[i][d] * Kt[d][j] for i < nq, j < nk (row stride kBK).
inline void block_scores(const float* Q, const float* Kt, int nq, int nk, int D, float* S) {
  for (int i = 0; i < nq; ++i) {
    float* s = S + i * kBK;
#pragma omp simd
    for (int j = 0; j < kBK; ++j) s[j] = 0.0f;
    const float* q = Q + i * D;
    for (int d = 0; d < D; ++d) {
      const float qd = q[d];
      const float* kt = Kt + d * kBK;
#pragma omp simd
      for (int j = 0; j < kBK; ++j) s[j] += qd * kt[j];
    }
  }
  (void)nk;
}

// Sets S[i][j] = -inf where query q0+i may not see key k0+j.
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

}  // namespace

void cpu_tree_attention_fwd(const TreeAttentionArgs& a) {
  const int T = a.T, H = a.n_heads, D = a.head_dim, group = a.n_heads / a.n_kv_heads;
  const int HD = H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nqb = (T + kBQ - 1) / kBQ;
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, T);
  const float ninf = -std::numeric_limits<float>::infinity();

#pragma omp parallel
  {
    std::vector<float> Qs(kBQ * D), Kt(D * kBK), S(kBQ * kBK), O(kBQ * D), m(kBQ), l(kBQ);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) {
      for (int qb = 0; qb < nqb; ++qb) {
        const int kvh = h / group;
        const int q0 = qb * kBQ, q1 = std::min(T, q0 + kBQ), nq = q1 - q0;
        for (int i = 0; i < nq; ++i) {
          const float* q = a.q + static_cast<size_t>(q0 + i) * a.ld_qkv + h * D;
          for (int d = 0; d < D; ++d) Qs[i * D + d] = q[d] * scale;
        }
        std::fill(O.begin(), O.end(), 0.0f);
        std::fill(m.begin(), m.end(), ninf);
        std::fill(l.begin(), l.end(), 0.0f);
        const int last_kb = (q1 - 1) / kBK;
        for (int kb = 0; kb <= last_kb; ++kb) {
          if (kbb.max_end[kb] <= q0) continue;  // nothing in this key block is visible
          const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
          for (int j = 0; j < kBK; ++j)
            for (int d = 0; d < D; ++d)
              Kt[d * kBK + j] =
                  j < nk ? a.k[static_cast<size_t>(k0 + j) * a.ld_qkv + kvh * D + d] : 0.0f;
          block_scores(Qs.data(), Kt.data(), nq, nk, D, S.data());
          const bool full = (k1 - 1 <= q0) && kbb.min_end[kb] >= q1 && nk == kBK;
          if (!full) apply_tree_mask(S.data(), q0, nq, k0, nk, a.subtree_end);
          for (int i = 0; i < nq; ++i) {
            float* s = S.data() + i * kBK;
            float mx = m[i];
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < kBK; ++j) mx = std::max(mx, s[j]);
            if (mx == ninf) continue;  // row sees nothing here yet
            const float corr = std::exp(m[i] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < kBK; ++j) {
              s[j] = std::exp(s[j] - mx);
              sum += s[j];
            }
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            float* o = O.data() + i * D;
            if (corr != 1.0f) {
#pragma omp simd
              for (int d = 0; d < D; ++d) o[d] *= corr;
            }
            for (int j = 0; j < nk; ++j) {
              const float p = s[j];
              if (p == 0.0f) continue;
              const float* v = a.v + static_cast<size_t>(k0 + j) * a.ld_qkv + kvh * D;
#pragma omp simd
              for (int d = 0; d < D; ++d) o[d] += p * v[d];
            }
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

void cpu_tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) {
  const int T = a.T, H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int group = H / Hkv, HD = H * D, ld = a.ld_qkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int nkb = (T + kBK - 1) / kBK;
  const KeyBlockBounds kbb = key_block_bounds(a.subtree_end, T);

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
    std::vector<float> S(kBQ * kBK), dP(kBQ * kBK), dK(kBK * D), dV(kBK * D);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      for (int kb = 0; kb < nkb; ++kb) {
        const int k0 = kb * kBK, k1 = std::min(T, k0 + kBK), nk = k1 - k0;
        for (int j = 0; j < kBK; ++j)
          for (int d = 0; d < D; ++d) {
            const bool in = j < nk;
            const float kv = in ? a.k[static_cast<size_t>(k0 + j) * ld + kvh * D + d] : 0.0f;
            const float vv = in ? a.v[static_cast<size_t>(k0 + j) * ld + kvh * D + d] : 0.0f;
            Kt[d * kBK + j] = kv;
            Vt[d * kBK + j] = vv;
            Kr[j * D + d] = kv;
          }
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
            block_scores(Qs.data(), Kt.data(), nq, nk, D, S.data());
            const bool full = (k1 - 1 <= q0) && kbb.min_end[kb] >= q1 && nk == kBK;
            if (!full) apply_tree_mask(S.data(), q0, nq, k0, nk, a.subtree_end);
            block_scores(dO.data(), Vt.data(), nq, nk, D, dP.data());
            for (int i = 0; i < nq; ++i) {
              const float lse = a.lse[static_cast<size_t>(h) * T + q0 + i];
              const float di = delta[static_cast<size_t>(h) * T + q0 + i];
              float* s = S.data() + i * kBK;
              float* dp = dP.data() + i * kBK;
#pragma omp simd
              for (int j = 0; j < kBK; ++j) {
                const float p = std::exp(s[j] - lse);
                s[j] = p;                   // P
                dp[j] = p * (dp[j] - di);   // dS
              }
              const float* d_o = dO.data() + i * D;
              const float* qs = Qs.data() + i * D;
              float* dq = dq_mine + static_cast<size_t>(q0 + i) * HD + h * D;
              for (int j = 0; j < nk; ++j) {
                const float p = s[j], ds = dp[j];
                if (p == 0.0f) continue;
                float* dv = dV.data() + j * D;
                float* dk = dK.data() + j * D;
                const float* kr = Kr.data() + j * D;
#pragma omp simd
                for (int d = 0; d < D; ++d) {
                  dv[d] += p * d_o[d];
                  dk[d] += ds * qs[d];  // Qs already carries the scale
                  dq[d] += ds * scale * kr[d];
                }
              }
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
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < HD; ++c) {
      float s = 0;
      for (int p = 0; p < nthreads; ++p) s += dq_part[(static_cast<size_t>(p) * T + t) * HD + c];
      g.dq[static_cast<size_t>(t) * ld + c] = s;
    }
}

}  // namespace forge
