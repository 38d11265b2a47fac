#include "core/timer.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>

namespace forge {
namespace {

int64_t steady_ns() {  // CLOCK_MONOTONIC: steady_clock's
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Beat {
  int64_t at = 0;      // B, steady ns; 0: no ticker yet
  int64_t active = 0;  // A, the active clock at B
  int64_t period = 0;
  uint32_t index = 0;  // beats so far (wraps)
};

// The last beat, behind a seqlock: the ticker writes, readers retry.
std::atomic<uint64_t> g_seq{0};
std::atomic<int64_t> g_at{0}, g_active{0}, g_period{0};
std::atomic<uint32_t> g_index{0};
// The first reader to find the beat overdue: its index << 32 | ms after it.
std::atomic<uint64_t> g_overdue{0};

Beat load_beat() {
  for (;;) {
    const uint64_t s = g_seq.load(std::memory_order_acquire);
    if (s & 1) continue;  // a beat is being written
    Beat b{g_at.load(std::memory_order_relaxed), g_active.load(std::memory_order_relaxed),
           g_period.load(std::memory_order_relaxed), g_index.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_seq.load(std::memory_order_relaxed) == s) return b;
  }
}

int64_t overdue_after_ns(int64_t period) { return std::max<int64_t>(1'000'000'000, 4 * period); }  // P
int64_t window_ns(int64_t period) { return std::max<int64_t>(1'000'000'000, 4 * period); }         // X

// g(now - B) of the header; `mark`: the first reader to find the beat
// overdue records when (the ticker does not: it beats, not reads).
int64_t active_since(const Beat& b, int64_t now, bool mark) {
  const int64_t d = now - b.at, p = overdue_after_ns(b.period);
  if (d <= p) return d;
  int64_t s = d;  // first found overdue now, unless a reader did before
  uint64_t seen = g_overdue.load();
  if (static_cast<uint32_t>(seen >> 32) == b.index) {
    s = static_cast<int64_t>(seen & 0xFFFFFFFFu) * 1'000'000;
  } else if (mark) {
    const uint64_t mine = uint64_t{b.index} << 32 | static_cast<uint32_t>(std::min<int64_t>(d / 1'000'000, 0xFFFFFFFF));
    if (g_overdue.compare_exchange_strong(seen, mine) || static_cast<uint32_t>(seen >> 32) != b.index)
      s = static_cast<int64_t>(mine & 0xFFFFFFFFu) * 1'000'000;
    else
      s = static_cast<int64_t>(seen & 0xFFFFFFFFu) * 1'000'000;  // another reader was first
  }
  s = std::max(s, p);
  const int64_t x = window_ns(b.period);
  return d <= s + x ? p : p + d - s - x;
}

}  // namespace

void tick(double period_s) {
  const Beat b = load_beat();
  const int64_t now = steady_ns();  // after the beat's state: never before B
  Beat next;
  next.at = now;
  next.active = b.at == 0 ? now : b.active + active_since(b, now, false);
  next.period = static_cast<int64_t>(period_s * 1e9);
  next.index = b.index + 1;
  g_seq.fetch_add(1, std::memory_order_relaxed);  // odd: readers retry
  std::atomic_thread_fence(std::memory_order_release);
  g_at.store(next.at, std::memory_order_relaxed);
  g_active.store(next.active, std::memory_order_relaxed);
  g_period.store(next.period, std::memory_order_relaxed);
  g_index.store(next.index, std::memory_order_relaxed);
  g_seq.fetch_add(1, std::memory_order_release);
}

int64_t active_ns() {
  const Beat b = load_beat();
  const int64_t now = steady_ns();  // read last: a reader stopped in between reads after the beat
  return b.at == 0 ? now : b.active + active_since(b, now, true);
}

double left_out_seconds() {
  const Beat b = load_beat();
  return static_cast<double>(b.at - b.active) * 1e-9;  // 0 before the first beat, and at it
}

}  // namespace forge
