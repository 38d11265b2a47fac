// Page-locked host buffers for a device backend's transfers. The driver
// moves a pageable buffer through pinned staging of its own, a piece at a
// time (on an H200 node a 824 MB download took 55 ms that way, about 15
// GB/s); a pinned one goes by DMA at the host link's rate. HostPins pins a
// buffer the first time it is named (Backend::pin_host_memory) and unpins
// every buffer it pinned when it goes away, so the buffers must outlive it.
// On a backend whose memory is the host's (cpu) it does nothing. Used for
// the weights a learner publishes and a rollout rank loads, each version.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/backend.hpp"

namespace forge {

class HostPins {
 public:
  explicit HostPins(Backend& backend) : backend_(backend) {}
  ~HostPins() {
    for (void* p : pinned_) backend_.unpin_host_memory(p);
  }
  HostPins(const HostPins&) = delete;
  HostPins& operator=(const HostPins&) = delete;

  // Pins [p, p + bytes) the first time p is named; whether it is pinned. A
  // refused buffer is not tried again (the backend said why, once).
  bool pin(void* p, size_t bytes) {
    if (p == nullptr || bytes == 0 || backend_.host_memory()) return false;
    if (std::find(pinned_.begin(), pinned_.end(), p) != pinned_.end()) return true;
    if (std::find(refused_.begin(), refused_.end(), p) != refused_.end()) return false;
    const bool ok = backend_.pin_host_memory(p, bytes);
    (ok ? pinned_ : refused_).push_back(p);
    return ok;
  }
  size_t pinned() const { return pinned_.size(); }

 private:
  Backend& backend_;
  std::vector<void*> pinned_, refused_;
};

}  // namespace forge
