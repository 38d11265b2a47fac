// Warpgroup-level tensor-core MMA (sm_90a: H100, H200), bf16 in, FP32 out:
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16, N = 16, 32, 64, 128
//   D (64 x N, FP32) (+)= A (64 x 16, bf16) B (16 x N, bf16)
// issued by the 128 threads of a warpgroup (warps 4 q .. 4 q + 3) together,
// asynchronously: wgmma_fence() before the first one, after the
// accumulators and A's registers are written (none of them may be written
// between the fence and the MMAs), wgmma_commit() closes a
// group of them, wgmma_wait<P>() returns when all but the newest P groups
// have landed in the accumulators (read them only after it). Shared memory
// written by ordinary stores must be made visible to the MMA's (async)
// proxy first: fence_proxy_async() in each writing thread, then a barrier.
//
// Fragments, per the PTX ISA ("Register Fragments ... wgmma.mma_async
// .m64nNk16"); thread r of the warpgroup: w = r / 32 (its 16 rows), lane =
// r % 32 = 4 g + t:
//   D: d[4 j + 2 v + u] = D[16 w + g + 8 v][8 j + 2 t + u], j < N / 8
//   A in registers: mma.sync m16n8k16's A (mma.cuh) for rows 16 w .. + 15
// A (or B) in shared memory: a 64-bit matrix descriptor (wgmma_desc): start
// address, leading byte offset LBO and stride byte offset SBO (bits 0-13,
// 16-29, 32-45, each >> 4), no swizzle (bits 62-63 zero). Its canonical
// layouts ("Canonical Layouts", 16-bit elements, T = 8) are made of core
// matrices of 8 rows of 16 bytes (128 contiguous bytes):
//   K-major  (trans 0): a core matrix is 8 rows (m or n) x 8 k;
//            element (mn, k) at (mn % 8) 16 + (mn / 8) SBO + (k % 8) 2 + (k / 8) LBO
//   MN-major (trans 1): a core matrix is 8 rows (k) x 8 mn;
//            element (mn, k) at (mn % 8) 2 + (mn / 8) SBO + (k % 8) 16 + (k / 8) LBO
// (CuTe: ((8,m),(T,2k)):((1T,SBO),(1,LBO)) and ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))).
// So a row-major K tile [keys][D] is B = K^T K-major for S = Q K^T, and a
// row-major V tile [keys][D] is B = V MN-major for O = P V.
//
// Status: checked under the emulation and by the layout probe
// (fragment_layouts.hpp: check_wgmma_layouts) on the emulation; the same
// probe on an H100 or H200 (CudaDevice.WgmmaLayoutsFollowThePtxIsa) decides
// whether the emulation's reading of the ISA is the hardware's. Used by the
// opt-in bf16 attention forward and backward (tree_attention_tc.cu,
// FORGE_CUDA_ATTENTION_WGMMA=1), not yet run on a GPU.
//
// Compiled for sm_90a only (__CUDA_ARCH_FEAT_SM90_ALL; the build's
// architectures are 80 and 90a): on other targets the calls trap, and the
// host launches nothing that issues them but on compute capability 9.0
// (wgmma_supported(), cuda_backend.hpp). Under
// FORGE_CUDA_EMULATION they are warpgroup collectives of the emulation
// (cuda_emulation.hpp) with the same layouts, the product computed at the
// wait (so reading accumulators early reads the old values).
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_compat.cuh"

#if defined(FORGE_CUDA_EMULATION) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FORGE_WGMMA 1
#endif

FORGE_CUDA_NAMESPACE_BEGIN

// A no-swizzle matrix descriptor of the operand at smem (16-byte aligned).
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes) {
#ifdef FORGE_CUDA_EMULATION
  const uint32_t addr = forge_emu::shared_offset(smem);
#else
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
#endif
  return uint64_t((addr & 0x3ffff) >> 4) | uint64_t((lbo_bytes & 0x3ffff) >> 4) << 16 |
         uint64_t((sbo_bytes & 0x3ffff) >> 4) << 32;
}

// The thread's warpgroup in its block (threads 128 w .. 128 w + 127),
// broadcast from lane 0 so that the compiler knows it is the same across
// the warp: descriptors built from it stay in uniform registers, as the
// wgmma instruction takes them (else a move into one before every MMA).
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0); }

