#include "mpi_roles/slot_tickets.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace forge {

std::vector<uint64_t> SlotTickets::admit() {
  while (static_cast<int>(held_.size()) < capacity_) held_.push_back({pool_.submit(), false});
  std::vector<uint64_t> admitted;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->admitted) {
      ++it;
      continue;
    }
    const Admission a = pool_.try_admit(it->slot);
    if (a == Admission::kSkip) {
      it = held_.erase(it);
      continue;
    }
    if (a == Admission::kStart) {
      it->admitted = true;
      admitted.push_back(it->slot);
    }
    ++it;
  }
  return admitted;
}

void SlotTickets::done(uint64_t slot) {
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const Ticket& t) { return t.slot == slot; });
  FORGE_CHECK(it != held_.end() && it->admitted, "SlotTickets::done for a slot not admitted here");
  held_.erase(it);
}

}  // namespace forge
