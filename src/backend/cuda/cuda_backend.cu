// CudaBackend: each Backend operation is one or a few launches on the
// backend's stream. to_device, to_host and sum_squares synchronize the stream
// (their results are host-visible on return); everything else is
// asynchronous, ordered by the stream. Scratch buffers for the attention tile
// bounds, D_i, the head tiles, the split-K partials of paged attention and
// (bf16 mode) the bf16 copies of GEMM
// operands, Q/K/V and the head's hidden states grow on demand and are kept
// until release_scratch().
#include "backend/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <unordered_map>

#include "backend/backend_registry.hpp"
#include "core/host_resources.hpp"
#include "core/log.hpp"
#include "backend/cuda/adamw.cuh"
#include "backend/cuda/bf16.cuh"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/fp32_head.cuh"
#include "backend/cuda/gemm.cuh"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/policy_loss.cuh"
#include "backend/cuda/rmsnorm.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/swiglu.cuh"
#include "backend/cuda/tree_attention.cuh"
#include "backend/cuda/wgmma.cuh"
#ifndef FORGE_CUDA_EMULATION
#include "backend/cuda/nccl_comm.hpp"
#endif

FORGE_CUDA_NAMESPACE_BEGIN
namespace {

// The device memory a backend holds (its alloc'd buffers and scratch): now
// and at most so far.
struct MemoryMeter {
  size_t live = 0, peak = 0;
  void add(size_t bytes) {
    live += bytes;
    peak = std::max(peak, live);
  }
  void sub(size_t bytes) { live -= bytes; }
};

// A device buffer that grows on demand (release() frees it), counted in the
// backend's meter.
class Scratch {
 public:
  explicit Scratch(MemoryMeter& meter) : meter_(meter) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    if (p_) cudaFree(p_);
  }
  template <class T>
  T* get(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes > bytes_) {
      release();
      FORGE_CUDA_CHECK(cudaMalloc(&p_, bytes));
      bytes_ = bytes;
      meter_.add(bytes_);
    }
    return static_cast<T*>(p_);
  }
  // Frees the buffer (the next get grows it again); the bytes freed.
  size_t release() {
    const size_t freed = bytes_;
    if (p_) FORGE_CUDA_CHECK(cudaFree(p_));  // waits for the device's work on it
    meter_.sub(bytes_);
    p_ = nullptr;
    bytes_ = 0;
    return freed;
  }

 private:
  MemoryMeter& meter_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(Precision precision, const CudaOptions& options)
      : bf16_(precision == Precision::kBf16),
        tf32x3_attention_(precision != Precision::kBf16 && options.fp32_attention == Fp32Attention::k3xTf32),
        step_tiles_asked_(options.attention_step_tiles),
        bf16_working_(bf16_ && options.bf16_working_activations),
        wgmma_attention_(bf16_ ? options.wgmma_attention : 0),
        wgmma_step_keys_(options.wgmma_step_keys) {
    if (options.wgmma_attention < 0 || options.wgmma_attention > 2)
      throw InputError("cuda: CudaOptions::wgmma_attention (warpgroups a block) must be 0, 1 or 2, got " +
                       std::to_string(options.wgmma_attention));
    if (options.wgmma_step_keys != 0 && options.wgmma_step_keys != 64 && options.wgmma_step_keys != 128)
      throw InputError("cuda: CudaOptions::wgmma_step_keys (the wgmma forward's keys a step) must be 64 or 128 "
                       "(0: 64), got " + std::to_string(options.wgmma_step_keys));
    if (!bf16_ && options.wgmma_attention)
      log_warn("cuda: the wgmma attention (FORGE_CUDA_ATTENTION_WGMMA or CudaOptions::wgmma_attention) runs in bf16 "
               "precision only (run.precision = bf16): ignored in fp32");
    try {
      set_up_device();
    } catch (...) {  // no destructor runs for a backend not built
      if (blas_) cublasDestroy(blas_);
      if (stream_) cudaStreamDestroy(stream_);
      throw;
    }
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cublasDestroy(blas_);
    cudaStreamDestroy(stream_);
  }

 private:
  // The stream, cuBLAS on it, the device's shared-memory limits and the
  // attention path it can run.
  void set_up_device() {
    FORGE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    FORGE_CUBLAS_CHECK(cublasCreate(&blas_));
    FORGE_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    FORGE_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));  // FP32, no TF32
    int device = 0, optin = 0, per_sm = 0;
    FORGE_CUDA_CHECK(cudaGetDevice(&device));
    FORGE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    FORGE_CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    shared_optin_ = static_cast<size_t>(optin);
    shared_per_sm_ = static_cast<size_t>(per_sm);
    if (wgmma_attention_ && !wgmma_supported()) {
      log_warn("cuda: the wgmma attention was asked for (FORGE_CUDA_ATTENTION_WGMMA or CudaOptions::wgmma_attention: " +
               std::to_string(wgmma_attention_) +
               "), but wgmma needs compute capability 9.0 and device code "
               "built for sm_90a: the mma.sync attention runs instead");
      wgmma_attention_ = 0;
    }
    if (wgmma_step_keys_ == 128 && !wgmma_attention_)
      log_warn("cuda: 128-key wgmma steps (FORGE_CUDA_ATTENTION_WGMMA_KEYS or CudaOptions::wgmma_step_keys) apply "
               "to the wgmma attention only (FORGE_CUDA_ATTENTION_WGMMA, bf16, compute capability 9.0): ignored");
  }

 public:
  std::string name() const override { return "cuda"; }
