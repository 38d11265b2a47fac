// Elementwise operations, bf16 packing (core/bf16.hpp) and the squared norm,
// OpenMP loops (large arrays only: below 65536 elements a thread team costs
// more than it saves).
#include "backend/cpu/cpu_backend.hpp"

#include <algorithm>
#include <vector>

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
  // Fixed chunks, each summed in simd lanes (a scalar chain of dependent
  // double adds ran at 8 GB/s), the chunks' sums then added in chunk order:
  // the same bits for any thread count and call. An OpenMP reduction adds
  // its threads' partial sums in the order they finish (it gave 3 different
  // gradient norms in 200 calls at 8 threads).
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = begin; i < end; ++i) s += static_cast<double>(x[i]) * x[i];
    part[c] = s;
  }
  double total = 0;
  for (const double p : part) total += p;
  return total;
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
