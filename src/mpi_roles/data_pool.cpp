// The data pool on MPI RMA; the protocol is stated in data_pool.hpp.
#include "mpi_roles/data_pool.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/host_resources.hpp"
#include "core/timer.hpp"

namespace forge {
namespace {

enum Counter { kHead, kTail, kVersion, kRunning, kFinished, kAvail, kClaim, kNotice, kNumCounters };
enum SlotState { kFree = 0, kStarted = 1, kDone = 2 };
constexpr int64_t kEmpty = -1;
constexpr int64_t kTombstoneVersion = -1;
constexpr int kRankBits = 20;
constexpr int kCellBits = 24;

int64_t encode_state(uint64_t slot, int rank, int state) {
  return static_cast<int64_t>((slot << (kRankBits + 2)) | (static_cast<uint64_t>(rank) << 2) |
                              static_cast<uint64_t>(state));
}
uint64_t state_slot(int64_t w) { return static_cast<uint64_t>(w) >> (kRankBits + 2); }
int state_rank(int64_t w) { return static_cast<int>((static_cast<uint64_t>(w) >> 2) & ((1u << kRankBits) - 1)); }
int state_kind(int64_t w) { return static_cast<int>(w & 3); }

int64_t encode_notice(uint64_t slot, uint32_t cell) { return static_cast<int64_t>((slot << kCellBits) | cell); }
uint64_t notice_slot(int64_t w) { return static_cast<uint64_t>(w) >> kCellBits; }
uint32_t notice_cell(int64_t w) { return static_cast<uint32_t>(static_cast<uint64_t>(w) & ((1u << kCellBits) - 1)); }

void check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("data pool: ") + op + " failed: " + std::string(msg, len));
}

MPI_Win allocate(MPI_Comm comm, bool host, MPI_Aint bytes, int disp_unit, void* base_out) {
  MPI_Win win;
  check(MPI_Win_allocate(host ? bytes : 0, disp_unit, MPI_INFO_NULL, comm, base_out, &win), "MPI_Win_allocate");
  check(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  return win;
}

uint64_t mib(uint64_t bytes) { return bytes >> 20; }

double now_s() {
  static const Stopwatch clock;
  return clock.seconds();
}

}  // namespace

void check_pool_fits_host(const DataPoolConfig& cfg, bool shared_node) {
  const uint64_t payload = cfg.window.cells() * cfg.slot_bytes;
  const auto refuse = [&](const std::string& where, uint64_t free) {
    throw InputError("the data pool's payload, (pool.inflight + pool.memory) x pool.slot_mib = " +
                     std::to_string(mib(payload)) + " MiB, does not fit in " + where + " (" + std::to_string(mib(free)) +
                     " MiB); lower pool.inflight, pool.memory or pool.slot_mib");
  };
  const uint64_t memory = usable_host_memory();
  // Half: the ranks on the host need the rest (a pool of 20 of 24 GiB
  // stalled the host in MPI_Win_allocate).
  if (payload > memory / 2) refuse("half of this host's usable memory (a cgroup's limit if lower)", memory / 2);
  struct statvfs shm {};
  if (shared_node && statvfs("/dev/shm", &shm) == 0) {
    const uint64_t free = static_cast<uint64_t>(shm.f_bavail) * shm.f_frsize;
    if (payload > free) refuse("the free space of /dev/shm", free);
  }
}

// Offsets (in int64 words) of the meta window's parts.
#define STATE_AT(c) static_cast<MPI_Aint>(kNumCounters + (c))
#define CELL_AT(c) static_cast<MPI_Aint>(kNumCounters + cells_ + 2 * (c))
#define FREE_AT(i) static_cast<MPI_Aint>(kNumCounters + 3 * cells_ + (i) % cells_)
#define NOTICE_AT(d) static_cast<MPI_Aint>(kNumCounters + 4 * cells_ + (d) % cells_)

