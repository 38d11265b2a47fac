// The rollout engine against independent recomputation: the trainer's path
// (prefix forest, packed bins, PolicyModel::forward with tree attention) for
// logprobs and greedy argmax, engines of other shapes (alone vs batched,
// fresh vs reused prefix, small vs large pool) for tokens, and a naive
// softmax attention for the paged attention kernel.
#include "model/rollout_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {
namespace {

using Ints = std::vector<int32_t>;

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 96;
  return c;
}

// std 0.1: logits spread over a few nats, so sampling and argmax are not flat.
struct Fixture {
  CpuBackend backend;
  PolicyModel model{tiny_config(), backend};
  explicit Fixture(uint64_t seed = 11) { model.init_random(seed, 0.1f); }
};

EngineConfig engine_config(int max_batch = 8, int64_t cache_tokens = 4096, int block_size = 4,
                           int prefill_chunk = 64, int max_seq_len = 512) {
  EngineConfig e;
  e.max_batch = max_batch;
  e.max_seq_len = max_seq_len;
  e.kv_cache_tokens = cache_tokens;
  e.block_size = block_size;
  e.prefill_chunk = prefill_chunk;
  return e;
}

Ints random_tokens(Rng& rng, int n) {
  Ints t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(256));
  return t;
}

// The next call's prompt: this one's with the reply appended.
Ints followed_by(Ints prompt, const GenerationResult& reply) {
  prompt.insert(prompt.end(), reply.tokens.begin(), reply.tokens.end());
  return prompt;
}

GenerationRequest request(uint64_t id, Ints prompt, int max_new, float temperature,
                          uint64_t seed, std::string session = {}) {
  GenerationRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.sampling.max_new_tokens = max_new;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.session = std::move(session);
  return r;
}

std::map<uint64_t, GenerationResult> by_id(std::vector<GenerationResult> results) {
  std::map<uint64_t, GenerationResult> m;
  for (auto& r : results) {
    EXPECT_FALSE(m.count(r.id)) << "request " << r.id << " returned twice";
    m[r.id] = std::move(r);
  }
  return m;
}

// r run to completion on engine, alone in it.
GenerationResult run_one(RolloutEngine& engine, const GenerationRequest& r) {
  engine.submit(r);
  auto out = engine.run_until_done();
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

GenerationResult generate_alone(PolicyModel& model, const GenerationRequest& r,
                                EngineConfig cfg = engine_config()) {
  RolloutEngine engine(model, cfg);
  return run_one(engine, r);
}

// The trainer's view: per sample and position, the logprob of the token (NaN
// where not trainable) and the logits of the row that predicts it.
struct Recomputed {
  std::vector<std::vector<float>> logprob;
  std::vector<std::vector<std::vector<float>>> logits;
};

Recomputed recompute(PolicyModel& model, const std::vector<Sample>& samples,
                     float inv_temperature) {
  const int V = model.config().vocab;
  Recomputed rc;
  for (const Sample& s : samples) {
    rc.logprob.emplace_back(s.tokens.size(), std::numeric_limits<float>::quiet_NaN());
    rc.logits.emplace_back(s.tokens.size());
  }
  const PrefixForest forest = build_prefix_forest(samples, true);
  for (const PackedBin& bin : pack_forest(forest, 4096)) {
    BinForward out;
    out.want_logits = true;
    model.forward(bin, inv_temperature, &out);
    for (int32_t r = 0; r < bin.rows(); ++r)
      for (int32_t e = bin.row_begin[r]; e < bin.row_begin[r + 1]; ++e)
        for (int32_t k = bin.ref_begin[e]; k < bin.ref_begin[e + 1]; ++k) {
          const SampleRef& ref = bin.refs[k];
          rc.logprob[ref.sample][ref.position] = out.logprob[e];
          rc.logits[ref.sample][ref.position].assign(out.logits.begin() + size_t(r) * V,
                                                     out.logits.begin() + size_t(r + 1) * V);
        }
  }
  return rc;
}

Sample as_sample(const Ints& prompt, const Ints& generated) {
  Sample s;
  s.tokens = prompt;
  s.tokens.insert(s.tokens.end(), generated.begin(), generated.end());
  s.trainable.assign(prompt.size(), 0);
  s.trainable.resize(s.tokens.size(), 1);
  return s;
}

// Logprobs agree within tol * max(1, |logprob|): OpenBLAS rounds a row of a
// GEMM differently depending on the row count of the call (its small-matrix
// paths), so another batch composition moves a logprob by a few ulps.
void expect_same_generation(const GenerationResult& a, const GenerationResult& b, double tol) {
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  for (size_t i = 0; i < a.logprobs.size(); ++i)
    EXPECT_NEAR(a.logprobs[i], b.logprobs[i], tol * std::max(1.0f, std::abs(b.logprobs[i])))
        << "token " << i;
  EXPECT_EQ(a.finish, b.finish);
}

// The CPU paged attention against a double-precision softmax over the
// row's positions, read through its block table.
static void expect_paged_attention_matches_naive(int D, int bs, int H, int Hkv) {
  SCOPED_TRACE("head_dim " + std::to_string(D) + ", block_size " + std::to_string(bs) + ", heads " +
               std::to_string(H) + "/" + std::to_string(Hkv));
  CpuBackend B;
  const int nblocks = 12, row = Hkv * D;
  Rng rng(3);
  std::vector<float> kc(size_t(nblocks) * bs * row), vc(kc.size());
  for (auto& x : kc) x = static_cast<float>(rng.normal());
  for (auto& x : vc) x = static_cast<float>(rng.normal());
  // Two sequences over scattered blocks; queries at assorted positions.
  const Ints table = {7, 2, 9, 0, 5, /* second: */ 11, 3, 8};
  const Ints seq_begin = {0, 5};
  const Ints q_seq = {0, 0, 1, 0, 1, 1};
  const Ints position = {0, 19, 11, 6, 3, 0};
  const int T = static_cast<int>(position.size()), ld = H * D + 3;
  std::vector<float> q(size_t(T) * ld), out(size_t(T) * H * D);
  for (auto& x : q) x = static_cast<float>(rng.normal());
  Ints table_begin(T);
  for (int t = 0; t < T; ++t) table_begin[t] = seq_begin[q_seq[t]];
  PagedAttentionArgs a;
  a.T = T;
  a.n_heads = H;
  a.n_kv_heads = Hkv;
  a.head_dim = D;
  a.block_size = bs;
  a.q = q.data();
  a.ld_q = ld;
  a.k_cache = kc.data();
  a.v_cache = vc.data();
  a.position = position.data();
  a.block_table = table.data();
  a.table_begin = table_begin.data();
  a.out = out.data();
  B.paged_attention_fwd(a);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const int kvh = h / (H / Hkv);
      std::vector<double> w(position[t] + 1);
      double mx = -1e300, sum = 0;
      auto kv_at = [&](const std::vector<float>& c, int p) {
        const int slot = table[table_begin[t] + p / bs] * bs + p % bs;
        return c.data() + size_t(slot) * row + kvh * D;
      };
      for (int p = 0; p <= position[t]; ++p) {
        double s = 0;
        for (int i = 0; i < D; ++i) s += double(q[size_t(t) * ld + h * D + i]) * kv_at(kc, p)[i];
        w[p] = s / std::sqrt(double(D));
        mx = std::max(mx, w[p]);
      }
      for (auto& x : w) sum += x = std::exp(x - mx);
      for (int i = 0; i < D; ++i) {
        double o = 0;
        for (int p = 0; p <= position[t]; ++p) o += w[p] / sum * kv_at(vc, p)[i];
        EXPECT_NEAR(out[size_t(t) * H * D + h * D + i], o, 1e-5) << "t " << t << " h " << h;
      }
    }
}

