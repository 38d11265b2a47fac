// The data-pool slots a producer rank (an environment or gateway rank) plays
// at once: at most `capacity`, each started through the pool's admission
// (fewer than N running and fewer than M finished, data_pool.hpp) and given
// back with done() once it is complete in the pool.
#pragma once
#include <cstdint>
#include <set>
#include <vector>

#include "mpi_roles/data_pool.hpp"

namespace forge {

class ProducerSlots {
 public:
  ProducerSlots(DataPool& pool, int capacity) : pool_(pool), capacity_(capacity) {}

  // Starts slots while fewer than `capacity` are held and the pool admits
  // them; returns the slots started now, in start order.
  std::vector<uint64_t> admit();
  // Slot s (started here) is complete in the pool: its place is free.
  void done(uint64_t slot);

 private:
  DataPool& pool_;
  int capacity_;
  std::set<uint64_t> held_;
};

}  // namespace forge
