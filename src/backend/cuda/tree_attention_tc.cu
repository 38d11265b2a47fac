// Tree-masked attention on tensor cores, forward and backward, one template
// over the operands (attention_operands.cuh): bf16 Q, K, V (and dO, P, dS as
// MMA operands; the bf16 mode), or FP32 ones multiplied in 3xTF32 (the FP32
// mode); FP32 scores, softmax statistics, accumulators, lse, O and gradients
// in both. The math and the mask are tree_attention.cuh's: query i sees key
// j iff j <= i < subtree_end[j]; out_i = sum_j softmax_j(scale q_i . k_j) v_j,
// lse_i = log sum_j exp(...).
//
// All kernels: blocks of 4 warps, each warp 16 rows (the MMA's M) of a
// 64-row tile, or in the forward and dQ (HeadDims::fwd_m, dq_m) 32 rows, two
// row tiles of 16, of a 128-row one; the other side in 32-row tiles, the pre-pass's key tiles
// (tile_max_end, tile_min_end). A block skips a tile no row of its 64
// sees; a warp skips one none of its 16 rows sees (the other side of the
// diagonal, or past every subtree end); the mask is not evaluated where the
// tile is visible to all of a warp's rows. Shared memory holds tiles
// row-major, [rows][Dk + pad] (Dk = the head-dim class, HeadDims; zero-
// padded; the pad keeps fragment loads free of bank conflicts), and every
// fragment comes from them (bf16: by ldmatrix, .trans for a tile that is
// the Y of P Y). Rows past T are zero and masked, so no NaN enters an MMA.
// mma.cuh has the instructions and their fragments.
//
// Pipelining: every streamed tile (the forward's and dQ's key tiles, the
// dK/dV kernel's query tiles) is double-buffered by cp.async
// (async_copy.cuh; stage_rows below): the next step's copies are in flight
// while the current one is computed on, without passing through registers,
// one __syncthreads a step. (Double-buffered through registers instead, the
// forward ran no faster at D 128 and 30% slower at D 64 on an H200: its
// registers grew from 166 to 199; the bf16 backward so staged took 26 to 30
// more registers than by cp.async.)
//
// Every kernel is a template on the head-dim class, D <= 32, <= 64 or <= 128
// (HeadDims): fragments and accumulators in registers are sized for it, so
// smaller heads run more resident blocks per SM (docs/cuda.md lists them),
// and every D of a class is computed at its width (zero columns past D), so
// the MMA loops and tile addressing are compile-time: a step's MMAs run
// without a branch between them where all its tiles are seen
// (with_all_seen).
//
// Forward, block = (128 queries, head; 64 for TF32 at D 128), in steps of
// two key tiles (HeadDims::fwd_key_tiles, or one: TreeAttentionParams::
// step_tiles; one for TF32 at D <= 32 and D 128), per row tile:
//   S (16 x 64) = Q_w K^T, each K fragment used for the warp's row tiles,
//   each Q_w fragment for the step's tiles, read from shared memory (in
//   registers with one bf16 row tile);
//   online softmax in base 2: the row max of S (a lane's values as a
//   balanced tree, then over the quad of lanes that share a row: two
//   shuffles), m = max scale log2(e), P = 2^(S scale log2(e) - m) (one FMA
//   a score), running l from the FP32 P, O rescaled by 2^(m_old - m_new);
//   the mask evaluated only where it cuts the 16 x 32 block (interior);
//   O (16 x Dk) += P V: P reused from the S registers as the A operand
//   (attention_operands.cuh).
//   out = O / l; lse = m ln 2 + ln l.
// Backward, no atomics (deterministic), delta_i = dO_i . O_i from a pre-pass:
//   dK/dV, block = (split, 64 keys, kv head), warp = 16 keys; items: every
//     head of the group and every 32-query tile in [k0, tile_max_end), two
//     a step (HeadDims::dkdv_query_tiles, or one: step_tiles), per item:
//     S^T = K_w Q^T, dP^T = V_w dO^T (K_w, V_w fragments read per step),
//     P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - delta),
//     dV += P^T dO, dK += scale dS^T Q.
//     A key block's steps are split among up to 8 blocks (at least 32 steps
//     each): keys of a prompt shared by a tree bin's episodes are seen by
//     every query after them, and one block walking all of them outlasted
//     the rest of the kernel. The splits add their dK, dV in split order,
//     one after the other (wait_for_turn): still no atomics on values.
//   dQ, block = (64 queries, head; 128 at D <= 64, two row tiles a warp):
//     the forward's loop over key tiles (two a step at D 128, one at
//     D <= 64: HeadDims::dq_key_tiles), S = Q_w K^T, dP = dO_w V^T (Q_w,
//     dO_w fragments as in the forward), dS = P (dP - delta), dQ += scale dS K.
// On wgmma (sm_90a, bf16, opt-in: TreeAttentionParams::wgmma), one
//   warpgroup (or two) a block: the forward, block = (64
//   queries a warpgroup, head), S and P V
//   as warpgroup MMAs on the same softmax code (below, before the
//   backward); dK/dV and dQ the same way on the same items, splits and
//   gradient code (after the mma.sync backward).
// Precision (bf16): against FP32 attention on the bf16-rounded Q, K, V, the
// extra roundings are P's in the forward and dO's, P's and dS's in the
// backward (as in FlashAttention-2 in bf16). 3xTF32: about FP32's accuracy
// (mma.cuh). Both: P below 2^-126 flushes to zero (exp2_ftz).
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/attention_operands.cuh"
#include "backend/cuda/bf16.cuh"
#include "backend/cuda/tree_attention.cuh"
#include "backend/cuda/wgmma.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr int kWarpRows = 16;                        // MMA M
constexpr int kKeys = kAttnTile;                     // 32 keys per key tile
constexpr int kKeyTile = kWarpRows * kAttnWarps;    // 64 keys per dK/dV block
constexpr int kQueries = kAttnTile;                  // 32 queries per dK/dV step
// dK/dV: a 64-key block's steps (32 queries of one head) are split among
// at most kMaxSplits blocks of at least kMinSplitSteps steps each
constexpr int kMinSplitSteps = 32, kMaxSplits = 8;
constexpr int kKeyGroups = kKeys / 8;                // MMA N groups of S
constexpr unsigned kThreads = 32 * kAttnWarps;

// The kernels are compiled for head dims up to 32, up to 64 and up to 128
// (the launchers pick by D): register arrays sized for the class, so a D 64
// model keeps half the fragments and accumulators of a D 128 one.
template <class Ops, int MaxD>
struct HeadDims {
  static_assert(MaxD % 16 == 0 && MaxD <= kMaxHeadDim);
  // Every head dim of the class is computed at the class's width: the
  // columns from D on are zero in shared memory, so their products add
  // nothing (exactly: the accumulators see + 0), and the loops over MMA k
  // steps and column groups, the tile pitch and the staging loops' index
  // arithmetic are compile-time (no per-step bound checks between MMAs, no
  // integer division by a runtime width; FlashAttention pads its head dims
  // to its compiled ones so too). D 32, 64 and 128 lose nothing.
  static constexpr int dk = MaxD;                   // columns of a tile
  static constexpr int pitch = dk + Ops::kPad;      // its row pitch in shared memory
  static constexpr int steps = dk / Ops::kStep;     // MMA K steps of Q K^T
  static constexpr int groups = dk / 8;             // MMA N groups of O
  static constexpr bool bf16 = Ops::kStep == 16;
  // row tiles of 16 a forward warp owns: 2 (FlashAttention-2's 32 rows a
  // warp, 128 a block: each K and V fragment feeds two MMAs, and a key
  // tile is read once per 128 queries), 1 for TF32 at D 128 (its FP32
  // tiles of 128 queries would leave one block per SM)
  static constexpr int fwd_m = bf16 || MaxD <= 64 ? 2 : 1;
  static constexpr int fwd_rows = kWarpRows * fwd_m * kAttnWarps;  // queries per forward block
  // 32-key tiles a forward step takes (FlashAttention-2's 64 keys at D 128):
  // one online-softmax update, O rescale and barrier per 32 KT keys, and
  // 4 KT independent MMA chains a row tile in S. 1 for TF32 at D 128 (its
  // FP32 key tiles would leave one block per SM) and at D <= 32 (it would
  // spill at 3 blocks)
  static constexpr int fwd_key_tiles = bf16 || (MaxD > 32 && MaxD <= 64) ? 2 : 1;
  // 32-query tiles a dK/dV step: each K_w and V_w fragment read once for
  // them, 2 QT independent MMA chains a warp in S^T and in dP^T
  // (1 for TF32 at D 128: its FP32 tiles leave one block per SM either way)
  static constexpr int dkdv_query_tiles = bf16 || MaxD <= 64 ? 2 : 1;
  // 32-key tiles a dQ step, as the forward's where its registers allow
  // (one row tile a warp: D 128)
  static constexpr int dq_key_tiles = MaxD > 64 ? 2 : 1;
  // the dQ kernel's the same way where its accumulators allow (D <= 64)
  static constexpr int dq_m = MaxD <= 64 ? 2 : 1;
  static constexpr int dq_rows = kWarpRows * dq_m * kAttnWarps;
  // k steps of S the forward unrolls at KT key tiles a step: all but at
  // D 128 in two-tile steps (bf16 only), there two at a time (fully
  // unrolled, ptxas hoists later steps' K fragments and spills)
  __host__ __device__ static constexpr int fwd_score_unroll(int KT) { return MaxD > 64 && KT == 2 ? 2 : steps; }
  // and dK/dV's at QT query tiles: all, but rolled (one at a time) for
  // TF32 at D <= 32 in two-tile steps (its three resident blocks' 168
  // registers)
  __host__ __device__ static constexpr int dkdv_score_unroll(int QT) {
    return !bf16 && MaxD <= 32 && QT == 2 ? 1 : steps;
  }
  // and dQ's at KT key tiles: all, but 3xTF32 at D 128 in two-tile steps
  // (one block, 255 registers) half of its 16 at a time
  __host__ __device__ static constexpr int dq_score_unroll(int KT) { return !bf16 && MaxD > 64 && KT == 2 ? 8 : steps; }
  // resident blocks per SM the register budget is set for (ptxas, no
  // spills); the forward's at KT key tiles a step
  static constexpr int fwd_blocks(int KT) {
    if (KT == 2) return MaxD <= 32 ? 3 : 2;
    return MaxD <= 32 ? (bf16 ? 4 : 3) : bf16 ? (MaxD <= 64 ? 3 : 2) : (MaxD <= 64 ? 2 : 1);
  }
  // dK/dV's at QT query tiles a step
  static constexpr int bwd_blocks(int QT) {
    if (QT == 2) return MaxD <= 32 ? 3 : 2;
    return MaxD <= 64 ? (bf16 || MaxD <= 32 ? 3 : 2) : 1;
  }
  static constexpr int dq_blocks = MaxD <= 32 && bf16 ? 3 : MaxD <= 64 || bf16 ? 2 : 1;
};

// 2^x by the SFU's ex2.approx.ftz, as FlashAttention's exp2f under fast
// math: one MUFU.EX2, where exp2f (ex2.approx without .ftz) wraps it in a
// compare and two multiplies for results below 2^-126, four instructions a
// score in the softmax. Results below 2^-126 flush to zero: a probability
// under 1e-38 of the row's largest. 2^0 = 1 and 2^-inf = 0 exactly, as the
// conditional rescale needs. Emulated: exp2f, flushed the same way.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef FORGE_CUDA_EMULATION
  const float r = exp2f(x);
  return r < 1.17549435e-38f ? 0.0f : r;
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
#endif
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 16 bytes: one vector load or store (8 bf16 or 4 floats).
struct alignas(16) Chunk16 {
  uint32_t w[4];
};

// 16-byte loads of rows need D and ld multiples of the chunk and an aligned head.
template <class Ops>
__device__ __forceinline__ bool vector_rows(const typename Ops::Src* src, int D, int ld) {
  return D % Ops::kChunk == 0 && ld % Ops::kChunk == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0;
}

// Columns [d, d + chunk) of row r (zero past T and from D on).
template <class Src>
__device__ __forceinline__ Chunk16 row_chunk(const Src* src, int ld, int r, int d, int T, int D) {
  Chunk16 x{};
  if (r < T && d < D) x = *reinterpret_cast<const Chunk16*>(src + size_t(r) * ld + d);
  return x;
}

// Key j's subtree end, 0 past T (a tile's rows past T see nothing).
__device__ __forceinline__ int32_t subtree_end_or_zero(const TreeAttentionParams& p, int j) {
  return j < p.T ? p.subtree_end[j] : 0;
}

// Calls f(e) for the elements e < N of a block's copy loop, thread
// threadIdx.x taking e = threadIdx.x + kThreads u: N and the kernels'
// widths compile-time, so e / width is a shift. Not unrolled: the loaded
// values would all be live in registers at once (ptxas spills in the D 128
// kernels). Only load_rows uses it: once a block, or where cp.async can
// not copy the rows.
template <int N, class F>
__device__ __forceinline__ void for_block_elements(F&& f) {
#pragma unroll 1
  for (int e0 = 0; e0 < N; e0 += int(kThreads)) {
    const int e = e0 + int(threadIdx.x);
    if (N % int(kThreads) == 0 || e < N) f(e);
  }
}

// Rows [r0, r0 + Rows) of one head (D columns from src, row stride ld) into
// dst [Rows][pitch]. Zero past T and in columns [D, Dk). 16-byte loads and
// stores where vector_rows allows (then every row start is aligned).
template <class Ops, int Rows, int Dk>
__device__ __forceinline__ void load_rows(typename Ops::Elem* dst, int pitch, const typename Ops::Src* src, int ld,
                                          int r0, int T, int D) {
  if (vector_rows<Ops>(src, D, ld)) {
    constexpr int chunks = Dk / Ops::kChunk;
    for_block_elements<Rows * chunks>([&](int e) {
      const int i = e / chunks, d = (e % chunks) * Ops::kChunk;
      *reinterpret_cast<Chunk16*>(dst + i * pitch + d) = row_chunk(src, ld, r0 + i, d, T, D);
    });
    return;
  }
  for_block_elements<Rows * Dk>([&](int e) {
    const int i = e / Dk, d = e % Dk;
    dst[i * pitch + d] = r0 + i < T && d < D ? Ops::elem(src[size_t(r0 + i) * ld + d]) : typename Ops::Elem(0);
  });
}

