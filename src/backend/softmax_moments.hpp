// The running statistics of a softmax row that the FP32 heads (cpu and cuda)
// fold column by column: the max m, s = sum e^(z - m) and
// t = sum e^(z - m) (z - m), so that lse = m + log s and
// entropy = log s - t / s (no cancellation at the size of lse).
// Re-expressed about a larger max m' (scale = e^(m - m')):
//   s' = scale s,  t' = scale (t + (m - m') s),
// and (0, 0) while s is 0 (m was -inf, whose (m - m') s would be NaN).
#pragma once
#include "backend/host_device.hpp"

namespace forge {

FORGE_HOST_DEVICE inline double rebased_moment(double t, double s, double m, double m_new, double scale) {
  return s > 0.0 ? scale * (t + (m - m_new) * s) : 0.0;
}

}  // namespace forge
