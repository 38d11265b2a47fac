// The data pool: a Windowed FIFO queue of opaque trajectory payloads in MPI
// one-sided windows (the rules are in window_policy.hpp). Producers on any
// rank, one consumer; the data path uses RMA only (passive target), never
// two-sided messages, and no compare-and-swap (MPI_Compare_and_swap on 64-bit
// words crashes Open MPI 4.1's osc/rdma over btl/vader, open-mpi/ompi#7967,
// #11349): fetch-and-add, atomic reads (NO_OP) and atomic writes (REPLACE).
//
// Two windows on the host rank (MPI_Win_allocate, size 0 elsewhere), opened
// once with MPI_Win_lock_all. C = N + M payload cells.
//   meta (int64)  counters  H head, T tail, V published version, R running,
//                           F finished (unconsumed), A free cells available,
//                           I next free-ring index to claim, D next notice
//                 state[C]  per cell: slot << 22 | producer rank << 2 | FREE 0, STARTED 1, DONE 2
//                 cell[2C]  per cell: version, payload length
//                 free[C]   the free ring: cell indices, EMPTY (-1) once claimed
//                 notice[C] the done ring: slot << 24 | cell, EMPTY once read
//   payload       bytes[C * slot_bytes]; cell c owns [c slot_bytes, +slot_bytes)
// and on every rank a local skip bitmap (a resumed pool's slots not to
// generate, broadcast at construction).
//
// Producer (any rank), per trajectory:
//   1. start     r = FAA(R, +1), a = FAA(A, -1), flush; then f = read F,
//                flush (a group completing meanwhile, F += 1 before R -= 1,
//                is counted by R or F, never by neither: MPI does not order
//                two counters' operations within one flush);
//                admitted when r < N, f < M and a > 0, else undone (FAA back)
//                and retried later (backpressure). Then i = FAA(I, +1) and
//                s = FAA(T, +1): a slot in start order; cell = free[i mod C],
//                free[i mod C] := EMPTY; state[cell] := STARTED.
//   2. complete  Put payload and cell meta, state[cell] := DONE,
//                d = FAA(D, +1), F += 1, one flush; then
//                notice[d mod C] := (s, cell), R -= 1, one flush (F counts
//                the group before its notice exists, so the consumer's
//                F -= 1 never comes first).
// Consumer (one rank), per take:
//   3. notices   read notice[] from its own next index up to the first EMPTY,
//                reset what it read to EMPTY and Get those cells' meta, flush;
//                it now knows every DONE slot announced (slot -> cell).
//   4. take      the lowest announced slot s in [H, H + W) (any for greedy);
//                Get its payload and F -= 1, one flush; H advances past consumed
//                slots (H := new head); the cell goes back to the free ring
//                (in batches, and whenever nothing is visible):
//                free[t mod C] := cell once that entry is EMPTY (its claimer
//                has read it), flush, then A += 1.
// Why it is safe. Payload and meta are flushed before the notice names the
// cell, and the consumer reads them only after the notice. At most C cells
// are in use, so at most C notices are unread: notice d + C cannot be written
// before notice d was read and reset (its cell is still in use until the
// consumer returns it, which it does after the reset). The free ring's entry
// t mod C is written by the consumer only once EMPTY, and only the claimer of
// index t - C empties it, after reading it; a claimer of index i reads after
// the consumer's write of entry i was flushed, since A counted that write
// before the claim. Counters and ring entries are only touched by MPI
// accumulate operations of one datatype, which are atomic with each other.
//
// Admission is by occupancy (R < N, F < M): a straggler holds H, never
// generation. R and F are read separately, so concurrent starts may pass
// F < M together; the free ring still bounds the cells in use by C.
//
// Resume. A pool may start from the DataPoolState of a checkpoint: H = T =
// its head, and the slots it lists at or above head (trained, or kept for the
// learner to train first) are a skip bitmap every rank holds. A producer that
// is handed a skip slot does not generate it: it completes it at once as a
// tombstone (length 0, version -1), which the consumer passes over. Slots in
// flight at the checkpoint are generated again (same slot number, same task).
// The groups it kept (the consumer trains them first, take_held) start in F:
// admission counts them as finished and unconsumed, as they were, so the
// staleness bound holds across a resume.
//
// Invariants (tests/mpi/test_data_pool.cpp): no slot starts unless fewer than
// N run; every consumed slot lies in [H, H + W) at its take; each started
// slot is consumed exactly once. Every blocking wait has a deadline and
// throws forge::Error naming what it waited on.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mpi_roles/data_pool_state.hpp"
#include "mpi_roles/window_policy.hpp"