DataPool::DataPool(MPI_Comm comm, const DataPoolConfig& cfg, const DataPoolState* resume)
    : cfg_(cfg),
      n_(cfg.window.n_running),
      m_(cfg.window.memory),
      w_(cfg.window.effective_window()),
      cells_(cfg.window.cells()) {
  cfg_.window.validate();
  int size = 0;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size);
  if (cfg.host_rank < 0 || cfg.host_rank >= size || cfg.consumer_rank < 0 || cfg.consumer_rank >= size)
    throw InputError("data pool: host rank " + std::to_string(cfg.host_rank) + " and consumer rank " +
                     std::to_string(cfg.consumer_rank) + " must lie in [0, " + std::to_string(size) + ")");
  if (size > (1 << kRankBits)) throw InputError("data pool: at most 2^20 ranks, not " + std::to_string(size));
  if (cells_ >= (1ull << kCellBits))
    throw InputError("data pool: N + M = " + std::to_string(cells_) + " cells; at most 2^24 - 1");
  if (cfg.slot_bytes < 1 || cfg.slot_bytes > static_cast<uint64_t>(INT_MAX))
    throw InputError("data pool: slot_bytes must lie in [1, 2^31)");
  if (cells_ * cfg.slot_bytes > (1ull << 46))
    throw InputError("data pool: (N + M) x slot_bytes = " + std::to_string(cells_ * cfg.slot_bytes) +
                     " bytes of payload (2^46 at most); lower pool.inflight (N), pool.memory (M) or pool.slot_mib");
  if (cfg.deadline_s <= 0) throw InputError("data pool: the deadline must be positive");

  const bool host = rank_ == cfg.host_rank;
  // The skip bitmap of a resumed pool, from the host to every rank.
  uint64_t skip_words = 0;
  if (host && resume) {
    skip_base_ = static_cast<uint64_t>(resume->head);
    uint64_t top = skip_base_;
    for (const auto* list : {&resume->consumed, &resume->kept_slot})
      for (int64_t s : *list)
        if (s >= resume->head) top = std::max(top, static_cast<uint64_t>(s) + 1);
    skip_.assign((top - skip_base_ + 63) / 64, 0);
    for (const auto* list : {&resume->consumed, &resume->kept_slot})
      for (int64_t s : *list)
        if (s >= resume->head) skip_[(static_cast<uint64_t>(s) - skip_base_) / 64] |= 1ull << ((s - resume->head) % 64);
    skip_words = skip_.size();
  }
  // The kept groups' number too: the host counts them in F, the consumer
  // takes them (take_held), whichever rank was given the state.
  uint64_t shared[3] = {skip_base_, skip_words, host && resume ? resume->kept_slot.size() : 0};
  MPI_Bcast(shared, 3, MPI_UINT64_T, cfg.host_rank, comm);
  skip_base_ = shared[0];
  skip_.resize(shared[1]);
  if (rank_ == cfg.consumer_rank) held_left_ = shared[2];
  if (!skip_.empty()) MPI_Bcast(skip_.data(), static_cast<int>(skip_.size()), MPI_UINT64_T, cfg.host_rank, comm);

  int64_t* meta = nullptr;
  uint8_t* payload = nullptr;
  const MPI_Aint meta_words = static_cast<MPI_Aint>(kNumCounters + 5 * cells_);
  meta_win_ = allocate(comm, host, meta_words * 8, 8, &meta);
  payload_win_ = allocate(comm, host, static_cast<MPI_Aint>(cells_ * cfg.slot_bytes), 1, &payload);
  if (host) {
    std::memset(meta, 0, static_cast<size_t>(meta_words) * 8);
    meta[kAvail] = static_cast<int64_t>(cells_);
    for (uint64_t c = 0; c < cells_; ++c) {
      meta[FREE_AT(c)] = static_cast<int64_t>(c);
      meta[NOTICE_AT(c)] = kEmpty;
    }
    if (resume) {
      meta[kHead] = meta[kTail] = resume->head;
      meta[kFinished] = static_cast<int64_t>(resume->kept_slot.size());  // until take_held
    }
  }
  next_free_ = cells_;
  if (resume && rank_ == cfg.consumer_rank) {
    head_ = published_head_ = static_cast<uint64_t>(resume->head);
    for (const auto* list : {&resume->consumed, &resume->kept_slot})
      for (int64_t s : *list) mark_consumed(static_cast<uint64_t>(s));  // ignores those below the head
  }
  for (MPI_Win win : {meta_win_, payload_win_}) {
    check(MPI_Win_lock_all(0, win), "MPI_Win_lock_all");
    check(MPI_Win_sync(win), "MPI_Win_sync");
  }
  MPI_Barrier(comm);
  // A resumed head that moved past skip slots: publish it before any take.
  if (rank_ == cfg.consumer_rank) publish_head();
  uncaught_at_construction_ = std::uncaught_exceptions();
}

