// Generation requests a rollout rank holds until it has loaded the weights
// they need.
//
// A producer (an environment or gateway rank) reads the pool's published
// version V after its slot starts and sends it with each of the slot's
// requests (GenerationRequest::min_version). The staleness bound
// (window_policy.hpp) counts from V, so every token of the slot must come
// from weights of version V or newer. The learner publishes the pool's
// version just before the weights of that version, and a rollout rank loads
// new weights between its engine steps, so a request can reach a rank that
// still serves V - 1: the rank holds it here and submits it once it has
// loaded V (release). A cancel of a held request removes it (cancel) and the
// rank answers it at once.
#pragma once
#include <cstdint>
#include <vector>

#include "core/timer.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

class HeldRequests {
 public:
  void hold(GenerationRequest request);
  // The held requests that weights of `version` may serve, in arrival
  // order; they leave the hold.
  std::vector<GenerationRequest> release(int version);
  // Removes held request `id`; false when it is not held.
  bool cancel(uint64_t id);
  size_t size() const { return held_.size(); }

  int64_t total_held() const { return total_; }          // requests ever held
  double longest_hold_s() const { return longest_s_; }  // among those released

 private:
  struct Held {
    GenerationRequest request;
    Stopwatch since;
  };
  std::vector<Held> held_;
  int64_t total_ = 0;
  double longest_s_ = 0;
};

}  // namespace forge
