// Every CUDA backend operation, run through the emulation (the kernel
// sources of src/backend/cuda compiled by the host compiler, one fiber per CUDA
// thread), against the CPU backend: the cases of backend_cases.hpp, FP32
// (tree attention in 3xTF32 on tensor cores, and in the exact SIMT kernels
// by a second backend) and (a third backend in bf16 precision) bf16; the
// tree attention cases again with the forward in steps of one key tile, on
// wgmma (one and two warpgroups, 64- and 128-key steps), with every
// cp.async landing as it is issued (the *EarlyCopies suites), and under an
// A100's shared-memory limits (EmulatedCudaA100); the backend's
// options from the environment, and HostPins over its page-locking.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_compat.cuh"
#include "backend/cuda/tree_attention.cuh"
#include "backend/host_pins.hpp"
#include "core/error.hpp"
#include "core/scoped_env.hpp"
#include "emulation/backend_cases.hpp"
#include "model/policy_model.hpp"

namespace forge {
namespace {

Backend* emulated_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kFp32, {.fp32_attention = cuda::Fp32Attention::k3xTf32});
  return backend.get();
}

Backend* emulated_exact_attention_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kFp32, {.fp32_attention = cuda::Fp32Attention::kExact});
  return backend.get();
}

Backend* emulated_bf16_backend(std::string*) {
  static const std::unique_ptr<Backend> backend = cuda::make_cuda_backend(Precision::kBf16);
  return backend.get();
}

// The tensor-core kernels in steps of one tile (the default is two where
// the head-dim class has them): FP32 (3xTF32) and bf16.
Backend* emulated_one_tile_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kFp32, {.attention_step_tiles = 1});
  return backend.get();
}

Backend* emulated_bf16_one_tile_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kBf16, {.attention_step_tiles = 1});
  return backend.get();
}

// The bf16 backend with the attention (forward and backward) on wgmma
// (wgmma.cuh), one warpgroup a block, or two.
Backend* emulated_bf16_wgmma_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 1});
  return backend.get();
}
Backend* emulated_bf16_wgmma2_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 2});
  return backend.get();
}
// And the wgmma forward in steps of 128 keys (the backward's are the same).
Backend* emulated_bf16_wgmma_keys128_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 1, .wgmma_step_keys = 128});
  return backend.get();
}
Backend* emulated_bf16_wgmma2_keys128_backend(std::string*) {
  static const std::unique_ptr<Backend> backend =
      cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 2, .wgmma_step_keys = 128});
  return backend.get();
}

// The same kernels with every cp.async landing as it is issued
// (forge_emu::early_copies; by default a copy lands at the thread's wait):
// the device may land one any time in between, so a copy into a tile that
// an MMA in flight, or another thread, still reads shows up here (a wgmma
// operand changed in flight fails; a read tile wrong fails the case). Only
// the tests whose backend comes from these getters run so: the listener
// turns it off around every test (and gives back an H100's shared memory:
// see with_a100_limits).
class EmulationDefaultsEachTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { reset(); }
  void OnTestEnd(const ::testing::TestInfo&) override { reset(); }
  static void reset() {
    forge_emu::early_copies() = false;
    forge_emu::shared_limits() = forge_emu::kH100Shared;
  }
};
[[maybe_unused]] const bool emulation_defaults_each_test = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new EmulationDefaultsEachTest);
  return true;
}();
Backend* with_early_copies(Backend* backend) {
  forge_emu::early_copies() = true;
  return backend;
}
Backend* emulated_early_copies_backend(std::string* why) { return with_early_copies(emulated_backend(why)); }
Backend* emulated_bf16_early_copies_backend(std::string* why) {
  return with_early_copies(emulated_bf16_backend(why));
}
Backend* emulated_bf16_wgmma_early_copies_backend(std::string* why) {
  return with_early_copies(emulated_bf16_wgmma_backend(why));
}
Backend* emulated_bf16_wgmma2_keys128_early_copies_backend(std::string* why) {
  return with_early_copies(emulated_bf16_wgmma2_keys128_backend(why));
}

