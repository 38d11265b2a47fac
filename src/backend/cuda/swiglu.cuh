// SwiGLU on rows gu = [gate (F) | up (F)]:  out = silu(g) * u, silu(g) = g sigma(g).
// Backward (overwrites dgu): du = dout * g sigma(g),
//   dg = dout * u * sigma(g) * (1 + g (1 - sigma(g))).
// One thread per (row, i), grid-stride; 12 (forward) or 20 (backward) bytes
// per element from FP32 gu. The bf16 mode keeps g|u as bf16 for the backward
// (Backend::swiglu_fwd_keep): the forward also writes gu16 = bf16(gu) (4
// bytes more per element instead of a 12-byte pack pass), and the backward's
// kernels read the bf16 g|u (8 bytes less per element, no 12-byte unpack).
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

// gu16: null, or [T, 2F] bf16 for g|u rounded to nearest even.
void launch_swiglu_fwd(const float* gu, float* out, __nv_bfloat16* gu16, int T, int F, cudaStream_t stream);
void launch_swiglu_fwd(const __nv_bfloat16* gu, float* out, int T, int F, cudaStream_t stream);
void launch_swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F, cudaStream_t stream);
void launch_swiglu_bwd(const __nv_bfloat16* gu, const float* dout, float* dgu, int T, int F, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
