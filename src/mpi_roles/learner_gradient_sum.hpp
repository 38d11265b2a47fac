// The sum of the learners' gradients, in place, before each optimizer step
// (data parallelism, algo/policy_update.hpp): g := sum over learners of g.
// A backend whose memory the host cannot reduce directly provides its own
// collectives (Backend::make_collectives, bootstrapped over the learners'
// communicator: NCCL on cuda); otherwise MPI_Allreduce sums host memory.
// One learner: nothing.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "backend/backend.hpp"
#include "backend/collectives.hpp"

namespace forge {

class LearnerGradientSum {
 public:
  // Collective over learners.
  LearnerGradientSum(MPI_Comm learners, Backend& backend);
  ~LearnerGradientSum();
  LearnerGradientSum(const LearnerGradientSum&) = delete;
  LearnerGradientSum& operator=(const LearnerGradientSum&) = delete;

  // grads: n floats of the backend's memory.
  void operator()(float* grads, size_t n);

 private:
  MPI_Comm comm_;
  int size_ = 1;
  std::unique_ptr<DeviceCollectives> device_;  // null: MPI on host memory
};

// The bootstrap of a backend's collectives over an MPI communicator (its
// rank, size, and MPI_Bcast from rank 0).
CollectiveBootstrap mpi_bootstrap(MPI_Comm comm);

}  // namespace forge
