// What a process may count on from its node (core/host_resources.hpp): its
// usable memory within physical memory, and its node's task count from the
// launcher, Slurm's tasks-per-node list included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "core/host_resources.hpp"
#include "core/scoped_env.hpp"

namespace forge {
namespace {

TEST(HostResources, SlurmTasksPerNodeListsAreRead) {
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), 0);  // no such node
  EXPECT_EQ(slurm_tasks_on_node("", 0), 0);
  EXPECT_EQ(slurm_tasks_on_node("x", 0), 0);
}

TEST(HostResources, TheNodesTaskCountComesFromTheLauncher) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_SIZE", nullptr), mpich("MPI_LOCALNRANKS", nullptr);
  {
    ScopedEnv per_node("SLURM_STEP_TASKS_PER_NODE", "3(x2),5"), node("SLURM_NODEID", "2");
    EXPECT_EQ(node_local_size(), 5);  // srun without Open MPI's own count
    ScopedEnv open_mpi("OMPI_COMM_WORLD_LOCAL_SIZE", "7");
    EXPECT_EQ(node_local_size(), 7);
  }
  ScopedEnv per_node("SLURM_STEP_TASKS_PER_NODE", nullptr);
  EXPECT_EQ(node_local_size(), 1);  // started alone
}

TEST(HostResources, UsableMemoryIsWithinPhysicalMemory) {
  const uint64_t physical = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(usable_host_memory(), 0u);
  EXPECT_LE(usable_host_memory(), physical);
}

}  // namespace
}  // namespace forge
