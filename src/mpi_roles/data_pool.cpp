// The data pool on MPI RMA; the protocol is stated in data_pool.hpp.
#include "mpi_roles/data_pool.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/timer.hpp"

namespace forge {
namespace {

enum Counter { kHead = 0, kTail = 1, kVersion = 2, kNumCounters = 3 };
enum SlotState { kFree = 0, kStarted = 1, kDone = 2, kSkip = 3 };
constexpr int64_t kTombstoneVersion = -1;
constexpr int kRankBits = 20;
constexpr int kMetaWords = 3;  // version, offset, length

int64_t encode_state(uint64_t slot, int rank, int state) {
  return static_cast<int64_t>((slot << (kRankBits + 2)) | (static_cast<uint64_t>(rank) << 2) |
                              static_cast<uint64_t>(state));
}
uint64_t state_slot(int64_t w) { return static_cast<uint64_t>(w) >> (kRankBits + 2); }
int state_rank(int64_t w) { return static_cast<int>((static_cast<uint64_t>(w) >> 2) & ((1u << kRankBits) - 1)); }
int state_kind(int64_t w) { return static_cast<int>(w & 3); }

void check(int rc, const char* op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("data pool: ") + op + " failed: " + std::string(msg, len));
}

MPI_Win allocate(MPI_Comm comm, bool host, MPI_Aint bytes, int disp_unit, void* base_out) {
  MPI_Win win;
  check(MPI_Win_allocate(host ? bytes : 0, disp_unit, MPI_INFO_NULL, comm, base_out, &win),
        "MPI_Win_allocate");
  check(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  return win;
}

}  // namespace

DataPool::DataPool(MPI_Comm comm, const DataPoolConfig& cfg, const DataPoolState* resume)
    : cfg_(cfg), n_(cfg.window.n_inflight), w_(cfg.window.effective_window()) {
  cfg_.window.validate();
  int size = 0;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size);
  if (cfg.host_rank < 0 || cfg.host_rank >= size || cfg.consumer_rank < 0 ||
      cfg.consumer_rank >= size)
    throw InputError("data pool: host rank " + std::to_string(cfg.host_rank) +
                     " and consumer rank " + std::to_string(cfg.consumer_rank) +
                     " must lie in [0, " + std::to_string(size) + ")");
  if (size > (1 << kRankBits))
    throw InputError("data pool: at most 2^20 ranks, not " + std::to_string(size));
  if (cfg.slot_bytes < 1 || cfg.slot_bytes > static_cast<uint64_t>(INT_MAX))
    throw InputError("data pool: slot_bytes must lie in [1, 2^31)");
  if (cfg.deadline_s <= 0) throw InputError("data pool: the deadline must be positive");

  const bool host = rank_ == cfg.host_rank;
  int64_t *counters = nullptr, *table = nullptr;
  uint8_t* payload = nullptr;
  counters_win_ = allocate(comm, host, kNumCounters * 8, 8, &counters);
  table_win_ = allocate(comm, host, static_cast<MPI_Aint>(n_ * (1 + kMetaWords) * 8), 8, &table);
  payload_win_ = allocate(comm, host, static_cast<MPI_Aint>(n_ * cfg.slot_bytes), 1, &payload);
  if (host) {
    std::memset(counters, 0, kNumCounters * 8);
    std::memset(table, 0, n_ * (1 + kMetaWords) * 8);
    if (resume) {
      const auto h = static_cast<uint64_t>(resume->head);
      counters[kHead] = counters[kTail] = resume->head;
      // Slots below head are never handed out again (T restarts at head).
      // The range was checked before the collective set-up (resume_check).
      for (const auto* list : {&resume->consumed, &resume->kept_slot})
        for (int64_t s : *list)
          if (s >= resume->head && static_cast<uint64_t>(s) < h + n_)
            table[static_cast<uint64_t>(s) % n_] = encode_state(static_cast<uint64_t>(s), rank_, kSkip);
    }
  }
  if (resume && rank_ == cfg.consumer_rank) head_ = static_cast<uint64_t>(resume->head);
  for (MPI_Win win : {counters_win_, table_win_, payload_win_}) {
    check(MPI_Win_lock_all(0, win), "MPI_Win_lock_all");
    check(MPI_Win_sync(win), "MPI_Win_sync");
  }
  MPI_Barrier(comm);
  if (rank_ == cfg.consumer_rank) consumed_.assign(n_, 0);
  uncaught_at_construction_ = std::uncaught_exceptions();
}

