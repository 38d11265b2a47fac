// Test cases that run every Backend operation on a backend under test and on
// the CPU backend (the reference) with the same random inputs, and compare:
// FP32 paths agree within 1e-5 relative (norm of the difference over the norm
// of the reference, per output). Shared by the emulated CUDA tests
// (tests/emulation) and the real-GPU tests (tests/unit/test_cuda_device.cpp):
// FORGE_BACKEND_CASES(Suite, get) defines one TEST per case, where
// get(std::string* why) returns the backend or nullptr (the test then skips
// with *why).
//
// Sizes are chosen to not be multiples of the kernels' tiles (32 rows, 128 or
// 256 threads, vocabulary chunks); attention runs on packed bins of random
// prefix forests with deep branching (tree/prefix_tree + tree/packed_batch).
// The policy loss runs on samples of 0 to 300 tokens, off policy enough that
// the clip range, the token mask and the sequence mask all take effect.
// bf16 cases (FORGE_BF16_BACKEND_CASES, a backend in bf16 precision) judge
// GEMM, tree attention and the head against a CPU bf16 reference (below).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "algo/policy_loss.hpp"
#include "backend/backend.hpp"
#include "backend/backend_registry.hpp"
#include "backend/device_array.hpp"
#include "core/bf16.hpp"
#include "core/rng.hpp"
#include "model/model_config.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge::backend_cases {

constexpr double kFp32Tol = 1e-5;

inline std::vector<float> random_vec(Rng& rng, size_t n, float scale = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal()) * scale;
  return v;
}

inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                         const std::string& what, double tol = kFp32Tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": non-finite value at " << i;
  EXPECT_LE(rel_err(got, want), tol) << what;
}

// The same host data in both backends.
template <class T>
struct Pair {
  DeviceArray<T> dev, cpu;
  Pair(Backend& d, Backend& c, const std::vector<T>& host) {
    dev.upload(d, host);
    cpu.upload(c, host);
  }
  void expect_equal(const std::string& what, double tol = kFp32Tol) const {
    expect_close(dev.download(), cpu.download(), what, tol);
  }
};

// pack_bf16 rounds to nearest even (ties, overflow, denormals, large n) as
// the CPU backend does, and keeps a NaN a NaN (its payload bits may differ:
// the device conversion gives the canonical NaN); unpack_bf16 widens exactly.
inline void bf16_packing(Backend& dev, Backend& cpu) {
  Rng rng(3);
  std::vector<float> x = random_vec(rng, 70001, 3.0f);
  const float specials[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f, 3.4e38f, 1e-40f, NAN, INFINITY};
  for (size_t i = 0; i < std::size(specials); ++i) x[i] = specials[i];
  Pair<float> src(dev, cpu, x);
  Pair<uint16_t> bits(dev, cpu, std::vector<uint16_t>(x.size()));
  Pair<float> back(dev, cpu, std::vector<float>(x.size()));
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->pack_bf16(pick(src), pick(bits), x.size());
    be->unpack_bf16(pick(bits), pick(back), x.size());
  }
  const std::vector<float> d = back.dev.download(), c = back.cpu.download();
  std::vector<uint16_t> bd = bits.dev.download(), bcpu = bits.cpu.download();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(d[i]) && std::isnan(c[i])) << "NaN at " << i;
      bd[i] = bcpu[i] = 0;  // payloads aside
    } else {
      EXPECT_EQ(0, std::memcmp(&d[i], &c[i], sizeof(float))) << "unpack_bf16 at " << i;
    }
  EXPECT_EQ(bd, bcpu) << "pack_bf16 bits";
  EXPECT_EQ(c[0], 1.0f) << "a tie rounds to even";
  // The specials' bits worked out by hand (under emulation both sides call
  // core/bf16.hpp, so only these pin the rounding itself): ties to even
  // (down, up), -0, overflow to infinity, a denormal, infinity.
  const uint16_t want[] = {0x3F80, 0x3F82, 0x8000, 0x7F80, 0x0001};
  for (size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(bcpu[i], want[i]) << "pack_bf16 of special " << i;
  EXPECT_EQ(bcpu[6], 0x7F80) << "pack_bf16 of infinity";
}

inline void elementwise(Backend& dev, Backend& cpu) {
  Rng rng(1);
  const size_t n = 70001;
  const auto x = random_vec(rng, n), y = random_vec(rng, n);
  Pair<float> a(dev, cpu, x), b(dev, cpu, y);
  for (Backend* be : {&dev, &cpu}) {
    const bool d = be == &dev;
    be->add_inplace((d ? a.dev : a.cpu).data(), (d ? b.dev : b.cpu).data(), n);
    be->scale((d ? a.dev : a.cpu).data(), -0.37f, n);
    be->fill((d ? b.dev : b.cpu).data() + 5, 2.5f, 1000);
  }
  a.expect_equal("add_inplace + scale");
  b.expect_equal("fill");
  const double sd = dev.sum_squares(a.dev.data(), n), sc = cpu.sum_squares(a.cpu.data(), n);
  EXPECT_LE(std::abs(sd - sc), 1e-9 * sc) << "sum_squares";
  // The same bits every call (the clipping norm of a reproducible step),
  // also over more blocks than one pass takes. Emulated blocks happen to add
  // in order; on a GPU (CudaDevice.Elementwise) an atomic per block did not.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(dev.sum_squares(a.dev.data(), n), sd) << "sum_squares, call " << i;
  const auto many = random_vec(rng, 270001);  // above 1024 blocks of 256
  DeviceArray<float> m;
  m.upload(dev, many);
  const double first = dev.sum_squares(m.data(), many.size());
  double exact = 0;
  for (float v : many) exact += double(v) * v;
  EXPECT_LE(std::abs(first - exact), 1e-9 * exact) << "sum_squares of 270001 values";
  EXPECT_EQ(dev.sum_squares(m.data(), many.size()), first) << "sum_squares, called again";
  DeviceArray<float> c(dev, n);
  dev.copy(c.data(), a.dev.data(), n * sizeof(float));
  expect_close(c.download(), a.cpu.download(), "copy", 0.0);
  // Past 1 MiB (the CPU backend splits such a copy among its threads), a
  // byte count that is no multiple of 64 or 4: every byte copied, none past.
  const size_t big = (size_t{3} << 18) + 7;
  const auto z = random_vec(rng, big);
  DeviceArray<float> zs, zd;
  zs.upload(dev, z);
  zd.upload(dev, std::vector<float>(big, -1.0f));
  const size_t bytes = big * sizeof(float) - 3;
  dev.copy(zd.data(), zs.data(), bytes);
  std::vector<float> want(big, -1.0f);
  std::memcpy(want.data(), z.data(), bytes);
  const std::vector<float> got = zd.download();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), big * sizeof(float)), 0) << "copy of " << bytes << " bytes";
}

// Every transpose pair, leading dimensions padded past the matrix widths:
// fn(ta, tb, M, N, K, A, lda, B, ldb, C, ldc).
template <class Fn>
void for_each_gemm_case(Fn fn) {
  Rng rng(2);
  const int M = 37, N = 45, K = 29;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
      const auto A = random_vec(rng, size_t(ta ? K : M) * lda);
      const auto B = random_vec(rng, size_t(tb ? N : K) * ldb);
      const auto C = random_vec(rng, size_t(M) * ldc);
      fn(ta != 0, tb != 0, M, N, K, A, lda, B, ldb, C, ldc);
    }
}

inline void gemm(Backend& dev, Backend& cpu) {
  for_each_gemm_case([&](bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                         const std::vector<float>& B, int ldb, const std::vector<float>& C, int ldc) {
    Pair<float> a(dev, cpu, A), b(dev, cpu, B), c(dev, cpu, C);
    dev.gemm(ta, tb, M, N, K, 0.7f, a.dev.data(), lda, b.dev.data(), ldb, 0.3f, c.dev.data(), ldc);
    cpu.gemm(ta, tb, M, N, K, 0.7f, a.cpu.data(), lda, b.cpu.data(), ldb, 0.3f, c.cpu.data(), ldc);
    c.expect_equal("gemm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
  });
}

// A linear layer's backward (T 37, in 50, out 70; row strides past the
// widths): dx = dy W, dW += dy^T x.
struct LinearCase {
  int T = 37, in = 50, out = 70, ld_dy = 75, ld_x = 53, ld_dx = 57;
  std::vector<float> dy, W, x, dx, dW;
  LinearCase() {
    Rng rng(21);
    dy = random_vec(rng, size_t(T) * ld_dy);
    W = random_vec(rng, size_t(out) * in);
    x = random_vec(rng, size_t(T) * ld_x);
    dx = random_vec(rng, size_t(T) * ld_dx);  // overwritten but for the stride's gaps
    dW = random_vec(rng, size_t(out) * in);   // accumulated into
  }
};
struct LinearResult {
  std::vector<float> dx, dW;
};
// By linear_backward, or (two_gemms) by the two gemm calls it stands for.
inline LinearResult run_linear_backward(Backend& be, const LinearCase& c, bool two_gemms) {
  DeviceArray<float> dy, W, x, dx, dW;
  dy.upload(be, c.dy);
  W.upload(be, c.W);
  x.upload(be, c.x);
  dx.upload(be, c.dx);
  dW.upload(be, c.dW);
  if (two_gemms) {
    be.gemm(false, false, c.T, c.in, c.out, 1.0f, dy.data(), c.ld_dy, W.data(), c.in, 0.0f, dx.data(), c.ld_dx);
    be.gemm(true, false, c.out, c.in, c.T, 1.0f, dy.data(), c.ld_dy, x.data(), c.ld_x, 1.0f, dW.data(), c.in);
  } else {
    be.linear_backward(c.T, c.in, c.out, dy.data(), c.ld_dy, W.data(), x.data(), c.ld_x, dx.data(), c.ld_dx,
                       dW.data());
  }
  return {dx.download(), dW.download()};
}

inline void linear_backward(Backend& dev, Backend& cpu) {
  const LinearCase c;
  const LinearResult got = run_linear_backward(dev, c, false), want = run_linear_backward(cpu, c, true);
  expect_close(got.dx, want.dx, "linear_backward dx");
  expect_close(got.dW, want.dW, "linear_backward dW");
}

inline void rows(Backend& dev, Backend& cpu) {
  Rng rng(3);
  const int V = 53, d = 70, T = 91, R = 33;
  std::vector<int32_t> tokens(T), distinct(R);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(V / 4));  // many repeats
  // A stride coprime to T (91 = 7 x 13) gives R distinct rows; scatter's
  // contract (backend.hpp) is distinct rows.
  for (int r = 0; r < R; ++r) distinct[r] = (r * 5) % T;
  ASSERT_EQ(std::set<int32_t>(distinct.begin(), distinct.end()).size(), size_t(R));
  Pair<int32_t> tok(dev, cpu, tokens), rws(dev, cpu, distinct);
  Pair<float> table(dev, cpu, random_vec(rng, size_t(V) * d)), dout(dev, cpu, random_vec(rng, size_t(T) * d));
  Pair<float> emb(dev, cpu, std::vector<float>(size_t(T) * d)), dtable(dev, cpu, random_vec(rng, size_t(V) * d));
  Pair<float> g(dev, cpu, std::vector<float>(size_t(R) * d)), acc(dev, cpu, random_vec(rng, size_t(T) * d));
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->embedding_fwd(pick(tok), pick(table), pick(emb), T, d);
    be->embedding_bwd(pick(tok), pick(dout), pick(dtable), T, d);
    be->gather_rows(pick(dout), pick(rws), pick(g), R, d);
    be->scatter_add_rows(pick(g), pick(rws), pick(acc), R, d);
  }
  emb.expect_equal("embedding_fwd");
  dtable.expect_equal("embedding_bwd");
  g.expect_equal("gather_rows");
  acc.expect_equal("scatter_add_rows");
}

