// Every CUDA backend operation, run through the emulation (the kernel
// sources of src/cuda compiled by the host compiler, one fiber per CUDA
// thread), against the CPU backend: the cases of backend_cases.hpp.
#include <gtest/gtest.h>

#include "cuda/cuda_backend.hpp"
#include "emulation/backend_cases.hpp"

namespace forge {
namespace {

Backend* emulated_backend(std::string*) {
  static const std::unique_ptr<Backend> backend = cuda::make_cuda_backend();
  return backend.get();
}

FORGE_BACKEND_CASES(EmulatedCuda, emulated_backend)

}  // namespace
}  // namespace forge
