// Vectorized float math for the CPU kernels, written with GCC/Clang vector
// extensions (v8: 8 floats; vf: the variant's widest vector) so that it
// compiles to SIMD on any x86-64 level.
//
// exp8(x) = 2^n * e^g with n = round(x log2 e) (by the 1.5 * 2^23 rounding
// trick, which also leaves n in the low mantissa bits) and g = x - n ln 2,
// |g| <= ln2 / 2, e^g by a degree-6 Taylor polynomial: relative error below
// 2e-7 on [-87, 88]; exactly 0 below -87 (masked scores are -inf).
//
// Included after variant_begin.hpp: these helpers are compiled per variant.
#pragma once
#include <algorithm>
#include <cstdint>

namespace forge::FORGE_CPU_NS {

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));
typedef int32_t v8i __attribute__((vector_size(32)));

inline v8 load8(const float* p) { return *reinterpret_cast<const v8u*>(p); }
inline void store8(float* p, v8 v) { *reinterpret_cast<v8u*>(p) = v; }
// x in every lane. Spelled x - 0, which is x for every x: 0 + x is not (it
// is +0 for x = -0), so GCC computed it, a scalar add before each
// broadcast (and the broadcast from a register, a shuffle, where x - 0 is a
// broadcast load): in the attention's products that took FP ports from the
// FMAs.
inline v8 bcast(float x) { return x - v8{}; }

// The variant's float register as a vector (vf, kLanes floats): 16 with
// AVX-512, 8 with AVX2, 4 in the SSE2 baseline. kAccumulators: how many vf
// accumulators a register-blocked product may keep, leaving registers for its
// operands: 16 of AVX-512's 32 (FMAs broadcast from memory), 12 of the 16
// that AVX2 and SSE2 have.
#if defined(FORGE_CPU_VARIANT_IS_x86_64_v4) || defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kAccumulators = 16;
#elif defined(FORGE_CPU_VARIANT_IS_x86_64_v3) || defined(__AVX2__)
constexpr int kLanes = 8;
constexpr int kAccumulators = 12;
#else
constexpr int kLanes = 4;
constexpr int kAccumulators = 12;
#endif
typedef float vf __attribute__((vector_size(4 * kLanes)));
typedef float vfu __attribute__((vector_size(4 * kLanes), aligned(4)));
inline vf loadv(const float* p) { return *reinterpret_cast<const vfu*>(p); }
inline void storev(float* p, vf v) { *reinterpret_cast<vfu*>(p) = v; }
inline vf bcastv(float x) { return x - vf{}; }  // as bcast

inline v8 exp8(v8 x) {
  const v8i underflow = x < -87.0f;
  x = x > 88.0f ? bcast(88.0f) : x;
  x = underflow ? bcast(-87.0f) : x;
  const v8 magic = bcast(12582912.0f);  // 1.5 * 2^23
  const v8 r = x * 1.44269504088896341f + magic;
  const v8 n = r - magic;
  const v8 g = x - n * 0.693147180559945309f;
  v8 p = bcast(1.0f / 720.0f);
  p = p * g + 1.0f / 120.0f;
  p = p * g + 1.0f / 24.0f;
  p = p * g + 1.0f / 6.0f;
  p = p * g + 0.5f;
  p = p * g + 1.0f;
  p = p * g + 1.0f;
  const v8i ni = __builtin_bit_cast(v8i, r) - __builtin_bit_cast(v8i, magic);
  const v8i bits = (ni + 127) << 23;
  const v8 result = p * __builtin_bit_cast(v8, bits);
  return underflow ? v8{} : result;
}

// Scalar form (same arithmetic) for tails and single values.
inline float fast_exp(float x) { return exp8(bcast(x))[0]; }

// max(init, x[0..n)), 8 lanes at a time.
inline float max_of(const float* x, int n, float init) {
  v8 m = bcast(init);
  int j = 0;
#pragma GCC unroll 8
  for (; j + 8 <= n; j += 8) {
    const v8 v = load8(x + j);
    m = m > v ? m : v;
  }
  float r = m[0];
  for (int l = 1; l < 8; ++l) r = std::max(r, m[l]);
  for (; j < n; ++j) r = std::max(r, x[j]);
  return r;
}

// exp over n floats in place; returns their sum.
inline float exp_inplace_sum(float* x, int n, float shift) {
  v8 sum{};
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const v8 e = exp8(load8(x + j) - shift);
    store8(x + j, e);
    sum += e;
  }
  float s = 0;
  for (int l = 0; l < 8; ++l) s += sum[l];
  for (; j < n; ++j) s += x[j] = fast_exp(x[j] - shift);
  return s;
}

}  // namespace forge::FORGE_CPU_NS
