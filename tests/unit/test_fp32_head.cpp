// The chunked FP32 head against a direct double-precision computation:
// logits, log-softmax, target logprobs and entropy, and the gradients of
// L = sum_e g_e logprob_e, for vocabulary chunks that do and do not divide V,
// rows with several targets (a branch point) or none, and row counts that
// span several row tiles with a remainder (1024-row tiles for a small chunk,
// 256-row ones for a chunk of 5000).
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "backend/cpu/cpu_backend.hpp"
#include "core/rng.hpp"

namespace forge {
namespace {

struct HeadCase {
  int R = 5, d = 12, V = 37;
  std::vector<float> H, W;
  std::vector<int32_t> row_begin, target;
  std::vector<float> g;
};

HeadCase make_case(uint64_t seed, int R, int V) {
  Rng rng(seed);
  HeadCase c;
  c.R = R;
  c.V = V;
  c.H.resize(c.R * c.d);
  c.W.resize(c.V * c.d);
  for (auto& x : c.H) x = static_cast<float>(rng.normal());
  for (auto& x : c.W) x = static_cast<float>(rng.normal() * 0.5);
  // Per 5 rows: one target; three (a branch point); none; two; two.
  const int per_row[] = {1, 3, 0, 2, 2};
  c.row_begin.push_back(0);
  for (int r = 0; r < c.R; ++r) {
    for (int k = 0; k < per_row[r % 5]; ++k) {
      c.target.push_back(static_cast<int32_t>(rng.below(c.V)));
      c.g.push_back(static_cast<float>(rng.normal()));
    }
    c.row_begin.push_back(static_cast<int32_t>(c.target.size()));
  }
  return c;
}

// (vocab_chunk, rows, vocabulary)
class Fp32Head : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(Fp32Head, MatchesDoublePrecisionReference) {
  const auto [chunk, rows, vocab] = GetParam();
  const float inv_t = 0.8f;
  HeadCase c = make_case(3, rows, vocab);
  const int E = static_cast<int>(c.target.size());
  std::vector<float> logprob(E), lse(c.R), entropy(c.R), logits(c.R * c.V);
  HeadArgs a;
  a.R = c.R;
  a.d = c.d;
  a.V = c.V;
  a.hidden = c.H.data();
  a.weight = c.W.data();
  a.inv_temperature = inv_t;
  a.E = E;
  a.row_begin = c.row_begin.data();
  a.target = c.target.data();
  a.logprob = logprob.data();
  a.lse = lse.data();
  a.entropy = entropy.data();
  a.logits = logits.data();
  a.vocab_chunk = chunk;
  CpuBackend().head_fwd(a);
  // The contract (backend.hpp): dhidden is overwritten, dweight accumulated
  // into. Both start with values that a wrong one would keep or lose.
  std::vector<float> dH(c.R * c.d, 123.0f), dW(c.V * c.d), dW0(c.V * c.d);
  for (size_t i = 0; i < dW.size(); ++i) dW[i] = dW0[i] = 0.25f * static_cast<float>(i % 7) - 0.75f;
  HeadGrads hg;
  hg.dlogprob = c.g.data();
  hg.dhidden = dH.data();
  hg.dweight = dW.data();
  CpuBackend().head_bwd(a, hg);

  std::vector<double> ref_dH(c.R * c.d, 0.0), ref_dW(dW0.begin(), dW0.end());
  for (int r = 0; r < c.R; ++r) {
    std::vector<double> z(c.V);
    double mx = -1e300;
    for (int v = 0; v < c.V; ++v) {
      double s = 0;
      for (int k = 0; k < c.d; ++k) s += static_cast<double>(c.H[r * c.d + k]) * c.W[v * c.d + k];
      z[v] = s * inv_t;
      mx = std::max(mx, z[v]);
      EXPECT_NEAR(logits[r * c.V + v], z[v], 1e-5 * (1 + std::abs(z[v])));
    }
    double se = 0;
    for (double x : z) se += std::exp(x - mx);
    const double l = mx + std::log(se);
    double ent = 0;
    for (double x : z) ent -= std::exp(x - l) * (x - l);
    EXPECT_NEAR(lse[r], l, 1e-5 * std::abs(l));
    EXPECT_NEAR(entropy[r], ent, 1e-5 * std::abs(ent));
    double G = 0;
    std::vector<double> dz(c.V, 0.0);
    for (int e = c.row_begin[r]; e < c.row_begin[r + 1]; ++e) {
      EXPECT_NEAR(logprob[e], z[c.target[e]] - l, 1e-5) << "entry " << e;
      G += c.g[e];
      dz[c.target[e]] += c.g[e];
    }
    for (int v = 0; v < c.V; ++v) {
      dz[v] = (dz[v] - G * std::exp(z[v] - l)) * inv_t;
      for (int k = 0; k < c.d; ++k) {
        ref_dH[r * c.d + k] += dz[v] * c.W[v * c.d + k];
        ref_dW[v * c.d + k] += dz[v] * c.H[r * c.d + k];
      }
    }
  }
  for (size_t i = 0; i < dH.size(); ++i) EXPECT_NEAR(dH[i], ref_dH[i], 1e-5 * (1 + std::abs(ref_dH[i])));
  for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW[i], ref_dW[i], 1e-5 * (1 + std::abs(ref_dW[i])));
}

// A peaked row (one logit 20-30 above the rest, a policy near collapse, in
// a 151,936-token vocabulary): its small entropy within 1% of the double
// one. Computed as lse - sum p z it cancelled two numbers of the size of
// lse: 7% off at a peak of 25, 0 instead of 2.8e-6 at 30.
TEST(Fp32HeadPeaked, SmallEntropiesKeepTheirDigits) {
  const int V = 151936;
  Rng rng(7);
  std::vector<float> W(V);
  for (auto& w : W) w = static_cast<float>(2.0 * rng.normal());
  for (const float peak : {20.0f, 25.0f, 30.0f}) {
    W[1234] = peak;
    const float H = 1.0f;
    float lse = 0, entropy = 0;
    HeadArgs a;
    a.R = 1;
    a.d = 1;
    a.V = V;
    a.hidden = &H;
    a.weight = W.data();
    a.inv_temperature = 1.0f;
    a.lse = &lse;
    a.entropy = &entropy;
    a.vocab_chunk = 4096;
    CpuBackend().head_fwd(a);
    double mx = -1e300, se = 0, ent = 0;
    for (const float w : W) mx = std::max(mx, static_cast<double>(w));
    for (const float w : W) se += std::exp(w - mx);
    const double l = mx + std::log(se);
    for (const float w : W) ent -= std::exp(w - l) * (w - l);
    EXPECT_NEAR(entropy, ent, 1e-2 * ent) << "peak " << peak;
    EXPECT_NEAR(lse, l, 1e-6 * std::abs(l)) << "peak " << peak;
  }
}

// 37 = whole vocabulary; 1, 5 and 16 do not divide it; 2100 rows are two
// 1024-row tiles and 52; 600 rows of a 5000-wide chunk are 256, 256 and 88.
INSTANTIATE_TEST_SUITE_P(Chunks, Fp32Head,
                         ::testing::Values(std::tuple{1, 5, 37}, std::tuple{5, 5, 37}, std::tuple{16, 5, 37},
                                           std::tuple{37, 5, 37}, std::tuple{4096, 5, 37},
                                           std::tuple{16, 2100, 37}, std::tuple{5000, 600, 5000}));

}  // namespace
}  // namespace forge
