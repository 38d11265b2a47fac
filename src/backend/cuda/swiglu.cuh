// SwiGLU on rows gu = [gate (F) | up (F)]:  out = silu(g) * u, silu(g) = g sigma(g).
// Backward (overwrites dgu): du = dout * g sigma(g),
//   dg = dout * u * sigma(g) * (1 + g (1 - sigma(g))).
// One thread per (row, i), grid-stride; 12 (forward) or 20 (backward) bytes per element.
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void launch_swiglu_fwd(const float* gu, float* out, int T, int F, cudaStream_t stream);
void launch_swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F,
                       cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
