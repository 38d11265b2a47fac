// The CPU kernels' exp (backend/cpu/vec_math.hpp) compiled at x86-64-v3, as
// the v3 kernels run it (FMA contracts its polynomial; expw steps by 8 lanes),
// against std::exp in double: the bound test_vec_math.cpp checks at the
// baseline level, 3e-7 relative, holds there too (it was measured once by a
// one-off build), and so do the range's edges. Skipped on a CPU without
// x86-64-v3. (x86-64-v4's 16-lane expw: test_cpu_variants.cpp's softmax
// cases against the baseline at 1e-5.)
#include <gtest/gtest.h>

#include <algorithm>  // vec_math.hpp's headers, at the baseline (variant_begin.hpp)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#pragma GCC diagnostic ignored "-Wpsabi"
#define FORGE_CPU_NS cpu_vec_math_v3_test
#define FORGE_CPU_VARIANT_IS_x86_64_v3 1
#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"
#include "unit/vec_math_error.hpp"
#include "backend/cpu/variant_end.hpp"

#include "backend/cpu/cpu_isa.hpp"

namespace forge {
namespace {

TEST(VecMath, ExpIsWithinItsStatedErrorAtX86_64V3) {
  if (detect_cpu_level() < CpuLevel::kV3) GTEST_SKIP() << "this CPU does not run x86-64-v3";
  const auto r = cpu_vec_math_v3_test::exp_error();
  EXPECT_LE(r.worst, 3e-7) << "at x = " << r.at;
  char worst[32];
  std::snprintf(worst, sizeof worst, "%.2e", r.worst);
  RecordProperty("worst_relative_error", worst);
  EXPECT_GT(r.worst, 0.0);  // the error was measured, not skipped
  EXPECT_TRUE(r.edges_hold);
}

}  // namespace
}  // namespace forge
