// Elementwise and reduction kernels over flat FP32 arrays: fill, y += x,
// x *= s, and sum of squares (FP64 accumulation: per-thread partials, a block
// reduction, each block's sum added by one block in block order: the same
// bits every run).
#pragma once
#include <cstddef>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void launch_fill(float* x, float value, size_t n, cudaStream_t stream);
void launch_add_inplace(float* y, const float* x, size_t n, cudaStream_t stream);
void launch_scale(float* x, float s, size_t n, cudaStream_t stream);
// scratch[0] = sum x^2; scratch holds 1 + kSumSquaresBlocks device doubles
// (the blocks' partial sums after the result).
inline constexpr unsigned kSumSquaresBlocks = 1024;
void launch_sum_squares(const float* x, size_t n, double* scratch, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
