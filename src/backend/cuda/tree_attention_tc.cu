// Tree-masked attention on tensor cores, forward and backward: bf16 Q, K,
// V (and dO, P, dS as MMA operands); FP32 scores, softmax statistics,
// accumulators, lse, O and gradients. The math and the mask are
// tree_attention.cuh's: query i sees key j iff j <= i < subtree_end[j];
// out_i = sum_j softmax_j(scale q_i . k_j) v_j, lse_i = log sum_j exp(...).
//
// All kernels: blocks of 4 warps, each warp 16 rows (the MMA's M) of a
// 64-row tile; the other side in 32-row tiles, the pre-pass's key tiles
// (tile_max_end, tile_min_end). A block skips a tile no row of its 64
// sees; a warp skips one none of its 16 rows sees (the other side of the
// diagonal, or past every subtree end); the mask is not evaluated where the
// tile is visible to all of a warp's rows. Shared memory holds bf16 tiles
// row-major, [rows][Dk + 8] (Dk = D rounded up to 16, zero-padded; the
// padding of 8 makes the 8 row addresses of an ldmatrix fall into distinct
// banks), and every fragment comes from them by ldmatrix: A fragments and
// the B operand of a product with a tile as X^T plain, the B operand of a
// product with a tile as Y (P V, dS K, P^T dO, dS^T Q) with .trans. Rows
// past T are zero and masked, so no NaN enters an MMA. mma.cuh has the
// instructions and their fragments. The tiles the backward streams (key
// tiles in dQ, query tiles in dK/dV) are double-buffered: the next tile's
// global loads are in flight in registers while the current one is computed
// on, then stored into the other buffer; one __syncthreads a tile. The
// forward loads its key tiles between two barriers: double-buffered it ran
// no faster at D 128 and 30% slower at D 64 on an H200 (its registers grew
// from 166 to 199, two resident blocks per SM instead of three;
// docs/cuda.md, "Measured on an H200").
//
// Every kernel is a template on the head-dim class, D <= 64 or <= 128
// (HeadDims): fragments and accumulators in registers are sized for it, so
// D 64 runs more resident blocks per SM (docs/cuda.md lists them).
//
// Forward, block = (64 queries, head):
//   S (16 x 32) = Q_w K^T, Q_w's fragments in registers for the whole kernel;
//   online softmax in base 2 on S scale log2(e): row max over the quad of
//   lanes that share a row (two shuffles), P = 2^(S - m), running l from
//   the FP32 P, O rescaled by 2^(m_old - m_new);
//   O (16 x Dk) += P V: P rounded to bf16 and reused from the S registers as
//   the A operand (D's layout of two n8 groups is A's of one k16 step).
//   out = O / l; lse = m ln 2 + ln l.
// Backward, no atomics (deterministic), delta_i = dO_i . O_i from a pre-pass:
//   dK/dV, block = (64 keys, kv head), warp = 16 keys; for every head of the
//     group and every 32-query tile in [k0, tile_max_end):
//     S^T = K_w Q^T, dP^T = V_w dO^T (K_w, V_w fragments read per step),
//     P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - delta),
//     dV += P^T dO, dK += scale dS^T Q.
//   dQ, block = (64 queries, head): the forward's loop over key tiles,
//     S = Q_w K^T, dP = dO_w V^T (Q_w, dO_w fragments in registers),
//     dS = P (dP - delta), dQ += scale dS K.
// Precision: against FP32 attention on the bf16-rounded Q, K, V, the extra
// roundings are P's in the forward and dO's, P's and dS's in the backward
// (as in FlashAttention-2 in bf16).
#include "backend/cuda/mma.cuh"
#include "backend/cuda/tree_attention.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr int kWarpRows = 16;                        // MMA M
constexpr int kQueryTile = kWarpRows * kAttnWarps;  // 64
constexpr int kKeys = kAttnTile;                     // 32 keys per key tile
constexpr int kKeyTile = kWarpRows * kAttnWarps;    // 64 keys per dK/dV block
constexpr int kQueries = kAttnTile;                  // 32 queries per dK/dV step
constexpr int kKeyGroups = kKeys / 8;                // MMA N groups of S
constexpr int kPad = 8;                              // bf16 of padding per row
constexpr unsigned kThreads = 32 * kAttnWarps;