// On a host backend the KV cache (allocated whole, zeroed) is cut to a
// quarter of the process's share of the node's usable memory (here given as
// host_bytes), in whole blocks, never below one sequence:
// an agent engine's default took 11 GB with SmolLM2-135M, 190 GB with
// 8192-token contexts (an OOM kill, or bad_alloc).
TEST(RolloutEngine, AHostKvCacheTakesAtMostAQuarterOfItsShare) {
  EngineConfig e = engine_config(8, 1 << 20, 16, 64, 100);
  const double gib = 1 << 30;
  EXPECT_EQ(host_kv_cache_tokens(e, 1024, 64 * gib), 1 << 20);   // 1 GiB of 16: kept
  EXPECT_EQ(host_kv_cache_tokens(e, 1024, 2 * gib), 1 << 19);    // 1 GiB of 2: half of it
  EXPECT_EQ(host_kv_cache_tokens(e, 1000, 2 * gib), 536864);     // whole blocks
  EXPECT_EQ(host_kv_cache_tokens(e, 1 << 20, 64.0 * (1 << 20)), 112);  // one sequence: 100 tokens in 7 blocks
  // and the engine holds what it says
  Fixture f;
  RolloutEngine engine(f.model, engine_config(8, 4096, 4));
  EXPECT_EQ(engine.cache().capacity_tokens(), 4096);
}

TEST(RolloutEngine, PagedAttentionMatchesNaiveSoftmax) {
  // Head dims: the unrolled vector paths (16, 32, 64, 128: one and two
  // panels), the vector path of any multiple of 8 (8, 24), the scalar path
  // (12); blocks shorter than, equal to and longer than the eight positions
  // scored at a time, and one (12) that ends mid-way through its second eight,
  // and one (33) longer than every sequence; query heads per key head 2, 1
  // (plain multi-head) and 3.
  for (const auto& [H, Hkv] : {std::pair{4, 2}, std::pair{3, 3}, std::pair{6, 2}})
    for (int D : {8, 12, 16, 24, 32, 64, 128})
      for (int bs : {4, 8, 12, 16, 33}) expect_paged_attention_matches_naive(D, bs, H, Hkv);
}

TEST(RolloutEngine, LogprobsMatchTrainerForward) {
  Fixture f;
  Rng rng(5);
  const Ints shared = random_tokens(rng, 9);
  for (float temperature : {1.0f, 0.7f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    // Small blocks and prefill chunks: prompts span blocks and several steps.
    RolloutEngine engine(f.model, engine_config(8, 4096, 4, 7));
    std::vector<Ints> prompts = {random_tokens(rng, 5), random_tokens(rng, 23), shared,
                                 random_tokens(rng, 1)};
    Ints branched = shared;
    branched.push_back(17);
    prompts.push_back(branched);  // shares a prefix with another prompt: a merged trie
    for (size_t i = 0; i < prompts.size(); ++i)
      engine.submit(request(i, prompts[i], 6 + 3 * static_cast<int>(i), temperature, 100 + i));
    auto results = by_id(engine.run_until_done());
    ASSERT_EQ(results.size(), prompts.size());

    std::vector<Sample> samples;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(results[i].finish, FinishReason::kLength);
      samples.push_back(as_sample(prompts[i], results[i].tokens));
    }
    // Logprobs equal the trainer's; tokens are the draws sample_token makes
    // from the trainer's logits with counter_uniform(seed, g).
    const Recomputed rc = recompute(f.model, samples, 1.0f / temperature);
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams sp;
      sp.temperature = temperature;
      for (size_t g = 0; g < results[i].tokens.size(); ++g) {
        const size_t pos = prompts[i].size() + g;
        EXPECT_NEAR(results[i].logprobs[g], rc.logprob[i][pos], 1e-5)
            << "request " << i << " token " << g;
        EXPECT_EQ(results[i].tokens[g], sample_token(rc.logits[i][pos].data(), tiny_config().vocab,
                                                     sp, counter_uniform(100 + i, g)))
            << "request " << i << " token " << g;
      }
    }
  }
}

