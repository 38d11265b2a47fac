// Skinny GEMM kernels (the math and the layout are in skinny_gemm.hpp).
#include "backend/cpu/skinny_gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cpu/variant_begin.hpp"

// _mm512_reduce_add_ps starts from an undefined vector; GCC 12 warns on it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace forge::FORGE_CPU_NS {
namespace {

#define FORGE_AVX512 __attribute__((target("avx512f")))

// The AVX-512 kernels run in the variants built for AVX-512 only (v4, or a
// native build on an AVX-512 machine: __AVX512F__ from -march=native), which
// are chosen only on CPUs that have it; the x86-64 and v3 variants fall back
// to BLAS, so FORGE_CPU_KERNELS=x86-64 really is the baseline.
#if defined(FORGE_CPU_VARIANT_IS_x86_64_v4) || defined(__AVX512F__)
constexpr bool kVariantHasAvx512 = true;
#else
constexpr bool kVariantHasAvx512 = false;
#endif

void store(float* c, float value, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * value : alpha * value + beta * *c;
}

// M = 1: NR weight rows dotted with the one activation row, 16 lanes at a time
// (the tail masked), then reduced across lanes.
template <int NR>
FORGE_AVX512 inline void dot_rows(int K, const float* a, const float* w, int ldw, float* out) {
  __m512 acc[NR];
  for (int j = 0; j < NR; ++j) acc[j] = _mm512_setzero_ps();
  int k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 x = _mm512_loadu_ps(a + k);
    for (int j = 0; j < NR; ++j)
      acc[j] = _mm512_fmadd_ps(x, _mm512_loadu_ps(w + static_cast<size_t>(j) * ldw + k), acc[j]);
  }
  if (k < K) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (K - k)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(mask, a + k);
    for (int j = 0; j < NR; ++j)
      acc[j] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, w + static_cast<size_t>(j) * ldw + k), acc[j]);
  }
  for (int j = 0; j < NR; ++j) out[j] = _mm512_reduce_add_ps(acc[j]);
}

FORGE_AVX512 void gemv_nt(int N, int K, float alpha, const float* a, const float* W, int ldw, float beta,
                          float* c) {
  constexpr int NR = 8;
  const int blocks = (N + NR - 1) / NR;
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * K > 65536)
  for (int b = 0; b < blocks; ++b) {
    const int n0 = b * NR, nr = std::min(NR, N - n0);
    float out[NR];
    if (nr == NR) dot_rows<NR>(K, a, W + static_cast<size_t>(n0) * ldw, ldw, out);
    else
      for (int j = 0; j < nr; ++j) dot_rows<1>(K, a, W + static_cast<size_t>(n0 + j) * ldw, ldw, out + j);
    for (int j = 0; j < nr; ++j) store(c + n0 + j, out[j], alpha, beta);
  }
}

// M > 1: out[j][m] = sum_k At[k][m] W[j][k] for NR weight rows and 16 MV
// activation rows (At padded, so full vectors are always in bounds).
template <int NR, int MV>
FORGE_AVX512 inline void broadcast_tile(int K, const float* At, int ldt, const float* w, int ldw, float* out) {
  __m512 acc[NR][MV];
  for (int j = 0; j < NR; ++j)
    for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m512 x[MV];
    for (int v = 0; v < MV; ++v) x[v] = _mm512_loadu_ps(At + static_cast<size_t>(k) * ldt + 16 * v);
    for (int j = 0; j < NR; ++j) {
      const __m512 wk = _mm512_set1_ps(w[static_cast<size_t>(j) * ldw + k]);
      for (int v = 0; v < MV; ++v) acc[j][v] = _mm512_fmadd_ps(x[v], wk, acc[j][v]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int v = 0; v < MV; ++v) _mm512_storeu_ps(out + (j * MV + v) * 16, acc[j][v]);
}

template <int NR>
FORGE_AVX512 void tile_rows(int mv, int K, const float* At, int ldt, const float* w, int ldw, float* out) {
  if (mv == 2) broadcast_tile<NR, 2>(K, At, ldt, w, ldw, out);
  else broadcast_tile<NR, 1>(K, At, ldt, w, ldw, out);
}

FORGE_AVX512 void gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw,
                          float beta, float* C, int ldc) {
  constexpr int NR = 8, MT = 32;  // weight rows x activation rows per tile
  const int Mp = (M + 15) / 16 * 16;
  // A^T, reused across calls (the decode step calls this with the same shapes).
  thread_local std::vector<float> at_buffer;
  if (at_buffer.size() < static_cast<size_t>(K) * Mp) at_buffer.resize(static_cast<size_t>(K) * Mp);
  float* At = at_buffer.data();
  const int blocks = (N + NR - 1) / NR, k_blocks = (K + 15) / 16;
#pragma omp parallel
  {
    // A^T in blocks of 16 k: contiguous reads of A, 16 write streams.
#pragma omp for schedule(static)
    for (int kb = 0; kb < k_blocks; ++kb) {
      const int k0 = kb * 16, k1 = std::min(K, k0 + 16);
      for (int m = 0; m < Mp; ++m)
        for (int k = k0; k < k1; ++k) At[static_cast<size_t>(k) * Mp + m] = m < M ? A[static_cast<size_t>(m) * lda + k] : 0.0f;
    }
#pragma omp for schedule(static)
    for (int b = 0; b < blocks; ++b) {
      alignas(64) float out[NR * MT];
      const int n0 = b * NR, nr = std::min(NR, N - n0);
      const float* w = W + static_cast<size_t>(n0) * ldw;
      for (int m0 = 0; m0 < Mp; m0 += MT) {
        const int mv = std::min(MT, Mp - m0) / 16, width = 16 * mv;
        if (nr == NR) tile_rows<NR>(mv, K, At + m0, Mp, w, ldw, out);
        else
          for (int j = 0; j < nr; ++j)
            tile_rows<1>(mv, K, At + m0, Mp, w + static_cast<size_t>(j) * ldw, ldw, out + j * width);
        for (int m = m0; m < std::min(M, m0 + width); ++m)
          for (int j = 0; j < nr; ++j)
            store(C + static_cast<size_t>(m) * ldc + n0 + j, out[j * width + m - m0], alpha, beta);
      }
    }
  }
}

}  // namespace

bool skinny_gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw,
                    float beta, float* C, int ldc) {
  if (M < 1 || M > kSkinnyMaxRows || K < 1 || !kVariantHasAvx512) return false;
  if (M == 1) gemv_nt(N, K, alpha, A, W, ldw, beta, C);
  else gemm_nt(M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
  return true;
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
