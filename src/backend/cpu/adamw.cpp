// AdamW with bias correction and decoupled weight decay:
//   m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,
//   p = p (1 - lr wd) - lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
#include <cmath>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::adamw(float* param, const float* grad, float* m, float* v, size_t n,
                       const AdamWParams& p) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(p.step));
  const float step_size = p.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - p.lr * p.weight_decay;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * p.grad_scale;
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    param[i] = param[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + p.eps);
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
