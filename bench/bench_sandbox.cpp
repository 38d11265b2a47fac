// What the sandbox costs a tool call: the latency of `run_tests` (Python's
// unittest on a small module and its tests, the code domain's tool) run
// through run_sandboxed (src/sandbox/sandbox.hpp) and the same command run
// directly (fork/exec in a temporary folder holding the same files),
// alternated in one run so that both see the same machine load; then the
// throughput of a SandboxPool of `--concurrency` against as many direct
// runners. Target (the code-domain issue): the sandbox adds at most 30 ms at
// p50.
//
//   bench_sandbox [--runs=60] [--concurrency=2] [--jobs=60]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "sandbox/sandbox.hpp"
#include "sandbox/sandbox_pool.hpp"

using namespace forge;

namespace {

const std::vector<SandboxFile> kWorkspace = {
    {"shapes.py",
     "def area(w, h):\n    return w * h\n\n"
     "def perimeter(w, h):\n    return 2 * (w + h)\n\n"
     "def scale(points, k):\n    return [(x * k, y * k) for x, y in points]\n\n"
     "def longest(words):\n    return max(words, key=len) if words else ''\n\n"
     "def histogram(xs):\n    out = {}\n    for x in xs:\n        out[x] = out.get(x, 0) + 1\n    return out\n"},
    {"test_shapes.py",
     "import unittest\nfrom shapes import area, perimeter, scale, longest, histogram\n\n"
     "class ShapesTest(unittest.TestCase):\n"
     "    def test_area(self):\n        self.assertEqual(area(3, 4), 12)\n"
     "    def test_perimeter(self):\n        self.assertEqual(perimeter(3, 4), 14)\n"
     "    def test_scale(self):\n        self.assertEqual(scale([(1, 2)], 3), [(3, 6)])\n"
     "    def test_longest(self):\n        self.assertEqual(longest(['a', 'abc', 'ab']), 'abc')\n"
     "    def test_longest_empty(self):\n        self.assertEqual(longest([]), '')\n"
     "    def test_histogram(self):\n        self.assertEqual(histogram([1, 1, 2]), {1: 2, 2: 1})\n\n"
     "if __name__ == '__main__':\n    unittest.main()\n"}};
const std::vector<std::string> kRunTests = {"python3", "-m", "unittest", "-q", "test_shapes"};

// The same command without a sandbox: files in a fresh temporary folder,
// fork/exec with the output captured, the folder removed. True when the
// tests passed.
bool run_direct(const std::filesystem::path& root, int id) {
  const std::filesystem::path dir = root / std::to_string(id);
  std::filesystem::create_directories(dir);
  for (const SandboxFile& f : kWorkspace) std::ofstream(dir / f.path) << f.content;
  int p[2];
  if (pipe(p) != 0) return false;
  std::vector<std::string> args = kRunTests;
  args[0] = "/usr/bin/python3";
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    close(p[1]);
    if (chdir(dir.c_str()) != 0) _exit(126);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(p[1]);
  char buf[4096];
  while (read(p[0], buf, sizeof buf) > 0) {
  }
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::filesystem::remove_all(dir);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const int runs = flags.get("runs", 60);
  const int concurrency = flags.get("concurrency", 2);
  const int jobs = flags.get("jobs", 60);
  flags.finish();
  if (runs < 1 || concurrency < 1 || jobs < 1) bench::Flags::usage("--runs, --concurrency and --jobs must be >= 1");
  if (const std::string& why = sandbox_unavailable_reason(); !why.empty()) {
    std::fprintf(stderr, "error: sandboxes cannot start on this machine: %s\n", why.c_str());
    return 1;
  }
  const std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("forge_bench_sandbox_" + std::to_string(getpid()));
  const SandboxLimits limits;
  const SandboxRequest request{kRunTests, kWorkspace};

  // Latency, alternating, after one warm-up of each.
  run_direct(root, 0);
  run_sandboxed(request, limits);
  std::vector<double> direct, boxed;
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    Stopwatch sw;
    failures += !run_direct(root, i);
    direct.push_back(sw.ms());
    // The whole call, as the direct run's (the run's own wall_ms starts at
    // its fork, after the workspace files and the filter are written).
    Stopwatch boxed_sw;
    const SandboxResult r = run_sandboxed(request, limits);
    boxed.push_back(boxed_sw.ms());
    if (!r.ok()) {
      ++failures;
      std::fprintf(stderr, "sandboxed run_tests failed (%s): %s%s\n", to_string(r.status), r.error.c_str(),
                   r.output.c_str());
    }
  }

  // Throughput: `jobs` runs through a pool, then through as many direct threads.
  Stopwatch pool_sw;
  {
    SandboxPool pool(concurrency, limits);
    std::vector<std::future<SandboxResult>> f;
    for (int i = 0; i < jobs; ++i) f.push_back(pool.submit(request));
    for (auto& x : f) failures += !x.get().ok();
  }
  const double pool_s = pool_sw.seconds();
  Stopwatch direct_sw;
  {
    std::atomic<int> next{0}, failed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t)
      threads.emplace_back([&] {
        for (int i; (i = next++) < jobs;) failed += !run_direct(root, 100000 + i);
      });
    for (auto& t : threads) t.join();
    failures += failed;
  }
  const double direct_s = direct_sw.seconds();
  std::filesystem::remove_all(root);

  const double d50 = bench::quantile(direct, 0.5), d99 = bench::quantile(direct, 0.99);
  const double s50 = bench::quantile(boxed, 0.5), s99 = bench::quantile(boxed, 0.99);
  std::printf("run_tests (python3 -m unittest, 6 tests), %d runs each, alternated\n", runs);
  std::printf("%-10s %9s %9s %12s\n", "", "p50 ms", "p99 ms", "runs/s");
  std::printf("%-10s %9.1f %9.1f %12.1f\n", "direct", d50, d99, jobs / direct_s);
  std::printf("%-10s %9.1f %9.1f %12.1f\n", "sandbox", s50, s99, jobs / pool_s);
  std::printf("sandbox overhead at p50: %.1f ms (target <= 30 ms); throughput at concurrency %d: %.2fx direct\n",
              s50 - d50, concurrency, direct_s / pool_s);
  if (failures) std::printf("FAILED runs: %d\n", failures);
  bench::print_json({{"bench", "\"sandbox\""},
                     {"runs", bench::num(runs)},
                     {"concurrency", bench::num(concurrency)},
                     {"direct_p50_ms", bench::num(d50)},
                     {"direct_p99_ms", bench::num(d99)},
                     {"sandbox_p50_ms", bench::num(s50)},
                     {"sandbox_p99_ms", bench::num(s99)},
                     {"overhead_p50_ms", bench::num(s50 - d50)},
                     {"direct_runs_per_s", bench::num(jobs / direct_s)},
                     {"sandbox_runs_per_s", bench::num(jobs / pool_s)},
                     {"failures", bench::num(failures)},
                     {"target_overhead_ms", "30"},
                     {"met", s50 - d50 <= 30 && failures == 0 ? "true" : "false"}});
  return failures ? 1 : 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