inline void rmsnorm(Backend& dev, Backend& cpu) {
  Rng rng(4);
  // T = 530: dw's partial sums over three row chunks (256, 256, 18 rows)
  for (auto [T, d] : {std::pair{37, 50}, std::pair{37, 300}, std::pair{530, 50}}) {
    Pair<float> x(dev, cpu, random_vec(rng, size_t(T) * d)), w(dev, cpu, random_vec(rng, d));
    Pair<float> y(dev, cpu, std::vector<float>(size_t(T) * d)), rstd(dev, cpu, std::vector<float>(T));
    Pair<float> dy(dev, cpu, random_vec(rng, size_t(T) * d)), dx(dev, cpu, random_vec(rng, size_t(T) * d));
    Pair<float> dw(dev, cpu, random_vec(rng, d));
    for (Backend* be : {&dev, &cpu}) {
      auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
      be->rmsnorm_fwd(pick(x), pick(w), pick(y), pick(rstd), T, d, 1e-5f);
      be->rmsnorm_bwd(pick(x), pick(w), pick(rstd), pick(dy), pick(dx), pick(dw), T, d);
    }
    const std::string at = " T=" + std::to_string(T) + " d=" + std::to_string(d);
    y.expect_equal("rmsnorm y" + at);
    rstd.expect_equal("rmsnorm rstd" + at);
    dx.expect_equal("rmsnorm dx (accumulated)" + at);
    dw.expect_equal("rmsnorm dw (accumulated)" + at);
  }
}

inline void rope(Backend& dev, Backend& cpu) {
  Rng rng(5);
  const int T = 29, H = 3, hd = 10, ld = 37;
  std::vector<int32_t> pos(T);
  for (auto& p : pos) p = static_cast<int32_t>(rng.below(5000));
  Pair<int32_t> ps(dev, cpu, pos);
  Pair<float> x(dev, cpu, random_vec(rng, size_t(T) * ld));
  // Two frequency tables: plain (base 10000) and rescaled like Llama 3's.
  ModelConfig c;
  c.d_model = H * hd;
  c.n_heads = H;
  c.n_kv_heads = H;
  const std::vector<double> plain = rope_inv_freq(c);
  c.rope_base = 500;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_positions = 64;
  const std::vector<double> scaled = rope_inv_freq(c);
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->rope(pick(x), pick(ps), T, H, hd, ld, plain.data(), false);
  }
  x.expect_equal("rope");
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->rope(pick(x), pick(ps), T, H, hd, ld, scaled.data(), true);
  }
  x.expect_equal("rope inverse");
  // A position beyond the CPU's table of rounded cosines and sines.
  pos[3] = 70000;
  Pair<int32_t> far(dev, cpu, pos);
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->rope(pick(x), pick(far), T, H, hd, ld, plain.data(), false);
  }
  x.expect_equal("rope at position 70000");
}

// An FP32 result as pack_bf16 rounds it: what the bf16-output forms must write.
inline std::vector<uint16_t> packed_bits(Backend& dev, const DeviceArray<float>& f32) {
  DeviceArray<uint16_t> bits(dev, f32.size());
  dev.pack_bf16(f32.data(), bits.data(), f32.size());
  return bits.download();
}

// RoPE into bf16 (Backend::rope_bf16), on one backend: bit for bit
// pack_bf16 of rope() on a copy, with the row's columns after the rotated
// heads (here 7: not a whole head) copied, and x unchanged.
inline void rope_to_bf16(Backend& dev) {
  Rng rng(5);
  const int T = 29, H = 3, hd = 10, ld = 37;
  std::vector<int32_t> pos(T);
  for (auto& p : pos) p = static_cast<int32_t>(rng.below(5000));
  ModelConfig c;
  c.d_model = H * hd;
  c.n_heads = H;
  c.n_kv_heads = H;
  const std::vector<double> inv_freq = rope_inv_freq(c);
  const std::vector<float> x0 = random_vec(rng, size_t(T) * ld);
  DeviceArray<int32_t> ps;
  DeviceArray<float> x, rotated;
  ps.upload(dev, pos);
  x.upload(dev, x0);
  for (const bool inverse : {false, true}) {
    rotated.upload(dev, x0);
    dev.rope(rotated.data(), ps.data(), T, H, hd, ld, inv_freq.data(), inverse);
    DeviceArray<uint16_t> y16(dev, size_t(T) * ld);
    dev.rope_bf16(x.data(), ps.data(), T, H, hd, ld, inv_freq.data(), inverse, y16.data());
    const std::string what = inverse ? "rope_bf16 inverse" : "rope_bf16";
    EXPECT_EQ(y16.download(), packed_bits(dev, rotated)) << what;
    EXPECT_EQ(x.download(), x0) << what << " changed its input";
  }
}

inline void swiglu(Backend& dev, Backend& cpu) {
  Rng rng(6);
  const int T = 23, F = 77;
  Pair<float> gu(dev, cpu, random_vec(rng, size_t(T) * 2 * F, 2.0f)), out(dev, cpu, std::vector<float>(size_t(T) * F));
  Pair<float> dout(dev, cpu, random_vec(rng, size_t(T) * F)), dgu(dev, cpu, std::vector<float>(size_t(T) * 2 * F));
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    be->swiglu_fwd(pick(gu), pick(out), T, F);
    be->swiglu_bwd(pick(gu), pick(dout), pick(dgu), T, F);
  }
  out.expect_equal("swiglu_fwd");
  dgu.expect_equal("swiglu_bwd");
}

// x kept as bf16 (Backend::rmsnorm_fwd_keep, rmsnorm_fwd_bf16,
// rmsnorm_bwd_bf16), on one backend: bit for bit rmsnorm_fwd plus
// pack_bf16, and rmsnorm_fwd / rmsnorm_bwd (accumulating) on the unpacked x;
// the forms writing y as bf16 (y16) bit for bit pack_bf16 of the FP32 y.
inline void rmsnorm_kept_bf16(Backend& dev) {
  Rng rng(17);
  // One dw chunk: the chunked sum, which does not depend on the input type, is rmsnorm's case.
  const int T = 37, d = 300;
  const size_t n = size_t(T) * d;
  const std::vector<float> x0 = random_vec(rng, n, 2.0f), w0 = random_vec(rng, d), dy0 = random_vec(rng, n);
  const std::vector<float> dx0 = random_vec(rng, n, 0.1f), dw0 = random_vec(rng, d, 0.1f);
  DeviceArray<float> x, w, dy, wide(dev, n), y(dev, n), y_keep(dev, n), y16(dev, n), y_ref(dev, n);
  DeviceArray<float> rstd(dev, T), rstd_keep(dev, T), rstd16(dev, T), rstd_ref(dev, T), rstd_b(dev, T);
  DeviceArray<float> dx16, dx_ref, dw16, dw_ref;
  DeviceArray<uint16_t> kept(dev, n), kept_b(dev, n), packed(dev, n), y_keep_b(dev, n), y16_b(dev, n);
  x.upload(dev, x0);
  w.upload(dev, w0);
  dy.upload(dev, dy0);
  dev.rmsnorm_fwd_keep(x.data(), w.data(), y_keep.data(), nullptr, rstd_keep.data(), kept.data(), T, d, 1e-5f);
  dev.rmsnorm_fwd(x.data(), w.data(), y.data(), rstd.data(), T, d, 1e-5f);
  dev.pack_bf16(x.data(), packed.data(), n);
  EXPECT_EQ(y_keep.download(), y.download()) << "rmsnorm_fwd_keep y";
  EXPECT_EQ(rstd_keep.download(), rstd.download()) << "rmsnorm_fwd_keep rstd";
  EXPECT_EQ(kept.download(), packed.download()) << "rmsnorm_fwd_keep's bf16 x";
  dev.rmsnorm_fwd_keep(x.data(), w.data(), nullptr, y_keep_b.data(), rstd_b.data(), kept_b.data(), T, d, 1e-5f);
  EXPECT_EQ(y_keep_b.download(), packed_bits(dev, y)) << "rmsnorm_fwd_keep's y as bf16";
  EXPECT_EQ(rstd_b.download(), rstd.download()) << "rmsnorm_fwd_keep rstd (y as bf16)";
  EXPECT_EQ(kept_b.download(), packed.download()) << "rmsnorm_fwd_keep's bf16 x (y as bf16)";
  dev.rmsnorm_fwd_bf16(kept.data(), w.data(), y16.data(), nullptr, rstd16.data(), T, d, 1e-5f);
  dev.unpack_bf16(packed.data(), wide.data(), n);
  dev.rmsnorm_fwd(wide.data(), w.data(), y_ref.data(), rstd_ref.data(), T, d, 1e-5f);
  EXPECT_EQ(y16.download(), y_ref.download()) << "rmsnorm_fwd_bf16 y";
  EXPECT_EQ(rstd16.download(), rstd_ref.download()) << "rmsnorm_fwd_bf16 rstd";
  EXPECT_NE(y16.download(), y.download()) << "the case cannot tell bf16 x from FP32";
  dev.rmsnorm_fwd_bf16(kept.data(), w.data(), nullptr, y16_b.data(), rstd_b.data(), T, d, 1e-5f);
  EXPECT_EQ(y16_b.download(), packed_bits(dev, y_ref)) << "rmsnorm_fwd_bf16's y as bf16";
  EXPECT_EQ(rstd_b.download(), rstd_ref.download()) << "rmsnorm_fwd_bf16 rstd (y as bf16)";
  dx16.upload(dev, dx0);
  dx_ref.upload(dev, dx0);
  dw16.upload(dev, dw0);
  dw_ref.upload(dev, dw0);
  dev.rmsnorm_bwd_bf16(kept.data(), w.data(), rstd16.data(), dy.data(), nullptr, dx16.data(), dw16.data(), T, d);
  dev.rmsnorm_bwd(wide.data(), w.data(), rstd_ref.data(), dy.data(), dx_ref.data(), dw_ref.data(), T, d);
  EXPECT_EQ(dx16.download(), dx_ref.download()) << "rmsnorm_bwd_bf16 dx (accumulated)";
  EXPECT_EQ(dw16.download(), dw_ref.download()) << "rmsnorm_bwd_bf16 dw (accumulated)";
  // dy as bf16 (dy16, dy null) in place of an FP32 dy holding the same values.
  DeviceArray<uint16_t> dy16(dev, n);
  DeviceArray<float> dy_r(dev, n), dx_a, dx_b, dw_a, dw_b;
  dev.pack_bf16(dy.data(), dy16.data(), n);
  dev.unpack_bf16(dy16.data(), dy_r.data(), n);
  for (auto* a : {&dx_a, &dx_b}) a->upload(dev, dx0);
  for (auto* a : {&dw_a, &dw_b}) a->upload(dev, dw0);
  dev.rmsnorm_bwd_bf16(kept.data(), w.data(), rstd16.data(), nullptr, dy16.data(), dx_a.data(), dw_a.data(), T, d);
  dev.rmsnorm_bwd_bf16(kept.data(), w.data(), rstd16.data(), dy_r.data(), nullptr, dx_b.data(), dw_b.data(), T, d);
  EXPECT_EQ(dx_a.download(), dx_b.download()) << "rmsnorm_bwd_bf16 dx from dy as bf16";
  EXPECT_EQ(dw_a.download(), dw_b.download()) << "rmsnorm_bwd_bf16 dw from dy as bf16";
  EXPECT_NE(dx_a.download(), dx16.download()) << "the case cannot tell a bf16 dy from FP32";
}