DataPool::~DataPool() {
  // Unwinding from an error: MPI_Win_free is collective and would block on the
  // ranks that carry on, so the windows are left to MPI_Abort.
  if (std::uncaught_exceptions() > uncaught_at_construction_) return;
  for (MPI_Win* win : {&meta_win_, &payload_win_}) {
    MPI_Win_unlock_all(*win);
    MPI_Win_free(win);
  }
}

void DataPool::flush_meta() { check(MPI_Win_flush(cfg_.host_rank, meta_win_), "MPI_Win_flush"); }

int64_t DataPool::read_word(MPI_Aint index) {
  int64_t dummy = 0, value = 0;
  check(MPI_Fetch_and_op(&dummy, &value, MPI_INT64_T, cfg_.host_rank, index, MPI_NO_OP, meta_win_),
        "MPI_Fetch_and_op (read)");
  flush_meta();
  return value;
}

uint64_t DataPool::head() { return static_cast<uint64_t>(read_word(kHead)); }
uint64_t DataPool::tail() { return static_cast<uint64_t>(read_word(kTail)); }
int64_t DataPool::published_version() { return read_word(kVersion); }

PoolCounts DataPool::counts() {
  int64_t v[kNumCounters];
  check(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, v, kNumCounters, MPI_INT64_T, cfg_.host_rank, 0, kNumCounters,
                           MPI_INT64_T, MPI_NO_OP, meta_win_),
        "MPI_Get_accumulate (counters)");
  flush_meta();
  return {static_cast<uint64_t>(v[kHead]), static_cast<uint64_t>(v[kTail]), static_cast<uint64_t>(v[kRunning]),
          static_cast<uint64_t>(v[kFinished])};
}

bool DataPool::skipped(uint64_t slot) const {
  if (slot < skip_base_ || slot - skip_base_ >= 64 * skip_.size()) return false;
  const uint64_t i = slot - skip_base_;
  return (skip_[i / 64] >> (i % 64)) & 1;
}

