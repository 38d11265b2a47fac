// RMSNorm forward and backward:
//   y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps)
//   dx += rstd * (w*dy - x * rstd^2 * <w*dy, x> / d),  dw += sum_t dy * x * rstd
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T,
                             int d, float eps) {
#pragma omp parallel for schedule(static) if (T > 64)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * d;
    float* yr = y + static_cast<size_t>(t) * d;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float r = 1.0f / std::sqrt(ss / d + eps);
    rstd[t] = r;
#pragma omp simd
    for (int i = 0; i < d; ++i) yr[i] = xr[i] * r * w[i];
  }
}

void CpuBackend::rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                             float* dx, float* dw, int T, int d) {
  // dx = rstd * (w*dy - x * rstd^2 * <w*dy, x> / d);  dw += sum_t dy * x * rstd
  const int nt = omp_get_max_threads();
  std::vector<float> dw_part(static_cast<size_t>(nt) * d, 0.0f);
#pragma omp parallel
  {
    float* dwp = dw_part.data() + static_cast<size_t>(omp_get_thread_num()) * d;
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      const float* xr = x + static_cast<size_t>(t) * d;
      const float* dyr = dy + static_cast<size_t>(t) * d;
      float* dxr = dx + static_cast<size_t>(t) * d;
      const float r = rstd[t];
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < d; ++i) dot += w[i] * dyr[i] * xr[i];
      const float c = r * r * r * dot / d;
#pragma omp simd
      for (int i = 0; i < d; ++i) {
        dxr[i] += r * w[i] * dyr[i] - c * xr[i];
        dwp[i] += dyr[i] * xr[i] * r;
      }
    }
  }
  for (int p = 0; p < nt; ++p)
    for (int i = 0; i < d; ++i) dw[i] += dw_part[static_cast<size_t>(p) * d + i];
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
