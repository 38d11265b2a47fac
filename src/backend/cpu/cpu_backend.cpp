// The CPU backend's memory (64-byte aligned host allocations) and this
// variant's factory; cpu_variants.cpp registers the variant the CPU runs best
// as "cpu". The operations live in the files named after their CUDA twins.
#include "backend/cpu/cpu_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cpu/variant_begin.hpp"

namespace forge::FORGE_CPU_NS {

void* CpuBackend::alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
void CpuBackend::release(void* p) { std::free(p); }
void CpuBackend::to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