#ifndef FORGE_CUDA_EMULATION
  // NCCL over the device memory (emulated memory is host memory: the
  // caller's transport reduces it directly).
  std::unique_ptr<DeviceCollectives> make_collectives(const CollectiveBootstrap& peers) override {
    return make_nccl_collectives(peers);
  }
#endif

  void synchronize() override { FORGE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void* alloc(size_t bytes) override {
    void* p = nullptr;
    FORGE_CUDA_CHECK(cudaMalloc(&p, bytes));
    sizes_[p] = bytes;
    meter_.add(bytes);
    return p;
  }
  void release(void* p) override {
    const auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      meter_.sub(it->second);
      sizes_.erase(it);
    }
    FORGE_CUDA_CHECK(cudaFree(p));
  }
  size_t peak_device_bytes() const override { return meter_.peak; }
  int max_trained_head_dim() const override { return kMaxHeadDim; }  // tree attention
  int max_head_dim() const override { return kPagedMaxHeadDim; }     // generation
  size_t release_scratch() override {
    FORGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    size_t freed = 0;
    for (Scratch* s : {&reduce_, &tile_bounds_, &delta_, &dkdv_turn_, &head_stats_, &head_tile_, &loss_partials_,
                       &loss_totals_, &paged_partials_, &rmsnorm_partials_, &gemm_a_, &gemm_b_, &linear_dy_,
                       &qkv_bf16_, &dout_bf16_, &head_hidden_})
      freed += s->release();
    return freed;
  }
  void to_device(void* dst, const void* src, size_t bytes) override {
    FORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    FORGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    FORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    FORGE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // cudaHostRegister. Memory registered already (by another library, e.g.
  // an MPI transport that registers the buffers handed to it) is used as
  // it is and not ours to unpin; another refusal is reported once and
  // leaves the memory pageable.
  bool pin_host_memory(void* p, size_t bytes) override {
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f MiB", bytes / 1048576.0);
    if (e == cudaSuccess) {
      log_info(std::string("cuda: ") + size + " of host memory page-locked (cudaHostRegister)");
      return true;
    }
    cudaGetLastError();  // not sticky: clear it
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
      log_info(std::string("cuda: ") + size + " of host memory page-locked already (registered elsewhere): used so");
    } else if (!pin_refused_) {
      log_warn(std::string("cuda: could not page-lock ") + size + " of host memory (cudaHostRegister: " +
               cudaGetErrorString(e) + "): its transfers stay pageable");
      pin_refused_ = true;
    }
    return false;
  }
  void unpin_host_memory(void* p) override {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    FORGE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void fill(float* x, float value, size_t n) override { launch_fill(x, value, n, stream_); }

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override {
    if (bf16_)
      gemm_row_major_bf16(blas_, stream_, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta,
                          C, ldc, gemm_a_.get<__nv_bfloat16>(size_t(M) * K),
                          gemm_b_.get<__nv_bfloat16>(size_t(K) * N));
    else
      gemm_row_major(blas_, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  // bf16: dy rounded once for both products (the default rounds it in each).
  void linear_backward(int T, int in, int out, const float* dy, int ld_dy, const float* W, const float* x, int ld_x,
                       float* dx, int ld_dx, float* dW) override {
    if (!bf16_) {
      Backend::linear_backward(T, in, out, dy, ld_dy, W, x, ld_x, dx, ld_dx, dW);
      return;
    }
    linear_backward_bf16_operands(T, in, out, rounded(gemm_a_, x, T, in, ld_x, nullptr),
                                  rounded(linear_dy_, dy, T, out, ld_dy, nullptr),
                                  rounded(gemm_b_, W, out, in, in, nullptr), dx, nullptr, ld_dx, dW);
  }
  // bf16: operands that are bf16 already handed over as they are, the FP32 ones rounded here.
  void linear_fwd_bf16(int T, int in, int out, const float* x, const uint16_t* x16, const float* W,
                       const uint16_t* W16, float beta, float* y, int ld_y) override {
    if (!bf16_) return Backend::linear_fwd_bf16(T, in, out, x, x16, W, W16, beta, y, ld_y);
    gemm_row_major_bf16_packed(blas_, false, true, T, out, in, 1.0f, rounded(gemm_a_, x, T, in, in, x16),
                               rounded(gemm_b_, W, out, in, in, W16), beta, y, ld_y);
  }
  // dx16: the GEMM writes dx as bf16.
  void linear_backward_bf16(int T, int in, int out, const float* dy, int ld_dy, const uint16_t* dy16,
                            const float* W, const uint16_t* W16, const uint16_t* x16, float* dx, uint16_t* dx16,
                            int ld_dx, float* dW) override {
    if (!bf16_) return Backend::linear_backward_bf16(T, in, out, dy, ld_dy, dy16, W, W16, x16, dx, dx16, ld_dx, dW);
    linear_backward_bf16_operands(T, in, out, reinterpret_cast<const __nv_bfloat16*>(x16),
                                  rounded(linear_dy_, dy, T, out, ld_dy, dy16), rounded(gemm_b_, W, out, in, in, W16),
                                  dx, dx ? nullptr : reinterpret_cast<__nv_bfloat16*>(dx16), dx ? ld_dx : in, dW);
  }
  void add_inplace(float* y, const float* x, size_t n) override { launch_add_inplace(y, x, n, stream_); }
  void scale(float* x, float s, size_t n) override { launch_scale(x, s, n, stream_); }
  double sum_squares(const float* x, size_t n) override {
    double* d = reduce_.get<double>(1 + kSumSquaresBlocks);
    launch_sum_squares(x, n, d, stream_);
    double h = 0;
    to_host(&h, d, sizeof(double));
    return h;
  }

  void embedding_fwd(const int32_t* tokens, const float* table, float* out, int T, int d) override {
    launch_gather_rows(table, tokens, out, T, d, stream_);
  }
  void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d) override {
    launch_embedding_bwd(tokens, dout, dtable, T, d, stream_);
  }
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                   float eps) override {
    launch_rmsnorm_fwd(x, w, y, nullptr, rstd, nullptr, T, d, eps, stream_);
  }
  void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                   float* dw, int T, int d) override {
    launch_rmsnorm_bwd(x, w, rstd, dy, dx, dw, rmsnorm_partials_.get<float>(rmsnorm_dw_partials(T, d)), T, d,
                       stream_);
  }
  void rmsnorm_fwd_keep(const float* x, const float* w, float* y, uint16_t* y16, float* rstd, uint16_t* x16, int T,
                        int d, float eps) override {
    launch_rmsnorm_fwd(x, w, y, reinterpret_cast<__nv_bfloat16*>(y16), rstd, reinterpret_cast<__nv_bfloat16*>(x16), T,
                       d, eps, stream_);
  }
  void rmsnorm_fwd_bf16(const uint16_t* x16, const float* w, float* y, uint16_t* y16, float* rstd, int T, int d,
                        float eps) override {
    launch_rmsnorm_fwd(reinterpret_cast<const __nv_bfloat16*>(x16), w, y, reinterpret_cast<__nv_bfloat16*>(y16), rstd,
                       T, d, eps, stream_);
  }
  void rmsnorm_bwd_bf16(const uint16_t* x16, const float* w, const float* rstd, const float* dy, const uint16_t* dy16,
                        float* dx, float* dw, int T, int d) override {
    launch_rmsnorm_bwd(reinterpret_cast<const __nv_bfloat16*>(x16), w, rstd, dy,
                       reinterpret_cast<const __nv_bfloat16*>(dy16), dx, dw,
                       rmsnorm_partials_.get<float>(rmsnorm_dw_partials(T, d)), T, d, stream_);
  }
  void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
            bool inverse) override {
    launch_rope(x, pos, T, n_heads, head_dim, ld, inv_freq, inverse, stream_);
  }
  void rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
                 bool inverse, uint16_t* y16) override {
    launch_rope_bf16(x, pos, T, n_heads, head_dim, ld, inv_freq, inverse, reinterpret_cast<__nv_bfloat16*>(y16),
                     stream_);
  }
  void swiglu_fwd(const float* gu, float* out, int T, int F) override {
    launch_swiglu_fwd(gu, out, nullptr, nullptr, T, F, stream_);
  }
  void swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) override {
    launch_swiglu_bwd(gu, dout, dgu, T, F, stream_);
  }
  void swiglu_fwd_keep(const float* gu, float* out, uint16_t* out16, uint16_t* gu16, int T, int F) override {
    launch_swiglu_fwd(gu, out, reinterpret_cast<__nv_bfloat16*>(out16), reinterpret_cast<__nv_bfloat16*>(gu16), T, F,
                      stream_);
  }
  void swiglu_fwd_bf16(const uint16_t* gu16, float* out, uint16_t* out16, int T, int F) override {
    launch_swiglu_fwd(reinterpret_cast<const __nv_bfloat16*>(gu16), out, reinterpret_cast<__nv_bfloat16*>(out16), T,
                      F, stream_);
  }
  void swiglu_bwd_bf16(const uint16_t* gu16, const float* dout, const uint16_t* dout16, float* dgu, uint16_t* dgu16,
                       int T, int F) override {
    launch_swiglu_bwd(reinterpret_cast<const __nv_bfloat16*>(gu16), dout,
                      reinterpret_cast<const __nv_bfloat16*>(dout16), dgu, reinterpret_cast<__nv_bfloat16*>(dgu16), T,
                      F, stream_);
  }

  void tree_attention_fwd(const TreeAttentionArgs& a) override {
    TreeAttentionParams p = attention_params(a);
    launch_tree_attention_fwd(p, stream_);
  }
  void tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) override {
    TreeAttentionParams p = attention_params(a);
    p.dout = g.dout;
    p.dq = g.dq;
    p.dk = g.dk;
    p.dv = g.dv;
    p.delta = delta_.get<float>(size_t(a.n_heads) * a.T);
    p.dkdv_turn = dkdv_turn_.get<int32_t>(tree_attention_dkdv_turns(a.T, a.n_kv_heads));
    // dO as bf16: the caller's where given (read as it is), else rounded by
    // the delta pass into scratch (launch_tree_attention_bwd checks the pair).
    if (!g.dout) {
      p.dout_bf16 = reinterpret_cast<const __nv_bfloat16*>(g.dout_bf16);
    } else if (bf16_) {
      p.dout_bf16_out = dout_bf16_.get<__nv_bfloat16>(size_t(a.T) * a.n_heads * a.head_dim);
      p.dout_bf16 = p.dout_bf16_out;
    }
    launch_tree_attention_bwd(p, stream_);
  }

  void head_fwd(const HeadArgs& a) override { launch_head_fwd(a, head_workspace(a), blas_, stream_); }
  void head_bwd(const HeadArgs& a, const HeadGrads& g) override {
    launch_head_bwd(a, g, head_workspace(a), blas_, stream_);
  }

  void gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override {
    launch_gather_rows(src, rows, dst, R, d, stream_);
  }
  void scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override {
    launch_scatter_add_rows(src, rows, dst, R, d, stream_);
  }
  void adamw(float* param, const float* grad, float* m, float* v, size_t n,
             const AdamWParams& p) override {
    launch_adamw(param, grad, m, v, n, p, stream_);
  }
  size_t kv_cache_value_bytes() const override { return bf16_ ? 2 : 4; }
  size_t activation_value_bytes() const override { return bf16_ ? 2 : 4; }
  bool bf16_operands() const override { return bf16_working_; }
  void pack_bf16(const float* src, uint16_t* dst, size_t n) override {
    launch_pack_bf16(src, reinterpret_cast<__nv_bfloat16*>(dst), n, stream_);
  }
  void unpack_bf16(const uint16_t* src, float* dst, size_t n) override {
    launch_unpack_bf16(reinterpret_cast<const __nv_bfloat16*>(src), dst, n, stream_);
  }
  void kv_cache_write(const KvCacheWriteArgs& a) override {
    launch_kv_cache_write(a, kv_cache_value_bytes(), stream_);
  }
  void paged_attention_fwd(const PagedAttentionArgs& a) override {
    launch_paged_attention_fwd(a, kv_cache_value_bytes(), paged_partials_.get<float>(paged_attention_scratch_floats(a)),
                               stream_);
  }
  PolicyLossSums policy_loss(const PolicyLossArgs& a) override {
    double* totals = loss_totals_.get<double>(kPolicyLossSums);
    launch_policy_loss(a, loss_partials_.get<double>(size_t(a.samples) * kPolicyLossSums), totals,
                       stream_);
    PolicyLossSums sums;
    to_host(&sums, totals, sizeof(sums));
    return sums;
  }

 private:
  // A rows x cols operand as bf16: as16 where given (packed bf16 rows), else
  // src (row stride ld) rounded into the scratch buffer, packed.
  const __nv_bfloat16* rounded(Scratch& scratch, const float* src, int rows, int cols, int ld, const uint16_t* as16) {
    if (as16) return reinterpret_cast<const __nv_bfloat16*>(as16);
    __nv_bfloat16* dst = scratch.get<__nv_bfloat16>(size_t(rows) * cols);
    launch_round_to_bf16(src, rows, cols, ld, dst, cols, stream_);
    return dst;
  }
  // dx = dy W (FP32 dx, or as bf16 dx16 where dx is null), dW += dy^T x on
  // bf16 x [T, in], dy [T, out] and W [out, in].
  void linear_backward_bf16_operands(int T, int in, int out, const __nv_bfloat16* x16, const __nv_bfloat16* dy16,
                                     const __nv_bfloat16* w16, float* dx, __nv_bfloat16* dx16, int ld_dx, float* dW) {
    if (dx)
      gemm_row_major_bf16_packed(blas_, false, false, T, in, out, 1.0f, dy16, w16, 0.0f, dx, ld_dx);
    else
      gemm_row_major_bf16_packed(blas_, false, false, T, in, out, 1.0f, dy16, w16, 0.0f, dx16, ld_dx);
    gemm_row_major_bf16_packed(blas_, true, false, out, in, T, 1.0f, dy16, x16, 1.0f, dW, in);
  }

  TreeAttentionParams attention_params(const TreeAttentionArgs& a) {
    TreeAttentionParams p;
    p.T = a.T;
    p.n_heads = a.n_heads;
    p.n_kv_heads = a.n_kv_heads;
    p.head_dim = a.head_dim;
    p.ld_qkv = a.ld_qkv;
    p.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    p.q = a.q;
    p.k = a.k;
    p.v = a.v;
    p.subtree_end = a.subtree_end;
    p.out = a.out;
    p.lse = a.lse;
    p.tf32x3 = tf32x3_attention_ && fits_3xtf32_attention(a.head_dim);
    p.wgmma = wgmma_attention_;
    p.wgmma_step_keys = wgmma_step_keys_;
    if (bf16_ || p.tf32x3) {
      p.step_tiles = tree_attention_step_tiles(a.head_dim, bf16_, shared_per_sm_, step_tiles_asked_);
      if (p.step_tiles < step_tiles_asked_ && !said_one_tile_) {
        said_one_tile_ = true;
        log_warn("cuda: FORGE_CUDA_ATTENTION_STEP_TILES=2, but at head dim " + std::to_string(a.head_dim) +
                 " two-tile steps need more shared memory a block than this device's " +
                 std::to_string(shared_per_sm_ / 1024) + " KiB a SM: one-tile steps run instead");
      }
    }
    const int tiles = attention_tiles(a.T);
    p.tile_max_end = tile_bounds_.get<int32_t>(2 * size_t(tiles));
    p.tile_min_end = p.tile_max_end + tiles;
    FORGE_CHECK(bf16_ || (a.qkv_bf16 == nullptr && a.out_bf16 == nullptr),
                "cuda tree attention: bf16 q|k|v and output (qkv_bf16, out_bf16) are for the bf16 precision");
    p.out_bf16 = reinterpret_cast<__nv_bfloat16*>(a.out_bf16);
    if (a.qkv_bf16) {  // the caller's: written by the forward (or given to it), read by the backward
      p.qkv_bf16 = reinterpret_cast<__nv_bfloat16*>(a.qkv_bf16);
      p.qkv_bf16_kept = true;
      p.qkv_bf16_given = a.qkv_bf16_given;
    } else if (bf16_) {
      p.qkv_bf16 = qkv_bf16_.get<__nv_bfloat16>(size_t(a.T) * (a.n_heads + 2 * a.n_kv_heads) * a.head_dim);
    }
    return p;
  }
  // Whether the 3xTF32 attention's shared memory at this head dim fits a
  // block of this device (not on the 99 KiB of sm_86 and sm_89 parts, whose
  // FP32 attention runs the exact kernels, said once).
  bool fits_3xtf32_attention(int head_dim) {
    const size_t need = tree_attention_3xtf32_shared_bytes(head_dim);
    if (need <= shared_optin_) return true;
    if (!said_exact_fallback_) {
      said_exact_fallback_ = true;
      log_warn("cuda: the 3xTF32 attention at head dim " + std::to_string(head_dim) + " needs " +
               std::to_string(need / 1024) + " KB of shared memory a block, this device offers " +
               std::to_string(shared_optin_ / 1024) + " KB: the exact FP32 kernels run instead");
    }
    return false;
  }

  HeadWorkspace head_workspace(const HeadArgs& a) {
    HeadWorkspace ws;
    ws.stats = head_stats_.get<double>(3 * size_t(a.R));
    ws.tile = head_tile_.get<float>(head_tile_floats(a.R, a.V, a.vocab_chunk));
    if (bf16_) ws.hidden_bf16 = head_hidden_.get<float>(size_t(a.R) * a.d);
    return ws;
  }

  const bool bf16_;
  const bool tf32x3_attention_;  // FP32 precision with the 3xTF32 attention
  const int step_tiles_asked_;    // the tensor-core attention's tiles a step (0: the default)
  const bool bf16_working_;       // bf16, activations and weights made as bf16 ahead (bf16_operands)
  bool pin_refused_ = false;      // pin_host_memory has warned
  int wgmma_attention_;           // bf16: the attention on wgmma, warpgroups a block (FORGE_CUDA_ATTENTION_WGMMA)
  const int wgmma_step_keys_;     // its forward's keys a step (FORGE_CUDA_ATTENTION_WGMMA_KEYS; 0: 64)
  size_t shared_optin_ = 0;       // the device's dynamic shared memory a block, at most
  size_t shared_per_sm_ = 0;      // and a SM
  bool said_exact_fallback_ = false;
  bool said_one_tile_ = false;  // the warning that asked two-tile steps do not fit, once
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  MemoryMeter meter_;
  std::unordered_map<void*, size_t> sizes_;  // alloc'd buffers
  Scratch reduce_{meter_}, tile_bounds_{meter_}, delta_{meter_}, dkdv_turn_{meter_}, head_stats_{meter_},
      head_tile_{meter_}, loss_partials_{meter_}, loss_totals_{meter_}, paged_partials_{meter_},
      rmsnorm_partials_{meter_};
  // bf16 mode
  Scratch gemm_a_{meter_}, gemm_b_{meter_}, linear_dy_{meter_}, qkv_bf16_{meter_}, dout_bf16_{meter_},
      head_hidden_{meter_};
};

}  // namespace

