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
//                    [--batches=1,16,64] [--reps=2] [--no-hf] [--memory] [--memory_tokens=8192]
//                    [--bin=1024]
// The model defaults to the SmolLM2-135M-Instruct GGUF in the cache
// ($FORGE_CACHE or ~/.cache/forge); without it the benchmark says so and
// exits 0 with "model": "none" in its JSON line.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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


// The transformers side: "hf_train_tok_s X" and "hf_decode_tok_s B X" lines.
std::vector<std::pair<std::string, double>> run_hf(const std::string& args) {
  const std::string cmd = bench::python() + " " + bench::shell_quoted(bench::script("hf_pretrained.py")) + " " + args;
  std::vector<std::pair<std::string, double>> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[256], key[64];
  double v = 0;
  int b = 0;
  while (fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "hf_decode_tok_s %d %lf", &b, &v) == 2) out.push_back({"decode_" + std::to_string(b), v});
    else if (std::sscanf(line, "hf_prefill_tok_s %d %lf", &b, &v) == 2) out.push_back({"prefill_" + std::to_string(b), v});
    else if (std::sscanf(line, "%63s %lf", key, &v) == 2) out.push_back({key, v});
  }
  pclose(p);
  return out;
}

double find(const std::vector<std::pair<std::string, double>>& kv, const std::string& k) {
  for (const auto& [key, v] : kv)
    if (key == k) return v;
  return -1;
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
  flags.finish();
  if (memory) flags.refuse({"seqs", "reps", "prompt", "new", "batches", "no-hf"}, "does nothing with --memory");
  else flags.refuse({"memory_tokens", "bin"}, "applies only with --memory");
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
    forge_decode.push_back(b * (new_tokens - 1) / std::max(full - first, 1e-9));
  }

  std::vector<std::pair<std::string, double>> hf;
  if (with_hf)
    hf = run_hf("--model " + bench::shell_quoted(model_path) + " --threads " + std::to_string(threads) + " --seqs " + std::to_string(seqs) +
                " --seq " + std::to_string(seq) + " --prompt " + std::to_string(prompt) + " --new " +
                std::to_string(new_tokens) + " --batches " + batches_text + " --reps " + std::to_string(reps));
  const double hf_train = find(hf, "hf_train_tok_s");

  std::printf("bench_pretrained: %s (%zu parameters), %d threads; train %d x %d tokens; decode %d prompt + %d new tokens\n",
              pm.name.c_str(), model.layout().total, threads, seqs, seq, prompt, new_tokens);
  std::printf("%-26s %12s %14s %8s\n", "metric", "forge", "transformers", "ratio");
  std::printf("%-26s %12.1f %14.1f %8.2f\n", "train tokens/s", forge_train, hf_train,
              hf_train > 0 ? forge_train / hf_train : 0);
  std::vector<std::pair<std::string, std::string>> json = {
      {"model", bench::json_string(pm.name)}, {"threads", bench::num(threads)}, {"train_tok_s", bench::num(forge_train)},
      {"hf_train_tok_s", bench::num(hf_train)}, {"train_ratio", bench::num(hf_train > 0 ? forge_train / hf_train : 0)}};
  for (size_t i = 0; i < batches.size(); ++i) {
    const double h = find(hf, "decode_" + std::to_string(batches[i]));
    std::printf("%-26s %12.1f %14.1f %8.2f\n", ("decode tokens/s, batch " + std::to_string(batches[i])).c_str(),
                forge_decode[i], h, h > 0 ? forge_decode[i] / h : 0);
    const std::string b = std::to_string(batches[i]);
    const double hp = find(hf, "prefill_" + b);
    std::printf("%-26s %12.1f %14.1f %8.2f\n", ("prefill tokens/s, batch " + b).c_str(), forge_prefill[i], hp,
                hp > 0 ? forge_prefill[i] / hp : 0);
    json.push_back({"prefill_tok_s_b" + b, bench::num(forge_prefill[i])});
    json.push_back({"hf_prefill_tok_s_b" + b, bench::num(hp)});
    json.push_back({"decode_tok_s_b" + b, bench::num(forge_decode[i])});
    json.push_back({"hf_decode_tok_s_b" + b, bench::num(h)});
    json.push_back({"decode_ratio_b" + b, bench::num(h > 0 ? forge_decode[i] / h : 0)});
  }
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
