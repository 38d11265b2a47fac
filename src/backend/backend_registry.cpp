#include "backend/backend_registry.hpp"

#include <omp.h>

#include <map>

#include "backend/collectives.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"

namespace forge {
namespace {

struct Entry {
  BackendFactory make = nullptr;
  HostThreadsHook threads = nullptr;
};

// Function-local: registrars run during static initialization, in any order.
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;
  return r;
}

std::string names_text() {
  const std::vector<std::string> names = backend_names();
  return names.empty() ? "none" : join(names, ", ");
}

}  // namespace

std::unique_ptr<DeviceCollectives> Backend::make_collectives(const CollectiveBootstrap&) { return nullptr; }

bool register_backend(const std::string& name, BackendFactory make, HostThreadsHook threads) {
  if (!registry().emplace(name, Entry{make, threads}).second)
    throw Error("backend '" + name + "' is registered twice");
  return true;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& [name, entry] : registry()) out.push_back(name);
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, Precision precision) {
  const auto it = registry().find(name);
  if (it != registry().end()) return it->second.make(precision);
  if (name == "cuda")
    throw InputError("backend 'cuda' is not available in this build (configured without CUDA: FORGE_CUDA=OFF "
                     "or no nvcc found); this build has: " + names_text());
  throw InputError("unknown backend '" + name + "' (this build has: " + names_text() + ")");
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw InputError("unknown precision '" + name + "' (allowed: fp32, bf16)");
}

int set_compute_threads(int n) {
  if (n > 0) {
    omp_set_num_threads(n);
    for (const auto& [name, entry] : registry())
      if (entry.threads) entry.threads(n);
  }
  return omp_get_max_threads();
}

}  // namespace forge
