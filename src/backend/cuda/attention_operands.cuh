// The operands of the tensor-core tree attention (tree_attention_tc.cu): how
// a tile of rows sits in shared memory and how a warp multiplies with it.
// Two kinds, the kernels' template parameter:
//   Bf16Operands    bf16 tiles [rows][Dk + 8], Dk the head-dim class;
//                   fragments by ldmatrix; mma m16n8k16 bf16 (the bf16 mode).
//   Tf32x3Operands  FP32 tiles [rows][Dk + 4], Dk the head-dim class;
//                   fragments by 32-bit shared loads, every operand split
//                   into TF32 big + small; three mma m16n8k8 TF32 a product
//                   (3xTF32, mma.cuh: about FP32's accuracy; the FP32 mode).
// For M row tiles of 16 (the MMA's M; A operand) R_0 .. R_{M-1} of a warp
// and a tile of 32 rows X or Y, each provides
//   load_a(a, R, pitch, step, lane)                 A fragments of k step `step`
//   mma_rows32(acc, a, X, pitch, step, lane)        acc[i] (16 x 32) += R_i X^T, one k step
//   mma_times_rows(out, P, Y, pitch, lane)          out[i] (16 x 8 G) += P_i Y
// each B fragment read once and used for all M (a warp of 32 rows reads a
// key tile half as often per MMA as one of 16), with P_i (16 x 32) in
// mma_rows32's accumulator layout: lane 4 g + t holds, of key group n,
// P[g][8n + 2t + c] in P[n][c] and P[g + 8][8n + 2t + c] in P[n][2 + c],
// c = 0, 1.
//   bf16: that is the A layout of one k16 step (two groups), rounded to bf16.
//   TF32: the A layout of a k8 step has columns t and t + 4, so group n is
//   one k8 step with its keys permuted (column t = key 8n + 2t, column t + 4
//   = key 8n + 2t + 1): a = P[n][0], P[n][2], P[n][1], P[n][3]; B takes rows
//   8n + 2t and 8n + 2t + 1 of Y. The sum over keys is the same.
// Banks (TF32): a row pitch of 4 x odd floats puts the eight rows g that
// lanes 4 g + t read at column t into distinct groups of four banks, and the
// rows 2t (+ 1) read at column g into distinct groups of eight: every
// fragment load is free of bank conflicts.
#pragma once
#include <cstdint>

#include "backend/cuda/mma.cuh"

FORGE_CUDA_NAMESPACE_BEGIN

struct Bf16Operands {
  using Elem = uint16_t;      // shared memory: bf16 bit patterns
  using Src = __nv_bfloat16;  // global memory
  static constexpr const char* kName = "mma.sync bf16";  // in launch errors
  static constexpr int kStep = 16;  // MMA K
  static constexpr int kPad = 8;    // elements of padding per row (16 bytes)
  static constexpr int kChunk = 8;  // elements per 16-byte load
  static constexpr bool kRowsInRegisters = true;  // a warp's A fragments fit in registers
  struct AFrag {
    uint32_t r[4];
  };
  static __device__ __forceinline__ Elem elem(Src x) { return __bfloat16_as_ushort(x); }

  // One ldmatrix: lane l gives row l % 16 at column 16 step + 8 (l / 16).
  static __device__ __forceinline__ void load_a(AFrag& a, const Elem* rows, int pitch, int step, int lane) {
    ldmatrix_x4(a.r, rows + (lane % 16) * pitch + 16 * step + (lane / 16) * 8);
  }

  // One ldmatrix per two key groups; matrix m = lane / 8 is rows
  // 8 (2 np + m / 2) .. + 7 at column 16 step + 8 (m % 2): registers 0, 1
  // are group 2 np's B, 2, 3 group 2 np + 1's.
  template <int M>
  static __device__ __forceinline__ void mma_rows32(float (&acc)[M][4][4], const AFrag (&a)[M], const Elem* x,
                                                    int pitch, int step, int lane) {
    const int m = lane / 8;
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(b, x + ((2 * np + m / 2) * 8 + lane % 8) * pitch + 16 * step + (m % 2) * 8);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int i = 0; i < M; ++i) {
        mma_bf16_m16n8k16(acc[i][2 * np], a[i].r, b0);
        mma_bf16_m16n8k16(acc[i][2 * np + 1], a[i].r, b1);
      }
    }
  }

  // Y read with ldmatrix.trans: matrix m = lane / 8 is rows 16 kk + 8 (m % 2)
  // .. + 7 at columns 8 (2 dp + m / 2): registers 0, 1 are column group
  // 2 dp's B, 2, 3 group 2 dp + 1's.
  template <int M, int G>
  static __device__ __forceinline__ void mma_times_rows(float (&out)[M][G][4], const float (&P)[M][4][4],
                                                        const Elem* y, int pitch, int lane) {
    const int m = lane / 8;
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t a[M][4];
#pragma unroll
      for (int i = 0; i < M; ++i) {
        a[i][0] = pack_bf16x2(P[i][2 * kk][0], P[i][2 * kk][1]);
        a[i][1] = pack_bf16x2(P[i][2 * kk][2], P[i][2 * kk][3]);
        a[i][2] = pack_bf16x2(P[i][2 * kk + 1][0], P[i][2 * kk + 1][1]);
        a[i][3] = pack_bf16x2(P[i][2 * kk + 1][2], P[i][2 * kk + 1][3]);
      }
      const Elem* r = y + (16 * kk + (m % 2) * 8 + lane % 8) * pitch + (m / 2) * 8;
#pragma unroll
      for (int dp = 0; dp < G / 2; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, r + 16 * dp);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
        for (int i = 0; i < M; ++i) {
          mma_bf16_m16n8k16(out[i][2 * dp], a[i], b0);
          mma_bf16_m16n8k16(out[i][2 * dp + 1], a[i], b1);
        }
      }
    }
  }
};

