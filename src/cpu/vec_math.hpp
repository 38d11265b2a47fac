// Vectorizable float math for the CPU kernels. fast_exp(x) = 2^n * 2^f with
// n = round(x log2 e) and a degree-6 polynomial for 2^f, f in [-1/2, 1/2]:
// relative error below 2e-7 on [-87, 88]; exactly 0 for x < -87 (so masked
// scores, set to -inf, give 0). Written as plain arithmetic so that GCC
// vectorizes it inside `omp simd` loops.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace forge {


inline float fast_exp(float x) {
  const bool underflow = x < -87.0f;
  x = x > 88.0f ? 88.0f : (underflow ? -87.0f : x);
  const float t = x * 1.44269504088896341f;
  const float n = std::floor(t + 0.5f);
  const float f = (t - n) * 0.693147180559945309f;  // e^f with |f| <= ln2 / 2
  float p = 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : p * scale;
}

}  // namespace forge
