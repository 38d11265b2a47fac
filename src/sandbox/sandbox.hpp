// One program run in a sandbox it cannot leave: bubblewrap (bwrap) with
//
//   - a private workspace: /workspace and /tmp are fresh tmpfs mounts of
//     `workspace_mb` each; the request's files are copied in from memory
//     (memfd -> bwrap --file), so no host file is written and nothing the
//     program writes survives the run;
//   - the system read-only: /usr (and /bin, /lib, ... as the host has them)
//     and a few files of /etc; nothing else of the host: no home, no run
//     folder, no /root, no /proc of the host; the root (bwrap's tmpfs)
//     read-only too, so nothing is written outside the bounded mounts;
//   - its own user, PID, network (loopback only), IPC, UTS and cgroup
//     namespaces; a new session; the environment cleared; the program runs
//     under bwrap's init (which reaps its orphans), and what it leaves
//     running ends when it exits (forge, a child subreaper, reaps that init);
//   - /dev: bwrap's minimal devices, read-only, with /dev/shm a tmpfs of
//     `workspace_mb` (tmpfs pages escape RLIMIT_AS); no SysV shared memory
//     or message queues and no memfd_create (a seccomp filter: ENOSYS),
//     whose memory escapes RLIMIT_AS (SysV segments outlive their process);
//   - limits per process: CPU seconds (RLIMIT_CPU), address space
//     (RLIMIT_AS), file size (RLIMIT_FSIZE: workspace_mb), open files
//     (RLIMIT_NOFILE: kMaxOpenFiles), processes of its user (RLIMIT_NPROC:
//     the program and its descendants number max_procs at most, bwrap and
//     its init aside: a fork bomb stops there). Memory is bounded per
//     process, not per sandbox: up to max_procs processes may each use
//     memory_mb (a cgroup would bound their sum; forge does not make one);
//     output: the first `output_kb` of stdout+stderr are kept, the
//     rest is read and dropped (`truncated`);
//   - no descriptor of forge's: everything from 4 up but the workspace
//     files closes on exec (close_range, or /proc/self/fd on old kernels;
//     if neither works the sandbox does not start);
//   - a wall-clock deadline: at `wall_s` the whole process group is killed
//     (SIGKILL to bwrap; its PID namespace takes every process with it) and
//     the result is kTimedOut.
//
// When forge runs as root the sandbox drops to user `uid` first (root is
// exempt from RLIMIT_NPROC); otherwise it runs as the calling user in a new
// user namespace, and since RLIMIT_NPROC counts all of that user's tasks the
// limit is `max_procs` above what the user runs when the sandbox starts.
//
// The sandbox's first process is a /bin/sh trampoline that reports, on a
// descriptor of its own closed before the program starts, that it ran (or
// that argv[0] is not found); then it becomes the program. A run without
// that report never ran the program, whatever bwrap printed or returned (no
// bwrap, no user namespaces, bwrap's fork or exec refused at the process
// limit, a program not found): a result with status kStartFailed and
// bwrap's message, never an exception; for an agent it is a tool error of
// one episode. The program cannot fake one: what it prints, bwrap's words
// included, is its output, and how it exits is its status.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace forge {

// Open files per sandboxed process (RLIMIT_NOFILE; forge's own limit, often
// tens of thousands, was inherited: that many 64 MB memfds per process).
inline constexpr int kMaxOpenFiles = 256;

struct SandboxLimits {
  double wall_s = 10;          // deadline of the whole run
  int cpu_s = 10;              // CPU seconds per process
  int64_t memory_mb = 1024;    // address space per process
  int max_procs = 64;          // processes of the sandbox's user (beyond the user's own when not root)
  int64_t output_kb = 64;      // stdout+stderr kept
  int64_t workspace_mb = 64;   // size of /workspace and of /tmp
  int uid = 200000;            // the sandbox's user when forge runs as root
  const char* bwrap = "bwrap"; // the bubblewrap binary (PATH is searched)
};

// A file of the workspace: path relative to /workspace ("pkg/mod.py").
struct SandboxFile {
  std::string path;
  std::string content;
  bool executable = false;
};

struct SandboxRequest {
  std::vector<std::string> argv;  // argv[0] is searched in the sandbox's PATH
  std::vector<SandboxFile> files;
};

enum class SandboxStatus { kExited, kSignaled, kTimedOut, kStartFailed };
const char* to_string(SandboxStatus s);

struct SandboxResult {
  SandboxStatus status = SandboxStatus::kStartFailed;
  int exit_code = -1;      // kExited: the program's exit status
  int signal = 0;          // kSignaled: the signal that ended it (bwrap reports it as exit status
                           // 128 + N, so a program's own exit 129..128+NSIG reads as one too)
  std::string output;      // stdout and stderr, interleaved, at most output_kb
  bool truncated = false;  // more output was produced and dropped
  double wall_ms = 0;      // from spawn to the end of the run
  std::string error;       // kStartFailed: why (bwrap's message)
  bool ok() const { return status == SandboxStatus::kExited && exit_code == 0; }
};

// Runs one request; blocks until it ends or its deadline passes. Thread-safe.
// `uid` replaces limits.uid (the pool gives each worker its own user, so a
// fork bomb in one sandbox does not starve the others of processes).
SandboxResult run_sandboxed(const SandboxRequest& request, const SandboxLimits& limits, int uid);
inline SandboxResult run_sandboxed(const SandboxRequest& request, const SandboxLimits& limits) {
  return run_sandboxed(request, limits, limits.uid);
}

// Whether each sandbox runs as a user of its own (forge runs as root): then
// its RLIMIT_NPROC counts its own processes only. Otherwise every sandbox
// (and forge) is the calling user, and one sandbox's processes count
// against another's limit.
bool sandbox_has_own_user();

// close_range(low, ~0, CLOSE_RANGE_CLOEXEC) for kernels before 5.11: marks
// every open descriptor >= `low` close-on-exec. Async-signal-safe (the child
// calls it between fork and exec); false when /proc/self/fd cannot be read.
bool mark_close_on_exec_from(int low);

// Empty when a trivial sandbox (default limits) starts on this machine, else
// why not (bwrap missing, user namespaces refused, ...). Probed once per
// process.
const std::string& sandbox_unavailable_reason();

}  // namespace forge