int visible_cuda_devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#ifndef FORGE_CUDA_EMULATION
namespace {
// *built = whether the device code has wgmma.
__global__ void wgmma_built(int* built) {
#ifdef FORGE_WGMMA
  *built = 1;
#else
  *built = 0;
#endif
}
}  // namespace
#endif

bool hopper_device() {
#ifdef FORGE_CUDA_EMULATION
  return true;
#else
  int device = 0, major = 0, minor = 0;
  FORGE_CUDA_CHECK(cudaGetDevice(&device));
  FORGE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FORGE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major == 9 && minor == 0;
#endif
}

bool wgmma_supported() {
#ifdef FORGE_CUDA_EMULATION
  return true;
#else
  if (!hopper_device()) return false;
  int* built = nullptr;
  int host = 0;
  FORGE_CUDA_CHECK(cudaMalloc(&built, sizeof(int)));
  struct Freed {  // however the probe ends (a failed launch threw past the free)
    int* p;
    ~Freed() { cudaFree(p); }
  } freed{built};
  FORGE_LAUNCH(wgmma_built, 1u, 1u, 0, nullptr, built);
  FORGE_CUDA_CHECK(cudaMemcpy(&host, built, sizeof(int), cudaMemcpyDeviceToHost));
  return host == 1;
#endif
}