// g|u kept as bf16 (Backend::swiglu_fwd_keep, swiglu_fwd_bf16,
// swiglu_bwd_bf16), on one backend: bit for bit swiglu_fwd plus pack_bf16,
// and swiglu_fwd / swiglu_bwd on the unpacked values; the forms writing
// their result as bf16 (out16, dgu16) bit for bit pack_bf16 of the FP32 one.
inline void swiglu_kept_bf16(Backend& dev) {
  Rng rng(16);
  const int T = 23, F = 77;
  const size_t n = size_t(T) * F;
  DeviceArray<float> gu, dout, out(dev, n), out_keep(dev, n), out16(dev, n), out_ref(dev, n), wide(dev, 2 * n);
  DeviceArray<float> dgu16(dev, 2 * n), dgu_ref(dev, 2 * n);
  DeviceArray<uint16_t> kept(dev, 2 * n), kept_b(dev, 2 * n), packed(dev, 2 * n), out_keep_b(dev, n),
      out16_b(dev, n), dgu16_b(dev, 2 * n);
  gu.upload(dev, random_vec(rng, 2 * n, 2.0f));
  dout.upload(dev, random_vec(rng, n));
  dev.swiglu_fwd_keep(gu.data(), out_keep.data(), nullptr, kept.data(), T, F);
  dev.swiglu_fwd(gu.data(), out.data(), T, F);
  dev.pack_bf16(gu.data(), packed.data(), 2 * n);
  EXPECT_EQ(out_keep.download(), out.download()) << "swiglu_fwd_keep out";
  EXPECT_EQ(kept.download(), packed.download()) << "swiglu_fwd_keep's bf16 g|u";
  dev.swiglu_fwd_keep(gu.data(), nullptr, out_keep_b.data(), kept_b.data(), T, F);
  EXPECT_EQ(out_keep_b.download(), packed_bits(dev, out)) << "swiglu_fwd_keep's out as bf16";
  EXPECT_EQ(kept_b.download(), packed.download()) << "swiglu_fwd_keep's bf16 g|u (out as bf16)";
  dev.swiglu_fwd_bf16(kept.data(), out16.data(), nullptr, T, F);
  dev.swiglu_bwd_bf16(kept.data(), dout.data(), nullptr, dgu16.data(), nullptr, T, F);
  dev.unpack_bf16(packed.data(), wide.data(), 2 * n);
  dev.swiglu_fwd(wide.data(), out_ref.data(), T, F);
  dev.swiglu_bwd(wide.data(), dout.data(), dgu_ref.data(), T, F);
  const std::vector<float> got = out16.download(), want = out_ref.download();
  EXPECT_EQ(got, want) << "swiglu_fwd_bf16";
  EXPECT_NE(got, out.download()) << "the case cannot tell bf16 g|u from FP32";
  EXPECT_EQ(dgu16.download(), dgu_ref.download()) << "swiglu_bwd_bf16";
  dev.swiglu_fwd_bf16(kept.data(), nullptr, out16_b.data(), T, F);
  dev.swiglu_bwd_bf16(kept.data(), dout.data(), nullptr, nullptr, dgu16_b.data(), T, F);
  EXPECT_EQ(out16_b.download(), packed_bits(dev, out_ref)) << "swiglu_fwd_bf16's out as bf16";
  EXPECT_EQ(dgu16_b.download(), packed_bits(dev, dgu_ref)) << "swiglu_bwd_bf16's dg|du as bf16";
  // dout as bf16 (dout16, dout null) in place of an FP32 dout holding the same values.
  DeviceArray<uint16_t> dout16(dev, n);
  DeviceArray<float> dout_r(dev, n), dgu_a(dev, 2 * n), dgu_b(dev, 2 * n);
  dev.pack_bf16(dout.data(), dout16.data(), n);
  dev.unpack_bf16(dout16.data(), dout_r.data(), n);
  dev.swiglu_bwd_bf16(kept.data(), nullptr, dout16.data(), dgu_a.data(), nullptr, T, F);
  dev.swiglu_bwd_bf16(kept.data(), dout_r.data(), nullptr, dgu_b.data(), nullptr, T, F);
  EXPECT_EQ(dgu_a.download(), dgu_b.download()) << "swiglu_bwd_bf16 from dout as bf16";
  EXPECT_NE(dgu_a.download(), dgu16.download()) << "the case cannot tell a bf16 dout from FP32";
}

inline void adamw(Backend& dev, Backend& cpu) {
  Rng rng(7);
  const size_t n = 1001;
  Pair<float> p(dev, cpu, random_vec(rng, n)), g(dev, cpu, random_vec(rng, n));
  Pair<float> m(dev, cpu, random_vec(rng, n, 0.1f)), v(dev, cpu, std::vector<float>(n, 0.01f));
  AdamWParams ap;
  ap.lr = 1e-2f;
  ap.weight_decay = 0.1f;
  ap.step = 3;
  ap.grad_scale = 0.5f;
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& x) { return be == &dev ? x.dev.data() : x.cpu.data(); };
    be->adamw(pick(p), pick(g), pick(m), pick(v), n, ap);
  }
  p.expect_equal("adamw param");
  m.expect_equal("adamw m");
  v.expect_equal("adamw v");
}

// Samples with deep branching: each new sample copies a random prefix of an
// earlier one (or starts a new prompt) and appends random tokens, so the
// forest has branch points at many depths.
inline std::vector<Sample> branching_samples(Rng& rng, int n, int max_len) {
  std::vector<Sample> out;
  for (int s = 0; s < n; ++s) {
    Sample x;
    if (!out.empty() && rng.uniform() < 0.85) {
      const Sample& base = out[rng.below(out.size())];
      x.tokens.assign(base.tokens.begin(), base.tokens.begin() + 1 + rng.below(base.tokens.size()));
    } else {
      x.tokens.push_back(static_cast<int32_t>(rng.below(3)));
    }
    const int add = 1 + static_cast<int>(rng.below(std::max(1, max_len - static_cast<int>(x.tokens.size()))));
    for (int i = 0; i < add; ++i) x.tokens.push_back(static_cast<int32_t>(rng.below(50)));
    x.trainable.assign(x.tokens.size(), 1);
    x.trainable[0] = 0;
    out.push_back(std::move(x));
  }
  return out;
}

struct AttentionShape {
  int n_heads, n_kv_heads, head_dim, samples, max_len;
};

// A packed bin of a random forest with random Q|K|V rows and dO.
struct AttentionCase {
  PackedBin bin;
  std::vector<float> qkv, dout;
};

inline AttentionCase attention_case_of(const std::vector<Sample>& samples, const AttentionShape& sh, Rng& rng) {
  auto bins = pack_forest(build_prefix_forest(samples, true), 1 << 20);
  EXPECT_EQ(bins.size(), 1u);
  AttentionCase c;
  c.bin = std::move(bins.at(0));
  const int T = c.bin.tokens(), D = sh.head_dim;
  c.qkv = random_vec(rng, size_t(T) * (sh.n_heads + 2 * sh.n_kv_heads) * D);
  c.dout = random_vec(rng, size_t(T) * sh.n_heads * D);
  return c;
}

inline AttentionCase attention_case(const AttentionShape& sh, uint64_t seed) {
  Rng rng(seed);
  return attention_case_of(branching_samples(rng, sh.samples, sh.max_len), sh, rng);
}

// A bin whose first branch ends on a tile edge: a prompt [0, p), branch A
// [p, e) and branch B [e, e + tile + 5), e = tile + delta. The kernels' query
// and key tiles are 16 to 128 rows, so with delta -1, 0, +1 some tile's last
// query is the first that must not see A (e = q1 - 1), or its first. A tile
// taken as fully visible one row too early passes random bins (found by
// mutation) and fails here.
inline AttentionCase edge_case(const AttentionShape& sh, int tile, int delta, uint64_t seed) {
  const int e = tile + delta, p = std::max(1, e - tile / 2);
  Sample a, b;
  for (int i = 0; i < p; ++i) a.tokens.push_back(3 + i % 40);
  b.tokens = a.tokens;
  for (int i = p; i < e; ++i) a.tokens.push_back(i == p ? 1 : 5 + i % 40);
  for (int i = 0; i < tile + 5; ++i) b.tokens.push_back(i == 0 ? 2 : 7 + i % 40);
  for (Sample* x : {&a, &b}) {
    x->trainable.assign(x->tokens.size(), 1);
    x->trainable[0] = 0;
  }
  Rng rng(seed);
  AttentionCase c = attention_case_of({a, b}, sh, rng);
  EXPECT_EQ(c.bin.subtree_end.at(size_t(p)), e) << "branch A must end at " << e << " (tile " << tile << ")";
  return c;
}