DataPool::~DataPool() {
  // Unwinding from an error: MPI_Win_free is collective and would block on the
  // ranks that carry on, so the windows are left to MPI_Abort.
  if (std::uncaught_exceptions() > uncaught_at_construction_) return;
  for (MPI_Win* win : {&counters_win_, &table_win_, &payload_win_}) {
    MPI_Win_unlock_all(*win);
    MPI_Win_free(win);
  }
}

int64_t DataPool::read_counter(int index) {
  int64_t dummy = 0, value = 0;
  check(MPI_Fetch_and_op(&dummy, &value, MPI_INT64_T, cfg_.host_rank, index, MPI_NO_OP,
                         counters_win_),
        "MPI_Fetch_and_op (read counter)");
  check(MPI_Win_flush(cfg_.host_rank, counters_win_), "MPI_Win_flush");
  return value;
}

void DataPool::write_counter(int index, int64_t value) {
  check(MPI_Accumulate(&value, 1, MPI_INT64_T, cfg_.host_rank, index, 1, MPI_INT64_T,
                       MPI_REPLACE, counters_win_),
        "MPI_Accumulate (write counter)");
  check(MPI_Win_flush(cfg_.host_rank, counters_win_), "MPI_Win_flush");
}

void DataPool::set_state(uint64_t slot, int state) {
  const int64_t word = encode_state(slot, rank_, state);
  check(MPI_Accumulate(&word, 1, MPI_INT64_T, cfg_.host_rank, static_cast<MPI_Aint>(slot % n_),
                       1, MPI_INT64_T, MPI_REPLACE, table_win_),
        "MPI_Accumulate (slot state)");
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
}

uint64_t DataPool::head() { return static_cast<uint64_t>(read_counter(kHead)); }
uint64_t DataPool::tail() { return static_cast<uint64_t>(read_counter(kTail)); }
int64_t DataPool::published_version() { return read_counter(kVersion); }

uint64_t DataPool::submit() {
  const int64_t one = 1;
  int64_t slot = 0;
  check(MPI_Fetch_and_op(&one, &slot, MPI_INT64_T, cfg_.host_rank, kTail, MPI_SUM,
                         counters_win_),
        "MPI_Fetch_and_op (submit)");
  check(MPI_Win_flush(cfg_.host_rank, counters_win_), "MPI_Win_flush");
  return static_cast<uint64_t>(slot);
}

Admission DataPool::try_admit(uint64_t slot) {
  if (!may_start(slot, head(), n_)) return Admission::kWait;
  // Admitted: entry slot mod N is this ticket's until it is DONE.
  int64_t word = 0, dummy = 0;
  check(MPI_Fetch_and_op(&dummy, &word, MPI_INT64_T, cfg_.host_rank, static_cast<MPI_Aint>(slot % n_),
                         MPI_NO_OP, table_win_),
        "MPI_Fetch_and_op (slot state)");
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
  if (state_slot(word) == slot && state_kind(word) == kSkip) {
    complete(slot, nullptr, 0, kTombstoneVersion);
    return Admission::kSkip;
  }
  set_state(slot, kStarted);
  return Admission::kStart;
}

bool DataPool::try_start(uint64_t slot) {
  const Admission a = try_admit(slot);
  if (a == Admission::kSkip)
    throw Error("data pool: slot " + std::to_string(slot) + " of a resumed pool needs try_admit");
  return a == Admission::kStart;
}

void DataPool::start(uint64_t slot) {
  Stopwatch sw;
  while (!try_start(slot)) {
    if (sw.seconds() > cfg_.deadline_s)
      throw Error("data pool: producer rank " + std::to_string(rank_) + " waited " +
                  std::to_string(cfg_.deadline_s) + " s to start slot " + std::to_string(slot) +
                  ": it is not below head " + std::to_string(head()) + " + N " +
                  std::to_string(n_) + "; the consumer (rank " +
                  std::to_string(cfg_.consumer_rank) + ") has not advanced the head");
    std::this_thread::yield();
  }
}

