// NCCL among the ranks of a group, each on the GPU its CUDA backend bound
// (cudaSetDevice in make_cuda_backend): the cuda backend's DeviceCollectives
// (backend/collectives.hpp). Bootstrap through the caller's transport:
//   rank 0: id = ncclGetUniqueId();  peers.broadcast_from_root(id);
//   every rank: ncclCommInitRank(peers.size, id, peers.rank) on its device.
// all_reduce_sum and broadcast take device memory, wait for all work already
// queued on the device (the backend's stream included: cudaDeviceSynchronize),
// run on the communicator's own stream and return when it is done. While
// waiting they poll NCCL's asynchronous error: on one (a peer's connection
// broke) the communicator is aborted and they throw Error naming it; every
// later call throws too.
// Plain C++ (no CUDA headers), compiled in every CUDA build.
#pragma once
#include <cstddef>
#include <memory>

#include "backend/collectives.hpp"

namespace forge::cuda {

class NcclComm final : public DeviceCollectives {
 public:
  explicit NcclComm(const CollectiveBootstrap& peers);  // collective; Error with NCCL's reason
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  void all_reduce_sum(float* device_data, size_t n) override;
  void broadcast(float* device_data, size_t n, int root) override;

 private:
  void start(const char* what);   // refuses an aborted communicator; drains the device
  void finish(const char* what);  // waits for the stream, aborting on NCCL's asynchronous error
  struct State;
  State* state_;
};

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const CollectiveBootstrap& peers);

}  // namespace forge::cuda
