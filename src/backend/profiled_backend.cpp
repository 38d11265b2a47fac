// ProfiledBackend: forwarding with per-operation wall time between two
// synchronizations of the inner backend (profiled_backend.hpp).
#include "backend/profiled_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <type_traits>

#include "backend/collectives.hpp"
#include "core/timer.hpp"

namespace forge {

template <class F>
auto ProfiledBackend::timed(const char* op, double flops, F&& f) {
  if (!enabled_) return f();
  inner_.synchronize();
  Stopwatch sw;
  // The result (sum_squares, policy_loss) is host data once f returns.
  auto finish = [&] {
    inner_.synchronize();
    OpTime& t = times_[op];
    t.op = op;
    ++t.calls;
    t.seconds += sw.seconds();
    t.flops += flops;
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    finish();
  } else {
    auto r = f();
    finish();
    return r;
  }
}

std::vector<OpTime> ProfiledBackend::times() const {
  std::vector<OpTime> out;
  for (const auto& [op, t] : times_) out.push_back(t);
  std::stable_sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return out;
}

void* ProfiledBackend::alloc(size_t bytes) {
  return timed("alloc", 0, [&] { return inner_.alloc(bytes); });
}
void ProfiledBackend::release(void* p) {
  timed("release", 0, [&] { inner_.release(p); });
}
void ProfiledBackend::to_device(void* dst, const void* host_src, size_t bytes) {
  timed("to_device", 0, [&] { inner_.to_device(dst, host_src, bytes); });
}
void ProfiledBackend::to_host(void* host_dst, const void* src, size_t bytes) {
  timed("to_host", 0, [&] { inner_.to_host(host_dst, src, bytes); });
}
void ProfiledBackend::copy(void* dst, const void* src, size_t bytes) {
  timed("copy", 0, [&] { inner_.copy(dst, src, bytes); });
}
void ProfiledBackend::fill(float* x, float value, size_t n) {
  timed("fill", 0, [&] { inner_.fill(x, value, n); });
}
void ProfiledBackend::pack_bf16(const float* src, uint16_t* dst, size_t n) {
  timed("pack_bf16", 0, [&] { inner_.pack_bf16(src, dst, n); });
}
void ProfiledBackend::unpack_bf16(const uint16_t* src, float* dst, size_t n) {
  timed("unpack_bf16", 0, [&] { inner_.unpack_bf16(src, dst, n); });
}

void ProfiledBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  static const char* const kOps[2][2] = {{"gemm NN", "gemm NT"}, {"gemm TN", "gemm TT"}};
  timed(kOps[trans_a][trans_b], 2.0 * M * N * K,
        [&] { inner_.gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}
void ProfiledBackend::linear_backward(int T, int in, int out, const float* dy, int ld_dy, const float* W,
                                      const float* x, int ld_x, float* dx, int ld_dx, float* dW) {
  timed("linear backward", 4.0 * T * in * out,
        [&] { inner_.linear_backward(T, in, out, dy, ld_dy, W, x, ld_x, dx, ld_dx, dW); });
}
// The bf16-activation forms time as the rows of the FP32 ones they stand for.
void ProfiledBackend::linear_fwd_bf16(int T, int in, int out, const float* x, const uint16_t* x16, const float* W,
                                      const uint16_t* W16, float beta, float* y, int ld_y) {
  timed("gemm NT", 2.0 * T * in * out, [&] { inner_.linear_fwd_bf16(T, in, out, x, x16, W, W16, beta, y, ld_y); });
}
void ProfiledBackend::linear_backward_bf16(int T, int in, int out, const float* dy, int ld_dy, const uint16_t* dy16,
                                           const float* W, const uint16_t* W16, const uint16_t* x16, float* dx,
                                           uint16_t* dx16, int ld_dx, float* dW) {
  timed("linear backward", 4.0 * T * in * out,
        [&] { inner_.linear_backward_bf16(T, in, out, dy, ld_dy, dy16, W, W16, x16, dx, dx16, ld_dx, dW); });
}
void ProfiledBackend::add_inplace(float* y, const float* x, size_t n) {
  timed("add_inplace", 0, [&] { inner_.add_inplace(y, x, n); });
}
void ProfiledBackend::scale(float* x, float s, size_t n) {
  timed("scale", 0, [&] { inner_.scale(x, s, n); });
}
double ProfiledBackend::sum_squares(const float* x, size_t n) {
  return timed("sum_squares", 0, [&] { return inner_.sum_squares(x, n); });
}

void ProfiledBackend::embedding_fwd(const int32_t* tokens, const float* table, float* out, int T, int d) {
  timed("embedding_fwd", 0, [&] { inner_.embedding_fwd(tokens, table, out, T, d); });
}
void ProfiledBackend::embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T, int d) {
  timed("embedding_bwd", 0, [&] { inner_.embedding_bwd(tokens, dout, dtable, T, d); });
}
void ProfiledBackend::rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T, int d, float eps) {
  timed("rmsnorm_fwd", 0, [&] { inner_.rmsnorm_fwd(x, w, y, rstd, T, d, eps); });
}
void ProfiledBackend::rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                                  float* dw, int T, int d) {
  timed("rmsnorm_bwd", 0, [&] { inner_.rmsnorm_bwd(x, w, rstd, dy, dx, dw, T, d); });
}
void ProfiledBackend::rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                           const double* inv_freq, bool inverse) {
  timed("rope", 0, [&] { inner_.rope(x, pos, T, n_heads, head_dim, ld, inv_freq, inverse); });
}
void ProfiledBackend::rope_bf16(const float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                                const double* inv_freq, bool inverse, uint16_t* y16) {
  timed("rope (to bf16)", 0, [&] { inner_.rope_bf16(x, pos, T, n_heads, head_dim, ld, inv_freq, inverse, y16); });
}
void ProfiledBackend::swiglu_fwd(const float* gu, float* out, int T, int F) {
  timed("swiglu_fwd", 0, [&] { inner_.swiglu_fwd(gu, out, T, F); });
}
void ProfiledBackend::swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) {
  timed("swiglu_bwd", 0, [&] { inner_.swiglu_bwd(gu, dout, dgu, T, F); });
}
void ProfiledBackend::rmsnorm_fwd_keep(const float* x, const float* w, float* y, uint16_t* y16, float* rstd,
                                       uint16_t* x16, int T, int d, float eps) {
  timed("rmsnorm_fwd (keeps bf16 x)", 0, [&] { inner_.rmsnorm_fwd_keep(x, w, y, y16, rstd, x16, T, d, eps); });
}
void ProfiledBackend::rmsnorm_fwd_bf16(const uint16_t* x16, const float* w, float* y, uint16_t* y16, float* rstd,
                                       int T, int d, float eps) {
  timed("rmsnorm_fwd (bf16 x)", 0, [&] { inner_.rmsnorm_fwd_bf16(x16, w, y, y16, rstd, T, d, eps); });
}
void ProfiledBackend::rmsnorm_bwd_bf16(const uint16_t* x16, const float* w, const float* rstd, const float* dy,
                                       const uint16_t* dy16, float* dx, float* dw, int T, int d) {
  timed("rmsnorm_bwd (bf16 x)", 0, [&] { inner_.rmsnorm_bwd_bf16(x16, w, rstd, dy, dy16, dx, dw, T, d); });
}
void ProfiledBackend::swiglu_fwd_keep(const float* gu, float* out, uint16_t* out16, uint16_t* gu16, int T, int F) {
  timed("swiglu_fwd (keeps bf16 g|u)", 0, [&] { inner_.swiglu_fwd_keep(gu, out, out16, gu16, T, F); });
}
void ProfiledBackend::swiglu_fwd_bf16(const uint16_t* gu16, float* out, uint16_t* out16, int T, int F) {
  timed("swiglu_fwd (bf16 g|u)", 0, [&] { inner_.swiglu_fwd_bf16(gu16, out, out16, T, F); });
}
void ProfiledBackend::swiglu_bwd_bf16(const uint16_t* gu16, const float* dout, const uint16_t* dout16, float* dgu,
                                      uint16_t* dgu16, int T, int F) {
  timed("swiglu_bwd (bf16 g|u)", 0, [&] { inner_.swiglu_bwd_bf16(gu16, dout, dout16, dgu, dgu16, T, F); });
}