__device__ __forceinline__ void fence_proxy_async() {
#if !defined(FORGE_CUDA_EMULATION) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Pins registers (accumulators, A fragments) in place for the compiler: an
// empty asm that reads and writes each, so that writes before it are not
// sunk past a following wgmma_fence() (CUTLASS's warpgroup_fence_operand).
template <class T, int N>
__device__ __forceinline__ void wgmma_fence_operands(T (&r)[N]) {
  static_assert(sizeof(T) == 4, "accumulators (float) or A fragments (uint32_t)");
#if !defined(FORGE_CUDA_EMULATION)
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if constexpr (std::is_same_v<T, float>)
      asm volatile("" : "+f"(r[i])::"memory");
    else
      asm volatile("" : "+r"(r[i])::"memory");
  }
#else
  (void)r;
#endif
}

// The same over an array of fragments (the A fragments of a step's MMAs).
template <class T, int M, int N>
__device__ __forceinline__ void wgmma_fence_operands(T (&r)[M][N]) {
#pragma unroll
  for (int i = 0; i < M; ++i) wgmma_fence_operands(r[i]);
}

// Orders the warpgroup's register writes before the wgmma that follow: after
// the accumulators and A fragments they read are final (writing them
// between the fence and the wgmma is undefined), with those registers
// pinned by wgmma_fence_operands.
__device__ __forceinline__ void wgmma_fence() {
#if !defined(FORGE_CUDA_EMULATION) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::wgmma_commit();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits for all but the newest Pending groups; the accumulators d are
// then the compiler's to read (an empty asm on each keeps their reads
// after the wait).
template <int Pending, int N>
__device__ __forceinline__ void wgmma_wait(float (&d)[N]) {
#ifdef FORGE_CUDA_EMULATION
  forge_emu::wgmma_wait(Pending);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
#else
  (void)d;
  __trap();
#endif
}

// The same for two groups' accumulators.
template <int Pending, int N, int M>
__device__ __forceinline__ void wgmma_wait(float (&d)[N], float (&e)[M]) {
  wgmma_wait<Pending>(d);
  wgmma_fence_operands(e);
}

// D (64 x N, N = 16, 32, 64 or 128) (+)= A B: A in registers (kARegs: a,
// the thread's fragment) or by desc_a, B by desc_b; TransA (TransB) 0:
// K-major, 1: M-major (N-major); accumulate false: D = A B.
template <int N, int TransA, int TransB, bool kARegs>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], const uint32_t* a, uint64_t desc_a, uint64_t desc_b,
                                           bool accumulate) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma_bf16: N of 16, 32, 64 or 128");
#ifdef FORGE_CUDA_EMULATION
  forge_emu::wgmma_issue(N, d, kARegs ? a : nullptr, desc_a, desc_b, TransA, TransB, accumulate);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 16) {
    if constexpr (kARegs) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7}, "
                   "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(TransB));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7}, "
                   "%8, %9, p, 1, 1, %11, %12;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                   : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TransA), "n"(TransB));
    }
  }
  if constexpr (N == 32) {
    if constexpr (kARegs) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                   "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(TransB));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                   "%16, %17, p, 1, 1, %19, %20;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                   : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TransA), "n"(TransB));
    }
  }
  if constexpr (N == 64) {
    if constexpr (kARegs) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                   "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(TransB));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                   "%32, %33, p, 1, 1, %35, %36;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                   : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TransA), "n"(TransB));
    }
  }
  if constexpr (N == 128) {
    if constexpr (kARegs) {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                   "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(TransB));
    } else {
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                   "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                   "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                   "%64, %65, p, 1, 1, %67, %68;\n}\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                   : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TransA), "n"(TransB));
    }
  }
#else
  (void)d, (void)a, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

// A and B by descriptors.
template <int N, int TransA, int TransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  wgmma_bf16<N, TransA, TransB, false>(d, nullptr, desc_a, desc_b, accumulate);
}

// A in registers (mma.sync's m16n8k16 A fragment of the warp's 16 rows), B
// by descriptor.
template <int N, int TransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
  wgmma_bf16<N, 0, TransB, true>(d, a, 0, desc_b, accumulate);
}

FORGE_CUDA_NAMESPACE_END