namespace {

// Which of `allowed` environment variable `name` holds (its index), or -1
// where it is unset; an InputError naming the variable and the values
// otherwise.
int env_choice(const char* name, std::initializer_list<const char*> allowed) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  std::string values;
  int i = 0;
  for (const char* a : allowed) {
    if (std::string(v) == a) return i;
    values += (i == 0 ? "" : i + 1 == int(allowed.size()) ? " or " : ", ") + std::string(a);
    ++i;
  }
  throw InputError(std::string(name) + " must be " + values + ", got '" + v + "'");
}

}  // namespace

Fp32Attention fp32_attention_from_env() {
  return env_choice("FORGE_CUDA_FP32_ATTENTION", {"3xtf32", "exact"}) == 1 ? Fp32Attention::kExact
                                                                           : Fp32Attention::k3xTf32;
}

int attention_step_tiles_from_env() { return env_choice("FORGE_CUDA_ATTENTION_STEP_TILES", {"1", "2"}) + 1; }

bool bf16_working_activations_from_env() { return env_choice("FORGE_CUDA_BF16_WORKING", {"bf16", "fp32"}) != 1; }

int wgmma_attention_from_env() { return std::max(0, env_choice("FORGE_CUDA_ATTENTION_WGMMA", {"0", "1", "2"})); }

