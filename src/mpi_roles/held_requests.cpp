#include "mpi_roles/held_requests.hpp"

#include <algorithm>
#include <utility>

namespace forge {

void HeldRequests::hold(GenerationRequest request) {
  held_.push_back({std::move(request), Stopwatch()});
  ++total_;
}

std::vector<GenerationRequest> HeldRequests::release(int version) {
  std::vector<GenerationRequest> ready;
  std::vector<Held> still;
  for (Held& h : held_) {
    if (h.request.min_version <= version) {
      longest_s_ = std::max(longest_s_, h.since.seconds());
      ready.push_back(std::move(h.request));
    } else {
      still.push_back(std::move(h));
    }
  }
  held_ = std::move(still);
  return ready;
}

bool HeldRequests::cancel(uint64_t id) {
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.request.id == id; });
  if (it == held_.end()) return false;
  held_.erase(it);
  return true;
}

}  // namespace forge
