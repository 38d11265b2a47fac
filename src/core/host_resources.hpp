// What this process may count on from its node: the memory it may use (the
// smaller of the host's physical memory and a cgroup's limit, as a container
// or a Slurm job sets one) and its place among the launcher's processes on
// the node (Open MPI, MPICH/Hydra, Slurm's srun; 0 of 1 outside a launcher).
#pragma once
#include <cstdint>

namespace forge {

// Bytes: physical memory, or the cgroup's memory limit when lower
// (cgroup v2 memory.max, else v1 memory.limit_in_bytes).
uint64_t usable_host_memory();

// This process's index among the launcher's processes on its node.
int node_local_rank();
// How many of the launcher's processes run on this node (1 when unknown).
int node_local_size();

}  // namespace forge