// threadIdx.x read anew (volatile), so that what a copy derives from it is
// computed where the copy is, not hoisted out of the kernels' main loops to
// stay live in registers across a step (the dK/dV kernel at D 128 then
// spills).
__device__ __forceinline__ unsigned fresh_thread_index() {
#ifdef FORGE_CUDA_EMULATION
  return threadIdx.x;
#else
  unsigned t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  return t;
#endif
}

// Rows [r0, r0 + Rows) as load_rows puts them, by cp.async (16-byte
// copies, zero-filled past T and from D on) where vector_rows allows, else
// loaded at once. Visible after the caller's wait and barrier.
template <class Ops, int Rows, int Dk>
__device__ __forceinline__ void copy_rows_async(typename Ops::Elem* dst, int pitch, const typename Ops::Src* src,
                                                int ld, int r0, int T, int D) {
  if (!vector_rows<Ops>(src, D, ld)) {
    load_rows<Ops, Rows, Dk>(dst, pitch, src, ld, r0, T, D);
    return;
  }
  // A thread's chunk column is fixed (kThreads is a multiple of the chunks
  // a row), its rows kThreads / chunks apart: no division (the loop over
  // e = threadIdx.x + kThreads u divided e by the chunks a row and branched
  // on e's row: some 30 instructions a 16-byte copy, about 6 now on the
  // unrolled path).
  constexpr int chunks = Dk / Ops::kChunk, stride = int(kThreads) / chunks;
  static_assert(int(kThreads) % chunks == 0 && Rows % stride == 0);
  const unsigned tid = fresh_thread_index();
  const int d = int(tid % unsigned(chunks)) * Ops::kChunk, i0 = int(tid / unsigned(chunks));
  const int col = d < D ? d : 0, bytes = d < D ? 16 : 0;
  if (r0 + Rows <= T) {  // every row inside (all tiles but the last): one pointer stepped along
    const typename Ops::Src* from = src + (size_t(unsigned(r0 + i0)) * unsigned(ld) + unsigned(col));
#pragma unroll
    for (int i = i0, u = 0; u < Rows / stride; ++u, i += stride, from += size_t(stride) * unsigned(ld))
      cp_async_16(dst + i * pitch + d, from, bytes);
    return;
  }
#pragma unroll 1
  for (int i = i0; i < Rows; i += stride) {  // a row past T: row T - 1's address, zero bytes
    const int r = r0 + i;
    cp_async_16(dst + i * pitch + d, src + (size_t(unsigned(min(r, T - 1))) * unsigned(ld) + unsigned(col)),
                r < T ? bytes : 0);
  }
}

// The A fragments of M row tiles of 16 (one k step).
template <class Ops, int M>
struct RowFrags {
  typename Ops::AFrag f[M];
};

// The A fragments of a warp's M x 16 rows, every k step: in registers for
// one row tile of bf16 (Ops::kRowsInRegisters, 4 a step), else read from the
// rows in shared memory at each use (TF32's 8 a step, or a second row tile's,
// would crowd out the accumulators; FlashAttention-2 reads Q so too).
template <class Ops, int Steps, int M, bool InRegisters = Ops::kRowsInRegisters && M == 1>
struct WarpRows {
  RowFrags<Ops, M> f[Steps];
  __device__ __forceinline__ void init(const typename Ops::Elem* rows, int pitch, int lane) {
#pragma unroll
    for (int st = 0; st < Steps; ++st)
#pragma unroll
      for (int i = 0; i < M; ++i) Ops::load_a(f[st].f[i], rows + i * kWarpRows * pitch, pitch, st, lane);
  }
  __device__ __forceinline__ const RowFrags<Ops, M>& at(int st, int) const { return f[st]; }
};
template <class Ops, int Steps, int M>
struct WarpRows<Ops, Steps, M, false> {
  const typename Ops::Elem* rows;
  int pitch;
  __device__ __forceinline__ void init(const typename Ops::Elem* r, int p, int) {
    rows = r;
    pitch = p;
  }
  __device__ __forceinline__ RowFrags<Ops, M> at(int st, int lane) const {
    RowFrags<Ops, M> a;
#pragma unroll
    for (int i = 0; i < M; ++i) Ops::load_a(a.f[i], rows + i * kWarpRows * pitch, pitch, st, lane);
    return a;
  }
};

// The first query of this block of the forward or dQ grid (x: query blocks,
// y: heads), the last query block first. A block's keys grow with its
// queries (a causal row sees every key before it; a tree bin's late turns
// see their whole prefix), and the GPU starts blocks in index order: so each
// head's longest blocks start first and the last wave holds short ones
// (longest first, as list scheduling wants), where in query order the
// longest blocks of the last head started last and ran alone.
__device__ __forceinline__ int query_block_start(int rows) { return (gridDim.x - 1 - blockIdx.x) * rows; }

// A warp's rows of a query block [q0, q1) when it owns M row tiles of 16:
// [w0, w1), row tile i [r0[i], r1[i]) (empty past q1).
template <int M>
struct WarpRowTiles {
  int w0, w1, r0[M], r1[M];
  __device__ __forceinline__ WarpRowTiles(int q0, int q1, int warp) {
    w0 = q0 + warp * M * kWarpRows;
    w1 = min(q1, w0 + M * kWarpRows);
#pragma unroll
    for (int i = 0; i < M; ++i) r0[i] = w0 + i * kWarpRows, r1[i] = min(w1, r0[i] + kWarpRows);
  }
};

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

// Writes rows r0 + g and r0 + g + 8 (those below r1) of a 16 x Dk
// accumulator times mul (mul0, mul1 for the two rows) to dst + row * ld
// (FP32, or bf16 rounded to nearest even), columns below D: Add = false
// stores, Add = true adds to what is there (FP32; read past the L1 cache:
// another block wrote it).
template <bool Add = false, int G, class Out>
__device__ __forceinline__ void store_rows(Out* dst, size_t ld, const float (&acc)[G][4],
                                           int r0, int r1, int D, float mul0, float mul1, int g, int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r0 + g + 8 * r;
    if (i >= r1) continue;
    Out* row = dst + size_t(i) * ld;
#pragma unroll
    for (int n = 0; n < G; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = n * 8 + 2 * t + c;
        if (d >= D) continue;
        const float v = acc[n][2 * r + c] * (r ? mul1 : mul0);
        if constexpr (Add)
          row[d] = *static_cast<volatile const float*>(row + d) + v;
        else
          store_value(row + d, v);
      }
  }
}

// The splits of a dK/dV block write in split order (deterministic): split s
// waits until the block's counter says s (splits 0 .. s - 1 have added
// theirs), then passes the turn on. Split s - 1 has started when s runs, so
// the wait ends: the wgmma kernel's blocks draw their split as they start
// (DkdvSplit); the mma.sync kernel takes blockIdx.x and relies on the GPU
// starting blocks in index order, which CUDA does not promise (the draw
// spills its bf16 D 128 two-tile class on sm_80 by 4 bytes: tried
// 2026-11-27 and 2026-11-29).
// The wait is bounded: after kTurnPolls polls (seconds on a GPU) the kernel
// traps, so that the host's next CUDA call fails with an error naming that
// call (right after a tree attention backward: a stalled turn) rather than
// hang. (A printf here would need a stack frame, which the build refuses.)
constexpr unsigned kTurnPolls = 1u << 24;
__device__ __forceinline__ void wait_for_turn(int32_t* turn, int split) {
  if (threadIdx.x == 0)
    for (unsigned polls = 0; atomicAdd(turn, 0) != split; __nanosleep(64))
      if (++polls == kTurnPolls) __trap();
  __threadfence();
  __syncthreads();
}
__device__ __forceinline__ void pass_turn(int32_t* turn, int split) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(turn, split + 1);
}

// A dK/dV block's split (its index among its key block's splits), drawn
// from the key block's draw counter (after the turn counters) as the block
// starts, not taken from blockIdx.x: so split s - 1 has started when split
// s waits for its turn, whatever order the GPU starts blocks in (CUDA
// promises none). Thread 0 draws it into slot (a shared int); each read
// loads it again (volatile: not one more live register) and broadcasts it
// from lane 0, so that ptxas knows it is warp-uniform and keeps what
// derives from it in uniform registers, as blockIdx.x's.
#ifdef FORGE_WGMMA  // (its only user)
class DkdvSplit {
  volatile int32_t* slot_;

 public:
  __device__ __forceinline__ DkdvSplit(const TreeAttentionParams& p, int32_t* slot) : slot_(slot) {
    if (threadIdx.x == 0) *slot = atomicAdd(p.dkdv_turn + (size_t(gridDim.z) + blockIdx.z) * gridDim.y + blockIdx.y, 1);
    __syncthreads();
  }
  __device__ __forceinline__ int operator()() const { return __shfl_sync(kFullWarp, *slot_, 0); }
};
#endif
// The turn counter of a dK/dV block's key block.
__device__ __forceinline__ int32_t* dkdv_turn(const TreeAttentionParams& p) {
  return p.dkdv_turn + size_t(blockIdx.z) * gridDim.y + blockIdx.y;
}

// Lane's element c of key group n of a 16 x 32 tile of (query, key) pairs:
// row g + 8 (c / 2), column 8 n + 2 t + c % 2.
__device__ __forceinline__ int frag_row(int g, int c) { return g + (c >> 1) * 8; }
__device__ __forceinline__ int frag_col(int n, int t, int c) { return n * 8 + 2 * t + (c & 1); }

// Software pipelining: the next step's tiles are copied by cp.async
// (stage_rows, stage_keys, stage_queries) straight into the other of two
// shared buffers (free by then: the last step's barrier is behind every
// thread) before the current step is computed on, so that their latency
// hides behind the MMAs without passing through registers; after it the
// thread waits for its copies (cp_async_wait_all) and one __syncthreads a
// step makes them visible: the writes of buffer b ^ 1 and the reads of
// buffer b never overlap. Where vector_rows does not allow 16-byte copies,
// the rows are loaded at once.

// Rows [r0, r0 + 32) (zero past T and in columns [D, Dk)) into dst [32][pitch].
template <class Ops, int Dk>
__device__ __forceinline__ void stage_rows(typename Ops::Elem* dst, int pitch, const typename Ops::Src* src, int ld,
                                           int r0, int T, int D) {
  copy_rows_async<Ops, kAttnTile, Dk>(dst, pitch, src, ld, r0, T, D);
  cp_async_commit();
}

// The kernels' inputs: Q, K and V (row stride ld; heads of D columns) and
// dO (row stride H D) in the operands' global type.
template <class Src>
struct TcInputs {
  const Src* q;
  const Src* k;
  const Src* v;
  int ld;
  const Src* dout;
};

// Slots of a key tile in shared memory: K [32][qp], V [32][qp] and the
// keys' subtree ends [32] each. Two buffers of KT slots (a step's tiles):
// buffer b is slots b KT .. b KT + KT - 1.
template <class Elem>
struct KeyTiles {
  Elem* kv;
  int32_t* ends;
  int qp;
  __device__ Elem* K(int slot) const { return kv + slot * 2 * kKeys * qp; }
  __device__ Elem* V(int slot) const { return K(slot) + kKeys * qp; }
  __device__ int32_t* se(int slot) const { return ends + slot * kKeys; }
};

// Key tile [k0, k0 + 32) of kv head kvh into a slot: K, V and the
// subtree ends (0 past T).
template <class Ops, int Dk>
__device__ __forceinline__ void stage_keys(const KeyTiles<typename Ops::Elem>& tiles, int slot,
                                           const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in,
                                           int kvh, int k0) {
  stage_rows<Ops, Dk>(tiles.K(slot), tiles.qp, in.k + kvh * p.head_dim, in.ld, k0, p.T, p.head_dim);
  stage_rows<Ops, Dk>(tiles.V(slot), tiles.qp, in.v + kvh * p.head_dim, in.ld, k0, p.T, p.head_dim);
  const int j = k0 + int(threadIdx.x);
  if (threadIdx.x < kKeys) cp_async_4(tiles.se(slot) + threadIdx.x, p.subtree_end + min(j, p.T - 1), j < p.T ? 4 : 0);
  cp_async_commit();
}

// Whether query i (below w1) sees key k0 + jj of the loaded tile (jj below
// nk, se its subtree ends; full: the tile is visible to all the warp's rows).
__device__ __forceinline__ bool sees(int i, int w1, int k0, int jj, int nk, bool full, const int32_t* se) {
  return i < w1 && jj < nk && (full || (k0 + jj <= i && i < se[jj]));
}

// Whether the mask need not be evaluated for a 16 x 32 block of (row, key)
// pairs: every row below r1 and every key below nk (full: all the rows of
// [r0, r1) see all the tile's keys, tile_all_visible) and the block whole.
// Warp-uniform; then a warp's scores go unselected.
__device__ __forceinline__ bool interior(bool full, int r0, int r1, int nk) {
  return full && r1 - r0 == kWarpRows && nk == kKeys;
}

// Whether any of the query rows [w0, w1) sees a key of 32-key tile kt (not
// when the tile starts past the last row or every key's subtree ends by w0).
__device__ __forceinline__ bool rows_see_tile(const TreeAttentionParams& p, int kt, int w0, int w1) {
  return w0 < w1 && kt * kKeys <= w1 - 1 && p.tile_max_end[kt] > w0;
}

// Runs f(std::true_type) when every one of a step's N tiles is seen (the
// common case: the step's MMAs one straight run, with no branch between
// them for the scheduler to stop at), else f(std::false_type), which tests
// seen[] per tile. Warp-uniform.
template <int N, class F>
__device__ __forceinline__ void with_all_seen(const bool (&seen)[N], F&& f) {
  bool all = true;
#pragma unroll
  for (int j = 0; j < N; ++j) all = all && seen[j];
  if (all)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Max or sum of the values a lane holds of row r (g + 8 r) of row tile i of
// a step's S, over its KT tiles (8 KT values): a balanced tree, log2 (8 KT)
// dependent instructions where a running max or sum would chain all 8 KT
// (the forward's warps stall on such chains: docs/performance.md, "On an
// H100").
struct Max {
  static __device__ __forceinline__ float op(float a, float b) { return fmaxf(a, b); }
};
struct Sum {
  static __device__ __forceinline__ float op(float a, float b) { return a + b; }
};
template <class Op, int W, int N>
__device__ __forceinline__ float tree_reduce(float (&v)[N]) {
#pragma unroll
  for (int e = 0; e < W; ++e) v[e] = Op::op(v[e], v[e + W]);
  if constexpr (W == 1)
    return v[0];
  else
    return tree_reduce<Op, W / 2>(v);
}
template <class Op, int KT, int M>
__device__ __forceinline__ float lane_row_reduce(const float (&s)[KT][M][kKeyGroups][4], int i, int r) {
  constexpr int N = KT * kKeyGroups * 2;
  static_assert((N & (N - 1)) == 0, "a power of two");
  float v[N];
#pragma unroll
  for (int j = 0; j < KT; ++j)
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) v[(j * kKeyGroups + n) * 2 + c] = s[j][i][n][2 * r + c];
  return tree_reduce<Op, N / 2>(v);
}

