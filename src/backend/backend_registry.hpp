// Backends by name. Each backend (backend/cpu, backend/cuda) registers a
// factory when the program starts (a static registrar in its own sources,
// linked into every binary: src/CMakeLists.txt), so that commands, roles and
// tests create one from a name without including its implementation, and a
// build without CUDA simply has no "cuda" entry.
//
//   make_backend(name, precision)   InputError naming the backends this
//                                   build has, or the precision the backend
//                                   lacks (the factory says which)
//   set_compute_threads(n)          OpenMP threads and every registered
//                                   backend's host libraries (OpenBLAS on
//                                   cpu); 0 keeps the default (all cores)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace forge {

using BackendFactory = std::unique_ptr<Backend> (*)(Precision precision);
using HostThreadsHook = void (*)(int threads);

// Called by a backend's static registrar; returns true (for the registrar's
// initializer). Error when the name is taken.
bool register_backend(const std::string& name, BackendFactory make, HostThreadsHook threads = nullptr);

// "cpu" (the default and reference), "cuda" where built, ...
std::unique_ptr<Backend> make_backend(const std::string& name, Precision precision = Precision::kFp32);

// Names of the registered backends, sorted.
std::vector<std::string> backend_names();

// "fp32" or "bf16"; InputError otherwise.
Precision parse_precision(const std::string& name);

// Threads for OpenMP loops and the backends' host libraries (0 = leave the
// default: all cores); returns the count in use.
int set_compute_threads(int n);

}  // namespace forge
