// An environment variable set (or, for a null value, unset) for a scope and
// restored as it was when the scope ends: for settings a library reads from
// the environment once (OpenBLAS's core, BLIS's configuration) and for tests
// and benchmarks that make objects under a setting. Not thread-safe, as
// setenv is not: use it where no other thread reads the environment.
#pragma once
#include <cstdlib>
#include <string>

namespace forge {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) saved_ = was;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), saved_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

}  // namespace forge