// The kernels are compiled for head dims up to 64 and up to 128 (the
// launchers pick by D): register arrays sized for the class, so a D 64
// model keeps half the fragments and accumulators of a D 128 one.
template <int MaxD>
struct HeadDims {
  static_assert(MaxD % 16 == 0 && MaxD <= kMaxHeadDim);
  static constexpr int steps = MaxD / 16;   // MMA K steps of Q K^T
  static constexpr int groups = MaxD / 8;   // MMA N groups of O
  static constexpr int chunks = kAttnTile * MaxD / 8 / int(kThreads);  // 16-byte loads a thread per 32-row tile
  // resident blocks per SM the register budget is set for (ptxas, no spills)
  static constexpr int fwd_blocks = MaxD <= 64 ? 5 : 1, bwd_blocks = MaxD <= 64 ? 3 : 1;
};
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__host__ __device__ __forceinline__ int padded_dim(int D) { return (D + 15) / 16 * 16; }

// Eight bf16, one 16-byte load or store.
struct alignas(16) Bf16x8 {
  uint32_t w[4];
};

__device__ __forceinline__ bool vector_rows(int D, int ld) { return (D & 7) == 0 && (ld & 7) == 0; }

// Columns [d, d + 8) of row r (16 bytes; zero past T and from D on).
__device__ __forceinline__ Bf16x8 row_chunk(const __nv_bfloat16* src, int ld, int r, int d, int T, int D) {
  Bf16x8 x{};
  if (r < T && d < D) x = *reinterpret_cast<const Bf16x8*>(src + size_t(r) * ld + d);
  return x;
}

// Key j's subtree end, 0 past T (a tile's rows past T see nothing).
__device__ __forceinline__ int32_t subtree_end_or_zero(const TreeAttentionParams& p, int j) {
  return j < p.T ? p.subtree_end[j] : 0;
}

// Rows [r0, r0 + rows) of one head (D columns from src, row stride ld) into
// dst [rows][pitch] as bf16 bit patterns. Zero past T and in columns
// [D, Dk). 16-byte loads and stores when D and ld are multiples of 8 (then
// every row start is aligned).
__device__ __forceinline__ void load_rows(uint16_t* dst, int pitch, const __nv_bfloat16* src, int ld, int r0,
                                          int rows, int T, int D, int Dk) {
  if (vector_rows(D, ld)) {
    const int chunks = Dk / 8;
    for (int e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
      const int i = e / chunks, d = (e % chunks) * 8;
      *reinterpret_cast<Bf16x8*>(dst + i * pitch + d) = row_chunk(src, ld, r0 + i, d, T, D);
    }
    return;
  }
  for (int e = threadIdx.x; e < rows * Dk; e += blockDim.x) {
    const int i = e / Dk, d = e % Dk;
    dst[i * pitch + d] = r0 + i < T && d < D ? __bfloat16_as_ushort(src[size_t(r0 + i) * ld + d]) : uint16_t(0);
  }
}

// The A fragments of 16 rows (from rows [16][pitch], bf16), k16 step `step`:
// one ldmatrix, lane l giving row l % 16 at column 16 step + 8 (l / 16).
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* rows, int pitch, int step, int lane) {
  ldmatrix_x4(a, rows + (lane % 16) * pitch + 16 * step + (lane / 16) * 8);
}

// acc[n] += A X_n^T for the four groups of 8 rows of X ([32][pitch], rows
// are the MMA's N), k16 step `step`: a 16 x 32 product. One ldmatrix per two
// groups; matrix m = lane / 8 is rows 8 (2 np + m / 2) .. + 7 at column
// 16 step + 8 (m % 2): registers 0, 1 are group 2 np's B, 2, 3 group 2 np + 1's.
__device__ __forceinline__ void mma_rows32(float (&acc)[4][4], const uint32_t (&a)[4], const uint16_t* x,
                                           int pitch, int step, int lane) {
  const int m = lane / 8;
#pragma unroll
  for (int np = 0; np < 2; ++np) {
    uint32_t b[4];
    ldmatrix_x4(b, x + ((2 * np + m / 2) * 8 + lane % 8) * pitch + 16 * step + (m % 2) * 8);
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    mma_bf16_m16n8k16(acc[2 * np], a, b0);
    mma_bf16_m16n8k16(acc[2 * np + 1], a, b1);
  }
}