// The same agreement for the shapes pretrained models bring (the base
// config above has none of them): one key head, head_dim 24 set apart from
// d_model / heads, tied embeddings, a random q/k/v bias (Qwen2), Llama 3 RoPE
// scaling with all three frequency bands in use, and prompts of hundreds of
// tokens over blocks of 16 and prefill chunks of 97 (the engine's paged
// path writes the biased k to its cache and ropes it at positions the short
// prompts above never reach).
TEST(RolloutEngine, LogprobsMatchTrainerForwardForPretrainedShapes) {
  struct Shape {
    int kv_heads, head_dim;
    bool tied, bias;
    float llama3_factor;
    int prompt, generated;
  };
  for (const Shape& sh : {Shape{1, 24, true, true, 8.0f, 300, 40}, Shape{4, 24, true, true, 8.0f, 700, 24},
                          Shape{2, 0, false, true, 0.0f, 400, 24}}) {
    SCOPED_TRACE("kv_heads " + std::to_string(sh.kv_heads) + " head_dim " + std::to_string(sh.head_dim) +
                 " prompt " + std::to_string(sh.prompt));
    ModelConfig c = tiny_config();
    c.n_kv_heads = sh.kv_heads;
    c.head_dim_override = sh.head_dim;
    c.tied_embeddings = sh.tied;
    c.qkv_bias = sh.bias;
    c.rope_scaling.factor = sh.llama3_factor;
    c.rope_scaling.original_max_positions = 64;  // wavelengths of 16 and 64 positions split the bands
    c.validate();
    CpuBackend backend;
    PolicyModel model(c, backend);
    model.init_random(7, 0.1f);
    if (sh.bias) {  // init_random leaves biases 0, which would test nothing
      std::vector<float> p = model.get_params();
      Rng brng(3);
      int biases = 0;
      for (const auto& t : model.layout().tensors)
        if (t.name.ends_with("bqkv")) {
          ++biases;
          for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] = 0.3f * static_cast<float>(brng.normal());
        }
      ASSERT_EQ(biases, c.n_layers) << "no q/k/v bias tensor to fill";
      model.set_params(p);
    }
    Rng rng(1);
    const Ints prompt = random_tokens(rng, sh.prompt);
    RolloutEngine engine(model, engine_config(4, 8192, 16, 97, sh.prompt + sh.generated + 1));
    const GenerationResult r = run_one(engine, request(1, prompt, sh.generated, 1.0f, 9));
    ASSERT_EQ(r.finish, FinishReason::kLength);
    const Recomputed rc = recompute(model, {as_sample(prompt, r.tokens)}, 1.0f);
    for (size_t g = 0; g < r.tokens.size(); ++g)
      EXPECT_NEAR(r.logprobs[g], rc.logprob[0][prompt.size() + g], 1e-5) << "token " << g;
  }
}

// With top_k / top_p the behaviour logprob is the token's log probability
// under the sampler that drew it: the log-softmax renormalized over the
// candidates (the learner's ratio against it is then the policy's mass on
// the kept candidates, docs/configuration.md's sample.top_p). It was
// the full log-softmax: with top_k = 1 each token had probability 1 and was
// recorded near -3.8.
TEST(RolloutEngine, TruncatedSamplingLogprobsAreTheSamplers) {
  Fixture f;
  Rng rng(9);
  const Ints prompt = random_tokens(rng, 7);
  for (const auto& [top_k, top_p] : {std::pair{1, 1.0f}, std::pair{3, 1.0f}, std::pair{0, 0.3f}}) {
    SCOPED_TRACE("top_k " + std::to_string(top_k) + " top_p " + std::to_string(top_p));
    RolloutEngine engine(f.model, engine_config(8, 4096, 4, 7));
    GenerationRequest r = request(0, prompt, 8, 1.0f, 21);
    r.sampling.top_k = top_k;
    r.sampling.top_p = top_p;
    engine.submit(r);
    const GenerationResult res = engine.run_until_done().at(0);
    const Recomputed rc = recompute(f.model, {as_sample(prompt, res.tokens)}, 1.0f);
    for (size_t g = 0; g < res.tokens.size(); ++g) {
      const std::vector<float>& z = rc.logits[0][prompt.size() + g];
      double log_kept = 1;
      EXPECT_EQ(sample_token(z.data(), tiny_config().vocab, r.sampling, counter_uniform(21, g), &log_kept),
                res.tokens[g]);
      EXPECT_LT(log_kept, 0.0);
      EXPECT_NEAR(res.logprobs[g], std::min(0.0, rc.logprob[0][prompt.size() + g] - log_kept), 1e-5) << "token " << g;
      if (top_k == 1) {
        EXPECT_NEAR(res.logprobs[g], 0.0, 1e-5);
      }
    }
  }
}

// A top_k past the vocabulary keeps every token, as top_k = 0 does, and a
// top_p near 0 keeps the most likely one alone (logprob 0): through the
// engine, token for token.
TEST(RolloutEngine, TopKPastTheVocabularyAndTinyTopPThroughTheEngine) {
  Fixture f;
  Rng rng(5);
  const Ints prompt = random_tokens(rng, 9);
  const auto run = [&](int top_k, float top_p, float temperature) {
    GenerationRequest r = request(0, prompt, 12, temperature, 33);
    r.sampling.top_k = top_k;
    r.sampling.top_p = top_p;
    return generate_alone(f.model, r);
  };
  const GenerationResult all = run(0, 1.0f, 1.0f);
  expect_same_generation(all, run(tiny_config().vocab + 1000, 1.0f, 1.0f), 0.0);
  const GenerationResult tiny_p = run(0, 1e-9f, 1.0f);
  EXPECT_EQ(tiny_p.tokens, run(0, 1.0f, 0.0f).tokens);  // greedy
  for (const float lp : tiny_p.logprobs) EXPECT_NEAR(lp, 0.0f, 1e-6f);  // log(p / p), rounded
}

