// Runs the built forge binary from the source tree (so relative paths like
// configs/default.ini resolve as in the README) and captures its exit code,
// stdout and stderr. Shared by the end-to-end tests.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace forge_e2e {

struct Result {
  int rc = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline Result forge(const std::string& args) {
  // Unique per process: ctest runs the tests of this file in parallel.
  const std::string stem = ::testing::TempDir() + "forge_cli_" + std::to_string(getpid());
  const std::string out = stem + ".out", err = stem + ".err";
  const std::string cmd = std::string("cd '") + FORGE_SOURCE_DIR + "' && '" FORGE_BINARY_DIR
                          "/forge' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace forge_e2e
