// forge_oracle_dump: writes a tiny random policy, a batch of samples merged
// into a prefix forest and forge's forward/backward results as .npy files, for
// the PyTorch oracle (tests/reference/test_torch_oracle.py and
// test_finite_difference.py) to recompute.
//
//   forge_oracle_dump OUT_DIR [--seed N] [--variant base|pretrained_features]
//                                            the dump (layout below)
//   forge_oracle_dump --npy-info FILE        prints "dtype shape sum" of a .npy
//                                            (lets Python check the reader on
//                                            files NumPy wrote)
//
// Model: vocab 272 (the tokenizer's), d_model 64, 2 layers, 4 query heads and
// 2 kv heads (grouped-query), ffn 96, on the CPU backend. init_random with std
// 0.15, then norm weights drawn from 1 + 0.25 N(0, 1) and the LM head doubled,
// so that attention and softmax are far from uniform and every norm matters.
// Variant pretrained_features: what real checkpoints bring besides, all at
// once: a head dimension of 24 (not d_model / n_heads = 16), tied
// embeddings (no lm_head: the embedding doubled instead), a q/k/v bias
// (Qwen2) and Llama 3's RoPE rescaling (factor 8, original_max_positions 64,
// low and high frequency factors 1 and 4: with positions up to ~60, all
// three bands of frequencies occur).
//
// Batch: two prompt groups of multi-turn episodes (later turns hold the earlier
// generations as context; two episodes share the start of their first
// generation, so generated nodes carry several references), a duplicate
// sample, a sample that is a proper prefix of another, a prefix marked
// trainable on previously generated tokens, a second prompt that branches
// right after the first token, a tree with another first token and a lone
// token with no loss. Before the dump, the .npy writer and reader are checked
// against each other and on malformed files.
//
// OUT_DIR/
//   manifest.json                 config, parameter names and shapes, cases
//   params/<name>.npy             float32, by ParamLayout name and shape
//   samples/{tokens,trainable,offsets,coef}.npy   the unmerged samples
//                                 (flattened; sample s is [offsets[s], offsets[s+1]))
//                                 and the loss coefficient per (sample, position)
//   cases/<case>/bin<k>/*.npy     token, position, subtree_end, head_row,
//                                 row_begin, target, ref_begin, ref_sample,
//                                 ref_position, weights, logits [R,V] (with the
//                                 temperature applied), logprob [E], entropy [R],
//                                 loss (scalar f8)
//   cases/<case>/grads/<name>.npy gradient after all bins of the case
//   cases/<case>/loss.npy         sum of the bins' losses (f8)
//
// The loss is  L = -sum_e w_e logprob_e,  w_e = sum over the references of entry
// e of coef[sample, position] (float32): the tree form of the linear loss
// -sum_{s,p} coef[s,p] logprob(s,p). backward() gets dlogprob = -w. Cases:
//   one_bin     merged forest in one bin, inv_temperature 0.7
//   split       merged forest, max_tokens = longest sample + 6, which splits
//               the big tree over at least 3 bins (gradients accumulate), 0.7
//   linear      every sample its own chain (merge = false), one bin, 0.7
//   one_bin_t1  as one_bin with inv_temperature 1
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/npy.hpp"
#include "core/rng.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace fs = std::filesystem;
using namespace forge;