inline constexpr int kEdgeTiles[] = {16, 32, 64, 128};

struct AttentionResult {
  std::vector<float> out, lse, dqkv;
};

// Forward and backward on one backend; qkv replaces c.qkv when given.
inline AttentionResult run_tree_attention(Backend& be, const AttentionShape& sh, const AttentionCase& c,
                                          const std::vector<float>* qkv = nullptr) {
  const int T = c.bin.tokens(), H = sh.n_heads, Hkv = sh.n_kv_heads, D = sh.head_dim;
  const int HD = H * D, ld = (H + 2 * Hkv) * D;
  DeviceArray<float> in, out(be, size_t(T) * HD), lse(be, size_t(H) * T), dout, dqkv(be, size_t(T) * ld);
  DeviceArray<int32_t> se;
  in.upload(be, qkv ? *qkv : c.qkv);
  dout.upload(be, c.dout);
  se.upload(be, c.bin.subtree_end);
  const TreeAttentionArgs a =
      fused_tree_attention_args(T, H, Hkv, D, in.data(), ld, se.data(), out.data(), lse.data());
  be.tree_attention_fwd(a);
  be.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data()));
  return {out.download(), lse.download(), dqkv.download()};
}

// Backend::release_scratch() after a forward and backward frees at least
// `floor_bytes`, nothing when called again, and the step then grows its
// buffers again with the same results.
inline void expect_release_scratch_frees(Backend& be, const AttentionShape& sh, const AttentionCase& c,
                                         size_t floor_bytes) {
  const AttentionResult before = run_tree_attention(be, sh, c);
  EXPECT_GE(be.release_scratch(), floor_bytes);
  EXPECT_EQ(be.release_scratch(), 0u) << "the first release left buffers";
  const AttentionResult after = run_tree_attention(be, sh, c);
  EXPECT_EQ(after.out, before.out);
  EXPECT_EQ(after.dqkv, before.dqkv);
}

inline std::string attention_label(const AttentionShape& sh, const AttentionCase& c) {
  return " (T=" + std::to_string(c.bin.tokens()) + " H=" + std::to_string(sh.n_heads) + " Hkv=" +
         std::to_string(sh.n_kv_heads) + " D=" + std::to_string(sh.head_dim) + ")";
}

inline void tree_attention(Backend& dev, Backend& cpu, const AttentionShape& sh, uint64_t seed) {
  const AttentionCase c = attention_case(sh, seed);
  const AttentionResult got = run_tree_attention(dev, sh, c), want = run_tree_attention(cpu, sh, c);
  const std::string at = attention_label(sh, c);
  expect_close(got.out, want.out, "tree attention out" + at);
  expect_close(got.lse, want.lse, "tree attention lse" + at);
  expect_close(got.dqkv, want.dqkv, "tree attention dq|dk|dv" + at);
}

// Every tile edge of edge_case, FP32: within kFp32Tol of the CPU backend.
inline void tree_attention_edges(Backend& dev, Backend& cpu, const AttentionShape& sh) {
  for (const int tile : kEdgeTiles)
    for (const int delta : {-1, 0, 1}) {
      const AttentionCase c = edge_case(sh, tile, delta, 40 + tile + delta);
      const AttentionResult got = run_tree_attention(dev, sh, c), want = run_tree_attention(cpu, sh, c);
      const std::string at = attention_label(sh, c) + " branch end " + std::to_string(tile + delta);
      expect_close(got.out, want.out, "tree attention out" + at);
      expect_close(got.lse, want.lse, "tree attention lse" + at);
      expect_close(got.dqkv, want.dqkv, "tree attention dq|dk|dv" + at);
    }
}

// Rows with zero, one and several targets (a repeated one among them), and
// the head's inputs.
struct HeadCase {
  int R = 45, d = 24, V = 300;
  std::vector<int32_t> row_begin{0}, target;
  std::vector<float> hidden, weight, dlogprob, dweight;
};

inline HeadCase head_case() {
  Rng rng(9);
  HeadCase c;
  for (int r = 0; r < c.R; ++r) {
    const int k = r % 5 == 0 ? 0 : 1 + static_cast<int>(rng.below(3));  // rows without entries too
    for (int e = 0; e < k; ++e) c.target.push_back(static_cast<int32_t>(rng.below(c.V)));
    if (k == 3) c.target.back() = c.target[c.target.size() - 2];  // a repeated target in one row
    c.row_begin.push_back(static_cast<int32_t>(c.target.size()));
  }
  c.hidden = random_vec(rng, size_t(c.R) * c.d);
  c.weight = random_vec(rng, size_t(c.V) * c.d, 0.5f);
  c.dlogprob = random_vec(rng, c.target.size());
  c.dweight = random_vec(rng, size_t(c.V) * c.d);
  return c;
}

struct HeadResult {
  std::vector<float> logprob, lse, entropy, logits, dhidden, dweight;
};

// Forward and backward on one backend; hidden replaces c.hidden when given.
inline HeadResult run_head(Backend& be, const HeadCase& c, bool want_logits, int chunk,
                           const std::vector<float>* hidden = nullptr) {
  const int E = static_cast<int>(c.target.size());
  DeviceArray<float> hid, w, dlp, dw, lp(be, E), lse(be, c.R), ent(be, c.R);
  DeviceArray<float> logits(be, size_t(c.R) * c.V), dh(be, size_t(c.R) * c.d);
  DeviceArray<int32_t> rb, tg;
  hid.upload(be, hidden ? *hidden : c.hidden);
  w.upload(be, c.weight);
  dlp.upload(be, c.dlogprob);
  dw.upload(be, c.dweight);
  rb.upload(be, c.row_begin);
  tg.upload(be, c.target);
  HeadArgs a;
  a.R = c.R;
  a.d = c.d;
  a.V = c.V;
  a.hidden = hid.data();
  a.weight = w.data();
  a.inv_temperature = 0.7f;
  a.E = E;
  a.row_begin = rb.data();
  a.target = tg.data();
  a.logprob = lp.data();
  a.lse = lse.data();
  a.entropy = ent.data();
  a.logits = want_logits ? logits.data() : nullptr;
  a.vocab_chunk = chunk;
  be.head_fwd(a);
  HeadGrads g;
  g.dlogprob = dlp.data();
  g.dhidden = dh.data();
  g.dweight = dw.data();
  be.head_bwd(a, g);
  return {lp.download(), lse.download(), ent.download(),
          want_logits ? logits.download() : std::vector<float>(), dh.download(), dw.download()};
}

inline void head(Backend& dev, Backend& cpu, bool want_logits, int chunk) {
  const HeadCase c = head_case();
  const HeadResult got = run_head(dev, c, want_logits, chunk), want = run_head(cpu, c, want_logits, chunk);
  const std::string at = " (chunk " + std::to_string(chunk) + (want_logits ? ", logits)" : ")");
  expect_close(got.logprob, want.logprob, "head logprob" + at);
  expect_close(got.lse, want.lse, "head lse" + at);
  expect_close(got.entropy, want.entropy, "head entropy" + at);
  if (want_logits) expect_close(got.logits, want.logits, "head logits" + at);
  expect_close(got.dhidden, want.dhidden, "head dhidden" + at);
  expect_close(got.dweight, want.dweight, "head dweight (accumulated)" + at);
}

// A peaked row (one logit 30 above N(0, 2) others, a 151,936 vocabulary):
// its entropy, 2.8e-6, within 1% of the double one. s = 1 + 1e-7 of tail
// rounded to 1 in FP32 statistics and lost 4% (the FP32 head keeps its sums
// in FP64); lse - sum p z lost it all.
inline void head_peaked(Backend& dev) {
  const int V = 151936;
  Rng rng(7);
  std::vector<float> w(V);
  for (auto& x : w) x = static_cast<float>(2.0 * rng.normal());
  w[1234] = 30.0f;
  DeviceArray<float> hid, weight, lse(dev, 1), ent(dev, 1);
  hid.upload(dev, std::vector<float>{1.0f});
  weight.upload(dev, w);
  HeadArgs a;
  a.R = 1;
  a.d = 1;
  a.V = V;
  a.hidden = hid.data();
  a.weight = weight.data();
  a.inv_temperature = 1.0f;
  a.lse = lse.data();
  a.entropy = ent.data();
  a.vocab_chunk = 4096;
  dev.head_fwd(a);
  double mx = -1e300, se = 0, want = 0;
  for (const float x : w) mx = std::max(mx, static_cast<double>(x));
  for (const float x : w) se += std::exp(x - mx);
  const double l = mx + std::log(se);
  for (const float x : w) want -= std::exp(x - l) * (x - l);
  EXPECT_NEAR(ent.download()[0], want, 1e-2 * want) << "peaked head entropy";
  EXPECT_NEAR(lse.download()[0], l, 1e-6 * l) << "peaked head lse";
}

// Sequences in a paged cache with their blocks out of order; every position
// is written, and a few positions of each (always the last) are queried.
struct PagedCase {
  int H = 4, Hkv = 2, D = 24, bs = 4, row = Hkv * D, W = 0, T = 0, ld = 0, ld_q = 0, blocks = 0, max_len = 0;
  std::vector<int32_t> table, slot, q_pos, q_table;
  std::vector<float> k, v, q;
};

// A PagedCase of sequences of these lengths, head dim D, blocks of bs.
inline PagedCase paged_case(const std::vector<int>& lens, int D = 24, int bs = 4) {
  Rng rng(10);
  PagedCase c;
  c.D = D;
  c.bs = bs;
  c.row = c.Hkv * D;
  std::vector<int> seq_table_begin;
  for (int len : lens) {
    seq_table_begin.push_back(static_cast<int>(c.table.size()));
    for (int b = 0; b < (len + c.bs - 1) / c.bs; ++b) c.table.push_back(c.blocks++);
  }
  std::reverse(c.table.begin(), c.table.end());  // blocks out of order in the pool
  for (size_t s = 0; s < lens.size(); ++s)
    for (int p = 0; p < lens[s]; ++p) {
      c.slot.push_back(c.table[seq_table_begin[s] + p / c.bs] * c.bs + p % c.bs);
      if (p == lens[s] - 1 || rng.below(10) == 0) {
        c.q_pos.push_back(p);
        c.q_table.push_back(seq_table_begin[s]);
        c.max_len = std::max(c.max_len, p + 1);
      }
    }
  c.W = static_cast<int>(c.slot.size());
  c.T = static_cast<int>(c.q_pos.size());
  c.ld = c.row + 5;
  c.ld_q = c.H * c.D + 3;
  c.k = random_vec(rng, size_t(c.W) * c.ld);
  c.v = random_vec(rng, size_t(c.W) * c.ld);
  c.q = random_vec(rng, size_t(c.T) * c.ld_q);
  return c;
}

