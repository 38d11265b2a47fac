// bf16 rounding for the bf16 precision mode (docs/cuda.md, "Precision").
// bf16 keeps FP32's 8 exponent bits and 8 of its 24 significand bits;
// __float2bfloat16 rounds to nearest even: bf16(x) = x (1 + e), |e| <= 2^-9.
//
// round_to_bf16, thread per element (grid-stride) of a rows x cols matrix
// with row stride ld_src:
//   dst[r * ld_dst + c] = bf16(src[r * ld_src + c])
// into __nv_bfloat16 (GEMM operands, attention Q/K/V) or into float (bf16
// values kept in FP32 storage: the head's hidden states, whose GEMM partner,
// the head weight, stays FP32).
// pack_bf16 / unpack_bf16: n contiguous values to bf16 and back (the saved
// activations of a training pass in bf16 mode).
#pragma once
#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

void launch_round_to_bf16(const float* src, int rows, int cols, int ld_src, __nv_bfloat16* dst,
                          int ld_dst, cudaStream_t stream);
void launch_round_to_bf16(const float* src, int rows, int cols, int ld_src, float* dst, int ld_dst,
                          cudaStream_t stream);
void launch_pack_bf16(const float* src, __nv_bfloat16* dst, size_t n, cudaStream_t stream);
void launch_unpack_bf16(const __nv_bfloat16* src, float* dst, size_t n, cudaStream_t stream);

// A kept activation's value, FP32 or bf16 (kernels templated on the input type).
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
// A result stored as FP32 or as bf16 (rounded to nearest even, as pack_bf16).
__device__ __forceinline__ void store_value(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_value(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }

FORGE_CUDA_NAMESPACE_END