// out (16 x Dk) += P Y, P (16 x 32) in the accumulator layout of mma_rows32
// (rounded to bf16 as the A operand: D's layout of two n8 groups is A's of
// one k16 step), Y (32 x Dk) row-major [32][pitch], read with ldmatrix.trans:
// matrix m = lane / 8 is rows 16 kk + 8 (m % 2) .. + 7 at columns
// 8 (2 dp + m / 2): registers 0, 1 are column group 2 dp's B, 2, 3 group 2 dp + 1's.
template <int G>
__device__ __forceinline__ void mma_times_rows(float (&out)[G][4], const float (&P)[4][4],
                                               const uint16_t* y, int pitch, int dim_groups, int lane) {
  const int m = lane / 8;
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const uint32_t a[4] = {pack_bf16x2(P[2 * kk][0], P[2 * kk][1]), pack_bf16x2(P[2 * kk][2], P[2 * kk][3]),
                           pack_bf16x2(P[2 * kk + 1][0], P[2 * kk + 1][1]),
                           pack_bf16x2(P[2 * kk + 1][2], P[2 * kk + 1][3])};
    const uint16_t* r = y + (16 * kk + (m % 2) * 8 + lane % 8) * pitch + (m / 2) * 8;
#pragma unroll
    for (int dp = 0; dp < G / 2; ++dp)
      if (2 * dp < dim_groups) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, r + 16 * dp);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_bf16_m16n8k16(out[2 * dp], a, b0);
        mma_bf16_m16n8k16(out[2 * dp + 1], a, b1);
      }
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Writes rows r0 + g and r0 + g + 8 (those below r1) of a 16 x Dk
// accumulator times mul: dst + row * ld, columns below D.
template <int G>
__device__ __forceinline__ void store_rows(float* dst, size_t ld, const float (&acc)[G][4],
                                           int r0, int r1, int D, float mul0, float mul1, int g, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r0 + g + 8 * r;
    if (i >= r1) continue;
    float* row = dst + size_t(i) * ld;
#pragma unroll
    for (int n = 0; n < G; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = n * 8 + 2 * t + c;
        if (d < D) row[d] = acc[n][2 * r + c] * (r ? mul1 : mul0);
      }
  }
}

// Lane's element c of key group n of a 16 x 32 tile of (query, key) pairs:
// row g + 8 (c / 2), column 8 n + 2 t + c % 2.
__device__ __forceinline__ int frag_row(int g, int c) { return g + (c >> 1) * 8; }
__device__ __forceinline__ int frag_col(int n, int t, int c) { return n * 8 + 2 * t + (c & 1); }

// Software pipelining: the next 32-row tile's global loads are issued into
// registers (stage_rows) before the current tile is computed on, and stored
// into the other of two shared buffers (commit_rows) after, so that their
// latency hides behind the MMAs, with one __syncthreads per tile: the
// writes of buffer b ^ 1 and the reads of buffer b then never overlap.
// 32 rows of Dk bf16 in 16-byte chunks over the block's threads: at most C
// chunks a thread (HeadDims::chunks). Where D or ld is not a multiple of 8
// (no 16-byte loads), commit_rows loads the rows itself, element by element.
template <int C>
struct StagedRows {
  Bf16x8 x[C];
};

// Issues the loads of rows [r0, r0 + 32) (zero past T and in columns
// [D, Dk)) into s.
template <int C>
__device__ __forceinline__ void stage_rows(StagedRows<C>& s, const __nv_bfloat16* src, int ld, int r0, int T, int D,
                                           int Dk) {
  if (!vector_rows(D, ld)) return;
  const int chunks = Dk / 8;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int e = int(threadIdx.x) + j * int(kThreads), i = e / chunks, d = (e % chunks) * 8;
    s.x[j] = i < kAttnTile ? row_chunk(src, ld, r0 + i, d, T, D) : Bf16x8{};
  }
}

// Stores the staged rows into dst [32][pitch] (or loads them there).
template <int C>
__device__ __forceinline__ void commit_rows(uint16_t* dst, int pitch, const StagedRows<C>& s, const __nv_bfloat16* src,
                                            int ld, int r0, int T, int D, int Dk) {
  if (!vector_rows(D, ld)) {
    load_rows(dst, pitch, src, ld, r0, kAttnTile, T, D, Dk);
    return;
  }
  const int chunks = Dk / 8;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    const int e = int(threadIdx.x) + j * int(kThreads), i = e / chunks, d = (e % chunks) * 8;
    if (i < kAttnTile) *reinterpret_cast<Bf16x8*>(dst + i * pitch + d) = s.x[j];
  }
}

