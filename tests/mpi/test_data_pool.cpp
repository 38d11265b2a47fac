// The data pool under mpirun (any world size >= 2): one consumer rank (the
// learner's part), every other rank a producer (the environment ranks' part)
// that keeps several episodes in flight and advances a random one by a random,
// heavy-tailed amount of busy work at a time, so slots finish out of order.
// No sleeps: the interleavings come from the work and the scheduler.
//
// Each payload carries producer rank, sequence number, slot, version, the
// episode's start and end times (steady clock, shared by the ranks of one
// node), a random body and an FNV-1a checksum. The consumer checks, on every
// take:
//   - checksum, producer and slot match; (producer, seq) not seen before;
//   - slot in [H, H + W), with H recomputed from its own record of consumed
//     slots (not read from the pool);
//   - staleness <= floor((N + M + W - 2) / B) + 1 (fifo, windowed), verdict
//     agrees with the cap;
// and at the end: every (producer, seq) arrived exactly once; at no time did
// more than N episodes run (the episodes' [start, end] intervals, which lie
// inside their admission, overlap at most N deep). Scenarios add a straggler
// (a slot held until the pool has started slot straggler + N, which the old
// rule s < H + N forbade while it held the head: generation must go on past
// the head, the occupancy rule), and a slow consumer (the
// memory bound M must turn producers away while fewer than N run).
// A violation or a deadline throws; the rank prints it and calls MPI_Abort,
// so the whole job fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
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
  uint64_t m = 6;          // finished held at most
  uint64_t batch = 8;      // takes per learner step
  int host = 0;            // -1: the last rank
  int64_t cap = -1;
  CapAction action = CapAction::kDrop;
  int per_producer = 10;   // episodes one producer keeps open (> N: backpressure)
  bool straggler = false;  // producer 1's first slot is held long
  double consumer_work = 4000;  // busy work per learner step (median iterations)
};

