// AdamW on FP32 master weights, the CPU backend's formula:
//   g = grad * grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   param = param (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
// with bc_k = 1 - b_k^step computed on the host. One thread per element,
// grid-stride: 16 bytes read and 12 written per parameter.
#pragma once
#include <cstddef>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

struct AdamWKernelParams {
  float beta1, beta2, eps, grad_scale;
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / bc1
  float inv_sqrt_bc2;  // 1 / sqrt(bc2)
};

void launch_adamw(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& p, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
