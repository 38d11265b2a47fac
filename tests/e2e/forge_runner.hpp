// Runs the built forge binary from the source tree (so relative paths like
// configs/default.ini resolve as in the README) and captures its exit code,
// stdout and stderr. Shared by the end-to-end tests.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace forge_e2e {

struct Result {
  int rc = -1;
  std::string out, err;
};

// What a test process leaves in TempDir() under its pid (run folders, logs,
// files named forge_..._<pid>, as every test here names them) is removed once
// every test of the process passed; after a failure it stays to be looked
// at. (They were never removed: 133 MB of run folders after a few dozen runs.)
class RemoveLeftovers : public ::testing::Environment {
 public:
  void TearDown() override {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    std::string pid = "_";  // not "_" + to_string: GCC 12's -Wrestrict misfires on it
    pid += std::to_string(getpid());
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir(), ec)) {
      const std::string name = e.path().filename().string();
      const size_t at = name.find(pid);
      if (name.rfind("forge_", 0) != 0 || at == std::string::npos) continue;
      const size_t end = at + pid.size();
      if (end == name.size() || name[end] == '_' || name[end] == '.') std::filesystem::remove_all(e.path(), ec);
    }
  }
};
inline ::testing::Environment* const kRemoveLeftovers = ::testing::AddGlobalTestEnvironment(new RemoveLeftovers);

// TempDir()/forge_NAME_<pid>, removed first (a folder of an earlier run of
// this pid would be refused as holding a run); RemoveLeftovers takes it.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "forge_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

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

// Runs `forge ARGS` in the background, sends it `signal` (a kill(1) name:
// TERM, INT) once its output (stdout and stderr, also left in `log`) holds a
// line matching the grep pattern `ready` (polled every 10 ms, for 60 s at
// most), and waits for it. Returns its exit code and output. SIGINT's default
// action is restored for it (a background job of sh starts ignoring SIGINT).
inline Result forge_until_signal(const std::string& args, const std::string& ready, const std::string& log,
                                 const std::string& signal) {
  const std::string rc = log + ".rc";
  const std::string script = "cd '" FORGE_SOURCE_DIR "' && { env --default-signal=INT '" FORGE_BINARY_DIR "/forge' " +
                             args + " >'" + log + "' 2>&1 & pid=$!; for i in $(seq 6000); do grep -q '" + ready +
                             "' '" + log + "' && break; sleep 0.01; done; kill -" + signal +
                             " $pid; wait $pid; echo $? >'" + rc + "'; }";
  Result r;
  if (std::system(script.c_str()) != 0) return r;
  r.rc = std::stoi(slurp(rc));
  r.out = slurp(log);
  std::remove(rc.c_str());
  return r;
}

inline Result forge_until_sigterm(const std::string& args, const std::string& ready, const std::string& log) {
  return forge_until_signal(args, ready, log, "TERM");
}

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace forge_e2e
