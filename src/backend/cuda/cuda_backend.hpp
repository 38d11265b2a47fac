// The CUDA backend (src/backend/cuda): the Backend interface on one GPU. Device
// memory from cudaMalloc, one stream per backend, GEMMs on cuBLAS, the other
// operations in the kernels of this folder. FP32, or bf16 compute paths
// (Precision::kBf16: GEMM inputs, tree-attention Q/K/V and the head's hidden
// states rounded to bf16, FP32 accumulation and storage; docs/cuda.md,
// "Precision"). Registered as "cuda" (backend_registry.hpp); plain C++, so
// that the tests can also call make_cuda_backend directly.
#pragma once
#include <memory>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_namespace.hpp"

FORGE_CUDA_NAMESPACE_BEGIN

// How the FP32 precision's tree attention multiplies: on tensor cores in
// 3xTF32 (about FP32's accuracy, as PyTorch's FP32 SDPA; the default), or
// in the exact SIMT FP32 kernels (the reference). bf16 is unaffected.
enum class Fp32Attention { k3xTf32, kExact };

// FORGE_CUDA_FP32_ATTENTION: unset or "3xtf32", or "exact"; InputError
// naming the variable otherwise.
Fp32Attention fp32_attention_from_env();

// FORGE_CUDA_ATTENTION_STEP_TILES: the tensor-core attention's 32-row tiles
// a step (the forward's key tiles, dK/dV's query tiles), "1" or "2" (0 when
// unset: the default, docs/cuda.md); InputError naming the variable
// otherwise. For A/B timing.
int attention_step_tiles_from_env();

// FORGE_CUDA_BF16_WORKING: the bf16 precision's working activations and
// weights (docs/cuda.md, "Working activations"), unset or "bf16": made as
// bf16 ahead (Backend::bf16_operands), or "fp32": FP32 buffers and weights
// that each GEMM rounds, as before 2026-11-27 (the same results bit for bit;
// for A/B timing); InputError naming the variable otherwise.
bool bf16_working_activations_from_env();

// FORGE_CUDA_ATTENTION_WGMMA: "1" or "2" runs the bf16 tree attention,
// forward and backward, on wgmma (sm_90a, tree_attention_tc.cu; a device
// of another compute capability says so once and runs the mma.sync
// kernels), with that many warpgroups a block (64 queries, or keys, each:
// "2" shares each staged tile between 128 rows); unset or
// "0" the mma.sync kernels; InputError naming the variable otherwise. Not
// yet timed on a GPU: off by default.
int wgmma_attention_from_env();

// FORGE_CUDA_ATTENTION_WGMMA_KEYS: the wgmma forward's keys a step, "64"
// (0 when unset: the default) or "128" (S 64 x 128 a warpgroup, as
// FlashAttention-3's forward at D 128: half the steps, each with twice the
// MMA work, the same per-step overhead); InputError naming the variable
// otherwise. For A/B timing; only with FORGE_CUDA_ATTENTION_WGMMA.
int wgmma_step_keys_from_env();

// The backend's choices besides the precision.
struct CudaOptions {
  Fp32Attention fp32_attention = Fp32Attention::k3xTf32;
  int attention_step_tiles = 0;          // 1 or 2; 0: the default
  bool bf16_working_activations = true;  // Backend::bf16_operands() in bf16
  int wgmma_attention = 0;               // bf16: the attention on wgmma, 1 or 2 warpgroups a block (CC 9.0)
  int wgmma_step_keys = 0;               // the wgmma forward's keys a step: 64 or 128; 0: 64
};
// The five variables above, in order.
CudaOptions cuda_options_from_env();

// On the current device (cudaGetDevice). InputError when no device is
// present. The first form takes its options from the environment.
std::unique_ptr<Backend> make_cuda_backend(Precision precision = Precision::kFp32);
std::unique_ptr<Backend> make_cuda_backend(Precision precision, const CudaOptions& options);

// CUDA devices visible to this process (0 when none, or on error).
int visible_cuda_devices();

// Whether the current device runs wgmma (wgmma.cuh): compute capability 9.0
// (H100, H200) and device code built for sm_90a (a one-thread kernel
// says: a build for sm_90 has none); always under the emulation.
bool wgmma_supported();
// Whether the current device has compute capability 9.0, where wgmma runs
// given sm_90a code (always under the emulation).
bool hopper_device();

FORGE_CUDA_NAMESPACE_END