struct PagedResult {
  std::vector<float> out;
  std::vector<uint8_t> k_cache, v_cache;  // the cache's bytes
};

// kv_cache_write of every row, then paged attention of the queries, on one
// backend; k and v replace c.k and c.v when given; max_len as given.
inline PagedResult run_paged(Backend& be, const PagedCase& c, int max_len, const std::vector<float>* k = nullptr,
                             const std::vector<float>* v = nullptr) {
  const size_t cache_bytes = size_t(c.blocks) * c.bs * c.row * be.kv_cache_value_bytes();
  DeviceArray<float> dk, dv, dq, out(be, size_t(c.T) * c.H * c.D);
  DeviceArray<uint8_t> kc, vc;
  kc.upload(be, std::vector<uint8_t>(cache_bytes, 0));  // slots past a sequence's end stay 0
  vc.upload(be, std::vector<uint8_t>(cache_bytes, 0));
  DeviceArray<int32_t> sl, tb, qp, qt;
  dk.upload(be, k ? *k : c.k);
  dv.upload(be, v ? *v : c.v);
  dq.upload(be, c.q);
  sl.upload(be, c.slot);
  tb.upload(be, c.table);
  qp.upload(be, c.q_pos);
  qt.upload(be, c.q_table);
  KvCacheWriteArgs w;
  w.T = c.W;
  w.row_dim = c.row;
  w.k = dk.data();
  w.v = dv.data();
  w.ld = c.ld;
  w.slot = sl.data();
  w.k_cache = kc.data();
  w.v_cache = vc.data();
  be.kv_cache_write(w);
  PagedAttentionArgs a;
  a.T = c.T;
  a.n_heads = c.H;
  a.n_kv_heads = c.Hkv;
  a.head_dim = c.D;
  a.block_size = c.bs;
  a.q = dq.data();
  a.ld_q = c.ld_q;
  a.k_cache = kc.data();
  a.v_cache = vc.data();
  a.max_len = max_len;
  a.position = qp.data();
  a.block_table = tb.data();
  a.table_begin = qt.data();
  a.out = out.data();
  be.paged_attention_fwd(a);
  return {out.download(), kc.download(), vc.download()};
}

// The FP32 cache: the written rows exactly; attention with max_len given
// (split-K over the long sequences) and not given (one split).
inline void paged_attention(Backend& dev, Backend& cpu) {
  const PagedCase c = paged_case({1, 9, 150, 300});  // beyond one and several 128-position splits
  ASSERT_EQ(dev.kv_cache_value_bytes(), sizeof(float));
  const PagedResult want = run_paged(cpu, c, c.max_len);
  for (int max_len : {c.max_len, 0}) {
    const PagedResult got = run_paged(dev, c, max_len);
    EXPECT_EQ(got.k_cache, want.k_cache) << "kv_cache_write k";
    EXPECT_EQ(got.v_cache, want.v_cache) << "kv_cache_write v";
    expect_close(got.out, want.out, "paged attention, max_len " + std::to_string(max_len));
  }
}

// Off-policy samples: each has its own drift (so that the sequence mask drops
// some) and per-token noise (so that the token mask and the clip act). With
// non_finite, one behaviour logprob is NaN (a damaged record) and one current
// logprob is -inf (r = 0).
inline PackedPolicyTokens policy_batch(Rng& rng, bool non_finite = false) {
  PackedPolicyTokens batch;
  for (int len : {0, 1, 127, 128, 129, 300}) {  // around the 128-thread block
    SampleTokens s;
    s.advantage = static_cast<float>(rng.normal());
    for (int t = 0; t < len; ++t) {
      s.behaviour_logprob.push_back(static_cast<float>(-4.0 * rng.uniform()));
      s.logprob.push_back(s.behaviour_logprob.back() + static_cast<float>(0.5 * rng.normal()));
    }
    batch.add(s);
  }
  for (int i = 0; i < 140; ++i) {
    SampleTokens s;
    s.advantage = static_cast<float>(rng.normal());
    const double drift = 0.6 * rng.normal();
    const int len = static_cast<int>(rng.below(300));
    for (int t = 0; t < len; ++t) {
      s.behaviour_logprob.push_back(static_cast<float>(-4.0 * rng.uniform()));
      s.logprob.push_back(s.behaviour_logprob.back() + static_cast<float>(drift + 0.4 * rng.normal()));
    }
    batch.add(s);
  }
  if (non_finite) {
    batch.behaviour_logprob[static_cast<size_t>(batch.sample_begin[3] + 5)] = std::nanf("");
    batch.logprob[static_cast<size_t>(batch.sample_begin[5] + 7)] = -std::numeric_limits<float>::infinity();
  }
  return batch;
}

// Equal (infinities included), both NaN, or within tol relative.
inline void expect_close(double got, double want, const std::string& what, double tol = kFp32Tol) {
  if (got == want || (std::isnan(got) && std::isnan(want))) return;
  EXPECT_LE(std::abs(got - want), tol * std::max(std::abs(want), 1e-30)) << what << ": " << got << " vs " << want;
}

// eps_low >= 0 sets loss.eps_low (CISPO with a lower clip: r = 0 from an
// lp of -inf is clipped up to 1 - eps_low, and the term must stay finite).
inline void policy_loss(Backend& dev, Backend& cpu, const std::string& algorithm, const std::string& is_mask,
                        bool non_finite = false, float eps_low = -1) {
  Rng rng(15);
  const PackedPolicyTokens batch = policy_batch(rng, non_finite);
  PolicyLossConfig c;
  c.algorithm = algorithm;
  c.is_mask = is_mask;
  c.eps_low = eps_low;
  const std::string at = " (" + algorithm + ", mask " + is_mask + ")";
  // The operation itself: coefficients before the denominator and the sums.
  Pair<int32_t> begin(dev, cpu, batch.sample_begin);
  Pair<float> adv(dev, cpu, batch.advantage), mu(dev, cpu, batch.behaviour_logprob);
  Pair<float> lp(dev, cpu, batch.logprob), coef(dev, cpu, std::vector<float>(batch.tokens()));
  PolicyLossSums sums[2];  // device, cpu
  for (Backend* be : {&dev, &cpu}) {
    auto pick = [&](auto& p) { return be == &dev ? p.dev.data() : p.cpu.data(); };
    PolicyLossArgs a = c.backend_args();
    a.samples = batch.samples();
    a.sample_begin = pick(begin);
    a.advantage = pick(adv);
    a.behaviour_logprob = pick(mu);
    a.logprob = pick(lp);
    a.coef = pick(coef);
    sums[be == &cpu] = be->policy_loss(a);
  }
  coef.expect_equal("policy loss coef" + at);
  const PolicyLossSums &d = sums[0], &r = sums[1];
  EXPECT_EQ(d.tokens, r.tokens) << at;
  EXPECT_EQ(d.kept_tokens, r.kept_tokens) << at;
  EXPECT_EQ(d.kept_samples, r.kept_samples) << at;
  EXPECT_EQ(d.clipped_tokens, r.clipped_tokens) << at;
  expect_close(d.objective, r.objective, "objective" + at);
  expect_close(d.ratio, r.ratio, "ratio sum" + at);
  expect_close(d.kl, r.kl, "kl sum" + at);
  expect_close(d.logprob_mismatch, r.logprob_mismatch, "mismatch sum" + at);
  expect_close(d.max_ratio, r.max_ratio, "max ratio" + at);
  // The case exercises what it names: clipping, and the mask where there is one.
  EXPECT_GT(r.clipped_tokens, 0) << at;
  if (is_mask != "none" || non_finite) {  // a NaN-ratio token is out of N under every mask
    EXPECT_GT(r.tokens - r.kept_tokens, 0) << at;
    EXPECT_GT(r.kept_tokens, 0) << at;
  }
  if (non_finite) {
    EXPECT_TRUE(std::isfinite(r.objective)) << r.objective << at;
  }

  // The learner's path: scaled coefficients and the statistics.
  PolicyLossStats st_dev, st_cpu;
  const auto w_dev = policy_coefficients(dev, c, batch, &st_dev);
  const auto w_cpu = policy_coefficients(cpu, c, batch, &st_cpu);
  expect_close(w_dev, w_cpu, "policy loss w" + at);
  EXPECT_EQ(st_dev.masked_tokens, st_cpu.masked_tokens) << at;
  expect_close(st_dev.objective, st_cpu.objective, "objective" + at);
  expect_close(st_dev.mean_ratio, st_cpu.mean_ratio, "mean ratio" + at);
  expect_close(st_dev.kl, st_cpu.kl, "kl" + at);
}

// ---- bf16 precision ------------------------------------------------------------
// docs/architecture.md: a low-precision result is judged against the error of the same
// computation in that dtype. ref32: the CPU backend on the inputs; ref16: the
// CPU backend on the inputs rounded to bf16 (round to nearest even) where the
// bf16 mode rounds them, FP32 arithmetic after that. With err the relative
// norm error against ref32, the device's bf16 result must satisfy
//   err(dev) <= 2 err(ref16) + kBf16Eps   (as accurate as bf16 inputs allow)
//   err(dev) >= err(ref16) / 4            (bf16 was applied: an FP32 path fails)
constexpr double kBf16Eps = 1e-6;

inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }  // core/bf16.hpp

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}