std::optional<uint64_t> DataPool::try_start() {
  for (;;) {
    // Admission: one running place and one free cell, flushed; then the
    // memory bound. R before F, in separate flushes: a group completing
    // meanwhile (F += 1 before R -= 1) is counted by R, by F or by both,
    // never by neither (MPI does not order operations on two counters
    // within one flush).
    const int64_t plus = 1, minus = -1, nothing = 0;
    int64_t r = 0, f = 0, a = 0;
    check(MPI_Fetch_and_op(&plus, &r, MPI_INT64_T, cfg_.host_rank, kRunning, MPI_SUM, meta_win_), "FAA (running)");
    check(MPI_Fetch_and_op(&minus, &a, MPI_INT64_T, cfg_.host_rank, kAvail, MPI_SUM, meta_win_), "FAA (free cells)");
    flush_meta();
    check(MPI_Fetch_and_op(&nothing, &f, MPI_INT64_T, cfg_.host_rank, kFinished, MPI_NO_OP, meta_win_),
          "MPI_Fetch_and_op (finished)");
    flush_meta();
    if (r >= static_cast<int64_t>(n_) || f >= static_cast<int64_t>(m_) || a <= 0) {
      check(MPI_Accumulate(&minus, 1, MPI_INT64_T, cfg_.host_rank, kRunning, 1, MPI_INT64_T, MPI_SUM, meta_win_),
            "MPI_Accumulate (running)");
      check(MPI_Accumulate(&plus, 1, MPI_INT64_T, cfg_.host_rank, kAvail, 1, MPI_INT64_T, MPI_SUM, meta_win_),
            "MPI_Accumulate (free cells)");
      flush_meta();
      return std::nullopt;
    }
    // Admitted: a free-ring index and a slot number, then the cell.
    int64_t i = 0, s = 0;
    check(MPI_Fetch_and_op(&plus, &i, MPI_INT64_T, cfg_.host_rank, kClaim, MPI_SUM, meta_win_), "FAA (claim)");
    check(MPI_Fetch_and_op(&plus, &s, MPI_INT64_T, cfg_.host_rank, kTail, MPI_SUM, meta_win_), "FAA (tail)");
    flush_meta();
    if (cfg_.after_claim) cfg_.after_claim(static_cast<uint64_t>(i));
    const int64_t raw = read_word(FREE_AT(static_cast<uint64_t>(i)));
    if (raw < 0 || static_cast<uint64_t>(raw) >= cells_)
      throw Error("data pool: free-ring entry " + std::to_string(i) + " holds " + std::to_string(raw) +
                  " on rank " + std::to_string(rank_) + " (a protocol error)");
    const auto cell = static_cast<uint32_t>(raw);
    const int64_t empty = kEmpty;
    const int64_t word = encode_state(static_cast<uint64_t>(s), rank_, kStarted);
    check(MPI_Accumulate(&empty, 1, MPI_INT64_T, cfg_.host_rank, FREE_AT(static_cast<uint64_t>(i)), 1, MPI_INT64_T,
                         MPI_REPLACE, meta_win_),
          "MPI_Accumulate (free ring)");
    check(MPI_Accumulate(&word, 1, MPI_INT64_T, cfg_.host_rank, STATE_AT(cell), 1, MPI_INT64_T, MPI_REPLACE,
                         meta_win_),
          "MPI_Accumulate (cell state)");
    flush_meta();
    const auto slot = static_cast<uint64_t>(s);
    started_[slot] = cell;
    if (!skipped(slot)) return slot;
    write_completion(slot, nullptr, 0, kTombstoneVersion);  // a resumed pool holds it already
  }
}

uint64_t DataPool::start() {
  Stopwatch sw;
  for (;;) {
    if (const auto s = try_start()) return *s;
    if (sw.seconds() > cfg_.deadline_s) {
      const PoolCounts c = counts();
      // Name the bound that refused (the counts are a snapshot after the wait).
      const std::string consumer = "the consumer (" + name_of(cfg_.consumer_rank, "consumer") + ", head " +
                                   std::to_string(c.head) + ")";
      const std::string why =
          c.running >= n_   ? "N running episodes have not finished (the producers' own slots)"
          : c.finished >= m_ ? "M finished trajectories wait for " + consumer + " to take them"
                             : "no free cell: " + consumer + " has not returned the cells it took";
      throw Error("data pool: " + name_of(rank_, "producer") + " waited " + std::to_string(cfg_.deadline_s) +
                  " s for admission: " + std::to_string(c.running) + " running of N = " + std::to_string(n_) +
                  ", " + std::to_string(c.finished) + " finished of M = " + std::to_string(m_) + "; " + why);
    }
    std::this_thread::yield();
  }
}

void DataPool::complete(uint64_t slot, const void* data, size_t bytes, int64_t version) {
  if (version < 0)
    throw Error("data pool: rank " + std::to_string(rank_) + " completes slot " + std::to_string(slot) +
                " with policy version " + std::to_string(version) + " (versions are >= 0)");
  write_completion(slot, data, bytes, version);
}

