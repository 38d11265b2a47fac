// Warp-level tensor-core MMA (sm_80 and later), bf16 and TF32:
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
//   D (16 x 8, FP32) += A (16 x 16, bf16) B (16 x 8, bf16)
// Fragments, per the PTX ISA ("Matrix Fragments for mma.m16n8k16 with
// floating point type"); lane = 4 g + t (g = lane / 4, t = lane % 4); each
// 32-bit register holds two bf16, the lower column (or row of B) in its low
// half:
//   A: a[0] = A[g][2t..2t+1]     a[1] = A[g+8][2t..2t+1]
//      a[2] = A[g][2t+8..2t+9]   a[3] = A[g+8][2t+8..2t+9]
//   B: b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   D: d[0], d[1] = D[g][2t], D[g][2t+1];  d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
// So B = X^T for a row-major X (rows n, columns k) reads two adjacent elements
// of one row of X per register; D's layout of two adjacent n8 tiles is A's
// layout of one k16 step (FlashAttention's register reuse of P).
//
// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 loads four 8x8 matrices of
// 16-bit values from shared memory: lane l gives the address of row l % 8 of
// matrix l / 8 (16-byte aligned), and register r[i] receives, of matrix i,
// the two elements of row l / 4 at columns 2 (l % 4) and 2 (l % 4) + 1, or
// with .trans those of rows 2 (l % 4) and 2 (l % 4) + 1 at column l / 4.
// So rows 0-15 x columns 0-15 of a row-major tile, lane l giving row l % 16
// at column 8 (l / 16), arrive as an A fragment; and a row-major X read so
// (or a row-major Y read with .trans) gives B fragments of X^T (of Y).
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
//   D (16 x 8, FP32) += A (16 x 8, TF32) B (8 x 8, TF32)
// TF32 operands are FP32 bit patterns with 10 mantissa bits (to_tf32:
// cvt.rna.tf32.f32, nearest, ties away from zero), one per register:
//   A: a[0] = A[g][t]  a[1] = A[g+8][t]  a[2] = A[g][t+4]  a[3] = A[g+8][t+4]
//   B: b[0] = B[t][g]  b[1] = B[t+4][g]        D: as for m16n8k16
// 3xTF32 (split_tf32): x = big + small, big = tf32(x), small = x - big
// (truncated to TF32 by the MMA); a b ~ a_big b_big + a_big b_small +
// a_small b_big, the dropped a_small b_small and small's truncation about
// 2^-21 relative: about FP32's accuracy at three TF32 MMAs a product
// (CUTLASS's OpMultiplyAddFastF32).
// Under FORGE_CUDA_EMULATION the MMAs and ldmatrix are warp collectives of
// the emulation (cuda_emulation.hpp) with the same layouts.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_compat.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::mma_m16n8k16_bf16(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::ldmatrix_x4(r, row, false);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* row) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::ldmatrix_x4(r, row, true);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
#endif
}

__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::mma_m16n8k8_tf32(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// x rounded to TF32 (nearest, ties away from zero), as FP32 bits.
__device__ __forceinline__ uint32_t to_tf32(float x) {
#ifdef FORGE_CUDA_EMULATION
  return forge_emu::cvt_rna_tf32(x);
#else
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#endif
}

// The 3xTF32 parts of x: big = x rounded to TF32, small = x - big (exact in
// FP32). big by integer arithmetic: half a TF32 ulp added to the bits, the
// low 13 dropped (nearest, ties away from zero: cvt.rna's result for every
// finite x, in two instructions where cvt.rna takes four on sm_90). small
// is passed unrounded: the MMA reads a TF32 operand's top 19 bits, so it is
// truncated there (CUTLASS's fast 3xTF32 does the same; the emulated MMA
// drops the low 13 bits as the tensor cores do): at most 2^-21 |x| off
// where rounding it gave 2^-22, in the order of the dropped small x small
// term. Three instructions a value where two cvt.rna took nine. A NaN x
// still reaches the products through small; an infinite x gives NaN, as
// before.
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big));
}

// Two values rounded to bf16 (nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16(hi))) << 16);
}

FORGE_CUDA_NAMESPACE_END
