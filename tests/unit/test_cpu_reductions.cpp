// The CPU backend's squared norm (Backend::sum_squares, the gradient norm
// that sets AdamW's clip scale): the same bits for any OpenMP thread count
// and on every call (an OpenMP reduction added its threads' sums in the order
// they finished), and within 1e-12 of a long-double sum.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend_registry.hpp"
#include "core/rng.hpp"

namespace forge {
namespace {

TEST(CpuReductions, SumSquaresIsTheSameForAnyThreadCount) {
  const auto backend = make_backend("cpu");
  Rng rng(11);
  std::vector<float> x(3'000'017);
  for (auto& v : x) v = static_cast<float>(rng.normal() * std::exp(4 * rng.uniform()));
  long double exact = 0;
  for (const float v : x) exact += static_cast<long double>(v) * v;

  const int before = set_compute_threads(0);
  set_compute_threads(1);
  const double one = backend->sum_squares(x.data(), x.size());
  EXPECT_NEAR(one, static_cast<double>(exact), 1e-12 * static_cast<double>(exact));
  for (const int threads : {2, 3, 8}) {
    set_compute_threads(threads);
    for (int call = 0; call < 20; ++call)
      ASSERT_EQ(backend->sum_squares(x.data(), x.size()), one) << threads << " threads, call " << call;
  }
  set_compute_threads(before);
}

}  // namespace
}  // namespace forge
