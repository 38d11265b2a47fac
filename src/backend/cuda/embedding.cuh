// Row gathers and scatters: the embedding lookup and its gradient, and the
// head-row gather/scatter of the policy model.
//   gather:            dst[r] = src[rows[r]]
//   scatter_add:       dst[rows[r]] += src[r], rows distinct (no atomics)
//   embedding_bwd:     dtable[tokens[t]] += dout[t], tokens repeat: FP32
//                      atomicAdd, so the summation order of a repeated
//                      token's rows is not deterministic
// One thread per element, grid-stride; a warp reads 32 consecutive floats of
// one row (coalesced when d >= 32).
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void launch_gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d,
                        cudaStream_t stream);
void launch_scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d,
                             cudaStream_t stream);
void launch_embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d,
                          cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
