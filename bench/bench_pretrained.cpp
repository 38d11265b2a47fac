// A real pretrained model in forge against Hugging Face transformers on torch,
// same machine, same threads, in one run (bench/hf_pretrained.py times the
// transformers side):
//
//   train    tokens/s of one full step (forward, backward, clipping, AdamW)
//            on `seqs` sequences of `seq` tokens, token-mean NLL
//   prefill  prompt tokens/s at batch 1, 16 and 64: generating one token
//            after prompts of `prompt` random tokens
//   decode   decode tokens/s at the same batches: generating `new` greedy
//            tokens (no stop token) minus generating one, b x (new - 1) tokens
//            over the difference (forge: the rollout engine; transformers:
//            generate)
//   memory   (--memory) the peak resident memory of this process after one
//            AdamW step on --memory_tokens tokens in bins of --bin tokens
//
//   bench_pretrained [--model=PATH] [--seqs=4] [--seq=256] [--prompt=64] [--new=32]
//                    [--batches=1,16,64] [--reps=2] [--no-hf] [--torch_blas_core=auto|installed|NAME]
//                    [--memory] [--memory_tokens=8192] [--bin=1024]
// The model defaults to the SmolLM2-135M-Instruct GGUF in the cache
// ($FORGE_CACHE or ~/.cache/forge); without it the benchmark says so and
// exits 0 with "model": "none" in its JSON line. The transformers twin runs on
// the OpenBLAS core --torch_blas_core picks (as in bench_train_step; the one it
// ran is "hf_blas_core" in the JSON line). Its figures are null (nan in the
// table) with --no-hf, or when the reference packages are not installed (the
// table says so); a twin that fails otherwise is an error, exit 1. So is a
// decode time that does not exceed the one-token time (a noisy machine, or
// --new too small for the timer): the difference is the measurement.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "bench_util.hpp"
#include "core/cache_dir.hpp"
#include "core/peak_memory.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"
#include "pretrained/pretrained_model.hpp"

using namespace forge;