namespace forge {

struct DataPoolConfig {
  WindowConfig window;
  uint64_t slot_bytes = 1 << 16;  // payload capacity of one slot
  int host_rank = 0;              // holds the windows
  int consumer_rank = 0;          // the one rank that takes
  double deadline_s = 60.0;       // every blocking wait
  // A rank as the messages of a stalled pool name it ("environment rank 3");
  // unset: "producer rank 3", "consumer rank 0".
  std::function<std::string(int rank)> rank_name;
  // Tests only: called between a start's claim of free-ring index i and its
  // read of that entry (the window in which the consumer must not overwrite
  // it); it may start and complete other slots itself.
  std::function<void(uint64_t claim_index)> after_claim;
  // Tests only: called between a completion's claim of notice index d and
  // its write of that notice; it may complete other slots itself.
  std::function<void(uint64_t notice_index)> after_notice_claim;
};

// On the host rank, before the collective construction: the pool's payload,
// (N + M) x slot_bytes, must fit in half of this host's usable memory (a
// cgroup's limit if lower, core/host_resources.hpp) and, where
// other ranks share this node (`shared_node`: Open MPI backs the windows
// with a shared-memory segment), in /dev/shm's free space; an InputError naming
// pool.inflight, pool.memory and pool.slot_mib otherwise (Open MPI ended
// the job inside MPI_Win_allocate, exit 53, naming none of them).
void check_pool_fits_host(const DataPoolConfig& cfg, bool shared_node);

struct TakenTrajectory {
  uint64_t slot = 0;
  int producer = -1;
  int64_t version = 0;    // oldest policy version, as the producer stamped it
  int64_t staleness = 0;  // consumer's published version - version
  Verdict verdict = Verdict::kTrain;
  uint64_t head = 0;      // H when it was taken (slot is in [head, head + W))
  double head_wait_s = 0;  // how long the consumer waited with this slot at H, unfinished
  std::vector<uint8_t> payload;
};

// The pool's counters, read atomically one by one (a consistent snapshot is
// not promised).
struct PoolCounts {
  uint64_t head = 0, tail = 0, running = 0, finished = 0;
};

class DataPool {
 public:
  // Collective over comm (window allocation). `resume` (read on the host
  // and the consumer only) restarts the slot sequence of a checkpoint.
  DataPool(MPI_Comm comm, const DataPoolConfig& cfg, const DataPoolState* resume = nullptr);
  // Collective (MPI_Win_free): every rank destroys its pool together; not
  // when unwinding from an exception (the job is then to call MPI_Abort).
  ~DataPool();
  DataPool(const DataPool&) = delete;
  DataPool& operator=(const DataPool&) = delete;

  // ---- producers (any rank) ----
  // A slot, STARTED, when the pool admits one now (fewer than N running and
  // fewer than M finished); nullopt otherwise. Skip slots of a resumed pool
  // are completed as tombstones here and never returned.
  std::optional<uint64_t> try_start();
  // Waits for admission; Error naming the counts and the consumer after the deadline.
  uint64_t start();
  // Writes the payload (<= slot_bytes) of a slot this rank started and marks
  // it DONE. Error for a slot it did not start, a payload over slot_bytes or
  // a negative version.
  void complete(uint64_t slot, const void* data, size_t bytes, int64_t version);
  // The version the consumer published last (atomic read).
  int64_t published_version();

