// The data pool: a Windowed FIFO queue of opaque trajectory payloads in MPI
// one-sided windows. Producers on any rank, one consumer; the data path uses
// RMA only (passive target), never two-sided messages.
//
// Windows, all allocated on the host rank (MPI_Win_allocate, size 0 elsewhere)
// and opened once with MPI_Win_lock_all:
//   counters  int64[3]: H (head), T (tail), V (published learner version)
//   table     int64[N] state words, then int64[3 N] meta: version, offset, length
//             state = slot << 22 | producer rank << 2 | {FREE 0, STARTED 1, DONE 2}
//   payload   bytes[N * slot_bytes]; slot s owns [(s mod N) slot_bytes, +slot_bytes)
// Slot s lives in entry s mod N; the slot number in its state word tells a
// live entry from one of an earlier lap.
//
// Producer (any rank), per trajectory:
//   1. submit   s = Fetch_and_op(SUM 1) on T: a ticket, in submission order.
//   2. start    admitted when s < H + N (H read with Fetch_and_op NO_OP);
//               until then the producer does other work or waits
//               (backpressure). Then state[s] := STARTED (Accumulate REPLACE),
//               flush. Only now may it touch entry s mod N.
//   3. complete Put payload, Put meta, flush both windows; then
//               state[s] := DONE (Accumulate REPLACE), flush.
// Consumer (one rank), per trajectory:
//   4. take     read T, then the state words of [H, min(H + W, T))
//               (Get_accumulate NO_OP: atomic per word), flush; pick the lowest
//               DONE slot; Get its meta, flush; Get its payload, flush; mark it
//               consumed locally; if H moved, H := new head (Accumulate
//               REPLACE), flush.
// The flush before DONE makes the payload visible before the state says so;
// the consumer's reads complete before H moves, and a producer writes entry
// s mod N only once s < H + N, i.e. after slot s - N was consumed and H > s - N.
//
// Tickets rather than a compare-and-swap "claim if s < H + N" on T: one atomic
// per slot, admission in submission order, and no 64-bit MPI_Compare_and_swap,
// which crashes Open MPI 4.1's osc/rdma over btl/vader (open-mpi/ompi#7967,
// #11349). A ticket holder must start and complete its slot: an abandoned
// ticket holds the head, and the consumer's deadline reports it.
//
// Resume. A pool may start from the DataPoolState of a checkpoint
// (data_pool_state.hpp): H = T = its head; the host marks every slot the
// checkpoint lists as consumed or kept SKIP (state 3). A producer admitted to
// a SKIP slot does not generate it: it completes it as a tombstone (length 0,
// version -1), which the consumer passes over without returning it, so the
// head never passes a slot before its ticket holder is done with it. The
// kept payloads are handed back to the caller to train first. snapshot() on
// the consumer writes that state: consumed flags, tombstones and SKIP slots
// of [H, T) as consumed, DONE slots with their payloads as kept.
//
// Invariants: no slot starts unless s < H + N; every consumed slot lies in
// [H, H + W) at its take; each submitted slot is consumed exactly once.
// Every blocking wait has a deadline and throws forge::Error naming the rank
// waited on.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <optional>
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
};

// What a producer may do with its ticket.
enum class Admission { kWait, kStart, kSkip };

struct TakenTrajectory {
  uint64_t slot = 0;
  int producer = -1;
  int64_t version = 0;    // oldest policy version, as the producer stamped it
  int64_t staleness = 0;  // consumer's published version - version
  Verdict verdict = Verdict::kTrain;
  uint64_t head = 0;      // H when it was taken (slot is in [head, head + W))
  std::vector<uint8_t> payload;
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
  // A ticket: the next slot in submission order (no wait).
  uint64_t submit();
  // kStart once slot s is admitted (s < H + N), marked STARTED: generate it
  // and complete() it. kSkip: a resumed pool already holds it; nothing to do
  // (it is completed as a tombstone here). kWait: not admitted yet.
  Admission try_admit(uint64_t slot);
  // try_admit for pools that are not resumed: true once started (Error on a
  // SKIP slot).
  bool try_start(uint64_t slot);
  // Waits for admission; Error naming the consumer after the deadline.
  void start(uint64_t slot);
  // submit() then start(): for a producer with nothing else in flight.
  uint64_t claim();
  // Writes the payload (<= slot_bytes) and marks the slot DONE.
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
  void publish_version(int64_t version);
  // Why nothing is visible: the head slot and what its producer is doing
  // (for deadline messages).
  std::string describe_head();
  const StalenessStats& stats() const { return stats_; }
  // The state to checkpoint (reads the payloads of finished slots).
  DataPoolState snapshot();

  // ---- any rank: atomic reads of the counters ----
  uint64_t head();
  uint64_t tail();
  const DataPoolConfig& config() const { return cfg_; }
  int rank() const { return rank_; }

 private:
  int64_t read_counter(int index);
  void write_counter(int index, int64_t value);
  void set_state(uint64_t slot, int state);
  void require_consumer(const char* what) const;
  std::optional<TakenTrajectory> take_visible();  // may return a tombstone

  DataPoolConfig cfg_;
  uint64_t n_, w_;
  int rank_ = 0;
  MPI_Win counters_win_ = MPI_WIN_NULL, table_win_ = MPI_WIN_NULL,
          payload_win_ = MPI_WIN_NULL;
  // Consumer-side state: H, consumed flags of [H, H+N) by s mod N, version.
  uint64_t head_ = 0;
  std::vector<uint8_t> consumed_;
  std::vector<int64_t> states_;  // scratch for the state words of the window
  int64_t version_ = 0;
  StalenessStats stats_;
  int uncaught_at_construction_ = 0;
};

}  // namespace forge
