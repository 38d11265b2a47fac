// The process's peak resident memory (getrusage ru_maxrss), for the end-of-run
// lines of the commands and the memory benchmark.
#pragma once
#include <sys/resource.h>

namespace forge {

inline double peak_resident_gib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // KiB -> GiB
}

}  // namespace forge