  // ---- the consumer rank ----
  // Lowest DONE slot in [H, H+W), nullopt when none is visible. Trajectories
  // over the staleness cap come back with verdict kDrop (not to be trained on)
  // or kMask, and are counted in stats().
  std::optional<TakenTrajectory> try_take();
  // Waits for a visible DONE slot; Error naming the head's producer.
  TakenTrajectory take();
  // Puts the cells of taken slots back on the free ring now (try_take does
  // so in batches): called before a training step, so that producers are
  // not refused for cells the consumer holds while it trains.
  void return_taken_cells() {
    require_consumer("return cells");
    return_cells();
  }
  void publish_version(int64_t version);
  // Why nothing is visible: the head slot and what its producer is doing
  // (for deadline messages).
  std::string describe_head();
  const StalenessStats& stats() const { return stats_; }
  // The consumer takes one of the groups the checkpoint kept (it holds them
  // outside the pool, and trains them first): F counted it from the start,
  // so that admission sees it, and drops it now; it meets the staleness cap
  // and is counted in stats() as a take at `staleness` is. Error when none
  // is left.
  Verdict take_held(int64_t staleness);
  // The state to checkpoint (reads the payloads of finished slots).
  DataPoolState snapshot();

  // ---- any rank: atomic reads of the counters ----
  uint64_t head();
  uint64_t tail();
  PoolCounts counts();
  const DataPoolConfig& config() const { return cfg_; }

 private:
  // cfg_.rank_name(rank), or `role` + " rank N".
  std::string name_of(int rank, const char* role) const;
  struct Announced {
    uint32_t cell = 0;
    int producer = -1;
    int64_t version = 0;
    int64_t length = 0;
  };
  int64_t read_word(MPI_Aint index);
  void flush_meta();
  bool skipped(uint64_t slot) const;
  void require_consumer(const char* what) const;
  // complete() without the version check: tombstones (version -1) too.
  void write_completion(uint64_t slot, const void* data, size_t bytes, int64_t version);
  void ring_access(MPI_Aint ring, uint64_t from, int64_t* buf, uint64_t n, MPI_Op op, const char* what);
  void read_notices();
  // Writes head_ to the host's head word when it moved since the last write
  // (a take moves it past the slot taken and any consumed slots above).
  void publish_head();
  void return_cells();
  void mark_consumed(uint64_t slot);
  std::optional<TakenTrajectory> take_visible();

  DataPoolConfig cfg_;
  uint64_t n_, m_, w_, cells_;
  int rank_ = 0;
  MPI_Win meta_win_ = MPI_WIN_NULL, payload_win_ = MPI_WIN_NULL;
  // A resumed pool's skip bitmap over [skip_base_, skip_base_ + 64 skip_.size()).
  uint64_t skip_base_ = 0;
  std::vector<uint64_t> skip_;
  // Producer side: the cell of each slot this rank started.
  std::map<uint64_t, uint32_t> started_;
  // Consumer side.
  uint64_t head_ = 0;
  uint64_t published_head_ = 0;  // the host's head word, as last written
  uint64_t held_left_ = 0;  // groups the checkpoint kept not yet taken (take_held)
  uint64_t next_notice_ = 0;     // notices read so far
  uint64_t next_free_ = 0;       // free-ring entries written so far
  std::map<uint64_t, Announced> done_;  // announced, not consumed, by slot
  std::set<uint64_t> consumed_;  // consumed slots above H
  std::deque<uint32_t> returns_;  // cells to put back on the free ring
  std::vector<int64_t> scratch_;
  int64_t version_ = 0;
  StalenessStats stats_;
  // Waiting with the head unfinished: since when, and the time per head slot.
  double waiting_since_ = -1;
  uint64_t waiting_head_ = 0;
  std::map<uint64_t, double> head_wait_;
  int uncaught_at_construction_ = 0;
};

}  // namespace forge
