// The CPU bf16 reference of the bf16 precision mode, for whole-model tests: a
// Backend that forwards every operation to the CPU backend, after rounding to
// bf16 (round to nearest even, backend_cases::round_bf16) exactly the inputs
// the CUDA backend's bf16 mode rounds: both GEMM operands, the tree
// attention's Q, K and V, and the head's hidden states; and, as that mode
// does, it keeps a training pass's activations packed to bf16. Everything
// else, and all arithmetic, is the CPU backend's FP32. With round_operands
// false it only packs the activations (FP32 operands otherwise): the effect
// of the bf16 activation storage alone. With working_bf16 false it rounds
// the operands but does not say so (bf16_operands() false): the transformer
// then keeps its working activations in FP32, which must change nothing.
#pragma once
#include <vector>

#include "emulation/backend_cases.hpp"

namespace forge::backend_cases {

class Bf16ReferenceBackend final : public Backend {
 public:
  explicit Bf16ReferenceBackend(bool round_operands = true, bool working_bf16 = true)
      : round_(round_operands), working_bf16_(working_bf16) {}
  std::string name() const override { return "cpu-bf16-reference"; }
  void* alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void release(void* p) override { cpu_->release(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { cpu_->to_device(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { cpu_->to_host(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { cpu_->copy(dst, src, bytes); }
  void fill(float* x, float value, size_t n) override { cpu_->fill(x, value, n); }
  size_t activation_value_bytes() const override { return 2; }  // as the CUDA bf16 mode
  void pack_bf16(const float* src, uint16_t* dst, size_t n) override { cpu_->pack_bf16(src, dst, n); }
  void unpack_bf16(const uint16_t* src, float* dst, size_t n) override { cpu_->unpack_bf16(src, dst, n); }
  // Rounding both GEMM operands, it takes the transformer's bf16 working
  // activations (the Backend defaults widen them for the GEMMs).
  bool bf16_operands() const override { return round_ && working_bf16_; }

  void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override {
    if (!round_) return cpu_->gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const std::vector<float> a = rounded(A, size_t(ta ? K : M), ta ? M : K, lda);
    const std::vector<float> b = rounded(B, size_t(tb ? N : K), tb ? K : N, ldb);
    cpu_->gemm(ta, tb, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
  }
  void add_inplace(float* y, const float* x, size_t n) override { cpu_->add_inplace(y, x, n); }
  void scale(float* x, float s, size_t n) override { cpu_->scale(x, s, n); }
  double sum_squares(const float* x, size_t n) override { return cpu_->sum_squares(x, n); }

  void embedding_fwd(const int32_t* tokens, const float* table, float* out, int T, int d) override {
    cpu_->embedding_fwd(tokens, table, out, T, d);
  }
  void embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d) override {
    cpu_->embedding_bwd(tokens, dout, dtable, T, d);
  }
  void rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d,
                   float eps) override {
    cpu_->rmsnorm_fwd(x, w, y, rstd, T, d, eps);
  }
  void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                   float* dw, int T, int d) override {
    cpu_->rmsnorm_bwd(x, w, rstd, dy, dx, dw, T, d);
  }
  void rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld, const double* inv_freq,
            bool inverse) override {
    cpu_->rope(x, pos, T, n_heads, head_dim, ld, inv_freq, inverse);
  }
  void swiglu_fwd(const float* gu, float* out, int T, int F) override { cpu_->swiglu_fwd(gu, out, T, F); }
  void swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) override {
    cpu_->swiglu_bwd(gu, dout, dgu, T, F);
  }

  // A caller's kept bf16 q|k|v (TreeAttentionArgs::qkv_bf16): the forward
  // writes them (or finds them there: qkv_bf16_given), the backward reads Q,
  // K and V from them; the output as bf16 (out_bf16) written by the forward
  // and read by the backward, which may take dO as bf16 too
  // (TreeAttentionGrads::dout_bf16): as the CUDA bf16 mode.
  void tree_attention_fwd(const TreeAttentionArgs& a) override {
    if (!a.out_bf16) return forward(a);
    // The output as bf16 (bf16 operands): computed in FP32, then rounded.
    std::vector<float> out(size_t(a.T) * a.n_heads * a.head_dim);
    TreeAttentionArgs f = a;
    f.out = out.data();
    f.out_bf16 = nullptr;
    forward(f);
    for (size_t i = 0; i < out.size(); ++i) a.out_bf16[i] = float_to_bf16(out[i]);
  }
  void tree_attention_bwd(const TreeAttentionArgs& a_in, const TreeAttentionGrads& g_in) override {
    TreeAttentionArgs a = a_in;
    TreeAttentionGrads g = g_in;
    std::vector<float> out, dout;
    if (!g.dout && g.dout_bf16) {  // dO as bf16 (the o-projection's dx16), widened
      dout.resize(size_t(a.T) * a.n_heads * a.head_dim);
      for (size_t i = 0; i < dout.size(); ++i) dout[i] = bf16_to_float(g.dout_bf16[i]);
      g.dout = dout.data();
      g.dout_bf16 = nullptr;
    }
    if (a.out_bf16) {  // the kept bf16 output, widened
      out.resize(size_t(a.T) * a.n_heads * a.head_dim);
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(a.out_bf16[i]);
      a.out = out.data();
      a.out_bf16 = nullptr;
    }
    if (a.qkv_bf16) {  // Q, K and V from the kept bf16 values (rounding them again changes nothing)
      const int Q = a.n_heads * a.head_dim, KV = a.n_kv_heads * a.head_dim, cols = Q + 2 * KV;
      std::vector<float> qkv(size_t(a.T) * cols);
      for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = bf16_to_float(a.qkv_bf16[i]);
      TreeAttentionArgs r = fused_tree_attention_args(a.T, a.n_heads, a.n_kv_heads, a.head_dim, qkv.data(), cols,
                                                      a.subtree_end, a.out, a.lse);
      return cpu_->tree_attention_bwd(r, g);
    }
    if (!round_) return cpu_->tree_attention_bwd(a, g);
    Qkv16 r(a);
    cpu_->tree_attention_bwd(r.args, g);
  }
  void head_fwd(const HeadArgs& a) override {
    if (!round_) return cpu_->head_fwd(a);
    const std::vector<float> h = rounded(a.hidden, a.R, a.d, a.d);
    HeadArgs r = a;
    r.hidden = h.data();
    cpu_->head_fwd(r);
  }
  void head_bwd(const HeadArgs& a, const HeadGrads& g) override {
    if (!round_) return cpu_->head_bwd(a, g);
    const std::vector<float> h = rounded(a.hidden, a.R, a.d, a.d);
    HeadArgs r = a;
    r.hidden = h.data();
    cpu_->head_bwd(r, g);
  }

  void gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override {
    cpu_->gather_rows(src, rows, dst, R, d);
  }
  void scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d) override {
    cpu_->scatter_add_rows(src, rows, dst, R, d);
  }
  void adamw(float* param, const float* grad, float* m, float* v, size_t n,
             const AdamWParams& p) override {
    cpu_->adamw(param, grad, m, v, n, p);
  }
  void kv_cache_write(const KvCacheWriteArgs& a) override { cpu_->kv_cache_write(a); }
  void paged_attention_fwd(const PagedAttentionArgs& a) override { cpu_->paged_attention_fwd(a); }
  PolicyLossSums policy_loss(const PolicyLossArgs& a) override { return cpu_->policy_loss(a); }

 private:
  // The forward into the FP32 out.
  void forward(const TreeAttentionArgs& a) {
    if (a.qkv_bf16 && a.qkv_bf16_given) {  // Q, K and V as the caller rounded them (Backend::rope_bf16)
      const int cols = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
      std::vector<float> qkv(size_t(a.T) * cols);
      for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = bf16_to_float(a.qkv_bf16[i]);
      return cpu_->tree_attention_fwd(fused_tree_attention_args(a.T, a.n_heads, a.n_kv_heads, a.head_dim, qkv.data(),
                                                                cols, a.subtree_end, a.out, a.lse));
    }
    if (a.qkv_bf16) {
      const int cols = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
      for (int t = 0; t < a.T; ++t)
        for (int c = 0; c < cols; ++c) a.qkv_bf16[size_t(t) * cols + c] = float_to_bf16(a.q[size_t(t) * a.ld_qkv + c]);
    }
    TreeAttentionArgs plain = a;
    plain.qkv_bf16 = nullptr;
    if (!round_) return cpu_->tree_attention_fwd(plain);
    Qkv16 r(plain);
    cpu_->tree_attention_fwd(r.args);
  }

  // rows x cols of a row-major matrix with row stride ld, rounded, same stride.
  static std::vector<float> rounded(const float* x, size_t rows, int cols, int ld) {
    std::vector<float> out(rows * ld);
    for (size_t r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) out[r * ld + c] = round_bf16(x[r * ld + c]);
    return out;
  }

  // Rounded copies of the Q, K and V columns, with the caller's row stride.
  struct Qkv16 {
    std::vector<float> q, k, v;
    TreeAttentionArgs args;
    explicit Qkv16(const TreeAttentionArgs& a)
        : q(rounded(a.q, a.T, a.n_heads * a.head_dim, a.ld_qkv)),
          k(rounded(a.k, a.T, a.n_kv_heads * a.head_dim, a.ld_qkv)),
          v(rounded(a.v, a.T, a.n_kv_heads * a.head_dim, a.ld_qkv)),
          args(a) {
      args.q = q.data();
      args.k = k.data();
      args.v = v.data();
    }
  };

  bool round_, working_bf16_;
  std::unique_ptr<Backend> cpu_ = make_backend("cpu");
};

}  // namespace forge::backend_cases
