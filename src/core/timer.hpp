// Stopwatches on the active clock: steady time less the time this process
// could not act (SIGSTOP: a Slurm job suspend, preemption by suspension, a
// debugger), so that no deadline blames a peer for a whole-job pause.
//
// A ticker (the MPI watchdog's thread) beats every `period`, and is the
// clock's one writer: at each beat it publishes (B, A), the beat's steady
// time and the active time then (a seqlock). A reader at steady time t
// reads A + g(t - B), where, with P = max(1 s, 4 periods) and a window
// X = max(1 s, 4 periods):
//   g(d) = d                      while the beat is not overdue (d <= P),
//        = P                      from then until X after the first reader
//                                 found it overdue (at B + s),
//        = P + d - s - X          after that.
// A stop leaves every thread, the ticker too, unable to read or beat: the
// first look after it finds the beat overdue, and the stop counts as P at
// most, whichever of the ticker and a reader runs first (the next beat
// publishes what readers read). A ticker starved or blocked while readers
// look delays their deadlines by (s - P) + X at most per late beat, never
// forever (a ticker late at every beat runs the clock slow: deadlines come
// late, not early). g is continuous with slope <= 1, and a reader takes the
// steady time inside the seqlock (a beat published before it makes the
// reader retry), so a thread's readings never go back, across beats too.
// Limits: a stop that begins while the beat is already overdue counts from
// where the clock stood (in full when that was past s + X); before the
// first beat, a stop counts in full.
// Without a ticker the active clock is the steady clock.
#pragma once
#include <cstdint>

namespace forge {

// One beat of the ticker (one thread per process); period_s is its period.
void tick(double period_s);
// The active clock, in nanoseconds from an arbitrary origin.
int64_t active_ns();
// Steady seconds left out of the active clock up to the last beat (grows
// when a beat finds the one before overdue: a stop, or the ticker starved).
double left_out_seconds();

class Stopwatch {
 public:
  Stopwatch() { reset(); }
  void reset() { t0_ = active_ns(); }
  // Active seconds since the start (or reset).
  double seconds() const { return static_cast<double>(active_ns() - t0_) * 1e-9; }
  double ms() const { return seconds() * 1e3; }

 private:
  int64_t t0_ = 0;
};

}  // namespace forge
