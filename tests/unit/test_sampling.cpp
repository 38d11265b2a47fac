// sample_token as a distribution: over a grid of n uniforms, each candidate
// is drawn a fraction of times within 1/n (plus rounding) of its probability
// under softmax restricted to the top_k / top_p candidates; tokens outside
// the candidates (and tokens of -inf logit) are never drawn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "model/sampling.hpp"

namespace forge {
namespace {

const std::vector<float> kLogits = {0.3f, -1.2f, 2.0f, 0.9f, -std::numeric_limits<float>::infinity(), 1.7f, -0.4f};

std::vector<double> draw_frequencies(const SamplingParams& p, int n = 20000) {
  std::vector<double> f(kLogits.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    const int32_t t = sample_token(kLogits.data(), static_cast<int>(kLogits.size()), p, (i + 0.5) / n);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, static_cast<int>(kLogits.size()));
    f[t] += 1.0 / n;
  }
  return f;
}

// softmax over the candidate ids
std::vector<double> expected(const std::vector<int>& candidates) {
  std::vector<double> p(kLogits.size(), 0.0);
  double total = 0;
  for (int v : candidates) total += p[v] = std::exp(static_cast<double>(kLogits[v]));
  for (double& x : p) x /= total;
  return p;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  for (size_t v = 0; v < got.size(); ++v) EXPECT_NEAR(got[v], want[v], 2e-4) << "token " << v;
}

TEST(Sampling, WholeVocabularyFollowsSoftmax) {
  SamplingParams p;
  expect_close(draw_frequencies(p), expected({0, 1, 2, 3, 5, 6}));
}

TEST(Sampling, TopKKeepsTheKLargest) {
  SamplingParams p;
  p.top_k = 3;
  expect_close(draw_frequencies(p), expected({2, 5, 3}));
}

TEST(Sampling, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.top_p = 0.6f;  // token 2 alone has 0.41 of the mass, with token 5 0.72
  expect_close(draw_frequencies(p), expected({2, 5}));
}

// Both: top_p applies to the top_k candidates' renormalised mass (as
// transformers and vLLM do). Of the top 3 (tokens 2, 5, 3), token 2 holds
// 0.48 of their mass, so top_p 0.45 keeps it alone; over the whole
// vocabulary it holds 0.41 and token 5 would be kept too.
TEST(Sampling, TopPAppliesToTheTopKCandidatesMass) {
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 0.45f;
  expect_close(draw_frequencies(p), expected({2}));
  double log_kept = 1;
  sample_token(kLogits.data(), static_cast<int>(kLogits.size()), p, 0.5, &log_kept);
  EXPECT_NEAR(log_kept, std::log(expected({0, 1, 2, 3, 5, 6})[2]), 1e-7);
  p.top_p = 0.6f;  // past token 2's share: tokens 2 and 5
  expect_close(draw_frequencies(p), expected({2, 5}));
}

// The candidates' share of the mass (the behaviour logprob's correction):
// log of their softmax probabilities' sum; 0 with every token a candidate.
TEST(Sampling, TheCandidatesShareOfTheMass) {
  const auto share = [](const SamplingParams& p) {
    double log_kept = 1;
    sample_token(kLogits.data(), static_cast<int>(kLogits.size()), p, 0.5, &log_kept);
    return log_kept;
  };
  const auto log_mass = [](const std::vector<int>& ids) {
    const std::vector<double> all = expected({0, 1, 2, 3, 5, 6});
    double m = 0;
    for (int v : ids) m += all[v];
    return std::log(m);
  };
  SamplingParams p;
  EXPECT_EQ(share(p), 0.0);
  p.top_k = 3;
  EXPECT_NEAR(share(p), log_mass({2, 5, 3}), 1e-7);
  p.top_k = 0;
  p.top_p = 0.6f;
  EXPECT_NEAR(share(p), log_mass({2, 5}), 1e-7);
  p.top_p = 1;
  p.temperature = 0;
  EXPECT_EQ(share(p), 0.0);
}

// Top-p alone sorts only a prefix of 64, else the tokens of a bound on the
// nucleus: on a large vocabulary (flat and peaked rows, nuclei from 1 token
// to thousands, a -inf logit, rows of ties: four values, and one value, whose
// bound is the whole vocabulary) its draws and candidate share equal those
// of the definition, a whole sort with ties by id; top_k alike.
TEST(Sampling, TopPOnALargeVocabularyMatchesAWholeSort) {
  const int V = 5000;
  uint64_t state = 12345;
  const auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  for (const double spread : {0.1, 3.0, 12.0, -4.0, 0.0}) {
    std::vector<float> z(V);
    for (float& x : z) x = static_cast<float>(spread * (next() - 0.5));
    if (spread < 0)  // ties: four values
      for (float& x : z) x = std::floor(4 * static_cast<float>(next()));
    if (spread == 3.0) z[7] = -std::numeric_limits<float>::infinity();  // a token ruled out
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    const float mx = z[order[0]];
    double all = 0;
    for (int v = 0; v < V; ++v) all += std::exp(static_cast<double>(z[v] - mx));
    for (const float top_p : {0.01f, 0.3f, 0.9f, 0.999f, 1.0f}) {
      // top_p 1 with top_k: the k first of the whole sort.
      const int top_k = top_p < 1.0f ? 0 : 300;
      int keep = 0;
      double cum = 0, total = 0;
      while (keep < (top_k ? top_k : V)) {
        cum += std::exp(static_cast<double>(z[order[keep++]] - mx)) / all;
        if (cum >= top_p - kTopPSlack) break;
      }
      for (int i = 0; i < keep; ++i) total += std::exp(static_cast<double>(z[order[i]] - mx));
      SamplingParams p;
      p.top_p = top_p;
      p.top_k = top_k;
      for (int k = 0; k < 50; ++k) {
        const double u = next();
        double left = u * total;
        int32_t want = order[keep - 1];
        for (int i = 0; i < keep; ++i)
          if ((left -= std::exp(static_cast<double>(z[order[i]] - mx))) < 0) {
            want = order[i];
            break;
          }
        double log_kept = 1;
        EXPECT_EQ(sample_token(z.data(), V, p, u, &log_kept), want)
            << "spread " << spread << " top_p " << top_p << " top_k " << top_k;
        EXPECT_NEAR(log_kept, std::log(total / all), 1e-12);
      }
    }
  }
}

// Tied tokens whose mass reaches top_p exactly: the nucleus stops there.
// top_p 0.3 is the float 0.30000001, above three tenths' sum, and kept a
// fourth token (a nucleus of 0.4, not the smallest set reaching 0.3).
TEST(Sampling, ANucleusThatReachesTopPExactlyStopsThere) {
  const std::vector<float> z(10, 0.5f);
  for (const auto& [top_p, kept] : std::vector<std::pair<float, int>>{{0.1f, 1}, {0.3f, 3}, {0.5f, 5}, {0.7f, 7}, {0.9f, 9}}) {
    SamplingParams p;
    p.top_p = top_p;
    double log_kept = 1;
    int32_t highest = -1;
    for (int k = 0; k < 200; ++k) highest = std::max(highest, sample_token(z.data(), 10, p, (k + 0.5) / 200, &log_kept));
    EXPECT_EQ(highest, kept - 1) << "top_p " << top_p;  // ties by id: tokens 0..kept-1
    EXPECT_NEAR(log_kept, std::log(kept / 10.0), 1e-12) << "top_p " << top_p;
  }
}

TEST(Sampling, GreedyAndEdgeUniforms) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_token(kLogits.data(), static_cast<int>(kLogits.size()), p, 0.7), 2);
  p.temperature = 1;
  for (double u : {0.0, 1.0 - 1e-16, 1.0})
    EXPECT_NE(sample_token(kLogits.data(), static_cast<int>(kLogits.size()), p, u), 4) << "drew a -inf logit at u " << u;
  // The sorted (top-k) path alike: a candidate whose probability underflows
  // to 0 (1000 nats below the top) is never the fallback of a uniform at the
  // top of [0, 1] (it once was: the last candidate whatever its mass).
  const std::vector<float> gap = {0.3f, -1.2f, 2.0f, 0.9f, -1000.0f, 1.7f, -0.4f, -2000.0f};
  p.top_k = 7;
  for (double u : {1.0 - 1e-16, 1.0})
    EXPECT_NE(sample_token(gap.data(), static_cast<int>(gap.size()), p, u), 4) << "drew a 0-probability token at u " << u;
}

}  // namespace
}  // namespace forge
