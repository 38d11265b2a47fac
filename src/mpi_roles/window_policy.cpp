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
    case WindowKind::kGreedy: return kUnboundedWindow;
  }
  return 1;
}

void WindowConfig::validate() const {
  if (n_running < 1) throw InputError("data pool: running generations N must be >= 1");
  if (memory < 1) throw InputError("data pool: finished trajectories held M must be >= 1");
  if (kind == WindowKind::kWindowed && window < 1)
    throw InputError("data pool: window W = " + std::to_string(window) + " must be >= 1");
}

Verdict WindowConfig::verdict(int64_t staleness) const {
  if (staleness_cap < 0 || staleness <= staleness_cap) return Verdict::kTrain;
  return cap_action == CapAction::kDrop ? Verdict::kDrop : Verdict::kMask;
}

int64_t staleness_bound(const WindowConfig& cfg, uint64_t batch) {
  FORGE_CHECK(batch >= 1, "B must be positive");
  if (cfg.kind == WindowKind::kGreedy) return -1;
  const uint64_t k = cfg.n_running + cfg.memory + cfg.effective_window() - 2;
  return static_cast<int64_t>(k / batch) + 1;
}

WindowScheduler::WindowScheduler(const WindowConfig& cfg) : cfg_(cfg), w_(cfg.effective_window()) {
  cfg.validate();
}

uint64_t WindowScheduler::start() {
  FORGE_CHECK(can_start(), "no admission: " + std::to_string(running()) + " running of N = " +
                               std::to_string(cfg_.n_running) + ", " + std::to_string(done_.size()) +
                               " finished of M = " + std::to_string(cfg_.memory));
  running_slots_.insert(tail_);
  return tail_++;
}

void WindowScheduler::finish(uint64_t slot) {
  FORGE_CHECK(running_slots_.erase(slot) == 1, "slot " + std::to_string(slot) + " is not running");
  done_.insert(slot);
}

std::optional<uint64_t> WindowScheduler::take() {
  if (done_.empty() || !in_window(*done_.begin(), head_, w_)) return std::nullopt;
  const uint64_t s = *done_.begin();
  done_.erase(done_.begin());
  consumed_.insert(s);
  while (!consumed_.empty() && *consumed_.begin() == head_) {
    consumed_.erase(consumed_.begin());
    ++head_;
  }
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
