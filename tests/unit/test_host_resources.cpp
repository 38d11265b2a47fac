// What a process may count on from its node (core/host_resources.hpp): its
// usable memory (within physical memory, the lowest limit of its cgroups on
// the way up), and its local rank and its node's task count from the
// launcher, Slurm's tasks-per-node list included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

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
  EXPECT_GT(usable_host_memory(), 0u);
  EXPECT_LE(usable_host_memory(), physical_host_memory());
}

// A job's limit sits in its own cgroup, below the node's (Slurm's
// task/cgroup): the lowest on the way up counts, "max" is none, v1 and v2.
TEST(HostResources, TheLowestCgroupLimitOnTheWayUpCounts) {
  const std::string root = ::testing::TempDir() + "forge_cgroup_" + std::to_string(getpid());
  const auto write = [](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text << "\n";
  };
  write(root + "/memory.max", "max");
  write(root + "/slurm/memory.max", "8000000000");
  write(root + "/slurm/job_7/memory.max", "max");
  write(root + "/slurm/job_7/step_0/memory.max", "3000000000");
  EXPECT_EQ(cgroup_memory_limit("0::/slurm/job_7/step_0\n", root), 3000000000u);
  EXPECT_EQ(cgroup_memory_limit("0::/slurm/job_7\n", root), 8000000000u);
  EXPECT_EQ(cgroup_memory_limit("0::/\n", root), 0u);  // "max": none
  write(root + "/memory/lab/memory.limit_in_bytes", "5000000000");
  write(root + "/memory/memory.limit_in_bytes", "9223372036854771712");
  EXPECT_EQ(cgroup_memory_limit("4:memory:/lab\n1:cpu:/\n", root), 5000000000u);
  EXPECT_EQ(cgroup_memory_limit("4:cpuacct,memory:/lab\n0::/slurm/job_7\n", root), 5000000000u);
  EXPECT_EQ(cgroup_memory_limit("garbage\n", root), 0u);
  std::filesystem::remove_all(root);
}

TEST(HostResources, TheLocalRankComesFromTheLauncher) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr), mpich("MPI_LOCALRANKID", nullptr),
      slurm("SLURM_LOCALID", nullptr);
  EXPECT_EQ(node_local_rank(), 0);
  {
    ScopedEnv id("SLURM_LOCALID", "3");
    EXPECT_EQ(node_local_rank(), 3);
    ScopedEnv hydra("MPI_LOCALRANKID", "2");
    EXPECT_EQ(node_local_rank(), 2);  // MPICH's before Slurm's
    ScopedEnv open_mpi("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    EXPECT_EQ(node_local_rank(), 1);
  }
}

}  // namespace
}  // namespace forge