void DataPool::write_completion(uint64_t slot, const void* data, size_t bytes, int64_t version) {
  static const uint8_t nothing = 0;
  if (!data) data = &nothing;
  const auto it = started_.find(slot);
  if (it == started_.end())
    throw Error("data pool: rank " + std::to_string(rank_) + " completes slot " + std::to_string(slot) +
                ", which it has not started");
  if (bytes > cfg_.slot_bytes)
    throw Error("data pool: payload of " + std::to_string(bytes) + " bytes for slot " + std::to_string(slot) +
                " exceeds the slot capacity of " + std::to_string(cfg_.slot_bytes) + " bytes (raise pool.slot_mib)");
  const uint32_t cell = it->second;
  started_.erase(it);
  // Payload, cell meta, DONE and a notice index, completed together; then the
  // notice, finished + 1 (not for a tombstone) and running - 1.
  const int64_t meta[2] = {version, static_cast<int64_t>(bytes)};
  const int64_t word = encode_state(slot, rank_, kDone), plus = 1, minus = -1;
  int64_t d = 0;
  check(MPI_Put(data, static_cast<int>(bytes), MPI_BYTE, cfg_.host_rank,
                static_cast<MPI_Aint>(static_cast<uint64_t>(cell) * cfg_.slot_bytes), static_cast<int>(bytes),
                MPI_BYTE, payload_win_),
        "MPI_Put (payload)");
  check(MPI_Put(meta, 2, MPI_INT64_T, cfg_.host_rank, CELL_AT(cell), 2, MPI_INT64_T, meta_win_), "MPI_Put (cell)");
  check(MPI_Accumulate(&word, 1, MPI_INT64_T, cfg_.host_rank, STATE_AT(cell), 1, MPI_INT64_T, MPI_REPLACE,
                       meta_win_),
        "MPI_Accumulate (cell state)");
  check(MPI_Fetch_and_op(&plus, &d, MPI_INT64_T, cfg_.host_rank, kNotice, MPI_SUM, meta_win_), "FAA (notice)");
  // F counts the group before its notice can be read, so that the
  // consumer's F -= 1 never lands first (F would read -1).
  if (version != kTombstoneVersion)
    check(MPI_Accumulate(&plus, 1, MPI_INT64_T, cfg_.host_rank, kFinished, 1, MPI_INT64_T, MPI_SUM, meta_win_),
          "MPI_Accumulate (finished)");
  check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");
  flush_meta();
  if (cfg_.after_notice_claim) cfg_.after_notice_claim(static_cast<uint64_t>(d));
  const int64_t notice = encode_notice(slot, cell);
  check(MPI_Accumulate(&notice, 1, MPI_INT64_T, cfg_.host_rank, NOTICE_AT(static_cast<uint64_t>(d)), 1, MPI_INT64_T,
                       MPI_REPLACE, meta_win_),
        "MPI_Accumulate (notice)");
  check(MPI_Accumulate(&minus, 1, MPI_INT64_T, cfg_.host_rank, kRunning, 1, MPI_INT64_T, MPI_SUM, meta_win_),
        "MPI_Accumulate (running)");
  flush_meta();
}

void DataPool::require_consumer(const char* what) const {
  if (rank_ != cfg_.consumer_rank)
    throw Error(std::string("data pool: ") + what + " on rank " + std::to_string(rank_) + ", but the consumer is rank " +
                std::to_string(cfg_.consumer_rank));
}

void DataPool::publish_version(int64_t version) {
  require_consumer("publish_version");
  version_ = version;
  check(MPI_Accumulate(&version_, 1, MPI_INT64_T, cfg_.host_rank, kVersion, 1, MPI_INT64_T, MPI_REPLACE, meta_win_),
        "MPI_Accumulate (version)");
  flush_meta();
}