struct Header {
  uint64_t producer, seq, slot;
  int64_t version;
  uint64_t bytes;
  int64_t start_ns, end_ns;
  uint64_t tail_seen;  // the pool's tail when the producer completed it
};
constexpr uint64_t kSlotBytes = 512;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// Busy work of a heavy-tailed length (lognormal, sigma 1.5): the "episode".
uint64_t g_sink = 0;
void busy(Rng& rng, double median_iters) {
  const auto iters = static_cast<uint64_t>(std::min(200000.0, median_iters * std::exp(1.5 * rng.normal())));
  uint64_t x = rng.next_u64();
  for (uint64_t i = 0; i < iters; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  g_sink += x;
}

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

uint64_t quota(uint64_t episodes, int producers, int index) {
  return episodes / producers + (static_cast<uint64_t>(index) < episodes % producers ? 1 : 0);
}

struct ProduceResult {
  uint64_t memory_refusals = 0;  // refused while fewer than N ran and M finished waited
};

ProduceResult produce(DataPool& pool, const Scenario& sc, int rank, uint64_t count) {
  Rng rng(1000 + rank);
  struct Open {
    uint64_t slot, seq;
    int64_t version, start_ns;
    int chunks;  // work left
  };
  std::vector<Open> open;
  uint64_t next_seq = 0;
  std::vector<uint8_t> buf(kSlotBytes);
  ProduceResult res;
  const WindowConfig& wc = pool.config().window;
  std::optional<Open> straggler;
  uint64_t straggler_until = 0;  // the slot number others must reach first
  while (next_seq < count || !open.empty() || straggler) {
    // Start while we may; wait only when nothing of ours is in flight.
    if (next_seq < count && open.size() < static_cast<size_t>(sc.per_producer)) {
      const std::optional<uint64_t> s =
          open.empty() && !straggler ? std::optional<uint64_t>(pool.start()) : pool.try_start();
      if (s) {
        // The version is read after the start (see window_policy.hpp).
        Open e{*s, next_seq++, pool.published_version(), now_ns(), 1 + static_cast<int>(rng.below(4))};
        if (sc.straggler && rank == 1 && e.seq == 0) {
          straggler = e;
          straggler_until = *s + wc.n_running + 1;
        } else {
          open.push_back(e);
        }
      } else if (rng.below(8) == 0) {
        const PoolCounts c = pool.counts();
        if (c.running < wc.n_running && c.finished >= wc.memory) ++res.memory_refusals;
      }
    }
    // The straggler ends once generation has started slot straggler + N.
    Open done{};
    uint64_t tail_seen = 0;
    if (straggler && ((tail_seen = pool.tail()) >= straggler_until || (next_seq >= count && open.empty()))) {
      done = *straggler;
      straggler.reset();
    } else {
      if (open.empty()) continue;
      const size_t i = rng.below(open.size());
      busy(rng, 2000);
      if (--open[i].chunks > 0) continue;
      done = open[i];
      open.erase(open.begin() + static_cast<long>(i));
    }
    const uint64_t bytes = sizeof(Header) + 8 + rng.below(kSlotBytes - sizeof(Header) - 8 + 1);
    Header h{static_cast<uint64_t>(rank), done.seq, done.slot, done.version, bytes, done.start_ns, now_ns(), tail_seen};
    std::memcpy(buf.data(), &h, sizeof h);
    for (uint64_t b = sizeof h; b < bytes - 8; ++b) buf[b] = static_cast<uint8_t>(rng.next_u64());
    const uint64_t sum = fnv1a(buf.data(), bytes - 8);
    std::memcpy(buf.data() + bytes - 8, &sum, 8);
    pool.complete(done.slot, buf.data(), bytes, done.version);
  }
  return res;
}

struct ConsumeResult {
  uint64_t taken = 0, over_cap = 0;
  int64_t max_staleness = 0;
  uint64_t max_running = 0;
  bool straggler_passed = false;  // slot straggler + N started while the straggler ran
};

ConsumeResult consume(DataPool& pool, const Scenario& sc, int world) {
  const WindowConfig& wc = pool.config().window;
  const uint64_t w = wc.effective_window();
  const int64_t bound = staleness_bound(wc, sc.batch);
  Rng rng(99);
  std::vector<std::vector<uint8_t>> seen(world);
  for (int r = 1; r < world; ++r) seen[r].assign(quota(sc.episodes, world - 1, r - 1), 0);
  std::set<uint64_t> consumed_above_head;  // consumed slots >= H
  std::vector<std::pair<int64_t, int>> edges;  // (time, +1 start / -1 end)
  std::vector<Header> all;
  uint64_t head = 0;
  int64_t version = 0;
  ConsumeResult res;
  auto where = [&](uint64_t slot) {
    return "slot " + std::to_string(slot) + " (H " + std::to_string(head) + ", W " +
           (w == kUnboundedWindow ? std::string("any") : std::to_string(w)) + ")";
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
    if (h.slot != t.slot || static_cast<int>(h.producer) != t.producer || h.version != t.version || h.producer < 1 ||
        h.producer >= static_cast<uint64_t>(world) || h.seq >= seen[h.producer].size())
      fail("payload header disagrees with the slot table at " + where(t.slot));
    if (seen[h.producer][h.seq]++)
      fail("trajectory (producer " + std::to_string(h.producer) + ", seq " + std::to_string(h.seq) +
           ") consumed twice");
    const int64_t staleness = version - h.version;
    if (t.staleness != staleness || staleness < 0 || (bound >= 0 && staleness > bound))
      fail("staleness " + std::to_string(staleness) + " outside [0, " + std::to_string(bound) + "] at " +
           where(t.slot));
    const bool over = sc.cap >= 0 && staleness > sc.cap;
    const Verdict want = !over ? Verdict::kTrain : (sc.action == CapAction::kDrop ? Verdict::kDrop : Verdict::kMask);
    if (t.verdict != want) fail("cap verdict wrong at " + where(t.slot));
    res.over_cap += over;
    res.max_staleness = std::max(res.max_staleness, staleness);
    edges.push_back({h.start_ns, +1});
    edges.push_back({h.end_ns, -1});
    all.push_back(h);

    consumed_above_head.insert(t.slot);
    while (consumed_above_head.count(head)) consumed_above_head.erase(head++);
    if (++res.taken % sc.batch == 0) {  // a learner step
      busy(rng, sc.consumer_work);
      pool.publish_version(++version);
    }
  }
  for (int r = 1; r < world; ++r)
    for (size_t s = 0; s < seen[r].size(); ++s)
      if (seen[r][s] != 1) fail("trajectory (producer " + std::to_string(r) + ", seq " + std::to_string(s) + ") lost");
  const StalenessStats& st = pool.stats();
  if (st.count() != sc.episodes || st.dropped() + st.masked() != res.over_cap)
    fail("the pool's staleness counters disagree with the test's");
  // Never more than N running: ends before starts at equal times.
  std::sort(edges.begin(), edges.end());
  int64_t depth = 0;
  for (const auto& [when, d] : edges) res.max_running = std::max<uint64_t>(res.max_running, depth += d);
  if (res.max_running > wc.n_running)
    fail(std::to_string(res.max_running) + " episodes ran at once, more than N = " + std::to_string(wc.n_running));
  if (sc.straggler) {
    const auto it = std::find_if(all.begin(), all.end(), [](const Header& h) { return h.producer == 1 && h.seq == 0; });
    res.straggler_passed = it->tail_seen > it->slot + wc.n_running;
  }
  return res;
}

// Runs f; an exception (a violation, a deadline) is printed by this rank,
// which then aborts the job: the other ranks would wait for it forever.
template <class F>
void or_abort(int rank, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

// Runs one scenario on all ranks; returns the consumer's result on rank 0 and
// the producers' memory refusals summed.
std::pair<ConsumeResult, uint64_t> run(const Scenario& sc) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ConsumeResult res;
  uint64_t refusals = 0;
  or_abort(rank, [&] {
    if (world < 2) throw InputError("the data pool test needs at least 2 ranks");
    DataPoolConfig cfg;
    cfg.window.kind = sc.kind;
    cfg.window.n_running = sc.n;
    cfg.window.memory = sc.m;
    cfg.window.window = sc.w;
    cfg.window.staleness_cap = sc.cap;
    cfg.window.cap_action = sc.action;
    cfg.slot_bytes = kSlotBytes;
    cfg.host_rank = sc.host < 0 ? world - 1 : sc.host;
    cfg.consumer_rank = 0;
    cfg.deadline_s = 120;
    DataPool pool(MPI_COMM_WORLD, cfg);
    uint64_t mine = 0;
    if (rank == 0)
      res = consume(pool, sc, world);
    else
      mine = produce(pool, sc, rank, quota(sc.episodes, world - 1, rank - 1)).memory_refusals;
    MPI_Reduce(&mine, &refusals, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("[ %-8s N %llu M %llu W %s host %d ] %llu episodes, max staleness %lld, over cap %llu, at most "
                  "%llu running, %llu memory refusals seen%s\n",
                  to_string(sc.kind).c_str(), static_cast<unsigned long long>(sc.n),
                  static_cast<unsigned long long>(sc.m),
                  sc.kind == WindowKind::kGreedy ? "any" : std::to_string(cfg.window.effective_window()).c_str(),
                  cfg.host_rank, static_cast<unsigned long long>(res.taken), static_cast<long long>(res.max_staleness),
                  static_cast<unsigned long long>(res.over_cap), static_cast<unsigned long long>(res.max_running),
                  static_cast<unsigned long long>(refusals),
                  sc.straggler ? (res.straggler_passed ? ", generation passed the straggler" : ", straggler NOT passed")
                               : "");
  });
  return {res, refusals};
}

bool is_rank0() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank == 0;
}

}  // namespace

