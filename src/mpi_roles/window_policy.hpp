// Windowed FIFO: admission and visibility of the data pool, without MPI.
//
// Slots are numbered 0, 1, 2, ... in submission order. N = slots in flight at
// most, W = visibility window, H = head = lowest slot not yet consumed,
// T = tail = next slot to hand out.
//
//   admission   a producer may start slot s only if s < H + N  (so T <= H + N)
//   visibility  the consumer may take only DONE slots s with H <= s < H + W
//   head        H advances over consumed slots (consumption inside the window
//               may be out of order; H moves only past a contiguous prefix)
//
// Policies: fifo (W = 1: wait for the head), windowed (1 <= W <= N),
// greedy (W = N: any finished slot in flight).
//
// Staleness of a trajectory = learner version at consumption - oldest policy
// version among its tokens. An optional hard cap drops or masks (and counts)
// trajectories whose staleness exceeds it.
//
// Staleness bound. Let the learner take B trajectories per step and publish
// version v after its v-th step; a producer stamps the version it reads after
// slot s was admitted. At admission H > s - N, so at least s - N + 1
// trajectories were consumed and the published version is at least
// (s - N + 1 - B) / B (one step may be in progress). When s is consumed, every
// other consumed slot lies below H + W <= s + W, so at most s + W - 1 were
// consumed before it and the learner's version is at most (s + W - 1) / B.
// Hence staleness <= floor((N + W - 2) / B) + 1 (staleness_bound below).
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace forge {

enum class WindowKind { kFifo, kWindowed, kGreedy };
enum class CapAction { kDrop, kMask };
// What the consumer does with one trajectory.
enum class Verdict { kTrain, kDrop, kMask };

std::string to_string(WindowKind k);
std::string to_string(CapAction a);
// "fifo" | "windowed" | "greedy"; "drop" | "mask". InputError otherwise.
WindowKind parse_window_kind(const std::string& s);
CapAction parse_cap_action(const std::string& s);

struct WindowConfig {
  WindowKind kind = WindowKind::kWindowed;
  uint64_t n_inflight = 64;  // N
  uint64_t window = 32;      // W, used by kWindowed only
  int64_t staleness_cap = -1;  // < 0: no cap
  CapAction cap_action = CapAction::kDrop;

  // The W in force: 1 (fifo), window (windowed), N (greedy).
  uint64_t effective_window() const;
  // InputError unless N >= 1 and 1 <= W <= N (windowed).
  void validate() const;
  // Train, or (staleness above the cap) drop or mask.
  Verdict verdict(int64_t staleness) const;
};

inline bool may_start(uint64_t slot, uint64_t head, uint64_t n) { return slot < head + n; }
inline bool in_window(uint64_t slot, uint64_t head, uint64_t w) {
  return slot >= head && slot < head + w;
}
// floor((N + W - 2) / B) + 1 with B trajectories per learner step (see top).
int64_t staleness_bound(uint64_t n, uint64_t w, uint64_t batch);

// The slot state machine of one pool in one process: the reference the MPI
// pool is tested against and the core of the discrete-event simulation.
class WindowScheduler {
 public:
  explicit WindowScheduler(const WindowConfig& cfg);

  uint64_t head() const { return head_; }
  uint64_t tail() const { return tail_; }
  uint64_t window() const { return w_; }
  uint64_t n_inflight() const { return n_; }
  bool can_start() const { return may_start(tail_, head_, n_); }
  // Hands out slot T (Error when !can_start()).
  uint64_t start();
  // Marks a started slot DONE (Error when it is not running).
  void finish(uint64_t slot);
  // Lowest DONE slot in [H, H+W), now consumed; H advances over consumed
  // slots. nullopt when no DONE slot is visible.
  std::optional<uint64_t> take();
  // Number of DONE slots, visible or not.
  size_t done_count() const { return done_.size(); }

 private:
  enum State : uint8_t { kFree, kRunning, kDone, kConsumed };
  State& at(uint64_t s) { return state_[s % n_]; }
  uint64_t n_, w_;
  uint64_t head_ = 0, tail_ = 0;
  std::vector<State> state_;  // slot s at s % N: only [H, H+N) is live
  std::set<uint64_t> done_;   // DONE, not yet consumed, ascending
};

// Staleness histogram and cap counters of one consumer.
class StalenessStats {
 public:
  void add(int64_t staleness, Verdict v);
  uint64_t count() const { return count_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t masked() const { return masked_; }
  double mean() const;
  int64_t max() const;
  // Smallest s with at least q of the mass at or below s, q in [0, 1].
  int64_t quantile(double q) const;

 private:
  std::vector<uint64_t> hist_;  // hist_[s] = trajectories with staleness s
  uint64_t count_ = 0, dropped_ = 0, masked_ = 0;
  double sum_ = 0;
};

}  // namespace forge
