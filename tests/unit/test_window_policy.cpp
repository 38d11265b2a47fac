// Windowed FIFO without MPI: admission (s < H + N), visibility ([H, H + W)),
// head advance, the three policies, the staleness cap and bound, and a
// random comparison against a brute-force model of the slot states.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "mpi_roles/window_policy.hpp"

using namespace forge;

namespace {

WindowConfig make(WindowKind kind, uint64_t n, uint64_t w = 1) {
  WindowConfig c;
  c.kind = kind;
  c.n_inflight = n;
  c.window = w;
  return c;
}

}  // namespace

TEST(WindowPolicy, ParsesAndValidates) {
  EXPECT_EQ(parse_window_kind("fifo"), WindowKind::kFifo);
  EXPECT_EQ(parse_window_kind("windowed"), WindowKind::kWindowed);
  EXPECT_EQ(parse_window_kind("greedy"), WindowKind::kGreedy);
  EXPECT_THROW(parse_window_kind("lifo"), InputError);
  EXPECT_EQ(parse_cap_action("mask"), CapAction::kMask);
  EXPECT_THROW(parse_cap_action("keep"), InputError);
  EXPECT_EQ(make(WindowKind::kFifo, 8, 4).effective_window(), 1u);
  EXPECT_EQ(make(WindowKind::kWindowed, 8, 4).effective_window(), 4u);
  EXPECT_EQ(make(WindowKind::kGreedy, 8, 4).effective_window(), 8u);
  EXPECT_THROW(make(WindowKind::kWindowed, 8, 9).validate(), InputError);
  EXPECT_THROW(make(WindowKind::kWindowed, 8, 0).validate(), InputError);
  EXPECT_THROW(make(WindowKind::kGreedy, 0).validate(), InputError);
}

TEST(WindowPolicy, AdmissionStopsAtHeadPlusN) {
  WindowScheduler ws(make(WindowKind::kGreedy, 3));
  for (uint64_t s = 0; s < 3; ++s) EXPECT_EQ(ws.start(), s);
  EXPECT_FALSE(ws.can_start());
  EXPECT_THROW(ws.start(), Error);
  ws.finish(2);
  EXPECT_EQ(ws.take(), 2u);  // greedy: visible, but H stays 0
  EXPECT_EQ(ws.head(), 0u);
  EXPECT_FALSE(ws.can_start());
  ws.finish(0);
  EXPECT_EQ(ws.take(), 0u);
  EXPECT_EQ(ws.head(), 1u);
  EXPECT_TRUE(ws.can_start());
  EXPECT_EQ(ws.start(), 3u);
  EXPECT_FALSE(ws.can_start());
}

TEST(WindowPolicy, FifoWaitsForTheHead) {
  WindowScheduler ws(make(WindowKind::kFifo, 4));
  for (int i = 0; i < 3; ++i) ws.start();
  ws.finish(1);
  ws.finish(2);
  EXPECT_FALSE(ws.take().has_value());
  ws.finish(0);
  EXPECT_EQ(ws.take(), 0u);
  EXPECT_EQ(ws.take(), 1u);
  EXPECT_EQ(ws.take(), 2u);
  EXPECT_EQ(ws.head(), 3u);
  EXPECT_THROW(ws.finish(1), Error);  // already consumed
}

TEST(WindowPolicy, WindowedSeesOnlyHeadPlusW) {
  WindowScheduler ws(make(WindowKind::kWindowed, 4, 2));
  for (int i = 0; i < 4; ++i) ws.start();
  ws.finish(3);
  ws.finish(2);
  ws.finish(1);
  EXPECT_EQ(ws.take(), 1u);             // in [0, 2)
  EXPECT_FALSE(ws.take().has_value());  // 2 and 3 are outside [0, 2)
  EXPECT_EQ(ws.head(), 0u);
  ws.finish(0);
  EXPECT_EQ(ws.take(), 0u);  // H jumps over 0 and 1
  EXPECT_EQ(ws.head(), 2u);
  EXPECT_EQ(ws.take(), 2u);
  EXPECT_EQ(ws.take(), 3u);
  EXPECT_EQ(ws.head(), 4u);
}

