#include "core/timer.hpp"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>

namespace forge {
namespace {

// Nanoseconds of CLOCK_MONOTONIC (steady_clock's), read async-signal-safely.
int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::atomic<int64_t> g_suspended_ns{0};       // stops confirmed by a SIGCONT
std::atomic<int64_t> g_last_tick_ns{0};       // the ticker's last beat; 0: no ticker yet
std::atomic<int64_t> g_period_ns{250'000'000};
std::atomic<int64_t> g_gap_ns{0};             // a long gap the ticker saw before its last beat, unconfirmed
std::atomic<int64_t> g_gap_at_ns{0};          // when it saw it
std::atomic<int64_t> g_overdue_beat_ns{0};    // a beat a reader found overdue ...
std::atomic<int64_t> g_overdue_since_ns{0};   // ... first at this time

int64_t pause_ns(int64_t period) { return std::max<int64_t>(2'000'000'000, 8 * period); }
int64_t confirm_ns(int64_t period) { return std::max<int64_t>(1'000'000'000, 4 * period); }

void on_sigcont(int) {
  const int64_t last = g_last_tick_ns.load();
  if (last == 0) return;
  const int64_t now = monotonic_ns(), period = g_period_ns.load();
  // Accounted before the beat moves or the gap is cleared: a reader in
  // between leaves the stop out twice (briefly late), never not at all.
  if (now - last > pause_ns(period)) {  // the handler runs before the ticker's next beat
    g_suspended_ns.fetch_add(now - last - period);
    g_last_tick_ns.store(now);
    g_gap_ns.store(0);
  } else if (const int64_t gap = g_gap_ns.load(); gap > 0 && now - g_gap_at_ns.load() < confirm_ns(period)) {
    g_suspended_ns.fetch_add(gap);  // the ticker beat first and recorded the gap
    int64_t seen = gap;
    g_gap_ns.compare_exchange_strong(seen, 0);
  }
}

// The part of the time up to `now` that may be a stop no SIGCONT has
// confirmed yet (see the header): left out for at most confirm_ns.
int64_t unconfirmed_ns(int64_t now) {
  const int64_t last = g_last_tick_ns.load();
  if (last == 0) return 0;
  const int64_t period = g_period_ns.load();
  if (now - last > pause_ns(period)) {
    if (g_overdue_beat_ns.load() != last) {
      g_overdue_since_ns.store(now);
      g_overdue_beat_ns.store(last);
    }
    return now - g_overdue_since_ns.load() < confirm_ns(period) ? now - last - period : 0;
  }
  const int64_t gap = g_gap_ns.load();
  return gap > 0 && now - g_gap_at_ns.load() < confirm_ns(period) ? gap : 0;
}

}  // namespace

void tick(double period_s) {
  const int64_t now = monotonic_ns(), period = static_cast<int64_t>(period_s * 1e9);
  g_period_ns.store(period);
  const int64_t last = g_last_tick_ns.load();
  if (last != 0 && now - last > pause_ns(period)) {
    // A gap readers have already judged no stop (unconfirmed for
    // confirm_ns) is not recorded again.
    const bool judged =
        g_overdue_beat_ns.load() == last && now - g_overdue_since_ns.load() >= confirm_ns(period);
    if (!judged) {  // recorded before the beat moves: readers see one or the other
      g_gap_at_ns.store(now);
      g_gap_ns.store(now - last - period);
    }
  }
  g_last_tick_ns.store(now);
}

void catch_sigcont() {
  struct sigaction sa {};
  sa.sa_handler = on_sigcont;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCONT, &sa, nullptr);
}

double suspended_seconds() { return static_cast<double>(g_suspended_ns.load()) * 1e-9; }

int64_t active_ns() {
  const int64_t now = monotonic_ns();
  return now - g_suspended_ns.load() - unconfirmed_ns(now);
}

}  // namespace forge
