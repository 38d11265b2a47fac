// The pieces of an MPI transfer (mpi_roles/int_pieces.hpp): in order, each
// at most the limit and never above INT_MAX, covering [0, n) exactly; the
// batch broadcast, the gradient sum and the weight channel go through it.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "mpi_roles/int_pieces.hpp"

using namespace forge;

namespace {

std::vector<std::pair<size_t, int>> pieces(size_t n, size_t most) {
  std::vector<std::pair<size_t, int>> out;
  for_int_pieces(n, [&](size_t offset, int count) { out.emplace_back(offset, count); }, most);
  return out;
}

}  // namespace

TEST(IntPieces, CoverTheRangeInOrderWithinTheLimit) {
  EXPECT_TRUE(pieces(0, 4).empty());
  EXPECT_EQ(pieces(3, 4), (std::vector<std::pair<size_t, int>>{{0, 3}}));
  EXPECT_EQ(pieces(8, 4), (std::vector<std::pair<size_t, int>>{{0, 4}, {4, 4}}));
  EXPECT_EQ(pieces(10, 4), (std::vector<std::pair<size_t, int>>{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(pieces(2, 0), (std::vector<std::pair<size_t, int>>{{0, 1}, {1, 1}}));  // a limit of 0 is 1
  // Past 2^31 elements (a batch of 5 GiB): INT_MAX at most, whatever was asked.
  const size_t n = (size_t{5} << 30) + 7;
  size_t next = 0;
  for (const auto& [offset, count] : pieces(n, SIZE_MAX)) {
    EXPECT_EQ(offset, next);
    EXPECT_GT(count, 0);
    next += static_cast<size_t>(count);
  }
  EXPECT_EQ(next, n);
  EXPECT_EQ(pieces(n, SIZE_MAX).front().second, INT_MAX);
}
