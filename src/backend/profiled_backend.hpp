// Where a step's time goes, per backend operation: a Backend that runs every
// operation on another backend and, while enabled, times it.
//
// A timed operation is bracketed by inner.synchronize(): its time is the wall
// time from the host's call to the operation's completion on the device
// (launch latency included), and operations no longer overlap each other or
// the host's work, so the sum over operations is an upper bound of what they
// cost inside an unprofiled step. Disabled, it only forwards (one extra
// virtual call per operation). Rows are keyed by operation, GEMMs also by
// transposition ("gemm NT": A B^T, the forward's linear layers; "gemm NN": the
// input gradients; "gemm TN": the weight gradients; "linear backward": both
// of a layer's backward GEMMs in one operation, the model's path), and carry
// their FLOPs (2 M N K per GEMM).
//
// Used by bench_train_step --profile; any caller that builds its model on a
// ProfiledBackend gets the same results as on the inner backend, bit for bit.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace forge {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // GEMMs only; 0 elsewhere
};

class ProfiledBackend final : public Backend {
 public:
  explicit ProfiledBackend(Backend& inner) : inner_(inner) {}

  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void reset() { times_.clear(); }
  // Every operation timed since the last reset, most time first.
  std::vector<OpTime> times() const;

  std::string name() const override { return inner_.name(); }
  bool host_memory() const override { return inner_.host_memory(); }
  void synchronize() override { inner_.synchronize(); }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  size_t peak_device_bytes() const override { return inner_.peak_device_bytes(); }
  void to_device(void* dst, const void* host_src, size_t bytes) override;
  void to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  size_t release_scratch() override { return inner_.release_scratch(); }
  int max_trained_head_dim() const override { return inner_.max_trained_head_dim(); }
  int max_head_dim() const override { return inner_.max_head_dim(); }
  bool pin_host_memory(void* p, size_t bytes) override { return inner_.pin_host_memory(p, bytes); }
  void unpin_host_memory(void* p) override { inner_.unpin_host_memory(p); }
  void fill(float* x, float value, size_t n) override;

  size_t activation_value_bytes() const override { return inner_.activation_value_bytes(); }
  void pack_bf16(const float* src, uint16_t* dst, size_t n) override;
  void unpack_bf16(const uint16_t* src, float* dst, size_t n) override;
  bool bf16_operands() const override { return inner_.bf16_operands(); }

  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override;
  void linear_backward(int T, int in, int out, const float* dy, int ld_dy, const float* W, const float* x, int ld_x,
                       float* dx, int ld_dx, float* dW) override;
  void linear_fwd_bf16(int T, int in, int out, const float* x, const uint16_t* x16, const float* W,
                       const uint16_t* W16, float beta, float* y, int ld_y) override;
  void linear_backward_bf16(int T, int in, int out, const float* dy, int ld_dy, const uint16_t* dy16, const float* W,
                            const uint16_t* W16, const uint16_t* x16, float* dx, uint16_t* dx16, int ld_dx,
                            float* dW) override;
  void add_inplace(float* y, const float* x, size_t n) override;
  void scale(float* x, float s, size_t n) override;
  double sum_squares(const float* x, size_t n) override;

  void embedding_fwd(const int32_t* tokens, const float* table, float* out, int T, int d) override;
  void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d) override;
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d, float eps) override;
  void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                   int T, int d) override;
  void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
            bool inverse) override;
  void rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
                 bool inverse, uint16_t* y16) override;
  void swiglu_fwd(const float* gu, float* out, int T, int F) override;
  void swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) override;
  void rmsnorm_fwd_keep(const float* x, const float* w, float* y, uint16_t* y16, float* rstd, uint16_t* x16, int T,
                        int d, float eps) override;
  void rmsnorm_fwd_bf16(const uint16_t* x16, const float* w, float* y, uint16_t* y16, float* rstd, int T, int d,
                        float eps) override;
  void rmsnorm_bwd_bf16(const uint16_t* x16, const float* w, const float* rstd, const float* dy, const uint16_t* dy16,
                        float* dx, float* dw, int T, int d) override;
  void swiglu_fwd_keep(const float* gu, float* out, uint16_t* out16, uint16_t* gu16, int T, int F) override;
  void swiglu_fwd_bf16(const uint16_t* gu16, float* out, uint16_t* out16, int T, int F) override;
  void swiglu_bwd_bf16(const uint16_t* gu16, const float* dout, const uint16_t* dout16, float* dgu, uint16_t* dgu16,
                       int T, int F) override;

  void tree_attention_fwd(const TreeAttentionArgs& a) override;
  void tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) override;
  void head_fwd(const HeadArgs& a) override;
  void head_bwd(const HeadArgs& a, const HeadGrads& g) override;

  void gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override;
  void scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override;
  void adamw(float* param, const float* grad, float* m, float* v, size_t n, const AdamWParams& p) override;

  size_t kv_cache_value_bytes() const override { return inner_.kv_cache_value_bytes(); }
  void kv_cache_write(const KvCacheWriteArgs& a) override;
  void paged_attention_fwd(const PagedAttentionArgs& a) override;
  PolicyLossSums policy_loss(const PolicyLossArgs& a) override;

  std::unique_ptr<DeviceCollectives> make_collectives(const CollectiveBootstrap& peers) override;

 private:
  // Runs f; while enabled, between two synchronizations, adding the time to op.
  template <class F>
  auto timed(const char* op, double flops, F&& f);

  Backend& inner_;
  bool enabled_ = false;
  std::map<std::string, OpTime> times_;
};

// The profile as a table: one row per operation with calls, ms and share of
// the profiled time per step (divided by `steps`), and GFLOP/s where FLOPs are
// known; a last row with the sum.
std::string op_profile_table(const std::vector<OpTime>& times, int steps);

// {"gemm NT": ms per step, ...}: a JSON object for the benchmarks' one line.
std::string op_profile_json(const std::vector<OpTime>& times, int steps);

}  // namespace forge
