// The CPU backend: FP32, GEMMs through forge's skinny kernels or the SGEMM
// library (BLIS by default, else CBLAS: sgemm_library.hpp), other loops with
// OpenMP. The reference every other backend is tested against.
// Registered as "cpu" (backend_registry.hpp, through cpu_variants.hpp):
// outside backend/ only tests and benchmarks include this header. One file
// per operation family, named after its CUDA twin in backend/cuda.
//
// The class is compiled once per CPU kernel variant (cpu_variants.hpp), each
// in its own namespace forge::FORGE_CPU_NS; code outside the kernel files
// (tests) sees the build's baseline variant as forge::CpuBackend.
#pragma once
#include <memory>

#include "backend/backend.hpp"

#ifndef FORGE_CPU_NS
#define FORGE_CPU_NS FORGE_CPU_BASE_NS
#define FORGE_CPU_BASELINE_ALIAS 1
#endif

namespace forge::FORGE_CPU_NS {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  // cpu_backend.cpp
  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;

  // gemm.cpp
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
            int lda, const float* B, int ldb, float beta, float* C, int ldc) override;
  // elementwise.cpp
  void fill(float* x, float value, size_t n) override;
  void add_inplace(float* y, const float* x, size_t n) override;
  void scale(float* x, float s, size_t n) override;
  double sum_squares(const float* x, size_t n) override;
  void pack_bf16(const float* src, uint16_t* dst, size_t n) override;
  void unpack_bf16(const uint16_t* src, float* dst, size_t n) override;

  // embedding.cpp
  void embedding_fwd(const int32_t* tokens, const float* table, float* out, int T,
                     int d) override;
  void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T,
                     int d) override;
  void gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override;
  void scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R,
                        int d) override;
  // rmsnorm.cpp, rope.cpp, swiglu.cpp
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                   float eps) override;
  void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                   float* dx, float* dw, int T, int d) override;
  void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
            const double* inv_freq, bool inverse) override;
  void swiglu_fwd(const float* gu, float* out, int T, int F) override;
  void swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) override;

  // tree_attention.cpp, fp32_head.cpp
  size_t release_scratch() override;  // the attention's and the head's buffers
  void tree_attention_fwd(const TreeAttentionArgs& a) override;
  void tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) override;
  void head_fwd(const HeadArgs& a) override;
  void head_bwd(const HeadArgs& a, const HeadGrads& g) override;

  // adamw.cpp
  void adamw(float* param, const float* grad, float* m, float* v, size_t n,
             const AdamWParams& p) override;

  // paged_attention.cpp
  void kv_cache_write(const KvCacheWriteArgs& a) override;
  void paged_attention_fwd(const PagedAttentionArgs& a) override;

  // policy_loss.cpp
  PolicyLossSums policy_loss(const PolicyLossArgs& a) override;
};

// fp32_head.cpp: frees the calling thread's logits tile; returns its bytes.
size_t release_head_tile();

// This variant's backend (cpu_backend.cpp); cpu_variants.cpp registers the
// one the CPU runs best as "cpu".
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace forge::FORGE_CPU_NS

#ifdef FORGE_CPU_BASELINE_ALIAS
namespace forge {
using FORGE_CPU_NS::CpuBackend;
}
#endif
