// NcclComm: see nccl_comm.hpp.
#include "backend/cuda/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/error.hpp"

namespace forge::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("NCCL communicator: ") + what + ": " + cudaGetErrorString(e));
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NCCL communicator: ") + what + ": " + ncclGetErrorString(r));
}

}  // namespace

struct NcclComm::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

NcclComm::NcclComm(const CollectiveBootstrap& peers) : state_(new State) {
  try {
    ncclUniqueId id{};
    if (peers.rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    peers.broadcast_from_root(&id, sizeof(id));
    check(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(ncclCommInitRank(&state_->comm, peers.size, id, peers.rank), "ncclCommInitRank");
  } catch (...) {
    if (state_->stream) cudaStreamDestroy(state_->stream);
    delete state_;
    throw;
  }
}

NcclComm::~NcclComm() {
  ncclCommDestroy(state_->comm);
  cudaStreamDestroy(state_->stream);
  delete state_;
}

void NcclComm::all_reduce_sum(float* x, size_t n) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, state_->comm, state_->stream), "ncclAllReduce");
  check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

void NcclComm::broadcast(float* x, size_t n, int root) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(ncclBroadcast(x, x, n, ncclFloat32, root, state_->comm, state_->stream), "ncclBroadcast");
  check(cudaStreamSynchronize(state_->stream), "cudaStreamSynchronize");
}

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const CollectiveBootstrap& peers) {
  return std::make_unique<NcclComm>(peers);
}

}  // namespace forge::cuda
