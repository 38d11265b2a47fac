// The sum of the learners' gradients, in place, before each optimizer step
// (data parallelism, algo/policy_update.hpp): g := sum over learners of g.
// With the cuda backend the gradients stay in device memory and NCCL sums
// them (cuda/nccl_comm.hpp, bootstrapped over the learners' communicator);
// with the cpu backend MPI_Allreduce sums host memory. One learner: nothing.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <memory>

#include "model/backend.hpp"

namespace forge {

class LearnerGradientSum {
 public:
  // Collective over learners. InputError for a backend with no all-reduce.
  LearnerGradientSum(MPI_Comm learners, const Backend& backend);
  ~LearnerGradientSum();
  LearnerGradientSum(const LearnerGradientSum&) = delete;
  LearnerGradientSum& operator=(const LearnerGradientSum&) = delete;

  // grads: n floats of the backend's memory.
  void operator()(float* grads, size_t n);

 private:
  MPI_Comm comm_;
  int size_ = 1;
  struct Nccl;  // the NCCL communicator (cuda backend)
  std::unique_ptr<Nccl> nccl_;
};

}  // namespace forge
