// MPI counts are int: a transfer of n elements goes in pieces of at most
// `most` (INT_MAX unless given; clamped to [1, INT_MAX]), each as
// fn(offset, count), in order; offsets + counts cover [0, n) exactly.
// n = 0: no call.
#pragma once
#include <algorithm>
#include <climits>
#include <cstddef>

namespace forge {

// The most bytes one MPI call moves here: 1 GiB. MPI counts are int, and
// implementations count a transfer's or a collective's bytes in int inside
// too, so a count of INT_MAX floats (8 GiB) is not safe where one of bytes is.
inline constexpr size_t kMpiPieceBytes = size_t{1} << 30;

template <class F>
void for_int_pieces(size_t n, F&& fn, size_t most = INT_MAX) {
  most = std::clamp<size_t>(most, 1, INT_MAX);
  for (size_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min(n - done, most));
    fn(done, count);
    done += static_cast<size_t>(count);
  }
}

}  // namespace forge