// A step's KT key tiles (the forward's and dQ's): the next KT tiles, in
// order, that some query of the block may see (seen_key_tile_from); past
// last where none is left. Block-uniform.
template <int KT>
struct KeyStep {
  int kt[KT];
  __device__ __forceinline__ KeyStep(const TreeAttentionParams& p, int from, int last, int q0) {
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      kt[j] = from <= last ? seen_key_tile_from(p, from, last, q0) : last + 1;
      from = kt[j] + 1;
    }
  }
  __device__ __forceinline__ int after() const { return kt[KT - 1] + 1; }
  // Which of the tiles rows [w0, w1) see (warp-uniform); whether any.
  __device__ __forceinline__ bool seen_by(const TreeAttentionParams& p, int last, int w0, int w1,
                                          bool (&seen)[KT]) const {
    bool any = false;
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      seen[j] = kt[j] <= last && rows_see_tile(p, kt[j], w0, w1);
      any = any || seen[j];
    }
    return any;
  }
};

// One forward step's online softmax over row tile i of S (a step's KT key
// tiles side by side; rows [r0, r1)): the mask where it cuts a 16 x 32
// block (interior), the new row max m (base 2; a row that saw nothing yet
// keeps a reference of 0), l and O rescaled by 2^(m_old - m_new) (O only
// where some row of the warp's tile has a new max, FlashAttention-3's
// conditional rescale: past the first tiles of a causal row the max rarely
// moves, and a factor of exactly 1 changes nothing; one vote against D / 2
// multiplies a lane, where D >= 64), P = 2^(S scale2 - m) in place (one FMA
// a score) and l += its row sums. ends(j): the subtree ends of the step's
// tile j. softmax_scores does all but O's rescale, which it leaves to
// rescale_rows with the factors it returns in corr (the wgmma forward
// rescales O only after the MMAs in flight on it have landed).
template <int G>
__device__ __forceinline__ void rescale_rows(float (&o)[G][4], const float (&corr)[2]) {
  if (G < 8 || __any_sync(kFullWarp, corr[0] != 1.0f || corr[1] != 1.0f))
#pragma unroll
    for (int n = 0; n < G; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
    }
}
template <int KT, int M, class Ends>
__device__ __forceinline__ void softmax_scores(float (&s)[KT][M][kKeyGroups][4], float (&m)[2], float (&l)[2],
                                               float (&corr)[2], int i, const TreeAttentionParams& p,
                                               const KeyStep<KT>& step, const bool (&seen)[KT], int r0, int r1,
                                               float scale2, int g, int t, Ends ends) {
#pragma unroll
  for (int j = 0; j < KT; ++j) {
    const int k0 = step.kt[j] * kKeys, nk = seen[j] ? min(p.T, k0 + kKeys) - k0 : 0;
    const bool full = seen[j] && tile_all_visible(p, step.kt[j], r0, r1);
    const int32_t* se = ends(j);
    if (!interior(full, r0, r1, nk))
#pragma unroll
      for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (!sees(r0 + frag_row(g, c), r1, k0, frag_col(n, t, c), nk, full, se)) s[j][i][n][c] = -INFINITY;
  }
  // the row max of the unscaled scores, then scaled (scale2 > 0)
  float mref[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = lane_row_reduce<Max>(s, i, r);
    mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 1));  // the quad shares the row
    mx = fmaxf(mx, __shfl_xor_sync(kFullWarp, mx, 2));
    const float mn = fmaxf(m[r], mx * scale2);
    mref[r] = mn == -INFINITY ? 0.0f : mn;  // a row that saw nothing yet
    corr[r] = exp2_ftz(m[r] - mref[r]);
    m[r] = mn;
    l[r] *= corr[r];
  }
#pragma unroll
  for (int j = 0; j < KT; ++j)
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[j][i][n][c] = exp2_ftz(fmaf(s[j][i][n][c], scale2, -mref[c >> 1]));
#pragma unroll
  for (int r = 0; r < 2; ++r) l[r] += lane_row_reduce<Sum>(s, i, r);
}
template <int KT, int M, int G, class Ends>
__device__ __forceinline__ void softmax_step(float (&s)[KT][M][kKeyGroups][4], float (&o)[G][4], float (&m)[2],
                                             float (&l)[2], int i, const TreeAttentionParams& p,
                                             const KeyStep<KT>& step, const bool (&seen)[KT], int r0, int r1,
                                             float scale2, int g, int t, Ends ends) {
  float corr[2];
  softmax_scores(s, m, l, corr, i, p, step, seen, r0, r1, scale2, g, t, ends);
  rescale_rows(o, corr);
}

// Stages the step's tiles into buffer b's slots.
template <class Ops, int Dk, int KT>
__device__ __forceinline__ void stage_step(const KeyStep<KT>& step, int last, const KeyTiles<typename Ops::Elem>& tiles,
                                           int b, const TreeAttentionParams& p,
                                           const TcInputs<typename Ops::Src>& in, int kvh) {
#pragma unroll
  for (int j = 0; j < KT; ++j)
    if (step.kt[j] <= last) stage_keys<Ops, Dk>(tiles, b * KT + j, p, in, kvh, step.kt[j] * kKeys);
}

template <class Ops, int MaxD, int KT>
__global__ void __launch_bounds__(kThreads, HeadDims<Ops, MaxD>::fwd_blocks(KT))
    tree_attention_fwd_tc_kernel(const TreeAttentionParams p, const typename Ops::Src* __restrict__ q,
        const typename Ops::Src* __restrict__ k, const typename Ops::Src* __restrict__ v, int ld,
        const typename Ops::Src* __restrict__ dout) {
  const TcInputs<typename Ops::Src> in{q, k, v, ld, dout};
  using Elem = typename Ops::Elem;
  using Dims = HeadDims<Ops, MaxD>;
  constexpr int M = Dims::fwd_m, kBlockRows = Dims::fwd_rows;
  FORGE_SHARED_MEMORY(Elem, smem);
  const int D = p.head_dim, HD = p.n_heads * D;
  constexpr int Dk = Dims::dk, qp = Dims::pitch;
  Elem* Qs = smem;  // [kBlockRows][qp], then two buffers of KT key tile slots
  const KeyTiles<Elem> tiles{
      Qs + kBlockRows * qp, reinterpret_cast<int32_t*>(Qs + (kBlockRows + 4 * KT * kKeys) * qp), qp};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = query_block_start(kBlockRows), q1 = min(p.T, q0 + kBlockRows);
  const WarpRowTiles<M> rows(q0, q1, warp);
  const int w0 = rows.w0, w1 = rows.w1;
  const int (&r0)[M] = rows.r0, (&r1)[M] = rows.r1;
  const float scale2 = p.scale * kLog2e;

  const int last = (q1 - 1) / kKeys;
  // Steps of KT key tiles some query of the block may see, streamed by
  // cp.async: the next step's copies are in flight while the current one
  // is computed on.
  KeyStep<KT> step(p, 0, last, q0);
  stage_step<Ops, Dk>(step, last, tiles, 0, p, in, kvh);
  load_rows<Ops, kBlockRows, Dk>(Qs, qp, in.q + h * D, in.ld, q0, p.T, D);
  cp_async_wait_all();
  __syncthreads();
  WarpRows<Ops, Dims::steps, M> qf;
  qf.init(Qs + (w0 - q0) * qp, qp, lane);

  float o[M][Dims::groups][4];
  float m[M][2], l[M][2];  // rows g and g + 8 of each row tile, base 2
#pragma unroll
  for (int i = 0; i < M; ++i) {
    zero(o[i]);
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
  }

  for (int b = 0; step.kt[0] <= last; b ^= 1) {
    const KeyStep<KT> next(p, step.after(), last, q0);
    stage_step<Ops, Dk>(next, last, tiles, b ^ 1, p, in, kvh);
    bool seen[KT];
    if (step.seen_by(p, last, w0, w1, seen)) {
      // S (16 x 32 KT a row tile): the step's tiles side by side, each
      // A fragment of Q read once for all of them
      float s[KT][M][kKeyGroups][4];
#pragma unroll
      for (int j = 0; j < KT; ++j)
#pragma unroll
        for (int i = 0; i < M; ++i) zero(s[j][i]);
      with_all_seen(seen, [&](auto all) {
#pragma unroll(Dims::fwd_score_unroll(KT))
        for (int st = 0; st < Dims::steps; ++st) {
          const auto& a = qf.at(st, lane);
#pragma unroll
          for (int j = 0; j < KT; ++j)
            if (decltype(all)::value || seen[j]) Ops::mma_rows32(s[j], a.f, tiles.K(b * KT + j), qp, st, lane);
        }
      });
#pragma unroll
      for (int i = 0; i < M; ++i)
        softmax_step(s, o[i], m[i], l[i], i, p, step, seen, r0[i], r1[i], scale2, g, t,
                     [&](int j) { return tiles.se(b * KT + j); });
#pragma unroll
      for (int j = 0; j < KT; ++j)
        if (seen[j]) Ops::mma_times_rows(o, s[j], tiles.V(b * KT + j), qp, lane);
    }
    cp_async_wait_all();
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
    step = next;
  }

#pragma unroll
  for (int i = 0; i < M; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[i][r] += __shfl_xor_sync(kFullWarp, l[i][r], 1);
      l[i][r] += __shfl_xor_sync(kFullWarp, l[i][r], 2);
      const int row = r0[i] + g + 8 * r;
      if (t == 0 && row < r1[i]) p.lse[size_t(h) * p.T + row] = m[i][r] * kLn2 + logf(l[i][r]);
    }
    if (p.out_bf16)
      store_rows(p.out_bf16 + h * D, HD, o[i], r0[i], r1[i], D, 1.0f / l[i][0], 1.0f / l[i][1], g, t);
    else
      store_rows(p.out + h * D, HD, o[i], r0[i], r1[i], D, 1.0f / l[i][0], 1.0f / l[i][1], g, t);
  }
}

// ---- The forward on wgmma (sm_90a; bf16; TreeAttentionParams::wgmma) ----
// Block = (64 WG queries, head), WG warpgroups (1 or 2: p.wgmma): warp w
// owns rows q0 + 16 w .. + 15, as the one-row-tile forward above, each
// warpgroup 64 of them, and the step's KT key tiles (32 KT keys: 64, or
// 128 with p.wgmma_step_keys, FlashAttention-3's step at D 128), staged
// once for the block, are one wgmma operand. Per step and warpgroup:
//   S (64 x 32 KT) = Q K^T: Dk / 16 wgmma m64n(32 KT)k16, Q and K from shared
//   memory (K-major); its accumulators are the S registers of the kernel
//   above (s[j][0][n][c] = S[16 w + g + 8 (c / 2)][32 j + 8 n + 2 t + c % 2]),
//   so the mask, the online softmax and the conditional rescale are its
//   (softmax_scores, rescale_rows);
//   O (64 x Dk) += P V: per 16 keys one wgmma m64nDk16, P from the S
//   registers (mma.sync's A fragment, as mma_times_rows packs it) and V from
//   shared memory (N-major).
// All four warps issue every MMA (a warpgroup instruction), so a warp no
// longer skips a tile its rows do not see: the mask zeroes its P. Tiles are
// staged by cp.async into wgmma's no-swizzle canonical layout (wgmma.cuh):
// row r's 16-byte chunk c of a 64-row tile at (r % 8) 16 + (r / 8) 16 Dk +
// 128 c bytes (K-major with LBO 128, SBO 16 Dk; read as V, N-major: LBO 16
// Dk, SBO 128), double-buffered, each thread's copies made visible to the
// MMAs' async proxy (fence_proxy_async) before the step's barrier.
// Overlap (FlashAttention-3's intra-warpgroup pipelining): step j issues
// S_j = Q K_j^T and O += P_(j-1) V_(j-1) together and runs S_j's softmax
// while the latter is in flight; O is rescaled, and P_j packed, once it
// has landed (wait_group 0), and the last step's P V follows the loop. So
// step j reads K_j and V_(j-1): K is staged a step ahead of V (K_(j+1) and
// V_j during step j, each in the buffer its step two back has released).
// Needs D % 8 == 0, ld % 8 == 0 and 16-byte
// aligned q, k, v (16-byte chunks; the launcher falls back to the kernel
// above otherwise).
constexpr int kWgmmaRows = 64;  // rows a warpgroup: its queries (keys in dK/dV); dQ's keys a step
constexpr int kWgmmaItems = 2;  // 32-query items a step of the wgmma dK/dV kernel

// 16-byte chunk c of row r of a canonical tile (elements, from its start).
template <int Dk>
__host__ __device__ __forceinline__ int canonical_chunk(int r, int c) {
  return (r % 8) * 8 + (r / 8) * 8 * Dk + c * 64;
}

// The row (of the first Threads / (Dk / 8)) and chunk column thread tid
// copies in stage_canonical: eight consecutive threads take one chunk
// column of eight consecutive rows, a core matrix, 128 contiguous bytes,
// every bank once, so a warp's writes land in 4 wavefronts. (Thread t on
// chunk t % chunks of row t / chunks put a row's chunks 128 bytes apart, on
// the same 4 banks: 32 wavefronts at D 64 and 128.) A warp still reads
// whole 32-byte sectors: 4 chunks, 64 bytes, of each of 8 rows.
// check_canonical_staging (tree_attention.cuh) holds it to that.
struct StageSlot {
  int row, chunk;
};
template <int Dk>
__host__ __device__ __forceinline__ StageSlot canonical_stage_slot(unsigned tid) {
  constexpr unsigned chunks = Dk / 8;
  return {int(tid % 8u + 8u * (tid / (8u * chunks))), int(tid / 8u % chunks)};
}