// Two buffers of a key tile in shared memory: K [32][qp], V [32][qp] and
// the keys' subtree ends [32] each.
struct KeyTiles {
  uint16_t* kv;
  int32_t* ends;
  int qp;
  __device__ uint16_t* K(int b) const { return kv + b * 2 * kKeys * qp; }
  __device__ uint16_t* V(int b) const { return K(b) + kKeys * qp; }
  __device__ int32_t* se(int b) const { return ends + b * kKeys; }
};

template <int C>
struct StagedKeys {
  StagedRows<C> k, v;
  int end;
};

// Key tile [k0, k0 + 32) of kv head kvh: stage, then commit into buffer b.
template <int C>
__device__ __forceinline__ void stage_keys(StagedKeys<C>& s, const TreeAttentionParams& p, const __nv_bfloat16* k,
                                           const __nv_bfloat16* v, int ld, int kvh, int k0, int Dk) {
  stage_rows(s.k, k + kvh * p.head_dim, ld, k0, p.T, p.head_dim, Dk);
  stage_rows(s.v, v + kvh * p.head_dim, ld, k0, p.T, p.head_dim, Dk);
  s.end = threadIdx.x < kKeys ? subtree_end_or_zero(p, k0 + int(threadIdx.x)) : 0;
}
template <int C>
__device__ __forceinline__ void commit_keys(const KeyTiles& tiles, int b, const StagedKeys<C>& s,
                                            const TreeAttentionParams& p, const __nv_bfloat16* k,
                                            const __nv_bfloat16* v, int ld, int kvh, int k0, int Dk) {
  commit_rows(tiles.K(b), tiles.qp, s.k, k + kvh * p.head_dim, ld, k0, p.T, p.head_dim, Dk);
  commit_rows(tiles.V(b), tiles.qp, s.v, v + kvh * p.head_dim, ld, k0, p.T, p.head_dim, Dk);
  if (threadIdx.x < kKeys) tiles.se(b)[threadIdx.x] = s.end;
}

// Key tile [k0, k0 + 32) of one kv head into Ks and Vs ([32][Dk + 8] each)
// and its subtree ends into se; the caller syncs before and after.
__device__ __forceinline__ void load_key_tile(uint16_t* Ks, uint16_t* Vs, int32_t* se, const TreeAttentionParams& p,
                                              const __nv_bfloat16* k, const __nv_bfloat16* v, int ld, int kvh, int k0,
                                              int Dk) {
  const int D = p.head_dim;
  load_rows(Ks, Dk + kPad, k + kvh * D, ld, k0, kKeys, p.T, D, Dk);
  load_rows(Vs, Dk + kPad, v + kvh * D, ld, k0, kKeys, p.T, D, Dk);
  if (threadIdx.x < kKeys) se[threadIdx.x] = subtree_end_or_zero(p, k0 + int(threadIdx.x));
}

// Whether query i (below w1) sees key k0 + jj of the loaded tile (jj below
// nk, se its subtree ends; full: the tile is visible to all the warp's rows).
__device__ __forceinline__ bool sees(int i, int w1, int k0, int jj, int nk, bool full, const int32_t* se) {
  return i < w1 && jj < nk && (full || (k0 + jj <= i && i < se[jj]));
}

// Whether any of the query rows [w0, w1) sees a key of 32-key tile kt (not
// when the tile starts past the last row or every key's subtree ends by w0).
__device__ __forceinline__ bool rows_see_tile(const TreeAttentionParams& p, int kt, int w0, int w1) {
  return w0 < w1 && kt * kKeys <= w1 - 1 && p.tile_max_end[kt] > w0;
}