namespace {

using Ints = std::vector<int32_t>;

std::string json_shape(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

std::string json_num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// ---- the batch ----------------------------------------------------------------

struct Batch {
  std::vector<Sample> samples;
  std::vector<std::vector<float>> coef;  // per sample and position; 0 where not trainable
};

class BatchBuilder {
 public:
  explicit BatchBuilder(uint64_t seed) : rng_(seed) {}

  Ints random_tokens(int n) {
    Ints t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng_.below(256));
    return t;
  }
  int between(int lo, int hi) { return lo + static_cast<int>(rng_.below(hi - lo + 1)); }

  // context (not trainable) followed by generated tokens (trainable)
  void add(const Ints& context, const Ints& generated) {
    Sample s;
    s.tokens = context;
    s.tokens.insert(s.tokens.end(), generated.begin(), generated.end());
    s.trainable.assign(context.size(), 0);
    s.trainable.resize(s.tokens.size(), 1);
    batch_.samples.push_back(std::move(s));
  }
  void add_sample(Sample s) { batch_.samples.push_back(std::move(s)); }

  // A group of episodes sharing `prompt`; every turn is one sample whose
  // context is the prompt plus the earlier turns and observations. Episode 1's
  // first generation starts like episode 0's (shared trainable nodes, then a
  // branch inside generated text).
  void group(const Ints& prompt, int episodes, int turns) {
    Ints first_gen0;
    for (int e = 0; e < episodes; ++e) {
      Ints history = prompt;
      for (int t = 0; t < turns; ++t) {
        history.push_back(kAssistant);
        Ints gen = random_tokens(between(5, 11));
        if (t == 0 && e == 0) first_gen0 = gen;
        if (t == 0 && e == 1)
          std::copy(first_gen0.begin(), first_gen0.begin() + 4, gen.begin());
        gen.push_back(t + 1 < turns ? kToolCallClose : kEndOfTurn);
        add(history, gen);
        history.insert(history.end(), gen.begin(), gen.end());
        history.push_back(kTool);
        Ints obs = random_tokens(between(4, 7));
        history.insert(history.end(), obs.begin(), obs.end());
        history.push_back(kEndOfTurn);
      }
    }
  }

  Batch finish() {
    for (const Sample& s : batch_.samples) {
      std::vector<float> c(s.tokens.size(), 0.0f);
      for (size_t p = 0; p < c.size(); ++p)
        if (s.trainable[p]) c[p] = static_cast<float>(0.5 * rng_.normal());
      batch_.coef.push_back(std::move(c));
    }
    return batch_;
  }

  Batch& batch() { return batch_; }

 private:
  Rng rng_;
  Batch batch_;
};

Batch make_batch(uint64_t seed) {
  BatchBuilder b(seed * 7919 + 17);
  // Group A: 3 episodes x 3 turns on one prompt.
  Ints prompt_a{kBos, kSystem};
  for (int32_t t : b.random_tokens(12)) prompt_a.push_back(t);
  prompt_a.push_back(kEndOfTurn);
  prompt_a.push_back(kUser);
  for (int32_t t : b.random_tokens(8)) prompt_a.push_back(t);
  prompt_a.push_back(kEndOfTurn);
  b.group(prompt_a, 3, 3);
  // Group C shares only the first token (kBos) with A: a branch right after the root.
  Ints prompt_c{kBos, kUser};
  for (int32_t t : b.random_tokens(11)) prompt_c.push_back(t);
  prompt_c.push_back(kEndOfTurn);
  b.group(prompt_c, 2, 2);
  auto& samples = b.batch().samples;
  // A duplicate sample (every reference doubles).
  samples.push_back(samples[7]);  // A, episode 2, turn 1
  // A sample that is a proper prefix of another (A, episode 0, turn 2), trainable on its tail.
  {
    Sample p = samples[2];
    p.tokens.resize(p.tokens.size() - 3);
    p.trainable.resize(p.tokens.size());
    samples.push_back(p);
  }
  // A prefix ending inside earlier generated text, with those tokens marked
  // trainable (trainable in two samples through different turns).
  {
    Sample p = samples[5];  // A, episode 1, turn 2
    p.tokens.resize(prompt_a.size() + 5);
    p.trainable.assign(p.tokens.size(), 0);
    for (size_t i = p.tokens.size() - 3; i < p.tokens.size(); ++i) p.trainable[i] = 1;
    samples.push_back(p);
  }
  // Another first token: a tree of its own.
  {
    Ints ctx{kSystem};
    for (int32_t t : b.random_tokens(9)) ctx.push_back(t);
    ctx.push_back(kAssistant);
    b.add(ctx, b.random_tokens(6));
  }
  // A lone token with no loss (a root without entries).
  b.add_sample(Sample{{kFirstReserved}, {0}});
  return b.finish();
}

// ---- the dump -----------------------------------------------------------------

struct CaseSpec {
  std::string name;
  bool merge;
  int32_t max_tokens;
  float inv_temperature;
};

struct CaseResult {
  int bins = 0;
  std::vector<int> tokens, rows, entries;
  double loss = 0;
};

void save_param_like(const ParamLayout& layout, const std::vector<float>& flat, const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& t : layout.tensors)
    npy::save((dir / (t.name + ".npy")).string(), flat.data() + t.offset, t.shape);
}

