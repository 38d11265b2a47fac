// Time per draw of sample_token (src/model/sampling.cpp) on one row of a
// large vocabulary, against a whole sort of the row measured side by side:
// the candidates in descending logit order (ties by id), the nucleus the
// smallest prefix whose mass reaches top_p, the inverse CDF at u over it.
// forge sorts a prefix of 64, else the tokens of a bound on the nucleus
// (sampling.cpp); the baseline sorts all V tokens each draw (with every token
// a candidate, top_p 1 and no top_k, both draw in id order without a sort).
// Both must draw the same tokens ("same" column; exit 1 where they do not).
//
//   bench_sampling [--vocab=151936] [--draws=200] [--reps=5] [--sigma=3]
//                  [--top_ps=0.9,0.95,1] [--top_k=0] [--masked=0] [--seed=1]
//
// The row: logits N(0, sigma) plus two peaks 12 and 11 above, so a top_p of
// 0.9 holds thousands of tokens (5,422 of 151,936 at sigma 3:
// docs/performance.md; a flat row: the worst case; a peaked LLM row's
// nucleus is a few tokens); --masked tokens at -inf (a masked
// vocabulary). Single thread; no BLAS. Prints the
// median ms per draw of each (of --reps runs of --draws draws), their ratio,
// and one JSON line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "model/sampling.hpp"

using namespace forge;

namespace {

// The baseline: sample_token's top-k / top-p draw with a whole sort (every
// token a candidate: in id order, as sample_token). *nucleus: the candidates.
int32_t whole_sort_draw(const std::vector<float>& logits, float top_p, int top_k, double u01, int* nucleus) {
  const int vocab = static_cast<int>(logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  if ((top_k > 0 && top_k < vocab) || top_p < 1.0f)
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
  const float mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(vocab);
  double all = 0;
  for (int i = 0; i < vocab; ++i) all += prob[i] = std::exp(static_cast<double>(logits[order[i]] - mx));
  int keep = top_k > 0 && top_k < vocab ? top_k : vocab;
  double mass = 0;
  if (keep < vocab)
    for (int i = 0; i < keep; ++i) mass += prob[i];
  else
    mass = all;
  if (top_p < 1.0f) {
    double cum = 0;
    int n = 0;
    while (n < keep) {
      cum += prob[n++] / mass;
      if (cum >= top_p) break;
    }
    keep = n;
  }
  *nucleus = keep;
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  double u = u01 * total;
  int last = 0;
  for (int i = 0; i < keep; ++i) {
    if (prob[i] <= 0) continue;
    last = i;
    u -= prob[i];
    if (u < 0) return order[i];
  }
  return order[last];
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int vocab = flags.get("vocab", 151936), draws = flags.get("draws", 200), reps = flags.get("reps", 5);
  const double sigma = flags.get("sigma", 3.0);
  const std::vector<double> top_ps = flags.numbers("top_ps", "0.9,0.95,1");
  const int top_k = flags.get("top_k", 0), seed = flags.get("seed", 1), masked = flags.get("masked", 0);
  flags.finish();
  if (vocab < 2 || draws < 1 || reps < 1) bench::Flags::usage("--vocab must be at least 2, --draws and --reps at least 1");
  if (masked < 0 || masked >= vocab) bench::Flags::usage("--masked is in [0, vocab)");
  if (!(sigma >= 0) || top_k < 0) bench::Flags::usage("--sigma and --top_k must be >= 0");
  for (const double p : top_ps)
    if (!(p > 0 && p <= 1)) bench::Flags::usage("--top_ps are in (0, 1]");

  Rng rng(static_cast<uint64_t>(seed));
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = static_cast<float>(sigma * rng.normal());
  logits[static_cast<size_t>(rng.below(static_cast<uint64_t>(vocab)))] += 12.0f;
  logits[static_cast<size_t>(rng.below(static_cast<uint64_t>(vocab)))] += 11.0f;
  for (int i = 0; i < masked; ++i)  // after the peaks: a masked peak is masked
    logits[static_cast<size_t>(rng.below(static_cast<uint64_t>(vocab)))] = -std::numeric_limits<float>::infinity();

  std::printf("sample_token on one row: V %d, logits N(0, %g) plus two peaks, %d at -inf, top_k %d; %d draws x %d "
              "reps, median ms per draw\n",
              vocab, sigma, masked, top_k, draws, reps);
  std::printf("%-8s %9s %12s %14s %9s %6s\n", "top_p", "nucleus", "forge ms", "whole sort ms", "speed-up", "same");
  std::string json_rows;
  bool all_same = true;
  for (const double top_p : top_ps) {
    SamplingParams p;
    p.top_p = static_cast<float>(top_p);
    p.top_k = top_k;
    std::vector<double> forge_ms, whole_ms;
    bool same = true;
    int nucleus = 0;
    for (int r = 0; r < reps; ++r) {
      std::vector<int32_t> a(static_cast<size_t>(draws)), b(static_cast<size_t>(draws));
      Stopwatch sw;
      for (int d = 0; d < draws; ++d)
        a[static_cast<size_t>(d)] = sample_token(logits.data(), vocab, p, counter_uniform(seed, d));
      forge_ms.push_back(sw.seconds() * 1e3 / draws);
      Stopwatch sw2;
      for (int d = 0; d < draws; ++d)
        b[static_cast<size_t>(d)] = whole_sort_draw(logits, p.top_p, top_k, counter_uniform(seed, d), &nucleus);
      whole_ms.push_back(sw2.seconds() * 1e3 / draws);
      same = same && a == b;
    }
    all_same = all_same && same;
    const double f = bench::median(forge_ms), w = bench::median(whole_ms);
    std::printf("%-8g %9d %12.3f %14.3f %8.1fx %6s\n", top_p, nucleus, f, w, w / f, same ? "yes" : "NO");
    char row[200];
    std::snprintf(row, sizeof row,
                  "%s{\"top_p\": %g, \"nucleus\": %d, \"forge_ms\": %.4f, \"whole_sort_ms\": %.4f, \"same\": %s}",
                  json_rows.empty() ? "" : ", ", top_p, nucleus, f, w, same ? "true" : "false");
    json_rows += row;
  }
  bench::print_json({{"bench", "\"sampling\""},
                     {"vocab", std::to_string(vocab)},
                     {"top_k", std::to_string(top_k)},
                     {"masked", std::to_string(masked)},
                     {"rows", "[" + json_rows + "]"}});
  // Draws that differ from the definition's are a bug, not a figure.
  if (!all_same) {
    std::fprintf(stderr, "error: forge's draws differ from the whole sort's (rows marked NO)\n");
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) { return bench::guarded_main(argc, argv, bench_main); }
