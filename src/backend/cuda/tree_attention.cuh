// Tree-masked attention on the GPU (FlashAttention-2 structure), FP32 or
// with bf16 Q/K/V (p.qkv_bf16 set). FP32: the tensor-core kernels of
// tree_attention_tc.cu in 3xTF32 (p.tf32x3: FP32 operands split into two
// TF32 parts, three MMAs a product, about FP32's accuracy; FP32 scores,
// statistics and accumulators), else the SIMT kernels below, exact FP32
// throughout (the reference). bf16: Q, K and V are rounded to bf16 into
// that scratch, packed [T][q | k | v], and the tensor-core kernels of tree_attention_tc.cu read
// it (scores, softmax statistics, accumulators, lse, O and the gradients
// FP32; P, dO and dS enter their MMAs as bf16). Forward and backward each
// round into the scratch (the same values), so the backward's P matches the
// forward's lse.
//
// Tokens of a packed bin in DFS pre-order; query i sees key j iff
// j <= i < subtree_end[j]. Scale 1/sqrt(D); query head h reads kv head
// h / (H / Hkv). No padding: T need not be a multiple of the tile.
//
// SIMT kernels: tiles of kTile = 32 rows for queries and keys; blocks of 4 warps. Per key
// tile the host-side pre-pass stores max and min of subtree_end
// (tile_max_end, tile_min_end). A key tile with tile_max_end <= q0 is seen by
// no query of a tile starting at q0: it is skipped without loading, and with
// it every key before tile_max_end (seen_key_tile_from). A key
// tile that ends at or before q0 and whose tile_min_end >= q1 is visible to
// every query of the tile: the mask is not evaluated.
//
// Forward, block = (query tile, head): Q tile (pre-scaled), then per visited
// key tile K and V in shared memory (rows padded to D+1 floats: lane-strided
// and row-strided reads are both free of bank conflicts). A warp owns 8
// query rows; lane j scores key j for its 8 rows, the warp reduces max and
// sum with shuffles (online softmax: m, l per row), writes the row's P to
// shared memory, and lane d accumulates O[row][d] (d = lane + 32c, c < 4) in
// registers. out = O / l, lse = m + log l.
// Traffic per block: Q tile once, K and V tiles once per visited key tile.
//
// Backward (recomputing P = exp(S - lse)), D_i = dO_i . O_i from a pre-pass:
//   dS_ij = P_ij (dO_i . V_j - D_i)
//   dV_j = sum_i P_ij dO_i ; dK_j = scale sum_i dS_ij Q_i ; dQ_i = scale sum_j dS_ij K_j
// Two kernels, no atomics (deterministic):
//   dK/dV, block = (key tile, kv head): a warp owns 8 keys; for every head of
//     the group and every query tile in [key tile, tile_max_end) lane i scores
//     query i against the warp's keys, writes P and dS to shared memory, and
//     lane d accumulates dK and dV rows in registers.
//   dQ, block = (query tile, head): the forward's loop over key tiles, lane j
//     computing dS_ij, lane d accumulating dQ rows.
//
// Limits: head_dim <= 128 (kMaxHeadDim); launchers throw forge::Error beyond.
// Shared memory: (3 to 4) * 32 * (D + 1) floats plus scratch, up to 75 KB for
// D = 128 (the launchers raise the dynamic shared memory limit).
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

constexpr int kAttnTile = 32;
constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 128;

struct TreeAttentionParams {
  int T = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ld_qkv = 0;
  float scale = 1.0f;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const int32_t* subtree_end = nullptr;
  int32_t* tile_max_end = nullptr;  // [key tiles] scratch, filled by the launchers
  int32_t* tile_min_end = nullptr;
  float* out = nullptr;  // [T, H * D]
  float* lse = nullptr;  // [H, T]
  // bf16 mode: the output as bf16 ([T, H * D], the caller's kept copy), which
  // the tensor-core forward writes instead of out and the backward's delta
  // pre-pass reads instead of out; or null
  __nv_bfloat16* out_bf16 = nullptr;
  // backward
  const float* dout = nullptr;
  float* delta = nullptr;  // [H, T] scratch
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  // bf16 mode: T * (n_heads + 2 n_kv_heads) * head_dim elements, Q|K|V rounded
  // and packed [T][q | k | v] by the forward; null: FP32
  __nv_bfloat16* qkv_bf16 = nullptr;
  // The caller keeps qkv_bf16 from its forward (TreeAttentionArgs::qkv_bf16):
  // the backward reads it as it is and not p.q, p.k, p.v
  bool qkv_bf16_kept = false;
  // ... and the forward finds Q, K and V there already (TreeAttentionArgs::qkv_bf16_given)
  bool qkv_bf16_given = false;
  // bf16 backward: dO as bf16 ([T][H * D]), which the tensor-core kernels
  // read: the caller's (TreeAttentionGrads::dout_bf16; dout null), or
  // scratch that the delta pre-pass rounds dout into (dout_bf16_out, the
  // same buffer)
  const __nv_bfloat16* dout_bf16 = nullptr;
  __nv_bfloat16* dout_bf16_out = nullptr;
  // FP32 (qkv_bf16 null): the 3xTF32 tensor-core kernels; false: the exact SIMT ones
  bool tf32x3 = false;
  // Tensor-core backward: counters zeroed by the launcher, for the launched
  // dK/dV grid's Y key blocks and Z kv heads: [0, Z Y) ordering the dK/dV
  // adds of a block's splits, [Z Y, 2 Z Y) the wgmma kernel's splits draw
  // their index from (tree_attention_dkdv_turns, sized for 64-key blocks;
  // tree_attention_tc.cu)
  int32_t* dkdv_turn = nullptr;
  int dkdv_split_steps = 0;  // set by the launcher: dK/dV steps per split
  // Tensor-core kernels: 32-row tiles a step of the forward and dQ (key
  // tiles) and of dK/dV (query tiles), 1 or 2 (0: 2); a kernel compiled
  // for one only at the head-dim class runs one (tree_attention_step_tiles)
  int step_tiles = 0;
  // bf16: the forward and backward on wgmma (sm_90a; tree_attention_tc.cu),
  // where the head dim, row strides and alignment allow 16-byte chunks
  // (else the mma.sync kernels), with this many warpgroups (1 or 2) a block
  // (64 queries, or dK/dV keys, each); 0: the mma.sync kernels
  int wgmma = 0;
  // The wgmma forward's keys a step: 64 (0 too) or 128 (S is 64 x 128 a
  // warpgroup, as FlashAttention-3's forward at D 128)
  int wgmma_step_keys = 0;
};

