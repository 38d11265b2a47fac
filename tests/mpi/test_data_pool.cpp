// The data pool under mpirun (any world size >= 2): one consumer rank (the
// learner's part), every other rank a producer (the environment ranks' part)
// that keeps several episodes in flight and advances a random one by a random,
// heavy-tailed amount of busy work at a time, so slots finish out of order.
// No sleeps: the interleavings come from the work and the scheduler.
//
// Each payload carries producer rank, sequence number, slot, version, a random
// body and an FNV-1a checksum. The consumer checks, on every take:
//   - checksum, producer and slot match; (producer, seq) not seen before;
//   - slot in [H, H + W), with H recomputed from its own record of consumed
//     slots (not read from the pool);
//   - tail T <= H + N + producers (slots >= H + N are unstarted tickets,
//     one per producer); producers check s < H + N at each start and a
//     premature start would overwrite a live entry (a loss or corrupt payload);
//   - staleness <= floor((N + W - 2) / B) + 1, verdict agrees with the cap;
// and at the end that every (producer, seq) arrived exactly once.
// A violation or a deadline throws; the rank prints it and calls MPI_Abort,
// so the whole job fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "mpi_roles/data_pool.hpp"

using namespace forge;

namespace {

struct Scenario {
  WindowKind kind;
  uint64_t n, w;
  uint64_t episodes;       // in total over all producers
  uint64_t batch = 8;      // takes per learner step
  int host = 0;            // -1: the last rank
  int64_t cap = -1;
  CapAction action = CapAction::kDrop;
  int per_producer = 10;   // episodes one producer keeps open (> N: backpressure)
};

struct Header {
  uint64_t producer, seq, slot;
  int64_t version;
  uint64_t bytes;
};
constexpr uint64_t kSlotBytes = 512;

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Busy work of a heavy-tailed length (lognormal, sigma 1.5): the "episode".
uint64_t g_sink = 0;
void busy(Rng& rng, double median_iters) {
  const auto iters = static_cast<uint64_t>(
      std::min(200000.0, median_iters * std::exp(1.5 * rng.normal())));
  uint64_t x = rng.next_u64();
  for (uint64_t i = 0; i < iters; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  g_sink += x;
}

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

uint64_t quota(uint64_t episodes, int producers, int index) {
  return episodes / producers + (static_cast<uint64_t>(index) < episodes % producers ? 1 : 0);
}

void produce(DataPool& pool, const Scenario& sc, int rank, uint64_t count) {
  Rng rng(1000 + rank);
  struct Open {
    uint64_t slot, seq;
    int64_t version;
    int chunks;  // work left
  };
  std::vector<Open> open;
  std::optional<uint64_t> pending;  // submitted, not yet admitted
  uint64_t next_seq = 0;
  std::vector<uint8_t> buf(kSlotBytes);
  const uint64_t n = pool.config().window.n_inflight;
  while (next_seq < count || pending || !open.empty()) {
    // Submit one slot ahead; start it once admitted. Wait only when nothing
    // of ours is in flight (our own open slot may be the head).
    if (!pending && next_seq < count && open.size() < static_cast<size_t>(sc.per_producer))
      pending = pool.submit();
    if (pending) {
      bool started = true;
      if (open.empty())
        pool.start(*pending);
      else
        started = pool.try_start(*pending);
      if (started) {
        // Admission: s < H + N held when it was granted, so it holds for the
        // (later, larger) H read now.
        if (*pending >= pool.head() + n)
          fail("slot " + std::to_string(*pending) + " started beyond H + N");
        // The version is read after the start (see window_policy.hpp).
        open.push_back({*pending, next_seq++, pool.published_version(),
                        1 + static_cast<int>(rng.below(4))});
        pending.reset();
      }
    }
    if (open.empty()) continue;
    const size_t i = rng.below(open.size());
    busy(rng, 2000);
    if (--open[i].chunks > 0) continue;
    const Open e = open[i];
    open.erase(open.begin() + static_cast<long>(i));
    const uint64_t bytes = sizeof(Header) + 8 + rng.below(kSlotBytes - sizeof(Header) - 8 + 1);
    Header h{static_cast<uint64_t>(rank), e.seq, e.slot, e.version, bytes};
    std::memcpy(buf.data(), &h, sizeof h);
    for (uint64_t b = sizeof h; b < bytes - 8; ++b) buf[b] = static_cast<uint8_t>(rng.next_u64());
    const uint64_t sum = fnv1a(buf.data(), bytes - 8);
    std::memcpy(buf.data() + bytes - 8, &sum, 8);
    pool.complete(e.slot, buf.data(), bytes, e.version);
  }
}

struct ConsumeResult {
  uint64_t taken = 0, over_cap = 0;
  int64_t max_staleness = 0;
};

ConsumeResult consume(DataPool& pool, const Scenario& sc, int world) {
  const WindowConfig& wc = pool.config().window;
  const uint64_t n = wc.n_inflight, w = wc.effective_window();
  const int64_t bound = staleness_bound(n, w, sc.batch);
  Rng rng(99);
  std::vector<std::vector<uint8_t>> seen(world);
  for (int r = 1; r < world; ++r) seen[r].assign(quota(sc.episodes, world - 1, r - 1), 0);
  std::set<uint64_t> consumed_above_head;  // consumed slots >= H
  uint64_t head = 0;
  int64_t version = 0;
  ConsumeResult res;
  auto where = [&](uint64_t slot) {
    return "slot " + std::to_string(slot) + " (H " + std::to_string(head) + ", W " +
           std::to_string(w) + ", N " + std::to_string(n) + ")";
  };
  while (res.taken < sc.episodes) {
    const TakenTrajectory t = pool.take();
    if (!in_window(t.slot, head, w) || consumed_above_head.count(t.slot))
      fail("consumed outside [H, H+W) or twice: " + where(t.slot));
    if (t.payload.size() < sizeof(Header) + 8) fail("short payload at " + where(t.slot));
    Header h;
    std::memcpy(&h, t.payload.data(), sizeof h);
    uint64_t sum;
    std::memcpy(&sum, t.payload.data() + t.payload.size() - 8, 8);
    if (h.bytes != t.payload.size() || sum != fnv1a(t.payload.data(), t.payload.size() - 8))
      fail("corrupt payload at " + where(t.slot));
    if (h.slot != t.slot || static_cast<int>(h.producer) != t.producer || h.version != t.version ||
        h.producer < 1 || h.producer >= static_cast<uint64_t>(world) ||
        h.seq >= seen[h.producer].size())
      fail("payload header disagrees with the slot table at " + where(t.slot));
    if (seen[h.producer][h.seq]++)
      fail("trajectory (producer " + std::to_string(h.producer) + ", seq " +
           std::to_string(h.seq) + ") consumed twice");
    const int64_t staleness = version - h.version;
    if (t.staleness != staleness || staleness < 0 || staleness > bound)
      fail("staleness " + std::to_string(staleness) + " outside [0, " + std::to_string(bound) +
           "] at " + where(t.slot));
    const bool over = sc.cap >= 0 && staleness > sc.cap;
    const Verdict want = !over ? Verdict::kTrain
                               : (sc.action == CapAction::kDrop ? Verdict::kDrop : Verdict::kMask);
    if (t.verdict != want) fail("cap verdict wrong at " + where(t.slot));
    res.over_cap += over;
    res.max_staleness = std::max(res.max_staleness, staleness);

    consumed_above_head.insert(t.slot);
    while (consumed_above_head.count(head)) consumed_above_head.erase(head++);
    // Slots >= H + N are unstarted tickets, at most one per producer.
    const uint64_t tail = pool.tail();
    if (tail > head + n + static_cast<uint64_t>(world - 1))
      fail("tail " + std::to_string(tail) + " beyond H + N + producers = " +
           std::to_string(head + n + world - 1));
    if (++res.taken % sc.batch == 0) {  // a learner step
      busy(rng, 4000);
      pool.publish_version(++version);
    }
  }
  for (int r = 1; r < world; ++r)
    for (size_t s = 0; s < seen[r].size(); ++s)
      if (seen[r][s] != 1) fail("trajectory (producer " + std::to_string(r) + ", seq " +
                                std::to_string(s) + ") lost");
  const StalenessStats& st = pool.stats();
  if (st.count() != sc.episodes || st.dropped() + st.masked() != res.over_cap)
    fail("the pool's staleness counters disagree with the test's");
  return res;
}

// Runs one scenario on all ranks; returns the consumer's result on rank 0.
ConsumeResult run(const Scenario& sc) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ConsumeResult res;
  try {
    if (world < 2) throw InputError("the data pool test needs at least 2 ranks");
    DataPoolConfig cfg;
    cfg.window.kind = sc.kind;
    cfg.window.n_inflight = sc.n;
    cfg.window.window = sc.w;
    cfg.window.staleness_cap = sc.cap;
    cfg.window.cap_action = sc.action;
    cfg.slot_bytes = kSlotBytes;
    cfg.host_rank = sc.host < 0 ? world - 1 : sc.host;
    cfg.consumer_rank = 0;
    cfg.deadline_s = 120;
    DataPool pool(MPI_COMM_WORLD, cfg);
    if (rank == 0)
      res = consume(pool, sc, world);
    else
      produce(pool, sc, rank, quota(sc.episodes, world - 1, rank - 1));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("[ %-8s N %llu W %llu host %d ] %llu episodes, max staleness %lld, over cap %llu\n",
                  to_string(sc.kind).c_str(), static_cast<unsigned long long>(sc.n),
                  static_cast<unsigned long long>(cfg.window.effective_window()), cfg.host_rank,
                  static_cast<unsigned long long>(res.taken),
                  static_cast<long long>(res.max_staleness),
                  static_cast<unsigned long long>(res.over_cap));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  return res;
}

bool is_rank0() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
}

}  // namespace

