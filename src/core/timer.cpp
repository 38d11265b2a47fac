#include "core/timer.hpp"

#include <signal.h>
#include <time.h>

#include <algorithm>

namespace forge {
namespace {

std::atomic<int64_t> g_last_tick_ns{0};  // CLOCK_MONOTONIC (steady_clock's) ns; 0: no ticker yet
std::atomic<int64_t> g_period_ns{250'000'000};

int64_t monotonic_ns() {  // async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// The gap since the last beat, as a stop when it is far past the period
// (each SIGCONT accounts the gap before it once: the beat moves to now).
void account(int64_t now) {
  const int64_t last = g_last_tick_ns.exchange(now);
  const int64_t period = g_period_ns.load();
  const int64_t pause = std::max<int64_t>(2'000'000'000, 8 * period);
  if (last != 0 && now - last > pause) timer_detail::suspended_ns.fetch_add(now - last - period);
}

void on_sigcont(int) {
  if (g_last_tick_ns.load() != 0) account(monotonic_ns());
}

}  // namespace

void tick(double period_s) {
  // Only a SIGCONT accounts a stop: a gap between beats alone may be the
  // ticker starved or blocked (in MPI), not the process stopped.
  g_period_ns.store(static_cast<int64_t>(period_s * 1e9));
  g_last_tick_ns.store(monotonic_ns());
}

void catch_sigcont() {
  struct sigaction sa {};
  sa.sa_handler = on_sigcont;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCONT, &sa, nullptr);
}

}  // namespace forge