// Random starts, finishes and takes against a brute-force model: slot states
// in a map, the head recomputed from scratch, the lowest visible DONE slot.
TEST(WindowPolicy, MatchesBruteForceModel) {
  for (WindowKind kind : {WindowKind::kFifo, WindowKind::kWindowed, WindowKind::kGreedy}) {
    const uint64_t n = 16, w = 5;
    WindowScheduler ws(make(kind, n, w));
    const uint64_t weff = make(kind, n, w).effective_window();
    enum { kRunning, kDone, kConsumed };
    std::map<uint64_t, int> model;
    Rng rng(7);
    uint64_t consumed = 0, h = 0;
    for (int op = 0; op < 20000; ++op) {
      while (model.count(h) && model[h] == kConsumed) ++h;
      ASSERT_EQ(ws.head(), h);
      ASSERT_LE(ws.tail(), h + n);
      const uint64_t r = rng.below(3);
      if (r == 0) {
        ASSERT_EQ(ws.can_start(), model.size() < h + n);
        if (ws.can_start()) model[ws.start()] = kRunning;
      } else if (r == 1) {
        std::vector<uint64_t> running;
        for (auto it = model.lower_bound(h); it != model.end(); ++it)
          if (it->second == kRunning) running.push_back(it->first);
        if (running.empty()) continue;
        const uint64_t s = running[rng.below(running.size())];
        ws.finish(s);
        model[s] = kDone;
      } else {
        std::optional<uint64_t> want;
        for (uint64_t s = h; s < h + weff && !want; ++s)
          if (model.count(s) && model[s] == kDone) want = s;
        const auto got = ws.take();
        ASSERT_EQ(got, want);
        if (got) {
          model[*got] = kConsumed;
          ++consumed;
        }
      }
    }
    EXPECT_GT(consumed, 3000u) << to_string(kind);
  }
}

TEST(WindowPolicy, StalenessCapDropsOrMasks) {
  WindowConfig c = make(WindowKind::kWindowed, 8, 4);
  EXPECT_EQ(c.verdict(100), Verdict::kTrain);  // no cap
  c.staleness_cap = 2;
  EXPECT_EQ(c.verdict(2), Verdict::kTrain);
  EXPECT_EQ(c.verdict(3), Verdict::kDrop);
  c.cap_action = CapAction::kMask;
  EXPECT_EQ(c.verdict(3), Verdict::kMask);
}

TEST(WindowPolicy, StalenessStats) {
  StalenessStats st;
  for (int s : {0, 0, 1, 1, 1, 2, 5}) st.add(s, s > 2 ? Verdict::kDrop : Verdict::kTrain);
  st.add(4, Verdict::kMask);
  EXPECT_EQ(st.count(), 8u);
  EXPECT_EQ(st.dropped(), 1u);
  EXPECT_EQ(st.masked(), 1u);
  EXPECT_DOUBLE_EQ(st.mean(), 14.0 / 8.0);
  EXPECT_EQ(st.quantile(0.5), 1);
  EXPECT_EQ(st.quantile(0.99), 5);
  EXPECT_EQ(st.max(), 5);
  EXPECT_THROW(st.add(-1, Verdict::kTrain), Error);
}

// The bound floor((N + W - 2) / B) + 1 holds in a serial simulation where the
// learner steps after every B takes (publishing version+1 after the step) and
// producers stamp the published version after their claim; it is reached or
// nearly reached (so it is not loose by a wide margin).
TEST(WindowPolicy, StalenessWithinBound) {
  for (WindowKind kind : {WindowKind::kFifo, WindowKind::kWindowed, WindowKind::kGreedy}) {
    const uint64_t n = 32, w = 8, b = 4;
    const WindowConfig cfg = make(kind, n, w);
    WindowScheduler ws(cfg);
    const int64_t bound = staleness_bound(n, cfg.effective_window(), b);
    std::vector<int64_t> stamp(1 << 20);
    int64_t version = 0;
    uint64_t in_batch = 0;
    StalenessStats st;
    Rng rng(3);
    std::vector<uint64_t> running;
    while (st.count() < 50000) {
      while (ws.can_start()) {
        const uint64_t s = ws.start();
        stamp[s % stamp.size()] = version;
        running.push_back(s);
      }
      // Finish one random running slot; long ones (early slots) linger.
      const size_t i = rng.below(running.size());
      ws.finish(running[i]);
      running.erase(running.begin() + static_cast<long>(i));
      while (auto s = ws.take()) {
        st.add(version - stamp[*s % stamp.size()], Verdict::kTrain);
        if (++in_batch == b) {
          ++version;
          in_batch = 0;
        }
      }
    }
    EXPECT_LE(st.max(), bound) << to_string(kind);
    EXPECT_GE(st.max(), bound / 2) << to_string(kind);
  }
}