void ProfiledBackend::tree_attention_fwd(const TreeAttentionArgs& a) {
  timed("tree_attention_fwd", 0, [&] { inner_.tree_attention_fwd(a); });
}
void ProfiledBackend::tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) {
  timed("tree_attention_bwd", 0, [&] { inner_.tree_attention_bwd(a, g); });
}
void ProfiledBackend::head_fwd(const HeadArgs& a) {
  timed("head_fwd", 0, [&] { inner_.head_fwd(a); });
}
void ProfiledBackend::head_bwd(const HeadArgs& a, const HeadGrads& g) {
  timed("head_bwd", 0, [&] { inner_.head_bwd(a, g); });
}

void ProfiledBackend::gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) {
  timed("gather_rows", 0, [&] { inner_.gather_rows(src, rows, dst, R, d); });
}
void ProfiledBackend::scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R, int d) {
  timed("scatter_add_rows", 0, [&] { inner_.scatter_add_rows(src, rows, dst, R, d); });
}
void ProfiledBackend::adamw(float* param, const float* grad, float* m, float* v, size_t n, const AdamWParams& p) {
  timed("adamw", 0, [&] { inner_.adamw(param, grad, m, v, n, p); });
}

void ProfiledBackend::kv_cache_write(const KvCacheWriteArgs& a) {
  timed("kv_cache_write", 0, [&] { inner_.kv_cache_write(a); });
}
void ProfiledBackend::paged_attention_fwd(const PagedAttentionArgs& a) {
  timed("paged_attention_fwd", 0, [&] { inner_.paged_attention_fwd(a); });
}
std::unique_ptr<DeviceCollectives> ProfiledBackend::make_collectives(const CollectiveBootstrap& peers) {
  return inner_.make_collectives(peers);
}

