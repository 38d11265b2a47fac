// RMSNorm, rows of d:  y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps).
// Backward (accumulating, as the Backend interface says):
//   dx += rstd * w * dy - x * rstd^3 * <w * dy, x> / d
//   dw += sum_t dy_t * x_t * rstd_t
// Forward and dx: one block of 128 threads per row, a block reduction for
// the sum (one read of x, one write of y: 8 d bytes per row). dw: a block
// per 32 columns and 256-row chunk (8 row lanes summed in shared memory)
// writes the chunk's column sums to scratch, and a second kernel adds the
// chunks' sums into dw in chunk order: fixed orders throughout, so dw is
// deterministic (no atomics). (A block per column tile over all rows left
// the GPU nearly idle: 32 blocks at d 1024.) The bf16 mode keeps x as bf16
// for the backward (Backend::rmsnorm_fwd_keep): the forward also writes x16
// (2 bytes per element instead of a 6-byte pack pass), and the backward's
// recomputation and kernels read the bf16 x (no 6-byte unpack; 2 bytes
// less per read). Where y feeds only a GEMM that rounds it (bf16 operands),
// the forward writes it as bf16 (y16) instead: 2 bytes instead of 4 and no
// 6-byte rounding pass before the GEMM. The backward reads dy as bf16
// (dy16) where a GEMM wrote it so (the bf16 mode's activation gradients):
// 2 bytes less per element, in both of its reads.
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

// x16: null, or [T, d] bf16 for x rounded to nearest even (the kept copy).
// y or, where y is null, y16: the result in FP32 or rounded to bf16.
void launch_rmsnorm_fwd(const float* x, const float* w, float* y, __nv_bfloat16* y16, float* rstd,
                        __nv_bfloat16* x16, int T, int d, float eps, cudaStream_t stream);
void launch_rmsnorm_fwd(const __nv_bfloat16* x, const float* w, float* y, __nv_bfloat16* y16, float* rstd, int T,
                        int d, float eps, cudaStream_t stream);
// Floats of scratch launch_rmsnorm_bwd needs for T rows of d.
size_t rmsnorm_dw_partials(int T, int d);
void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                        float* partials, int T, int d, cudaStream_t stream);
// dy or, where dy is null, dy16: the incoming gradient in FP32 or as bf16.
void launch_rmsnorm_bwd(const __nv_bfloat16* x, const float* w, const float* rstd, const float* dy,
                        const __nv_bfloat16* dy16, float* dx, float* dw, float* partials, int T, int d,
                        cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