inline void expect_bf16_error(const std::vector<float>& got, const std::vector<float>& ref16,
                              const std::vector<float>& ref32, const std::string& what) {
  ASSERT_EQ(got.size(), ref32.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": non-finite value at " << i;
  const double e_got = rel_err(got, ref32), e_16 = rel_err(ref16, ref32);
  EXPECT_GT(e_16, 0.0) << what << ": bf16 rounding changed nothing (the case cannot tell)";
  EXPECT_LE(e_got, 2 * e_16 + kBf16Eps) << what << ": error " << e_got << ", bf16 reference " << e_16;
  EXPECT_GE(e_got, 0.25 * e_16) << what << ": error " << e_got << " well below bf16's " << e_16
                                << " (bf16 not applied?)";
}

inline std::vector<float> run_gemm(Backend& be, bool ta, bool tb, int M, int N, int K,
                                   const std::vector<float>& A, int lda, const std::vector<float>& B,
                                   int ldb, const std::vector<float>& C, int ldc) {
  DeviceArray<float> a, b, c;
  a.upload(be, A);
  b.upload(be, B);
  c.upload(be, C);
  be.gemm(ta, tb, M, N, K, 0.7f, a.data(), lda, b.data(), ldb, 0.3f, c.data(), ldc);
  return c.download();
}

// A and B rounded; C (the beta term) and the accumulation FP32.
inline void gemm_bf16(Backend& dev, Backend& cpu) {
  for_each_gemm_case([&](bool ta, bool tb, int M, int N, int K, const std::vector<float>& A, int lda,
                         const std::vector<float>& B, int ldb, const std::vector<float>& C, int ldc) {
    const auto ref32 = run_gemm(cpu, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
    const auto ref16 = run_gemm(cpu, ta, tb, M, N, K, round_bf16(A), lda, round_bf16(B), ldb, C, ldc);
    const auto got = run_gemm(dev, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
    expect_bf16_error(got, ref16, ref32, "bf16 gemm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
  });
}

// dy, W and x rounded (dy once for both products): the same bits as the
// backend's own two bf16 gemm calls, and as accurate as bf16 inputs allow.
inline void linear_backward_bf16(Backend& dev, Backend& cpu) {
  const LinearCase c;
  LinearCase c16 = c;
  c16.dy = round_bf16(c.dy);
  c16.W = round_bf16(c.W);
  c16.x = round_bf16(c.x);
  const LinearResult got = run_linear_backward(dev, c, false), two = run_linear_backward(dev, c, true);
  EXPECT_EQ(got.dx, two.dx) << "bf16 linear_backward dx against the backend's two gemm calls";
  EXPECT_EQ(got.dW, two.dW) << "bf16 linear_backward dW against the backend's two gemm calls";
  const LinearResult ref32 = run_linear_backward(cpu, c, true), ref16 = run_linear_backward(cpu, c16, true);
  // dx's stride gaps keep their random values in all three: compare rows' first `in` only
  auto body = [&](const std::vector<float>& v) {
    std::vector<float> out;
    for (int t = 0; t < c.T; ++t) out.insert(out.end(), v.begin() + size_t(t) * c.ld_dx, v.begin() + size_t(t) * c.ld_dx + c.in);
    return out;
  };
  expect_bf16_error(body(got.dx), body(ref16.dx), body(ref32.dx), "bf16 linear_backward dx");
  expect_bf16_error(got.dW, ref16.dW, ref32.dW, "bf16 linear_backward dW (accumulated)");
}

// The linear layer on bf16 operands (Backend::linear_fwd_bf16,
// linear_backward_bf16: x, W and dy each as FP32 or bf16) against the FP32
// forms on the same values widened, on one backend: bit for bit (in the
// bf16 precision the FP32 forms round the operands, which changes nothing
// on bf16 values; elsewhere the bf16 forms widen).
inline void linear_on_bf16_activations(Backend& dev) {
  const LinearCase c;
  // x and dy packed ([T, in], [T, out]) and W, as bf16 bits and widened
  std::vector<float> x_r(size_t(c.T) * c.in), dy_r(size_t(c.T) * c.out), w_r(c.W.size());
  std::vector<uint16_t> x_bits(x_r.size()), dy_bits(dy_r.size()), w_bits(w_r.size());
  const auto round_into = [](float v, uint16_t& bits, float& wide) {
    bits = float_to_bf16(v);
    wide = bf16_to_float(bits);
  };
  for (int t = 0; t < c.T; ++t) {
    for (int i = 0; i < c.in; ++i)
      round_into(c.x[size_t(t) * c.ld_x + i], x_bits[size_t(t) * c.in + i], x_r[size_t(t) * c.in + i]);
    for (int o = 0; o < c.out; ++o)
      round_into(c.dy[size_t(t) * c.ld_dy + o], dy_bits[size_t(t) * c.out + o], dy_r[size_t(t) * c.out + o]);
  }
  for (size_t i = 0; i < c.W.size(); ++i) round_into(c.W[i], w_bits[i], w_r[i]);
  DeviceArray<float> W, Wr, xr, dyr, dy;
  DeviceArray<uint16_t> x16, dy16, W16;
  W.upload(dev, c.W);
  Wr.upload(dev, w_r);
  xr.upload(dev, x_r);
  dyr.upload(dev, dy_r);
  dy.upload(dev, c.dy);
  x16.upload(dev, x_bits);
  dy16.upload(dev, dy_bits);
  W16.upload(dev, w_bits);
  // forward, y = x W^T + beta y with beta 1 over a random y [T, out] (row stride ld_dy)
  for (const bool bf16_x : {true, false})
    for (const bool bf16_w : {true, false}) {
      if (!bf16_x && !bf16_w) continue;
      DeviceArray<float> y_want, y_got;
      y_want.upload(dev, c.dy);
      y_got.upload(dev, c.dy);
      dev.gemm(false, true, c.T, c.out, c.in, 1.0f, xr.data(), c.in, bf16_w ? Wr.data() : W.data(), c.in, 1.0f,
               y_want.data(), c.ld_dy);
      dev.linear_fwd_bf16(c.T, c.in, c.out, bf16_x ? nullptr : xr.data(), bf16_x ? x16.data() : nullptr, W.data(),
                          bf16_w ? W16.data() : nullptr, 1.0f, y_got.data(), c.ld_dy);
      EXPECT_EQ(y_got.download(), y_want.download())
          << "linear_fwd_bf16 (x " << (bf16_x ? "bf16" : "FP32") << ", W " << (bf16_w ? "bf16" : "FP32")
          << ") against gemm on the widened values";
    }
  // backward: bf16 x with FP32 dy and W, then with everything bf16
  const auto backward = [&](const float* dy_f32, int ld_dy, const uint16_t* dy_b, const float* w,
                            const uint16_t* w_b, bool bf16_form) {
    DeviceArray<float> dx, dW;
    dx.upload(dev, c.dx);
    dW.upload(dev, c.dW);
    if (bf16_form)
      dev.linear_backward_bf16(c.T, c.in, c.out, dy_f32, ld_dy, dy_b, W.data(), w_b, x16.data(), dx.data(), nullptr,
                               c.ld_dx, dW.data());
    else
      dev.linear_backward(c.T, c.in, c.out, dy_f32, ld_dy, w, xr.data(), c.in, dx.data(), c.ld_dx, dW.data());
    return LinearResult{dx.download(), dW.download()};
  };
  const LinearResult want = backward(dy.data(), c.ld_dy, nullptr, W.data(), nullptr, false);
  const LinearResult got = backward(dy.data(), c.ld_dy, nullptr, nullptr, nullptr, true);
  EXPECT_EQ(got.dx, want.dx) << "linear_backward_bf16 dx (bf16 x) against linear_backward";
  EXPECT_EQ(got.dW, want.dW) << "linear_backward_bf16 dW (bf16 x) against linear_backward";
  const LinearResult want16 = backward(dyr.data(), c.out, nullptr, Wr.data(), nullptr, false);
  const LinearResult got16 = backward(nullptr, 0, dy16.data(), nullptr, W16.data(), true);
  EXPECT_EQ(got16.dx, want16.dx) << "linear_backward_bf16 dx (bf16 x, dy and W) against linear_backward";
  EXPECT_EQ(got16.dW, want16.dW) << "linear_backward_bf16 dW (bf16 x, dy and W) against linear_backward";
  // dx written as bf16 (dx16, packed [T, in]): pack_bf16 of the FP32 dx, the same dW.
  DeviceArray<uint16_t> dx16(dev, size_t(c.T) * c.in);
  DeviceArray<float> dW;
  dW.upload(dev, c.dW);
  dev.linear_backward_bf16(c.T, c.in, c.out, nullptr, 0, dy16.data(), nullptr, W16.data(), x16.data(), nullptr,
                           dx16.data(), c.ld_dx, dW.data());
  std::vector<uint16_t> dx_bits(dx16.size());
  for (int t = 0; t < c.T; ++t)
    for (int i = 0; i < c.in; ++i)
      dx_bits[size_t(t) * c.in + i] = float_to_bf16(want16.dx[size_t(t) * c.ld_dx + i]);
  // On a GPU, cuBLAS may pick another kernel (another summation order) for
  // a bf16 C than for an FP32 one: a few values may round to the
  // neighbouring bf16. Truncating instead of rounding moves about half.
  const std::vector<uint16_t> got_bits = dx16.download();
  size_t off_by_one = 0;
  for (size_t i = 0; i < dx_bits.size(); ++i) {
    if (got_bits[i] == dx_bits[i]) continue;
    EXPECT_EQ(std::abs(int(got_bits[i]) - int(dx_bits[i])), 1) << "linear_backward_bf16 dx written as bf16, at " << i;
    ++off_by_one;
  }
  EXPECT_LE(off_by_one, dx_bits.size() / 100) << "linear_backward_bf16 dx written as bf16: values one bf16 off";
  EXPECT_EQ(dW.download(), want16.dW) << "linear_backward_bf16 dW (dx written as bf16)";
}

// Q, K and V rounded; forward and backward.
inline void tree_attention_bf16(Backend& dev, Backend& cpu, const AttentionShape& sh, uint64_t seed) {
  const AttentionCase c = attention_case(sh, seed);
  const std::vector<float> qkv16 = round_bf16(c.qkv);
  const AttentionResult ref32 = run_tree_attention(cpu, sh, c), ref16 = run_tree_attention(cpu, sh, c, &qkv16);
  const AttentionResult got = run_tree_attention(dev, sh, c);
  const std::string at = attention_label(sh, c);
  expect_bf16_error(got.out, ref16.out, ref32.out, "bf16 tree attention out" + at);
  expect_bf16_error(got.lse, ref16.lse, ref32.lse, "bf16 tree attention lse" + at);
  expect_bf16_error(got.dqkv, ref16.dqkv, ref32.dqkv, "bf16 tree attention dq|dk|dv" + at);
}

// The largest error of a row of `width` values against ref32, relative to
// that row's norm or, for rows near 0 (the first token's dQ is 0), to the
// mean row's.
inline double worst_row_error(const std::vector<float>& got, const std::vector<float>& ref32, size_t width) {
  double total = 0;
  for (float x : ref32) total += double(x) * x;
  const double mean_row = total * double(width) / double(std::max<size_t>(ref32.size(), 1));
  double worst = 0;
  for (size_t r = 0; r + width <= ref32.size(); r += width) {
    double d = 0, n = 0;
    for (size_t i = r; i < r + width; ++i) {
      d += (double(got[i]) - ref32[i]) * (double(got[i]) - ref32[i]);
      n += double(ref32[i]) * ref32[i];
    }
    worst = std::max(worst, std::sqrt(d / std::max({n, mean_row, 1e-30})));
  }
  return worst;
}

// Every tile edge of edge_case, bf16. The whole-output rule of
// expect_bf16_error cannot see one query row that sees 30 keys too many (a
// mutant passed it), so each row of out and of dq|dk|dv is also held to
// kBf16RowTol: bf16's rounding of Q, K, V and P stays well inside it.
inline constexpr double kBf16RowTol = 0.05;
inline void tree_attention_bf16_edges(Backend& dev, Backend& cpu, const AttentionShape& sh) {
  for (const int tile : kEdgeTiles)
    for (const int delta : {-1, 0, 1}) {
      const AttentionCase c = edge_case(sh, tile, delta, 40 + tile + delta);
      const std::vector<float> qkv16 = round_bf16(c.qkv);
      const AttentionResult ref32 = run_tree_attention(cpu, sh, c), ref16 = run_tree_attention(cpu, sh, c, &qkv16);
      const AttentionResult got = run_tree_attention(dev, sh, c);
      const std::string at = attention_label(sh, c) + " branch end " + std::to_string(tile + delta);
      expect_bf16_error(got.out, ref16.out, ref32.out, "bf16 tree attention out" + at);
      expect_bf16_error(got.dqkv, ref16.dqkv, ref32.dqkv, "bf16 tree attention dq|dk|dv" + at);
      const size_t D = size_t(sh.head_dim);
      EXPECT_LE(worst_row_error(got.out, ref32.out, D), kBf16RowTol) << "bf16 tree attention out, worst row" << at;
      EXPECT_LE(worst_row_error(got.dqkv, ref32.dqkv, D), kBf16RowTol)
          << "bf16 tree attention dq|dk|dv, worst row" << at;
    }
}

// The same call twice gives the same bits (the backward's dK/dV splits add
// in a fixed order; no atomics on values). A bin whose shared prefix is seen
// by more query tiles than one dK/dV split takes (the CUDA kernels split it).
inline void tree_attention_deterministic(Backend& dev, const AttentionShape& sh, uint64_t seed) {
  const AttentionCase c = attention_case(sh, seed);
  const AttentionResult a = run_tree_attention(dev, sh, c), b = run_tree_attention(dev, sh, c);
  const std::string at = attention_label(sh, c);
  EXPECT_EQ(a.out, b.out) << "tree attention out, run twice" << at;
  EXPECT_EQ(a.dqkv, b.dqkv) << "tree attention dq|dk|dv, run twice" << at;
}

// Q|K|V kept as bf16 by the caller (TreeAttentionArgs::qkv_bf16, the
// transformer's packed activations): the forward writes exactly
// pack_bf16(q|k|v) there and the same out and lse as without it; the
// backward reads Q, K, V from it alone (the FP32 q|k|v are NaN by then) and
// gives the same dq|dk|dv, bit for bit.
inline void tree_attention_bf16_kept_qkv(Backend& dev, const AttentionShape& sh, uint64_t seed) {
  const AttentionCase c = attention_case(sh, seed);
  const AttentionResult want = run_tree_attention(dev, sh, c);
  const int T = c.bin.tokens(), H = sh.n_heads, Hkv = sh.n_kv_heads, D = sh.head_dim;
  const int HD = H * D, ld = (H + 2 * Hkv) * D;
  DeviceArray<float> in, out(dev, size_t(T) * HD), lse(dev, size_t(H) * T), dout, dqkv(dev, size_t(T) * ld);
  DeviceArray<uint16_t> kept(dev, size_t(T) * ld);
  DeviceArray<int32_t> se;
  in.upload(dev, c.qkv);
  dout.upload(dev, c.dout);
  se.upload(dev, c.bin.subtree_end);
  TreeAttentionArgs a = fused_tree_attention_args(T, H, Hkv, D, in.data(), ld, se.data(), out.data(), lse.data());
  a.qkv_bf16 = kept.data();
  dev.tree_attention_fwd(a);
  std::vector<uint16_t> bits(c.qkv.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_to_bf16(c.qkv[i]);
  const std::string at = attention_label(sh, c);
  EXPECT_EQ(kept.download(), bits) << "kept bf16 q|k|v" << at;
  EXPECT_EQ(out.download(), want.out) << "out with q|k|v kept" << at;
  EXPECT_EQ(lse.download(), want.lse) << "lse with q|k|v kept" << at;
  in.upload(dev, std::vector<float>(c.qkv.size(), std::nanf("")));
  // The forward finding q|k|v in the kept copy already (qkv_bf16_given): q, k, v are not read.
  TreeAttentionArgs given = a;
  given.qkv_bf16_given = true;
  DeviceArray<float> out2(dev, size_t(T) * HD), lse2(dev, size_t(H) * T);
  given.out = out2.data();
  given.lse = lse2.data();
  dev.tree_attention_fwd(given);
  EXPECT_EQ(out2.download(), want.out) << "out from the given bf16 q|k|v" << at;
  EXPECT_EQ(lse2.download(), want.lse) << "lse from the given bf16 q|k|v" << at;
  EXPECT_EQ(kept.download(), bits) << "given bf16 q|k|v left as they were" << at;
  // The output written as bf16 (out_bf16) instead of FP32: pack_bf16 of the FP32 output.
  DeviceArray<uint16_t> out_written(dev, size_t(T) * HD);
  given.out = nullptr;
  given.out_bf16 = out_written.data();
  dev.tree_attention_fwd(given);
  std::vector<uint16_t> out_bits(want.out.size());
  for (size_t i = 0; i < out_bits.size(); ++i) out_bits[i] = float_to_bf16(want.out[i]);
  EXPECT_EQ(out_written.download(), out_bits) << "out written as bf16" << at;
  EXPECT_EQ(lse2.download(), want.lse) << "lse with out written as bf16" << at;
  dev.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data()));
  EXPECT_EQ(dqkv.download(), want.dqkv) << "dq|dk|dv from the kept bf16 q|k|v" << at;
  // The output kept as bf16 (out_bf16) in place of an FP32 out holding the same values.
  DeviceArray<uint16_t> out16(dev, size_t(T) * HD);
  dev.pack_bf16(out.data(), out16.data(), out16.size());
  dev.unpack_bf16(out16.data(), out.data(), out16.size());
  dev.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data()));
  const std::vector<float> from_rounded = dqkv.download();
  EXPECT_NE(from_rounded, want.dqkv) << "the case cannot tell a rounded output from FP32" << at;
  out.upload(dev, std::vector<float>(out16.size(), std::nanf("")));
  a.out_bf16 = out16.data();
  dev.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data()));
  EXPECT_EQ(dqkv.download(), from_rounded) << "dq|dk|dv with the output kept as bf16" << at;
  // dO as bf16 (TreeAttentionGrads::dout_bf16, dout null: the o-projection's
  // bf16 dx) in place of an FP32 dO holding the same values.
  DeviceArray<uint16_t> dout16(dev, size_t(T) * HD);
  dev.pack_bf16(dout.data(), dout16.data(), dout16.size());
  dev.unpack_bf16(dout16.data(), dout.data(), dout16.size());
  dev.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, dout.data(), dqkv.data()));
  const std::vector<float> from_rounded_dout = dqkv.download();
  EXPECT_NE(from_rounded_dout, from_rounded) << "the case cannot tell a rounded dO from FP32" << at;
  dout.upload(dev, std::vector<float>(dout16.size(), std::nanf("")));
  dev.tree_attention_bwd(a, fused_tree_attention_grads(H, Hkv, D, nullptr, dqkv.data(), dout16.data()));
  EXPECT_EQ(dqkv.download(), from_rounded_dout) << "dq|dk|dv from dO given as bf16" << at;
}