TEST(RolloutEngine, TokensIndependentOfBatch) {
  Fixture f;
  Rng rng(9);
  GenerationRequest probe = request(42, random_tokens(rng, 13), 20, 1.0f, 777);
  probe.sampling.top_k = 50;
  probe.sampling.top_p = 0.9f;
  const GenerationResult alone = generate_alone(f.model, probe);

  RolloutEngine engine(f.model, engine_config(6, 4096, 4, 16));
  for (int i = 0; i < 4; ++i)
    engine.submit(request(i, random_tokens(rng, 3 + 11 * i), 5 + 7 * i, 1.0f, rng.next_u64()));
  engine.step();
  engine.step();
  engine.submit(probe);
  for (int i = 4; i < 9; ++i) {
    engine.step();
    engine.submit(request(i, random_tokens(rng, 2 + 5 * i), 4 + 3 * i, 0.8f, rng.next_u64()));
  }
  auto results = by_id(engine.run_until_done());
  ASSERT_TRUE(results.count(42));
  expect_same_generation(alone, results[42], 1e-6);
  // Another seed changes the draw: the comparison above can fail.
  probe.sampling.seed = 778;
  EXPECT_NE(generate_alone(f.model, probe).tokens, alone.tokens);
}

TEST(RolloutEngine, ContinuousBatchingCountsStopsAndGreedy) {
  Fixture f;
  Rng rng(21);
  RolloutEngine engine(f.model, engine_config(3, 4096, 4, 10));
  engine.set_policy_version(1);
  std::map<uint64_t, GenerationRequest> sent;
  auto send = [&](GenerationRequest r) {
    sent[r.id] = r;
    engine.submit(std::move(r));
  };
  for (uint64_t i = 0; i < 4; ++i)
    send(request(i, random_tokens(rng, 4 + 6 * i), 3 + 5 * i, i % 2 ? 0.0f : 1.0f, 50 + i));
  std::vector<GenerationResult> all;
  int steps = 0;
  while (!engine.idle()) {
    EXPECT_LE(engine.num_running(), 3u);
    if (steps == 3)
      for (uint64_t i = 4; i < 8; ++i)
        send(request(i, random_tokens(rng, 2 + 3 * i), 2 + 4 * i, i % 2 ? 0.0f : 1.0f, 50 + i));
    if (steps == 12) engine.set_policy_version(2);
    auto r = engine.step();
    all.insert(all.end(), r.begin(), r.end());
    ASSERT_LT(++steps, 1000) << "engine does not finish";
  }
  auto results = by_id(all);
  ASSERT_EQ(results.size(), sent.size());
  std::set<int32_t> versions;
  for (auto& [id, res] : results) {
    const GenerationRequest& rq = sent[id];
    EXPECT_EQ(res.finish, FinishReason::kLength) << id;
    EXPECT_EQ(static_cast<int>(res.tokens.size()), rq.sampling.max_new_tokens) << id;
    EXPECT_EQ(res.logprobs.size(), res.tokens.size());
    ASSERT_EQ(res.versions.size(), res.tokens.size());
    // Stamped with the version the sequence started under, also for the
    // tokens decoded after the switch at step 12 (they attend to older k/v).
    EXPECT_EQ(std::count(res.versions.begin(), res.versions.end(), res.versions.front()),
              static_cast<std::ptrdiff_t>(res.versions.size())) << id;
    versions.insert(res.versions.begin(), res.versions.end());
    EXPECT_EQ(res.prefill_computed, static_cast<int>(rq.prompt.size()));
    EXPECT_EQ(res.prefill_reused, 0);
  }
  EXPECT_EQ(versions, (std::set<int32_t>{1, 2}));

  // Greedy requests: every token is the argmax of the trainer's logits, and
  // every logprob (any temperature's request here, all at inv_temperature 1
  // for greedy) matches.
  std::vector<Sample> samples;
  std::vector<uint64_t> greedy;
  for (auto& [id, res] : results)
    if (sent[id].sampling.temperature == 0.0f) {
      greedy.push_back(id);
      samples.push_back(as_sample(sent[id].prompt, res.tokens));
    }
  const Recomputed rc = recompute(f.model, samples, 1.0f);
  for (size_t s = 0; s < greedy.size(); ++s) {
    const GenerationResult& res = results[greedy[s]];
    const size_t P = sent[greedy[s]].prompt.size();
    for (size_t g = 0; g < res.tokens.size(); ++g) {
      const std::vector<float>& z = rc.logits[s][P + g];
      const float best = *std::max_element(z.begin(), z.end());
      EXPECT_GE(z[res.tokens[g]], best - 1e-5f) << "request " << greedy[s] << " token " << g;
      EXPECT_NEAR(res.logprobs[g], rc.logprob[s][P + g], 1e-5);
    }
  }

  // Stop tokens: the same request stopped at the first occurrence of its k-th token.
  GenerationRequest full = request(100, random_tokens(rng, 8), 24, 1.0f, 9);
  const GenerationResult ref = generate_alone(f.model, full);
  const size_t k = 10;
  const size_t first = std::find(ref.tokens.begin(), ref.tokens.end(), ref.tokens[k]) - ref.tokens.begin();
  full.sampling.stop_tokens = {ref.tokens[k], ByteTokenizer::kVocabSize - 1};
  const GenerationResult stopped = generate_alone(f.model, full);
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_EQ(stopped.tokens, Ints(ref.tokens.begin(), ref.tokens.begin() + first + 1));
}

