// FP32 LM head on the CPU, chunked over rows (kRowBlock) and the vocabulary
// (vocab_chunk): only a [rows, chunk] tile of logits exists at a time.
//
// Forward keeps, per row, the running max m, s = sum exp(z - m) and
// t = sum exp(z - m) z, so that lse = m + log s and entropy = lse - t / s.
// Backward of L = sum_e g_e logprob_e, with G_r = sum of g_e over row r:
//   dz_rv = inv_temperature * (sum_{e in r, target_e = v} g_e - G_r p_rv)
//   dH += dz W_chunk ;  dW_chunk += dz^T H
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/sgemm_library.hpp"

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {
namespace {
constexpr int kRowBlock = 256;

// tile[r][c] = inv_temperature * H[r0 + r] . W[v0 + c]
void logits_tile(Backend& b, const HeadArgs& a, int r0, int nr, int v0, int nc, float* tile) {
  b.gemm(false, true, nr, nc, a.d, a.inv_temperature, a.hidden + static_cast<size_t>(r0) * a.d, a.d,
         a.weight + static_cast<size_t>(v0) * a.d, a.d, 0.0f, tile, nc);
}

// The tile, kept between calls: a fresh one per call costs its page faults
// on every decode step.
float* tile_buffer(int rows, int chunk) {
  thread_local std::vector<float> tile;
  const size_t n = static_cast<size_t>(rows) * chunk;
  if (tile.size() < n) tile.resize(n);
  return tile.data();
}
}  // namespace

void CpuBackend::head_fwd(const HeadArgs& a) {
  const int chunk = std::max(1, std::min(a.vocab_chunk, a.V));
  const float ninf = -std::numeric_limits<float>::infinity();
  float* tile = tile_buffer(std::min(kRowBlock, a.R), chunk);
  std::vector<float> m(kRowBlock), s(kRowBlock), t(kRowBlock);
  for (int r0 = 0; r0 < a.R; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, a.R - r0);
    std::fill(m.begin(), m.end(), ninf);
    std::fill(s.begin(), s.end(), 0.0f);
    std::fill(t.begin(), t.end(), 0.0f);
    for (int v0 = 0; v0 < a.V; v0 += chunk) {
      const int nc = std::min(chunk, a.V - v0);
      logits_tile(*this, a, r0, nr, v0, nc, tile);
#pragma omp parallel for schedule(static) if (nr * nc > 16384)
      for (int r = 0; r < nr; ++r) {
        const float* z = tile + static_cast<size_t>(r) * nc;
        float mx = m[r];
        for (int c = 0; c < nc; ++c) mx = std::max(mx, z[c]);
        const float corr = std::exp(m[r] - mx);
        float ss = 0, tt = 0;
        for (int c = 0; c < nc; ++c) {
          const float e = std::exp(z[c] - mx);
          ss += e;
          tt += e * z[c];
        }
        s[r] = s[r] * corr + ss;
        t[r] = t[r] * corr + tt;
        m[r] = mx;
        const int row = r0 + r;
        if (a.logits)
          std::copy(z, z + nc, a.logits + static_cast<size_t>(row) * a.V + v0);
        if (a.row_begin)
          for (int e = a.row_begin[row]; e < a.row_begin[row + 1]; ++e) {
            const int tg = a.target[e];
            if (tg >= v0 && tg < v0 + nc) a.logprob[e] = z[tg - v0];  // minus lse below
          }
      }
    }
    for (int r = 0; r < nr; ++r) {
      const int row = r0 + r;
      const float lse = m[r] + std::log(s[r]);
      a.lse[row] = lse;
      if (a.entropy) a.entropy[row] = lse - t[r] / s[r];
      if (a.row_begin)
        for (int e = a.row_begin[row]; e < a.row_begin[row + 1]; ++e) a.logprob[e] -= lse;
    }
  }
}

void CpuBackend::head_bwd(const HeadArgs& a, const HeadGrads& g) {
  const int chunk = std::max(1, std::min(a.vocab_chunk, a.V));
  float* tile = tile_buffer(std::min(kRowBlock, a.R), chunk);
  std::fill(g.dhidden, g.dhidden + static_cast<size_t>(a.R) * a.d, 0.0f);
  for (int r0 = 0; r0 < a.R; r0 += kRowBlock) {
    const int nr = std::min(kRowBlock, a.R - r0);
    for (int v0 = 0; v0 < a.V; v0 += chunk) {
      const int nc = std::min(chunk, a.V - v0);
      logits_tile(*this, a, r0, nr, v0, nc, tile);
#pragma omp parallel for schedule(static) if (nr * nc > 16384)
      for (int r = 0; r < nr; ++r) {
        const int row = r0 + r;
        float* z = tile + static_cast<size_t>(r) * nc;
        float G = 0;
        for (int e = a.row_begin[row]; e < a.row_begin[row + 1]; ++e) G += g.dlogprob[e];
        const float lse = a.lse[row];
        for (int c = 0; c < nc; ++c) z[c] = -G * std::exp(z[c] - lse);
        for (int e = a.row_begin[row]; e < a.row_begin[row + 1]; ++e) {
          const int tg = a.target[e];
          if (tg >= v0 && tg < v0 + nc) z[tg - v0] += g.dlogprob[e];
        }
        for (int c = 0; c < nc; ++c) z[c] *= a.inv_temperature;
      }
      // dH[r0:r0+nr] += dz W[v0:v0+nc];  dW[v0:v0+nc] += dz^T H[r0:r0+nr]
      cpu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, a.d, nc, 1.0f, tile, nc,
                a.weight + static_cast<size_t>(v0) * a.d, a.d, 1.0f, g.dhidden + static_cast<size_t>(r0) * a.d, a.d);
      cpu_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, a.d, nr, 1.0f, tile, nc,
                a.hidden + static_cast<size_t>(r0) * a.d, a.d, 1.0f, g.dweight + static_cast<size_t>(v0) * a.d, a.d);
    }
  }
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
