// Paged KV cache on the CPU: writing new k/v rows into their slots, and
// attention of query rows over their own sequence's cached positions.
//
// Attention, per query row t and head h, with P = position[t] + 1 visible
// positions read block by block through the row's block table:
//   s_j = (scale q) . k_j ;  online softmax: m' = max(m, max_j s_j),
//   l' = l e^{m - m'} + sum_j e^{s_j - m'},  o' = o e^{m - m'} + sum_j e^{s_j - m'} v_j
// and out = o / l. A thread takes a query row and all its heads, so each
// cached k/v block is read once per query from memory; rows of one step
// have different lengths, so they are scheduled dynamically. Decode reads
// each cached value once for 2 flops a query head: past the L2 cache it is
// bound by the L3's, then the memory's bandwidth
// (bench/bench_decode_attention.cpp). Head dimensions that are a multiple
// of 8 run on 8-lane vectors (eight positions' scores at a time, exp8 over
// the block); others on a scalar loop of the same formulas.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::kv_cache_write(const KvCacheWriteArgs& a) {
  const size_t row_bytes = sizeof(float) * a.row_dim;
  float* k_cache = static_cast<float*>(a.k_cache);  // FP32 values (kv_cache_value_bytes)
  float* v_cache = static_cast<float*>(a.v_cache);
#pragma omp parallel for schedule(static) if (a.T > 64)
  for (int t = 0; t < a.T; ++t) {
    const size_t dst = static_cast<size_t>(a.slot[t]) * a.row_dim;
    const size_t src = static_cast<size_t>(t) * a.ld;
    std::memcpy(k_cache + dst, a.k + src, row_bytes);
    std::memcpy(v_cache + dst, a.v + src, row_bytes);
  }
}

