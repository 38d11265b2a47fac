// The data pool at cluster scale: a discrete-event simulation of Windowed
// FIFO (the WindowScheduler of src/mpi_roles) for fifo, windowed and greedy
// at the same N (generations running at once), M (finished trajectories
// held) and W.
//
// Model. An episode's duration is lognormal with mean `mean` and shape
// `sigma`, except a share `tail` of episodes that take `tail_x` times the mean
// (the stragglers of agent rollouts); its length in tokens is proportional to
// its duration times lognormal noise (sigma 0.25), so long episodes are long.
// An episode still running `deadline` seconds after its start is abandoned:
// it finishes then, is never trained on, and is counted. Generation starts an
// episode whenever the pool admits one (fewer than N running, fewer than M
// finished waiting) and stamps it with the learner's version. The learner
// fills a batch of B trajectories by taking visible DONE slots (instantly;
// it waits, idle, while none is visible), skipping abandoned ones and those
// over the staleness cap, trains for `step` seconds and publishes version + 1.
// The cap is the same for the three policies: by default windowed's bound
// (staleness_bound), so that all three promise the same off-policyness;
// --cap=-1 runs without one.
//
// Measured over `measure_s` seconds after `warmup_s` (whole learner steps):
// throughput (trained trajectories / s), the
// learner's idle share, staleness (version at take - version at start),
// length bias (mean length of the trained trajectories / mean length of all
// episodes that finished in the same period, abandoned ones excluded), peak
// memory (finished, unconsumed trajectories held at once), abandoned and
// dropped counts.
//
// Targets (issue: Windowed FIFO): windowed at least 90% of greedy's
// throughput and 1.5x fifo's; its length bias (distance from 1) at most a
// third of greedy's; its maximum staleness below greedy's.
//
//   bench_scheduler [--n=8192] [--w=4096] [--m=65536] [--batch=1024] [--step=0.1]
//                   [--sigmas=1.5,1.0] [--mean=1] [--tail=0.001] [--tail_x=1000]
//                   [--deadline=20] [--cap=bound] [--warmup_s=3*deadline]
//                   [--measure_s=10*deadline] [--seed=1] [--quick]
// The JSON line has today's keys (<policy>_traj_per_s, ...) for the first
// sigma, and the same keys prefixed "s<k>_" for the k-th further sigma.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <sstream>
#include <vector>

#include "bench_util.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "mpi_roles/window_policy.hpp"

using namespace forge;