// Rows [r0, r0 + Rows) (zero past T and from D on) into rows [at, at + Rows)
// of a canonical tile (at a multiple of 8), by cp.async (not committed), by
// a block of Threads threads. A thread's chunk column is fixed and its rows
// Threads / chunks apart (a multiple of 8): source and destination step by
// constants, as in copy_rows_async (where that is more than Rows, the
// threads past the tile's chunks copy nothing).
template <int Dk, int Rows, int Threads = int(kThreads)>
__device__ __forceinline__ void stage_canonical(uint16_t* tile, int at, const __nv_bfloat16* src, int ld, int r0,
                                                int T, int D) {
  constexpr int chunks = Dk / 8, stride = Threads / chunks, dst_step = stride * Dk;
  static_assert(stride % 8 == 0 && (Rows % stride == 0 || stride % Rows == 0));
  const StageSlot slot = canonical_stage_slot<Dk>(fresh_thread_index());
  const int c = slot.chunk, i0 = slot.row;
  if (Rows < stride && i0 >= Rows) return;
  const int col = 8 * c < D ? 8 * c : 0, bytes = 8 * c < D ? 16 : 0;
  uint16_t* dst = tile + canonical_chunk<Dk>(i0, c) + at * Dk;
  if (r0 + Rows <= T) {  // every row inside (all tiles but the last)
    const __nv_bfloat16* from = src + (size_t(unsigned(r0 + i0)) * unsigned(ld) + unsigned(col));
#pragma unroll
    for (int u = 0; u < (Rows + stride - 1) / stride; ++u, from += size_t(stride) * unsigned(ld), dst += dst_step)
      cp_async_16(dst, from, bytes);
    return;
  }
#pragma unroll 1
  for (int u = 0; u < (Rows + stride - 1) / stride; ++u) {  // a row past T: row T - 1's address, zero bytes
    const int r = r0 + i0 + u * stride;
    cp_async_16(dst + u * dst_step, src + (size_t(unsigned(min(r, T - 1))) * unsigned(ld) + unsigned(col)),
                r < T ? bytes : 0);
  }
}

// Rows [at, at + Rows) of a canonical tile zeroed (ordinary stores) by a
// block of Threads threads.
template <int Dk, int Rows, int Threads = int(kThreads)>
__device__ __forceinline__ void zero_canonical(uint16_t* tile, int at) {
  for (int e = int(threadIdx.x); e < Rows * Dk / 8; e += Threads)
    *reinterpret_cast<Chunk16*>(tile + at * Dk + 8 * e) = Chunk16{};
}

// A step's KT key tiles (KeyStep) into one buffer of canonical K and V
// tiles (tile j at rows 32 j) and their subtree ends, committed. A tile
// past last is zeroed: the MMAs take every tile, without a branch between
// them (ptxas fences around a branch among wgmma), so its P (or dS) is 0,
// and 0 times a stale NaN would not be.
// Keys: K and the subtree ends; Values: V (the overlapped forward stages
// them a step apart).
template <int Dk, int Threads, bool Keys = true, bool Values = true, int KT>
__device__ __forceinline__ void stage_key_step_canonical(const KeyStep<KT>& st, int last, uint16_t* Ks, uint16_t* Vs,
                                                         int32_t* ends, const TreeAttentionParams& p,
                                                         const __nv_bfloat16* k, const __nv_bfloat16* v, int ld,
                                                         int kvh) {
  const int D = p.head_dim;
#pragma unroll
  for (int j = 0; j < KT; ++j)
    if (st.kt[j] > last) {
      if (Keys) zero_canonical<Dk, kKeys, Threads>(Ks, kKeys * j);
      if (Values) zero_canonical<Dk, kKeys, Threads>(Vs, kKeys * j);
    } else {
      const int k0 = st.kt[j] * kKeys;
      if (Keys) stage_canonical<Dk, kKeys, Threads>(Ks, kKeys * j, k + kvh * D, ld, k0, p.T, D);
      if (Values) stage_canonical<Dk, kKeys, Threads>(Vs, kKeys * j, v + kvh * D, ld, k0, p.T, D);
      const int jj = k0 + int(threadIdx.x);
      if (Keys && threadIdx.x < kKeys)
        cp_async_4(ends + kKeys * j + threadIdx.x, p.subtree_end + min(jj, p.T - 1), jj < p.T ? 4 : 0);
    }
  cp_async_commit();
}

// The A fragments (mma.sync m16n8k16's, wgmma's A in registers) of a warp's
// 16 x 32 KT block of P (or dS) held as S accumulators: fragment 2 j + kk
// is keys 32 j + 16 kk .. + 15. Made before the wgmma_fence of the MMAs that
// read them (none may be written between the fence and the MMAs), pinned.
template <int KT>
__device__ __forceinline__ void pack_a_fragments(const float (&s)[KT][1][kKeyGroups][4], uint32_t (&a)[2 * KT][4]) {
#pragma unroll
  for (int j = 0; j < KT; ++j)
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t(&f)[4] = a[2 * j + kk];
      f[0] = pack_bf16x2(s[j][0][2 * kk][0], s[j][0][2 * kk][1]);
      f[1] = pack_bf16x2(s[j][0][2 * kk][2], s[j][0][2 * kk][3]);
      f[2] = pack_bf16x2(s[j][0][2 * kk + 1][0], s[j][0][2 * kk + 1][1]);
      f[3] = pack_bf16x2(s[j][0][2 * kk + 1][2], s[j][0][2 * kk + 1][3]);
      wgmma_fence_operands(f);
    }
}

template <int MaxD, int WG, int KT>
__global__ void __launch_bounds__(WG * kThreads)
    tree_attention_fwd_wgmma_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                    const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, int ld,
                                    const __nv_bfloat16* /*dout: the launcher's signature*/) {
#ifdef FORGE_WGMMA
  constexpr int Dk = MaxD, kGroups = Dk / 8, kRows = WG * kWgmmaRows, kBlock = WG * int(kThreads);
  constexpr int kStepKeys = KT * kKeys;    // keys a step: S is 64 x kStepKeys
  constexpr uint32_t kRowGroup = 16 * Dk;  // bytes from 8 rows of a tile to the next 8
  FORGE_SHARED_MEMORY(uint16_t, smem);
  uint16_t* Qs = smem;                                   // [64 WG x Dk]
  uint16_t* Ks = Qs + kRows * Dk;                       // two buffers [kStepKeys x Dk]
  uint16_t* Vs = Ks + 2 * kStepKeys * Dk;               // two buffers [kStepKeys x Dk]
  int32_t* ends = reinterpret_cast<int32_t*>(Vs + 2 * kStepKeys * Dk);  // two buffers [kStepKeys]
  const int D = p.head_dim, HD = p.n_heads * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = query_block_start(kRows), q1 = min(p.T, q0 + kRows);
  const WarpRowTiles<1> rows(q0, q1, warp);
  const int w0 = rows.w0, w1 = rows.w1, r0 = rows.r0[0], r1 = rows.r1[0];
  const float scale2 = p.scale * kLog2e;
  const int last = (q1 - 1) / kKeys;

  // Step j's K tiles and subtree ends in key buffer j % 2, its V tiles in
  // value buffer j % 2, staged a step apart: K for step j + 1 and V for
  // step j while step j is computed
  const auto stage_keys = [&](const KeyStep<KT>& st, int b) {
    stage_key_step_canonical<Dk, kBlock, true, false>(st, last, Ks + b * kStepKeys * Dk, nullptr,
                                                      ends + b * kStepKeys, p, k, v, ld, kvh);
  };
  const auto stage_values = [&](const KeyStep<KT>& st, int b) {
    stage_key_step_canonical<Dk, kBlock, false, true>(st, last, nullptr, Vs + b * kStepKeys * Dk, nullptr, p, k, v,
                                                      ld, kvh);
  };
  KeyStep<KT> step(p, 0, last, q0);
  stage_canonical<Dk, kRows, kBlock>(Qs, 0, q + h * D, ld, q0, p.T, D);
  stage_keys(step, 0);
  // value buffer 1 zeroed: the first step's P V of "step -1" adds 0 x 0
  // (a stale NaN there would not give 0)
  zero_canonical<Dk, kStepKeys, kBlock>(Vs + kStepKeys * Dk, 0);
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();

  // Descriptors: Q (the warpgroup's 64 rows) and K K-major (LBO 128, SBO
  // kRowGroup), V N-major (LBO kRowGroup, SBO 128), per buffer
  const uint64_t desc_q = wgmma_desc(Qs + (WG > 1 ? warpgroup_index() : 0) * kWgmmaRows * Dk, 128, kRowGroup);
  const uint64_t desc_k0 = wgmma_desc(Ks, 128, kRowGroup), desc_k1 = wgmma_desc(Ks + kStepKeys * Dk, 128, kRowGroup);
  const uint64_t desc_v0 = wgmma_desc(Vs, kRowGroup, 128), desc_v1 = wgmma_desc(Vs + kStepKeys * Dk, kRowGroup, 128);
  float o[1][kGroups][4];
  zero(o[0]);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8, base 2
  float(&o_flat)[Dk / 2] = reinterpret_cast<float(&)[Dk / 2]>(o);
  uint32_t a[2 * KT][4] = {};  // the last step's P (A fragments; "step -1": 0)
  // O += P V of the last step (its V in value buffer b)
  const auto pv = [&](int b) {
#pragma unroll
    for (int u = 0; u < 2 * KT; ++u)  // keys 16 u on: 2 u row groups of kRowGroup bytes
      wgmma_rs<Dk, 1>(o_flat, a[u], (b ? desc_v1 : desc_v0) + 2 * u * (kRowGroup >> 4), true);
    wgmma_commit();
  };

  // Step j (buffers b = j % 2): S_j = Q K_j^T and O += P_(j-1) V_(j-1)
  // issued together; the softmax of S_j runs while the latter is in flight
  // (FlashAttention-3's intra-warpgroup overlap), O's rescale after it lands.
  // The next step's tiles are looked up (global loads) and their copies
  // issued after the MMAs, so that neither delays them
  int b = 0;
  for (; step.kt[0] <= last; b ^= 1) {
    float s[KT][1][kKeyGroups][4];
    float(&s_flat)[kStepKeys / 2] = reinterpret_cast<float(&)[kStepKeys / 2]>(s);
    const uint64_t desc_k = b ? desc_k1 : desc_k0;
    wgmma_fence_operands(s_flat);  // undefined until the MMAs write them: no move may land after the fence
    wgmma_fence_operands(o_flat);
    wgmma_fence_operands(a);
    wgmma_fence();
    // k step st: 256 bytes on (16 in the descriptor's start field)
#pragma unroll
    for (int st = 0; st < Dk / 16; ++st) wgmma_ss<kStepKeys, 0, 0>(s_flat, desc_q + 16 * st, desc_k + 16 * st, st > 0);
    wgmma_commit();
    pv(b ^ 1);
    const KeyStep<KT> next(p, step.after(), last, q0);
    stage_keys(next, b ^ 1);  // key buffer b ^ 1: step j - 1's, read by its S (landed)
    stage_values(step, b);    // value buffer b: step j - 2's, read by its P V (landed)
    bool seen[KT];
    step.seen_by(p, last, w0, w1, seen);
    wgmma_wait<1>(s_flat);  // S landed; the P V may be in flight
    float corr[2];
    softmax_scores(s, m, l, corr, 0, p, step, seen, r0, r1, scale2, g, t,
                   [&](int j) { return ends + b * kStepKeys + kKeys * j; });
    // then O and the A fragments are the thread's again (s pinned after the
    // wait too: P's packing, which writes the A fragments, may not be
    // hoisted above it)
    wgmma_wait<0>(o_flat, s_flat);
    wgmma_fence_operands(a);  // kept until the P V landed
    rescale_rows(o[0], corr);
    pack_a_fragments(s, a);
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // buffers b ^ 1 (keys) and b (values) complete; none read
    step = next;
  }
  // the last step's P V (its values in buffer b ^ 1, landed)
  wgmma_fence_operands(o_flat);
  wgmma_fence();
  pv(b ^ 1);
  wgmma_wait<0>(o_flat);

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(kFullWarp, l[r], 1);
    l[r] += __shfl_xor_sync(kFullWarp, l[r], 2);
    const int row = r0 + g + 8 * r;
    if (t == 0 && row < r1) p.lse[size_t(h) * p.T + row] = m[r] * kLn2 + logf(l[r]);
  }
  if (p.out_bf16)
    store_rows(p.out_bf16 + h * D, HD, o[0], r0, r1, D, 1.0f / l[0], 1.0f / l[1], g, t);
  else
    store_rows(p.out + h * D, HD, o[0], r0, r1, D, 1.0f / l[0], 1.0f / l[1], g, t);
#else
  (void)p, (void)q, (void)k, (void)v, (void)ld;
  __trap();
#endif
}

// dK and dV of a 64-key tile of one kv head; warp w owns keys k0 + 16 w ..
// k0 + 16 w + 15 (the MMA's M). For every head of the group and every
// 32-query tile in [k0, tile_max_end) -- the steps, pipelined as above --
// with Q and dO row-major in shared memory (the X of S^T = K Q^T and
// dP^T = V dO^T, the Y of dK += dS^T Q and dV += P^T dO):
//   P^T = 2^(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - delta).
// K and V fragments are read from shared memory per step (registers hold
// the two 16 x Dk accumulators).
// The softmax statistics of a step's queries (thread < 32: its query's),
// loaded with the step's copies and stored beside its tiles after them.
struct QueryStats {
  float lse2, delta;
};
// Thread < 32's query of tile [q0, q0 + 32) of head h (0 past T and for
// the other threads).
__device__ __forceinline__ QueryStats query_stats(const TreeAttentionParams& p, int h, int q0) {
  const bool inside = threadIdx.x < kQueries && q0 + int(threadIdx.x) < p.T;
  return {inside ? p.lse[size_t(h) * p.T + q0 + threadIdx.x] * kLog2e : 0.0f,
          inside ? p.delta[size_t(h) * p.T + q0 + threadIdx.x] : 0.0f};
}
// Slot u of buffer b of the stats in shared memory: lse2 [kQueries], then
// delta [kQueries].
template <int QT>
__device__ __forceinline__ float* item_stats(float* stats, int b, int u) {
  return stats + 2 * (b * QT + u) * kQueries;
}
// Stored by thread < kQueries, after the step's copies landed.
template <int QT>
__device__ __forceinline__ void store_item_stats(float* stats, int b, const QueryStats (&st)[QT]) {
  if (threadIdx.x < kQueries)
#pragma unroll
    for (int u = 0; u < QT; ++u) {
      item_stats<QT>(stats, b, u)[threadIdx.x] = st[u].lse2;
      item_stats<QT>(stats, b, u)[kQueries + threadIdx.x] = st[u].delta;
    }
}

