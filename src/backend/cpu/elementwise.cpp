// Elementwise operations, bf16 packing (core/bf16.hpp) and the squared norm,
// OpenMP loops (large arrays only: below 65536 elements a thread team costs
// more than it saves).
#include "backend/cpu/cpu_backend.hpp"

#include "core/bf16.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::fill(float* x, float value, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::add_inplace(float* y, const float* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::pack_bf16(const float* src, uint16_t* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

void CpuBackend::unpack_bf16(const uint16_t* src, float* dst, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

double CpuBackend::sum_squares(const float* x, size_t n) {
  // simd: partial sums a lane (same for the same thread count); a scalar
  // chain of dependent double adds ran at 8 GB/s
  double total = 0;
#pragma omp parallel for simd reduction(+ : total) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
