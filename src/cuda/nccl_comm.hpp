// NCCL among the ranks of an MPI communicator, each on the GPU its CUDA
// backend bound (cudaSetDevice in make_cuda_backend). Bootstrap over MPI:
//   rank 0: id = ncclGetUniqueId();  MPI_Bcast(id) over comm;
//   every rank: ncclCommInitRank(size(comm), id, rank(comm)) on its device.
// all_reduce_sum: x := sum over ranks of x (FP32, in place); broadcast:
// x := x of root. Both take device memory, wait for all work already queued
// on the device (the backend's stream included: cudaDeviceSynchronize), run
// on the communicator's own stream and return when it is done.
// Plain C++ (no CUDA headers), compiled in every CUDA build.
#pragma once
#include <mpi.h>

#include <cstddef>

namespace forge::cuda {

class NcclComm {
 public:
  explicit NcclComm(MPI_Comm comm);  // collective over comm; Error with NCCL's reason
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  void all_reduce_sum(float* device_data, size_t n);
  void broadcast(float* device_data, size_t n, int root);

 private:
  struct State;
  State* state_;
};

}  // namespace forge::cuda
