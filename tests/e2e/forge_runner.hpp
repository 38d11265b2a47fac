// Runs the built forge binary from the source tree (so relative paths like
// configs/default.ini resolve as in the README) and captures its exit code,
// stdout and stderr. Shared by the end-to-end tests.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
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
  int signal = 0;  // forge_until_signal: the signal that ended the process, else 0
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

// Runs `forge ARGS` (through sh, from the source tree, stdout and stderr to
// `log`), sends it signal `sig` once its output holds a line matching the
// grep pattern `ready` (polled every 10 ms, for 60 s at most), and waits for
// it. Returns its output and how it ended: `signal` when a signal ended it
// (then rc is 128 + it, as a shell reports), else 0 and its exit code.
// SIGINT's default action is restored for it, as from a terminal, whatever
// started this test (a background job of sh ignores SIGINT).
inline Result forge_until_signal(const std::string& args, const std::string& ready, const std::string& log, int sig) {
  Result r;
  const std::string cmd = "exec '" FORGE_BINARY_DIR "/forge' " + args;
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || chdir(FORGE_SOURCE_DIR) != 0) _exit(127);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string probe = "grep -q '" + ready + "' '" + log + "'";
  for (int i = 0; i < 6000 && std::system(probe.c_str()) != 0; ++i) usleep(10000);
  kill(pid, sig);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return r;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + r.signal;
  r.out = slurp(log);
  return r;
}

inline Result forge_until_sigterm(const std::string& args, const std::string& ready, const std::string& log) {
  return forge_until_signal(args, ready, log, SIGTERM);
}

inline bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace forge_e2e