// The backends an A100 (sm_80) gets: made and run under its shared-memory
// limits (163 KiB a block, 164 an SM; the listener above restores an
// H100's after each test), so a kernel chosen for it that does not fit it
// fails its launch here (the step tiles it picks: AttentionStepTiles...).
Backend* with_a100_limits(Backend* (*make)()) {
  forge_emu::shared_limits() = forge_emu::kA100Shared;
  return make();
}
Backend* emulated_a100_backend(std::string*) {
  return with_a100_limits([] {
    static const std::unique_ptr<Backend> backend =
        cuda::make_cuda_backend(Precision::kFp32, {.fp32_attention = cuda::Fp32Attention::k3xTf32});
    return backend.get();
  });
}
Backend* emulated_bf16_a100_backend(std::string*) {
  return with_a100_limits([] {
    static const std::unique_ptr<Backend> backend = cuda::make_cuda_backend(Precision::kBf16);
    return backend.get();
  });
}

// With `name` set to `value`, making the backend is an InputError that
// names the variable.
void expect_backend_refuses(const char* name, const char* value) {
  setenv(name, value, 1);
  try {
    cuda::make_cuda_backend();
    ADD_FAILURE() << name << "=" << value << " was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// HostPins over the CUDA backend (cudaHostRegister, emulated as a registry
// with the runtime's refusals): a buffer is page-locked the first time it
// is named, not again; a range overlapping a pinned one is refused (and
// reported); what was pinned is unlocked when HostPins goes away; on the
// cpu backend nothing is pinned.
TEST(EmulatedCuda, HostPinsPageLockOnceAndRelease) {
  const std::unique_ptr<Backend> gpu = cuda::make_cuda_backend(Precision::kFp32);
  std::vector<float> a(1000), b(500);
  {
    HostPins pins(*gpu);
    EXPECT_TRUE(pins.pin(a.data(), a.size() * sizeof(float)));
    EXPECT_TRUE(pins.pin(a.data(), a.size() * sizeof(float))) << "a second pin of the same buffer";
    EXPECT_TRUE(pins.pin(b.data(), b.size() * sizeof(float)));
    EXPECT_EQ(pins.pinned(), 2u);
    EXPECT_EQ(cudaHostRegister(a.data(), 4, cudaHostRegisterDefault), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT_FALSE(pins.pin(a.data() + 10, 16)) << "a range inside a pinned one";
    EXPECT_FALSE(pins.pin(nullptr, 16));
    EXPECT_EQ(pins.pinned(), 2u);
  }
  ASSERT_EQ(cudaHostRegister(a.data(), a.size() * sizeof(float), cudaHostRegisterDefault), cudaSuccess)
      << "a still page-locked after HostPins went away";
  EXPECT_EQ(cudaHostUnregister(a.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(b.data()), cudaErrorHostMemoryNotRegistered) << "b still page-locked";
  const std::unique_ptr<Backend> cpu = make_backend("cpu");
  HostPins cpu_pins(*cpu);
  EXPECT_FALSE(cpu_pins.pin(a.data(), a.size() * sizeof(float)));
  EXPECT_EQ(cpu_pins.pinned(), 0u);
}

// FORGE_CUDA_FP32_ATTENTION picks the FP32 attention; another value is an
// InputError that names the variable.
TEST(EmulatedCuda, Fp32AttentionFromTheEnvironment) {
  const ScopedEnv scope("FORGE_CUDA_FP32_ATTENTION", nullptr);
  EXPECT_EQ(cuda::fp32_attention_from_env(), cuda::Fp32Attention::k3xTf32);
  setenv("FORGE_CUDA_FP32_ATTENTION", "exact", 1);
  EXPECT_EQ(cuda::fp32_attention_from_env(), cuda::Fp32Attention::kExact);
  setenv("FORGE_CUDA_FP32_ATTENTION", "3xtf32", 1);
  EXPECT_EQ(cuda::fp32_attention_from_env(), cuda::Fp32Attention::k3xTf32);
  expect_backend_refuses("FORGE_CUDA_FP32_ATTENTION", "tf32");
}

// FORGE_CUDA_ATTENTION_STEP_TILES: 1 or 2, unset 0 (the default); another
// value is an InputError that names the variable.
TEST(EmulatedCuda, AttentionStepTilesFromTheEnvironment) {
  const ScopedEnv scope("FORGE_CUDA_ATTENTION_STEP_TILES", nullptr);
  EXPECT_EQ(cuda::attention_step_tiles_from_env(), 0);
  setenv("FORGE_CUDA_ATTENTION_STEP_TILES", "1", 1);
  EXPECT_EQ(cuda::attention_step_tiles_from_env(), 1);
  setenv("FORGE_CUDA_ATTENTION_STEP_TILES", "2", 1);
  EXPECT_EQ(cuda::attention_step_tiles_from_env(), 2);
  expect_backend_refuses("FORGE_CUDA_ATTENTION_STEP_TILES", "4");
}

// FORGE_CUDA_BF16_WORKING: bf16 (or unset) or fp32; another value is an
// InputError that names the variable.
TEST(EmulatedCuda, Bf16WorkingActivationsFromTheEnvironment) {
  const ScopedEnv scope("FORGE_CUDA_BF16_WORKING", nullptr);
  EXPECT_TRUE(cuda::bf16_working_activations_from_env());
  EXPECT_TRUE(cuda::make_cuda_backend(Precision::kBf16)->bf16_operands());
  EXPECT_FALSE(cuda::make_cuda_backend(Precision::kFp32)->bf16_operands());
  setenv("FORGE_CUDA_BF16_WORKING", "fp32", 1);
  EXPECT_FALSE(cuda::bf16_working_activations_from_env());
  EXPECT_FALSE(cuda::make_cuda_backend(Precision::kBf16)->bf16_operands());
  setenv("FORGE_CUDA_BF16_WORKING", "bf16", 1);
  EXPECT_TRUE(cuda::bf16_working_activations_from_env());
  expect_backend_refuses("FORGE_CUDA_BF16_WORKING", "yes");
}

// FORGE_CUDA_ATTENTION_WGMMA: 1 or 2 (warpgroups a block), or 0 (unset:
// 0); another value is an InputError that names the variable.
TEST(EmulatedCuda, WgmmaAttentionFromTheEnvironment) {
  const ScopedEnv scope("FORGE_CUDA_ATTENTION_WGMMA", nullptr);
  EXPECT_EQ(cuda::wgmma_attention_from_env(), 0);
  setenv("FORGE_CUDA_ATTENTION_WGMMA", "1", 1);
  EXPECT_EQ(cuda::wgmma_attention_from_env(), 1);
  setenv("FORGE_CUDA_ATTENTION_WGMMA", "2", 1);
  EXPECT_EQ(cuda::wgmma_attention_from_env(), 2);
  setenv("FORGE_CUDA_ATTENTION_WGMMA", "0", 1);
  EXPECT_EQ(cuda::wgmma_attention_from_env(), 0);
  expect_backend_refuses("FORGE_CUDA_ATTENTION_WGMMA", "yes");
  expect_backend_refuses("FORGE_CUDA_ATTENTION_WGMMA", "3");
  EXPECT_THROW(cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 3}), InputError);
}

// FORGE_CUDA_ATTENTION_WGMMA_KEYS: 64 or 128 (unset: 0, the default 64);
// another value is an InputError that names the variable.
TEST(EmulatedCuda, WgmmaStepKeysFromTheEnvironment) {
  const ScopedEnv scope("FORGE_CUDA_ATTENTION_WGMMA_KEYS", nullptr);
  EXPECT_EQ(cuda::wgmma_step_keys_from_env(), 0);
  setenv("FORGE_CUDA_ATTENTION_WGMMA_KEYS", "128", 1);
  EXPECT_EQ(cuda::wgmma_step_keys_from_env(), 128);
  EXPECT_EQ(cuda::cuda_options_from_env().wgmma_step_keys, 128);
  setenv("FORGE_CUDA_ATTENTION_WGMMA_KEYS", "64", 1);
  EXPECT_EQ(cuda::wgmma_step_keys_from_env(), 64);
  expect_backend_refuses("FORGE_CUDA_ATTENTION_WGMMA_KEYS", "96");
  expect_backend_refuses("FORGE_CUDA_ATTENTION_WGMMA_KEYS", "");
  EXPECT_THROW(cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = 1, .wgmma_step_keys = 32}), InputError);
}

