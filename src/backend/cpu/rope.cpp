// Rotary position embedding: pairs (2i, 2i+1) of each head rotated by
// pos * inv_freq[i] (the angle and its sine and cosine in FP64, rounded to
// FP32); the inverse rotation is the backward.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                      const double* inv_freq, bool inverse) {
  const int half = head_dim / 2;
#pragma omp parallel
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        const double ang = pos[t] * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(ang));
        sn[i] = static_cast<float>(inverse ? -std::sin(ang) : std::sin(ang));
      }
      float* row = x + static_cast<size_t>(t) * ld;
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + h * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
