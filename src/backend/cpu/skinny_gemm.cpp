// Skinny GEMM kernels (the math and the layout are in skinny_gemm.hpp).
#include "backend/cpu/skinny_gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/cpu/variant_begin.hpp"

// GCC 12's AVX-512 intrinsics start from undefined vectors (masked loads,
// setzero) and warn on them, as on sums[16..31] that no output reads.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The kernels are compiled into the variants built for AVX-512 (v4, or a
// native build on an AVX-512 machine: __AVX512F__ from -march=native), with
// 16-lane vectors, and into those built for AVX2 and FMA (v3, or native on
// such a machine), with 8-lane ones; a variant is chosen only on CPUs that
// run its instructions. The x86-64 variant has none and falls back to BLAS,
// so FORGE_CPU_KERNELS=x86-64 really is the baseline.
#if defined(FORGE_CPU_VARIANT_IS_x86_64_v4) || defined(__AVX512F__)
#define FORGE_SKINNY_LANES 16
#elif defined(FORGE_CPU_VARIANT_IS_x86_64_v3) || (defined(__AVX2__) && defined(__FMA__))
#define FORGE_SKINNY_LANES 8
#else
#define FORGE_SKINNY_LANES 0
#endif

namespace forge::FORGE_CPU_NS {
namespace {

#if FORGE_SKINNY_LANES == 16
// 16 lanes, 32 vector registers.
struct Vec {
  using T = __m512;
  static constexpr int kLanes = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T load_first(const float* p, int n) {  // lanes n.. zero and not read
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
  }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  // lane i of the result = the sum of the lanes of v[i], i < 16: a tree of
  // 15 adds, each half a zmm of one vector against the other half (128-bit
  // chunks, then within the chunks). The tree leaves lane 4c + k holding
  // u[4k + c], so it is fed u[4k + c] = v[4c + k].
  static T lane_sums(const T* v) {
    __m512 u[16], w[8], x[4], y[2];
    for (int i = 0; i < 16; ++i) u[i] = v[(i % 4) * 4 + i / 4];
    for (int i = 0; i < 8; ++i)  // chunks 0, 1: u[2i]; 2, 3: u[2i+1]
      w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; ++i)  // chunk c: u[4i + c]
      x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; ++i)
      y[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
    return _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
};
// Tiles: weight rows per dot tile of MR <= 4 rows; weight rows per tile of
// 5..8 rows; weight rows x activation rows per tile beyond 8 rows.
constexpr int kMinRows = 1;
constexpr int few_rows_nr(int MR) { return MR == 1 ? 16 : 24 / MR; }
constexpr int kRows8Nr = 16;
constexpr int kTileNr = 8, kTileMr = 32;
#elif FORGE_SKINNY_LANES == 8
// 8 lanes, 16 vector registers: only the tiles beyond 8 rows, and from
// kMinRows rows on. With fewer rows BLIS zen3 ran as fast or ahead on a
// Zen 1 (bench_decode_gemm: 0.63-1.01x for this file's kernels; docs/
// performance.md), likely through its small-matrix kernels, which do not
// pack and which skx lacks.
struct Vec {
  using T = __m256;
  static constexpr int kLanes = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
};
constexpr int kMinRows = 16;  // fewer rows: BLAS
constexpr int kTileNr = 6, kTileMr = 16;  // 12 accumulators, 2 rows of A^T, 1 broadcast
#endif

#if FORGE_SKINNY_LANES > 0
constexpr int L = Vec::kLanes;
using V = Vec::T;

// The calling thread's scratch for A^T, at least n floats; kept across calls
// (a decode step calls with the same shapes).
float* transposed_a_buffer(size_t n) {
  static thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

void store(float* c, float value, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * value : alpha * value + beta * *c;
}

#if FORGE_SKINNY_LANES == 16
constexpr int kFewRows = 8;  // up to here gemm_nt_few_rows, beyond gemm_nt

// M <= 4: the M activation rows dotted with NR weight rows at once
// (few_rows_nr), M x NR accumulators over k (L lanes, the tail masked), so
// each load of a weight row feeds M FMAs, W is read once per call and NR
// rows stream at once; then Vec::lane_sums of the accumulators. NR measured
// with bench_decode_gemm. Weight rows past nr repeat row 0 (valid memory);
// their sums are dropped.
template <int MR>
void dot_tile(int K, const float* A, int lda, const float* w, int ldw, int nr, float alpha, float beta, float* C,
              int ldc) {
  constexpr int NR = few_rows_nr(MR), NA = MR * NR, NS = (NA + L - 1) / L * L;
  const float* a[MR];
  const float* wr[NR];
  for (int m = 0; m < MR; ++m) a[m] = A + static_cast<size_t>(m) * lda;
  for (int j = 0; j < NR; ++j) wr[j] = w + static_cast<size_t>(j < nr ? j : 0) * ldw;
  V acc[NS];  // NA used; the rest stay 0 for the last lane_sums
  for (int i = 0; i < NS; ++i) acc[i] = Vec::zero();
  int k = 0;
  for (; k + L <= K; k += L) {
    V x[MR];
    for (int m = 0; m < MR; ++m) x[m] = Vec::load(a[m] + k);
    for (int j = 0; j < NR; ++j) {
      const V wk = Vec::load(wr[j] + k);
      for (int m = 0; m < MR; ++m) acc[m * NR + j] = Vec::fma(x[m], wk, acc[m * NR + j]);
    }
  }
  if (k < K) {
    V x[MR];
    for (int m = 0; m < MR; ++m) x[m] = Vec::load_first(a[m] + k, K - k);
    for (int j = 0; j < NR; ++j) {
      const V wk = Vec::load_first(wr[j] + k, K - k);
      for (int m = 0; m < MR; ++m) acc[m * NR + j] = Vec::fma(x[m], wk, acc[m * NR + j]);
    }
  }
  alignas(64) float sums[NS];
  for (int i = 0; i < NS; i += L) Vec::store(sums + i, Vec::lane_sums(acc + i));
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < nr; ++j) store(C + static_cast<size_t>(m) * ldc + j, sums[m * NR + j], alpha, beta);
}

template <int MR>
void gemm_nt_few(int N, int K, float alpha, const float* A, int lda, const float* W, int ldw, float beta, float* C,
                 int ldc) {
  constexpr int NR = few_rows_nr(MR);
  const int blocks = (N + NR - 1) / NR;
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * K * MR > 65536)
  for (int b = 0; b < blocks; ++b) {
    const int n0 = b * NR;
    dot_tile<MR>(K, A, lda, W + static_cast<size_t>(n0) * ldw, ldw, std::min(NR, N - n0), alpha, beta, C + n0, ldc);
  }
}

// 5 <= M <= 8: A transposed into A^T [K][8] (rows past M zero) and, per k,
// A^T[k][0:8] * broadcast(W[n][k]) accumulated for kRows8Nr weight rows in
// 8-lane registers: no reduction across lanes, and half the padding of
// gemm_nt.
void gemm_nt8(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw, float beta,
              float* C, int ldc) {
  constexpr int NR = kRows8Nr;
  float* At = transposed_a_buffer(static_cast<size_t>(K) * 8);
  for (int k = 0; k < K; ++k)
    for (int m = 0; m < 8; ++m) At[static_cast<size_t>(k) * 8 + m] = m < M ? A[static_cast<size_t>(m) * lda + k] : 0.0f;
  const int blocks = (N + NR - 1) / NR;
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * K * M > 65536)
  for (int b = 0; b < blocks; ++b) {
    const int n0 = b * NR, nr = std::min(NR, N - n0);
    const float* wr[NR];
    for (int j = 0; j < NR; ++j) wr[j] = W + static_cast<size_t>(n0 + (j < nr ? j : 0)) * ldw;
    __m256 acc[NR];
    for (int j = 0; j < NR; ++j) acc[j] = _mm256_setzero_ps();
    for (int k = 0; k < K; ++k) {
      const __m256 x = _mm256_loadu_ps(At + static_cast<size_t>(k) * 8);
      for (int j = 0; j < NR; ++j) acc[j] = _mm256_fmadd_ps(x, _mm256_set1_ps(wr[j][k]), acc[j]);
    }
    alignas(32) float out[NR][8];
    for (int j = 0; j < NR; ++j) _mm256_store_ps(out[j], acc[j]);
    for (int m = 0; m < M; ++m)
      for (int j = 0; j < nr; ++j) store(C + static_cast<size_t>(m) * ldc + n0 + j, out[j][m], alpha, beta);
  }
}

