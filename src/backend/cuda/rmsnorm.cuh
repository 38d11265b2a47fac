// RMSNorm, rows of d:  y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps).
// Backward (accumulating, as the Backend interface says):
//   dx += rstd * w * dy - x * rstd^3 * <w * dy, x> / d
//   dw += sum_t dy_t * x_t * rstd_t
// Forward and dx: one block of 128 threads per row, a block reduction for
// the sum (one read of x, one write of y: 8 d bytes per row). dw: one block
// per 32 columns, 8 row lanes, summed in shared memory in a fixed order, so
// dw is deterministic (no atomics).
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void launch_rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                        float eps, cudaStream_t stream);
void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                        float* dx, float* dw, int T, int d, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
