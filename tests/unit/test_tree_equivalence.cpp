// Tree-merged training equals linear training: for random models and sample
// sets with shared prefixes and branch points, the loss and every parameter
// gradient of the prefix-tree batch match those of running each sample alone
// with a causal mask (relative error <= 1e-5 per tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "core/rng.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {
namespace {

struct LossAndGrads {
  double loss = 0;
  std::vector<float> grads;
  int64_t packed_tokens = 0;
  int bins = 0;
};

using Coefficients = std::map<std::pair<int, int>, float>;  // (sample, position)

// Adds the loss -sum c_{s,p} logprob_{s,p} of `bins` and its gradient;
// `first` is the index of the bins' sample 0 in the coefficients.
void accumulate(PolicyModel& model, const std::vector<PackedBin>& bins, const Coefficients& coef, int first,
                LossAndGrads* out) {
  out->bins += static_cast<int>(bins.size());
  BinForward fwd;
  for (const auto& bin : bins) {
    out->packed_tokens += bin.tokens();
    const auto w = entry_weights(bin, [&](const SampleRef& r) {
      return coef.at({first + r.sample, r.position});
    });
    model.forward(bin, 1.0f, &fwd);
    std::vector<float> dl(w.size());
    for (size_t e = 0; e < w.size(); ++e) {
      out->loss -= static_cast<double>(w[e]) * fwd.logprob[e];
      dl[e] = -w[e];
    }
    model.backward(dl);
  }
}

// The samples packed into bins of max_tokens (merged into prefix trees, or not).
LossAndGrads run(PolicyModel& model, const std::vector<Sample>& samples, bool merge, int32_t max_tokens,
                 const Coefficients& coef) {
  model.zero_grads();
  LossAndGrads out;
  accumulate(model, pack_forest(build_prefix_forest(samples, merge), max_tokens), coef, 0, &out);
  out.grads = model.get_grads();
  return out;
}

// The linear baseline: each sample alone in its own bin (a causal mask over
// its own tokens), nothing shared with the others.
LossAndGrads run_alone(PolicyModel& model, const std::vector<Sample>& samples, const Coefficients& coef) {
  model.zero_grads();
  LossAndGrads out;
  for (size_t s = 0; s < samples.size(); ++s) {
    const auto length = static_cast<int32_t>(samples[s].tokens.size());
    accumulate(model, pack_forest(build_prefix_forest({samples[s]}, false), length), coef, static_cast<int>(s), &out);
  }
  out.grads = model.get_grads();
  return out;
}

std::vector<int32_t> random_tokens(Rng& rng, int n, int alphabet) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(alphabet));
  return t;
}

// Agent-like episodes: a shared prompt, turns of generated and observed
// tokens; each LLM call is a sample whose context is the history so far.
std::vector<Sample> agent_samples(Rng& rng, int episodes, int turns) {
  std::vector<Sample> out;
  const auto prompt = random_tokens(rng, 5 + static_cast<int>(rng.below(6)), 40);
  for (int e = 0; e < episodes; ++e) {
    std::vector<int32_t> history = prompt;
    for (int t = 0; t < turns; ++t) {
      Sample s;
      s.tokens = history;
      s.trainable.assign(history.size(), 0);
      const auto gen = random_tokens(rng, 1 + static_cast<int>(rng.below(4)), 40);
      for (auto g : gen) {
        s.tokens.push_back(g);
        s.trainable.push_back(1);
      }
      history = s.tokens;
      const auto obs = random_tokens(rng, 1 + static_cast<int>(rng.below(3)), 40);
      history.insert(history.end(), obs.begin(), obs.end());
      out.push_back(std::move(s));
    }
  }
  return out;
}

Sample make_sample(std::vector<int32_t> tokens, int first_trainable) {
  Sample s;
  s.trainable.assign(tokens.size(), 0);
  for (size_t i = first_trainable; i < tokens.size(); ++i) s.trainable[i] = 1;
  s.tokens = std::move(tokens);
  return s;
}

double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

void expect_equal(const PolicyModel& model, const LossAndGrads& tree, const LossAndGrads& lin) {
  ASSERT_GT(std::abs(lin.loss), 0);
  EXPECT_LE(std::abs(tree.loss - lin.loss), 1e-5 * std::abs(lin.loss)) << tree.loss << " vs " << lin.loss;
  for (const auto& t : model.layout().tensors) {
    // Zero on both sides would pass the relative error: a backward pass that
    // stopped writing a tensor's gradient, in code both paths share.
    double norm = 0;
    for (size_t i = 0; i < t.numel; ++i) norm += std::abs(lin.grads[t.offset + i]);
    EXPECT_GT(norm, 0) << "the linear gradient of " << t.name << " is zero";
    const double err = rel_err(tree.grads.data() + t.offset, lin.grads.data() + t.offset, t.numel);
    EXPECT_LE(err, 1e-5) << "gradient of " << t.name;
  }
}

