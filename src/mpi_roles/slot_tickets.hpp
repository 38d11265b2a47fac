// The data-pool tickets a producer rank holds (environment and gateway
// ranks): at most `capacity` slots taken with submit(), in submission order.
// A ticket waits for admission (s < H + N); once admitted its holder must
// start and complete the slot, then give the ticket back with done(). A slot
// that a resumed pool already holds (Admission::kSkip) was completed as a
// tombstone by try_admit and is dropped here.
#pragma once
#include <cstdint>
#include <vector>

#include "mpi_roles/data_pool.hpp"

namespace forge {

class SlotTickets {
 public:
  SlotTickets(DataPool& pool, int capacity) : pool_(pool), capacity_(capacity) {}

  // Takes tickets up to capacity and asks admission for the waiting ones;
  // returns the slots admitted now, in submission order.
  std::vector<uint64_t> admit();
  // Slot s (admitted) is complete in the pool: its ticket is free.
  void done(uint64_t slot);

 private:
  struct Ticket {
    uint64_t slot = 0;
    bool admitted = false;
  };
  DataPool& pool_;
  int capacity_;
  std::vector<Ticket> held_;
};

}  // namespace forge