// The wgmma kernels' staging map: every chunk copied once, and each
// 8-thread phase of a warp's 16-byte cp.async stores one aligned 128-byte
// run of the canonical tile (no shared-memory bank conflict; a thread a
// chunk along its row, the first map, fails it).
TEST(EmulatedCuda, CanonicalStagingIsConflictFree) { EXPECT_EQ(cuda::check_canonical_staging(), ""); }

// What runs: one where asked; two where the SM's shared memory holds the
// two-tile kernels' resident blocks (the default) or one block of each
// (asked for two: else a launch would fail); an H100's 228 KiB, an A100's 164.
TEST(EmulatedCuda, AttentionStepTilesFollowSharedMemory) {
  const size_t h100 = 228 * 1024, a100 = 164 * 1024;
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, true, h100, 0), 2);
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, true, a100, 0), 1);  // 2 x 102.5 KiB a SM
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, true, a100, 2), 2);  // asked: one block fits
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, false, a100, 2), 1);  // asked: dQ's 198.5 KiB do not
  EXPECT_EQ(cuda::tree_attention_step_tiles(64, true, h100, 1), 1);
  EXPECT_EQ(cuda::tree_attention_step_tiles(64, true, a100, 0), 2);
  EXPECT_EQ(cuda::tree_attention_step_tiles(64, false, h100, 0), 2);
  EXPECT_EQ(cuda::tree_attention_step_tiles(64, false, a100, 0), 1);  // 3xTF32: 2 x 102.5 KiB
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, false, h100, 0), 2);  // dQ's 198.5 KiB, one block
  EXPECT_EQ(cuda::tree_attention_step_tiles(128, false, a100, 0), 1);
  EXPECT_EQ(cuda::tree_attention_step_tiles(32, true, a100, 0), 2);    // 3 blocks of 31 KiB
}

