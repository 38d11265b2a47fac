// What this process may count on from its node: the memory it may use (the
// smaller of the host's physical memory and a cgroup's limit, as a container
// or a Slurm job sets one) and its place among the launcher's processes on
// the node (Open MPI, MPICH/Hydra, Slurm's srun; 0 of 1 outside a launcher).
#pragma once
#include <cstdint>
#include <string>

namespace forge {

// Bytes: physical memory, or the lowest memory limit of this process's
// cgroups and those above them when lower (cgroup v2 memory.max, v1
// memory.limit_in_bytes; the paths /proc/self/cgroup names).
uint64_t usable_host_memory();
uint64_t physical_host_memory();
// The lowest memory limit of the cgroups `proc_self_cgroup` (the text of
// /proc/self/cgroup) names and of those above them, read under `root`
// (/sys/fs/cgroup; v1's under root/memory); 0 for none.
uint64_t cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& root);

// This process's index among the launcher's processes on its node.
int node_local_rank();
// How many of the launcher's processes run on this node (1 when unknown):
// Open MPI's or MPICH's count, else Slurm's SLURM_STEP_TASKS_PER_NODE at
// SLURM_NODEID.
int node_local_size();
// The tasks on node `node` of a Slurm tasks-per-node list ("2(x3),1");
// 0 when the list does not say.
int slurm_tasks_on_node(const std::string& per_node, int node);

}  // namespace forge