namespace {

std::string default_model() { return cache_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }


// What the transformers side reported: its figures ("train", "prefill_B",
// "decode_B"), the OpenBLAS core it ran on, or why it could not run.
struct HfResult {
  std::map<std::string, double> figures;
  std::string blas_core = "-";
  std::string unavailable;  // the reference packages are not installed
  double get(const std::string& k) const {
    const auto it = figures.find(k);
    return it == figures.end() ? std::nan("") : it->second;
  }
};

// Runs bench/hf_pretrained.py (`env`: the OpenBLAS core's prefix); an error
// naming its output when it reports neither every figure nor "hf_unavailable".
HfResult run_hf(const std::string& env, const std::string& args, const std::vector<int>& batches) {
  const std::string cmd = env + bench::python() + " " + bench::shell_quoted(bench::script("hf_pretrained.py")) + " " + args;
  const std::vector<std::string> lines = bench::command_lines(cmd);
  HfResult r;
  for (const std::string& line : lines) {
    char word[64];
    double v = 0;
    int b = 0;
    if (line.rfind("hf_unavailable ", 0) == 0) r.unavailable = line.substr(15);
    else if (std::sscanf(line.c_str(), "hf_decode_tok_s %d %lf", &b, &v) == 2) r.figures["decode_" + std::to_string(b)] = v;
    else if (std::sscanf(line.c_str(), "hf_prefill_tok_s %d %lf", &b, &v) == 2) r.figures["prefill_" + std::to_string(b)] = v;
    else if (std::sscanf(line.c_str(), "hf_train_tok_s %lf", &v) == 1) r.figures["train"] = v;
    else if (std::sscanf(line.c_str(), "hf_blas_core %63s", word) == 1) r.blas_core = word;
  }
  if (!r.unavailable.empty()) return r;
  std::vector<std::string> missing;
  for (const int b : batches)
    for (const std::string& k : {"prefill_" + std::to_string(b), "decode_" + std::to_string(b)})
      if (!(r.get(k) > 0)) missing.push_back(k);
  if (!(r.get("train") > 0)) missing.insert(missing.begin(), "train");
  if (!missing.empty()) {
    for (const std::string& line : lines) std::fprintf(stderr, "%s\n", line.c_str());
    throw std::runtime_error("the transformers twin reported no " + missing.front() +
                             " figure (its output is above; the command: " + cmd + "); --no-hf leaves it out");
  }
  return r;
}

// b x (n - 1) decode tokens over the time past the one-token run; an error
// when there is none (the difference is the measurement: clamping it made
// rates of 1e9 tokens/s).
double decode_rate(int b, int new_tokens, double full, double first) {
  if (!(full > first))
    throw std::runtime_error("decode at batch " + std::to_string(b) + ": generating " + std::to_string(new_tokens) +
                             " tokens took " + std::to_string(full) + " s, not longer than one token (" +
                             std::to_string(first) + " s); the machine is too busy or --new too small: "
                             "raise --new or --reps");
  return b * (new_tokens - 1) / (full - first);
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int seqs = flags.get("seqs", 4), seq = flags.get("seq", 256), prompt = flags.get("prompt", 64);
  const int new_tokens = flags.get("new", 32), reps = flags.get("reps", 2);
  const bool with_hf = !flags.on("no-hf"), memory = flags.on("memory");
  const int memory_tokens = flags.get("memory_tokens", 8192), bin = flags.get("bin", 1024);
  const std::string model_path = flags.get("model", default_model());
  const std::vector<double> batch_list = flags.numbers("batches", "1,16,64");
  const bool model_given = flags.given("model");
  const std::string hf_core_flag = flags.get("torch_blas_core", std::string("auto"));
  flags.finish();
  if (memory)
    flags.refuse({"seqs", "reps", "prompt", "new", "batches", "no-hf", "torch_blas_core"}, "does nothing with --memory");
  else flags.refuse({"memory_tokens", "bin"}, "applies only with --memory");
  if (!with_hf) flags.refuse({"torch_blas_core"}, "sets the twin's OpenBLAS core: it does nothing with --no-hf");
  const std::string hf_env = bench::twin_blas_env(hf_core_flag);
  if (seqs < 1 || prompt < 1 || new_tokens < 1 || reps < 1 || memory_tokens < 1 || bin < 1)
    bench::Flags::usage("--seqs, --prompt, --new, --reps, --memory_tokens and --bin must be at least 1");
  if (new_tokens < 2) bench::Flags::usage("--new must be at least 2 (decode tokens/s counts the tokens after the first)");
  if (seq < 2) bench::Flags::usage("--seq must be at least 2 (a training sequence predicts its next tokens)");
  if (memory && bin < std::min(seq, memory_tokens))
    bench::Flags::usage("--bin (" + std::to_string(bin) + ") must hold a sequence of --seq tokens (" +
                        std::to_string(std::min(seq, memory_tokens)) + ")");
  std::vector<int> batches;
  std::string batches_text;
  for (const double b : batch_list) {
    if (b < 1 || b > 4096 || b != static_cast<int>(b)) bench::Flags::usage("--batches are whole numbers in [1, 4096]");
    batches.push_back(static_cast<int>(b));
    if (!batches_text.empty()) batches_text += ',';
    batches_text += std::to_string(batches.back());
  }
  const int threads = omp_get_max_threads();
  if (model_given && !std::filesystem::exists(model_path)) bench::Flags::usage("--model: no file '" + model_path + "'");
  if (!std::filesystem::exists(model_path)) {
    std::printf("bench_pretrained: no model at %s (run tools/setup.sh)\n", model_path.c_str());
    bench::print_json({{"model", "\"none\""}});
    return 0;
  }

  PretrainedModel pm = load_pretrained(model_path);
  auto backend = make_backend("cpu");
  PolicyModel model(pm.config, *backend);
  model.set_params(pm.weights);
  std::vector<float>().swap(pm.weights);  // as the learner does (learner/trainable_policy.cpp)
  OptimConfig oc;
  oc.lr = 1e-5f;
  AdamW opt(oc, model);
  const int V = pm.config.vocab;
  Rng rng(3);
  const auto random_sample = [&](int n) {
    Sample s;
    for (int t = 0; t < n; ++t) s.tokens.push_back(static_cast<int32_t>(rng.below(V)));
    s.trainable.assign(n, 1);
    s.trainable[0] = 0;
    return s;
  };

  if (memory) {
    std::vector<Sample> samples;
    for (int n = 0; n < memory_tokens; n += seq) samples.push_back(random_sample(std::min(seq, memory_tokens - n)));
    Stopwatch sw;
    model.zero_grads();
    supervised_forward_backward(model, samples, false, bin);
    opt.step();
    const double rss = peak_resident_gib();
    std::printf("bench_pretrained --memory: %s, one AdamW step on %d tokens in bins of %d: %.1f s, peak RSS %.2f GiB\n",
                pm.name.c_str(), memory_tokens, bin, sw.seconds(), rss);
    bench::print_json({{"tokens", bench::num(memory_tokens)}, {"bin", bench::num(bin)},
                       {"peak_rss_gib", bench::num(rss)}, {"threads", bench::num(threads)}});
    return 0;
  }

  // Train step.
  std::vector<Sample> samples;
  for (int i = 0; i < seqs; ++i) samples.push_back(random_sample(seq));
  const double train_s = bench::median_seconds(1, reps, [&] {
    model.zero_grads();
    supervised_forward_backward(model, samples, false, seqs * seq);
    opt.step();
  });
  const double forge_train = seqs * seq / train_s;

  // Decode: generating one token (prefill) and `new_tokens` (prefill + decode)
  // at each batch size; the difference is the decode time.
  std::vector<double> forge_prefill, forge_decode;
  for (int b : batches) {
    const auto generate = [&](int n) {
      EngineConfig ec;
      ec.max_batch = b;
      ec.max_seq_len = prompt + n + 1;
      // whole blocks per sequence: the engine keeps floor(tokens / block_size)
      // blocks, and a sequence short of one stopped early, its tokens counted
      const int blocks = (ec.max_seq_len + ec.block_size - 1) / ec.block_size;
      ec.kv_cache_tokens = static_cast<int64_t>(b) * blocks * ec.block_size;
      ec.prefill_chunk = b * prompt;
      RolloutEngine engine(model, ec);
      Rng prng(7);
      for (int i = 0; i < b; ++i) {
        GenerationRequest r;
        r.id = static_cast<uint64_t>(i);
        for (int t = 0; t < prompt; ++t) r.prompt.push_back(static_cast<int32_t>(prng.below(V)));
        r.sampling.temperature = 0;
        r.sampling.max_new_tokens = n;
        engine.submit(r);
      }
      for (const GenerationResult& r : engine.run_until_done())
        if (r.finish != FinishReason::kLength) {
          std::fprintf(stderr, "error: request %llu of batch %d ended '%s' before its %d tokens\n",
                       static_cast<unsigned long long>(r.id), b, to_string(r.finish), n);
          std::exit(1);
        }
    };
    const double first = bench::median_seconds(1, reps, [&] { generate(1); });
    const double full = bench::median_seconds(1, reps, [&] { generate(new_tokens); });
    forge_prefill.push_back(b * prompt / first);
    forge_decode.push_back(decode_rate(b, new_tokens, full, first));
  }

  // Without the twin (--no-hf, or its packages missing) its figures are NaN:
  // nan in the table, null in the JSON line, and so are the ratios.
  HfResult hf;
  if (with_hf)
    hf = run_hf(hf_env,
                "--model " + bench::shell_quoted(model_path) + " --threads " + std::to_string(threads) + " --seqs " +
                    std::to_string(seqs) + " --seq " + std::to_string(seq) + " --prompt " + std::to_string(prompt) +
                    " --new " + std::to_string(new_tokens) + " --batches " + batches_text + " --reps " +
                    std::to_string(reps),
                batches);
  const double hf_train = hf.get("train");

  std::printf("bench_pretrained: %s (%zu parameters), %d threads; train %d x %d tokens; decode %d prompt + %d new tokens\n",
              pm.name.c_str(), model.layout().total, threads, seqs, seq, prompt, new_tokens);
  if (!hf.unavailable.empty()) std::printf("transformers: not measured (%s)\n", hf.unavailable.c_str());
  else if (with_hf) std::printf("transformers: OpenBLAS core %s\n", hf.blas_core.c_str());
  std::printf("%-26s %12s %14s %8s\n", "metric", "forge", "transformers", "ratio");
  std::printf("%-26s %12.1f %14.1f %8.2f\n", "train tokens/s", forge_train, hf_train, forge_train / hf_train);
  std::vector<std::pair<std::string, std::string>> json = {
      {"model", bench::json_string(pm.name)}, {"threads", bench::num(threads)}, {"train_tok_s", bench::num(forge_train)},
      {"hf_train_tok_s", bench::num(hf_train)}, {"train_ratio", bench::num(forge_train / hf_train)},
      {"hf_blas_core", with_hf && hf.unavailable.empty() ? bench::json_string(hf.blas_core) : "null"}};
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::string b = std::to_string(batches[i]);
    const double h = hf.get("decode_" + b), hp = hf.get("prefill_" + b);
    std::printf("%-26s %12.1f %14.1f %8.2f\n", ("decode tokens/s, batch " + b).c_str(), forge_decode[i], h,
                forge_decode[i] / h);
    std::printf("%-26s %12.1f %14.1f %8.2f\n", ("prefill tokens/s, batch " + b).c_str(), forge_prefill[i], hp,
                forge_prefill[i] / hp);
    json.push_back({"prefill_tok_s_b" + b, bench::num(forge_prefill[i])});
    json.push_back({"hf_prefill_tok_s_b" + b, bench::num(hp)});
    json.push_back({"decode_tok_s_b" + b, bench::num(forge_decode[i])});
    json.push_back({"hf_decode_tok_s_b" + b, bench::num(h)});
    json.push_back({"decode_ratio_b" + b, bench::num(forge_decode[i] / h)});
  }
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