template <int MaxD>
__global__ void __launch_bounds__(kThreads, HeadDims<MaxD>::fwd_blocks)
    tree_attention_fwd_tc_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                 const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                 int ld) {
  FORGE_SHARED_MEMORY(uint16_t, smem);
  const int D = p.head_dim, Dk = padded_dim(D), HD = p.n_heads * D;
  const int qp = Dk + kPad;
  uint16_t* Qs = smem;                  // [64][qp]
  uint16_t* Ks = Qs + kQueryTile * qp;  // [32][qp]
  uint16_t* Vs = Ks + kKeys * qp;       // [32][qp]
  int32_t* se = reinterpret_cast<int32_t*>(Vs + kKeys * qp);  // [32]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = blockIdx.x * kQueryTile, q1 = min(p.T, q0 + kQueryTile);
  const int w0 = q0 + warp * kWarpRows, w1 = min(q1, w0 + kWarpRows);  // this warp's rows
  const int steps = Dk / 16, dim_groups = Dk / 8;
  const float scale2 = p.scale * kLog2e;

  load_rows(Qs, qp, q + h * D, ld, q0, kQueryTile, p.T, D, Dk);
  __syncthreads();
  uint32_t qf[HeadDims<MaxD>::steps][4];
#pragma unroll
  for (int st = 0; st < HeadDims<MaxD>::steps; ++st)
    if (st < steps) load_a(qf[st], Qs + warp * kWarpRows * qp, qp, st, lane);

  float o[HeadDims<MaxD>::groups][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8, base 2

  const int last = (q1 - 1) / kKeys;
  // key tiles some query of the block may see
  for (int kt = seen_key_tile_from(p, 0, last, q0); kt <= last; kt = seen_key_tile_from(p, kt + 1, last, q0)) {
    const int k0 = kt * kKeys, nk = min(p.T, k0 + kKeys) - k0;
    __syncthreads();  // the previous tile is no longer read
    load_key_tile(Ks, Vs, se, p, k, v, ld, kvh, k0, Dk);
    __syncthreads();
    if (!rows_see_tile(p, kt, w0, w1)) continue;  // warp-uniform
    const bool full = tile_all_visible(p, kt, w0, w1);

    float s[kKeyGroups][4];
    zero(s);
#pragma unroll
    for (int st = 0; st < HeadDims<MaxD>::steps; ++st)
      if (st < steps) mma_rows32(s, qf[st], Ks, qp, st, lane);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool vis = sees(w0 + frag_row(g, c), w1, k0, frag_col(n, t, c), nk, full, se);
        s[n][c] = vis ? s[n][c] * scale2 : -INFINITY;
        mx[c >> 1] = fmaxf(mx[c >> 1], s[n][c]);
      }
    float corr[2], mref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullWarp, mx[r], 1));  // the quad shares the row
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullWarp, mx[r], 2));
      const float mn = fmaxf(m[r], mx[r]);
      mref[r] = mn == -INFINITY ? 0.0f : mn;  // a row that saw nothing yet
      corr[r] = exp2f(m[r] - mref[r]);
      m[r] = mn;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[n][c] = exp2f(s[n][c] - mref[c >> 1]);
        l[c >> 1] += s[n][c];
      }
#pragma unroll
    for (int n = 0; n < HeadDims<MaxD>::groups; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
    mma_times_rows(o, s, Vs, qp, dim_groups, lane);
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullWarp, l[r], 1);
    l[r] += __shfl_xor_sync(kFullWarp, l[r], 2);
    const int i = w0 + g + 8 * r;
    if (t == 0 && i < w1) p.lse[size_t(h) * p.T + i] = m[r] * kLn2 + logf(l[r]);
  }
  store_rows(p.out + h * D, HD, o, w0, w1, D, 1.0f / l[0], 1.0f / l[1], g, t);
}

// dK and dV of a 64-key tile of one kv head; warp w owns keys k0 + 16 w ..
// k0 + 16 w + 15 (the MMA's M). For every head of the group and every
// 32-query tile in [k0, tile_max_end) -- the steps, pipelined as above --
// with Q and dO row-major in shared memory (read plain as the B operand of
// S^T = K Q^T and dP^T = V dO^T, with .trans as that of dK += dS^T Q and
// dV += P^T dO):
//   P^T = 2^(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - delta).
// K and V fragments are read from shared memory per step (registers hold
// the two 16 x Dk accumulators).
template <int C>
struct StagedQueries {
  StagedRows<C> q, dout;
  float lse2, delta;
};

// Step (h, q0): query tile [q0, q0 + 32) of head h, its lse (base 2) and delta.
template <int C>
__device__ __forceinline__ void stage_queries(StagedQueries<C>& s, const TreeAttentionParams& p,
                                              const __nv_bfloat16* q, int ld, int h, int q0, int Dk) {
  const int D = p.head_dim;
  stage_rows(s.q, q + h * D, ld, q0, p.T, D, Dk);
  stage_rows(s.dout, p.dout_bf16 + h * D, p.n_heads * D, q0, p.T, D, Dk);
  const bool in = threadIdx.x < kQueries && q0 + int(threadIdx.x) < p.T;
  s.lse2 = in ? p.lse[size_t(h) * p.T + q0 + threadIdx.x] * kLog2e : 0.0f;
  s.delta = in ? p.delta[size_t(h) * p.T + q0 + threadIdx.x] : 0.0f;
}

