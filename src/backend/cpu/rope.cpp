// Rotary position embedding: pairs (2i, 2i+1) of each head rotated by
// pos * inv_freq[i] (the angle and its sine and cosine in FP64, rounded to
// FP32); the inverse rotation is the backward. The rounded cosines and sines
// are kept in a table per calling thread for positions 0 up to the largest
// seen (grown by doubling, at most kTablePositions; rebuilt when inv_freq
// changes), so that a step's many calls do not recompute them; the table
// holds exactly what the direct computation gives.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {
namespace {

constexpr int kTablePositions = 1 << 16;

struct RopeTable {
  std::vector<double> inv_freq;  // what the table was built for
  int positions = 0;
  std::vector<float> cs, sn;  // [positions][half]
};

inline void angle(const double* inv_freq, int half, int pos, float* cs, float* sn) {
  for (int i = 0; i < half; ++i) {
    const double ang = pos * inv_freq[i];
    cs[i] = static_cast<float>(std::cos(ang));
    sn[i] = static_cast<float>(std::sin(ang));
  }
}

// The calling thread's table, covering positions [0, max_pos]; nullptr when
// max_pos is beyond kTablePositions (the caller then computes directly, as
// for negative positions).
const RopeTable* rope_table(const double* inv_freq, int half, int max_pos) {
  if (max_pos >= kTablePositions) return nullptr;
  static thread_local RopeTable table;
  if (!std::equal(inv_freq, inv_freq + half, table.inv_freq.begin(), table.inv_freq.end())) {
    table.inv_freq.assign(inv_freq, inv_freq + half);
    table.positions = 0;
  }
  if (max_pos >= table.positions) {
    const int n = std::min(kTablePositions, std::max(max_pos + 1, 2 * table.positions));
    table.cs.resize(static_cast<size_t>(n) * half);
    table.sn.resize(static_cast<size_t>(n) * half);
    for (int p = table.positions; p < n; ++p)
      angle(inv_freq, half, p, table.cs.data() + static_cast<size_t>(p) * half,
            table.sn.data() + static_cast<size_t>(p) * half);
    table.positions = n;
  }
  return &table;
}

}  // namespace

void CpuBackend::rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                      const double* inv_freq, bool inverse) {
  const int half = head_dim / 2;
  int min_pos = 0, max_pos = 0;
  for (int t = 0; t < T; ++t) min_pos = std::min(min_pos, pos[t]), max_pos = std::max(max_pos, pos[t]);
  const RopeTable* table = min_pos < 0 ? nullptr : rope_table(inv_freq, half, max_pos);
#pragma omp parallel
  {
    std::vector<float> cs_own(half), sn_own(half);
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      const float* cs = cs_own.data();
      const float* sn = sn_own.data();
      if (table) {
        cs = table->cs.data() + static_cast<size_t>(pos[t]) * half;
        sn = table->sn.data() + static_cast<size_t>(pos[t]) * half;
      } else {
        angle(inv_freq, half, pos[t], cs_own.data(), sn_own.data());
      }
      const float sign = inverse ? -1.0f : 1.0f;
      float* row = x + static_cast<size_t>(t) * ld;
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + h * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1], s = sign * sn[i];
          v[2 * i] = a * cs[i] - b * s;
          v[2 * i + 1] = a * s + b * cs[i];
        }
      }
    }
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