CaseResult run_case(PolicyModel& model, const Batch& batch, const CaseSpec& spec,
                    const fs::path& dir) {
  const PrefixForest forest = build_prefix_forest(batch.samples, spec.merge);
  const std::vector<PackedBin> bins = pack_forest(forest, spec.max_tokens);
  const int V = model.config().vocab;
  CaseResult res;
  res.bins = static_cast<int>(bins.size());
  model.zero_grads();
  for (size_t k = 0; k < bins.size(); ++k) {
    const PackedBin& bin = bins[k];
    const int T = bin.tokens(), R = bin.rows(), E = bin.entries();
    std::vector<float> w(E);
    Ints ref_sample, ref_position;
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int r = bin.ref_begin[e]; r < bin.ref_begin[e + 1]; ++r) {
        const SampleRef& ref = bin.refs[r];
        s += batch.coef[ref.sample][ref.position];
        ref_sample.push_back(ref.sample);
        ref_position.push_back(ref.position);
      }
      w[e] = static_cast<float>(s);
    }
    BinForward fw;
    fw.want_logits = true;
    model.forward(bin, spec.inv_temperature, &fw);
    FORGE_CHECK(static_cast<int>(fw.logprob.size()) == E, "logprob size");
    FORGE_CHECK(fw.logits.size() == static_cast<size_t>(R) * V, "logits size");
    double loss = 0;
    std::vector<float> dlogprob(E);
    for (int e = 0; e < E; ++e) {
      loss -= static_cast<double>(w[e]) * fw.logprob[e];
      dlogprob[e] = -w[e];
    }
    model.backward(dlogprob);
    res.loss += loss;
    res.tokens.push_back(T);
    res.rows.push_back(R);
    res.entries.push_back(E);

    const fs::path b = dir / ("bin" + std::to_string(k));
    fs::create_directories(b);
    auto f = [&](const char* name) { return (b / (std::string(name) + ".npy")).string(); };
    npy::save(f("token"), bin.token);
    npy::save(f("position"), bin.position);
    npy::save(f("subtree_end"), bin.subtree_end);
    npy::save(f("head_row"), bin.head_row);
    npy::save(f("row_begin"), bin.row_begin);
    npy::save(f("target"), bin.target);
    npy::save(f("ref_begin"), bin.ref_begin);
    npy::save(f("ref_sample"), ref_sample);
    npy::save(f("ref_position"), ref_position);
    npy::save(f("weights"), w);
    npy::save(f("logits"), fw.logits, {R, V});
    npy::save(f("logprob"), fw.logprob);
    npy::save(f("entropy"), fw.entropy);
    npy::save_scalar(f("loss"), loss);
  }
  save_param_like(model.layout(), model.get_grads(), dir / "grads");
  npy::save_scalar((dir / "loss.npy").string(), res.loss);
  return res;
}

