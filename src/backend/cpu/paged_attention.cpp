// Paged KV cache on the CPU: writing new k/v rows into their slots, and
// attention of query rows over their own sequence's cached positions.
//
// Attention, per query row t and head h, with P = position[t] + 1 visible
// positions read block by block through the row's block table:
//   s_j = (scale q) . k_j ;  online softmax: m' = max(m, max_j s_j),
//   l' = l e^{m - m'} + sum_j e^{s_j - m'},  o' = o e^{m - m'} + sum_j e^{s_j - m'} v_j
// and out = o / l. A thread takes a query row and all its heads, so each
// cached k/v row (all kv heads, contiguous within a block) is streamed once
// per query (and the next block prefetched while one is computed); rows of
// one step have different lengths, so they are scheduled dynamically.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

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

void CpuBackend::paged_attention_fwd(const PagedAttentionArgs& a) {
  const int T = a.T, H = a.n_heads, D = a.head_dim, bs = a.block_size;
  const int group = a.n_heads / a.n_kv_heads;
  const size_t row = static_cast<size_t>(a.n_kv_heads) * D;
  const int HD = H * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const float ninf = -std::numeric_limits<float>::infinity();
  const float* k_cache = static_cast<const float*>(a.k_cache);
  const float* v_cache = static_cast<const float*>(a.v_cache);
  int64_t work = 0;  // multiply-adds, to keep small steps on one thread
  for (int t = 0; t < T; ++t) work += static_cast<int64_t>(a.position[t] + 1) * HD;

#pragma omp parallel if (work > (int64_t{1} << 16))
  {
    std::vector<float> q(HD), o(HD), s(static_cast<size_t>(H) * bs), m(H), l(H);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < T; ++t) {
      const float* qr = a.q + static_cast<size_t>(t) * a.ld_q;
      for (int i = 0; i < HD; ++i) q[i] = qr[i] * scale;
      std::fill(o.begin(), o.end(), 0.0f);
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int32_t* table = a.block_table + a.table_begin[t];
      const int n = a.position[t] + 1;
      for (int p0 = 0; p0 < n; p0 += bs) {
        const int nb = std::min(bs, n - p0);
        const size_t base = static_cast<size_t>(table[p0 / bs]) * bs * row;
        const float* kb = k_cache + base;
        const float* vb = v_cache + base;
        if (p0 + bs < n) {  // prefetch the next block, a cache line (16 floats) at a time
          const size_t next = static_cast<size_t>(table[p0 / bs + 1]) * bs * row;
          const int nn = std::min(bs, n - p0 - bs);
          for (size_t i = 0; i < nn * row; i += 16) {
            __builtin_prefetch(k_cache + next + i);
            __builtin_prefetch(v_cache + next + i);
          }
        }
        for (int j = 0; j < nb; ++j) {
          const float* k = kb + j * row;
          for (int h = 0; h < H; ++h) {
            const float* kh = k + static_cast<size_t>(h / group) * D;
            const float* qh = q.data() + static_cast<size_t>(h) * D;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < D; ++d) dot += qh[d] * kh[d];
            s[static_cast<size_t>(h) * bs + j] = dot;
          }
        }
        for (int h = 0; h < H; ++h) {
          float* sh = s.data() + static_cast<size_t>(h) * bs;
          float mx = m[h];
          for (int j = 0; j < nb; ++j) mx = std::max(mx, sh[j]);
          const float corr = std::exp(m[h] - mx);  // 0 on the first block (m = -inf)
          float sum = 0.0f;
          for (int j = 0; j < nb; ++j) sum += sh[j] = std::exp(sh[j] - mx);
          l[h] = l[h] * corr + sum;
          m[h] = mx;
          float* oh = o.data() + static_cast<size_t>(h) * D;
#pragma omp simd
          for (int d = 0; d < D; ++d) oh[d] *= corr;
        }
        for (int j = 0; j < nb; ++j) {
          const float* v = vb + j * row;
          for (int h = 0; h < H; ++h) {
            const float p = s[static_cast<size_t>(h) * bs + j];
            const float* vh = v + static_cast<size_t>(h / group) * D;
            float* oh = o.data() + static_cast<size_t>(h) * D;
#pragma omp simd
            for (int d = 0; d < D; ++d) oh[d] += p * vh[d];
          }
        }
      }
      float* out = a.out + static_cast<size_t>(t) * HD;
      for (int h = 0; h < H; ++h) {
        const float inv = 1.0f / l[h];
        for (int d = 0; d < D; ++d) out[h * D + d] = o[h * D + d] * inv;
      }
    }
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
