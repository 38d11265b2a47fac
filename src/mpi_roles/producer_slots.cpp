#include "mpi_roles/producer_slots.hpp"

#include "core/error.hpp"

namespace forge {

std::vector<StartedSlot> ProducerSlots::admit() {
  std::vector<StartedSlot> started;
  while (static_cast<int>(held_.size()) < capacity_) {
    const std::optional<uint64_t> s = pool_.try_start();
    if (!s) break;
    held_.insert(*s);
    started.push_back({*s, static_cast<int32_t>(pool_.published_version())});
  }
  return started;
}

void ProducerSlots::done(uint64_t slot) {
  FORGE_CHECK(held_.erase(slot) == 1, "ProducerSlots::done for a slot not started here");
}

}  // namespace forge
