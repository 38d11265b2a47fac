// Stopwatches on the active clock: steady time less the time this process
// was stopped (SIGSTOP: a Slurm job suspend, preemption by suspension, a
// debugger). A ticker that runs every `period` (the MPI watchdog's thread)
// calls tick(); when SIGCONT continues the process (catch_sigcont), a gap
// since the last tick longer than max(2 s, 8 periods) was the stop, and it
// is left out of every Stopwatch. The handler runs as the process resumes,
// before its threads go on, so no deadline that ran across the stop fires
// on resuming; a gap without a SIGCONT (the ticker starved or blocked) is
// not a stop. Without a ticker the active clock is the steady clock.
// Deadlines thus count only time the process could act: after a whole-job
// suspend no rank blames a peer for the pause, while a stall of one rank
// (its peers tick on) is still reported.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace forge {

namespace timer_detail {
inline std::atomic<int64_t> suspended_ns{0};
}  // namespace timer_detail

// One beat of the ticker; period_s is its period.
void tick(double period_s);
// Accounts a stop when SIGCONT arrives (idempotent; for processes with a
// ticker).
void catch_sigcont();
// Seconds of stops accounted so far.
inline double suspended_seconds() {
  return static_cast<double>(timer_detail::suspended_ns.load(std::memory_order_relaxed)) * 1e-9;
}

class Stopwatch {
 public:
  Stopwatch() { reset(); }
  void reset() {
    t0_ = std::chrono::steady_clock::now();
    suspended0_ = timer_detail::suspended_ns.load(std::memory_order_relaxed);
  }
  // Active seconds since the start (or reset).
  double seconds() const {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const int64_t paused = timer_detail::suspended_ns.load(std::memory_order_relaxed) - suspended0_;
    return wall - static_cast<double>(paused) * 1e-9;
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point t0_;
  int64_t suspended0_ = 0;
};

}  // namespace forge