template <int MaxD>
__global__ void __launch_bounds__(kThreads, HeadDims<MaxD>::bwd_blocks)
    tree_attention_dkdv_tc_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                  const __nv_bfloat16* __restrict__ k,
                                  const __nv_bfloat16* __restrict__ v, int ld) {
  FORGE_SHARED_MEMORY(uint16_t, smem);
  const int D = p.head_dim, Dk = padded_dim(D), HD = p.n_heads * D;
  const int qp = Dk + kPad;
  uint16_t* Ks = smem;                // [64][qp]
  uint16_t* Vs = Ks + kKeyTile * qp;  // [64][qp]
  uint16_t* QO = Vs + kKeyTile * qp;  // buffer b: Q at QO + 2 b [32][qp], dO after it
  float* stats = reinterpret_cast<float*>(QO + 4 * kQueries * qp);  // buffer b: lse2 [32], delta [32]
  const auto Qs = [&](int b) { return QO + 2 * b * kQueries * qp; };
  const auto dOs = [&](int b) { return Qs(b) + kQueries * qp; };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int kvh = blockIdx.y, group = p.n_heads / p.n_kv_heads;
  const int k0 = blockIdx.x * kKeyTile;
  const int w0 = k0 + warp * kWarpRows, w1 = min(p.T, w0 + kWarpRows);  // this warp's keys
  const int kt_w = w0 / kAttnTile;  // the pre-pass's tile holding them
  const int steps = Dk / 16, dim_groups = Dk / 8;
  const float scale2 = p.scale * kLog2e;

  int se[2];  // subtree ends of keys w0 + g and w0 + g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) se[r] = subtree_end_or_zero(p, w0 + g + 8 * r);
  int q_end = 0;  // queries at or past it see none of the block's keys
  for (int kt = k0 / kAttnTile; kt * kAttnTile < min(p.T, k0 + kKeyTile); ++kt)
    q_end = max(q_end, p.tile_max_end[kt]);
  const int w_end = w0 < w1 ? p.tile_max_end[kt_w] : 0;

  // Steps: heads h of the group, query tiles q0 in [k0, q_end).
  const int h_end = (kvh + 1) * group;
  int h = k0 < q_end ? kvh * group : h_end, q0 = k0;
  const auto commit = [&](int b, const StagedQueries<HeadDims<MaxD>::chunks>& s, int sh, int sq0) {
    commit_rows(Qs(b), qp, s.q, q + sh * D, ld, sq0, p.T, D, Dk);
    commit_rows(dOs(b), qp, s.dout, p.dout_bf16 + sh * D, HD, sq0, p.T, D, Dk);
    if (threadIdx.x < kQueries) {
      stats[2 * b * kQueries + threadIdx.x] = s.lse2;
      stats[(2 * b + 1) * kQueries + threadIdx.x] = s.delta;
    }
  };
  load_rows(Ks, qp, k + kvh * D, ld, k0, kKeyTile, p.T, D, Dk);
  load_rows(Vs, qp, v + kvh * D, ld, k0, kKeyTile, p.T, D, Dk);
  if (h < h_end) {
    StagedQueries<HeadDims<MaxD>::chunks> s;
    stage_queries(s, p, q, ld, h, q0, Dk);
    commit(0, s, h, q0);
  }
  __syncthreads();

  float dk[HeadDims<MaxD>::groups][4], dv[HeadDims<MaxD>::groups][4];
  zero(dk);
  zero(dv);
  for (int b = 0; h < h_end; b ^= 1) {
    int nh = h, nq0 = q0 + kQueries;
    if (nq0 >= q_end) ++nh, nq0 = k0;
    StagedQueries<HeadDims<MaxD>::chunks> next{};
    if (nh < h_end) stage_queries(next, p, q, ld, nh, nq0, Dk);
    const int nq = min(p.T, q0 + kQueries) - q0;
    // warp-uniform: a query of the tile sees this warp's keys
    if (w0 < w1 && q0 < w_end && q0 + nq - 1 >= w0) {
      const bool full = tile_all_visible(p, kt_w, q0, q0 + nq);
      const float* lse2 = stats + 2 * b * kQueries;
      const float* delta = lse2 + kQueries;
      float s[4][4], dp[4][4];  // S^T and dP^T: 16 keys x 32 queries
      zero(s);
      zero(dp);
#pragma unroll
      for (int st = 0; st < HeadDims<MaxD>::steps; ++st)
        if (st < steps) {
          uint32_t a[4];
          load_a(a, Ks + warp * kWarpRows * qp, qp, st, lane);
          mma_rows32(s, a, Qs(b), qp, st, lane);
          load_a(a, Vs + warp * kWarpRows * qp, qp, st, lane);
          mma_rows32(dp, a, dOs(b), qp, st, lane);
        }
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int j = w0 + frag_row(g, c), ii = frag_col(n, t, c), i = q0 + ii;
          const bool vis = j < w1 && ii < nq && (full || (j <= i && i < se[c >> 1]));
          const float pv = vis ? exp2f(s[n][c] * scale2 - lse2[ii]) : 0.0f;
          s[n][c] = pv;
          dp[n][c] = pv * (dp[n][c] - delta[ii]);
        }
      mma_times_rows(dv, s, dOs(b), qp, dim_groups, lane);
      mma_times_rows(dk, dp, Qs(b), qp, dim_groups, lane);
    }
    if (nh < h_end) commit(b ^ 1, next, nh, nq0);
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
    h = nh;
    q0 = nq0;
  }
  store_rows(p.dk + kvh * D, p.ld_qkv, dk, w0, w1, D, p.scale, p.scale, g, t);
  store_rows(p.dv + kvh * D, p.ld_qkv, dv, w0, w1, D, 1.0f, 1.0f, g, t);
}