namespace {

// r[i] = sum of the lanes of a[i], i < 8 (two pairwise-add rounds within
// 128-bit halves, then the halves).
inline v8 lane_sums8(const v8* a) {
  auto hadd = [](v8 x, v8 y) {
    return __builtin_shufflevector(x, y, 0, 2, 8, 10, 4, 6, 12, 14) +
           __builtin_shufflevector(x, y, 1, 3, 9, 11, 5, 7, 13, 15);
  };
  const v8 u0 = hadd(hadd(a[0], a[1]), hadd(a[2], a[3]));
  const v8 u1 = hadd(hadd(a[4], a[5]), hadd(a[6], a[7]));
  return __builtin_shufflevector(u0, u1, 0, 1, 2, 3, 8, 9, 10, 11) +
         __builtin_shufflevector(u0, u1, 4, 5, 6, 7, 12, 13, 14, 15);
}

// Per-thread scratch of one query row: scaled q, scores [H][bs8], o [H][D].
struct RowScratch {
  std::vector<float> q, s, o, m, l;
  RowScratch(int H, int D, int bs8) : q(H * D), s(static_cast<size_t>(H) * bs8), o(H * D), m(H), l(H) {}
};

// Starts row t: q scaled by 1/sqrt(D), o = 0, m = -inf, l = 0.
void start_row(const PagedAttentionArgs& a, int t, RowScratch& sc) {
  const int HD = a.n_heads * a.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  const float* qr = a.q + static_cast<size_t>(t) * a.ld_q;
  for (int i = 0; i < HD; ++i) sc.q[i] = qr[i] * scale;
  std::fill(sc.o.begin(), sc.o.end(), 0.0f);
  std::fill(sc.m.begin(), sc.m.end(), -std::numeric_limits<float>::infinity());
  std::fill(sc.l.begin(), sc.l.end(), 0.0f);
}

// Ends row t: out = o / l per head.
void finish_row(const PagedAttentionArgs& a, int t, const RowScratch& sc) {
  const int H = a.n_heads, D = a.head_dim;
  float* out = a.out + static_cast<size_t>(t) * H * D;
  for (int h = 0; h < H; ++h) {
    const float inv = 1.0f / sc.l[h];
    for (int d = 0; d < D; ++d) out[h * D + d] = sc.o[h * D + d] * inv;
  }
}

// Row t over its cached positions: start_row, then block(kb, vb, nb) per
// cache block of the row's table (its K and V rows, nb <= block_size
// positions; the next block's pages prefetched), then finish_row.
template <class Block>
void attend_row(const PagedAttentionArgs& a, int t, RowScratch& sc, Block block) {
  const int bs = a.block_size;
  const size_t row = static_cast<size_t>(a.n_kv_heads) * a.head_dim;
  const float* k_cache = static_cast<const float*>(a.k_cache);
  const float* v_cache = static_cast<const float*>(a.v_cache);
  start_row(a, t, sc);
  const int32_t* table = a.block_table + a.table_begin[t];
  const int n = a.position[t] + 1;
  for (int p0 = 0; p0 < n; p0 += bs) {
    const size_t base = static_cast<size_t>(table[p0 / bs]) * bs * row;
    if (p0 + bs < n) {
      // one touch per 4 KiB (1024 floats) of the next block's K and V,
      // for the hardware prefetchers to stream from (a prefetch of every
      // line stalled: docs/performance.md, "Paged attention")
      const size_t next = static_cast<size_t>(table[p0 / bs + 1]) * bs * row;
      const size_t nn = static_cast<size_t>(std::min(bs, n - p0 - bs)) * row;
      for (size_t i = 0; i < nn; i += 1024) {
        __builtin_prefetch(k_cache + next + i);
        __builtin_prefetch(v_cache + next + i);
      }
    }
    block(k_cache + base, v_cache + base, std::min(bs, n - p0));
  }
  finish_row(a, t, sc);
}

// One query row, head dimension D = 8 NC (NC = 0: any multiple of 8, not
// unrolled). A block is read eight positions at a time across all heads, so
// those rows (all kv heads, contiguous) are used up while in L1: scores of
// the eight positions per head (eight FMA chains where a v8 is one
// register, then lane_sums8), the block's softmax on 8-lane vectors, then,
// in a second pass, o_h += p v over the block a head at a time (for NC > 0
// in registers, a panel of o_h at a time).
template <int NC>
void attend_row_vec(const PagedAttentionArgs& a, int t, RowScratch& sc) {
  const int H = a.n_heads, D = a.head_dim, bs = a.block_size, group = a.n_heads / a.n_kv_heads;
  const int bs8 = (bs + 7) / 8 * 8, nc = NC ? NC : D / 8;
  const size_t row = static_cast<size_t>(a.n_kv_heads) * D;
  const float ninf = -std::numeric_limits<float>::infinity();
  attend_row(a, t, sc, [&](const float* kb, const float* vb, int nb) {
    // scores s[h][j] = q_h . k_j, eight positions at a time; the padded
    // lanes past nb get -inf (weight 0)
    const int nb8 = (nb + 7) / 8 * 8;
    for (int j0 = 0; j0 < nb8; j0 += 8) {
      const int nj = std::min(8, nb - j0);
      for (int h = 0; h < H; ++h) {
        const float* qh = sc.q.data() + static_cast<size_t>(h) * D;
        const float* k = kb + j0 * row + static_cast<size_t>(h / group) * D;
        v8 dots[8] = {};
        if (kLanes >= 8 && nj == 8) {
          // eight independent FMA chains, q loaded once a column (on SSE2,
          // where a v8 is two registers, the eight would spill)
#pragma GCC unroll 16
          for (int c = 0; c < nc; ++c) {
            const v8 qc = load8(qh + 8 * c);
#pragma GCC unroll 8
            for (int jj = 0; jj < 8; ++jj) dots[jj] += qc * load8(k + jj * row + 8 * c);
          }
        } else {
          for (int jj = 0; jj < nj; ++jj)
#pragma GCC unroll 16
            for (int c = 0; c < nc; ++c) dots[jj] += load8(qh + 8 * c) * load8(k + jj * row + 8 * c);
        }
        v8 sv = lane_sums8(dots);
        for (int jj = nj; jj < 8; ++jj) sv[jj] = ninf;
        store8(sc.s.data() + static_cast<size_t>(h) * bs8 + j0, sv);
      }
    }
    // online softmax over the block: o_h *= e^{m - m'}, s = e^{s - m'}
    for (int h = 0; h < H; ++h) {
      float* sh = sc.s.data() + static_cast<size_t>(h) * bs8;
      v8 mv = load8(sh);
      for (int j = 8; j < nb8; j += 8) {
        const v8 x = load8(sh + j);
        mv = mv > x ? mv : x;
      }
      const float mx = std::max(sc.m[h], hmax8(mv));
      const float corr = fast_exp(sc.m[h] - mx);  // 0 on the first block (m = -inf)
      sc.l[h] = sc.l[h] * corr + exp_inplace_sum(sh, nb8, mx);
      sc.m[h] = mx;
      float* oh = sc.o.data() + static_cast<size_t>(h) * D;
      for (int c = 0; c < nc; ++c) store8(oh + 8 * c, load8(oh + 8 * c) * corr);
    }
    // o_h += sum_j p_hj v_j over the block's nb positions, a head at a time
    // (the query heads of a kv head read its slice of the block's V rows,
    // nb D floats, while it is in L1)
    for (int h = 0; h < H; ++h) {
      const float* sh = sc.s.data() + static_cast<size_t>(h) * bs8;
      const float* v = vb + static_cast<size_t>(h / group) * D;
      float* oh = sc.o.data() + static_cast<size_t>(h) * D;
      if constexpr (NC > 0) {
        // in panels of kPanel vectors held in registers; where a v8 is one
        // register, 8 / kPanel sets of accumulators (positions j mod
        // kSets), so that 8 FMA chains are in flight (D 16: 4 sets, D 32: 2)
        constexpr int kPanel = std::min(NC, kLanes >= 8 ? 8 : 4);  // a v8 is two SSE2 registers
        constexpr int kSets = kLanes >= 8 ? 8 / kPanel : 1;
        static_assert(NC % kPanel == 0 && kPanel * kSets <= 8, "whole panels, at most 8 accumulators");
        for (int c0 = 0; c0 < NC; c0 += kPanel) {
          v8 acc[kSets][kPanel] = {};
          int j = 0;
          for (; j + kSets <= nb; j += kSets)
#pragma GCC unroll 4
            for (int set = 0; set < kSets; ++set) {
              const v8 p = bcast(sh[j + set]);
#pragma GCC unroll 16
              for (int c = 0; c < kPanel; ++c) acc[set][c] += p * load8(v + (j + set) * row + 8 * (c0 + c));
            }
          for (; j < nb; ++j) {
            const v8 p = bcast(sh[j]);
#pragma GCC unroll 16
            for (int c = 0; c < kPanel; ++c) acc[0][c] += p * load8(v + j * row + 8 * (c0 + c));
          }
#pragma GCC unroll 16
          for (int c = 0; c < kPanel; ++c) {
            v8 sum = acc[0][c];
#pragma GCC unroll 4
            for (int set = 1; set < kSets; ++set) sum += acc[set][c];
            store8(oh + 8 * (c0 + c), load8(oh + 8 * (c0 + c)) + sum);
          }
        }
      } else {
        for (int c = 0; c < nc; ++c) {
          v8 acc = load8(oh + 8 * c);
          for (int j = 0; j < nb; ++j) acc += bcast(sh[j]) * load8(v + j * row + 8 * c);
          store8(oh + 8 * c, acc);
        }
      }
    }
  });
}

// Any head dimension: one position and head at a time.
void attend_row_scalar(const PagedAttentionArgs& a, int t, RowScratch& sc) {
  const int H = a.n_heads, D = a.head_dim, bs = a.block_size, group = a.n_heads / a.n_kv_heads;
  const size_t row = static_cast<size_t>(a.n_kv_heads) * D;
  const int bs8 = (bs + 7) / 8 * 8;
  attend_row(a, t, sc, [&](const float* kb, const float* vb, int nb) {
    for (int h = 0; h < H; ++h) {
      const float* qh = sc.q.data() + static_cast<size_t>(h) * D;
      const size_t kvh = static_cast<size_t>(h / group) * D;
      float* sh = sc.s.data() + static_cast<size_t>(h) * bs8;
      float mx = sc.m[h];
      for (int j = 0; j < nb; ++j) {
        const float* k = kb + j * row + kvh;
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) dot += qh[d] * k[d];
        sh[j] = dot;
        mx = std::max(mx, dot);
      }
      const float corr = fast_exp(sc.m[h] - mx);
      float sum = 0.0f;
      for (int j = 0; j < nb; ++j) sum += sh[j] = fast_exp(sh[j] - mx);
      sc.l[h] = sc.l[h] * corr + sum;
      sc.m[h] = mx;
      float* oh = sc.o.data() + static_cast<size_t>(h) * D;
      for (int d = 0; d < D; ++d) oh[d] *= corr;
      for (int j = 0; j < nb; ++j) {
        const float* v = vb + j * row + kvh;
        for (int d = 0; d < D; ++d) oh[d] += sh[j] * v[d];
      }
    }
  });
}

}  // namespace

void CpuBackend::paged_attention_fwd(const PagedAttentionArgs& a) {
  const int HD = a.n_heads * a.head_dim, bs8 = (a.block_size + 7) / 8 * 8;
  int64_t work = 0;  // multiply-adds, to keep small steps on one thread
  for (int t = 0; t < a.T; ++t) work += static_cast<int64_t>(a.position[t] + 1) * HD;
  void (*attend)(const PagedAttentionArgs&, int, RowScratch&) = attend_row_scalar;
  switch (a.head_dim) {
    case 16: attend = attend_row_vec<2>; break;
    case 32: attend = attend_row_vec<4>; break;
    case 64: attend = attend_row_vec<8>; break;
    case 128: attend = attend_row_vec<16>; break;
    default:
      if (a.head_dim % 8 == 0) attend = attend_row_vec<0>;
  }
#pragma omp parallel if (work > (int64_t{1} << 16))
  {
    RowScratch sc(a.n_heads, a.head_dim, bs8);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < a.T; ++t) attend(a, t, sc);
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