int wgmma_step_keys_from_env() {
  const int i = env_choice("FORGE_CUDA_ATTENTION_WGMMA_KEYS", {"64", "128"});
  return i < 0 ? 0 : 64 << i;
}

CudaOptions cuda_options_from_env() {
  return {fp32_attention_from_env(), attention_step_tiles_from_env(), bf16_working_activations_from_env(),
          wgmma_attention_from_env(), wgmma_step_keys_from_env()};
}

std::unique_ptr<Backend> make_cuda_backend(Precision precision) {
  return make_cuda_backend(precision, cuda_options_from_env());
}

std::unique_ptr<Backend> make_cuda_backend(Precision precision, const CudaOptions& options) {
  const int attention_step_tiles = options.attention_step_tiles;
  if (attention_step_tiles < 0 || attention_step_tiles > 2)
    throw InputError("backend 'cuda': attention tiles a step must be 1 or 2 (0: the default), got " +
                     std::to_string(attention_step_tiles));
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0)
    throw InputError(std::string("backend 'cuda': no CUDA device found (cudaGetDeviceCount: ") +
                     (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
                     "); use the cpu backend");
  // Each rank binds to one GPU of its node: local rank mod visible devices
  // (with --gpus-per-task=1 / CUDA_VISIBLE_DEVICES that is the only one).
  const int device = node_local_rank() % n;
  if (cudaSetDevice(device) != cudaSuccess)
    throw Error("backend 'cuda': cudaSetDevice(" + std::to_string(device) + ") failed");
#ifndef FORGE_CUDA_EMULATION
  // Which GPU this process computes on, once per process (per rank under
  // mpirun: the line shows how ranks were bound to the node's GPUs).
  static bool described = false;
  cudaDeviceProp prop{};
  if (!described && cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    described = true;
    char rest[96];
    std::snprintf(rest, sizeof rest, ", sm_%d%d, %d SMs, %.1f GiB", prop.major, prop.minor, prop.multiProcessorCount,
                  prop.totalGlobalMem / 1073741824.0);
    log_info("cuda: device " + std::to_string(device) + " of " + std::to_string(n) + ": " + prop.name + rest +
             (precision == Precision::kBf16                ? ""
              : options.fp32_attention == Fp32Attention::k3xTf32 ? ", FP32 attention 3xTF32 on tensor cores"
                                                     : ", FP32 attention exact (SIMT)") +
             (attention_step_tiles ? ", attention in steps of " + std::to_string(attention_step_tiles) +
                                         " tiles (FORGE_CUDA_ATTENTION_STEP_TILES)"
                                   : "") +
             (precision == Precision::kBf16 && !options.bf16_working_activations
                  ? ", FP32 working activations (FORGE_CUDA_BF16_WORKING)"
                  : ""));
  }
#endif
  return std::make_unique<CudaBackend>(precision, options);
}

namespace {
// make_backend("cuda"); the emulated build of these sources (the tests) under
// its own name, so that both can live in one binary.
std::unique_ptr<Backend> make_registered(Precision precision) { return make_cuda_backend(precision); }
#ifdef FORGE_CUDA_EMULATION
[[maybe_unused]] const bool registered = register_backend("cuda-emulated", make_registered);
#else
[[maybe_unused]] const bool registered = register_backend("cuda", make_registered);
#endif
}  // namespace

FORGE_CUDA_NAMESPACE_END
