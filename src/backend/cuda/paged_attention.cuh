// Paged KV cache for the rollout engine (backend.hpp): writing new k/v rows
// into their slots, and causal attention of query rows over their own
// sequence's cached positions, read block by block through the row's block
// table (online softmax in FP32, scale 1/sqrt(D), GQA). The cache holds FP32
// values, or bf16 in the bf16 mode (half the memory and the reads; rows are
// rounded to nearest even as they are written).
//
// kv_cache_write: one thread per element of a row.
// paged_attention, split-K (flash-decoding): a row's positions [0, n) are cut
// into S splits of L positions (L >= 128; S chosen so that T H S blocks fill
// the GPU, kTargetBlocks, and no split is empty of work for the longest row,
// max_len). Block = (row t, head h, split z), 4 warps; warp w takes
// positions start + w, + 4, ...: lane d reads k[d] and v[d] (d = lane + 32 c,
// coalesced), the warp sums q . k with shuffles and keeps its own running
// (m, l, o). The block merges its warps' (m, l, o) through shared memory:
//   m = max_w m_w,  l = sum_w l_w e^(m_w - m),  o = sum_w o_w e^(m_w - m).
// With S = 1 it writes out = o / l. Otherwise it writes (m, l, o) of its
// split to scratch, and a combine kernel, block per (row, head), merges the
// splits the same way and writes o / l. Splits past a row's end hold
// (m, l) = (-inf, 0) and weigh nothing.
#pragma once
#include "backend/backend.hpp"
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

constexpr int kPagedMaxHeadDim = 256;

// value_bytes: 4 (FP32 cache) or 2 (bf16 cache).
void launch_kv_cache_write(const KvCacheWriteArgs& a, size_t value_bytes, cudaStream_t stream);

// Floats of scratch launch_paged_attention_fwd needs for a (0 when one split).
size_t paged_attention_scratch_floats(const PagedAttentionArgs& a);
void launch_paged_attention_fwd(const PagedAttentionArgs& a, size_t value_bytes, float* scratch,
                                cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