// dQ of a 64-query tile of one head; warp w owns rows q0 + 16 w .. + 15.
// The forward's loop over key tiles (pipelined the same way), with K and V
// row-major in shared memory (read plain as the B operand of S = Q K^T and
// dP = dO V^T, K with .trans as that of dQ += dS K):
//   P = 2^(S scale log2 e - lse log2 e), dS = P (dP - delta), dQ = scale dS K.
template <int MaxD>
__global__ void __launch_bounds__(kThreads, HeadDims<MaxD>::bwd_blocks)
    tree_attention_dq_tc_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                int ld) {
  FORGE_SHARED_MEMORY(uint16_t, smem);
  const int D = p.head_dim, Dk = padded_dim(D), HD = p.n_heads * D;
  const int qp = Dk + kPad;
  uint16_t* Qs = smem;                   // [64][qp]
  uint16_t* dOs = Qs + kQueryTile * qp;  // [64][qp], then two key tile buffers
  const KeyTiles tiles{dOs + kQueryTile * qp, reinterpret_cast<int32_t*>(dOs + (kQueryTile + 4 * kKeys) * qp),
                       qp};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = blockIdx.x * kQueryTile, q1 = min(p.T, q0 + kQueryTile);
  const int w0 = q0 + warp * kWarpRows, w1 = min(q1, w0 + kWarpRows);
  const int steps = Dk / 16, dim_groups = Dk / 8;
  const float scale2 = p.scale * kLog2e;

  const int last = (q1 - 1) / kKeys;
  int kt = seen_key_tile_from(p, 0, last, q0);
  load_rows(Qs, qp, q + h * D, ld, q0, kQueryTile, p.T, D, Dk);
  load_rows(dOs, qp, p.dout_bf16 + h * D, HD, q0, kQueryTile, p.T, D, Dk);
  if (kt <= last) {
    StagedKeys<HeadDims<MaxD>::chunks> s;
    stage_keys(s, p, k, v, ld, kvh, kt * kKeys, Dk);
    commit_keys(tiles, 0, s, p, k, v, ld, kvh, kt * kKeys, Dk);
  }
  __syncthreads();
  uint32_t qf[HeadDims<MaxD>::steps][4], of[HeadDims<MaxD>::steps][4];
#pragma unroll
  for (int st = 0; st < HeadDims<MaxD>::steps; ++st)
    if (st < steps) {
      load_a(qf[st], Qs + warp * kWarpRows * qp, qp, st, lane);
      load_a(of[st], dOs + warp * kWarpRows * qp, qp, st, lane);
    }
  float lse2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = w0 + g + 8 * r;
    lse2[r] = i < w1 ? p.lse[size_t(h) * p.T + i] * kLog2e : 0.0f;
    delta[r] = i < w1 ? p.delta[size_t(h) * p.T + i] : 0.0f;
  }
  float dq[HeadDims<MaxD>::groups][4];
  zero(dq);

  for (int b = 0; kt <= last; b ^= 1) {
    const int nt = seen_key_tile_from(p, kt + 1, last, q0);
    StagedKeys<HeadDims<MaxD>::chunks> next{};
    if (nt <= last) stage_keys(next, p, k, v, ld, kvh, nt * kKeys, Dk);
    if (rows_see_tile(p, kt, w0, w1)) {  // warp-uniform
      const int k0 = kt * kKeys, nk = min(p.T, k0 + kKeys) - k0;
      const bool full = tile_all_visible(p, kt, w0, w1);
      const int32_t* se = tiles.se(b);
      float s[kKeyGroups][4], dp[kKeyGroups][4];
      zero(s);
      zero(dp);
#pragma unroll
      for (int st = 0; st < HeadDims<MaxD>::steps; ++st)
        if (st < steps) {
          mma_rows32(s, qf[st], tiles.K(b), qp, st, lane);
          mma_rows32(dp, of[st], tiles.V(b), qp, st, lane);
        }
#pragma unroll
      for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool vis = sees(w0 + frag_row(g, c), w1, k0, frag_col(n, t, c), nk, full, se);
          const float pv = vis ? exp2f(s[n][c] * scale2 - lse2[c >> 1]) : 0.0f;
          dp[n][c] = pv * (dp[n][c] - delta[c >> 1]);
        }
      mma_times_rows(dq, dp, tiles.K(b), qp, dim_groups, lane);
    }
    if (nt <= last) commit_keys(tiles, b ^ 1, next, p, k, v, ld, kvh, nt * kKeys, Dk);
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
    kt = nt;
  }
  store_rows(p.dq + h * D, p.ld_qkv, dq, w0, w1, D, p.scale, p.scale, g, t);
}

