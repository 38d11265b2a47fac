// Training tokens per second of one full step (forward, backward, clipping,
// AdamW) on the reference model, against the same model and step in PyTorch
// on the same number of threads (bench/torch_train_step.py), measured in the
// same run. The host's speed drifts within minutes, so the three measurements
// (forge steps, SGEMM, PyTorch steps) are interleaved in `rounds` rounds and
// each figure is the median over rounds; the ratio is the median of the
// per-round ratios. FLOPs = 6 x (non-embedding parameters) x tokens + causal
// attention 6 x layers x (heads x head_dim) x sum_s T_s^2; sgemm_peak_gflops is
// SGEMM (2048^3) of the CPU backend's library measured here (bench_workloads.hpp).
//
// --backend=cuda: on one GPU, forge in FP32 and in bf16 precision against the
// same step in PyTorch on CUDA in FP32 (TF32 off) and in bf16 autocast, both
// with scaled_dot_product_attention, interleaved per round; the table gives
// tokens/s per precision and the ratios; the memory forge holds (kept
// activations, parameters, gradients, AdamW moments), the most device memory
// each precision's backend held at once (its buffers and scratch:
// Backend::peak_device_bytes) and PyTorch's peak. No device
// (or a build without CUDA): says so and prints "device": "none". The
// PyTorch twin runs under $FORGE_PYTHON (default /usr/bin/python3).
//
// On the CPU, Debian's PyTorch runs its GEMMs on the system OpenBLAS, whose
// core an OPENBLAS_CORETYPE in the environment (a cluster's workaround for
// OpenBLAS's SSE fallback, Haswell, say) or the fallback itself can leave at
// half the machine's speed or below. --torch_blas_core=auto (default) runs the
// twin on the OpenBLAS core of the CPU's level (SkylakeX on AVX-512, Haswell
// on AVX2: what forge selects for its own OpenBLAS, backend/cpu/blas_core.hpp),
// so the ratio is against PyTorch at its speed; "installed" leaves the
// environment's choice, and a core name asks for that core. The core the
// twin ran is in the table and the JSON line ("torch_blas_core"), and the
// attention it ran ("torch_attention": sdpa where its torch has it, 2.0 or
// later; else an explicit masked softmax).
//
// --profile: after the rounds, `reps` more steps with every backend operation
// timed between two synchronizations (backend/profiled_backend.hpp): a table
// of calls, ms and share per step for each operation (per precision on cuda),
// and "profile_ms" objects in the JSON line. The timed rounds are not profiled.
//
//   bench_train_step [--batch=8] [--seq=512] [--reps=3] [--rounds=3] [--no-torch]
//                    [--backend=cpu|cuda] [--d_model=256] [--layers=4] [--heads=8]
//                    [--kv_heads=heads] [--ffn=688] [--profile] [--torch_blas_core=auto|installed|NAME]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "backend/device_array.hpp"
#include "backend/profiled_backend.hpp"
#include "bench_util.hpp"
#include "bench_workloads.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"

using namespace forge;