// The A100 limits are the emulated device's while set: what the backend
// reads and what a kernel may opt in to.
void no_kernel() {}
TEST(EmulatedCuda, A100SharedMemoryLimitsWhileSet) {
  int per_block = 0, per_sm = 0;
  forge_emu::shared_limits() = forge_emu::kA100Shared;
  ASSERT_EQ(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0), cudaSuccess);
  EXPECT_EQ(per_block, 163 * 1024);
  EXPECT_EQ(per_sm, 164 * 1024);
  EXPECT_NE(cudaFuncSetAttribute(no_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 170 * 1024), cudaSuccess);
  forge_emu::shared_limits() = forge_emu::kH100Shared;
  EXPECT_EQ(cudaFuncSetAttribute(no_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 170 * 1024), cudaSuccess);
}

// peak_device_bytes: the most the backend held at once, buffers and scratch.
TEST(EmulatedCuda, PeakDeviceBytesCountsBuffersAndScratch) {
  const auto be = cuda::make_cuda_backend(Precision::kFp32, {.fp32_attention = cuda::Fp32Attention::k3xTf32});
  const size_t start = be->peak_device_bytes();
  void* a = be->alloc(1 << 20);
  void* b = be->alloc(2 << 20);
  EXPECT_EQ(be->peak_device_bytes(), start + (3 << 20));
  be->release(a);
  be->release(b);
  void* c = be->alloc(1 << 20);  // below the peak: unchanged
  EXPECT_EQ(be->peak_device_bytes(), start + (3 << 20));
  be->release(c);
  // scratch: a reduction's result buffer, on top of a held 3 MiB
  void* d = be->alloc(3 << 20);
  const std::vector<float> x(1000, 1.0f);
  void* xd = be->alloc(x.size() * sizeof(float));
  be->to_device(xd, x.data(), x.size() * sizeof(float));
  EXPECT_EQ(be->sum_squares(static_cast<float*>(xd), x.size()), 1000.0);
  EXPECT_GT(be->peak_device_bytes(), start + (3 << 20) + x.size() * sizeof(float));
  be->release(xd);
  be->release(d);
}

