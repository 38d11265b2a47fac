// Windowed FIFO admission and visibility; see window_policy.hpp.
#include "mpi_roles/window_policy.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace forge {

std::string to_string(WindowKind k) {
  switch (k) {
    case WindowKind::kFifo: return "fifo";
    case WindowKind::kWindowed: return "windowed";
    case WindowKind::kGreedy: return "greedy";
  }
  return "?";
}

std::string to_string(CapAction a) { return a == CapAction::kDrop ? "drop" : "mask"; }

WindowKind parse_window_kind(const std::string& s) {
  if (s == "fifo") return WindowKind::kFifo;
  if (s == "windowed") return WindowKind::kWindowed;
  if (s == "greedy") return WindowKind::kGreedy;
  throw InputError("window policy '" + s + "': expected fifo, windowed or greedy");
}

CapAction parse_cap_action(const std::string& s) {
  if (s == "drop") return CapAction::kDrop;
  if (s == "mask") return CapAction::kMask;
  throw InputError("staleness cap action '" + s + "': expected drop or mask");
}

uint64_t WindowConfig::effective_window() const {
  switch (kind) {
    case WindowKind::kFifo: return 1;
    case WindowKind::kWindowed: return window;
    case WindowKind::kGreedy: return n_inflight;
  }
  return 1;
}

void WindowConfig::validate() const {
  if (n_inflight < 1) throw InputError("data pool: slots in flight N must be >= 1");
  if (kind == WindowKind::kWindowed && (window < 1 || window > n_inflight))
    throw InputError("data pool: window W = " + std::to_string(window) +
                     " must lie in [1, N = " + std::to_string(n_inflight) + "]");
}

Verdict WindowConfig::verdict(int64_t staleness) const {
  if (staleness_cap < 0 || staleness <= staleness_cap) return Verdict::kTrain;
  return cap_action == CapAction::kDrop ? Verdict::kDrop : Verdict::kMask;
}

int64_t staleness_bound(uint64_t n, uint64_t w, uint64_t batch) {
  FORGE_CHECK(n >= 1 && w >= 1 && batch >= 1, "N, W and B must be positive");
  return static_cast<int64_t>((n + w - 2) / batch) + 1;
}

WindowScheduler::WindowScheduler(const WindowConfig& cfg)
    : n_(cfg.n_inflight), w_(cfg.effective_window()) {
  cfg.validate();
  state_.assign(n_, kFree);
}

uint64_t WindowScheduler::start() {
  FORGE_CHECK(can_start(), "slot " + std::to_string(tail_) + " is beyond H + N = " +
                               std::to_string(head_ + n_));
  at(tail_) = kRunning;
  return tail_++;
}

void WindowScheduler::finish(uint64_t slot) {
  FORGE_CHECK(slot >= head_ && slot < tail_ && at(slot) == kRunning,
              "slot " + std::to_string(slot) + " is not running");
  at(slot) = kDone;
  done_.insert(slot);
}

std::optional<uint64_t> WindowScheduler::take() {
  if (done_.empty() || !in_window(*done_.begin(), head_, w_)) return std::nullopt;
  const uint64_t s = *done_.begin();
  done_.erase(done_.begin());
  at(s) = kConsumed;
  while (head_ < tail_ && at(head_) == kConsumed) at(head_++) = kFree;
  return s;
}

void StalenessStats::add(int64_t staleness, Verdict v) {
  FORGE_CHECK(staleness >= 0, "negative staleness " + std::to_string(staleness) +
                                  ": a trajectory newer than the learner");
  if (static_cast<size_t>(staleness) >= hist_.size()) hist_.resize(staleness + 1, 0);
  ++hist_[staleness];
  ++count_;
  sum_ += static_cast<double>(staleness);
  if (v == Verdict::kDrop) ++dropped_;
  if (v == Verdict::kMask) ++masked_;
}

double StalenessStats::mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0.0; }

int64_t StalenessStats::max() const { return static_cast<int64_t>(hist_.size()) - 1; }

int64_t StalenessStats::quantile(double q) const {
  if (count_ == 0) return -1;
  const double need = std::clamp(q, 0.0, 1.0) * static_cast<double>(count_);
  uint64_t acc = 0;
  for (size_t s = 0; s < hist_.size(); ++s) {
    acc += hist_[s];
    if (static_cast<double>(acc) >= need && acc > 0) return static_cast<int64_t>(s);
  }
  return max();
}

}  // namespace forge
