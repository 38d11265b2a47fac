// Publishing one weights version from the learner to the rollout ranks, on
// this machine's host memory: the weight channel of `forge train`
// (src/mpi_roles/weight_channel.hpp). An MPI program: rank 0 is the learner
// and hosts the channel, ranks 1..P-1 are rollout ranks. Per version:
//   publish  rank 0: begin_publish, copy the parameters into the window's
//            buffer (what the learner does on the cpu backend; a device
//            backend downloads there instead), commit_publish
//   pull     every rollout rank at once: try_pull of the new version
//   load     copying the pulled floats into a model's parameters (what
//            PolicyModel::set_params does on the cpu backend)
// with barriers between the phases, so each is timed alone. Medians over
// the versions (after one untimed version: the first pull allocates the
// channel's read buffer); for pull and load, the slowest rollout rank's
// median. The JSON line gives the last size.
//
//   mpirun -np P bench_weight_channel [--floats=663000,206100000] [--versions=8]
// (663,000 floats: the main job's model; 206,100,000: the 206M model of
// bench_train_step's GPU size.)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "mpi_roles/weight_channel.hpp"

using namespace forge;

namespace {

struct Row {
  size_t floats = 0;
  double publish_ms = 0, pull_ms = 0, load_ms = 0;
};

std::vector<size_t> parse_sizes(const std::string& list) {
  std::vector<size_t> sizes;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t end = 0;
    long long n = -1;
    try {
      n = std::stoll(item, &end);
    } catch (const std::exception&) {
    }
    if (n <= 0 || end != item.size())
      throw InputError("--floats: '" + item + "' is not a positive count (a comma-separated list)");
    sizes.push_back(static_cast<size_t>(n));
  }
  // getline drops a trailing empty item: "1," is refused as Flags::numbers refuses it.
  if (!list.empty() && list.back() == ',')
    throw InputError("--floats: '" + list + "' ends in a comma (a comma-separated list of counts)");
  if (sizes.empty()) throw InputError("--floats: no sizes given");
  return sizes;
}

// One size: the medians of `versions` publications (rank 0's figures; the
// pull and load figures are the slowest rollout rank's medians).
Row measure(size_t floats, int versions, int rank, int size) {
  Row row;
  row.floats = floats;
  std::vector<double> publish, pull, load;
  {
    WeightChannel ch(MPI_COMM_WORLD, 0, floats);
    std::vector<float> model(floats, 0.0f), pulled(floats, -1.0f);
    int64_t have = -1;
    for (int64_t v = 0; v <= versions; ++v) {  // version 0 untimed
      if (rank == 0) {
        model.front() = model.back() = static_cast<float>(v);
        Stopwatch sw;
        float* dst = ch.begin_publish(v);
        std::memcpy(dst, model.data(), floats * sizeof(float));
        ch.commit_publish(v);
        if (v > 0) publish.push_back(sw.seconds() * 1e3);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank != 0) {
        Stopwatch sw;
        const int64_t got = ch.try_pull(have, pulled);
        if (v > 0) pull.push_back(sw.seconds() * 1e3);
        // nothing publishes during the pull: it must read the version whole
        FORGE_CHECK(got == v && pulled.front() == v && pulled.back() == v,
                    "rank " + std::to_string(rank) + " pulled version " + std::to_string(got) + " for " +
                        std::to_string(v));
        have = got;
        sw.reset();
        std::memcpy(model.data(), pulled.data(), floats * sizeof(float));
        if (v > 0) load.push_back(sw.seconds() * 1e3);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }
  const double mine[2] = {pull.empty() ? 0 : bench::median(pull), load.empty() ? 0 : bench::median(load)};
  std::vector<double> all(2 * static_cast<size_t>(size));
  MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    row.publish_ms = bench::median(publish);
    for (int r = 1; r < size; ++r) {
      row.pull_ms = std::max(row.pull_ms, all[2 * r]);
      row.load_ms = std::max(row.load_ms, all[2 * r + 1]);
    }
  }
  return row;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  // the flags before MPI: --help and an unknown flag exit there
  bench::Flags flags(argc, argv);
  const std::string floats = flags.get("floats", std::string("663000,206100000"));
  const int versions = flags.get("versions", 8);
  flags.finish();
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  try {
    const std::vector<size_t> sizes = parse_sizes(floats);
    if (versions < 1) throw InputError("--versions must be >= 1");
    if (size < 2) throw InputError("bench_weight_channel needs a rollout rank: mpirun -np 2 (or more)");
    std::vector<Row> rows;
    for (size_t n : sizes) {
      if (rank == 0) std::fprintf(stderr, "bench_weight_channel: %zu floats, %d versions...\n", n, versions);
      rows.push_back(measure(n, versions, rank, size));
    }
    if (rank == 0) {
      std::printf("weight channel: %d rank(s), 1 learner, %d rollout rank(s), %d versions a size, medians\n\n", size,
                  size - 1, versions);
      std::printf("%12s %10s %12s %12s %12s %14s\n", "floats", "MB", "publish ms", "pull ms", "load ms",
                  "pull+load ms");
      for (const Row& r : rows)
        std::printf("%12zu %10.1f %12.2f %12.2f %12.2f %14.2f\n", r.floats, r.floats * 4e-6, r.publish_ms, r.pull_ms,
                    r.load_ms, r.pull_ms + r.load_ms);
      const Row& last = rows.back();
      bench::print_json({{"bench", "\"weight_channel\""},
                         {"ranks", bench::num(size)},
                         {"versions", bench::num(versions)},
                         {"floats", bench::num(static_cast<double>(last.floats))},
                         {"publish_ms", bench::num(last.publish_ms)},
                         {"pull_ms", bench::num(last.pull_ms)},
                         {"load_ms", bench::num(last.load_ms)}});
    }
  } catch (const InputError& e) {
    if (rank == 0) std::fprintf(stderr, "bench_weight_channel: %s\n", e.what());
    code = 2;
  } catch (const std::exception& e) {  // the other ranks may wait in a barrier: end them all
    std::fprintf(stderr, "bench_weight_channel: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
