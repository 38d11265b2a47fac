// Windowed FIFO: admission and visibility of the data pool, without MPI.
//
// Slots are numbered 0, 1, 2, ... in the order generation starts them (the
// generation queue). N = generations running at once at most, M = the
// finished, not yet consumed trajectories at which admission pauses (running
// ones still finish, so up to N + M - 1 are held), W = visibility window,
// H = head = lowest slot not yet consumed, T = tail = next slot.
//
//   admission   a producer may start a slot when fewer than N are running and
//               fewer than M finished ones wait (occupancy, not a ring: a
//               straggler at H holds H, not generation)
//   visibility  the consumer may take only DONE slots s with H <= s < H + W,
//               the lowest first
//   head        H advances over consumed slots (consumption inside the window
//               may be out of order; H moves only past a contiguous prefix)
//
// Policies: fifo (W = 1: wait for the head), windowed (W >= 1), greedy (any
// finished slot; no window).
//
// Memory. Admission checks running < N and finished < M, so running +
// finished <= N + M - 1 at all times (a start adds one when both are below
// their bounds; a finish moves one from running to finished; a take removes
// one): the pool's payload memory is N + M cells.
//
// Staleness of a trajectory = learner version at consumption - oldest policy
// version among its tokens. An optional hard cap drops or masks (and counts)
// trajectories whose staleness exceeds it: the guarantee for greedy.
//
// Staleness bound (fifo, windowed). Let the learner take B trajectories per
// step and publish version v after its v-th step, and a producer stamp the
// version it reads after slot s started. Every slot below s started before s,
// so when s starts, the slots below s that are not consumed hold cells: at
// most N + M - 1 besides s (the MPI pool's free list guarantees N + M cells
// even when admissions race). Every slot consumed before s is one of those
// or lies in (s, H + W) with H <= s: at most W - 1 of them. So at most
// K = N + M + W - 2 trajectories are trained between s's start and its
// consumption, the version moves by at most floor(K / B) + 1 (one step may be
// in progress at the start), and
//     staleness <= floor((N + M + W - 2) / B) + 1        (staleness_bound).
// Under forge train the stamp is the oldest version among the group's tokens,
// and the tokens keep to the bound: each generation request of s carries the
// version read when s started (GenerationRequest::min_version), and a rollout
// rank holds it until it has loaded those weights (held_requests.hpp).
// After a resume, the checkpoint's held groups are trained before the pool's;
// they count as finished ones until taken (DataPool::take_held), so the
// bound holds for slots started meanwhile too.
// Greedy has no such bound: slots started after s may be trained while s
// runs, so its staleness grows with the longest episode; only the cap and the
// episode deadline (pool.episode_deadline_s) bound it.
#pragma once
#include <cstdint>
#include <limits>
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

inline constexpr uint64_t kUnboundedWindow = std::numeric_limits<uint64_t>::max();

struct WindowConfig {
  WindowKind kind = WindowKind::kWindowed;
  uint64_t n_running = 64;   // N: generations running at once at most
  uint64_t memory = 64;      // M: admission pauses while M finished, unconsumed ones wait
  uint64_t window = 32;      // W, used by kWindowed only
  int64_t staleness_cap = -1;  // < 0: no cap
  CapAction cap_action = CapAction::kDrop;

  // The W in force: 1 (fifo), window (windowed), kUnboundedWindow (greedy).
  uint64_t effective_window() const;
  // Payload cells the pool needs: N + M.
  uint64_t cells() const { return n_running + memory; }
  // InputError unless N >= 1, M >= 1 and W >= 1 (windowed).
  void validate() const;
  // Train, or (staleness above the cap) drop or mask.
  Verdict verdict(int64_t staleness) const;
};

inline bool in_window(uint64_t slot, uint64_t head, uint64_t w) { return slot >= head && slot - head < w; }
// floor((N + M + W - 2) / B) + 1 for fifo and windowed (see top); -1 for
// greedy, which has none.
int64_t staleness_bound(const WindowConfig& cfg, uint64_t batch);

// The slot state machine of one pool in one process: the reference the MPI
// pool is tested against and the core of the discrete-event simulation.
class WindowScheduler {
 public:
  explicit WindowScheduler(const WindowConfig& cfg);

  uint64_t head() const { return head_; }
  uint64_t tail() const { return tail_; }
  uint64_t window() const { return w_; }
  uint64_t running() const { return running_slots_.size(); }
  // DONE, not yet consumed.
  uint64_t finished() const { return done_.size(); }
  bool can_start() const { return running() < cfg_.n_running && done_.size() < cfg_.memory; }
  // Hands out slot T (Error when !can_start()).
  uint64_t start();
  // Marks a running slot DONE (Error when it is not running).
  void finish(uint64_t slot);
  // Lowest DONE slot in [H, H+W), now consumed; H advances over consumed
  // slots. nullopt when no DONE slot is visible.
  std::optional<uint64_t> take();

 private:
  WindowConfig cfg_;
  uint64_t w_;
  uint64_t head_ = 0, tail_ = 0;
  std::set<uint64_t> running_slots_;  // started, not finished
  std::set<uint64_t> done_;           // DONE, not consumed, ascending
  std::set<uint64_t> consumed_;       // consumed slots above H
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
