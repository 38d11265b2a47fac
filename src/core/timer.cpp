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

// The last beat and the steady time, read together: a beat published
// before the clock was read makes the reader retry, so `now` never lies
// past a beat newer than `b` (a reader delayed in between would otherwise
// find an old beat overdue while the ticker beats on).
struct Reading {
  Beat b;
  int64_t now = 0;
};

Reading read_beat_and_clock() {
  for (;;) {
    const uint64_t s = g_seq.load(std::memory_order_acquire);
    if (s & 1) continue;  // a beat is being written
    Reading r;
    r.b = {g_at.load(std::memory_order_relaxed), g_active.load(std::memory_order_relaxed),
           g_period.load(std::memory_order_relaxed), g_index.load(std::memory_order_relaxed)};
    r.now = steady_ns();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_seq.load(std::memory_order_relaxed) == s) return r;
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
  const auto index_of = [](uint64_t packed) { return static_cast<uint32_t>(packed >> 32); };
  const auto ms_of = [](uint64_t packed) { return static_cast<int64_t>(packed & 0xFFFFFFFFu) * 1'000'000; };
  uint64_t seen = g_overdue.load();
  if (index_of(seen) == b.index) {
    s = ms_of(seen);
  } else if (mark) {
    const uint64_t mine = uint64_t{b.index} << 32 | static_cast<uint32_t>(std::min<int64_t>(d / 1'000'000, 0xFFFFFFFF));
    // Only a mark of an older beat is replaced (a reader that read an old
    // beat must not restart a newer beat's window).
    while (static_cast<int32_t>(b.index - index_of(seen)) > 0 && !g_overdue.compare_exchange_weak(seen, mine)) {
    }
    s = ms_of(index_of(seen) == b.index ? seen : mine);
  }
  s = std::max(s, p);
  const int64_t x = window_ns(b.period);
  return d <= s + x ? p : p + d - s - x;
}

}  // namespace

void tick(double period_s) {
  const auto [b, now] = read_beat_and_clock();  // the one writer: no retry
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
  const auto [b, now] = read_beat_and_clock();
  return b.at == 0 ? now : b.active + active_since(b, now, true);
}

double left_out_seconds() {
  const Beat b = read_beat_and_clock().b;
  return static_cast<double>(b.at - b.active) * 1e-9;  // 0 before the first beat, and at it
}

}  // namespace forge
