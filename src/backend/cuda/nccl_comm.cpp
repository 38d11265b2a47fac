// NcclComm: see nccl_comm.hpp.
#include "backend/cuda/nccl_comm.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

// ncclGetLastError (2.13) and ncclInProgress (2.14), polled while waiting.
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the CUDA backend needs NCCL 2.14 or newer (set FORGE_NCCL_INCLUDE and FORGE_NCCL_LIB to one)"
#endif

#include <chrono>
#include <string>
#include <thread>

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
    const ncclResult_t init = ncclCommInitRank(&state_->comm, peers.size, id, peers.rank);
    // NCCL takes one device per rank: learners sharing a GPU (more learners
    // on a node than it has GPUs; the backend binds local rank mod GPUs) are
    // its usual "invalid usage" here, which says nothing of it.
    if (init == ncclInvalidUsage)
      throw Error(std::string("NCCL communicator: ncclCommInitRank: ") + ncclGetErrorString(init) + " (" +
                  ncclGetLastError(nullptr) +
                  "): NCCL needs a GPU of its own for every learner rank; run at most as many learners on a node "
                  "as it has GPUs");
    check(init, "ncclCommInitRank");
  } catch (...) {
    if (state_->stream) cudaStreamDestroy(state_->stream);
    delete state_;
    throw;
  }
}

NcclComm::~NcclComm() {
  if (state_->comm) ncclCommDestroy(state_->comm);
  cudaStreamDestroy(state_->stream);
  delete state_;
}

void NcclComm::start(const char* what) {
  if (!state_->comm)
    throw Error(std::string("NCCL communicator: ") + what + ": the communicator was aborted by an earlier failure");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// Polls the stream and NCCL's asynchronous error instead of blocking in
// cudaStreamSynchronize: a peer whose connection broke (a dead process on
// a network transport) makes NCCL's kernels wait forever, and only the
// asynchronous error tells. Then the communicator is aborted (its kernels
// stop) and the error names the operation. A peer alive but stuck raises
// no error: the learner's watched wait ends the job after mpi.deadline_s.
// Past the first polls (a short collective ends within them) it sleeps
// 100 us between polls: a wait on a slow peer does not hold a CPU core.
void NcclComm::finish(const char* what) {
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaStreamQuery(state_->stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) {
      // A CUDA fault mid-collective: abort too (ncclCommDestroy in the
      // destructor would wait for peers still inside the collective).
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      check(e, what);
    }
    ncclResult_t async = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(state_->comm, &async);
    if (asked != ncclSuccess) {  // the collective may still run: abort, as above
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      check(asked, "ncclCommGetAsyncError");
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      const char* detail = ncclGetLastError(state_->comm);
      std::string reason = ncclGetErrorString(async);
      if (detail && *detail) reason += std::string(" (") + detail + ")";
      ncclCommAbort(state_->comm);
      state_->comm = nullptr;
      throw Error(std::string("NCCL communicator: ") + what + " failed on a peer's side: " + reason +
                  "; the communicator is aborted");
    }
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclComm::all_reduce_sum(float* x, size_t n) {
  start("ncclAllReduce");
  check(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, state_->comm, state_->stream), "ncclAllReduce");
  finish("ncclAllReduce");
}

void NcclComm::broadcast(float* x, size_t n, int root) {
  start("ncclBroadcast");
  check(ncclBroadcast(x, x, n, ncclFloat32, root, state_->comm, state_->stream), "ncclBroadcast");
  finish("ncclBroadcast");
}

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const CollectiveBootstrap& peers) {
  return std::make_unique<NcclComm>(peers);
}

}  // namespace forge::cuda