// Hidden states rounded; head weights FP32.
inline void head_bf16(Backend& dev, Backend& cpu, bool want_logits, int chunk) {
  const HeadCase c = head_case();
  const std::vector<float> hidden16 = round_bf16(c.hidden);
  const HeadResult ref32 = run_head(cpu, c, want_logits, chunk);
  const HeadResult ref16 = run_head(cpu, c, want_logits, chunk, &hidden16);
  const HeadResult got = run_head(dev, c, want_logits, chunk);
  const std::string at = " (chunk " + std::to_string(chunk) + (want_logits ? ", logits)" : ")");
  expect_bf16_error(got.logprob, ref16.logprob, ref32.logprob, "bf16 head logprob" + at);
  expect_bf16_error(got.lse, ref16.lse, ref32.lse, "bf16 head lse" + at);
  expect_bf16_error(got.entropy, ref16.entropy, ref32.entropy, "bf16 head entropy" + at);
  if (want_logits) expect_bf16_error(got.logits, ref16.logits, ref32.logits, "bf16 head logits" + at);
  expect_bf16_error(got.dhidden, ref16.dhidden, ref32.dhidden, "bf16 head dhidden" + at);
  expect_bf16_error(got.dweight, ref16.dweight, ref32.dweight, "bf16 head dweight (accumulated)" + at);
}

// The bf16 cache: it holds the rows rounded to bf16 (exactly), and
// attention over it (split-K) is as accurate as bf16 K and V allow.
inline void paged_attention_bf16(Backend& dev, Backend& cpu) {
  const PagedCase c = paged_case({1, 9, 150, 300});
  ASSERT_EQ(dev.kv_cache_value_bytes(), 2u);
  const std::vector<float> k16 = round_bf16(c.k), v16 = round_bf16(c.v);
  const PagedResult ref32 = run_paged(cpu, c, c.max_len), ref16 = run_paged(cpu, c, c.max_len, &k16, &v16);
  const PagedResult got = run_paged(dev, c, c.max_len);
  auto widen = [](const std::vector<uint8_t>& bytes) {  // bf16 bit patterns (little-endian) to FP32
    std::vector<float> f(bytes.size() / 2);
    for (size_t i = 0; i < f.size(); ++i) {
      const uint32_t u = (uint32_t(bytes[2 * i]) | uint32_t(bytes[2 * i + 1]) << 8) << 16;
      std::memcpy(&f[i], &u, sizeof u);
    }
    return f;
  };
  auto as_floats = [](const std::vector<uint8_t>& bytes) {
    std::vector<float> f(bytes.size() / 4);
    std::memcpy(f.data(), bytes.data(), f.size() * sizeof(float));
    return f;
  };
  EXPECT_EQ(widen(got.k_cache), as_floats(ref16.k_cache)) << "bf16 kv_cache_write k";
  EXPECT_EQ(widen(got.v_cache), as_floats(ref16.v_cache)) << "bf16 kv_cache_write v";
  expect_bf16_error(got.out, ref16.out, ref32.out, "bf16 paged attention");
}

}  // namespace forge::backend_cases

