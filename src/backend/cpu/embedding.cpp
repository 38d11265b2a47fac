// Row gathers and scatters: the embedding lookup and its gradient, and the
// head rows of a bin (gather for the forward, scatter-add for the backward).
#include <omp.h>

#include <cstring>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

// The lookup is a gather of the table's rows.
void CpuBackend::embedding_fwd(const int32_t* tokens, const float* table, float* out, int T,
                               int d) {
  gather_rows(table, tokens, out, T, d);
}

void CpuBackend::embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T,
                               int d) {
  // Columns split across threads: rows of repeated tokens never race.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int c0 = d * id / nt, c1 = d * (id + 1) / nt;
    for (int t = 0; t < T; ++t) {
      float* dst = dtable + static_cast<size_t>(tokens[t]) * d;
      const float* src = dout + static_cast<size_t>(t) * d;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

void CpuBackend::gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) {
#pragma omp parallel for schedule(static) if (R > 256)
  for (int r = 0; r < R; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * d, src + static_cast<size_t>(rows[r]) * d,
                sizeof(float) * d);
}

void CpuBackend::scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R,
                                  int d) {
  // Rows are distinct (head rows are unique), so rows never race.
#pragma omp parallel for schedule(static) if (R > 256)
  for (int r = 0; r < R; ++r) {
    float* o = dst + static_cast<size_t>(rows[r]) * d;
    const float* s = src + static_cast<size_t>(r) * d;
#pragma omp simd
    for (int i = 0; i < d; ++i) o[i] += s[i];
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