TEST(RolloutEngine, ContextLimitAndInputErrors) {
  Fixture f;
  Rng rng(2);
  RolloutEngine engine(f.model, engine_config(4, 4096, 4, 64, 24));
  engine.submit(request(1, random_tokens(rng, 20), 10, 1.0f, 1));
  engine.submit(request(2, random_tokens(rng, 24), 10, 1.0f, 2));  // full: nothing to generate
  auto results = by_id(engine.run_until_done());
  EXPECT_EQ(results[1].finish, FinishReason::kContextLimit);
  EXPECT_EQ(results[1].tokens.size(), 4u);
  EXPECT_EQ(results[2].finish, FinishReason::kContextLimit);
  EXPECT_TRUE(results[2].tokens.empty());

  EXPECT_THROW(engine.submit(request(3, random_tokens(rng, 25), 4, 1.0f, 0)), InputError);
  EXPECT_THROW(engine.submit(request(4, {}, 4, 1.0f, 0)), InputError);
  EXPECT_THROW(engine.submit(request(5, {1, ByteTokenizer::kVocabSize}, 4, 1.0f, 0)), InputError);
  EXPECT_THROW(engine.submit(request(6, {1, 2}, 0, 1.0f, 0)), InputError);
  EXPECT_THROW(engine.submit(request(7, {1, 2}, 4, -1.0f, 0)), InputError);
  EXPECT_THROW(engine.submit(request(8, {1, 2}, 4, 1e-30f, 0)), InputError);  // 1/T overflows
  EXPECT_TRUE(engine.idle());
  // An id is one request's until its result is returned: refused while it
  // waits, runs or is unreturned, free again after.
  engine.submit(request(9, {1, 2}, 10, 1.0f, 0));
  EXPECT_THROW(engine.submit(request(9, {3, 4}, 4, 1.0f, 0)), InputError);  // waiting
  EXPECT_TRUE(engine.step().empty());
  EXPECT_EQ(engine.num_running(), 1u);
  EXPECT_THROW(engine.submit(request(9, {3, 4}, 4, 1.0f, 0)), InputError);  // running
  engine.submit(request(10, random_tokens(rng, 24), 4, 1.0f, 0));  // full: its result waits unreturned
  EXPECT_THROW(engine.submit(request(10, {1, 2}, 4, 1.0f, 0)), InputError);
  EXPECT_EQ(engine.run_until_done().size(), 2u);
  engine.submit(request(9, {3, 4}, 4, 1.0f, 0));
  engine.submit(request(10, {3, 4}, 4, 1.0f, 0));
  EXPECT_EQ(engine.run_until_done().size(), 2u);
  EngineConfig bad = engine_config();
  bad.prefill_chunk = 0;
  EXPECT_THROW(RolloutEngine(f.model, bad), InputError);
  bad = engine_config();
  bad.kv_cache_tokens = 3;  // less than one block
  EXPECT_THROW(RolloutEngine(f.model, bad), InputError);
}

// Weights holding NaN give non-finite logits: an Error naming the request
// and the version, not NaN behaviour logprobs in the training data.
TEST(RolloutEngine, NonFiniteLogitsAreAnError) {
  Fixture f;
  std::vector<float> w = f.model.get_params();
  for (float& x : w) x = std::numeric_limits<float>::quiet_NaN();
  f.model.set_params(w);
  RolloutEngine engine(f.model, engine_config());
  engine.set_policy_version(3);
  engine.submit(request(9, {1, 2, 3}, 4, 1.0f, 0));
  try {
    engine.run_until_done();
    FAIL() << "NaN weights generated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 9 at generated token 0 are not finite"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("version 3"), std::string::npos) << e.what();
  }
}

// After its Error the engine stays failed: a later step() throws again
// (the failing request's k/v counted as computed once left it never
// scheduled again, and run_until_done() looped forever).
TEST(RolloutEngine, AnEngineStaysFailedAfterNonFiniteLogits) {
  Fixture f;
  const std::vector<float> good = f.model.get_params();
  std::vector<float> w = good;
  for (float& x : w) x = std::numeric_limits<float>::quiet_NaN();
  f.model.set_params(w);
  RolloutEngine engine(f.model, engine_config());
  engine.submit(request(9, {1, 2, 3}, 4, 1.0f, 0));
  GenerationRequest truncated = request(10, {4, 5}, 4, 1.0f, 0);
  truncated.sampling.top_k = 5;  // the sorted path: NaN rows never reach its sort
  engine.submit(truncated);
  EXPECT_THROW(engine.step(), Error);
  f.model.set_params(good);
  std::string error;
  for (int k = 0; k < 100 && error.empty(); ++k) try {
      engine.step();
    } catch (const Error& e) {
      error = e.what();
    }
  EXPECT_NE(error.find("the engine stopped at this error"), std::string::npos) << "a failed engine ran on: " << error;
}