namespace {

struct Params {
  uint64_t n, w, m, batch;
  double sigma, mean, step, tail, tail_x, deadline;
  int64_t cap = -1;  // < 0: none
  double warmup_s, measure_s;
  uint64_t seed;
};

struct Result {
  uint64_t window = 0;
  double throughput = 0, idle = 0, length_bias = 0;
  uint64_t peak_memory = 0, abandoned = 0, dropped = 0;
  StalenessStats staleness;
};

struct Episode {
  int64_t version = 0;  // at its start
  double length = 0;    // tokens, proportional to its duration
  bool abandoned = false;
};

// The pool's configuration for a policy under these parameters.
WindowConfig config_of(WindowKind kind, const Params& p) {
  WindowConfig cfg;
  cfg.kind = kind;
  cfg.n_running = p.n;
  cfg.memory = p.m;
  cfg.window = p.w;
  cfg.staleness_cap = p.cap;
  return cfg;
}

Result simulate(WindowKind kind, const Params& p) {
  const WindowConfig cfg = config_of(kind, p);
  WindowScheduler ws(cfg);
  Rng rng(p.seed);
  using Event = std::pair<double, uint64_t>;  // (finish time, slot)
  std::priority_queue<Event, std::vector<Event>, std::greater<>> running;
  std::vector<Episode> ep;
  double now = 0, idle = 0, t0 = 0;
  int64_t version = 0;
  bool measuring = false;
  uint64_t trained = 0;
  double trained_len = 0, finished_len = 0;
  uint64_t finished_count = 0;
  Result r;
  r.window = ws.window();

  const auto admit = [&] {
    while (ws.can_start()) {
      const uint64_t s = ws.start();
      double d = rng.uniform() < p.tail ? p.mean * p.tail_x
                                        : p.mean * std::exp(p.sigma * rng.normal() - 0.5 * p.sigma * p.sigma);
      const double length = d * std::exp(0.25 * rng.normal());
      const bool abandoned = d > p.deadline;
      if (abandoned) d = p.deadline;
      ep.push_back({version, length, abandoned});
      running.push({now + d, s});
    }
  };
  // Finishes every episode due by t, admitting new ones as each frees its place.
  const auto finish_until = [&](double t) {
    while (!running.empty() && running.top().first <= t) {
      const auto [when, s] = running.top();
      running.pop();
      ws.finish(s);
      if (measuring && !ep[s].abandoned) {
        finished_len += ep[s].length;
        ++finished_count;
      }
      now = when;  // every queued finish is later than the last one
      admit();
    }
  };

  admit();
  while (now < p.warmup_s + p.measure_s) {
    if (!measuring && now >= p.warmup_s) {
      measuring = true;
      t0 = now;
    }
    // A batch ends with p.batch trained episodes, or at the end of the
    // measured time (with every episode abandoned or dropped, none ever
    // comes: the run held the loop forever, its episode list growing).
    for (uint64_t got = 0; got < p.batch && now < p.warmup_s + p.measure_s;) {
      if (auto s = ws.take()) {
        admit();
        const Episode& e = ep[*s];
        if (e.abandoned) {
          r.abandoned += measuring;
          continue;
        }
        const int64_t st = version - e.version;
        const Verdict v = cfg.verdict(st);
        if (measuring) r.staleness.add(st, v);
        if (v != Verdict::kTrain) {
          r.dropped += measuring;
          continue;
        }
        if (measuring) {
          ++trained;
          trained_len += e.length;
        }
        ++got;
        continue;
      }
      FORGE_CHECK(!running.empty(), "bench_scheduler: nothing visible and nothing running");
      const double t = running.top().first;  // nothing visible: wait
      if (measuring) idle += t - now;
      finish_until(t);
      now = t;
    }
    r.peak_memory = std::max<uint64_t>(r.peak_memory, measuring ? ws.finished() : 0);
    const double end = now + p.step;  // train; generation goes on meanwhile
    finish_until(end);
    now = end;
    if (measuring) r.peak_memory = std::max<uint64_t>(r.peak_memory, ws.finished());
    ++version;
  }
  if (!measuring) t0 = now;  // the warm-up never ended: nothing measured
  const double span = std::max(now - t0, 1e-9);
  r.throughput = static_cast<double>(trained) / span;
  r.idle = idle / span;
  r.length_bias = (trained_len / std::max<uint64_t>(1, trained)) /
                  (finished_len / std::max<uint64_t>(1, finished_count));
  return r;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const bool quick = flags.on("quick");
  Params p;
  // Sizes are read signed and checked before they become uint64_t (-1 wrapped to 2^64 - 1).
  const int n = flags.get("n", 8192), w = flags.get("w", 4096), m = flags.get("m", 65536);
  const int batch = flags.get("batch", 1024);
  const auto positive = [](int v) { return static_cast<uint64_t>(std::max(v, 0)); };
  p.n = positive(n);
  p.w = positive(w);
  p.m = positive(m);
  p.mean = flags.get("mean", 1.0);
  p.tail = flags.get("tail", 0.001);
  p.tail_x = flags.get("tail_x", 1000.0);
  p.deadline = flags.get("deadline", 20.0);
  const std::string cap = flags.get("cap", std::string("bound"));
  p.batch = positive(batch);
  p.step = flags.get("step", 0.1);
  p.warmup_s = flags.get("warmup_s", (quick ? 1.5 : 3.0) * p.deadline);
  p.measure_s = flags.get("measure_s", (quick ? 3.0 : 10.0) * p.deadline);
  p.seed = static_cast<uint64_t>(flags.get("seed", 1));
  const std::vector<double> sigmas = flags.numbers("sigmas", "1.5,1.0");
  flags.finish();
  const auto require = [](bool ok, const std::string& what) {
    if (!ok) bench::Flags::usage(what);
  };
  require(p.n > 0 && p.w > 0 && p.m > 0 && p.batch > 0, "--n, --w, --m and --batch must be positive");
  require(p.tail >= 0 && p.tail < 1, "--tail is a probability in [0, 1) (at 1 every episode straggles and none trains)");
  require(p.mean > 0 && p.tail_x >= 1 && p.deadline > 0 && p.step > 0, "--mean, --deadline and --step must be > 0, --tail_x >= 1");
  require(p.warmup_s >= 0 && p.measure_s > 0, "--warmup_s must be >= 0 and --measure_s > 0");
  for (const double s : sigmas) require(s >= 0, "--sigmas must be >= 0");
  if (cap == "bound") {
    p.cap = staleness_bound(config_of(WindowKind::kWindowed, p), p.batch);
  } else {
    size_t end = 0;
    try {
      p.cap = std::stoll(cap, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    require(end == cap.size() && !cap.empty() && p.cap >= -1,
            "--cap is 'bound', a staleness >= 0, or -1 (none), got '" + cap + "'");
  }

  std::printf("Windowed FIFO simulation: N %llu running, M %llu finished held, W %llu; learner %llu "
              "trajectories per %.3g s step; %.0f s measured after %.0f s\n",
              static_cast<unsigned long long>(p.n), static_cast<unsigned long long>(p.m),
              static_cast<unsigned long long>(p.w), static_cast<unsigned long long>(p.batch), p.step, p.measure_s,
              p.warmup_s);
  std::printf("episodes: lognormal, mean %.3g s; %.2g%% take %.0fx the mean; abandoned after %.3g s; staleness "
              "cap %lld\n",
              p.mean, 100 * p.tail, p.tail_x, p.deadline, static_cast<long long>(p.cap));
  std::printf("generation capacity N/mean = %.0f traj/s, learner capacity B/step = %.0f traj/s\n",
              static_cast<double>(p.n) / p.mean, static_cast<double>(p.batch) / p.step);
  std::vector<std::pair<std::string, std::string>> kv = {{"bench", "\"scheduler\""},
                                                         {"n", bench::num(static_cast<double>(p.n))},
                                                         {"w", bench::num(static_cast<double>(p.w))},
                                                         {"m", bench::num(static_cast<double>(p.m))},
                                                         {"batch", bench::num(static_cast<double>(p.batch))},
                                                         {"step_s", bench::num(p.step)},
                                                         {"deadline_s", bench::num(p.deadline)},
                                                         {"tail", bench::num(p.tail)},
                                                         {"tail_x", bench::num(p.tail_x)}};
  bool all_met = true;
  const WindowKind kinds[3] = {WindowKind::kFifo, WindowKind::kWindowed, WindowKind::kGreedy};
  for (size_t k = 0; k < sigmas.size(); ++k) {
    p.sigma = sigmas[k];
    const std::string pre = k == 0 ? std::string() : std::string("s").append(std::to_string(k)).append("_");
    std::printf("\nsigma %.2g\n%-9s %6s %10s %7s %8s %6s %6s %6s %7s %7s %9s %9s %8s\n", p.sigma, "policy", "W",
                "traj/s", "idle", "stale", "p50", "p99", "max", "bound", "len", "peak mem", "abandoned",
                "dropped");
    Result res[3];
    for (int i = 0; i < 3; ++i) {
      res[i] = simulate(kinds[i], p);
      const Result& r = res[i];
      if (r.throughput == 0)
        throw InputError(to_string(kinds[i]) + " trained no episode in the measured time at sigma " +
                         std::to_string(p.sigma).substr(0, 4) + ": every one was abandoned past --deadline or dropped by "
                         "the staleness cap (lengthen --deadline or --measure_s)");
      const int64_t bound = staleness_bound(config_of(kinds[i], p), p.batch);
      const std::string wtxt = r.window == kUnboundedWindow ? "any" : std::to_string(r.window);
      const std::string btxt = bound < 0 ? "none" : std::to_string(bound);
      std::printf("%-9s %6s %10.1f %6.1f%% %8.2f %6lld %6lld %6lld %7s %7.3f %9llu %9llu %8llu\n",
                  to_string(kinds[i]).c_str(), wtxt.c_str(), r.throughput, 100 * r.idle, r.staleness.mean(),
                  static_cast<long long>(r.staleness.quantile(0.5)),
                  static_cast<long long>(r.staleness.quantile(0.99)), static_cast<long long>(r.staleness.max()),
                  btxt.c_str(), r.length_bias, static_cast<unsigned long long>(r.peak_memory),
                  static_cast<unsigned long long>(r.abandoned), static_cast<unsigned long long>(r.dropped));
      const std::string key = pre + to_string(kinds[i]);
      kv.push_back({key + "_traj_per_s", bench::num(r.throughput)});
      kv.push_back({key + "_idle", bench::num(r.idle)});
      kv.push_back({key + "_stale_mean", bench::num(r.staleness.mean())});
      kv.push_back({key + "_stale_p50", bench::num(static_cast<double>(r.staleness.quantile(0.5)))});
      kv.push_back({key + "_stale_p99", bench::num(static_cast<double>(r.staleness.quantile(0.99)))});
      kv.push_back({key + "_stale_max", bench::num(static_cast<double>(r.staleness.max()))});
      kv.push_back({key + "_length_bias", bench::num(r.length_bias)});
      kv.push_back({key + "_peak_memory", bench::num(static_cast<double>(r.peak_memory))});
      kv.push_back({key + "_abandoned", bench::num(static_cast<double>(r.abandoned))});
      kv.push_back({key + "_dropped", bench::num(static_cast<double>(r.dropped))});
    }
    const Result &fifo = res[0], &win = res[1], &greedy = res[2];
    const double vs_greedy = win.throughput / greedy.throughput;
    const double vs_fifo = win.throughput / fifo.throughput;
    const double bias_ratio =
        std::fabs(win.length_bias - 1) / std::max(1e-9, std::fabs(greedy.length_bias - 1));
    const double max_ratio = static_cast<double>(win.staleness.max()) /
                             static_cast<double>(std::max<int64_t>(1, greedy.staleness.max()));
    const bool met = vs_greedy >= 0.9 && vs_fifo >= 1.5 && bias_ratio <= 1.0 / 3 && max_ratio < 1.0;
    all_met = all_met && met;
    std::printf("windowed: %.1f%% of greedy's throughput (target >= 90%%), %.2fx fifo's (>= 1.5x), length bias "
                "%.2f of greedy's (<= 0.33), max staleness %.2f of greedy's (< 1): target %s\n",
                100 * vs_greedy, vs_fifo, bias_ratio, max_ratio, met ? "met" : "NOT met");
    kv.push_back({pre + "sigma", bench::num(p.sigma)});
    kv.push_back({pre + "windowed_vs_greedy", bench::num(vs_greedy)});
    kv.push_back({pre + "windowed_vs_fifo", bench::num(vs_fifo)});
    kv.push_back({pre + "length_bias_ratio", bench::num(bias_ratio)});
    kv.push_back({pre + "max_staleness_ratio", bench::num(max_ratio)});
  }
  kv.push_back({"target_met", all_met ? "true" : "false"});
  bench::print_json(kv);
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