// Where item s = head * tiles + tile of a dK/dV block is: the offset of its
// head in the kv head's group and its query tile's index from the block's
// first. plus: item s + u for u <= MaxU (at most MaxU wraps, tiles >= 1), by
// compares where s / tiles and s % tiles took some 25 integer instructions
// of software division a call.
struct ItemPlace {
  int head, tile;
  template <int MaxU>
  __device__ __forceinline__ ItemPlace plus(int u, int tiles) const {
    ItemPlace x{head, tile + u};
#pragma unroll
    for (int w = 0; w < MaxU; ++w)
      if (x.tile >= tiles) {
        x.tile -= tiles;
        ++x.head;
      }
    return x;
  }
};

// Step (h, q0): query tile [q0, q0 + 32) of head h into Qs and dOs
// ([32][qp] each), its lse (base 2) and delta into s.
template <class Ops, int Dk>
__device__ __forceinline__ void stage_queries(QueryStats& s, typename Ops::Elem* Qs, typename Ops::Elem* dOs,
                                              int qp, const TreeAttentionParams& p,
                                              const TcInputs<typename Ops::Src>& in, int h, int q0) {
  const int D = p.head_dim;
  stage_rows<Ops, Dk>(Qs, qp, in.q + h * D, in.ld, q0, p.T, D);
  stage_rows<Ops, Dk>(dOs, qp, in.dout + h * D, p.n_heads * D, q0, p.T, D);
  s = query_stats(p, h, q0);
}

// A dK/dV block's items i = (h - kvh group) tiles + (q0 - k0) / 32 over the
// heads h of the group and the 32-query tiles q0 in [k0, q_end) (queries at
// or past q_end see none of the block's Rows keys); a split's: [i, i_end).
template <int Rows = kKeyTile>
struct KeyBlockItems {
  int tiles, i, i_end;
  bool in_turns;  // the block has splits (they add theirs in turn)
  ItemPlace at;   // item i's place, advanced with i (no division in the loop)
  __device__ __forceinline__ KeyBlockItems(const TreeAttentionParams& p, int k0, int group, int split) {
    int q_end = 0;
    for (int kt = k0 / kAttnTile; kt * kAttnTile < min(p.T, k0 + Rows); ++kt)
      q_end = max(q_end, p.tile_max_end[kt]);
    tiles = k0 < q_end ? (q_end - k0 + kQueries - 1) / kQueries : 0;
    const int n = group * tiles;
    i = split * p.dkdv_split_steps;
    in_turns = n > p.dkdv_split_steps;
    i_end = min(n, i + p.dkdv_split_steps);
    at = {tiles > 0 ? i / tiles : 0, tiles > 0 ? i % tiles : 0};
  }
  // a split with no items (split 0 never: it stores the block's zeros)
  __device__ __forceinline__ bool empty(int split) const { return split > 0 && i >= i_end; }
};

// In place over one item of a dK/dV step, keys [w0, w1) of 16 (rows) x
// the 32 queries from q0 (nq of them below T; 0: none seen): s from S^T to
// P^T = 2^(S^T scale2 - lse2) (lse2: the queries', shared memory), 0 where
// the mask hides a pair (the mask evaluated only off the interior); se the
// subtree ends of keys w0 + g and w0 + g + 8, full: every query sees every
// key.
__device__ __forceinline__ void key_rows_probs(float (&s)[kKeyGroups][4], const float* lse2, float scale2, int w0,
                                               int w1, int q0, int nq, bool full, const int (&se)[2], int g, int t) {
  const auto probs = [&](auto masked) {
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = w0 + frag_row(g, c), ii = frag_col(n, t, c), qi = q0 + ii;
        const float pv = exp2_ftz(fmaf(s[n][c], scale2, -lse2[ii]));
        if constexpr (decltype(masked)::value)
          s[n][c] = j < w1 && ii < nq && (full || (j <= qi && qi < se[c >> 1])) ? pv : 0.0f;
        else
          s[n][c] = pv;
      }
  };
  if (interior(full, w0, w1, nq)) probs(std::false_type{});
  else probs(std::true_type{});
}
// Then dp from dP^T to dS^T = P^T (dP^T - delta) (delta: the queries').
__device__ __forceinline__ void key_rows_dscores(const float (&s)[kKeyGroups][4], float (&dp)[kKeyGroups][4],
                                                 const float* delta, int t) {
#pragma unroll
  for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) dp[n][c] = s[n][c] * (dp[n][c] - delta[frag_col(n, t, c)]);
}
// Both, s to P^T and dp to dS^T.
__device__ __forceinline__ void key_rows_grads(float (&s)[kKeyGroups][4], float (&dp)[kKeyGroups][4],
                                               const float* lse2, const float* delta, float scale2, int w0, int w1,
                                               int q0, int nq, bool full, const int (&se)[2], int g, int t) {
  key_rows_probs(s, lse2, scale2, w0, w1, q0, nq, full, se, g, t);
  key_rows_dscores(s, dp, delta, t);
}

// A dK/dV block's accumulators of its warp's keys [w0, w1) out (dK times
// scale): the block's first split stores, the others add, in split order
// where the block has splits (turn: the block's counter).
template <int G>
__device__ __forceinline__ void store_dkdv(const TreeAttentionParams& p, const float (&dk)[G][4],
                                           const float (&dv)[G][4], int D, int kvh, int w0, int w1, bool in_turns,
                                           int split, int32_t* turn, int g, int t) {
  if (in_turns) wait_for_turn(turn, split);
  if (split == 0) {
    store_rows(p.dk + kvh * D, p.ld_qkv, dk, w0, w1, D, p.scale, p.scale, g, t);
    store_rows(p.dv + kvh * D, p.ld_qkv, dv, w0, w1, D, 1.0f, 1.0f, g, t);
  } else {
    store_rows<true>(p.dk + kvh * D, p.ld_qkv, dk, w0, w1, D, p.scale, p.scale, g, t);
    store_rows<true>(p.dv + kvh * D, p.ld_qkv, dv, w0, w1, D, 1.0f, 1.0f, g, t);
  }
  if (in_turns) pass_turn(turn, split);
}

// In place over key tile k0 (nk keys below T; 0: not seen) of a dQ step,
// rows [r0, r1) of a 16-row tile: s from S to P = 2^(S scale2 - lse2)
// (lse2: rows g and g + 8), 0 where the mask hides a pair; se the keys'
// subtree ends, full: every row sees every key.
__device__ __forceinline__ void query_rows_probs(float (&s)[kKeyGroups][4], const float (&lse2)[2], float scale2,
                                                 int r0, int r1, int k0, int nk, bool full, const int32_t* se, int g,
                                                 int t) {
  const auto probs = [&](auto masked) {
#pragma unroll
    for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float pv = exp2_ftz(fmaf(s[n][c], scale2, -lse2[c >> 1]));
        if constexpr (decltype(masked)::value)
          s[n][c] = sees(r0 + frag_row(g, c), r1, k0, frag_col(n, t, c), nk, full, se) ? pv : 0.0f;
        else
          s[n][c] = pv;
      }
  };
  if (interior(full, r0, r1, nk)) probs(std::false_type{});
  else probs(std::true_type{});
}
// Then dp from dP to dS = P (dP - delta) (delta: rows g and g + 8).
__device__ __forceinline__ void query_rows_dscores(const float (&s)[kKeyGroups][4], float (&dp)[kKeyGroups][4],
                                                   const float (&delta)[2]) {
#pragma unroll
  for (int n = 0; n < kKeyGroups; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) dp[n][c] = s[n][c] * (dp[n][c] - delta[c >> 1]);
}
// Both, s to P and dp to dS.
__device__ __forceinline__ void query_rows_grads(float (&s)[kKeyGroups][4], float (&dp)[kKeyGroups][4],
                                                 const float (&lse2)[2], const float (&delta)[2], float scale2,
                                                 int r0, int r1, int k0, int nk, bool full, const int32_t* se, int g,
                                                 int t) {
  query_rows_probs(s, lse2, scale2, r0, r1, k0, nk, full, se, g, t);
  query_rows_dscores(s, dp, delta);
}

template <class Ops, int MaxD, int QT>
__global__ void __launch_bounds__(kThreads, HeadDims<Ops, MaxD>::bwd_blocks(QT))
    tree_attention_dkdv_tc_kernel(const TreeAttentionParams p, const typename Ops::Src* __restrict__ q,
        const typename Ops::Src* __restrict__ k, const typename Ops::Src* __restrict__ v, int ld,
        const typename Ops::Src* __restrict__ dout) {
  const TcInputs<typename Ops::Src> in{q, k, v, ld, dout};
  using Elem = typename Ops::Elem;
  using Dims = HeadDims<Ops, MaxD>;
  FORGE_SHARED_MEMORY(Elem, smem);
  const int D = p.head_dim;
  constexpr int Dk = Dims::dk, qp = Dims::pitch;
  Elem* Ks = smem;                // [64][qp]
  Elem* Vs = Ks + kKeyTile * qp;  // [64][qp]
  // slot u (buffer b: slots b QT .. b QT + QT - 1): Q [32][qp], dO after it
  Elem* QO = Vs + kKeyTile * qp;
  float* stats = reinterpret_cast<float*>(QO + 4 * QT * kQueries * qp);  // slot u: lse2 [32], delta [32]
  const auto Qs = [&](int u) { return QO + 2 * u * kQueries * qp; };
  const auto dOs = [&](int u) { return Qs(u) + kQueries * qp; };
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int split = blockIdx.x, kvh = blockIdx.z, group = p.n_heads / p.n_kv_heads;
  const int k0 = blockIdx.y * kKeyTile;
  const int w0 = k0 + warp * kWarpRows, w1 = min(p.T, w0 + kWarpRows);  // this warp's keys
  const int kt_w = w0 / kAttnTile;  // the pre-pass's tile holding them
  const float scale2 = p.scale * kLog2e;

  int se[2];  // subtree ends of keys w0 + g and w0 + g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) se[r] = subtree_end_or_zero(p, w0 + g + 8 * r);
  KeyBlockItems items(p, k0, group, split);
  const int w_end = w0 < w1 ? p.tile_max_end[kt_w] : 0;
  if (items.empty(split)) return;
  const int tiles = items.tiles, i_end = items.i_end;
  int i = items.i;  // QT items a step
  ItemPlace at = items.at;
  const auto head = [&](ItemPlace x) { return kvh * group + x.head; };
  const auto first_query = [&](ItemPlace x) { return k0 + x.tile * kQueries; };
  // Items [s, s + QT) (those below i_end; x: item s's place) into buffer b's slots.
  const auto stage = [&](QueryStats (&st)[QT], int b, int s, ItemPlace x) {
#pragma unroll
    for (int u = 0; u < QT; ++u)
      if (s + u < i_end) {
        const ItemPlace y = x.plus<QT>(u, tiles);
        stage_queries<Ops, Dk>(st[u], Qs(b * QT + u), dOs(b * QT + u), qp, p, in, head(y), first_query(y));
      }
  };
  const auto commit = [&](const QueryStats (&st)[QT], int b) {  // after the step's copies
    cp_async_wait_all();
    store_item_stats<QT>(stats, b, st);
  };
  load_rows<Ops, kKeyTile, Dk>(Ks, qp, in.k + kvh * D, in.ld, k0, p.T, D);
  load_rows<Ops, kKeyTile, Dk>(Vs, qp, in.v + kvh * D, in.ld, k0, p.T, D);
  {
    QueryStats first[QT]{};
    stage(first, 0, i, at);
    commit(first, 0);
  }
  __syncthreads();

  float dk[1][Dims::groups][4], dv[1][Dims::groups][4];  // one row tile of 16 keys
  zero(dk[0]);
  zero(dv[0]);
  for (int b = 0; i < i_end; b ^= 1, i += QT, at = at.plus<QT>(QT, tiles)) {
    QueryStats next[QT]{};
    stage(next, b ^ 1, i + QT, at.plus<QT>(QT, tiles));
    // warp-uniform: a query of item i + u's tile sees this warp's keys
    bool seen[QT], any = false;
#pragma unroll
    for (int u = 0; u < QT; ++u) {
      const int q0 = first_query(at.plus<QT>(u, tiles)), nq = min(p.T, q0 + kQueries) - q0;
      seen[u] = i + u < i_end && w0 < w1 && q0 < w_end && q0 + nq - 1 >= w0;
      any = any || seen[u];
    }
    if (any) {
      // S^T and dP^T: 16 keys x 32 queries an item, each K_w and V_w
      // fragment read once for the step's items
      float s[QT][1][4][4], dp[QT][1][4][4];
#pragma unroll
      for (int u = 0; u < QT; ++u) {
        zero(s[u][0]);
        zero(dp[u][0]);
      }
      with_all_seen(seen, [&](auto all) {
#pragma unroll(Dims::dkdv_score_unroll(QT))
        for (int st = 0; st < Dims::steps; ++st) {
          typename Ops::AFrag a[1];
          Ops::load_a(a[0], Ks + warp * kWarpRows * qp, qp, st, lane);
#pragma unroll
          for (int u = 0; u < QT; ++u)
            if (decltype(all)::value || seen[u]) Ops::mma_rows32(s[u], a, Qs(b * QT + u), qp, st, lane);
          Ops::load_a(a[0], Vs + warp * kWarpRows * qp, qp, st, lane);
#pragma unroll
          for (int u = 0; u < QT; ++u)
            if (decltype(all)::value || seen[u]) Ops::mma_rows32(dp[u], a, dOs(b * QT + u), qp, st, lane);
        }
      });
#pragma unroll
      for (int u = 0; u < QT; ++u) {
        if (!seen[u]) continue;
        const int q0 = first_query(at.plus<QT>(u, tiles)), nq = min(p.T, q0 + kQueries) - q0;
        const bool full = tile_all_visible(p, kt_w, q0, q0 + nq);
        const float* lse2 = item_stats<QT>(stats, b, u);
        const float* delta = lse2 + kQueries;
        key_rows_grads(s[u][0], dp[u][0], lse2, delta, scale2, w0, w1, q0, nq, full, se, g, t);
        Ops::mma_times_rows(dv, s[u], dOs(b * QT + u), qp, lane);
        Ops::mma_times_rows(dk, dp[u], Qs(b * QT + u), qp, lane);
      }
    }
    if (i + QT < i_end) commit(next, b ^ 1);
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
  }
  store_dkdv(p, dk[0], dv[0], D, kvh, w0, w1, items.in_turns, split, dkdv_turn(p), g, t);
}