inline int attention_tiles(int T) { return (T + kAttnTile - 1) / kAttnTile; }

// Every query in [q0, q1) sees every key of key tile kt (which lies wholly
// at or before q0 and inside every subtree its queries are in).
__device__ __forceinline__ bool tile_all_visible(const TreeAttentionParams& p, int kt, int q0, int q1) {
  const int k0 = kt * kAttnTile;
  return k0 + kAttnTile <= p.T && k0 + kAttnTile - 1 <= q0 && p.tile_min_end[kt] >= q1;
}

// The first key tile at or after kt, up to last, that a query at or past q0
// may see (tile_max_end > q0); past last when none is left. Where tile kt is
// seen by none of them, neither is any key before its tile_max_end: in DFS
// pre-order those keys are descendants of tile kt's keys, whose subtrees end
// by then. So the walk goes on at the tile holding key tile_max_end[kt], and
// a query tile late in a bin of many samples passes each earlier sample (or
// sibling subtree) in one step, not tile by tile. Block-uniform.
__device__ __forceinline__ int seen_key_tile_from(const TreeAttentionParams& p, int kt, int last, int q0) {
  while (kt <= last && p.tile_max_end[kt] <= q0) kt = max(kt + 1, p.tile_max_end[kt] / kAttnTile);
  return kt;
}

// p.tile_max_end / p.tile_min_end: attention_tiles(T) int32 of scratch each.
// bf16 mode and p.tf32x3 run the tensor-core forward (tree_attention_tc.cu).
void launch_tree_attention_fwd(const TreeAttentionParams& p, cudaStream_t stream);
// Q, K and V rounded to bf16 (in p.qkv_bf16), row stride ld.
struct Bf16Qkv {
  const __nv_bfloat16* q;
  const __nv_bfloat16* k;
  const __nv_bfloat16* v;
  int ld;
};
// The forward on tensor cores; the tile bounds must be filled. Called by
// launch_tree_attention_fwd in bf16 mode.
void launch_tree_attention_fwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream);
// The backward on tensor cores, after the delta pre-pass (p.delta filled,
// and dO in p.dout_bf16 ([T][H * D]): the caller's, or rounded into it in
// the same pass).
void launch_tree_attention_bwd_tc(const TreeAttentionParams& p, const Bf16Qkv& in, cudaStream_t stream);
// FP32 Q, K, V and dO on tensor cores in 3xTF32 (p.q, p.k, p.v, p.dout);
// called by the launchers when p.tf32x3 is set. Their largest dynamic shared
// memory a block at this head dim in one-tile steps (132.5 KiB at D 128,
// dQ's 102 KiB at D 64), which the device must offer
// (cudaDevAttrMaxSharedMemoryPerBlockOptin).
size_t tree_attention_3xtf32_shared_bytes(int head_dim);
void launch_tree_attention_fwd_3xtf32(const TreeAttentionParams& p, cudaStream_t stream);
void launch_tree_attention_bwd_3xtf32(const TreeAttentionParams& p, cudaStream_t stream);
// TreeAttentionParams::step_tiles at this head dim (bf16 or 3xTF32
// operands): 1 where `asked` is 1; else 2 where the device's shared memory
// a SM (shared_per_sm bytes) holds, with two-tile steps, the resident blocks
// the registers allow (asked 0: the default; an A100's 164 KiB does not at
// D 128) or at least one block (asked 2), in every kernel that has them;
// else 1 (the caller says so where 2 was asked). Two: the forward in steps
// of 64 keys (bf16; 3xTF32 at 32 < D <= 64), dK/dV in steps of 64 queries
// (bf16; 3xTF32 at D <= 64) and dQ in steps of 64 keys (D > 64).
int tree_attention_step_tiles(int head_dim, bool bf16, size_t shared_per_sm, int asked);
// The tensor-core backward's p.dkdv_turn: this many int32 counters (two a
// 64-key block and kv head: the turns, then the wgmma dK/dV kernel's draws,
// as many as a grid of 64-key blocks needs).
size_t tree_attention_dkdv_turns(int T, int n_kv_heads);
// Also p.delta: H * T floats of scratch, and p.dkdv_turn. Overwrites the dq,
// dk, dv columns. bf16 mode and p.tf32x3 run the tensor-core backward
// (tree_attention_tc.cu).
void launch_tree_attention_bwd(const TreeAttentionParams& p, cudaStream_t stream);

// The wgmma kernels' staging map (tree_attention_tc.cu, stage_canonical) at
// D 32, 64 and 128 and 128 or 256 threads: every chunk of the rows a pass
// covers copied once, and each 8-thread phase of a warp's 16-byte stores
// one aligned 128-byte run (no shared-memory bank conflict). "" or what
// breaks it. Host code: no device needed.
std::string check_canonical_staging();

FORGE_CUDA_NAMESPACE_END
