// The data pool at cluster scale: a discrete-event simulation of Windowed
// FIFO (the WindowScheduler of src/mpi_roles) for fifo, windowed and greedy.
//
// Model. Every admitted slot starts generating at once (N = generation
// concurrency) with a lognormal duration of mean `mean` and shape `sigma`
// (heavy tail) and is stamped with the learner's version at its start. The
// learner fills a batch of B trajectories by taking visible DONE slots
// (instantly; it waits, idle, while none is visible), then trains for `step`
// seconds and publishes version + 1. Taking advances H, which admits new slots.
// Throughput = trajectories consumed / time, idle = share of time the learner
// waited, staleness = version at take - version at start; measured after
// `warmup` steps.
//
// Target: windowed >= 90% of greedy's throughput and >= 1.5x fifo's, with a
// maximum staleness well below greedy's.
//
//   bench_scheduler [--n=8192] [--w=4096] [--sigma=1.5] [--mean=1] [--batch=1024]
//                   [--step=0.1] [--steps=400] [--warmup=40] [--seed=1] [--quick]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <vector>

#include "bench_util.hpp"
#include "core/rng.hpp"
#include "mpi_roles/window_policy.hpp"

using namespace forge;

namespace {

struct Params {
  uint64_t n, w, batch;
  double sigma, mean, step;
  int steps, warmup;
  uint64_t seed;
};

struct Result {
  uint64_t window = 0;
  double throughput = 0, idle = 0;
  StalenessStats staleness;
};

Result simulate(WindowKind kind, const Params& p) {
  WindowConfig cfg;
  cfg.kind = kind;
  cfg.n_inflight = p.n;
  cfg.window = p.w;
  WindowScheduler ws(cfg);
  Rng rng(p.seed);
  using Event = std::pair<double, uint64_t>;  // (completion time, slot)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> running;
  std::vector<int64_t> start_version(p.n);
  double now = 0, idle = 0, t0 = 0;
  int64_t version = 0;
  uint64_t measured = 0;
  Result r;
  r.window = ws.window();

  auto admit = [&] {
    while (ws.can_start()) {
      const uint64_t s = ws.start();
      start_version[s % p.n] = version;
      const double d = p.mean * std::exp(p.sigma * rng.normal() - 0.5 * p.sigma * p.sigma);
      running.push({now + d, s});
    }
  };
  auto finish_until = [&](double t) {
    while (!running.empty() && running.top().first <= t) {
      ws.finish(running.top().second);
      running.pop();
    }
  };

  admit();
  for (int step = 0; step < p.steps; ++step) {
    const bool measuring = step >= p.warmup;
    if (step == p.warmup) t0 = now;
    for (uint64_t got = 0; got < p.batch;) {
      if (auto s = ws.take()) {
        if (measuring) {
          r.staleness.add(version - start_version[*s % p.n], Verdict::kTrain);
          ++measured;
        }
        ++got;
        admit();
        continue;
      }
      const double t = running.top().first;  // nothing visible: wait
      if (measuring) idle += t - now;
      now = t;
      finish_until(now);
    }
    now += p.step;  // train; H does not move, so nothing is admitted
    finish_until(now);
    ++version;
  }
  r.throughput = static_cast<double>(measured) / (now - t0);
  r.idle = idle / (now - t0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const bool quick = flags.has("quick");
  Params p;
  p.n = static_cast<uint64_t>(flags.get("n", 8192));
  p.w = static_cast<uint64_t>(flags.get("w", 4096));
  p.sigma = flags.get("sigma", 1.5);
  p.mean = flags.get("mean", 1.0);
  p.batch = static_cast<uint64_t>(flags.get("batch", 1024));
  p.step = flags.get("step", 0.1);
  p.steps = flags.get("steps", quick ? 100 : 400);
  p.warmup = flags.get("warmup", quick ? 10 : 40);
  p.seed = static_cast<uint64_t>(flags.get("seed", 1));
  flags.finish();

  std::printf("Windowed FIFO simulation: N %llu, W %llu, lognormal episodes (mean %.3g s, sigma "
              "%.3g), learner %llu trajectories per %.3g s step, %d steps (%d warm-up)\n",
              static_cast<unsigned long long>(p.n), static_cast<unsigned long long>(p.w), p.mean,
              p.sigma, static_cast<unsigned long long>(p.batch), p.step, p.steps, p.warmup);
  std::printf("generation capacity N/mean = %.0f traj/s, learner capacity B/step = %.0f traj/s\n\n",
              static_cast<double>(p.n) / p.mean, static_cast<double>(p.batch) / p.step);
  std::vector<std::pair<std::string, std::string>> kv = {
      {"bench", "\"scheduler\""},
      {"n", bench::num(static_cast<double>(p.n))},
      {"w", bench::num(static_cast<double>(p.w))},
      {"sigma", bench::num(p.sigma)},
      {"batch", bench::num(static_cast<double>(p.batch))},
      {"step_s", bench::num(p.step)}};
  const WindowKind kinds[3] = {WindowKind::kFifo, WindowKind::kWindowed, WindowKind::kGreedy};
  std::printf("%-9s %6s %10s %7s %8s %6s %6s %6s %7s\n", "policy", "W", "traj/s", "idle",
              "stale", "p50", "p99", "max", "bound");
  Result res[3];
  for (int i = 0; i < 3; ++i) {
    res[i] = simulate(kinds[i], p);
    const Result& r = res[i];
    std::printf("%-9s %6llu %10.1f %6.1f%% %8.2f %6lld %6lld %6lld %7lld\n",
                to_string(kinds[i]).c_str(), static_cast<unsigned long long>(r.window),
                r.throughput, 100 * r.idle, r.staleness.mean(),
                static_cast<long long>(r.staleness.quantile(0.5)),
                static_cast<long long>(r.staleness.quantile(0.99)),
                static_cast<long long>(r.staleness.max()),
                static_cast<long long>(staleness_bound(p.n, r.window, p.batch)));
    const std::string k = to_string(kinds[i]);
    kv.push_back({k + "_traj_per_s", bench::num(r.throughput)});
    kv.push_back({k + "_idle", bench::num(r.idle)});
    kv.push_back({k + "_stale_mean", bench::num(r.staleness.mean())});
    kv.push_back({k + "_stale_p50", bench::num(static_cast<double>(r.staleness.quantile(0.5)))});
    kv.push_back({k + "_stale_p99", bench::num(static_cast<double>(r.staleness.quantile(0.99)))});
    kv.push_back({k + "_stale_max", bench::num(static_cast<double>(r.staleness.max()))});
  }
  const Result &fifo = res[0], &win = res[1], &greedy = res[2];
  const double vs_greedy = win.throughput / greedy.throughput;
  const double vs_fifo = win.throughput / fifo.throughput;
  const double max_ratio = static_cast<double>(win.staleness.max()) /
                           static_cast<double>(std::max<int64_t>(1, greedy.staleness.max()));
  const bool target = vs_greedy >= 0.9 && vs_fifo >= 1.5 && max_ratio < 1.0;
  std::printf("\nwindowed: %.1f%% of greedy's throughput (target >= 90%%), %.2fx fifo's (target "
              ">= 1.5x), max staleness %.2f of greedy's: target %s\n",
              100 * vs_greedy, vs_fifo, max_ratio, target ? "met" : "NOT met");
  kv.push_back({"windowed_vs_greedy", bench::num(vs_greedy)});
  kv.push_back({"windowed_vs_fifo", bench::num(vs_fifo)});
  kv.push_back({"max_staleness_ratio", bench::num(max_ratio)});
  kv.push_back({"target_met", target ? "true" : "false"});
  bench::print_json(kv);
  return 0;
}
