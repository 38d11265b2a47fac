// Collective operations on a backend's memory among the ranks of a group
// (the learners' gradient sum, a weight broadcast), for backends whose memory
// the host transport cannot read directly (device memory: NCCL on cuda).
//
//   all_reduce_sum(x, n)   x := sum over ranks of x (FP32, in place)
//   broadcast(x, n, root)  x := x of rank root
// Both wait for the work the backend has queued, and return when the result
// is in place. Created by Backend::make_collectives, collectively over the
// group, from a CollectiveBootstrap: the caller's rank and size and a byte
// broadcast from rank 0 over its own transport (MPI), which the backend uses
// to hand its unique id to the others. This header names no transport.
#pragma once
#include <cstddef>
#include <functional>

namespace forge {

struct CollectiveBootstrap {
  int rank = 0;
  int size = 1;
  // Makes bytes[0, n) of every rank equal to rank 0's; collective.
  std::function<void(void* bytes, size_t n)> broadcast_from_root;
};

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void broadcast(float* data, size_t n, int root) = 0;
};

}  // namespace forge