// n consecutive entries of a ring of C words (the free ring or the notice
// ring, starting at word `ring`) from entry `from` (mod C), in at most two
// contiguous runs: read atomically into buf (MPI_NO_OP) or overwritten with
// buf (MPI_REPLACE). Completed by the caller's flush.
void DataPool::ring_access(MPI_Aint ring, uint64_t from, int64_t* buf, uint64_t n, MPI_Op op, const char* what) {
  for (uint64_t k = 0; k < n;) {
    const uint64_t pos = (from + k) % cells_;
    const int run = static_cast<int>(std::min(n - k, cells_ - pos));
    const MPI_Aint at = ring + static_cast<MPI_Aint>(pos);
    const bool read = op == MPI_NO_OP;
    const int rc = read ? MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, buf + k, run, MPI_INT64_T, cfg_.host_rank, at,
                                             run, MPI_INT64_T, MPI_NO_OP, meta_win_)
                        : MPI_Accumulate(buf + k, run, MPI_INT64_T, cfg_.host_rank, at, run, MPI_INT64_T, op, meta_win_);
    if (rc != MPI_SUCCESS)
      check(rc, (std::string(read ? "MPI_Get_accumulate (" : "MPI_Accumulate (") + what + ")").c_str());
    k += static_cast<uint64_t>(run);
  }
}

// Reads the notices from next_notice_ up to the first EMPTY entry (at most
// min(C, 256) a call), resets them and reads their cells' meta.
void DataPool::read_notices() {
  const uint64_t want = std::min<uint64_t>(cells_, 256);
  scratch_.assign(want, kEmpty);
  ring_access(NOTICE_AT(0), next_notice_, scratch_.data(), want, MPI_NO_OP, "notices");
  flush_meta();
  uint64_t got = 0;
  while (got < want && scratch_[got] != kEmpty) ++got;
  if (got == 0) return;
  // Reset what was read (before any cell goes back: see data_pool.hpp), and
  // read the meta and state of the announced cells, in one flush.
  std::vector<int64_t> empties(got, kEmpty), cell_meta(2 * got), states(got);
  ring_access(NOTICE_AT(0), next_notice_, empties.data(), got, MPI_REPLACE, "notices");
  for (uint64_t k = 0; k < got; ++k) {
    const uint32_t cell = notice_cell(scratch_[k]);
    if (cell >= cells_)
      throw Error("data pool: a notice names cell " + std::to_string(cell) + " of " + std::to_string(cells_) +
                  " (a protocol error)");
    check(MPI_Get(&cell_meta[2 * k], 2, MPI_INT64_T, cfg_.host_rank, CELL_AT(cell), 2, MPI_INT64_T, meta_win_),
          "MPI_Get (cell)");
    check(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, &states[k], 1, MPI_INT64_T, cfg_.host_rank, STATE_AT(cell), 1,
                             MPI_INT64_T, MPI_NO_OP, meta_win_),
          "MPI_Get_accumulate (cell state)");
  }
  flush_meta();
  for (uint64_t k = 0; k < got; ++k) {
    const uint64_t slot = notice_slot(scratch_[k]);
    const uint32_t cell = notice_cell(scratch_[k]);
    if (state_slot(states[k]) != slot || state_kind(states[k]) != kDone)
      throw Error("data pool: notice of slot " + std::to_string(slot) + " names cell " + std::to_string(cell) +
                  ", whose state disagrees (a protocol error)");
    if (cell_meta[2 * k] == kTombstoneVersion) {  // a skip slot of a resumed pool
      mark_consumed(slot);
      returns_.push_back(cell);
      continue;
    }
    const int64_t length = cell_meta[2 * k + 1];
    if (length < 0 || static_cast<uint64_t>(length) > cfg_.slot_bytes)
      throw Error("data pool: slot " + std::to_string(slot) + " (cell " + std::to_string(cell) + ") claims " +
                  std::to_string(length) + " bytes of a " + std::to_string(cfg_.slot_bytes) +
                  "-byte slot (a protocol error)");
    done_[slot] = {cell, state_rank(states[k]), cell_meta[2 * k], length};
  }
  next_notice_ += got;
}

