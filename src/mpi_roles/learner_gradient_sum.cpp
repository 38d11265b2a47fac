#include "mpi_roles/learner_gradient_sum.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"
#ifdef FORGE_WITH_CUDA
#include "cuda/nccl_comm.hpp"
#endif

namespace forge {

#ifdef FORGE_WITH_CUDA
struct LearnerGradientSum::Nccl {
  cuda::NcclComm comm;
  explicit Nccl(MPI_Comm c) : comm(c) {}
};
#else
struct LearnerGradientSum::Nccl {};
#endif

LearnerGradientSum::LearnerGradientSum(MPI_Comm learners, const Backend& backend) : comm_(learners) {
  MPI_Comm_size(comm_, &size_);
  if (size_ == 1 || backend.name() == "cpu") return;
#ifdef FORGE_WITH_CUDA
  if (backend.name() == "cuda") {
    nccl_ = std::make_unique<Nccl>(comm_);
    return;
  }
#endif
  throw InputError("learner gradient sum: no all-reduce for backend '" + backend.name() + "'");
}

LearnerGradientSum::~LearnerGradientSum() = default;

void LearnerGradientSum::operator()(float* grads, size_t n) {
  if (size_ == 1) return;
#ifdef FORGE_WITH_CUDA
  if (nccl_) {
    nccl_->comm.all_reduce_sum(grads, n);
    return;
  }
#endif
  for (size_t done = 0; done < n;) {  // MPI counts are int
    const int count = static_cast<int>(std::min<size_t>(n - done, INT_MAX));
    MPI_Allreduce(MPI_IN_PLACE, grads + done, count, MPI_FLOAT, MPI_SUM, comm_);
    done += static_cast<size_t>(count);
  }
}

}  // namespace forge