// dQ of a block of queries of one head: 64, warp w owning rows q0 + 16 w ..
// + 15, or (HeadDims::dq_m = 2) 128, warp w owning two row tiles of 16 from
// q0 + 32 w, each K and V fragment used for both, as in the forward. The
// forward's loop over steps of KT key tiles (pipelined the same way), with K and V
// row-major in shared memory (the X of S = Q K^T and dP = dO V^T, K the Y
// of dQ += dS K):
//   P = 2^(S scale log2 e - lse log2 e), dS = P (dP - delta), dQ = scale dS K.
template <class Ops, int MaxD, int KT>
__global__ void __launch_bounds__(kThreads, HeadDims<Ops, MaxD>::dq_blocks)
    tree_attention_dq_tc_kernel(const TreeAttentionParams p, const typename Ops::Src* __restrict__ q,
        const typename Ops::Src* __restrict__ k, const typename Ops::Src* __restrict__ v, int ld,
        const typename Ops::Src* __restrict__ dout) {
  const TcInputs<typename Ops::Src> in{q, k, v, ld, dout};
  using Elem = typename Ops::Elem;
  using Dims = HeadDims<Ops, MaxD>;
  constexpr int M = Dims::dq_m, kBlockRows = Dims::dq_rows;
  FORGE_SHARED_MEMORY(Elem, smem);
  const int D = p.head_dim, HD = p.n_heads * D;
  constexpr int Dk = Dims::dk, qp = Dims::pitch;
  Elem* Qs = smem;                   // [kBlockRows][qp]
  Elem* dOs = Qs + kBlockRows * qp;  // [kBlockRows][qp], then two buffers of KT key tile slots
  const KeyTiles<Elem> tiles{dOs + kBlockRows * qp,
                             reinterpret_cast<int32_t*>(dOs + (kBlockRows + 4 * KT * kKeys) * qp), qp};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = query_block_start(kBlockRows), q1 = min(p.T, q0 + kBlockRows);
  const WarpRowTiles<M> rows(q0, q1, warp);
  const int w0 = rows.w0, w1 = rows.w1;
  const int (&r0)[M] = rows.r0, (&r1)[M] = rows.r1;
  const float scale2 = p.scale * kLog2e;

  const int last = (q1 - 1) / kKeys;
  KeyStep<KT> step(p, 0, last, q0);
  stage_step<Ops, Dk>(step, last, tiles, 0, p, in, kvh);
  load_rows<Ops, kBlockRows, Dk>(Qs, qp, in.q + h * D, in.ld, q0, p.T, D);
  load_rows<Ops, kBlockRows, Dk>(dOs, qp, in.dout + h * D, HD, q0, p.T, D);
  cp_async_wait_all();
  __syncthreads();
  WarpRows<Ops, Dims::steps, M> qf, of;
  qf.init(Qs + (w0 - q0) * qp, qp, lane);
  of.init(dOs + (w0 - q0) * qp, qp, lane);
  float lse2[M][2], delta[M][2];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = r0[i] + g + 8 * r;
      lse2[i][r] = row < r1[i] ? p.lse[size_t(h) * p.T + row] * kLog2e : 0.0f;
      delta[i][r] = row < r1[i] ? p.delta[size_t(h) * p.T + row] : 0.0f;
    }
  float dq[M][Dims::groups][4];
#pragma unroll
  for (int i = 0; i < M; ++i) zero(dq[i]);

  for (int b = 0; step.kt[0] <= last; b ^= 1) {
    const KeyStep<KT> next(p, step.after(), last, q0);
    stage_step<Ops, Dk>(next, last, tiles, b ^ 1, p, in, kvh);
    bool seen[KT];
    if (step.seen_by(p, last, w0, w1, seen)) {
      float s[KT][M][kKeyGroups][4], dp[KT][M][kKeyGroups][4];
#pragma unroll
      for (int j = 0; j < KT; ++j)
#pragma unroll
        for (int i = 0; i < M; ++i) {
          zero(s[j][i]);
          zero(dp[j][i]);
        }
      with_all_seen(seen, [&](auto all) {
#pragma unroll(Dims::dq_score_unroll(KT))
        for (int st = 0; st < Dims::steps; ++st) {
          const auto& a = qf.at(st, lane);
          const auto& o = of.at(st, lane);
#pragma unroll
          for (int j = 0; j < KT; ++j)
            if (decltype(all)::value || seen[j]) {
              Ops::mma_rows32(s[j], a.f, tiles.K(b * KT + j), qp, st, lane);
              Ops::mma_rows32(dp[j], o.f, tiles.V(b * KT + j), qp, st, lane);
            }
        }
      });
#pragma unroll
      for (int j = 0; j < KT; ++j) {
        if (!seen[j]) continue;
        const int k0 = step.kt[j] * kKeys, nk = min(p.T, k0 + kKeys) - k0;
        const int32_t* se = tiles.se(b * KT + j);
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const bool full = tile_all_visible(p, step.kt[j], r0[i], r1[i]);
          query_rows_grads(s[j][i], dp[j][i], lse2[i], delta[i], scale2, r0[i], r1[i], k0, nk, full, se, g, t);
        }
        Ops::mma_times_rows(dq, dp[j], tiles.K(b * KT + j), qp, lane);
      }
    }
    cp_async_wait_all();
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
    step = next;
  }
#pragma unroll
  for (int i = 0; i < M; ++i) store_rows(p.dq + h * D, p.ld_qkv, dq[i], r0[i], r1[i], D, p.scale, p.scale, g, t);
}

// ---- The backward on wgmma (sm_90a; bf16; TreeAttentionParams::wgmma) ----
// The two kernels above with warpgroup MMAs, WG warpgroups a block, tiles
// staged into the canonical layout as in the wgmma forward (stage_canonical;
// K-major read as the X of a product, N-major as its Y), the step's MMAs
// issued by all four warps whatever each warp's rows see (a warp's P, dS
// are 0 where its rows see nothing), the same masks and gradients
// (key_rows_grads, query_rows_grads) on accumulators laid out as the
// mma.sync kernels' S registers.
//   dK/dV, block = (split, 64 WG keys, kv head), as
//     tree_attention_dkdv_tc_kernel (its items, splits and turns; warpgroup
//     w the keys 64 w on, each query step staged once for all), two
//     32-query items a step (64 queries): S^T = K Q^T and dP^T = V dO^T,
//     Dk / 16 m64n64k16 each (K, V, Q, dO from shared memory), then per 16
//     queries dV += P^T dO and dK += dS^T Q, m64nDk16 with P^T, dS^T in
//     registers.
//   dQ, block = (64 WG queries, head; warpgroup w the queries 64 w on), as
//     the wgmma forward's key steps (two 32-key tiles): S = Q K^T and
//     dP = dO V^T, then per 16 keys dQ += dS K.
// Within a step the SIMT work runs under the tensor cores' (FlashAttention-3
// backward's order): S (S^T) and dP (dP^T) are issued as two groups and P's
// exponentials and mask run while dP is in flight; in dK/dV, dV += P^T dO
// is in flight while dS^T is made and packed; the next step's copies are
// waited for while the last products run. dK/dV waits for its products
// before its barrier (the next step overwrites the Q, dO tiles they read);
// dQ += dS K stays in flight into the next step (three key buffers). A
// fragments stay pinned until their MMAs land. Needs what the wgmma
// forward needs, and dO 16-byte aligned.

// A backward step's two 64 x 64 products, S = X Y^T and dP = X' Y'^T
// (Dk / 16 m64n64k16 each; X, Y, X', Y' 64 x Dk K-major tiles by
// descriptor; s and dp laid out as the forward's S), issued as two groups:
// wgmma_wait<1>(s) lands S (dP may still be in flight: P's exponentials
// run under it), then wgmma_wait<0>(dp) lands dP.
template <int Dk>
__device__ __forceinline__ void score_products(float (&s)[kWgmmaRows / 2], float (&dp)[kWgmmaRows / 2], uint64_t x,
                                               uint64_t y, uint64_t x2, uint64_t y2) {
  wgmma_fence_operands(s);  // undefined until the MMAs write them: no move may land after the fence
  wgmma_fence_operands(dp);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < Dk / 16; ++st) wgmma_ss<kWgmmaRows, 0, 0>(s, x + 16 * st, y + 16 * st, st > 0);
  wgmma_commit();
#pragma unroll
  for (int st = 0; st < Dk / 16; ++st) wgmma_ss<kWgmmaRows, 0, 0>(dp, x2 + 16 * st, y2 + 16 * st, st > 0);
  wgmma_commit();
}

// dK and dV of 64 WG keys of one kv head on wgmma (above); warpgroup w owns
// keys 64 w on, the block stages each query step once for all.
template <int MaxD, int WG>
__global__ void __launch_bounds__(WG * kThreads)
    tree_attention_dkdv_wgmma_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                     const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                                     int ld, const __nv_bfloat16* __restrict__ dout) {
#ifdef FORGE_WGMMA
  constexpr int Dk = MaxD, QT = kWgmmaItems, kGroups = Dk / 8, kRows = WG * kWgmmaRows, kBlock = WG * int(kThreads);
  constexpr uint32_t kRowGroup = 16 * Dk;  // bytes from 8 rows of a tile to the next 8
  constexpr int kTile = kWgmmaRows * Dk;   // elements of a 64-row tile
  FORGE_SHARED_MEMORY(uint16_t, smem);
  uint16_t* Ks = smem;               // [64 WG x Dk]: warpgroup w's keys at rows 64 w
  uint16_t* Vs = Ks + WG * kTile;    // [64 WG x Dk]
  uint16_t* Qs = Vs + WG * kTile;    // two buffers [64 x Dk]: item u of a step at rows 32 u
  uint16_t* dOs = Qs + 2 * kTile;    // two buffers [64 x Dk]
  float* stats = reinterpret_cast<float*>(dOs + 2 * kTile);  // slot b QT + u: lse2 [32], delta [32]
  const DkdvSplit drawn(p, reinterpret_cast<int32_t*>(stats + 4 * QT * kQueries));
  const int split = drawn(), kvh = blockIdx.z;
  const int D = p.head_dim, HD = p.n_heads * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int group = p.n_heads / p.n_kv_heads;
  const int k0 = blockIdx.y * kRows;
  const int w0 = k0 + warp * kWarpRows, w1 = min(p.T, w0 + kWarpRows);  // this warp's keys
  const int kt_w = w0 / kAttnTile;
  const float scale2 = p.scale * kLog2e;
  int se[2];  // subtree ends of keys w0 + g and w0 + g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) se[r] = subtree_end_or_zero(p, w0 + g + 8 * r);
  const int w_end = w0 < w1 ? p.tile_max_end[kt_w] : 0;
  KeyBlockItems<kRows> items(p, k0, group, split);
  if (items.empty(split)) return;
  const int tiles = items.tiles, i_end = items.i_end;
  int i = items.i;
  ItemPlace at = items.at;
  const auto head = [&](ItemPlace x) { return kvh * group + x.head; };
  const auto first_query = [&](ItemPlace x) { return k0 + x.tile * kQueries; };
  // Items [s, s + QT) into buffer b (one past i_end zeroed, its stats 0:
  // the MMAs take both), committed; the stats are stored after the wait
  const auto stage = [&](QueryStats (&st)[QT], int b, int s, ItemPlace x) {
#pragma unroll
    for (int u = 0; u < QT; ++u)
      if (s + u < i_end) {
        const ItemPlace y = x.plus<QT>(u, tiles);
        const int h = head(y), q0 = first_query(y);
        stage_canonical<Dk, kQueries, kBlock>(Qs + b * kTile, kQueries * u, q + h * D, ld, q0, p.T, D);
        stage_canonical<Dk, kQueries, kBlock>(dOs + b * kTile, kQueries * u, dout + h * D, HD, q0, p.T, D);
        st[u] = query_stats(p, h, q0);
      } else {
        zero_canonical<Dk, kQueries, kBlock>(Qs + b * kTile, kQueries * u);
        zero_canonical<Dk, kQueries, kBlock>(dOs + b * kTile, kQueries * u);
      }
    cp_async_commit();
  };
  const auto commit = [&](const QueryStats (&st)[QT], int b) {  // the copies landed, visible to the MMAs
    cp_async_wait_all();
    store_item_stats<QT>(stats, b, st);
    fence_proxy_async();
  };
  stage_canonical<Dk, kRows, kBlock>(Ks, 0, k + kvh * D, ld, k0, p.T, D);
  stage_canonical<Dk, kRows, kBlock>(Vs, 0, v + kvh * D, ld, k0, p.T, D);
  {
    QueryStats first[QT]{};
    stage(first, 0, i, at);
    commit(first, 0);
  }
  __syncthreads();

  // K, V (the warpgroup's 64 rows), and Q, dO as the X of S^T, dP^T:
  // K-major (LBO 128, SBO kRowGroup); Q, dO as the Y of dK, dV: N-major
  // (LBO kRowGroup, SBO 128)
  const int wg_rows = (WG > 1 ? warpgroup_index() : 0) * kTile;
  const uint64_t desc_k = wgmma_desc(Ks + wg_rows, 128, kRowGroup), desc_v = wgmma_desc(Vs + wg_rows, 128, kRowGroup);
  float dk[1][kGroups][4], dv[1][kGroups][4];
  zero(dk[0]);
  zero(dv[0]);
  float(&dk_flat)[Dk / 2] = reinterpret_cast<float(&)[Dk / 2]>(dk);
  float(&dv_flat)[Dk / 2] = reinterpret_cast<float(&)[Dk / 2]>(dv);
  for (int b = 0; i < i_end; b ^= 1, i += QT, at = at.plus<QT>(QT, tiles)) {
    const uint64_t desc_q = wgmma_desc(Qs + b * kTile, 128, kRowGroup);
    const uint64_t desc_o = wgmma_desc(dOs + b * kTile, 128, kRowGroup);
    float s[QT][1][kKeyGroups][4], dp[QT][1][kKeyGroups][4];
    float(&s_flat)[kWgmmaRows / 2] = reinterpret_cast<float(&)[kWgmmaRows / 2]>(s);
    float(&dp_flat)[kWgmmaRows / 2] = reinterpret_cast<float(&)[kWgmmaRows / 2]>(dp);
    score_products<Dk>(s_flat, dp_flat, desc_k, desc_q, desc_v, desc_o);
    QueryStats next[QT]{};  // the next step's copies issued under the MMAs
    stage(next, b ^ 1, i + QT, at.plus<QT>(QT, tiles));
    wgmma_wait<1>(s_flat);  // S^T landed; dP^T may be in flight
#pragma unroll
    for (int u = 0; u < QT; ++u) {
      // warp-uniform: a query of item i + u's tile sees this warp's keys
      const int q0 = first_query(at.plus<QT>(u, tiles)), nq = min(p.T, q0 + kQueries) - q0;
      const bool seen = i + u < i_end && w0 < w1 && q0 < w_end && q0 + nq - 1 >= w0;
      const bool full = seen && tile_all_visible(p, kt_w, q0, q0 + nq);
      key_rows_probs(s[u][0], item_stats<QT>(stats, b, u), scale2, w0, w1, q0, seen ? nq : 0, full, se, g, t);
    }
    uint32_t ap[2 * QT][4], as[2 * QT][4];  // P^T's and dS^T's A fragments
    pack_a_fragments(s, ap);
    const uint64_t desc_qn = wgmma_desc(Qs + b * kTile, kRowGroup, 128);
    const uint64_t desc_on = wgmma_desc(dOs + b * kTile, kRowGroup, 128);
    // dV += P^T dO, in flight while dS^T is made
    wgmma_wait<0>(dp_flat);
    wgmma_fence_operands(dv_flat);  // (ap pinned by its packing)
    wgmma_fence();
#pragma unroll
    for (int u = 0; u < 2 * QT; ++u)  // queries 16 u on: 2 u row groups of kRowGroup bytes
      wgmma_rs<Dk, 1>(dv_flat, ap[u], desc_on + 2 * u * (kRowGroup >> 4), true);
    wgmma_commit();
#pragma unroll
    for (int u = 0; u < QT; ++u) key_rows_dscores(s[u][0], dp[u][0], item_stats<QT>(stats, b, u) + kQueries, t);
    pack_a_fragments(dp, as);
    wgmma_fence_operands(dk_flat);  // (as pinned by its packing)
    wgmma_fence();
#pragma unroll
    for (int u = 0; u < 2 * QT; ++u) wgmma_rs<Dk, 1>(dk_flat, as[u], desc_qn + 2 * u * (kRowGroup >> 4), true);
    wgmma_commit();
    commit(next, b ^ 1);  // the next step's copies, while the products run
    wgmma_wait<0>(dk_flat, dv_flat);
    wgmma_fence_operands(ap);  // the A fragments kept until their MMAs land
    wgmma_fence_operands(as);
    __syncthreads();  // buffer b ^ 1 complete; buffer b no longer read
  }
  store_dkdv(p, dk[0], dv[0], D, kvh, w0, w1, items.in_turns, drawn(), dkdv_turn(p), g, t);
#else
  (void)p, (void)q, (void)k, (void)v, (void)ld, (void)dout;
  __trap();
#endif
}

