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

// On the current device (cudaGetDevice). InputError when no device is present.
std::unique_ptr<Backend> make_cuda_backend(Precision precision = Precision::kFp32);

// CUDA devices visible to this process (0 when none, or on error).
int visible_cuda_devices();

FORGE_CUDA_NAMESPACE_END
