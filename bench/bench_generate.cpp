// Generation throughput of the rollout engine on the reference model (random
// weights), and the prefill saved by session prefix reuse and by prompts
// shared within a group.
//
// Throughput: B requests of `prompt` random tokens and `new` generated tokens
// each (temperature 1, no stop token) submitted at once. Prefill = the first
// step, which computes every prompt (prefill_chunk = B * prompt) and samples
// each first token; decode = the remaining steps, one token per sequence per
// step. tok/s = tokens / wall time of that phase, best of --reps runs (the
// machine may be shared: the fastest run is the least disturbed one).
//
// Reuse: `sessions` episodes of `turns` turns, run concurrently, in groups of
// `group` that start from one first prompt (a GRPO group's episodes); turn
// t's prompt = turn t-1's prompt + its output + `obs` new tokens. Three ways:
// session keys and shared prefixes (EngineConfig::share_prefixes: a group's
// first prompt computed once), session keys only (prefill only what the
// episode's cache lacks), neither; prefill tokens computed and wall time of
// each (they alternate, --reps times; the best of each is reported), and
// whether each turn's output is the same as without reuse.
//
//   bench_generate [--quick] [--prompt=128] [--new=64] [--sessions=16] [--group=4] [--turns=8] [--reps=2]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend_registry.hpp"
#include "bench_util.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"
#include "tokenizer/byte_tokenizer.hpp"

using namespace forge;

namespace {

int round_up(int n, int m) { return (n + m - 1) / m * m; }

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

std::vector<int32_t> random_tokens(Rng& rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng.below(256));
  return t;
}

GenerationRequest request(uint64_t id, std::vector<int32_t> prompt, int max_new,
                          std::string session = {}) {
  GenerationRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.sampling.max_new_tokens = max_new;
  r.sampling.seed = 1000 + id;
  r.session = std::move(session);
  return r;
}

struct Throughput {
  double prefill_s = 0, decode_s = 0;
};

Throughput measure(PolicyModel& model, int batch, int prompt, int max_new) {
  EngineConfig cfg;
  cfg.max_batch = batch;
  cfg.max_seq_len = prompt + max_new;
  cfg.kv_cache_tokens = static_cast<int64_t>(batch) * round_up(prompt + max_new, cfg.block_size);
  cfg.prefill_chunk = batch * prompt;
  RolloutEngine engine(model, cfg);
  Rng rng(7 + batch);
  for (int i = 0; i < batch; ++i) engine.submit(request(i, random_tokens(rng, prompt), max_new));
  Throughput t;
  Stopwatch sw;
  engine.step();
  t.prefill_s = sw.seconds();
  if (engine.stats().generated != batch) {
    std::fprintf(stderr, "error: prefill step sampled %lld of %d first tokens\n",
                 static_cast<long long>(engine.stats().generated), batch);
    std::exit(1);
  }
  sw.reset();
  engine.run_until_done();
  t.decode_s = sw.seconds();
  return t;
}

struct ReuseRun {
  int64_t prefill_computed = 0, prefill_reused = 0, prefill_shared = 0;
  double seconds = 0;
  std::vector<std::vector<int32_t>> outputs;  // per (turn, session)
};

