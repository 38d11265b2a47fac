// The data pool across a checkpoint (any world size >= 2; rank 0 hosts and
// consumes, rank 1 produces, other ranks only join the collectives).
//
// Pool A (N = 8, W = 4): slots 0..5 are started, all but slot 2 completed;
// the consumer takes 0, 1 and 3 (slot 2 holds the head), so H = 2. The
// snapshot must say: head 2, consumed {3}, kept {4, 5} with their payloads;
// slot 2 (in flight) in neither list.
// Pool B resumes from that snapshot: slot numbers restart at 2; slot 2 must be
// generated again, slots 3, 4, 5 are never handed out (the pool completes
// them as tombstones), 6 and 7 are new; the consumer must then get exactly
// 2, 6, 7, never a skipped slot.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "mpi_roles/data_pool.hpp"

using namespace forge;

namespace {

std::string body(uint64_t slot) { return "payload of slot " + std::to_string(slot); }

void produce(DataPool& pool, uint64_t slot) {
  const std::string b = body(slot);
  pool.complete(slot, b.data(), b.size(), 7);
}

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

TEST(DataPoolResume, SnapshotKeepsFinishedSkipsTrainedRegeneratesInFlight) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DataPoolConfig cfg;
  cfg.window.kind = WindowKind::kWindowed;
  cfg.window.n_running = 8;
  cfg.window.memory = 8;
  cfg.window.window = 4;
  cfg.slot_bytes = 256;
  cfg.deadline_s = 30;
  DataPoolState snap;
  {
    DataPool a(MPI_COMM_WORLD, cfg);
    if (rank == 0) a.publish_version(9);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      for (uint64_t s = 0; s < 6; ++s) ASSERT_EQ(a.try_start(), std::optional<uint64_t>(s));
      for (uint64_t s : {0, 1, 3, 4, 5}) produce(a, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      for (uint64_t want : {0, 1, 3}) {  // 3 is the lowest DONE slot of [2, 6)
        const auto t = a.try_take();
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(t->slot, want);
        EXPECT_EQ(as_string(t->payload), body(want));
      }
      snap = a.snapshot();
      EXPECT_EQ(snap.head, 2);
      EXPECT_EQ(snap.consumed, (std::vector<int64_t>{3}));
      ASSERT_EQ(snap.kept_slot, (std::vector<int64_t>{4, 5}));
      EXPECT_EQ(snap.kept_version, (std::vector<int64_t>{7, 7}));
      ASSERT_EQ(snap.kept_offset.size(), 3u);
      EXPECT_EQ(std::string(snap.kept_bytes.begin() + snap.kept_offset[0],
                            snap.kept_bytes.begin() + snap.kept_offset[1]),
                body(4));
      EXPECT_EQ(std::string(snap.kept_bytes.begin() + snap.kept_offset[1],
                            snap.kept_bytes.begin() + snap.kept_offset[2]),
                body(5));
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  {
    DataPool b(MPI_COMM_WORLD, cfg, rank == 0 ? &snap : nullptr);
    if (rank == 0) b.publish_version(9);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      for (uint64_t want : {2, 6, 7}) EXPECT_EQ(b.try_start(), std::optional<uint64_t>(want));
      for (uint64_t s : {2, 6, 7}) produce(b, s);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      for (uint64_t want : {2, 6, 7}) {
        const auto t = b.try_take();
        ASSERT_TRUE(t.has_value()) << "expected slot " << want;
        EXPECT_EQ(t->slot, want);
        EXPECT_EQ(as_string(t->payload), body(want));
      }
      EXPECT_FALSE(b.try_take().has_value());
      EXPECT_EQ(b.head(), 8u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// Groups a checkpoint kept count as finished, unconsumed ones until the
// consumer takes them (take_held): with M of them held no producer is
// admitted, one taken admits one. Each meets the staleness cap when taken
// (they were once trained at any staleness) and is counted.
TEST(DataPoolResume, HeldGroupsCountAgainstMemoryAndMeetTheStalenessCap) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DataPoolConfig cfg;
  cfg.window.n_running = 4;
  cfg.window.memory = 4;
  cfg.window.staleness_cap = 1;
  cfg.window.cap_action = CapAction::kDrop;
  cfg.slot_bytes = 256;
  cfg.deadline_s = 30;
  DataPoolState held;  // M = 4 groups kept, slots 0..3
  for (int64_t s = 0; s < 4; ++s) {
    const std::string b = body(static_cast<uint64_t>(s));
    held.keep(s, 5, std::vector<uint8_t>(b.begin(), b.end()));
  }
  DataPool pool(MPI_COMM_WORLD, cfg, rank == 0 ? &held : nullptr);
  if (rank == 1) {
    EXPECT_EQ(pool.try_start(), std::nullopt) << "admitted with M groups held";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(pool.take_held(0), Verdict::kTrain);
    EXPECT_EQ(pool.counts().finished, 3u);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    EXPECT_EQ(pool.try_start(), std::optional<uint64_t>(4));  // past the kept slots
    produce(pool, 4);
    EXPECT_EQ(pool.try_start(), std::nullopt) << "admitted with 3 held and 1 finished";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(pool.take_held(1), Verdict::kTrain);
    EXPECT_EQ(pool.take_held(2), Verdict::kDrop);
    EXPECT_EQ(pool.take_held(0), Verdict::kTrain);
    EXPECT_THROW(pool.take_held(0), Error);  // all four taken
    EXPECT_EQ(pool.stats().count(), 4u);
    EXPECT_EQ(pool.stats().dropped(), 1u);
    EXPECT_EQ(pool.stats().max(), 2);
    EXPECT_EQ(pool.counts().finished, 1u);  // slot 4
  } else {
    EXPECT_THROW(pool.take_held(0), Error);  // the consumer's alone
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A take that moves the head onto slots the checkpoint trained moves it past
// them, and the host's head word (what producers and the watchdog read)
// follows; the tombstones written for those slots later leave it there.
TEST(DataPoolResume, TheHeadPassesTrainedSlotsAndIsPublished) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  DataPoolConfig cfg;
  cfg.window.n_running = 8;
  cfg.window.memory = 8;
  cfg.slot_bytes = 256;
  cfg.deadline_s = 30;
  DataPoolState trained;  // head 2; slots 3, 4, 5 trained before the checkpoint
  trained.head = 2;
  trained.consumed = {3, 4, 5};
  DataPool pool(MPI_COMM_WORLD, cfg, rank == 0 ? &trained : nullptr);
  if (rank == 0) pool.publish_version(9);  // produce() stamps 7
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(pool.head(), 2u);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    ASSERT_EQ(pool.try_start(), std::optional<uint64_t>(2));
    produce(pool, 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const auto t = pool.try_take();
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->slot, 2u);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(pool.head(), 6u);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    EXPECT_EQ(pool.try_start(), std::optional<uint64_t>(6));  // writes tombstones for 3, 4, 5
    produce(pool, 6);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_EQ(pool.snapshot().head, 6);
    const auto t = pool.try_take();
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->slot, 6u);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(pool.head(), 7u);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(DataPoolResume, DamagedStateIsAnInputError) {
  DataPoolState st;
  st.head = 10;
  st.consumed = {11};
  st.kept_slot = {9, 17};  // 9 lies below head (an interrupted batch): fine
  EXPECT_NO_THROW(check_resume_state(st));
  st.kept_slot.push_back(10 + kMaxResumeSpan);
  try {
    check_resume_state(st);
    FAIL() << "a slot 2^28 past the head";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("damaged checkpoint"), std::string::npos) << e.what();
  }
  st.kept_slot = {-3};
  EXPECT_THROW(check_resume_state(st), InputError);
}

}  // namespace
