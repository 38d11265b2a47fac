// Every CUDA backend operation, run through the emulation (the kernel
// sources of src/backend/cuda compiled by the host compiler, one fiber per CUDA
// thread), against the CPU backend: the cases of backend_cases.hpp, FP32 and
// (a second backend in bf16 precision) bf16.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.hpp"
#include "emulation/backend_cases.hpp"

namespace forge {
namespace {

Backend* emulated_backend(std::string*) {
  static const std::unique_ptr<Backend> backend = cuda::make_cuda_backend();
  return backend.get();
}

Backend* emulated_bf16_backend(std::string*) {
  static const std::unique_ptr<Backend> backend = cuda::make_cuda_backend(Precision::kBf16);
  return backend.get();
}

FORGE_BACKEND_CASES(EmulatedCuda, emulated_backend)
FORGE_BF16_BACKEND_CASES(EmulatedCuda, emulated_bf16_backend)

}  // namespace
}  // namespace forge