PolicyLossSums ProfiledBackend::policy_loss(const PolicyLossArgs& a) {
  return timed("policy_loss", 0, [&] { return inner_.policy_loss(a); });
}

std::string op_profile_table(const std::vector<OpTime>& times, int steps) {
  double total = 0;
  for (const auto& t : times) total += t.seconds;
  const double per = 1.0 / std::max(steps, 1);
  std::string s;
  char line[160];
  std::snprintf(line, sizeof line, "%-22s %10s %10s %7s %10s\n", "operation", "calls/step", "ms/step", "share",
                "GFLOP/s");
  s += line;
  for (const auto& t : times) {
    char rate[16] = "-";
    if (t.flops > 0 && t.seconds > 0) std::snprintf(rate, sizeof rate, "%.1f", t.flops / t.seconds / 1e9);
    std::snprintf(line, sizeof line, "%-22s %10.1f %10.3f %6.1f%% %10s\n", t.op.c_str(), t.calls * per,
                  t.seconds * per * 1e3, total > 0 ? 100.0 * t.seconds / total : 0.0, rate);
    s += line;
  }
  std::snprintf(line, sizeof line, "%-22s %10s %10.3f %6.1f%%\n", "sum", "", total * per * 1e3, 100.0);
  return s + line;
}

std::string op_profile_json(const std::vector<OpTime>& times, int steps) {
  const double per = 1.0 / std::max(steps, 1);
  std::string s = "{";
  char item[96];
  for (size_t i = 0; i < times.size(); ++i) {
    std::snprintf(item, sizeof item, "%s\"%s\": %.4g", i ? ", " : "", times[i].op.c_str(),
                  times[i].seconds * per * 1e3);
    s += item;
  }
  return s + "}";
}

}  // namespace forge