namespace {

// PyTorch's tokens/s for the same step (bench/torch_train_step.py); an
// error, with its output, when it reports none. extra: its flags beyond the model and batch; env: a
// prefix of environment assignments ("" for none); blas_core: the OpenBLAS
// core it reported (CPU runs); attention: the attention it ran (sdpa where
// its torch has it, else an explicit masked softmax).
double torch_tok_s(const ModelConfig& c, int threads, int batch, int seq, int reps, const std::string& extra,
                   double* peak_bytes = nullptr, const std::string& env = "", std::string* blas_core = nullptr,
                   std::string* attention = nullptr) {
  const std::string cmd = env + bench::python() + " " + bench::shell_quoted(bench::script("torch_train_step.py")) + " --threads " +
                          std::to_string(threads) + " --batch " + std::to_string(batch) + " --seq " +
                          std::to_string(seq) + " --reps " + std::to_string(reps) + " --d-model " +
                          std::to_string(c.d_model) + " --layers " + std::to_string(c.n_layers) +
                          " --heads " + std::to_string(c.n_heads) + " --kv-heads " + std::to_string(c.n_kv_heads) +
                          " --ffn " + std::to_string(c.ffn_dim) + " --vocab " + std::to_string(c.vocab) + " " + extra;
  double v = -1;
  const std::vector<std::string> lines = bench::command_lines(cmd);
  for (const std::string& line : lines) {
    std::sscanf(line.c_str(), "torch_tok_s %lf", &v);
    if (peak_bytes) std::sscanf(line.c_str(), "torch_peak_bytes %lf", peak_bytes);
    char core[64];
    if (blas_core && std::sscanf(line.c_str(), "torch_blas_core %63s", core) == 1) *blas_core = core;
    if (attention && std::sscanf(line.c_str(), "torch_attention %63s", core) == 1) *attention = core;
  }
  // A failed twin gave ratio 0 and exit 0 (one failed round of three pulled
  // the medians down silently).
  if (!(v > 0)) {
    for (const std::string& line : lines) std::fprintf(stderr, "%s\n", line.c_str());
    throw std::runtime_error("the PyTorch twin reported no torch_tok_s (its output is above; the command: " + cmd +
                             "); --no-torch leaves it out");
  }
  return v;
}

// One train step's median seconds (forward, backward, AdamW); the host copy
// at the end drains a device backend's stream.
double step_seconds(PolicyModel& model, AdamW& opt, Backend& be, const std::vector<Sample>& samples,
                    int64_t tokens, int warmup, int reps) {
  DeviceArray<float> one(be, 1);
  return bench::median_seconds(warmup, reps, [&] {
    model.zero_grads();
    supervised_forward_backward(model, samples, false, static_cast<int32_t>(tokens));
    opt.step();
    float h;
    be.to_host(&h, one.data(), sizeof h);
  });
}

// --profile: `reps` steps with every operation timed; prints the table under
// `label` and returns the JSON object of ms per step.
std::string profile_steps(const std::string& label, ProfiledBackend& prof, PolicyModel& model, AdamW& opt,
                          const std::vector<Sample>& samples, int64_t tokens, int reps) {
  prof.reset();
  prof.set_enabled(true);
  const double secs = step_seconds(model, opt, prof, samples, tokens, 0, reps);
  prof.set_enabled(false);
  const auto times = prof.times();
  std::printf("profile (%s): %d steps, every operation between two synchronizations (median step %.1f ms "
              "while profiled)\n%s",
              label.c_str(), reps, secs * 1e3, op_profile_table(times, reps).c_str());
  return op_profile_json(times, reps);
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int batch = flags.get("batch", 8), seq = flags.get("seq", 512), reps = flags.get("reps", 3);
  const int rounds = flags.get("rounds", 3);
  const bool with_torch = !flags.on("no-torch");
  const bool profile = flags.on("profile");
  const std::string backend_name = flags.get("backend", std::string("cpu"));
  const std::string torch_core_flag = flags.get("torch_blas_core", std::string("auto"));
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;  // d 256, 4 layers, 8 heads, ffn 688 by default
  c.d_model = flags.get("d_model", c.d_model);
  c.n_layers = flags.get("layers", c.n_layers);
  c.n_heads = flags.get("heads", c.n_heads);
  c.n_kv_heads = flags.get("kv_heads", c.n_heads);
  c.ffn_dim = flags.get("ffn", c.ffn_dim);
  flags.finish();
  if (batch <= 0 || seq <= 1 || reps <= 0 || rounds <= 0)
    bench::Flags::usage("need batch > 0, seq > 1, reps > 0, rounds > 0");
  if (backend_name != "cpu" && backend_name != "cuda") bench::Flags::usage("--backend is cpu or cuda, not '" + backend_name + "'");
  if (backend_name == "cuda")
    flags.refuse({"torch_blas_core"}, "sets the CPU twin's OpenBLAS core: it does nothing with --backend=cuda");
  if (!with_torch) flags.refuse({"torch_blas_core"}, "sets the twin's OpenBLAS core: it does nothing with --no-torch");
  // The twin's OpenBLAS core: forced through OPENBLAS_CORETYPE unless "installed".
  const std::string torch_env = bench::twin_blas_env(torch_core_flag);
  try {
    c.validate();
  } catch (const InputError& e) {
    bench::Flags::usage(e.what());
  }
  const int threads = omp_get_max_threads();

  Rng rng(2);
  std::vector<Sample> samples(batch);
  for (auto& s : samples) {
    s.tokens.resize(seq);
    for (auto& t : s.tokens) t = static_cast<int32_t>(rng.below(256));
    s.trainable.assign(seq, 1);
    s.trainable[0] = 0;
  }
  const int64_t tokens = static_cast<int64_t>(batch) * seq;
  auto make = [&](Precision precision) {
    try {
      return make_backend(backend_name, precision);
    } catch (const InputError& e) {
      std::printf("bench_train_step: backend %s unavailable (%s)\n", backend_name.c_str(), e.what());
      bench::print_json({{"device", "\"none\""}});
      std::exit(0);
    }
  };
  auto inner = make(Precision::kFp32);
  ProfiledBackend backend(*inner);  // forwards only, until --profile's steps
  PolicyModel model(c, backend);
  model.init_random(1);
  OptimConfig oc;
  oc.lr = 1e-4f;
  AdamW opt(oc, model);
  const size_t params = model.layout().total - model.layout().find("embed").numel;
  const double flops = 6.0 * params * tokens +
                       6.0 * c.n_layers * c.n_heads * c.head_dim() * static_cast<double>(seq) * seq * batch;
  const std::string shape = "d_model " + std::to_string(c.d_model) + ", " + std::to_string(c.n_layers) +
                            " layers, " + std::to_string(c.n_heads) + " heads (" + std::to_string(c.n_kv_heads) +
                            " kv), ffn " + std::to_string(c.ffn_dim) + ", vocab " + std::to_string(c.vocab) + "; " +
                            std::to_string(batch) + " x " + std::to_string(seq) + " tokens";
  using bench::median;

  if (backend_name == "cuda") {
    // forge FP32 and bf16 against torch FP32 and bf16 autocast, both with
    // SDPA, interleaved per round on the same GPU.
    auto inner16 = make(Precision::kBf16);
    ProfiledBackend backend16(*inner16);
    PolicyModel model16(c, backend16);
    model16.init_random(1);
    AdamW opt16(oc, model16);
    std::vector<double> f32, f16, t32, t16, r32, r16;
    double peak32 = -1, peak16 = -1;
    for (int round = 0; round < rounds; ++round) {
      f32.push_back(tokens / step_seconds(model, opt, backend, samples, tokens, round == 0 ? 2 : 0, reps));
      f16.push_back(tokens / step_seconds(model16, opt16, backend16, samples, tokens, round == 0 ? 2 : 0, reps));
      t32.push_back(with_torch ? torch_tok_s(c, threads, batch, seq, reps, "--device cuda --dtype fp32 --attention sdpa", &peak32) : -1);
      t16.push_back(with_torch ? torch_tok_s(c, threads, batch, seq, reps, "--device cuda --dtype bf16 --attention sdpa", &peak16) : -1);
      r32.push_back(t32.back() > 0 ? f32.back() / t32.back() : 0);
      r16.push_back(t16.back() > 0 ? f16.back() / t16.back() : 0);
      std::fprintf(stderr, "round %d: fp32 forge %.0f torch %.0f tok/s; bf16 forge %.0f torch %.0f tok/s\n", round + 1,
                   f32.back(), t32.back(), f16.back(), t16.back());
    }
    std::printf("bench_train_step (cuda): %s\n", shape.c_str());
    std::printf("%-10s %14s %14s %10s %14s\n", "precision", "forge tok/s", "torch tok/s", "ratio", "forge TFLOP/s");
    // Without the twin its figures are NaN: nan in the table, null in the JSON.
    const double torch32 = bench::measured(with_torch, median(t32)), torch16 = bench::measured(with_torch, median(t16));
    const double ratio32 = bench::measured(with_torch, median(r32)), ratio16 = bench::measured(with_torch, median(r16));
    peak32 = bench::measured(with_torch, peak32);
    peak16 = bench::measured(with_torch, peak16);
    std::printf("%-10s %14.0f %14.0f %10.2f %14.2f\n", "fp32", median(f32), torch32, ratio32, median(f32) * flops / tokens / 1e12);
    std::printf("%-10s %14.0f %14.0f %10.2f %14.2f\n", "bf16", median(f16), torch16, ratio16, median(f16) * flops / tokens / 1e12);
    // forge's held memory: the activations its training pass keeps (packed to
    // bf16 in the bf16 mode) plus parameters, gradients and the AdamW moments
    // (FP32 in both); the backends' scratch buffers are not counted.
    const double state = 4.0 * sizeof(float) * model.layout().total;
    const double held32 = state + model.activation_bytes(), held16 = state + model16.activation_bytes();
    std::printf("forge held memory: fp32 %.0f MiB, bf16 %.0f MiB (%.2f); torch peak: fp32 %.0f MiB, bf16 %.0f MiB\n",
                held32 / (1 << 20), held16 / (1 << 20), held16 / held32, peak32 / (1 << 20), peak16 / (1 << 20));
    const double dev32 = double(backend.peak_device_bytes()), dev16 = double(backend16.peak_device_bytes());
    std::printf("forge device peak (buffers and scratch): fp32 %.0f MiB, bf16 %.0f MiB (%.2f)\n", dev32 / (1 << 20),
                dev16 / (1 << 20), dev32 > 0 ? dev16 / dev32 : 0.0);
    std::vector<std::pair<std::string, std::string>> json = {{"device", "\"cuda\""},
                       {"forge_fp32_tok_s", bench::num(median(f32))},
                       {"forge_bf16_tok_s", bench::num(median(f16))},
                       {"torch_fp32_sdpa_tok_s", bench::num(torch32)},
                       {"torch_bf16_sdpa_tok_s", bench::num(torch16)},
                       {"ratio_fp32", bench::num(ratio32)},
                       {"ratio_bf16", bench::num(ratio16)},
                       {"forge_fp32_held_bytes", bench::num(held32)},
                       {"forge_bf16_held_bytes", bench::num(held16)},
                       {"forge_fp32_peak_bytes", bench::num(dev32)},
                       {"forge_bf16_peak_bytes", bench::num(dev16)},
                       {"torch_fp32_peak_bytes", bench::num(peak32)},
                       {"torch_bf16_peak_bytes", bench::num(peak16)}};
    if (profile) {
      json.push_back({"profile_fp32_ms", profile_steps("fp32", backend, model, opt, samples, tokens, reps)});
      json.push_back({"profile_bf16_ms", profile_steps("bf16", backend16, model16, opt16, samples, tokens, reps)});
    }
    bench::print_json(json);
    return 0;
  }

  std::vector<double> forge_r, torch_r, ratio_r, gflops_r, peak_r, frac_r, secs_r;
  std::string torch_blas = "-", torch_attention = "-";
  for (int round = 0; round < rounds; ++round) {
    const double secs = step_seconds(model, opt, backend, samples, tokens, round == 0 ? 1 : 0, reps);
    const double peak = bench::sgemm_peak_gflops();
    const double torch = with_torch ? torch_tok_s(c, threads, batch, seq, reps, "", nullptr, torch_env, &torch_blas, &torch_attention) : -1;
    secs_r.push_back(secs);
    forge_r.push_back(tokens / secs);
    gflops_r.push_back(flops / secs / 1e9);
    peak_r.push_back(peak);
    frac_r.push_back(gflops_r.back() / peak);
    torch_r.push_back(torch);
    ratio_r.push_back(torch > 0 ? forge_r.back() / torch : 0);
    std::fprintf(stderr, "round %d: forge %.0f tok/s, torch %.0f tok/s, ratio %.2f, %.0f of %.0f GFLOP/s\n",
                 round + 1, forge_r.back(), torch, ratio_r.back(), gflops_r.back(), peak);
  }
  const double forge_tok_s = median(forge_r);
  const double torch = bench::measured(with_torch, median(torch_r)), ratio = bench::measured(with_torch, median(ratio_r));
  const double gflops = median(gflops_r), peak = median(peak_r), fraction = median(frac_r);
  const double secs = median(secs_r);

  std::printf("bench_train_step: %s; %d threads\n", shape.c_str(), threads);
  std::printf("%-28s %12s\n", "metric", "value");
  std::printf("%-28s %12.1f\n", "forge step ms (median)", secs * 1e3);
  std::printf("%-28s %12.1f\n", "forge tokens/s", forge_tok_s);
  std::printf("%-28s %12.1f\n", "torch tokens/s", torch);
  std::printf("%-28s %12s\n", "torch OpenBLAS core", torch_blas.c_str());
  std::printf("%-28s %12s\n", "torch attention", torch_attention.c_str());
  std::printf("%-28s %12.2f\n", "ratio forge/torch", ratio);
  std::printf("%-28s %12.1f\n", "forge GFLOP/s", gflops);
  std::printf("%-28s %12.1f\n", "SGEMM GFLOP/s", peak);
  std::printf("%-28s %12.2f\n", "fraction of SGEMM peak", fraction);
  std::vector<std::pair<std::string, std::string>> json = {{"forge_tok_s", bench::num(forge_tok_s)},
                                                           {"torch_tok_s", bench::num(torch)},
                                                           {"torch_blas_core", with_torch ? bench::json_string(torch_blas) : "null"},
                                                           {"torch_attention", with_torch ? bench::json_string(torch_attention) : "null"},
                                                           {"ratio", bench::num(ratio)},
                                                           {"gflops", bench::num(gflops)},
                                                           {"sgemm_peak_gflops", bench::num(peak)},
                                                           {"sgemm_fraction", bench::num(fraction)},
                                                           {"step_ms", bench::num(secs * 1e3)},
                                                           {"threads", bench::num(threads)}};
  if (profile) json.push_back({"profile_ms", profile_steps("cpu", backend, model, opt, samples, tokens, reps)});
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
