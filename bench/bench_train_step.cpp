// Training tokens per second of one full step (forward, backward, clipping,
// AdamW) on the reference model, against the same model and step in PyTorch
// on the same number of threads (bench/torch_train_step.py), measured in the
// same run. The host's speed drifts within minutes, so the three measurements
// (forge steps, SGEMM, PyTorch steps) are interleaved in `rounds` rounds and
// each figure is the median over rounds; the ratio is the median of the
// per-round ratios. FLOPs = 6 x (non-embedding parameters) x tokens + causal
// attention 6 x layers x d_model x sum_s T_s^2; sgemm_peak_gflops is OpenBLAS
// SGEMM (2048^3) measured here.
//
//   bench_train_step [--batch=8] [--seq=512] [--reps=3] [--rounds=3] [--no-torch]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "bench_util.hpp"
#include "core/rng.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"

using namespace forge;

namespace {

double sgemm_peak_gflops() {
  const int n = 2048;
  std::vector<float> A(static_cast<size_t>(n) * n, 0.5f), B(A), C(A);
  const double s = bench::median_seconds(1, 5, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(),
                n, 0.0f, C.data(), n);
  });
  return 2.0 * n * n * n / s / 1e9;
}

double torch_tok_s(int threads, int batch, int seq, int reps) {
  const std::string cmd = std::string("/usr/bin/python3 ") + FORGE_SOURCE_DIR +
                          "/bench/torch_train_step.py --threads " + std::to_string(threads) +
                          " --batch " + std::to_string(batch) + " --seq " + std::to_string(seq) +
                          " --reps " + std::to_string(reps);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[256];
  double v = -1;
  while (fgets(line, sizeof line, p))
    if (std::sscanf(line, "torch_tok_s %lf", &v) == 1) break;
  pclose(p);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int batch = flags.get("batch", 8), seq = flags.get("seq", 512), reps = flags.get("reps", 3);
  const int rounds = flags.get("rounds", 3);
  const bool with_torch = !flags.has("no-torch");
  flags.finish();
  const int threads = omp_get_max_threads();

  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;  // d 256, 4 layers, 8 heads, ffn 688 by default
  auto backend = make_backend("cpu");
  PolicyModel model(c, *backend);
  model.init_random(1);
  OptimConfig oc;
  oc.lr = 1e-4f;
  AdamW opt(oc, model);

  Rng rng(2);
  std::vector<Sample> samples(batch);
  for (auto& s : samples) {
    s.tokens.resize(seq);
    for (auto& t : s.tokens) t = static_cast<int32_t>(rng.below(256));
    s.trainable.assign(seq, 1);
    s.trainable[0] = 0;
  }
  const int64_t tokens = static_cast<int64_t>(batch) * seq;
  size_t params = model.layout().total - model.layout().find("embed").numel;
  const double flops = 6.0 * params * tokens +
                       6.0 * c.n_layers * c.d_model * static_cast<double>(seq) * seq * batch;
  std::vector<double> forge_r, torch_r, ratio_r, gflops_r, peak_r, frac_r;
  for (int round = 0; round < rounds; ++round) {
    const double secs = bench::median_seconds(round == 0 ? 1 : 0, reps, [&] {
      model.zero_grads();
      supervised_forward_backward(model, samples, false, static_cast<int32_t>(tokens));
      opt.step();
    });
    const double peak = sgemm_peak_gflops();
    const double torch = with_torch ? torch_tok_s(threads, batch, seq, reps) : -1;
    forge_r.push_back(tokens / secs);
    gflops_r.push_back(flops / secs / 1e9);
    peak_r.push_back(peak);
    frac_r.push_back(gflops_r.back() / peak);
    torch_r.push_back(torch);
    ratio_r.push_back(torch > 0 ? forge_r.back() / torch : 0);
    std::fprintf(stderr, "round %d: forge %.0f tok/s, torch %.0f tok/s, ratio %.2f, %.0f of %.0f GFLOP/s\n",
                 round + 1, forge_r.back(), torch, ratio_r.back(), gflops_r.back(), peak);
  }
  using bench::median;
  const double forge_tok_s = median(forge_r), torch = median(torch_r), ratio = median(ratio_r);
  const double gflops = median(gflops_r), peak = median(peak_r), fraction = median(frac_r);
  const double secs = tokens / forge_tok_s;

  std::printf("bench_train_step: d_model %d, %d layers, %d heads, ffn %d, vocab %d; %d x %d tokens; %d threads\n",
              c.d_model, c.n_layers, c.n_heads, c.ffn_dim, c.vocab, batch, seq, threads);
  std::printf("%-28s %12s\n", "metric", "value");
  std::printf("%-28s %12.1f\n", "forge step ms (median)", secs * 1e3);
  std::printf("%-28s %12.1f\n", "forge tokens/s", forge_tok_s);
  std::printf("%-28s %12.1f\n", "torch tokens/s", torch);
  std::printf("%-28s %12.2f\n", "ratio forge/torch", ratio);
  std::printf("%-28s %12.1f\n", "forge GFLOP/s", gflops);
  std::printf("%-28s %12.1f\n", "OpenBLAS SGEMM GFLOP/s", peak);
  std::printf("%-28s %12.2f\n", "fraction of SGEMM peak", fraction);
  bench::print_json({{"forge_tok_s", bench::num(forge_tok_s)},
                     {"torch_tok_s", bench::num(torch)},
                     {"ratio", bench::num(ratio)},
                     {"gflops", bench::num(gflops)},
                     {"sgemm_peak_gflops", bench::num(peak)},
                     {"threads", bench::num(threads)}});
  return 0;
}