ReuseRun multi_turn(PolicyModel& model, int sessions, int group, int turns, int first, int obs, int max_new,
                    bool reuse, bool share) {
  EngineConfig cfg;
  cfg.share_prefixes = share;
  cfg.max_batch = sessions;
  cfg.max_seq_len = first + turns * (max_new + obs) + 1;
  cfg.kv_cache_tokens = static_cast<int64_t>(sessions) * round_up(cfg.max_seq_len, cfg.block_size);
  cfg.prefill_chunk = 4096;
  RolloutEngine engine(model, cfg);
  Rng rng(99);  // the same workload both ways
  std::vector<std::vector<int32_t>> context(sessions);
  for (int s = 0; s < sessions; ++s)
    context[s] = s % group == 0 ? random_tokens(rng, first) : context[s - s % group];
  ReuseRun run;
  Stopwatch sw;
  for (int t = 0; t < turns; ++t) {
    for (int s = 0; s < sessions; ++s)
      engine.submit(request(static_cast<uint64_t>(t) * sessions + s, context[s], max_new,
                            reuse ? "episode-" + std::to_string(s) : std::string()));
    std::vector<GenerationResult> results = engine.run_until_done();
    std::vector<std::vector<int32_t>> out(sessions);
    for (auto& r : results) out[r.id % sessions] = std::move(r.tokens);
    for (int s = 0; s < sessions; ++s) {
      context[s].insert(context[s].end(), out[s].begin(), out[s].end());
      const std::vector<int32_t> o = random_tokens(rng, obs);
      context[s].insert(context[s].end(), o.begin(), o.end());
      run.outputs.push_back(out[s]);
    }
  }
  run.seconds = sw.seconds();
  run.prefill_computed = engine.stats().prefill_computed;
  run.prefill_reused = engine.stats().prefill_reused;
  run.prefill_shared = engine.stats().prefill_shared;
  return run;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const bool quick = flags.on("quick");
  const int prompt = flags.get("prompt", quick ? 32 : 128);
  const int max_new = flags.get("new", quick ? 16 : 64);
  const int sessions = flags.get("sessions", quick ? 4 : 16);
  const int group = flags.get("group", 4);
  const int turns = flags.get("turns", quick ? 4 : 8);
  const int reps = flags.get("reps", quick ? 1 : 2);
  const int first = 64, obs = 16, turn_new = 32;
  flags.finish();
  if (group < 1 || sessions < 1 || turns < 1 || prompt < 1 || max_new < 1 || reps < 1)
    bench::Flags::usage("--sessions, --group, --turns, --prompt, --new and --reps must be at least 1");
  // Decode is every new token after the first (the prompt's forward gives it).
  if (max_new < 2) bench::Flags::usage("--new must be at least 2 (decode tokens/s counts the tokens after the first)");

  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;  // d 256, 4 layers, 8 heads, 8 kv heads, ffn 688 by default
  auto backend = make_backend("cpu");
  PolicyModel model(c, *backend);
  model.init_random(1);
  measure(model, 4, 16, 4);  // warm-up: threads, allocations

  std::printf("bench_generate: d_model %d, %d layers, %d heads (%d kv), ffn %d, vocab %d; "
              "%d threads\n",
              c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_dim, c.vocab,
              omp_get_max_threads());
  std::printf("throughput: prompt %d tokens, %d new tokens per request\n", prompt, max_new);
  std::printf("%6s %14s %12s %14s %12s\n", "batch", "prefill tok/s", "prefill s", "decode tok/s",
              "decode s");
  std::vector<std::pair<std::string, std::string>> json;
  double prefill_best = 0;
  for (int b : {1, 4, 16, 64, 256}) {
    std::vector<double> prefill_s, decode_s;
    for (int r = 0; r < reps; ++r) {
      const Throughput t = measure(model, b, prompt, max_new);
      prefill_s.push_back(t.prefill_s);
      decode_s.push_back(t.decode_s);
    }
    const double ps = best(prefill_s), ds = best(decode_s);
    const double prefill_tok_s = static_cast<double>(b) * prompt / ps;
    const double decode_tok_s = static_cast<double>(b) * (max_new - 1) / ds;
    std::printf("%6d %14.0f %12.3f %14.0f %12.3f\n", b, prefill_tok_s, ps, decode_tok_s, ds);
    json.emplace_back("decode_tok_s_b" + std::to_string(b), bench::num(decode_tok_s));
    json.emplace_back("prefill_tok_s_b" + std::to_string(b), bench::num(prefill_tok_s));
    prefill_best = std::max(prefill_best, prefill_tok_s);
  }

  ReuseRun shared, with, without;
  std::vector<double> shared_s, with_s, without_s;
  for (int r = 0; r < reps; ++r) {
    shared = multi_turn(model, sessions, group, turns, first, obs, turn_new, true, true);
    with = multi_turn(model, sessions, group, turns, first, obs, turn_new, true, false);
    without = multi_turn(model, sessions, group, turns, first, obs, turn_new, false, false);
    shared_s.push_back(shared.seconds);
    with_s.push_back(with.seconds);
    without_s.push_back(without.seconds);
  }
  shared.seconds = best(shared_s);
  with.seconds = best(with_s);
  without.seconds = best(without_s);
  const auto identical = [&](const ReuseRun& run) {
    int same = 0;
    for (size_t i = 0; i < run.outputs.size(); ++i) same += run.outputs[i] == without.outputs[i];
    return same;
  };
  const double saved = 1.0 - static_cast<double>(with.prefill_computed) / without.prefill_computed;
  const double shared_saved = 1.0 - static_cast<double>(shared.prefill_computed) / without.prefill_computed;
  std::printf("\nprefix reuse: %d sessions in groups of %d x %d turns (first prompt %d, shared by a group; "
              "+%d generated +%d observation tokens per turn)\n",
              sessions, group, turns, first, turn_new, obs);
  std::printf("%-16s %17s %15s %15s %9s %10s %17s\n", "", "prefill computed", "prefill reused",
              "prefill shared", "wall s", "speedup", "identical turns");
  for (const auto& [name, run] : {std::pair<const char*, const ReuseRun*>{"reuse + shared", &shared},
                                  {"reuse", &with}, {"no reuse", &without}})
    std::printf("%-16s %17lld %15lld %15lld %9.3f %9.2fx %11d / %zu\n", name,
                static_cast<long long>(run->prefill_computed), static_cast<long long>(run->prefill_reused),
                static_cast<long long>(run->prefill_shared), run->seconds, without.seconds / run->seconds,
                identical(*run), run->outputs.size());
  std::printf("prefill saved: %.1f%% by reuse, %.1f%% by reuse and shared prefixes\n", 100 * saved,
              100 * shared_saved);

  json.emplace_back("prefill_tok_s", bench::num(prefill_best));
  json.emplace_back("reuse_prefill_computed", bench::num(static_cast<double>(with.prefill_computed)));
  json.emplace_back("noreuse_prefill_computed",
                    bench::num(static_cast<double>(without.prefill_computed)));
  json.emplace_back("reuse_prefill_saved_frac", bench::num(saved));
  json.emplace_back("reuse_wall_s", bench::num(with.seconds));
  json.emplace_back("noreuse_wall_s", bench::num(without.seconds));
  json.emplace_back("reuse_speedup", bench::num(without.seconds / with.seconds));
  json.emplace_back("reuse_identical_frac",
                    bench::num(static_cast<double>(identical(with)) / with.outputs.size()));
  json.emplace_back("shared_prefill_computed", bench::num(static_cast<double>(shared.prefill_computed)));
  json.emplace_back("shared_prefill_saved_frac", bench::num(shared_saved));
  json.emplace_back("shared_wall_s", bench::num(shared.seconds));
  json.emplace_back("shared_speedup", bench::num(without.seconds / shared.seconds));
  json.emplace_back("shared_identical_frac",
                    bench::num(static_cast<double>(identical(shared)) / shared.outputs.size()));
  json.emplace_back("group", bench::num(group));
  json.emplace_back("threads", bench::num(omp_get_max_threads()));
  json.emplace_back("quick", quick ? "true" : "false");
  bench::print_json(json);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