// Puts returned cells on the free ring where its entries are EMPTY (read by
// their claimers), then makes them available.
void DataPool::return_cells() {
  if (returns_.empty()) return;
  const uint64_t want = std::min<uint64_t>(returns_.size(), cells_);
  scratch_.assign(want, 0);
  ring_access(FREE_AT(0), next_free_, scratch_.data(), want, MPI_NO_OP, "free ring");
  flush_meta();
  uint64_t put = 0;
  while (put < want && scratch_[put] == kEmpty) ++put;
  if (put == 0) return;
  std::vector<int64_t> values(put);
  for (uint64_t k = 0; k < put; ++k) values[k] = returns_[k];
  ring_access(FREE_AT(0), next_free_, values.data(), put, MPI_REPLACE, "free ring");
  flush_meta();
  const int64_t added = static_cast<int64_t>(put);
  check(MPI_Accumulate(&added, 1, MPI_INT64_T, cfg_.host_rank, kAvail, 1, MPI_INT64_T, MPI_SUM, meta_win_),
        "MPI_Accumulate (free cells)");
  flush_meta();
  next_free_ += put;
  returns_.erase(returns_.begin(), returns_.begin() + static_cast<long>(put));
}

void DataPool::mark_consumed(uint64_t slot) {
  if (slot < head_) return;  // a skip slot the head has passed already
  consumed_.insert(slot);
  while (!consumed_.empty() && *consumed_.begin() == head_) {
    consumed_.erase(consumed_.begin());
    ++head_;
  }
  head_wait_.erase(head_wait_.begin(), head_wait_.lower_bound(head_));  // charges of slots passed untaken
}

void DataPool::publish_head() {
  if (head_ == published_head_) return;
  const int64_t h = static_cast<int64_t>(head_);
  check(MPI_Accumulate(&h, 1, MPI_INT64_T, cfg_.host_rank, kHead, 1, MPI_INT64_T, MPI_REPLACE, meta_win_),
        "MPI_Accumulate (head)");
  flush_meta();
  published_head_ = head_;
}

std::optional<TakenTrajectory> DataPool::try_take() {
  require_consumer("take");
  read_notices();
  // Time spent with nothing visible since the last call is charged to the
  // slot that was at the head, before a take reads that slot's charge.
  const double now = now_s();
  if (waiting_since_ >= 0) {
    head_wait_[waiting_head_] += now - waiting_since_;
    waiting_since_ = -1;
  }
  std::optional<TakenTrajectory> t = take_visible();
  // Cells go back in batches (three round trips each), and whenever the
  // consumer would otherwise wait.
  if (!t || returns_.size() >= std::max<uint64_t>(1, std::min<uint64_t>(16, cells_ / 4))) return_cells();
  publish_head();
  if (!t) {
    waiting_since_ = now;
    waiting_head_ = head_;
  }
  return t;
}

std::optional<TakenTrajectory> DataPool::take_visible() {
  if (done_.empty() || !in_window(done_.begin()->first, head_, w_)) return std::nullopt;
  const auto [slot, a] = *done_.begin();
  done_.erase(done_.begin());
  TakenTrajectory out;
  out.slot = slot;
  out.head = head_;
  out.producer = a.producer;
  out.version = a.version;
  out.payload.resize(static_cast<size_t>(a.length));
  const int64_t minus = -1;
  check(MPI_Get(out.payload.data(), static_cast<int>(a.length), MPI_BYTE, cfg_.host_rank,
                static_cast<MPI_Aint>(static_cast<uint64_t>(a.cell) * cfg_.slot_bytes), static_cast<int>(a.length),
                MPI_BYTE, payload_win_),
        "MPI_Get (payload)");
  check(MPI_Accumulate(&minus, 1, MPI_INT64_T, cfg_.host_rank, kFinished, 1, MPI_INT64_T, MPI_SUM, meta_win_),
        "MPI_Accumulate (finished)");
  check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");
  flush_meta();
  out.staleness = version_ - out.version;
  out.verdict = cfg_.window.verdict(out.staleness);
  stats_.add(out.staleness, out.verdict);
  if (const auto w = head_wait_.find(slot); w != head_wait_.end()) {
    out.head_wait_s = w->second;
    head_wait_.erase(w);
  }
  mark_consumed(slot);
  returns_.push_back(a.cell);
  return out;
}

