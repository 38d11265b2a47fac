// The MPI data pool on this machine: enqueue (start + complete) and dequeue
// (take) operations per second and their latencies. An MPI program: under
// `mpirun -np P` rank 0 hosts the pool and consumes, ranks 1..P-1 produce
// `ops` payloads of `bytes` bytes between them (start blocks on backpressure).
// Run alone (one rank), rank 0 enqueues and dequeues in turn (loopback).
// Enqueue/s = payloads / the slowest producer's time; dequeue/s = payloads /
// the consumer's time; latencies are per call (p50, p99), a dequeue's counted
// from the try_take that succeeded (polls that found nothing excluded). With
// several producers the enqueue p50 is the median of the producers' p50s and
// the p99 the largest producer's p99 (not quantiles of all their calls).
//
//   mpirun -np P bench_pool [--n=1024] [--m=1024] [--w=256] [--bytes=1024] [--ops=20000]
#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "core/timer.hpp"
#include "mpi_roles/data_pool.hpp"

using namespace forge;

namespace {

double quantile_us(const std::vector<double>& seconds, double q) { return 1e6 * bench::quantile(seconds, q); }

}  // namespace

static int bench_main(int argc, char** argv) {
  // The flags before MPI: --help and a usage error exit without a rank's
  // MPI_Finalize (mpirun then reported an improper exit, rc 1).
  bench::Flags flags(argc, argv);
  DataPoolConfig cfg;
  cfg.window.kind = WindowKind::kWindowed;
  const int n = flags.get("n", 1024), m = flags.get("m", 1024), w = flags.get("w", 256);
  const double bytes = flags.get("bytes", 1024.0);
  const int ops = flags.get("ops", 20000);
  flags.finish();
  if (n < 1 || m < 1 || w < 1 || ops < 1) bench::Flags::usage("--n, --m, --w and --ops must be at least 1");
  if (!(bytes >= 1 && bytes < 2147483648.0) || bytes != static_cast<double>(static_cast<int64_t>(bytes)))
    bench::Flags::usage("--bytes must be a whole number in [1, 2^31)");
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  cfg.window.n_running = static_cast<uint64_t>(n);
  cfg.window.memory = static_cast<uint64_t>(m);
  cfg.window.window = static_cast<uint64_t>(w);
  cfg.slot_bytes = static_cast<uint64_t>(bytes);

  const int producers = std::max(1, size - 1);
  std::vector<uint8_t> payload(cfg.slot_bytes, 0x5a);
  std::vector<double> enq, deq;
  double elapsed = 0;
  {
    DataPool pool(MPI_COMM_WORLD, cfg);
    MPI_Barrier(MPI_COMM_WORLD);
    Stopwatch total;
    if (size == 1) {
      for (int i = 0; i < ops; ++i) {
        Stopwatch sw;
        pool.complete(pool.start(), payload.data(), payload.size(), 0);
        enq.push_back(sw.seconds());
        sw.reset();
        pool.take();
        deq.push_back(sw.seconds());
      }
    } else if (rank == 0) {
      while (static_cast<int>(deq.size()) < ops) {
        Stopwatch sw;
        if (pool.try_take()) deq.push_back(sw.seconds());
      }
    } else {
      const int mine = ops / producers + (rank - 1 < ops % producers ? 1 : 0);
      for (int i = 0; i < mine; ++i) {
        Stopwatch sw;
        pool.complete(pool.start(), payload.data(), payload.size(), 0);
        enq.push_back(sw.seconds());
      }
    }
    elapsed = total.seconds();
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // Producers' figures to rank 0 (reporting only, off the data path).
  double mine[3] = {elapsed, quantile_us(enq, 0.5), quantile_us(enq, 0.99)};
  std::vector<double> all(3 * static_cast<size_t>(size));
  MPI_Gather(mine, 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double enq_time = 0, enq_p50 = 0, enq_p99 = 0;
    double deq_time = elapsed;
    if (size == 1) {
      // One rank alternates: each rate comes from the time spent in its own calls.
      enq_time = std::accumulate(enq.begin(), enq.end(), 0.0);
      deq_time = std::accumulate(deq.begin(), deq.end(), 0.0);
      enq_p50 = all[1];
      enq_p99 = all[2];
    } else {
      std::vector<double> p50s;
      for (int r = 1; r < size; ++r) {
        enq_time = std::max(enq_time, all[3 * r]);
        p50s.push_back(all[3 * r + 1]);
        enq_p99 = std::max(enq_p99, all[3 * r + 2]);
      }
      std::sort(p50s.begin(), p50s.end());
      enq_p50 = p50s[p50s.size() / 2];
    }
    const double enq_per_s = ops / enq_time, deq_per_s = ops / deq_time;
    if (size == 1)
      std::printf("one rank (started without mpirun, or -np 1): rank 0 enqueues and dequeues in "
                  "turn; run `mpirun -np P bench_pool` for P - 1 producers\n");
    std::printf("data pool: N %llu, M %llu, W %llu, %llu-byte payloads, %d payloads, %d rank(s), %d "
                "producer(s)\n\n",
                static_cast<unsigned long long>(cfg.window.n_running), static_cast<unsigned long long>(cfg.window.memory),
                static_cast<unsigned long long>(cfg.window.effective_window()),
                static_cast<unsigned long long>(cfg.slot_bytes), ops, size, producers);
    std::printf("%6s %10s %11s %11s %11s %11s %11s %11s\n", "ranks", "producers", "enqueue/s",
                "enq p50 us", "enq p99 us", "dequeue/s", "deq p50 us", "deq p99 us");
    std::printf("%6d %10d %11.0f %11.2f %11.2f %11.0f %11.2f %11.2f\n", size, producers,
                enq_per_s, enq_p50, enq_p99, deq_per_s, quantile_us(deq, 0.5),
                quantile_us(deq, 0.99));
    bench::print_json({{"bench", "\"pool\""},
                       {"ranks", bench::num(size)},
                       {"producers", bench::num(producers)},
                       {"bytes", bench::num(static_cast<double>(cfg.slot_bytes))},
                       {"ops", bench::num(ops)},
                       {"enqueue_per_s", bench::num(enq_per_s)},
                       {"enqueue_p50_us", bench::num(enq_p50)},
                       {"enqueue_p99_us", bench::num(enq_p99)},
                       {"dequeue_per_s", bench::num(deq_per_s)},
                       {"dequeue_p50_us", bench::num(quantile_us(deq, 0.5))},
                       {"dequeue_p99_us", bench::num(quantile_us(deq, 0.99))}});
  }
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
