// The data-pool slots a producer rank (an environment or gateway rank) plays
// at once: at most `capacity`, each started through the pool's admission
// (fewer than N running and fewer than M finished, data_pool.hpp) and given
// back with done() once it is complete in the pool. Each started slot comes
// with the pool's published version read after its start: the oldest
// weights its generation may use (GenerationRequest::min_version), which
// the staleness bound counts from (window_policy.hpp).
#pragma once
#include <cstdint>
#include <set>
#include <vector>

#include "mpi_roles/data_pool.hpp"

namespace forge {

struct StartedSlot {
  uint64_t slot = 0;
  int32_t min_version = 0;
};

class ProducerSlots {
 public:
  ProducerSlots(DataPool& pool, int capacity) : pool_(pool), capacity_(capacity) {}

  // Starts slots while fewer than `capacity` are held and the pool admits
  // them; returns the slots started now, in start order.
  std::vector<StartedSlot> admit();
  // Slot s (started here) is complete in the pool: its place is free.
  void done(uint64_t slot);

 private:
  DataPool& pool_;
  int capacity_;
  std::set<uint64_t> held_;
};

}  // namespace forge
