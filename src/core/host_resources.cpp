#include "core/host_resources.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

namespace forge {
namespace {

// The first of the variables that is set, as a number; `fallback` if none.
int first_env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

// A cgroup limit file's bytes; 0 for "max", an absent file or no number.
uint64_t limit_in(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::strtoull(word.c_str(), nullptr, 10);
}

// The lowest limit in `file` of the cgroup `path` under `root` and of the
// cgroups above it (a job's cgroup sits below its node's); 0 for none.
uint64_t lowest_limit(const std::string& root, std::string path, const char* file) {
  uint64_t lowest = 0;
  for (;;) {
    if (const uint64_t limit = limit_in(root + path + (path == "/" ? "" : "/") + file); limit > 0)
      lowest = lowest == 0 ? limit : std::min(lowest, limit);
    if (path == "/" || path.empty()) return lowest;
    const size_t slash = path.find_last_of('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
}

}  // namespace

uint64_t physical_host_memory() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& root) {
  // "0::/path" of v2, "N:...memory...:/path" of v1.
  uint64_t lowest = 0;
  std::istringstream in(proc_self_cgroup);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",", path = line.substr(b + 1);
    uint64_t limit = 0;
    if (line.compare(0, a, "0") == 0 && controllers == ",,")
      limit = lowest_limit(root, path, "memory.max");
    else if (controllers.find(",memory,") != std::string::npos)
      limit = lowest_limit(root + "/memory", path, "memory.limit_in_bytes");
    if (limit > 0) lowest = lowest == 0 ? limit : std::min(lowest, limit);
  }
  return lowest;
}

uint64_t usable_host_memory() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  const uint64_t limit = cgroup_memory_limit(text.str(), "/sys/fs/cgroup");
  return limit > 0 ? std::min(physical_host_memory(), limit) : physical_host_memory();
}

int node_local_rank() {
  return std::max(0, first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0));
}

int slurm_tasks_on_node(const std::string& per_node, int node) {
  // "2(x3),1": 2 tasks on each of nodes 0-2, 1 on node 3.
  std::istringstream items(per_node);
  int first = 0;
  for (std::string item; std::getline(items, item, ',');) {
    const int tasks = std::atoi(item.c_str());
    int repeat = 1;
    if (const size_t x = item.find("(x"); x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    if (tasks < 1 || repeat < 1) return 0;
    if (node < first + repeat) return tasks;
    first += repeat;
  }
  return 0;
}

int node_local_size() {
  if (const int n = first_env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 0); n > 0) return n;
  if (const char* per_node = std::getenv("SLURM_STEP_TASKS_PER_NODE"))
    if (const int n = slurm_tasks_on_node(per_node, first_env_int({"SLURM_NODEID"}, 0)); n > 0) return n;
  return 1;
}

}  // namespace forge
