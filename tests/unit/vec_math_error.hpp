// The worst relative error of the CPU kernels' exp (exp8, and expw at the
// variant's widest vector) against std::exp in double over [-87, 88], and
// whether the range's edges hold (0 below -87 and for -inf, finite above).
// Included between variant_begin.hpp and variant_end.hpp of a test file that
// sets FORGE_CPU_NS and the level (test_vec_math_levels.cpp), so that it is
// compiled at that level as the kernels are.
#include <cmath>
#include <limits>

namespace forge::FORGE_CPU_NS {

struct ExpError {
  double worst = 0, at = 0;
  bool edges_hold = true;
};

[[gnu::noinline]] inline ExpError exp_error() {
  ExpError r;
  const auto check = [&](float x, float e) {
    const double ref = std::exp(static_cast<double>(x));
    const double err = std::fabs(e - ref) / ref;
    if (err > r.worst) r.worst = err, r.at = x;
  };
  for (double x0 = -87.0; x0 <= 88.0; x0 += kWideLanes * 2.7e-4) {
    v8 x8;
    vw xw;
    for (int i = 0; i < 8; ++i) x8[i] = static_cast<float>(x0 + i * 2.7e-4);
    for (int i = 0; i < kWideLanes; ++i) xw[i] = static_cast<float>(x0 + i * 2.7e-4);
    const v8 e8 = exp8(x8);
    const vw ew = expw(xw);
    for (int i = 0; i < 8; ++i)
      if (x8[i] <= 88.0f) check(x8[i], e8[i]);
    for (int i = 0; i < kWideLanes; ++i)
      if (xw[i] <= 88.0f) check(xw[i], ew[i]);
  }
  const float inf = std::numeric_limits<float>::infinity();
  const v8 edges = exp8(v8{-inf, -1e30f, -87.5f, 0.0f, 88.0f, 1e30f, 1.0f, -1.0f});
  r.edges_hold = edges[0] == 0.0f && edges[1] == 0.0f && edges[2] == 0.0f && std::isfinite(edges[4]) &&
                 std::isfinite(edges[5]);
  return r;
}

}  // namespace forge::FORGE_CPU_NS
