// The cases of tests/emulation/backend_cases.hpp on a real GPU: the CUDA
// backend (make_backend("cuda"), FP32 and bf16, and FP32 with the exact
// attention kernels, and bf16 with the forward on wgmma) against the CPU
// backend; and the tensor-core fragment layouts (backend/cuda/fragment_layouts.hpp). Each test skips
// with the reason where the build has no CUDA or no device is present.
#include <gtest/gtest.h>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "emulation/backend_cases.hpp"
#ifdef FORGE_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/fragment_layouts.hpp"
#endif

namespace forge {
namespace {

// The backend in the given precision, or nullptr with the reason.
template <Precision precision>
Backend* device_backend(std::string* why) {
  static std::string reason;
  static const std::unique_ptr<Backend> backend = [] {
    try {
      return make_backend("cuda", precision);
    } catch (const InputError& e) {
      reason = e.what();
      return std::unique_ptr<Backend>();
    }
  }();
  *why = reason;
  return backend.get();
}

// The FP32 backend with the exact SIMT attention (the default is 3xTF32 on
// tensor cores), or nullptr with the reason.
Backend* exact_attention_backend(std::string* why) {
  static std::string reason = "built without CUDA";
  static const std::unique_ptr<Backend> backend = []() -> std::unique_ptr<Backend> {
#ifdef FORGE_WITH_CUDA
    try {
      return cuda::make_cuda_backend(Precision::kFp32, {.fp32_attention = cuda::Fp32Attention::kExact});
    } catch (const InputError& e) {
      reason = e.what();
    }
#endif
    return nullptr;
  }();
  *why = reason;
  return backend.get();
}

// The bf16 backend with the attention (forward and backward) on wgmma (H100,
// H200) with Warpgroups warpgroups a block and the forward's StepKeys keys
// a step (0: the default), or nullptr with the reason.
template <int Warpgroups, int StepKeys = 0>
Backend* wgmma_backend(std::string* why) {
  static std::string reason = "built without CUDA";
  static const std::unique_ptr<Backend> backend = []() -> std::unique_ptr<Backend> {
#ifdef FORGE_WITH_CUDA
    try {
      auto be = cuda::make_cuda_backend(Precision::kBf16, {.wgmma_attention = Warpgroups, .wgmma_step_keys = StepKeys});
      if (cuda::wgmma_supported()) return be;
      reason = "wgmma needs compute capability 9.0 and sm_90a device code";
    } catch (const InputError& e) {
      reason = e.what();
    }
#endif
    return nullptr;
  }();
  *why = reason;
  return backend.get();
}

// The hardware's mma.sync and ldmatrix against the PTX ISA's layouts that
// the tensor-core attention (and the emulation) assume.
TEST(CudaDevice, FragmentLayoutsFollowThePtxIsa) {
  std::string why;
  if (!device_backend<Precision::kFp32>(&why)) GTEST_SKIP() << why;
#ifdef FORGE_WITH_CUDA
  EXPECT_EQ(cuda::check_fragment_layouts(), "");
#endif
}

// The hardware's wgmma (sm_90a) against the layouts the emulation
// assumes; on other devices skipped. A 9.0 device without sm_90a code
// fails: every CudaDeviceWgmma case would skip and the run look clean.
TEST(CudaDevice, WgmmaLayoutsFollowThePtxIsa) {
  std::string why;
  if (!device_backend<Precision::kFp32>(&why)) GTEST_SKIP() << why;
#ifdef FORGE_WITH_CUDA
  if (!cuda::hopper_device()) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  ASSERT_TRUE(cuda::wgmma_supported())
      << "a compute capability 9.0 device, and this build has no sm_90a device code (CMAKE_CUDA_ARCHITECTURES "
         "needs 90a): the wgmma kernels and their tests do not run";
  EXPECT_EQ(cuda::check_wgmma_layouts(), "");
#endif
}

FORGE_BACKEND_CASES(CudaDevice, device_backend<Precision::kFp32>)
FORGE_BF16_BACKEND_CASES(CudaDevice, device_backend<Precision::kBf16>)
FORGE_TREE_ATTENTION_CASES(CudaDeviceExactAttention, exact_attention_backend)
FORGE_BF16_TREE_ATTENTION_CASES(CudaDeviceWgmma, wgmma_backend<1>)
FORGE_BF16_TREE_ATTENTION_CASES(CudaDeviceWgmma2, wgmma_backend<2>)
FORGE_BF16_TREE_ATTENTION_CASES(CudaDeviceWgmmaKeys128, (wgmma_backend<1, 128>))
FORGE_BF16_TREE_ATTENTION_CASES(CudaDeviceWgmma2Keys128, (wgmma_backend<2, 128>))

}  // namespace
}  // namespace forge