// dQ of 64 WG queries of one head on wgmma (above).
template <int MaxD, int WG>
__global__ void __launch_bounds__(WG * kThreads)
    tree_attention_dq_wgmma_kernel(const TreeAttentionParams p, const __nv_bfloat16* __restrict__ q,
                                   const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v, int ld,
                                   const __nv_bfloat16* __restrict__ dout) {
#ifdef FORGE_WGMMA
  constexpr int Dk = MaxD, KT = 2, kGroups = Dk / 8, kRows = WG * kWgmmaRows, kBlock = WG * int(kThreads);
  constexpr uint32_t kRowGroup = 16 * Dk;
  constexpr int kTile = kWgmmaRows * Dk;
  FORGE_SHARED_MEMORY(uint16_t, smem);
  uint16_t* Qs = smem;              // [64 WG x Dk]
  uint16_t* dOs = Qs + WG * kTile;  // [64 WG x Dk]
  uint16_t* Ks = dOs + WG * kTile;  // three buffers [64 x Dk] (step j's in j % 3)
  uint16_t* Vs = Ks + 3 * kTile;   // two buffers [64 x Dk] (step j's in j % 2)
  int32_t* ends = reinterpret_cast<int32_t*>(Vs + 2 * kTile);  // two buffers [64] (as V)
  const int D = p.head_dim, HD = p.n_heads * D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, kvh = h / (p.n_heads / p.n_kv_heads);
  const int q0 = query_block_start(kRows), q1 = min(p.T, q0 + kRows);
  const WarpRowTiles<1> rows(q0, q1, warp);
  const int w0 = rows.w0, w1 = rows.w1, r0 = rows.r0[0], r1 = rows.r1[0];
  const float scale2 = p.scale * kLog2e;
  const int last = (q1 - 1) / kKeys;
  float lse2[2], delta[2];  // rows g and g + 8
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = r0 + g + 8 * r;
    lse2[r] = row < r1 ? p.lse[size_t(h) * p.T + row] * kLog2e : 0.0f;
    delta[r] = row < r1 ? p.delta[size_t(h) * p.T + row] : 0.0f;
  }

  // A step's K tiles into key buffer kb, its V tiles and subtree ends into
  // buffer b
  const auto stage = [&](const KeyStep<KT>& st, int kb, int b) {
    stage_key_step_canonical<Dk, kBlock>(st, last, Ks + kb * kTile, Vs + b * kTile, ends + b * kWgmmaRows, p, k, v,
                                         ld, kvh);
  };
  KeyStep<KT> step(p, 0, last, q0);
  stage_canonical<Dk, kRows, kBlock>(Qs, 0, q + h * D, ld, q0, p.T, D);
  stage_canonical<Dk, kRows, kBlock>(dOs, 0, dout + h * D, HD, q0, p.T, D);
  stage(step, 0, 0);
  cp_async_wait_all();
  fence_proxy_async();
  __syncthreads();

  // Q, dO (the warpgroup's 64 rows), and K, V as the Y of S, dP: K-major;
  // K as the Y of dQ: N-major
  const int wg_rows = (WG > 1 ? warpgroup_index() : 0) * kTile;
  const uint64_t desc_q = wgmma_desc(Qs + wg_rows, 128, kRowGroup), desc_o = wgmma_desc(dOs + wg_rows, 128, kRowGroup);
  float dq[1][kGroups][4];
  zero(dq[0]);
  float(&dq_flat)[Dk / 2] = reinterpret_cast<float(&)[Dk / 2]>(dq);
  uint32_t a[2 * KT][4] = {};  // dS's A fragments, read by dQ_j's products until step j + 1's first wait
  // zeroed before the first fence, pinned once here: pinned before each
  // step's fence instead (as the other kernels do, their products landed
  // by then), ptxas serialized every wgmma of the kernel (C7515, found by
  // trial; the build fails on such notes: tools/wgmma_serialization_guard.sh)
  wgmma_fence_operands(dq_flat);
  // Step j (key buffer kb = j % 3, buffer b = j % 2): dQ_j's products stay
  // in flight across the step's barrier, into step j + 1 (retired by its
  // S's wait), so that step j + 1 stages K_(j+2) into a third buffer, not
  // over K_j, which they read. (The next step's lookups and copies stay
  // before the MMAs here: after them, as in the forward and dK/dV, they
  // took 14-17 more registers, one resident block fewer at D <= 32; the
  // copies alone after them, the lookups before, as many.)
  for (int b = 0, kb = 0; step.kt[0] <= last; b ^= 1) {
    const KeyStep<KT> next(p, step.after(), last, q0);
    const int kb_next = kb == 2 ? 0 : kb + 1;  // step j - 2's: retired in step j - 1
    stage(next, kb_next, b ^ 1);
    bool seen[KT];
    step.seen_by(p, last, w0, w1, seen);
    const uint64_t desc_k = wgmma_desc(Ks + kb * kTile, 128, kRowGroup);
    const uint64_t desc_v = wgmma_desc(Vs + b * kTile, 128, kRowGroup);
    float s[KT][1][kKeyGroups][4], dp[KT][1][kKeyGroups][4];
    float(&s_flat)[kWgmmaRows / 2] = reinterpret_cast<float(&)[kWgmmaRows / 2]>(s);
    float(&dp_flat)[kWgmmaRows / 2] = reinterpret_cast<float(&)[kWgmmaRows / 2]>(dp);
    score_products<Dk>(s_flat, dp_flat, desc_q, desc_k, desc_o, desc_v);
    wgmma_wait<1>(s_flat);  // S landed (and dQ_(j-1) before it); dP may be in flight
    wgmma_fence_operands(a);  // kept until dQ_(j-1) landed
#pragma unroll
    for (int j = 0; j < KT; ++j) {
      const int k0 = step.kt[j] * kKeys, nk = seen[j] ? min(p.T, k0 + kKeys) - k0 : 0;
      const bool full = seen[j] && tile_all_visible(p, step.kt[j], r0, r1);
      query_rows_probs(s[j][0], lse2, scale2, r0, r1, k0, nk, full, ends + b * kWgmmaRows + kKeys * j, g, t);
    }
    wgmma_wait<0>(dp_flat);
#pragma unroll
    for (int j = 0; j < KT; ++j) query_rows_dscores(s[j][0], dp[j][0], delta);
    pack_a_fragments(dp, a);  // (pinned by it)
    wgmma_fence();
    const uint64_t desc_kn = wgmma_desc(Ks + kb * kTile, kRowGroup, 128);
#pragma unroll
    for (int u = 0; u < 2 * KT; ++u)  // keys 16 u on
      wgmma_rs<Dk, 1>(dq_flat, a[u], desc_kn + 2 * u * (kRowGroup >> 4), true);
    wgmma_commit();
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // buffers kb_next and b ^ 1 complete; b no longer read (key buffer kb still, by dQ_j)
    step = next;
    kb = kb_next;
  }
  wgmma_wait<0>(dq_flat);
  store_rows(p.dq + h * D, p.ld_qkv, dq[0], r0, r1, D, p.scale, p.scale, g, t);
#else
  (void)p, (void)q, (void)k, (void)v, (void)ld, (void)dout;
  __trap();
#endif
}

template <class Ops>
size_t tile_bytes(int rows, int pitch) {
  return size_t(rows) * pitch * sizeof(typename Ops::Elem);
}

// "dK/dV on mma.sync, head dims up to 128, 2 tiles a step": which of the
// instantiations a launch error is about.
std::string kernel_name(const char* pass, const char* mma, int max_d, int step) {
  return std::string(pass) + " on " + mma + ", head dims up to " + std::to_string(max_d) + ", " +
         std::to_string(step) + (step == 1 ? " tile" : " tiles") + " a step";
}

template <class K, class Src>
void launch_with_shared(const std::string& name, K kernel, dim3 grid, size_t smem, cudaStream_t stream,
                        const TreeAttentionParams& p, const TcInputs<Src>& in, unsigned threads = kThreads) {
  try {
    FORGE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    FORGE_LAUNCH(kernel, grid, threads, smem, stream, p, in.q, in.k, in.v, in.ld, in.dout);
  } catch (const Error& e) {
    // The launch's shape, and the device's shared-memory limit where it can
    // still be read (an earlier kernel's fault may surface here instead).
    int device = 0, optin = 0;
    const bool limit = cudaGetDevice(&device) == cudaSuccess &&
                       cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess;
    throw Error("tree attention kernel (" + name + ", T " + std::to_string(p.T) + "): grid " +
                std::to_string(grid.x) + " x " + std::to_string(grid.y) + " x " + std::to_string(grid.z) + " of " +
                std::to_string(threads) + " threads with " + std::to_string(smem) + " bytes of shared memory a block" +
                (limit ? " (the device allows " + std::to_string(optin) + ")" : std::string()) + ": " + e.what());
  }
}

// Dynamic shared memory of each kernel (the class's width, whatever D).
template <class Ops, int MaxD>
size_t fwd_shared_bytes(int KT) {
  using Dims = HeadDims<Ops, MaxD>;
  return tile_bytes<Ops>(Dims::fwd_rows + 4 * KT * kKeys, Dims::pitch) + 2 * KT * kKeys * sizeof(int32_t);
}
template <class Ops, int MaxD>
size_t dkdv_shared_bytes(int QT) {
  return tile_bytes<Ops>(2 * kKeyTile + 4 * QT * kQueries, HeadDims<Ops, MaxD>::pitch) +
         4 * QT * kQueries * sizeof(float);
}
template <class Ops, int MaxD>
size_t dq_shared_bytes(int KT) {
  using Dims = HeadDims<Ops, MaxD>;
  return tile_bytes<Ops>(2 * Dims::dq_rows + 4 * KT * kKeys, Dims::pitch) + 2 * KT * kKeys * sizeof(int32_t);
}

// Each kernel in two-tile steps where its class has them and p allows.
template <class Ops, int MaxD>
void launch_fwd(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, cudaStream_t stream) {
  constexpr int rows = HeadDims<Ops, MaxD>::fwd_rows;
  const dim3 grid((p.T + rows - 1) / rows, p.n_heads);
  if constexpr (HeadDims<Ops, MaxD>::fwd_key_tiles == 2)
    if (p.step_tiles != 1)
      return launch_with_shared(kernel_name("forward", Ops::kName, MaxD, 2), tree_attention_fwd_tc_kernel<Ops, MaxD, 2>,
                                grid, fwd_shared_bytes<Ops, MaxD>(2), stream, p, in);
  launch_with_shared(kernel_name("forward", Ops::kName, MaxD, 1), tree_attention_fwd_tc_kernel<Ops, MaxD, 1>, grid,
                     fwd_shared_bytes<Ops, MaxD>(1), stream, p, in);
}

