#include "mpi_roles/learner_gradient_sum.hpp"

#include <climits>

#include "core/error.hpp"
#include "mpi_roles/int_pieces.hpp"

namespace forge {

CollectiveBootstrap mpi_bootstrap(MPI_Comm comm) {
  CollectiveBootstrap b;
  MPI_Comm_rank(comm, &b.rank);
  MPI_Comm_size(comm, &b.size);
  b.broadcast_from_root = [comm](void* bytes, size_t n) {
    FORGE_CHECK(n <= static_cast<size_t>(INT_MAX), "bootstrap message too large");
    MPI_Bcast(bytes, static_cast<int>(n), MPI_BYTE, 0, comm);
  };
  return b;
}

LearnerGradientSum::LearnerGradientSum(MPI_Comm learners, Backend& backend) : comm_(learners) {
  MPI_Comm_size(comm_, &size_);
  if (size_ > 1) device_ = backend.make_collectives(mpi_bootstrap(comm_));
}

LearnerGradientSum::~LearnerGradientSum() = default;

void LearnerGradientSum::operator()(float* grads, size_t n) {
  if (size_ == 1) return;
  if (device_) {
    device_->all_reduce_sum(grads, n);
    return;
  }
  for_int_pieces(n, [&](size_t offset, int count) {
    MPI_Allreduce(MPI_IN_PLACE, grads + offset, count, MPI_FLOAT, MPI_SUM, comm_);
  }, kMpiPieceBytes / sizeof(float));
}

}  // namespace forge
