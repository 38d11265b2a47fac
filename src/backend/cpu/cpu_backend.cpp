// The CPU backend's memory (64-byte aligned host allocations) and its
// registration as "cpu" (backend_registry.hpp), with the thread hook that
// keeps OpenBLAS on the same thread count as the OpenMP loops. The
// operations live in the files named after their CUDA twins.
#include "backend/cpu/cpu_backend.hpp"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"

namespace forge {

void* CpuBackend::alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
void CpuBackend::release(void* p) { std::free(p); }
void CpuBackend::to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

namespace {

std::unique_ptr<Backend> make_cpu_backend(Precision precision) {
  if (precision != Precision::kFp32)
    throw InputError("backend 'cpu' computes in FP32 only; precision bf16 needs the cuda backend");
  return std::make_unique<CpuBackend>();
}

void set_blas_threads(int n) { openblas_set_num_threads(n); }

[[maybe_unused]] const bool registered = register_backend("cpu", make_cpu_backend, set_blas_threads);

}  // namespace

}  // namespace forge