void gemm_nt_few_rows(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw, float beta,
                      float* C, int ldc) {
  switch (M) {
    case 1: return gemm_nt_few<1>(N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    case 2: return gemm_nt_few<2>(N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    case 3: return gemm_nt_few<3>(N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    case 4: return gemm_nt_few<4>(N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    default: return gemm_nt8(M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
  }
}
#endif

// M > 8 (AVX-512), M >= 16 (AVX2): out[j][m] = sum_k At[k][m] W[j][k] for NR
// weight rows and L MV activation rows (At padded, so full vectors are always
// in bounds).
template <int NR, int MV>
inline void broadcast_tile(int K, const float* At, int ldt, const float* w, int ldw, float* out) {
  V acc[NR][MV];
  for (int j = 0; j < NR; ++j)
    for (int v = 0; v < MV; ++v) acc[j][v] = Vec::zero();
  for (int k = 0; k < K; ++k) {
    V x[MV];
    for (int v = 0; v < MV; ++v) x[v] = Vec::load(At + static_cast<size_t>(k) * ldt + L * v);
    for (int j = 0; j < NR; ++j) {
      const V wk = Vec::set1(w[static_cast<size_t>(j) * ldw + k]);
      for (int v = 0; v < MV; ++v) acc[j][v] = Vec::fma(x[v], wk, acc[j][v]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int v = 0; v < MV; ++v) Vec::store(out + (j * MV + v) * L, acc[j][v]);
}

template <int NR>
void tile_rows(int mv, int K, const float* At, int ldt, const float* w, int ldw, float* out) {
  if (mv == 2) broadcast_tile<NR, 2>(K, At, ldt, w, ldw, out);
  else broadcast_tile<NR, 1>(K, At, ldt, w, ldw, out);
}

void gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw, float beta, float* C,
             int ldc) {
  constexpr int NR = kTileNr, MT = kTileMr;  // weight rows x activation rows per tile (MT = 2 L)
  const int Mp = (M + L - 1) / L * L;
  float* At = transposed_a_buffer(static_cast<size_t>(K) * Mp);
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
        const int mv = std::min(MT, Mp - m0) / L, width = L * mv;
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
#endif  // FORGE_SKINNY_LANES > 0

}  // namespace

bool skinny_gemm_nt(int M, int N, int K, float alpha, const float* A, int lda, const float* W, int ldw,
                    float beta, float* C, int ldc) {
#if FORGE_SKINNY_LANES > 0
  if (M < kMinRows || M > kSkinnyMaxRows || K < 1) return false;
#if FORGE_SKINNY_LANES == 16
  if (M <= kFewRows) {
    gemm_nt_few_rows(M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
    return true;
  }
#endif
  gemm_nt(M, N, K, alpha, A, lda, W, ldw, beta, C, ldc);
  return true;
#else
  (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)W, (void)ldw, (void)beta, (void)C, (void)ldc;
  return false;
#endif
}

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