Verdict DataPool::take_held(int64_t staleness) {
  require_consumer("take_held");
  if (held_left_ == 0) throw Error("data pool: take_held, but every group the checkpoint kept was taken");
  --held_left_;
  const int64_t minus = -1;
  check(MPI_Accumulate(&minus, 1, MPI_INT64_T, cfg_.host_rank, kFinished, 1, MPI_INT64_T, MPI_SUM, meta_win_),
        "MPI_Accumulate (finished)");
  flush_meta();
  const Verdict v = cfg_.window.verdict(staleness);
  stats_.add(staleness, v);
  return v;
}

DataPoolState DataPool::snapshot() {
  require_consumer("snapshot");
  read_notices();
  DataPoolState st;
  st.head = static_cast<int64_t>(head_);
  for (const uint64_t s : consumed_) st.consumed.push_back(static_cast<int64_t>(s));
  for (const auto& [slot, a] : done_) {
    std::vector<uint8_t> payload(static_cast<size_t>(a.length));
    check(MPI_Get(payload.data(), static_cast<int>(a.length), MPI_BYTE, cfg_.host_rank,
                  static_cast<MPI_Aint>(static_cast<uint64_t>(a.cell) * cfg_.slot_bytes), static_cast<int>(a.length),
                  MPI_BYTE, payload_win_),
          "MPI_Get (payload)");
    check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");
    st.keep(static_cast<int64_t>(slot), a.version, payload);
  }
  return st;
}

std::string DataPool::name_of(int rank, const char* role) const {
  return cfg_.rank_name ? cfg_.rank_name(rank) : std::string(role) + " rank " + std::to_string(rank);
}

std::string DataPool::describe_head() {
  require_consumer("describe_head");
  std::vector<int64_t> states(cells_);
  check(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, states.data(), static_cast<int>(cells_), MPI_INT64_T,
                           cfg_.host_rank, STATE_AT(0), static_cast<int>(cells_), MPI_INT64_T, MPI_NO_OP, meta_win_),
        "MPI_Get_accumulate (cell states)");
  flush_meta();
  const PoolCounts c = counts();
  std::string who;
  for (const int64_t w : states)
    if (state_slot(w) == head_ && state_kind(w) == kStarted)
      who = name_of(state_rank(w), "producer") + " started it and has not completed it";
  if (who.empty())
    who = head_ >= c.tail ? "no producer has started it"
                          : "no cell shows it started: admitted and not yet marked, or complete with its notice on "
                            "its way";
  // Notices are read in order: one claimed and not yet written hides every
  // completion announced after it (read_notices stops at it).
  // (Claimed past the next one to read, and that entry still EMPTY: not
  // merely more notices than one read takes, or one written since.)
  const uint64_t claimed = static_cast<uint64_t>(read_word(kNotice));
  int64_t next = kEmpty;
  if (claimed > next_notice_) {
    ring_access(NOTICE_AT(0), next_notice_, &next, 1, MPI_NO_OP, "notices");
    flush_meta();
  }
  if (claimed > next_notice_ && next == kEmpty)
    who += "; notice " + std::to_string(next_notice_) + " is claimed and not yet written (a producer is inside a "
           "completion), and " + std::to_string(claimed - next_notice_ - 1) + " completion(s) after it wait behind it";
  // append, not "[" + std::string&& (GCC 12 -Wrestrict false positive)
  const std::string window = w_ == kUnboundedWindow ? std::string("any slot")
                                                    : std::string("[").append(std::to_string(head_)).append(", ") +
                                                          std::to_string(head_ + w_) + ")";
  return "no DONE slot in " + window + "; head slot " + std::to_string(head_) + ": " + who + " (" +
         std::to_string(c.running) + " running of N = " + std::to_string(n_) + ", " + std::to_string(c.finished) +
         " finished of M = " + std::to_string(m_) + ")";
}

TakenTrajectory DataPool::take() {
  Stopwatch sw;
  for (;;) {
    if (auto t = try_take()) return std::move(*t);
    if (sw.seconds() > cfg_.deadline_s)
      throw Error("data pool: " + name_of(rank_, "consumer") + " waited " + std::to_string(cfg_.deadline_s) +
                  " s: " + describe_head());
    std::this_thread::yield();
  }
}

}  // namespace forge