// One TEST per case; get(std::string* why) returns the Backend under test or
// nullptr, and the test skips with *why.
// The reference is backend "cpu" unless the including file defines
// FORGE_BACKEND_CASES_REFERENCE() (tests/unit/test_cpu_variants.cpp).
#ifndef FORGE_BACKEND_CASES_REFERENCE
#define FORGE_BACKEND_CASES_REFERENCE() ::forge::make_backend("cpu")
#endif
#define FORGE_BACKEND_CASE(Suite, Name, get, body)                   \
  TEST(Suite, Name) {                                                \
    std::string why;                                                 \
    ::forge::Backend* dev = get(&why);                               \
    if (!dev) GTEST_SKIP() << why;                                   \
    auto cpu = FORGE_BACKEND_CASES_REFERENCE();                      \
    namespace bc = ::forge::backend_cases;                           \
    body;                                                            \
  }

// The FP32 tree attention cases (a backend's default FP32 attention; on
// cuda also run with the exact kernels, Fp32Attention::kExact). Head dims
// 8-128, multiples of 4 (16-byte row loads) and not (10, 14); GQA 1 to 7;
// samples past one and two 64-row tiles.
#define FORGE_TREE_ATTENTION_CASES(Suite, get)                                                 \
  FORGE_BACKEND_CASE(Suite, TreeAttentionGqa, get,                                             \
                     bc::tree_attention(*dev, *cpu, {4, 2, 16, 40, 24}, 11))                   \
  FORGE_BACKEND_CASE(Suite, TreeAttentionHeadDim40, get,                                       \
                     bc::tree_attention(*dev, *cpu, {2, 1, 40, 25, 60}, 12))                   \
  FORGE_BACKEND_CASE(Suite, TreeAttentionHeadDim128, get,                                      \
                     bc::tree_attention(*dev, *cpu, {2, 2, 128, 12, 30}, 13))                  \
  FORGE_BACKEND_CASE(Suite, TreeAttentionSmallBin, get,                                        \
                     bc::tree_attention(*dev, *cpu, {3, 3, 8, 3, 6}, 14))                      \
  FORGE_BACKEND_CASE(Suite, TreeAttentionHeadDim14, get,                                       \
                     bc::tree_attention(*dev, *cpu, {3, 1, 14, 20, 30}, 15))                   \
  FORGE_BACKEND_CASE(Suite, TreeAttentionHeadDim32, get,                                       \
                     bc::tree_attention(*dev, *cpu, {4, 2, 32, 16, 40}, 17))                   \
  FORGE_BACKEND_CASE(Suite, TreeAttentionLongPrefixes, get,                                    \
                     bc::tree_attention(*dev, *cpu, {4, 1, 64, 3, 400}, 16))                   \
  FORGE_BACKEND_CASE(Suite, TreeAttentionGqa7HeadDim10, get,                                   \
                     bc::tree_attention(*dev, *cpu, {7, 1, 10, 4, 130}, 18))                  \
  FORGE_BACKEND_CASE(Suite, TreeAttentionDeterministic, get,                                   \
                     bc::tree_attention_deterministic(*dev, {3, 1, 12, 30, 40}, 15))              \
  FORGE_BACKEND_CASE(Suite, TreeAttentionTileEdges, get,                                       \
                     bc::tree_attention_edges(*dev, *cpu, {2, 1, 32, 0, 0}))

#define FORGE_BACKEND_CASES(Suite, get)                                                        \
  FORGE_BACKEND_CASE(Suite, Elementwise, get, bc::elementwise(*dev, *cpu))                     \
  FORGE_BACKEND_CASE(Suite, Bf16Packing, get, bc::bf16_packing(*dev, *cpu))                    \
  FORGE_BACKEND_CASE(Suite, Gemm, get, bc::gemm(*dev, *cpu))                                   \
  FORGE_BACKEND_CASE(Suite, LinearBackward, get, bc::linear_backward(*dev, *cpu))              \
  FORGE_BACKEND_CASE(Suite, EmbeddingAndRows, get, bc::rows(*dev, *cpu))                       \
  FORGE_BACKEND_CASE(Suite, RmsNorm, get, bc::rmsnorm(*dev, *cpu))                             \
  FORGE_BACKEND_CASE(Suite, Rope, get, bc::rope(*dev, *cpu))                                   \
  FORGE_BACKEND_CASE(Suite, RopeToBf16, get, bc::rope_to_bf16(*dev))                           \
  FORGE_BACKEND_CASE(Suite, SwiGlu, get, bc::swiglu(*dev, *cpu))                               \
  FORGE_BACKEND_CASE(Suite, SwiGluKeptBf16, get, bc::swiglu_kept_bf16(*dev))                    \
  FORGE_BACKEND_CASE(Suite, RmsNormKeptBf16, get, bc::rmsnorm_kept_bf16(*dev))                  \
  FORGE_BACKEND_CASE(Suite, LinearOnBf16Activations, get, bc::linear_on_bf16_activations(*dev)) \
  FORGE_BACKEND_CASE(Suite, AdamW, get, bc::adamw(*dev, *cpu))                                 \
  FORGE_TREE_ATTENTION_CASES(Suite, get)                                                       \
  FORGE_BACKEND_CASE(Suite, HeadChunked, get, bc::head(*dev, *cpu, false, 128))                \
  FORGE_BACKEND_CASE(Suite, HeadWithLogits, get, bc::head(*dev, *cpu, true, 77))               \
  FORGE_BACKEND_CASE(Suite, HeadOneChunk, get, bc::head(*dev, *cpu, false, 4096))              \
  FORGE_BACKEND_CASE(Suite, HeadPeakedRow, get, bc::head_peaked(*dev))                         \
  FORGE_BACKEND_CASE(Suite, PagedAttention, get, bc::paged_attention(*dev, *cpu))              \
  FORGE_BACKEND_CASE(Suite, PolicyLossCispo, get, bc::policy_loss(*dev, *cpu, "cispo", "none"))  \
  FORGE_BACKEND_CASE(Suite, PolicyLossCispoTokenMask, get,                                     \
                     bc::policy_loss(*dev, *cpu, "cispo", "token"))                            \
  FORGE_BACKEND_CASE(Suite, PolicyLossCispoSequenceMask, get,                                  \
                     bc::policy_loss(*dev, *cpu, "cispo", "sequence"))                         \
  FORGE_BACKEND_CASE(Suite, PolicyLossPpoTokenMask, get,                                       \
                     bc::policy_loss(*dev, *cpu, "ppo", "token"))                              \
  FORGE_BACKEND_CASE(Suite, PolicyLossGrpoSequenceMask, get,                                   \
                     bc::policy_loss(*dev, *cpu, "grpo", "sequence"))                          \
  FORGE_BACKEND_CASE(Suite, PolicyLossCispoNonFinite, get,                                     \
                     bc::policy_loss(*dev, *cpu, "cispo", "none", true))                       \
  FORGE_BACKEND_CASE(Suite, PolicyLossCispoLowClipNonFinite, get,                              \
                     bc::policy_loss(*dev, *cpu, "cispo", "none", true, 0.2f))                 \
  FORGE_BACKEND_CASE(Suite, PolicyLossPpoSequenceMaskNonFinite, get,                           \
                     bc::policy_loss(*dev, *cpu, "ppo", "sequence", true))

// The bf16 tree attention cases; get returns a backend in bf16 precision.
#define FORGE_BF16_TREE_ATTENTION_CASES(Suite, get)                                            \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionGqa, get,                                         \
                     bc::tree_attention_bf16(*dev, *cpu, {4, 2, 16, 40, 24}, 11))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionOddHeadDim, get,                                  \
                     bc::tree_attention_bf16(*dev, *cpu, {2, 1, 40, 25, 60}, 12))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionHeadDim128, get,                                  \
                     bc::tree_attention_bf16(*dev, *cpu, {2, 2, 128, 12, 30}, 13))             \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionLongPrefixes, get,                                \
                     bc::tree_attention_bf16(*dev, *cpu, {4, 1, 64, 3, 400}, 16))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionHeadDim12, get,                                   \
                     bc::tree_attention_bf16(*dev, *cpu, {3, 1, 12, 30, 40}, 15))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionHeadDim32, get,                                   \
                     bc::tree_attention_bf16(*dev, *cpu, {4, 2, 32, 16, 40}, 17))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionTileEdges, get,                                   \
                     bc::tree_attention_bf16_edges(*dev, *cpu, {2, 1, 64, 0, 0}))              \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionDeterministic, get,                               \
                     bc::tree_attention_deterministic(*dev, {3, 1, 12, 30, 40}, 15))          \
  FORGE_BACKEND_CASE(Suite, Bf16TreeAttentionKeptQkv, get,                                     \
                     bc::tree_attention_bf16_kept_qkv(*dev, {4, 2, 16, 40, 24}, 11);           \
                     bc::tree_attention_bf16_kept_qkv(*dev, {2, 2, 128, 12, 30}, 13))

// The bf16 cases; get returns a backend in bf16 precision (or nullptr).
#define FORGE_BF16_BACKEND_CASES(Suite, get)                                                   \
  FORGE_BACKEND_CASE(Suite, Bf16Gemm, get, bc::gemm_bf16(*dev, *cpu))                          \
  FORGE_BACKEND_CASE(Suite, Bf16LinearBackward, get, bc::linear_backward_bf16(*dev, *cpu))       \
  FORGE_BACKEND_CASE(Suite, Bf16LinearOnBf16Activations, get, bc::linear_on_bf16_activations(*dev)) \
  FORGE_BF16_TREE_ATTENTION_CASES(Suite, get)                                                  \
  FORGE_BACKEND_CASE(Suite, Bf16PagedAttention, get, bc::paged_attention_bf16(*dev, *cpu))      \
  FORGE_BACKEND_CASE(Suite, Bf16HeadChunked, get, bc::head_bf16(*dev, *cpu, false, 128))       \
  FORGE_BACKEND_CASE(Suite, Bf16HeadWithLogits, get, bc::head_bf16(*dev, *cpu, true, 77))