// Round trip of the writer through the reader, and the reader's errors on
// malformed files (each must be an InputError naming the file).
void npy_self_check(const fs::path& dir) {
  fs::create_directories(dir);
  const std::string p = (dir / "roundtrip.npy").string();
  std::vector<double> d{1.5, -2.25, 1e-300, 3.0, 0.0, -0.0};
  npy::save(p, d, {2, 3});
  npy::Array a = npy::load(p);
  FORGE_CHECK(a.dtype == npy::DType::kF64 && a.shape == (std::vector<int64_t>{2, 3}), "npy shape");
  const auto back = a.values<double>();
  FORGE_CHECK(std::memcmp(back.data(), d.data(), d.size() * sizeof(double)) == 0, "npy f8 bytes");
  npy::save_scalar(p, int32_t{-7});
  a = npy::load(p);
  FORGE_CHECK(a.shape.empty() && a.values<int32_t>() == Ints{-7}, "npy scalar");
  npy::save(p, std::vector<float>{}, {0, 5});
  a = npy::load(p);
  FORGE_CHECK(a.size() == 0 && a.shape == (std::vector<int64_t>{0, 5}), "npy empty");

  std::vector<float> f{1, 2, 3, 4};
  npy::save(p, f);
  std::ifstream in(p, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto expect_bad = [&](const std::string& bytes, const char* what, const char* says = "") {
    const std::string q = (dir / "malformed.npy").string();
    std::ofstream(q, std::ios::binary) << bytes;
    bool threw = false;
    try {
      npy::load(q);
    } catch (const InputError& e) {
      const std::string text = e.what();
      threw = text.find(q) != std::string::npos && text.find(says) != std::string::npos;
    }
    FORGE_CHECK(threw, std::string("npy reader accepted a malformed file: ") + what);
    fs::remove(q);
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  expect_bad(good.substr(0, good.size() - 1), "truncated data");
  expect_bad(good + "x", "trailing bytes");
  expect_bad("NUMPY" + good.substr(6), "bad magic");
  expect_bad(replaced("'<f4'", "'>f4'"), "big-endian dtype");
  expect_bad(replaced("'<f4'", "'<i8'"), "unsupported dtype");
  expect_bad(replaced("False", "True "), "Fortran order");
  expect_bad(replaced("(4,)", "(5,)"), "shape larger than the data");
  expect_bad(good.substr(0, 20), "truncated header");
  // A key given twice, written into the header's padding (its length stays).
  std::string twice = good;
  const std::string again = "'shape': (4,), ";
  const size_t close = twice.find('}');
  FORGE_CHECK(twice.compare(close + 1, again.size(), std::string(again.size(), ' ')) == 0,
              "npy header padding too short for the repeated-key case");
  twice.replace(close, 1 + again.size(), again + "}");
  expect_bad(twice, "repeated header key", "'shape' appears twice");
  bool threw = false;
  try {
    a = npy::load(p);
    a.values<int32_t>();
  } catch (const InputError& e) {
    threw = std::string(e.what()).find(p) != std::string::npos;
  }
  FORGE_CHECK(threw, "values<int32_t>() of a float32 file did not throw an InputError naming it");
  fs::remove(p);
  fs::remove(dir);
}

int npy_info(const std::string& path) {
  const npy::Array a = npy::load(path);
  double sum = 0;
  for (double v : a.as_double()) sum += v;
  std::cout << npy::descr(a.dtype) << " " << json_shape(a.shape) << " " << json_num(sum) << "\n";
  return 0;
}

int run(int argc, char** argv) {
  std::string out, variant = "base";
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (arg == "--variant" && i + 1 < argc) {
      variant = argv[++i];
      if (variant != "base" && variant != "pretrained_features")
        throw InputError("--variant '" + variant + "': base or pretrained_features");
    } else if (arg == "--npy-info" && i + 1 < argc) {
      return npy_info(argv[++i]);
    } else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: forge_oracle_dump OUT_DIR [--seed N] [--variant base|pretrained_features] | "
                   "--npy-info FILE\n";
      return 0;
    } else if (!arg.empty() && arg[0] != '-' && out.empty()) {
      out = arg;
    } else {
      throw InputError("unexpected argument '" + arg + "' (usage: forge_oracle_dump OUT_DIR [--seed N] [--variant V])");
    }
  }
  if (out.empty()) throw InputError("usage: forge_oracle_dump OUT_DIR [--seed N]");
  const fs::path root(out);
  fs::create_directories(root);
  npy_self_check(root / "npy_self_check");

  ModelConfig cfg;
  cfg.vocab = ByteTokenizer::kVocabSize;
  cfg.d_model = 64;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.ffn_dim = 96;
  cfg.rope_base = 10000.0f;
  cfg.norm_eps = 1e-5f;
  if (variant == "pretrained_features") {
    cfg.head_dim_override = 24;
    cfg.tied_embeddings = true;
    cfg.qkv_bias = true;
    cfg.rope_scaling = {8.0f, 1.0f, 4.0f, 64};
  }
  const float init_std = 0.15f;

  auto backend = make_backend("cpu");
  PolicyModel model(cfg, *backend);
  model.init_random(seed, init_std);
  {
    // Norm weights away from 1, so that their gradients and their use matter;
    // a larger LM head, so that the softmax is far from flat (logit std ~2).
    std::vector<float> p = model.get_params();
    Rng rng(seed ^ 0xA5A5A5A5ull);
    for (const auto& t : model.layout().tensors) {
      if (t.shape.size() == 1)
        for (size_t i = 0; i < t.numel; ++i)
          p[t.offset + i] = static_cast<float>(1.0 + 0.25 * rng.normal());
      if (t.name == (cfg.tied_embeddings ? "embed" : "lm_head"))
        for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] *= 2.0f;
      if (t.name.ends_with(".bqkv"))  // a bias of the weights' scale, not the norms'
        for (size_t i = 0; i < t.numel; ++i) p[t.offset + i] = static_cast<float>(0.3 * rng.normal());
    }
    model.set_params(p);
  }
  save_param_like(model.layout(), model.get_params(), root / "params");

  const Batch batch = make_batch(seed);
  {
    const fs::path sd = root / "samples";
    fs::create_directories(sd);
    Ints tokens, trainable, offsets{0};
    std::vector<float> coef;
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const Sample& x = batch.samples[s];
      tokens.insert(tokens.end(), x.tokens.begin(), x.tokens.end());
      for (uint8_t t : x.trainable) trainable.push_back(t);
      coef.insert(coef.end(), batch.coef[s].begin(), batch.coef[s].end());
      offsets.push_back(static_cast<int32_t>(tokens.size()));
    }
    npy::save((sd / "tokens.npy").string(), tokens);
    npy::save((sd / "trainable.npy").string(), trainable);
    npy::save((sd / "offsets.npy").string(), offsets);
    npy::save((sd / "coef.npy").string(), coef);
  }

  const PrefixForest forest = build_prefix_forest(batch.samples, true);
  int32_t longest = 0;
  for (const Sample& s : batch.samples) longest = std::max<int32_t>(longest, s.tokens.size());
  const int32_t linear = static_cast<int32_t>(linear_token_count(batch.samples));
  const std::vector<CaseSpec> cases{
      {"one_bin", true, forest.size(), 0.7f},
      {"split", true, longest + 6, 0.7f},
      {"linear", false, linear, 0.7f},
      {"one_bin_t1", true, forest.size(), 1.0f},
  };
  std::vector<CaseResult> results;
  for (const CaseSpec& c : cases) {
    results.push_back(run_case(model, batch, c, root / "cases" / c.name));
    std::cerr << "case " << c.name << ": " << results.back().bins << " bin(s), loss "
              << json_num(results.back().loss) << "\n";
  }
  FORGE_CHECK(results[0].bins == 1, "one_bin case packed into several bins");
  FORGE_CHECK(results[1].bins >= 3, "split case did not split into at least 3 bins");

  std::ostringstream m;
  m << "{\n  \"format\": 1,\n  \"seed\": " << seed << ",\n  \"init_std\": " << json_num(init_std)
    << ",\n  \"config\": {\"vocab\": " << cfg.vocab << ", \"d_model\": " << cfg.d_model
    << ", \"n_layers\": " << cfg.n_layers << ", \"n_heads\": " << cfg.n_heads
    << ", \"n_kv_heads\": " << cfg.n_kv_heads << ", \"ffn_dim\": " << cfg.ffn_dim
    << ", \"rope_base\": " << json_num(cfg.rope_base) << ", \"norm_eps\": " << json_num(cfg.norm_eps)
    << ", \"head_dim\": " << cfg.head_dim() << ", \"tied_embeddings\": " << (cfg.tied_embeddings ? "true" : "false")
    << ", \"qkv_bias\": " << (cfg.qkv_bias ? "true" : "false")
    << ", \"rope_scaling\": {\"factor\": " << json_num(cfg.rope_scaling.factor)
    << ", \"low_freq_factor\": " << json_num(cfg.rope_scaling.low_freq_factor)
    << ", \"high_freq_factor\": " << json_num(cfg.rope_scaling.high_freq_factor)
    << ", \"original_max_positions\": " << cfg.rope_scaling.original_max_positions << "}"
    << "},\n  \"variant\": \"" << variant << "\",\n  \"params\": [\n";
  const auto& ts = model.layout().tensors;
  for (size_t i = 0; i < ts.size(); ++i)
    m << "    {\"name\": \"" << ts[i].name << "\", \"shape\": " << json_shape(ts[i].shape) << "}"
      << (i + 1 < ts.size() ? ",\n" : "\n");
  m << "  ],\n  \"samples\": " << batch.samples.size() << ",\n  \"linear_tokens\": " << linear
    << ",\n  \"tree_tokens\": " << forest.size() << ",\n  \"cases\": [\n";
  for (size_t i = 0; i < cases.size(); ++i) {
    const CaseResult& r = results[i];
    std::vector<int64_t> T(r.tokens.begin(), r.tokens.end()), R(r.rows.begin(), r.rows.end()),
        E(r.entries.begin(), r.entries.end());
    m << "    {\"name\": \"" << cases[i].name << "\", \"merge\": " << (cases[i].merge ? "true" : "false")
      << ", \"max_tokens\": " << cases[i].max_tokens
      << ", \"inv_temperature\": " << json_num(cases[i].inv_temperature) << ", \"bins\": " << r.bins
      << ", \"tokens\": " << json_shape(T) << ", \"rows\": " << json_shape(R)
      << ", \"entries\": " << json_shape(E) << ", \"loss\": " << json_num(r.loss) << "}"
      << (i + 1 < cases.size() ? ",\n" : "\n");
  }
  m << "  ]\n}\n";
  std::ofstream(root / "manifest.json") << m.str();
  std::cerr << "wrote " << root.string() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    std::cerr << "forge_oracle_dump: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "forge_oracle_dump: error: " << e.what() << "\n";
    return 1;
  }
}
