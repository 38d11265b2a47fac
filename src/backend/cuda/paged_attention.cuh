// Paged KV cache for the rollout engine (model/backend.hpp): writing new k/v
// rows into their slots, and causal attention of query rows over their own
// sequence's cached positions, read block by block through the row's block
// table (FP32, online softmax, scale 1/sqrt(D), GQA).
//
// kv_cache_write: one thread per element of a row.
// paged_attention: block = (query row t, head h), 128 threads. Per chunk of
// 128 positions, thread j scores position p0 + j (a D-long dot product with
// the cached key, located through the table), the block reduces max and sum,
// P goes to shared memory, and thread d accumulates O[d] (d = tid + 128 c,
// D <= 256) over the chunk's cached values (coalesced across d). Each cached
// k and v row of the sequence is read once per (row, head); the key reads are
// one row per thread (not coalesced): fine for correctness and short
// contexts, the split-K decode kernel is future work.
#pragma once
#include "backend/backend.hpp"
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

constexpr int kPagedMaxHeadDim = 256;

void launch_kv_cache_write(const KvCacheWriteArgs& a, cudaStream_t stream);
void launch_paged_attention_fwd(const PagedAttentionArgs& a, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