// cancel(): a running request ends at once with the tokens it has, a waiting
// one with none; both give their place and reservation to the others, which
// generate what they would alone; the running one's k/v stay under its
// session, as a finished request's.
TEST(RolloutEngine, CancelledRequestsGiveBackTheirPlaceAndBlocks) {
  Fixture f;
  Rng rng(5);
  const EngineConfig two = engine_config(2, 4096, 8, 32), alone = engine_config(8, 4096, 8, 32);
  std::vector<GenerationRequest> reqs;
  for (uint64_t i = 0; i < 4; ++i)
    reqs.push_back(request(i, random_tokens(rng, 10), 14, 1.0f, 40 + i, "s" + std::to_string(i)));
  RolloutEngine engine(f.model, two);
  for (const auto& r : reqs) engine.submit(r);
  std::vector<GenerationResult> all;
  for (int k = 0; k < 4; ++k) {
    auto r = engine.step();
    all.insert(all.end(), r.begin(), r.end());
  }
  ASSERT_EQ(engine.num_running(), 2u);
  ASSERT_EQ(engine.num_waiting(), 2u);
  const int free_before = engine.cache().free_blocks();
  EXPECT_TRUE(engine.cancel(0));   // running: 2 of its 3 blocks hold its computed k/v, kept for its session
  EXPECT_EQ(engine.cache().free_blocks() + engine.cache().cached_blocks(), free_before + 3);
  EXPECT_NE(engine.cache().find_session("s0"), nullptr);
  EXPECT_TRUE(engine.cancel(3));   // waiting
  EXPECT_FALSE(engine.cancel(3));  // already ended
  EXPECT_FALSE(engine.cancel(42)); // never submitted
  EXPECT_EQ(engine.num_running(), 1u);
  EXPECT_EQ(engine.num_waiting(), 1u);
  int steps = 0;
  while (!engine.idle()) {
    auto r = engine.step();
    all.insert(all.end(), r.begin(), r.end());
    ASSERT_LT(++steps, 1000) << "engine does not finish";
  }
  auto results = by_id(all);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].finish, FinishReason::kCancelled);
  EXPECT_GT(results[0].tokens.size(), 0u);
  EXPECT_LT(results[0].tokens.size(), 14u);
  const GenerationResult whole0 = generate_alone(f.model, reqs[0], alone);
  EXPECT_EQ(results[0].tokens, Ints(whole0.tokens.begin(), whole0.tokens.begin() + results[0].tokens.size()));
  EXPECT_EQ(results[3].finish, FinishReason::kCancelled);
  EXPECT_TRUE(results[3].tokens.empty());
  for (uint64_t i : {1, 2}) expect_same_generation(results[i], generate_alone(f.model, reqs[i], alone), 1e-5);
  EXPECT_FALSE(engine.cancel(1));  // finished
  EXPECT_EQ(engine.stats().cancelled, 2);
  EXPECT_EQ(engine.stats().finished, 4);
  // Every block is free or held by the kept sessions (s0, s1, s2; s3 never ran).
  EXPECT_EQ(engine.cache().sessions(), 3u);
  EXPECT_EQ(engine.cache().free_blocks() + engine.cache().cached_blocks(), engine.cache().num_blocks());
  EXPECT_EQ(engine.cache().find_session("s3"), nullptr);
}

TEST(RolloutEngine, SessionPrefixReuse) {
  Fixture f;
  Rng rng(31);
  const EngineConfig cfg = engine_config(4, 4096, 4, 16);
  RolloutEngine engine(f.model, cfg);
  const auto run = run_one;
  auto fresh = [&](GenerationRequest r) {
    r.session.clear();
    return generate_alone(f.model, r, cfg);
  };

  // Turn 1, then turn 2 = turn 1 prompt + output + new tokens.
  const Ints p1 = random_tokens(rng, 30);
  const GenerationResult t1 = run(engine, request(1, p1, 10, 1.0f, 5, "ep"));
  EXPECT_EQ(t1.prefill_reused, 0);
  Ints p2 = p1;
  p2.insert(p2.end(), t1.tokens.begin(), t1.tokens.end());
  const Ints obs = random_tokens(rng, 8);
  p2.insert(p2.end(), obs.begin(), obs.end());
  const GenerationRequest r2 = request(2, p2, 10, 1.0f, 6, "ep");
  const GenerationResult t2 = run(engine, r2);
  // All but turn 1's last token (sampled, never fed back) had k/v.
  EXPECT_EQ(t2.prefill_reused, static_cast<int>(p1.size() + t1.tokens.size()) - 1);
  EXPECT_EQ(t2.prefill_computed, static_cast<int>(obs.size()) + 1);
  const GenerationResult t2_fresh = fresh(r2);
  EXPECT_EQ(t2_fresh.prefill_reused, 0);
  EXPECT_EQ(t2_fresh.prefill_computed, static_cast<int>(p2.size()));
  expect_same_generation(t2, t2_fresh, 1e-5);

  // Rewritten history: the first 21 tokens (not a block multiple) survive.
  Ints p3(p2.begin(), p2.begin() + 21);
  const Ints tail = random_tokens(rng, 12);
  p3.insert(p3.end(), tail.begin(), tail.end());
  p3[21] = (p2[21] + 1) % 256;  // differs right after the common prefix
  const GenerationRequest r3 = request(3, p3, 8, 1.0f, 7, "ep");
  const GenerationResult t3 = run(engine, r3);
  EXPECT_EQ(t3.prefill_reused, 21);
  EXPECT_EQ(t3.prefill_computed, static_cast<int>(p3.size()) - 21);
  expect_same_generation(t3, fresh(r3), 1e-5);

  // The same prompt again: everything but the last prompt token is reused.
  const GenerationRequest r4 = request(4, p3, 8, 1.0f, 8, "ep");
  const GenerationResult t4 = run(engine, r4);
  EXPECT_EQ(t4.prefill_reused, static_cast<int>(p3.size()) - 1);
  expect_same_generation(t4, fresh(r4), 1e-5);

  // A different first token: nothing to reuse.
  Ints p5 = p3;
  p5[0] = (p5[0] + 1) % 256;
  const GenerationResult t5 = run(engine, request(5, p5, 4, 1.0f, 9, "ep"));
  EXPECT_EQ(t5.prefill_reused, 0);

  // Another session reuses nothing of this one's entry as its own; it copies
  // the prompt they share (RolloutEngine.SharedPrefixesAreCopied).
  const GenerationResult t6 = run(engine, request(6, p5, 4, 1.0f, 9, "other"));
  EXPECT_EQ(t6.prefill_reused, 0);
  EXPECT_EQ(t6.prefill_shared, static_cast<int>(p5.size()) - 1);
  EXPECT_EQ(engine.stats().prefill_reused,
            t2.prefill_reused + t3.prefill_reused + t4.prefill_reused);

  engine.clear_prefix_cache();
  EXPECT_EQ(engine.cache().cached_blocks(), 0);
  EXPECT_EQ(engine.cache().free_blocks(), engine.cache().num_blocks());
}

