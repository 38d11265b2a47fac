// Vectorized float math for the CPU kernels, written with GCC/Clang vector
// extensions (v8: 8 floats; vf: the variant's widest vector; vw: the wider
// of the two) so that it compiles to SIMD on any x86-64 level.
//
// exp_lanes(x) (exp8, expw) = 2^n * e^g with n = round(x log2 e) (by the 1.5 * 2^23 rounding
// trick, which also leaves n in the low mantissa bits) and g = x - n ln 2,
// |g| <= ln2 / 2 (ln 2 in two parts), e^g by a degree-6 Taylor polynomial:
// relative error below 3e-7 on [-87, 88] (measured 2.5e-7 at the x86-64
// level by tests/unit/test_vec_math.cpp, 2.3e-7 at x86-64-v3 by
// test_vec_math_levels.cpp); exactly 0 below
// -87 (masked scores are -inf).
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

// exp over the lanes of any float vector V (I: the int32 vector of its
// width). Always inlined: as a call, its vector arguments and every live
// vector register of the caller (all caller-saved) crossed the call.
template <class V, class I>
[[gnu::always_inline]] inline V exp_lanes(V x) {
  const auto splat = [](float c) { return c - V{}; };
  const I underflow = x < -87.0f;
  x = x > 88.0f ? splat(88.0f) : x;
  x = underflow ? splat(-87.0f) : x;
  const V magic = splat(12582912.0f);  // 1.5 * 2^23
  const V r = x * 1.44269504088896341f + magic;
  const V n = r - magic;
  // ln 2 in two parts (Cody-Waite): n * kLn2High is exact for |n| <= 2^14, so
  // g keeps its low bits where one float ln 2 lost them at large |x| (4e-6
  // relative error without FMA).
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  const V g = (x - n * kLn2High) - n * kLn2Low;
  V p = splat(1.0f / 720.0f);
  p = p * g + 1.0f / 120.0f;
  p = p * g + 1.0f / 24.0f;
  p = p * g + 1.0f / 6.0f;
  p = p * g + 0.5f;
  p = p * g + 1.0f;
  p = p * g + 1.0f;
  const I ni = __builtin_bit_cast(I, r) - __builtin_bit_cast(I, magic);
  const I bits = (ni + 127) << 23;
  const V result = p * __builtin_bit_cast(V, bits);
  return underflow ? V{} : result;
}

[[gnu::always_inline]] inline v8 exp8(v8 x) { return exp_lanes<v8, v8i>(x); }

// The widest vector the softmax loops step by: vf where it holds at least 8
// floats (AVX-512: 16, AVX2: 8), else v8. A multiple of 8 lanes, so a loop
// over a multiple of 8 floats ends in at most one v8 step. Same arithmetic
// per lane as exp8: results do not depend on the width.
constexpr int kWideLanes = kLanes > 8 ? kLanes : 8;
typedef float vw __attribute__((vector_size(4 * kWideLanes)));
typedef float vwu __attribute__((vector_size(4 * kWideLanes), aligned(4)));
typedef int32_t vwi __attribute__((vector_size(4 * kWideLanes)));
inline vw loadw(const float* p) { return *reinterpret_cast<const vwu*>(p); }
inline void storew(float* p, vw v) { *reinterpret_cast<vwu*>(p) = v; }
inline vw bcastw(float x) { return x - vw{}; }  // as bcast
[[gnu::always_inline]] inline vw expw(vw x) { return exp_lanes<vw, vwi>(x); }

// Sum and max of a v8's lanes by halving (3 dependent steps, where a running
// scalar sum chains 8): (l0 + l4 + l2 + l6) + (l1 + l5 + l3 + l7) pairwise.
typedef float v4 __attribute__((vector_size(16)));
inline float hsum8(v8 v) {
  const v4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  const v4 b = a + __builtin_shufflevector(a, a, 2, 3, 0, 1);
  return b[0] + b[1];
}
inline float hmax8(v8 v) {
  const v4 lo = __builtin_shufflevector(v, v, 0, 1, 2, 3), hi = __builtin_shufflevector(v, v, 4, 5, 6, 7);
  const v4 a = lo > hi ? lo : hi;
  const v4 a2 = __builtin_shufflevector(a, a, 2, 3, 0, 1);
  const v4 b = a > a2 ? a : a2;
  return std::max(b[0], b[1]);
}

// Scalar form (same arithmetic) for tails and single values.
[[gnu::always_inline]] inline float fast_exp(float x) { return exp8(bcast(x))[0]; }

// max(init, x[0..n)), 8 lanes at a time.
inline float max_of(const float* x, int n, float init) {
  v8 m = bcast(init);
  int j = 0;
#pragma GCC unroll 8
  for (; j + 8 <= n; j += 8) {
    const v8 v = load8(x + j);
    m = m > v ? m : v;
  }
  float r = hmax8(m);
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
  float s = hsum8(sum);
  for (; j < n; ++j) s += x[j] = fast_exp(x[j] - shift);
  return s;
}

}  // namespace forge::FORGE_CPU_NS
