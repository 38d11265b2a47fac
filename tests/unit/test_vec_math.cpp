// The CPU kernels' vectorized exp (backend/cpu/vec_math.hpp) against std::exp
// in double over its whole range, compiled here at the build's baseline level
// (x86-64: no FMA, where rounding n ln 2 cost most): relative error at most
// 3e-7 (a one-float ln 2 gave 4.3e-6 at x = -72), exactly 0 below -87 and for
// -inf (masked scores), and finite at the top of the range.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

// The v8 helpers pass 32-byte vectors, whose calling convention differs
// without AVX; they are always inlined, as in the kernels.
#pragma GCC diagnostic ignored "-Wpsabi"
#define FORGE_CPU_NS cpu_vec_math_test
#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"
#include "backend/cpu/variant_end.hpp"

namespace forge {
namespace {

using cpu_vec_math_test::exp8;
using cpu_vec_math_test::v8;

TEST(VecMath, ExpIsWithinItsStatedErrorOverItsRange) {
  double worst = 0, worst_x = 0;
  for (double x0 = -87.0; x0 <= 88.0; x0 += 8 * 2.7e-4) {
    v8 x;
    for (int i = 0; i < 8; ++i) x[i] = static_cast<float>(x0 + i * 2.7e-4);
    const v8 e = exp8(x);
    for (int i = 0; i < 8 && x[i] <= 88.0f; ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      const double err = std::fabs(e[i] - ref) / ref;
      if (err > worst) worst = err, worst_x = x[i];
    }
  }
  EXPECT_LE(worst, 3e-7) << "at x = " << worst_x;
  const float inf = std::numeric_limits<float>::infinity();
  const v8 edges = exp8(v8{-inf, -1e30f, -87.5f, 0.0f, 88.0f, 1e30f, 1.0f, -1.0f});
  EXPECT_EQ(edges[0], 0.0f);
  EXPECT_EQ(edges[1], 0.0f);
  EXPECT_EQ(edges[2], 0.0f);
  EXPECT_NEAR(edges[3], 1.0f, 1e-7f);
  EXPECT_TRUE(std::isfinite(edges[4]));
  EXPECT_TRUE(std::isfinite(edges[5]));
  EXPECT_NEAR(edges[6], std::exp(1.0f), 3e-7f * std::exp(1.0f));
  EXPECT_NEAR(edges[7], std::exp(-1.0f), 3e-7f * std::exp(-1.0f));
}

}  // namespace
}  // namespace forge
