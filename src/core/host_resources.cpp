#include "core/host_resources.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
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
uint64_t limit_in(const char* path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::strtoull(word.c_str(), nullptr, 10);
}

}  // namespace

uint64_t usable_host_memory() {
  uint64_t bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (const uint64_t limit = limit_in(path); limit > 0) bytes = std::min(bytes, limit);
  return bytes;
}

int node_local_rank() {
  return std::max(0, first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0));
}

int node_local_size() {
  return std::max(1, first_env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1));
}

}  // namespace forge