uint64_t DataPool::claim() {
  const uint64_t slot = submit();
  start(slot);
  return slot;
}

void DataPool::complete(uint64_t slot, const void* data, size_t bytes, int64_t version) {
  static const uint8_t nothing = 0;
  if (!data) data = &nothing;
  if (bytes > cfg_.slot_bytes)
    throw Error("data pool: payload of " + std::to_string(bytes) + " bytes for slot " +
                std::to_string(slot) + " exceeds the slot capacity of " +
                std::to_string(cfg_.slot_bytes) + " bytes (raise slot_bytes)");
  const uint64_t offset = (slot % n_) * cfg_.slot_bytes;
  check(MPI_Put(data, static_cast<int>(bytes), MPI_BYTE, cfg_.host_rank,
                static_cast<MPI_Aint>(offset), static_cast<int>(bytes), MPI_BYTE, payload_win_),
        "MPI_Put (payload)");
  const int64_t meta[kMetaWords] = {version, static_cast<int64_t>(offset),
                                    static_cast<int64_t>(bytes)};
  check(MPI_Put(meta, kMetaWords, MPI_INT64_T, cfg_.host_rank,
                static_cast<MPI_Aint>(n_ + kMetaWords * (slot % n_)), kMetaWords, MPI_INT64_T,
                table_win_),
        "MPI_Put (slot meta)");
  check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
  set_state(slot, kDone);
}

void DataPool::require_consumer(const char* what) const {
  if (rank_ != cfg_.consumer_rank)
    throw Error(std::string("data pool: ") + what + " on rank " + std::to_string(rank_) +
                ", but the consumer is rank " + std::to_string(cfg_.consumer_rank));
}

void DataPool::publish_version(int64_t version) {
  require_consumer("publish_version");
  version_ = version;
  write_counter(kVersion, version);
}

std::optional<TakenTrajectory> DataPool::try_take() {
  require_consumer("take");
  for (;;) {
    std::optional<TakenTrajectory> t = take_visible();
    if (!t || t->version != kTombstoneVersion) return t;
  }
}

std::optional<TakenTrajectory> DataPool::take_visible() {
  const uint64_t end = std::min(head_ + w_, tail());
  if (end <= head_) return std::nullopt;
  // The state words of [H, end), in at most two runs of the ring.
  states_.resize(end - head_);
  for (uint64_t s = head_; s < end;) {
    const uint64_t run = std::min(end - s, n_ - s % n_);
    check(MPI_Get_accumulate(nullptr, 0, MPI_INT64_T, states_.data() + (s - head_),
                             static_cast<int>(run), MPI_INT64_T, cfg_.host_rank,
                             static_cast<MPI_Aint>(s % n_), static_cast<int>(run), MPI_INT64_T,
                             MPI_NO_OP, table_win_),
          "MPI_Get_accumulate (slot states)");
    s += run;
  }
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");

  uint64_t slot = end;
  for (uint64_t s = head_; s < end; ++s) {
    const int64_t w = states_[s - head_];
    if (!consumed_[s % n_] && state_slot(w) == s && state_kind(w) == kDone) {
      slot = s;
      break;
    }
  }
  if (slot == end) return std::nullopt;

  TakenTrajectory out;
  out.slot = slot;
  out.head = head_;
  out.producer = state_rank(states_[slot - head_]);
  int64_t meta[kMetaWords];
  check(MPI_Get(meta, kMetaWords, MPI_INT64_T, cfg_.host_rank,
                static_cast<MPI_Aint>(n_ + kMetaWords * (slot % n_)), kMetaWords, MPI_INT64_T,
                table_win_),
        "MPI_Get (slot meta)");
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
  out.version = meta[0];
  out.payload.resize(static_cast<size_t>(meta[2]));
  check(MPI_Get(out.payload.data(), static_cast<int>(meta[2]), MPI_BYTE, cfg_.host_rank,
                static_cast<MPI_Aint>(meta[1]), static_cast<int>(meta[2]), MPI_BYTE,
                payload_win_),
        "MPI_Get (payload)");
  check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");

  if (out.version != kTombstoneVersion) {
    out.staleness = version_ - out.version;
    out.verdict = cfg_.window.verdict(out.staleness);
    stats_.add(out.staleness, out.verdict);
  }

  consumed_[slot % n_] = 1;
  const uint64_t old_head = head_;
  while (consumed_[head_ % n_]) consumed_[head_++ % n_] = 0;
  if (head_ != old_head) write_counter(kHead, static_cast<int64_t>(head_));
  return out;
}