// release_scratch() frees the grow-only buffers a step left (the attention's
// delta, turns, tile bounds and bf16 copies, the reductions'): once, and
// calls after it grow them again with the same results.
TEST(EmulatedCuda, ReleaseScratchFreesTheStepsBuffers) {
  const auto be = cuda::make_cuda_backend(Precision::kBf16, {});
  const backend_cases::AttentionShape sh{4, 2, 32, 30, 40};
  const backend_cases::AttentionCase c = backend_cases::attention_case(sh, 5);
  // at least the backward's delta (H T floats) and bf16 dO (H T D halves)
  backend_cases::expect_release_scratch_frees(*be, sh, c, size_t{4} * c.bin.token.size() * (sizeof(float) + 32 * 2));
}

// A model whose heads pass the tree attention's 128 dimensions is refused
// before training, naming the key (it failed at the first attention call,
// exit 1); generation (paged attention, up to 256) still builds it.
TEST(EmulatedCuda, HeadsPastTheAttentionKernelsAreRefusedByName) {
  const auto be = cuda::make_cuda_backend(Precision::kFp32, {});
  EXPECT_EQ(be->max_trained_head_dim(), cuda::kMaxHeadDim);
  ModelConfig m{.vocab = 64, .d_model = 256, .n_layers = 1, .n_heads = 1, .n_kv_heads = 1, .ffn_dim = 32};
  try {
    require_trainable_heads(m, *be);
    ADD_FAILURE() << "head_dim 256 was accepted for training";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_dim = 256"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--run.backend=cpu"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(PolicyModel(m, *be));  // a model to generate with
  m.n_heads = m.n_kv_heads = 2;          // 128: trained
  EXPECT_NO_THROW(require_trainable_heads(m, *be));
  // Past what generation takes (paged attention, 256): refused when built,
  // naming the key (forge eval and generate failed at the first decode, exit 1).
  m.d_model = 320;
  m.n_heads = m.n_kv_heads = 1;
  try {
    PolicyModel too_wide(m, *be);
    ADD_FAILURE() << "head_dim 320 was built on the cuda backend";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.head_dim = 320"), std::string::npos) << e.what();
  }
}

FORGE_BACKEND_CASES(EmulatedCuda, emulated_backend)
FORGE_TREE_ATTENTION_CASES(EmulatedCudaExactAttention, emulated_exact_attention_backend)
FORGE_BF16_BACKEND_CASES(EmulatedCuda, emulated_bf16_backend)
FORGE_TREE_ATTENTION_CASES(EmulatedCudaOneTileSteps, emulated_one_tile_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaOneTileSteps, emulated_bf16_one_tile_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmma, emulated_bf16_wgmma_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmma2, emulated_bf16_wgmma2_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmmaKeys128, emulated_bf16_wgmma_keys128_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmma2Keys128, emulated_bf16_wgmma2_keys128_backend)
FORGE_TREE_ATTENTION_CASES(EmulatedCudaEarlyCopies, emulated_early_copies_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaEarlyCopies, emulated_bf16_early_copies_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmmaEarlyCopies, emulated_bf16_wgmma_early_copies_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaWgmma2Keys128EarlyCopies, emulated_bf16_wgmma2_keys128_early_copies_backend)
FORGE_TREE_ATTENTION_CASES(EmulatedCudaA100, emulated_a100_backend)
FORGE_BF16_TREE_ATTENTION_CASES(EmulatedCudaA100, emulated_bf16_a100_backend)

}  // namespace
}  // namespace forge
