// SwiGLU on rows gu = [gate (F) | up (F)]:  out = silu(g) * u, silu(g) = g sigma(g).
// Backward (overwrites dgu): du = dout * g sigma(g),
//   dg = dout * u * sigma(g) * (1 + g (1 - sigma(g))).
// One thread per (row, i), grid-stride; 12 (forward) or 20 (backward) bytes
// per element from FP32 gu. The bf16 mode keeps g|u as bf16 for the backward
// (Backend::swiglu_fwd_keep): the forward also writes gu16 = bf16(gu) (4
// bytes more per element instead of a 12-byte pack pass), and the backward's
// kernels read the bf16 g|u (8 bytes less per element, no 12-byte unpack).
// Where out or dgu feeds only a GEMM that rounds it (bf16 operands), it is
// written as bf16 (out16, dgu16): 2 bytes instead of 4 and no 6-byte
// rounding pass before the GEMM. The backward reads dout as bf16 (dout16)
// where a GEMM wrote it so (the bf16 mode's activation gradients): 2 bytes
// instead of 4.
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

// gu16: null, or [T, 2F] bf16 for g|u rounded to nearest even. out or,
// where out is null, out16 (dgu or dgu16): the result in FP32 or as bf16;
// dout or, where dout is null, dout16: the incoming gradient.
void launch_swiglu_fwd(const float* gu, float* out, __nv_bfloat16* out16, __nv_bfloat16* gu16, int T, int F,
                       cudaStream_t stream);
void launch_swiglu_fwd(const __nv_bfloat16* gu, float* out, __nv_bfloat16* out16, int T, int F, cudaStream_t stream);
void launch_swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F, cudaStream_t stream);
void launch_swiglu_bwd(const __nv_bfloat16* gu, const float* dout, const __nv_bfloat16* dout16, float* dgu,
                       __nv_bfloat16* dgu16, int T, int F, cudaStream_t stream);

FORGE_CUDA_NAMESPACE_END