// head_dim = d_model / 4: 8 runs the generic attention kernel, 16 and 32 the
// specialized ones.
ModelConfig tiny_config(int kv_heads, int d_model = 32) {
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;
  c.d_model = d_model;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = kv_heads;
  c.ffn_dim = 48;
  return c;
}

std::map<std::pair<int, int>, float> random_coefficients(Rng& rng, const std::vector<Sample>& s) {
  std::map<std::pair<int, int>, float> coef;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t p = 0; p < s[i].tokens.size(); ++p)
      if (s[i].trainable[p]) coef[{static_cast<int>(i), static_cast<int>(p)}] = static_cast<float>(rng.normal());
  return coef;
}

class TreeEquivalenceRandom : public ::testing::TestWithParam<int> {};

TEST_P(TreeEquivalenceRandom, LossAndGradientsMatchLinear) {
  const int seed = GetParam();
  Rng rng(1000 + seed);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_config(seed % 2 ? 2 : 4, seed % 3 ? 64 : 32), *backend);
  model.init_random(seed, 0.2f);
  std::vector<Sample> samples = agent_samples(rng, 2 + seed % 3, 3 + seed % 4);
  samples.push_back(make_sample({11}, 1));  // single token: context only
  samples.push_back(make_sample({11, 12}, 1));              // a prefix of the next
  samples.push_back(make_sample({11, 12, 13, 14}, 2));
  samples.push_back(make_sample({11, 12, 13, 14}, 2));      // duplicate
  samples.push_back(make_sample({99, 12, 13}, 1));          // branch at the first token
  samples.push_back(make_sample({11, 12, 15, 16, 17}, 1));  // branch point inside a tree
  samples.push_back(make_sample({11, 12, 13}, 3));          // context here, trained elsewhere
  const auto coef = random_coefficients(rng, samples);

  int32_t longest = 0;
  for (const auto& s : samples) longest = std::max<int32_t>(longest, s.tokens.size());
  const LossAndGrads lin = run_alone(model, samples, coef);
  const LossAndGrads tree = run(model, samples, true, 4096, coef);
  EXPECT_LT(tree.packed_tokens, lin.packed_tokens);
  expect_equal(model, tree, lin);
  // A bin smaller than the merged tree forces splits at branch points.
  const LossAndGrads split = run(model, samples, true, longest + 3, coef);
  EXPECT_GT(split.bins, tree.bins);
  expect_equal(model, split, lin);
}

INSTANTIATE_TEST_SUITE_P(Seeds, TreeEquivalenceRandom, ::testing::Range(0, 6));

// Long sequences cross attention block boundaries (64) and exercise block skipping.
TEST(TreeEquivalence, LongEpisodesAcrossAttentionBlocks) {
  Rng rng(5);
  auto backend = make_backend("cpu");
  PolicyModel model(tiny_config(2, 128), *backend);
  model.init_random(3, 0.2f);
  std::vector<Sample> samples;
  const auto prompt = random_tokens(rng, 70, 200);
  for (int e = 0; e < 3; ++e) {
    std::vector<int32_t> history = prompt;
    for (int t = 0; t < 4; ++t) {
      Sample s = make_sample(history, static_cast<int>(history.size()));
      const auto gen = random_tokens(rng, 20 + static_cast<int>(rng.below(30)), 200);
      for (auto g : gen) {
        s.tokens.push_back(g);
        s.trainable.push_back(1);
      }
      history = s.tokens;
      const auto obs = random_tokens(rng, 10 + static_cast<int>(rng.below(40)), 200);
      history.insert(history.end(), obs.begin(), obs.end());
      samples.push_back(std::move(s));
    }
  }
  const auto coef = random_coefficients(rng, samples);
  const LossAndGrads lin = run_alone(model, samples, coef);
  const LossAndGrads tree = run(model, samples, true, 1 << 14, coef);
  EXPECT_LT(tree.packed_tokens * 2, lin.packed_tokens);
  expect_equal(model, tree, lin);
}

}  // namespace
}  // namespace forge