// Shared prefixes: a group's episodes start from one prompt. Each sequence
// copies the k/v of its longest common prefix with another sequence or a
// session entry instead of computing it, and generates what it generates
// alone (tokens exact, logprobs to the rounding a batch gives the products).
TEST(RolloutEngine, SharedPrefixesAreCopied) {
  Fixture f;
  Rng rng(51);
  EngineConfig cfg = engine_config(8, 4096, 4, 64);
  EngineConfig no_sharing = cfg;
  no_sharing.share_prefixes = false;
  const Ints prompt = random_tokens(rng, 30);
  RolloutEngine engine(f.model, cfg);
  engine.set_policy_version(1);

  // A group of four submitted together: the first computes the prompt, the
  // others sit its step out, then copy all but their last prompt token.
  std::vector<GenerationRequest> group;
  for (uint64_t i = 0; i < 4; ++i) {
    group.push_back(request(i, prompt, 8, 1.0f, 300 + i, "g" + std::to_string(i)));
    engine.submit(group.back());
  }
  auto results = by_id(engine.run_until_done());
  ASSERT_EQ(results.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("group member " + std::to_string(i));
    const GenerationResult alone = generate_alone(f.model, group[i], no_sharing);
    EXPECT_EQ(alone.prefill_shared, 0);
    expect_same_generation(results[i], alone, 1e-6);
    EXPECT_EQ(results[i].prefill_computed, i == 0 ? 30 : 1);
    EXPECT_EQ(results[i].prefill_shared, i == 0 ? 0 : 29);
  }
  EXPECT_EQ(engine.stats().prefill_shared, 3 * 29);

  // A prompt that leaves the group's after 21 tokens (not a block multiple)
  // copies those from a session entry of the group.
  Ints branched(prompt.begin(), prompt.begin() + 21);
  const Ints tail = random_tokens(rng, 9);
  branched.insert(branched.end(), tail.begin(), tail.end());
  branched[21] = (prompt[21] + 1) % 256;
  const GenerationRequest b = request(10, branched, 8, 1.0f, 400, "b");
  engine.submit(b);
  const auto out_b = engine.run_until_done();
  ASSERT_EQ(out_b.size(), 1u);
  EXPECT_EQ(out_b[0].prefill_shared, 21);
  EXPECT_EQ(out_b[0].prefill_computed, 9);
  expect_same_generation(out_b[0], generate_alone(f.model, b, no_sharing), 1e-6);

  // A copy that starts mid-block, after the sequence's own session: 13
  // tokens of "c" are its own, the group's entries hold 17 more.
  const auto one = [&](const GenerationRequest& r) { return run_one(engine, r); };
  Ints c1(prompt.begin(), prompt.begin() + 13);
  for (int32_t x : random_tokens(rng, 5)) c1.push_back(x);
  c1[13] = (prompt[13] + 1) % 256;
  const GenerationResult first_c = one(request(11, c1, 4, 1.0f, 401, "c"));
  EXPECT_EQ(first_c.prefill_shared, 13);
  Ints c2 = prompt;
  for (int32_t x : random_tokens(rng, 4)) c2.push_back(x);
  // leave every group entry at position 30
  while (std::any_of(results.begin(), results.end(), [&](auto& kv) { return kv.second.tokens[0] == c2[30]; }))
    c2[30] = (c2[30] + 1) % 256;
  const GenerationRequest r_c2 = request(12, c2, 6, 1.0f, 402, "c");
  const GenerationResult second_c = one(r_c2);
  EXPECT_EQ(second_c.prefill_reused, 13);
  EXPECT_EQ(second_c.prefill_shared, 17);
  EXPECT_EQ(second_c.prefill_computed, 4);
  expect_same_generation(second_c, generate_alone(f.model, r_c2, no_sharing), 1e-6);

  // A prefix shorter than 8 tokens is computed, not copied: the copy costs
  // about what a forward pass of so few rows does.
  for (int common : {7, 8}) {
    SCOPED_TRACE(std::to_string(common) + " common tokens");
    Ints p(prompt.begin(), prompt.begin() + common);
    for (int32_t x : random_tokens(rng, 6)) p.push_back(x);
    p[common] = (prompt[common] + 1) % 256;  // leaves the prompt: no entry shares more
    const GenerationResult r = one(request(14 + common, p, 2, 1.0f, 410 + common, "m" + std::to_string(common)));
    EXPECT_EQ(r.prefill_shared, common == 8 ? 8 : 0);
    EXPECT_EQ(r.prefill_computed, static_cast<int>(p.size()) - r.prefill_shared);
  }

  // New weights without clearing the cache: the entries of version 1 are
  // their own sessions' to reuse, nobody else's to copy.
  engine.set_policy_version(2);
  const GenerationResult after = one(request(13, prompt, 4, 1.0f, 403, "z"));
  EXPECT_EQ(after.prefill_shared, 0);
  EXPECT_EQ(after.prefill_computed, 30);

  // A sequence begun under older weights is no donor: its k/v mix versions.
  RolloutEngine fresh(f.model, engine_config(8, 4096, 4, 8));
  fresh.set_policy_version(1);
  fresh.submit(request(20, prompt, 4, 1.0f, 500));
  fresh.step();  // 8 of its 30 prompt tokens computed under version 1
  fresh.set_policy_version(2);
  fresh.submit(request(21, prompt, 4, 1.0f, 501));
  auto late = by_id(fresh.run_until_done());
  ASSERT_EQ(late.size(), 2u);
  EXPECT_EQ(late[21].prefill_shared, 0);
  EXPECT_EQ(late[21].prefill_computed, 30);
  EXPECT_EQ(late[21].versions, Ints(late[21].tokens.size(), 2));

  // A sequence that copied under version 1 and waited a step keeps version
  // 1 when version 2 arrives before it computes: its k/v began with the copy.
  RolloutEngine waiting(f.model, engine_config(8, 4096, 4, 8));
  waiting.set_policy_version(1);
  waiting.submit(request(30, prompt, 4, 1.0f, 600));
  waiting.step();                                      // 30 computes [0, 8)
  waiting.submit(request(31, prompt, 4, 1.0f, 601));
  waiting.step();  // 31 copies [0, 8), then sits out while 30 computes [8, 16)
  waiting.set_policy_version(2);
  waiting.clear_prefix_cache();
  auto waited = by_id(waiting.run_until_done());
  ASSERT_EQ(waited.size(), 2u);
  EXPECT_EQ(waited[31].prefill_shared, 8);
  EXPECT_EQ(waited[31].versions, Ints(waited[31].tokens.size(), 1));
}