struct Tf32x3Operands {
  using Elem = float;
  using Src = float;
  static constexpr const char* kName = "mma.sync 3xTF32";  // in launch errors
  static constexpr int kStep = 8;
  static constexpr int kPad = 4;
  static constexpr int kChunk = 4;
  // 8 registers a k step (big and small): read from shared memory at each use
  static constexpr bool kRowsInRegisters = false;
  struct AFrag {
    uint32_t big[4], small[4];
  };
  static __device__ __forceinline__ Elem elem(Src x) { return x; }

  // d += a b in 3xTF32, the small products first.
  static __device__ __forceinline__ void mma3(float (&d)[4], const AFrag& a, const uint32_t (&b_big)[2],
                                              const uint32_t (&b_small)[2]) {
    mma_tf32_m16n8k8(d, a.small, b_big);
    mma_tf32_m16n8k8(d, a.big, b_small);
    mma_tf32_m16n8k8(d, a.big, b_big);
  }

  // a[0..3] = R[g][8 step + t], R[g + 8][..], R[g][8 step + t + 4], R[g + 8][..]
  static __device__ __forceinline__ void load_a(AFrag& a, const Elem* rows, int pitch, int step, int lane) {
    const Elem* r = rows + (lane >> 2) * pitch + 8 * step + (lane & 3);
    split_tf32(r[0], a.big[0], a.small[0]);
    split_tf32(r[8 * pitch], a.big[1], a.small[1]);
    split_tf32(r[4], a.big[2], a.small[2]);
    split_tf32(r[8 * pitch + 4], a.big[3], a.small[3]);
  }

  // B of key group n = X^T: b[0] = X[8n + g][8 step + t], b[1] = X[8n + g][8 step + t + 4].
  template <int M>
  static __device__ __forceinline__ void mma_rows32(float (&acc)[M][4][4], const AFrag (&a)[M], const Elem* x,
                                                    int pitch, int step, int lane) {
    const Elem* r = x + (lane >> 2) * pitch + 8 * step + (lane & 3);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      uint32_t bb[2], bs[2];
      split_tf32(r[8 * n * pitch], bb[0], bs[0]);
      split_tf32(r[8 * n * pitch + 4], bb[1], bs[1]);
#pragma unroll
      for (int i = 0; i < M; ++i) mma3(acc[i][n], a[i], bb, bs);
    }
  }

  // Key group kk is one k8 step (keys permuted, above): B of column group
  // dg: b[0] = Y[8 kk + 2t][8 dg + g], b[1] = Y[8 kk + 2t + 1][8 dg + g].
  template <int M, int G>
  static __device__ __forceinline__ void mma_times_rows(float (&out)[M][G][4], const float (&P)[M][4][4],
                                                        const Elem* y, int pitch, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      AFrag a[M];
#pragma unroll
      for (int i = 0; i < M; ++i) {
        split_tf32(P[i][kk][0], a[i].big[0], a[i].small[0]);
        split_tf32(P[i][kk][2], a[i].big[1], a[i].small[1]);
        split_tf32(P[i][kk][1], a[i].big[2], a[i].small[2]);
        split_tf32(P[i][kk][3], a[i].big[3], a[i].small[3]);
      }
      const Elem* r = y + (8 * kk + 2 * (lane & 3)) * pitch + (lane >> 2);
#pragma unroll
      for (int dg = 0; dg < G; ++dg) {
        uint32_t bb[2], bs[2];
        split_tf32(r[8 * dg], bb[0], bs[0]);
        split_tf32(r[pitch + 8 * dg], bb[1], bs[1]);
#pragma unroll
        for (int i = 0; i < M; ++i) mma3(out[i][dg], a[i], bb, bs);
      }
    }
  }
};

FORGE_CUDA_NAMESPACE_END
