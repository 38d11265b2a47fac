// FP32 LM head on the CPU, chunked over rows (row_block) and the vocabulary
// (vocab_chunk): only a [rows, chunk] tile of logits exists at a time, 4 MiB
// at most for a chunk up to 4096 (256 rows at least: a larger chunk makes a
// larger tile); a small vocabulary takes up to 1024 rows a
// tile, so that its GEMMs are not a string of small ones (the reference
// model's head, V 272: head_fwd + head_bwd 6.9-7.0 ms a step with 256 rows,
// 6.0-6.1 with 1024; `bench_train_step --no-torch --rounds=1 --reps=3
// --profile`, three alternations on the Zen 5 with BLIS skx).
//
// Forward keeps, per row, the running statistics of softmax_moments.hpp
// (max m, s and t about m; entropy = log s - t / s: with t = sum e^(z-m) z,
// lse - t / s cancelled two numbers of the size of lse and a peaked row's
// entropy of 3e-6 came out 0), s and t in double across chunks.
// Backward of L = sum_e g_e logprob_e, with G_r = sum of g_e over row r:
//   dz_rv = inv_temperature * (sum_{e in r, target_e = v} g_e - G_r p_rv)
//   dH += dz W_chunk ;  dW_chunk += dz^T H
// The exponentials are vec_math.hpp's exp8 (relative error below 3e-7), 8
// logits at a time, with 8 partial sums per row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/sgemm_library.hpp"
#include "backend/softmax_moments.hpp"

#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"

namespace forge::FORGE_CPU_NS {
namespace {
constexpr int kTileFloats = 256 * 4096;

// Rows per tile for a vocabulary chunk of `chunk` columns: 256 to 1024.
int row_block(int chunk) { return std::clamp(kTileFloats / chunk, 256, 1024); }

// s = sum_c exp(z_c - mx), t = sum_c exp(z_c - mx) (z_c - mx).
void exp_sums(const float* z, int n, float mx, float* s, float* t) {
  v8 vs{}, vt{};
  int c = 0;
  for (; c + 8 <= n; c += 8) {
    const v8 x = load8(z + c) - mx;
    const v8 e = exp8(x);
    vs += e;
    vt += e * x;
  }
  float ss = hsum8(vs), tt = hsum8(vt);
  for (; c < n; ++c) {
    const float x = z[c] - mx;
    const float e = fast_exp(x);
    ss += e;
    tt += e * x;
  }
  *s = ss;
  *t = tt;
}

// z_c = scale exp(z_c - shift), in place.
void scaled_exp(float* z, int n, float shift, float scale) {
  int c = 0;
  for (; c + 8 <= n; c += 8) store8(z + c, exp8(load8(z + c) - shift) * scale);
  for (; c < n; ++c) z[c] = scale * fast_exp(z[c] - shift);
}

// tile[r][c] = inv_temperature * H[r0 + r] . W[v0 + c]
void logits_tile(Backend& b, const HeadArgs& a, int r0, int nr, int v0, int nc, float* tile) {
  b.gemm(false, true, nr, nc, a.d, a.inv_temperature, a.hidden + static_cast<size_t>(r0) * a.d, a.d,
         a.weight + static_cast<size_t>(v0) * a.d, a.d, 0.0f, tile, nc);
}

// The tile, kept between calls: a fresh one per call costs its page faults
// on every decode step.
thread_local std::vector<float> caller_tile;

float* tile_buffer(int rows, int chunk) {
  const size_t n = static_cast<size_t>(rows) * chunk;
  if (caller_tile.size() < n) caller_tile.resize(n);
  return caller_tile.data();
}
}  // namespace

size_t release_head_tile() {
  const size_t bytes = caller_tile.capacity() * sizeof(float);
  std::vector<float>().swap(caller_tile);
  return bytes;
}

void CpuBackend::head_fwd(const HeadArgs& a) {
  const int chunk = std::max(1, std::min(a.vocab_chunk, a.V));
  const float ninf = -std::numeric_limits<float>::infinity();
  const int rows = row_block(chunk);
  float* tile = tile_buffer(std::min(rows, a.R), chunk);
  // s and t in double: chunk sums of a peaked row's tail (1e-9 each) added
  // to s near 1 in float were lost below its last bit.
  std::vector<float> m(rows);
  std::vector<double> s(rows), t(rows);
  for (int r0 = 0; r0 < a.R; r0 += rows) {
    const int nr = std::min(rows, a.R - r0);
    std::fill(m.begin(), m.end(), ninf);
    std::fill(s.begin(), s.end(), 0.0);
    std::fill(t.begin(), t.end(), 0.0);
    for (int v0 = 0; v0 < a.V; v0 += chunk) {
      const int nc = std::min(chunk, a.V - v0);
      logits_tile(*this, a, r0, nr, v0, nc, tile);
#pragma omp parallel for schedule(static) if (nr * nc > 16384)
      for (int r = 0; r < nr; ++r) {
        const float* z = tile + static_cast<size_t>(r) * nc;
        const float mx = max_of(z, nc, m[r]);
        const double corr = std::exp(static_cast<double>(m[r]) - mx);
        float ss, tt;
        exp_sums(z, nc, mx, &ss, &tt);
        t[r] = rebased_moment(t[r], s[r], m[r], mx, corr) + tt;
        s[r] = s[r] * corr + ss;
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
      const float lse = static_cast<float>(m[r] + std::log(s[r]));
      a.lse[row] = lse;
      if (a.entropy) a.entropy[row] = static_cast<float>(std::log(s[r]) - t[r] / s[r]);
      if (a.row_begin)
        for (int e = a.row_begin[row]; e < a.row_begin[row + 1]; ++e) a.logprob[e] -= lse;
    }
  }
}

void CpuBackend::head_bwd(const HeadArgs& a, const HeadGrads& g) {
  const int chunk = std::max(1, std::min(a.vocab_chunk, a.V));
  const int rows = row_block(chunk);
  float* tile = tile_buffer(std::min(rows, a.R), chunk);
  std::fill(g.dhidden, g.dhidden + static_cast<size_t>(a.R) * a.d, 0.0f);
  for (int r0 = 0; r0 < a.R; r0 += rows) {
    const int nr = std::min(rows, a.R - r0);
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
        scaled_exp(z, nc, lse, -G);
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