size_t bf16_rows(int rows, int pitch) { return size_t(rows) * pitch * sizeof(uint16_t); }

template <class K>
void launch_with_shared(K kernel, dim3 grid, size_t smem, cudaStream_t stream, const TreeAttentionParams& p,
                        const Bf16Qkv& in) {
  FORGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  FORGE_LAUNCH(kernel, grid, kThreads, smem, stream, p, in.q, in.k, in.v, in.ld);
}
}  // namespace

namespace {
template <int MaxD>
void launch_fwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  const int Dk = padded_dim(p.head_dim), qp = Dk + kPad;
  const size_t smem = bf16_rows(kQueryTile + 2 * kKeys, qp) + kKeys * sizeof(int32_t);
  launch_with_shared(tree_attention_fwd_tc_kernel<MaxD>, dim3((p.T + kQueryTile - 1) / kQueryTile, p.n_heads), smem,
                     stream, p, in);
}

template <int MaxD>
void launch_bwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  const int Dk = padded_dim(p.head_dim), qp = Dk + kPad;
  const size_t dkdv_smem = bf16_rows(2 * kKeyTile + 4 * kQueries, qp) + 4 * kQueries * sizeof(float);
  launch_with_shared(tree_attention_dkdv_tc_kernel<MaxD>, dim3((p.T + kKeyTile - 1) / kKeyTile, p.n_kv_heads),
                     dkdv_smem, stream, p, in);
  const size_t dq_smem = bf16_rows(2 * kQueryTile + 4 * kKeys, qp) + 2 * kKeys * sizeof(int32_t);
  launch_with_shared(tree_attention_dq_tc_kernel<MaxD>, dim3((p.T + kQueryTile - 1) / kQueryTile, p.n_heads),
                     dq_smem, stream, p, in);
}
}  // namespace

void launch_tree_attention_fwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  if (p.head_dim <= 64) launch_fwd_tc<64>(p, in, stream);
  else launch_fwd_tc<kMaxHeadDim>(p, in, stream);
}

void launch_tree_attention_bwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  if (p.head_dim <= 64) launch_bwd_tc<64>(p, in, stream);
  else launch_bwd_tc<kMaxHeadDim>(p, in, stream);
}

FORGE_CUDA_NAMESPACE_END