// 3 x 3500 + 5 x 1000 = 15,500 episodes per world size.
TEST(DataPoolMpi, Fifo) {
  const auto [r, refusals] = run({WindowKind::kFifo, 8, 1, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

TEST(DataPoolMpi, Windowed) {
  const auto [r, refusals] = run({WindowKind::kWindowed, 10, 4, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

TEST(DataPoolMpi, Greedy) {
  const auto [r, refusals] = run({WindowKind::kGreedy, 10, 10, 3500});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 3500u);
  }
}

// The windows on the last rank (a producer): every access of the consumer is remote.
TEST(DataPoolMpi, HostedOnAProducerRank) {
  const auto [r, refusals] = run({WindowKind::kWindowed, 8, 3, 1000, 6, 4, -1});
  if (is_rank0()) {
    EXPECT_EQ(r.taken, 1000u);
  }
}

// A straggler at the head holds H, not generation: slots N and more past it
// start while it runs (fifo: the learner waits for it meanwhile).
TEST(DataPoolMpi, StragglerHoldsTheHeadNotGeneration) {
  Scenario sc{WindowKind::kFifo, 6, 1, 1000, 8};
  sc.straggler = true;
  const auto [r, refusals] = run(sc);
  if (is_rank0()) {
    EXPECT_TRUE(r.straggler_passed);
  }
}

// A slow learner: finished trajectories pile up to M and turn producers away
// while fewer than N run.
TEST(DataPoolMpi, MemoryBoundTurnsProducersAway) {
  Scenario sc{WindowKind::kWindowed, 12, 4, 1000, 3};
  sc.batch = 2;
  sc.consumer_work = 60000;
  const auto [r, refusals] = run(sc);
  if (is_rank0()) {
    EXPECT_GT(refusals, 0u);
  }
}

// A tight cap: some trajectories exceed it and are dropped or masked, counted.
TEST(DataPoolMpi, StalenessCapDrops) {
  const auto [r, refusals] = run({WindowKind::kGreedy, 32, 32, 1000, 16, 2, 0, 1, CapAction::kDrop});
  if (is_rank0()) {
    EXPECT_GT(r.over_cap, 0u);
  }
}

TEST(DataPoolMpi, StalenessCapMasks) {
  const auto [r, refusals] = run({WindowKind::kGreedy, 32, 32, 1000, 16, 2, 0, 1, CapAction::kMask});
  if (is_rank0()) {
    EXPECT_GT(r.over_cap, 0u);
  }
}

// A head slot started and not completed is named by the rank's name when the
// job gives one ("environment rank 1": found by review, it said "producer
// rank 1" whatever the rank's role), by "producer rank N" otherwise.
TEST(DataPoolMpi, AStalledHeadNamesItsRank) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (const bool named : {false, true}) {
    DataPoolConfig cfg;
    cfg.window.kind = WindowKind::kFifo;
    cfg.window.n_running = 2;
    cfg.window.memory = 2;
    cfg.slot_bytes = kSlotBytes;
    if (named) cfg.rank_name = [](int r) { return "named rank " + std::to_string(r); };
    DataPool pool(MPI_COMM_WORLD, cfg);
    uint64_t slot = 0;
    if (rank == 1) slot = pool.start();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      const std::string head = pool.describe_head();
      EXPECT_NE(head.find(std::string(named ? "named rank 1" : "producer rank 1") + " started it and has not completed it"),
                std::string::npos)
          << head;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const char payload[4] = {1, 2, 3, 4};
    if (rank == 1) pool.complete(slot, payload, sizeof payload, 0);
    if (rank == 0) {
      EXPECT_EQ(pool.take().payload.size(), sizeof payload);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Notices are read in order, so a producer paused between claiming notice 0
// and writing it hides the completion announced after it; the stalled head
// says so (it said the head's notice was "on its way", naming no cause).
TEST(DataPoolMpi, AStalledHeadNamesAClaimedUnwrittenNotice) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr int kPausedTag = 79, kGoTag = 80;
  DataPoolConfig cfg;
  cfg.window.kind = WindowKind::kGreedy;
  cfg.window.n_running = 2;
  cfg.window.memory = 2;
  cfg.slot_bytes = kSlotBytes;
  DataPool* pool_of_hook = nullptr;
  uint64_t second = 0;
  if (rank == 1)
    cfg.after_notice_claim = [&](uint64_t notice) {
      if (notice != 0) return;
      pool_of_hook->complete(second, &second, sizeof second, 0);  // notice 1, written
      int paused = 1, go = 0;
      MPI_Send(&paused, 1, MPI_INT, 0, kPausedTag, MPI_COMM_WORLD);
      MPI_Recv(&go, 1, MPI_INT, 0, kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    };
  DataPool pool(MPI_COMM_WORLD, cfg);
  pool_of_hook = &pool;
  if (rank == 1) {
    const uint64_t first = pool.start();
    second = pool.start();
    pool.complete(first, &first, sizeof first, 0);
  }
  if (rank == 0) {
    int paused = 0;
    MPI_Recv(&paused, 1, MPI_INT, 1, kPausedTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_FALSE(pool.try_take());  // slot 1 is complete, behind notice 0
    const std::string head = pool.describe_head();
    EXPECT_NE(head.find("notice 0 is claimed and not yet written"), std::string::npos) << head;
    EXPECT_NE(head.find("1 completion(s) after it wait behind it"), std::string::npos) << head;
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, kGoTag, MPI_COMM_WORLD);
    EXPECT_EQ(pool.take().payload.size(), sizeof(uint64_t));
    EXPECT_EQ(pool.take().payload.size(), sizeof(uint64_t));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The consumer's wait with nothing visible is charged to the slot at the
// head and read when that slot is taken: at least the time the consumer
// spent polling before the producer was told to complete it. (The last
// stretch of waiting used to be charged after the take had read the slot's
// entry: under fifo a head's wait read 0.)
TEST(DataPoolMpi, TheHeadsWaitIsChargedToItsSlot) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr int kGoTag = 78;
  constexpr double kPollSeconds = 0.2;
  for (const WindowKind kind : {WindowKind::kFifo, WindowKind::kWindowed}) {
    DataPoolConfig cfg;
    cfg.window.kind = kind;
    cfg.window.n_running = 2;
    cfg.window.memory = 2;
    cfg.slot_bytes = kSlotBytes;
    DataPool pool(MPI_COMM_WORLD, cfg);
    uint64_t slot = 0;
    if (rank == 1) slot = pool.start();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      using Clock = std::chrono::steady_clock;
      const Clock::time_point began = Clock::now();
      while (Clock::now() - began < std::chrono::duration<double>(kPollSeconds)) ASSERT_FALSE(pool.try_take());
      int go = 1;
      MPI_Send(&go, 1, MPI_INT, 1, kGoTag, MPI_COMM_WORLD);
      std::optional<TakenTrajectory> t;
      const Clock::time_point give_up = Clock::now() + std::chrono::seconds(30);
      while (!(t = pool.try_take()) && Clock::now() < give_up) {
      }
      const double waited = std::chrono::duration<double>(Clock::now() - began).count();
      ASSERT_TRUE(t) << "the head slot never came";
      EXPECT_GE(t->head_wait_s, kPollSeconds) << to_string(kind);
      EXPECT_LE(t->head_wait_s, waited) << to_string(kind);
    }
    if (rank == 1) {
      int go = 0;
      MPI_Recv(&go, 1, MPI_INT, 0, kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      pool.complete(slot, &slot, sizeof slot, 0);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The consumer never writes a free-ring entry its claimer has not read yet:
// a producer paused between its claim of entry 0 and its read, while the
// other C - 1 cells go through the consumer (which tries to put them back,
// entry 0 among the places), reads the cell entry 0 held; after it, the
// claim of index C (entry 0 again) gets a cell the consumer put back. The
// stress tests cannot pause a claimer there (data-pool.md); written over, the
// paused claimer took a cell meant for the next claimer, whose read found the
// entry emptied: a protocol error, and the job aborts.
TEST(DataPoolMpi, AClaimerPausedBeforeItsReadKeepsItsEntry) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DataPoolConfig cfg;
  cfg.window.kind = WindowKind::kGreedy;
  cfg.window.n_running = 2;
  cfg.window.memory = 2;
  cfg.slot_bytes = kSlotBytes;
  const uint64_t cells = cfg.window.cells();
  constexpr int kGoTag = 77;
  DataPool* pool_of_hook = nullptr;
  bool paused = false;
  if (rank == 1)
    cfg.after_claim = [&](uint64_t claim_index) {
      if (claim_index != 0 || paused) return;
      paused = true;
      for (uint64_t k = 1; k < cells; ++k) {  // the other cells, through the consumer
        const uint64_t s = pool_of_hook->start();
        pool_of_hook->complete(s, &s, sizeof s, 0);
      }
      int go = 0;
      MPI_Recv(&go, 1, MPI_INT, 0, kGoTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    };
  or_abort(rank, [&] {
    DataPool pool(MPI_COMM_WORLD, cfg);
    pool_of_hook = &pool;
    if (rank == 1) {
      for (int k = 0; k < 2; ++k) {  // the paused start (slot 0), then the claim of index C
        const uint64_t s = pool.start();
        pool.complete(s, &s, sizeof s, 0);
      }
    } else if (rank == 0) {
      std::set<uint64_t> taken;
      const auto take_one = [&] {
        const TakenTrajectory t = pool.take();
        uint64_t stamped = ~uint64_t{0};
        if (t.payload.size() == sizeof stamped) std::memcpy(&stamped, t.payload.data(), sizeof stamped);
        EXPECT_EQ(stamped, t.slot) << "the payload of slot " << t.slot;
        taken.insert(t.slot);
      };
      for (uint64_t k = 1; k < cells; ++k) take_one();
      EXPECT_FALSE(pool.try_take().has_value()) << "slot 0 is still running";  // and the cells go back where they may
      int go = 1;
      MPI_Send(&go, 1, MPI_INT, 1, kGoTag, MPI_COMM_WORLD);
      take_one();
      take_one();
      EXPECT_EQ(taken.size(), cells + 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  });
}
