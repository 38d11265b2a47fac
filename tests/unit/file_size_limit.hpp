// Runs a write under a file-size limit (RLIMIT_FSIZE, as a full disk would
// cut it), in a child process so that the limit stays there: 0 when `write`
// returned, 1 when it threw, -1 when the child did not exit normally.
#pragma once
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <exception>
#include <functional>

namespace forge {

inline int exit_code_under_file_limit(rlim_t limit, const std::function<void()>& write) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    const rlimit small{limit, limit};
    setrlimit(RLIMIT_FSIZE, &small);
    int code = 3;
    try {
      write();
      code = 0;
    } catch (const std::exception&) {
      code = 1;
    }
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

}  // namespace forge