template <class Ops, int MaxD>
void launch_dkdv(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, dim3 grid,
                 cudaStream_t stream) {
  if constexpr (HeadDims<Ops, MaxD>::dkdv_query_tiles == 2)
    if (p.step_tiles != 1)
      return launch_with_shared(kernel_name("dK/dV", Ops::kName, MaxD, 2), tree_attention_dkdv_tc_kernel<Ops, MaxD, 2>,
                                grid, dkdv_shared_bytes<Ops, MaxD>(2), stream, p, in);
  launch_with_shared(kernel_name("dK/dV", Ops::kName, MaxD, 1), tree_attention_dkdv_tc_kernel<Ops, MaxD, 1>, grid,
                     dkdv_shared_bytes<Ops, MaxD>(1), stream, p, in);
}
template <class Ops, int MaxD>
void launch_dq(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, cudaStream_t stream) {
  constexpr int rows = HeadDims<Ops, MaxD>::dq_rows;
  const dim3 grid((p.T + rows - 1) / rows, p.n_heads);
  if constexpr (HeadDims<Ops, MaxD>::dq_key_tiles == 2)
    if (p.step_tiles != 1)
      return launch_with_shared(kernel_name("dQ", Ops::kName, MaxD, 2), tree_attention_dq_tc_kernel<Ops, MaxD, 2>,
                                grid, dq_shared_bytes<Ops, MaxD>(2), stream, p, in);
  launch_with_shared(kernel_name("dQ", Ops::kName, MaxD, 1), tree_attention_dq_tc_kernel<Ops, MaxD, 1>, grid,
                     dq_shared_bytes<Ops, MaxD>(1), stream, p, in);
}

// The dK/dV grid (splits, blocks of key_rows keys, kv heads) and q = p
// with its steps a split: a block's steps split so that none takes more
// than an eighth of the most a block can have (its keys seen by every later
// query of the group); the splits of a block fastest in the grid, so that
// they start together (and in order, which only the mma.sync kernel relies
// on: wait_for_turn). Zeroes the turn and draw counters (sized for 64-key
// blocks: enough for larger ones).
dim3 dkdv_grid(const TreeAttentionParams& p, TreeAttentionParams& q, cudaStream_t stream, int key_rows = kKeyTile) {
  const int key_blocks = (p.T + key_rows - 1) / key_rows;
  const int most_steps = p.n_heads / p.n_kv_heads * ((p.T + kQueries - 1) / kQueries);
  q = p;
  q.dkdv_split_steps = std::max(kMinSplitSteps, (most_steps + kMaxSplits - 1) / kMaxSplits);
  FORGE_CHECK(p.dkdv_turn != nullptr, "tensor-core tree attention backward needs its dK/dV turn counters");
  FORGE_CUDA_CHECK(cudaMemsetAsync(p.dkdv_turn, 0, tree_attention_dkdv_turns(p.T, p.n_kv_heads) * sizeof(int32_t),
                                   stream));
  const int splits = std::max(1, (most_steps + q.dkdv_split_steps - 1) / q.dkdv_split_steps);
  return dim3(splits, key_blocks, p.n_kv_heads);
}

template <class Ops, int MaxD>
void launch_bwd(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, cudaStream_t stream) {
  TreeAttentionParams q;
  const dim3 grid = dkdv_grid(p, q, stream);
  launch_dkdv<Ops, MaxD>(q, in, grid, stream);
  launch_dq<Ops, MaxD>(p, in, stream);
}

// The wgmma kernels at head-dim class Dk, WG warpgroups a block
// (p.wgmma): shared memory (bytes) of WG + 2 KT tiles of 64 x Dk bf16 and
// two buffers of 32 KT subtree ends (the forward, KT key tiles a step:
// p.wgmma_step_keys / 32), 2 WG + 5 tiles and two of 64
// ends (dQ), or 2 WG + 4 tiles, two buffers of kWgmmaItems items' lse2 and
// delta and the drawn split (16 bytes, keeping alignment) (dK/dV).
size_t wgmma_tiles_bytes(int tiles, int Dk) { return size_t(tiles) * kWgmmaRows * Dk * sizeof(uint16_t); }
template <int Dk, int WG>
void launch_fwd_wgmma(const TreeAttentionParams& p, const TcInputs<__nv_bfloat16>& in, cudaStream_t stream) {
  const dim3 grid((p.T + WG * kWgmmaRows - 1) / (WG * kWgmmaRows), p.n_heads);
  const auto launch = [&](auto kt) {
    constexpr int KT = decltype(kt)::value;
    launch_with_shared(kernel_name("forward", WG == 1 ? "wgmma, 1 warpgroup" : "wgmma, 2 warpgroups", Dk, KT),
                       tree_attention_fwd_wgmma_kernel<Dk, WG, KT>, grid,
                       wgmma_tiles_bytes(WG + 2 * KT, Dk) + 2 * KT * kKeys * sizeof(int32_t), stream, p, in,
                       WG * kThreads);
  };
  if (p.wgmma_step_keys == 128) launch(std::integral_constant<int, 4>{});
  else launch(std::integral_constant<int, 2>{});
}
template <int Dk, int WG>
void launch_bwd_wgmma(const TreeAttentionParams& p, const TcInputs<__nv_bfloat16>& in, cudaStream_t stream) {
  TreeAttentionParams q;
  const dim3 grid = dkdv_grid(p, q, stream, WG * kWgmmaRows);
  const char* mma = WG == 1 ? "wgmma, 1 warpgroup" : "wgmma, 2 warpgroups";
  launch_with_shared(kernel_name("dK/dV", mma, Dk, 1), tree_attention_dkdv_wgmma_kernel<Dk, WG>, grid,
                     wgmma_tiles_bytes(2 * WG + 4, Dk) + 2 * kWgmmaItems * 2 * kQueries * sizeof(float) + 16, stream,
                     q, in, WG * kThreads);
  launch_with_shared(kernel_name("dQ", mma, Dk, 1), tree_attention_dq_wgmma_kernel<Dk, WG>,
                     dim3((p.T + WG * kWgmmaRows - 1) / (WG * kWgmmaRows), p.n_heads),
                     wgmma_tiles_bytes(2 * WG + 5, Dk) + 2 * kWgmmaRows * sizeof(int32_t), stream, p, in,
                     WG * kThreads);
}
// f(Dk, WG) (integral constants) at p's head-dim class and warpgroups.
template <class F>
void for_wgmma_class(const TreeAttentionParams& p, F&& f) {
  const auto with = [&](auto dk) {
    if (p.wgmma == 2) f(dk, std::integral_constant<int, 2>{});
    else f(dk, std::integral_constant<int, 1>{});
  };
  if (p.head_dim <= 32) with(std::integral_constant<int, 32>{});
  else if (p.head_dim <= 64) with(std::integral_constant<int, 64>{});
  else with(std::integral_constant<int, kMaxHeadDim>{});
}

// Whether the wgmma kernels take these inputs: asked for (p.wgmma), and
// 16-byte chunks of every row (D and the row strides multiples of 8, the
// operands 16-byte aligned).
bool wgmma_takes(const TreeAttentionParams& p, const TcInputs<__nv_bfloat16>& in) {
  const auto aligned = [](const void* x) { return x == nullptr || reinterpret_cast<uintptr_t>(x) % 16 == 0; };
  return p.wgmma > 0 && p.head_dim % 8 == 0 && in.ld % 8 == 0 && aligned(in.q) && aligned(in.k) && aligned(in.v) &&
         aligned(in.dout);
}

// Blocks on the SM take this much shared memory each besides their own
// (sm_80 and later).
constexpr size_t kSharedReservedPerBlock = 1024;

// Two tiles a step where the SM's shared memory holds, for every kernel
// that has them, the resident blocks its registers allow (by default) or at
// least one block (asked for two); else one.
template <class Ops, int MaxD>
int step_tiles(size_t shared_per_sm, int asked) {
  using Dims = HeadDims<Ops, MaxD>;
  if (asked == 1) return 1;
  const auto fits = [&](size_t bytes, int blocks) {
    return (bytes + kSharedReservedPerBlock) * (asked == 2 ? 1 : blocks) <= shared_per_sm;
  };
  const bool fwd = Dims::fwd_key_tiles == 1 || fits(fwd_shared_bytes<Ops, MaxD>(2), Dims::fwd_blocks(2));
  const bool dkdv = Dims::dkdv_query_tiles == 1 || fits(dkdv_shared_bytes<Ops, MaxD>(2), Dims::bwd_blocks(2));
  const bool dq = Dims::dq_key_tiles == 1 || fits(dq_shared_bytes<Ops, MaxD>(2), Dims::dq_blocks);
  return fwd && dkdv && dq ? 2 : 1;
}
template <class Ops>
int step_tiles_for(int D, size_t shared_per_sm, int asked) {
  if (D <= 32) return step_tiles<Ops, 32>(shared_per_sm, asked);
  if (D <= 64) return step_tiles<Ops, 64>(shared_per_sm, asked);
  return step_tiles<Ops, kMaxHeadDim>(shared_per_sm, asked);
}

// The head-dim class of D.
template <class Ops>
void launch_fwd_for(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, cudaStream_t stream) {
  if (p.head_dim <= 32) launch_fwd<Ops, 32>(p, in, stream);
  else if (p.head_dim <= 64) launch_fwd<Ops, 64>(p, in, stream);
  else launch_fwd<Ops, kMaxHeadDim>(p, in, stream);
}
template <class Ops>
void launch_bwd_for(const TreeAttentionParams& p, const TcInputs<typename Ops::Src>& in, cudaStream_t stream) {
  if (p.head_dim <= 32) launch_bwd<Ops, 32>(p, in, stream);
  else if (p.head_dim <= 64) launch_bwd<Ops, 64>(p, in, stream);
  else launch_bwd<Ops, kMaxHeadDim>(p, in, stream);
}

TcInputs<float> fp32_inputs(const TreeAttentionParams& p) { return {p.q, p.k, p.v, p.ld_qkv, p.dout}; }
}  // namespace

void launch_tree_attention_fwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  const TcInputs<__nv_bfloat16> tc{in.q, in.k, in.v, in.ld, nullptr};
  if (!wgmma_takes(p, tc)) return launch_fwd_for<Bf16Operands>(p, tc, stream);
  for_wgmma_class(p, [&](auto dk, auto wg) { launch_fwd_wgmma<decltype(dk)::value, decltype(wg)::value>(p, tc, stream); });
}

void launch_tree_attention_bwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream) {
  const TcInputs<__nv_bfloat16> tc{in.q, in.k, in.v, in.ld, p.dout_bf16};
  if (!wgmma_takes(p, tc)) return launch_bwd_for<Bf16Operands>(p, tc, stream);
  for_wgmma_class(p, [&](auto dk, auto wg) { launch_bwd_wgmma<decltype(dk)::value, decltype(wg)::value>(p, tc, stream); });
}

size_t tree_attention_dkdv_turns(int T, int n_kv_heads) {
  return 2 * size_t((T + kKeyTile - 1) / kKeyTile) * n_kv_heads;  // and as many draw counters (DkdvSplit)
}

int tree_attention_step_tiles(int D, bool bf16, size_t shared_per_sm, int asked) {
  FORGE_CHECK(asked >= 0 && asked <= 2, "tree attention: tiles a step must be 1 or 2 (0: the default)");
  return bf16 ? step_tiles_for<Bf16Operands>(D, shared_per_sm, asked)
              : step_tiles_for<Tf32x3Operands>(D, shared_per_sm, asked);
}

// What the 3xTF32 kernels need at the least (one tile a step).
size_t tree_attention_3xtf32_shared_bytes(int D) {
  using Ops = Tf32x3Operands;
  const auto most = [](auto cls) {
    constexpr int MaxD = decltype(cls)::value;
    return std::max({fwd_shared_bytes<Ops, MaxD>(1), dkdv_shared_bytes<Ops, MaxD>(1), dq_shared_bytes<Ops, MaxD>(1)});
  };
  if (D <= 32) return most(std::integral_constant<int, 32>{});
  if (D <= 64) return most(std::integral_constant<int, 64>{});
  return most(std::integral_constant<int, kMaxHeadDim>{});
}

void launch_tree_attention_fwd_3xtf32(const TreeAttentionParams& p, cudaStream_t stream) {
  launch_fwd_for<Tf32x3Operands>(p, fp32_inputs(p), stream);
}

void launch_tree_attention_bwd_3xtf32(const TreeAttentionParams& p, cudaStream_t stream) {
  launch_bwd_for<Tf32x3Operands>(p, fp32_inputs(p), stream);
}

namespace {

// What breaks canonical_stage_slot<Dk>'s promise for a block of `threads`
// threads, or "".
template <int Dk>
std::string staging_fault(int threads) {
  constexpr int chunks = Dk / 8;
  const int rows = threads / chunks;
  std::vector<int> hits(size_t(rows) * chunks, 0), bytes(threads);
  for (int t = 0; t < threads; ++t) {
    const StageSlot s = canonical_stage_slot<Dk>(unsigned(t));
    if (s.row < 0 || s.row >= rows || s.chunk < 0 || s.chunk >= chunks) return "thread " + std::to_string(t) + " off the tile";
    ++hits[size_t(s.row) * chunks + s.chunk];
    bytes[t] = 2 * canonical_chunk<Dk>(s.row, s.chunk);
  }
  for (size_t i = 0; i < hits.size(); ++i)
    if (hits[i] != 1) return "chunk " + std::to_string(i) + " copied " + std::to_string(hits[i]) + " times";
  for (int t0 = 0; t0 < threads; t0 += 8) {  // an 8-thread phase of 16-byte stores: one aligned 128-byte run
    std::sort(bytes.begin() + t0, bytes.begin() + t0 + 8);
    for (int i = 0; i < 8; ++i)
      if (bytes[t0] % 128 != 0 || bytes[t0 + i] != bytes[t0] + 16 * i)
        return "threads " + std::to_string(t0) + ".." + std::to_string(t0 + 7) + " share banks";
  }
  return "";
}

}  // namespace

std::string check_canonical_staging() {
  for (int threads : {128, 256}) {
    for (const auto& [dk, fault] : {std::pair{32, staging_fault<32>(threads)}, std::pair{64, staging_fault<64>(threads)},
                                    std::pair{kMaxHeadDim, staging_fault<kMaxHeadDim>(threads)}})
      if (!fault.empty()) return "D " + std::to_string(dk) + ", " + std::to_string(threads) + " threads: " + fault;
  }
  return "";
}

FORGE_CUDA_NAMESPACE_END
