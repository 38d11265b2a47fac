// Paged decode attention on the CPU backend (backend/cpu/paged_attention.cpp):
// one decode step's attention of one layer, B sequences with one query row
// each over its own n cached positions (blocks of 16 in a shuffled pool, as
// the rollout engine's cache holds them). Per row 4 n H D flops (scores and
// the weighted sum of values) and 8 n Hkv D bytes of cache read (K and V,
// FP32). Models: the agent policy of the main job (4 heads of 32), the
// reference model (8 heads of 32) and SmolLM2-135M's layer (9 heads of 64
// over 3 kv heads). Time per call = the best of `reps` rounds of several
// calls on the same cache: what is read fits in L2 at the smallest B n and
// streams from L3 or memory at the larger ones (the rollout ranks of the
// main job read a few MB a layer), but a cache smaller than the L3 stays
// warm between calls here, where a real decode step runs the other layers
// in between.
//
//   bench_decode_attention [--threads=1] [--reps=5] [--quick] [--batch=B] [--len=n]
//   (--quick: the agent model only; --batch (1, 16, 64), --len (128, 512,
//   2048): that B or n only; 0, the default, runs all)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "bench_util.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"

using namespace forge;

namespace {

struct Shape {
  const char* name;
  const char* key;
  int H, Hkv, D;
};

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int threads = flags.get("threads", 1), reps = flags.get("reps", 5);
  const bool quick = flags.on("quick");
  const int only_b = flags.get("batch", 0), only_n = flags.get("len", 0);
  flags.finish();
  if (threads < 1 || reps < 1) bench::Flags::usage("--threads and --reps must be at least 1");
  if (only_b != 0 && only_b != 1 && only_b != 16 && only_b != 64) bench::Flags::usage("--batch must be 1, 16 or 64");
  if (only_n != 0 && only_n != 128 && only_n != 512 && only_n != 2048)
    bench::Flags::usage("--len must be 128, 512 or 2048");
  omp_set_num_threads(threads);
  const auto cpu = make_backend("cpu");
  const Shape shapes[] = {{"agent policy (4 heads of 32)", "agent", 4, 4, 32},
                          {"reference (8 heads of 32)", "reference", 8, 8, 32},
                          {"SmolLM2-135M (9 heads of 64, 3 kv heads)", "smollm2", 9, 3, 64}};
  const int bs = 16;
  Rng rng(11);
  std::vector<std::pair<std::string, std::string>> json;
  std::printf("paged decode attention, one layer, %d thread(s); time per call, best of %d\n", threads, reps);
  for (const Shape& s : shapes) {
    if (quick && std::string(s.key) != "agent") continue;
    std::printf("\n%s\n%4s %6s %10s %10s %10s %10s\n", s.name, "B", "n", "us/call", "GFLOP/s", "GB/s", "MB read");
    for (int B : {1, 16, 64})
      for (int n : {128, 512, 2048}) {
        if ((only_b && B != only_b) || (only_n && n != only_n)) continue;
        const int nb = (n + bs - 1) / bs, row = s.Hkv * s.D, HD = s.H * s.D;
        // every row's blocks, shuffled through the pool
        std::vector<int32_t> table(static_cast<size_t>(B) * nb);
        std::iota(table.begin(), table.end(), 0);
        for (size_t i = table.size(); i > 1; --i) std::swap(table[i - 1], table[rng.below(i)]);
        std::vector<float> kc(table.size() * bs * row), vc(kc.size()), q(static_cast<size_t>(B) * HD),
            out(q.size());
        for (float& x : kc) x = static_cast<float>(rng.uniform() - 0.5);
        for (float& x : vc) x = static_cast<float>(rng.uniform() - 0.5);
        for (float& x : q) x = static_cast<float>(rng.normal());
        std::vector<int32_t> position(B, n - 1), table_begin(B);
        for (int b = 0; b < B; ++b) table_begin[b] = b * nb;
        PagedAttentionArgs a;
        a.T = B;
        a.n_heads = s.H;
        a.n_kv_heads = s.Hkv;
        a.head_dim = s.D;
        a.block_size = bs;
        a.q = q.data();
        a.ld_q = HD;
        a.k_cache = kc.data();
        a.v_cache = vc.data();
        a.max_len = n;
        a.position = position.data();
        a.block_table = table.data();
        a.table_begin = table_begin.data();
        a.out = out.data();
        const double flops = 4.0 * B * n * HD, bytes = 8.0 * B * n * row;
        const int calls = std::max(2, static_cast<int>(5e7 / flops));
        double best = 1e30;
        for (int r = 0; r < reps; ++r) {
          Stopwatch sw;
          for (int c = 0; c < calls; ++c) cpu->paged_attention_fwd(a);
          best = std::min(best, sw.seconds() / calls);
        }
        std::printf("%4d %6d %10.1f %10.1f %10.1f %10.1f\n", B, n, best * 1e6, flops / best / 1e9, bytes / best / 1e9,
                    bytes / 1e6);
        json.emplace_back(std::string(s.key) + "_b" + std::to_string(B) + "_n" + std::to_string(n) + "_us",
                          bench::num(best * 1e6));
      }
  }
  json.emplace_back("threads", std::to_string(threads));
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