// 3 x 3500 + 3 x 1000 = 13,500 episodes per world size.
TEST(DataPoolMpi, Fifo) {
  const auto r = run({WindowKind::kFifo, 8, 1, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

TEST(DataPoolMpi, Windowed) {
  const auto r = run({WindowKind::kWindowed, 10, 4, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

TEST(DataPoolMpi, Greedy) {
  const auto r = run({WindowKind::kGreedy, 10, 10, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

// The windows on the last rank (a producer): every access of the consumer is remote.
TEST(DataPoolMpi, HostedOnAProducerRank) {
  const auto r = run({WindowKind::kWindowed, 8, 3, 1000, 4, -1});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 1000u);
  }
}

// A tight cap: some trajectories exceed it and are dropped or masked, counted.
TEST(DataPoolMpi, StalenessCapDrops) {
  const auto r = run({WindowKind::kGreedy, 32, 32, 1000, 2, 0, 1, CapAction::kDrop});
  if (is_rank0()) {
    EXPECT_GT(r.over_cap, 0u);
  }
}

TEST(DataPoolMpi, StalenessCapMasks) {
  const auto r = run({WindowKind::kGreedy, 32, 32, 1000, 2, 0, 1, CapAction::kMask});
  if (is_rank0()) {
    EXPECT_GT(r.over_cap, 0u);
  }
}