DataPoolState DataPool::snapshot() {
  require_consumer("snapshot");
  DataPoolState st;
  st.head = static_cast<int64_t>(head_);
  const uint64_t end = std::min(head_ + n_, tail());
  for (uint64_t s = head_; s < end; ++s) {
    if (consumed_[s % n_]) {
      st.consumed.push_back(static_cast<int64_t>(s));
      continue;
    }
    int64_t word = 0, dummy = 0;
    check(MPI_Fetch_and_op(&dummy, &word, MPI_INT64_T, cfg_.host_rank, static_cast<MPI_Aint>(s % n_),
                           MPI_NO_OP, table_win_),
          "MPI_Fetch_and_op (slot state)");
    check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
    if (state_slot(word) != s) continue;  // not started yet
    if (state_kind(word) == kSkip) {
      st.consumed.push_back(static_cast<int64_t>(s));
      continue;
    }
    if (state_kind(word) != kDone) continue;  // in flight: generated again after a resume
    int64_t meta[kMetaWords];
    check(MPI_Get(meta, kMetaWords, MPI_INT64_T, cfg_.host_rank,
                  static_cast<MPI_Aint>(n_ + kMetaWords * (s % n_)), kMetaWords, MPI_INT64_T, table_win_),
          "MPI_Get (slot meta)");
    check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
    if (meta[0] == kTombstoneVersion) {
      st.consumed.push_back(static_cast<int64_t>(s));
      continue;
    }
    std::vector<uint8_t> payload(static_cast<size_t>(meta[2]));
    check(MPI_Get(payload.data(), static_cast<int>(meta[2]), MPI_BYTE, cfg_.host_rank,
                  static_cast<MPI_Aint>(meta[1]), static_cast<int>(meta[2]), MPI_BYTE, payload_win_),
          "MPI_Get (payload)");
    check(MPI_Win_flush(cfg_.host_rank, payload_win_), "MPI_Win_flush");
    st.keep(static_cast<int64_t>(s), meta[0], payload);
  }
  return st;
}

std::string DataPool::describe_head() {
  require_consumer("describe_head");
  int64_t word = 0, dummy = 0;
  check(MPI_Fetch_and_op(&dummy, &word, MPI_INT64_T, cfg_.host_rank, static_cast<MPI_Aint>(head_ % n_),
                         MPI_NO_OP, table_win_),
        "MPI_Fetch_and_op (head state)");
  check(MPI_Win_flush(cfg_.host_rank, table_win_), "MPI_Win_flush");
  const std::string who =
      state_slot(word) == head_ && state_kind(word) == kStarted
          ? "producer rank " + std::to_string(state_rank(word)) + " started it and has not completed it"
      : head_ < tail() ? "it was submitted, but its producer has not started it"
                       : "no producer has submitted it";
  return "no DONE slot in [" + std::to_string(head_) + ", " + std::to_string(head_ + w_) + "); head slot " +
         std::to_string(head_) + ": " + who;
}

TakenTrajectory DataPool::take() {
  Stopwatch sw;
  for (;;) {
    if (auto t = try_take()) return std::move(*t);
    if (sw.seconds() > cfg_.deadline_s)
      throw Error("data pool: consumer rank " + std::to_string(rank_) + " waited " +
                  std::to_string(cfg_.deadline_s) + " s: " + describe_head());
    std::this_thread::yield();
  }
}

}  // namespace forge