// An engine at version 1 with one request submitted: id 1, 30 random tokens
// (from `seed`) in session "ep", up to `max_new` generated.
struct OneSession {
  Fixture f;
  RolloutEngine engine{f.model, engine_config(4, 4096, 4, 16)};
  Ints p1;
  OneSession(uint64_t seed, int max_new) {
    Rng rng(seed);
    engine.set_policy_version(1);
    p1 = random_tokens(rng, 30);
    engine.submit(request(1, p1, max_new, 1.0f, 5, "ep"));
  }
};

// New weights mid-sequence: the tokens keep the version the sequence began
// under, and its k/v (computed partly by the old weights) are not kept for the
// session, so the next call of the episode prefills everything anew.
TEST(RolloutEngine, SequenceSpanningNewWeightsIsNotCachedForReuse) {
  OneSession s(41, 12);
  RolloutEngine& engine = s.engine;
  std::vector<GenerationResult> out;
  for (int step = 0; out.empty(); ++step) {
    if (step == 3) {
      engine.set_policy_version(2);
      engine.clear_prefix_cache();
    }
    auto r = engine.step();
    out.insert(out.end(), r.begin(), r.end());
    ASSERT_LT(step, 100);
  }
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].versions, std::vector<int32_t>(out[0].tokens.size(), 1));
  EXPECT_EQ(engine.cache().cached_blocks(), 0);
  engine.submit(request(2, followed_by(s.p1, out[0]), 4, 1.0f, 6, "ep"));
  const auto second = engine.run_until_done();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].prefill_reused, 0);
  EXPECT_EQ(second[0].versions, std::vector<int32_t>(second[0].tokens.size(), 2));
}

// A session entry of older weights is not reused, even when the caller did
// not clear the cache on the new version: its k/v would be stamped with the
// new version.
TEST(RolloutEngine, ASessionOfOlderWeightsIsNotReused) {
  OneSession s(43, 6);
  RolloutEngine& engine = s.engine;
  const auto first = engine.run_until_done();
  ASSERT_EQ(first.size(), 1u);
  const Ints p2 = followed_by(s.p1, first[0]);
  // Same version: the session's prefix is reused (the control).
  engine.submit(request(2, p2, 4, 1.0f, 6, "ep"));
  const auto same = engine.run_until_done();
  ASSERT_EQ(same.size(), 1u);
  EXPECT_GT(same[0].prefill_reused, 0);
  engine.set_policy_version(2);  // no clear_prefix_cache()
  engine.submit(request(3, followed_by(p2, same[0]), 4, 1.0f, 7, "ep"));
  const auto later = engine.run_until_done();
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].prefill_reused, 0);
  EXPECT_EQ(later[0].versions, std::vector<int32_t>(later[0].tokens.size(), 2));
}

TEST(RolloutEngine, SmallPoolQueuesEvictsAndRejects) {
  Fixture f;
  Rng rng(77);
  // 8 blocks of 8 tokens; each request reserves ceil((10 + 14 - 1) / 8) = 3 blocks.
  const EngineConfig small = engine_config(8, 64, 8, 32);
  const EngineConfig large = engine_config(8, 4096, 8, 32);
  std::vector<GenerationRequest> reqs;
  for (uint64_t i = 0; i < 6; ++i)
    reqs.push_back(request(i, random_tokens(rng, 10), 14, 1.0f, 300 + i, "s" + std::to_string(i)));
  reqs.push_back(request(6, random_tokens(rng, 65), 4, 1.0f, 1));   // prompt exceeds the pool
  reqs.push_back(request(7, random_tokens(rng, 40), 100, 1.0f, 2));  // need capped at the pool

  RolloutEngine engine(f.model, small);
  std::vector<GenerationResult> all;
  int steps = 0;
  for (const auto& r : reqs) engine.submit(r);
  while (!engine.idle()) {
    EXPECT_LE(engine.num_running(), 2u);  // 8 blocks hold two reservations
    auto r = engine.step();
    all.insert(all.end(), r.begin(), r.end());
    ASSERT_LT(++steps, 1000) << "engine does not finish";
  }
  auto results = by_id(all);
  ASSERT_EQ(results.size(), reqs.size());
  EXPECT_GT(engine.cache().evictions(), 0);  // finished sessions made room for later requests

  EXPECT_EQ(results[6].finish, FinishReason::kError);
  EXPECT_NE(results[6].error.find("kv_cache_tokens"), std::string::npos) << results[6].error;
  EXPECT_TRUE(results[6].tokens.empty());
  EXPECT_EQ(engine.stats().errors, 1);

  for (uint64_t i = 0; i < 6; ++i) {
    GenerationRequest r = reqs[i];
    expect_same_generation(results[i], generate_alone(f.model, r, large), 1e-5);
  }
  // Request 7 fills the whole pool: positions 0..63 hold k/v, so 64 - 40 + 1 tokens.
  EXPECT_EQ(results[7].finish, FinishReason::kCacheLimit);
  ASSERT_EQ(results[7].tokens.size(), 25u);
  const GenerationResult unbounded = generate_alone(f.model, reqs[7], large);
  EXPECT_EQ(results[7].tokens, Ints(unbounded.tokens.begin(), unbounded.tokens.begin() + 25));
}

}  // namespace
}  // namespace forge
