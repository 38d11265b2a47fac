// Stopwatches on the active clock: steady time less the time this process
// was stopped (SIGSTOP: a Slurm job suspend, preemption by suspension, a
// debugger). A ticker that runs every `period` (the MPI watchdog's thread)
// calls tick(); a gap between its beats longer than max(2 s, 8 periods)
// that a SIGCONT confirms (catch_sigcont) was the stop, and is left out of
// every Stopwatch (less one period: the beat that was due).
// On resuming, every thread wakes at once, in no set order with the
// SIGCONT handler, so two things may run before the handler:
// - the ticker's next beat: it records the gap it saw, and the handler,
//   finding no gap of its own, accounts that one;
// - a reader: a gap it sees that no SIGCONT has yet confirmed (the beat
//   overdue, or a recorded gap) is left out provisionally, for at most
//   max(1 s, 4 periods) after it was first seen. A gap still unconfirmed
//   then was the ticker starved or blocked, not a stop, and counts again:
//   deadlines fire late by that much at most, never not at all.
// Without a ticker the active clock is the steady clock.
// Deadlines thus count only time the process could act: after a whole-job
// suspend no rank blames a peer for the pause, while a stall of one rank
// (its peers tick on) is still reported.
#pragma once
#include <cstdint>

namespace forge {

// One beat of the ticker; period_s is its period.
void tick(double period_s);
// Accounts a stop when SIGCONT arrives (idempotent; for processes with a
// ticker).
void catch_sigcont();
// Seconds of stops accounted (confirmed by a SIGCONT) so far.
double suspended_seconds();
// The active clock, in nanoseconds from an arbitrary origin.
int64_t active_ns();

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
