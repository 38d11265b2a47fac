#include "sandbox/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>

#include "core/timer.hpp"

namespace forge {

const char* to_string(SandboxStatus s) {
  switch (s) {
    case SandboxStatus::kExited: return "exited";
    case SandboxStatus::kSignaled: return "signaled";
    case SandboxStatus::kTimedOut: return "timed out";
    case SandboxStatus::kStartFailed: return "start failed";
  }
  return "?";
}

namespace {

// The host's top-level system paths the sandbox sees read-only: symlinks
// (merged /usr) are recreated as symlinks, folders are bound.
constexpr const char* kSystemPaths[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
// The few files of /etc that programs need to start; the rest of /etc is not
// there.
constexpr const char* kEtcFiles[] = {"/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime",
                                     "/etc/nsswitch.conf", "/etc/passwd", "/etc/group"};

// The kernel's getdents64 record (glibc declares no type for it).
struct linux_dirent64_view {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// A file descriptor that closes itself.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Moves `fd` to a number >= 10 (close-on-exec), so that the child's dup2 onto
// 0..3 never overwrites a descriptor it still has to pass on.
Fd high_fd(int fd) {
  if (fd < 0) return Fd();
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  const int err = errno;
  close(fd);
  errno = err;
  return Fd(high);
}

bool valid_workspace_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

// The read-only system as bwrap arguments; the host's layout is looked up
// once per process.
const std::vector<std::string>& system_mounts() {
  static const std::vector<std::string> mounts = [] {
    std::vector<std::string> a;
    for (const char* p : kSystemPaths) {
      struct stat st;
      if (lstat(p, &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        char target[4096];
        const ssize_t n = readlink(p, target, sizeof target - 1);
        if (n <= 0) continue;
        a.insert(a.end(), {"--symlink", std::string(target, static_cast<size_t>(n)), p});
      } else if (S_ISDIR(st.st_mode)) {
        a.insert(a.end(), {"--ro-bind", p, p});
      }
    }
    for (const char* f : kEtcFiles) a.insert(a.end(), {"--ro-bind-try", f, f});
    return a;
  }();
  return mounts;
}

// The seccomp program bwrap loads before it runs the program (--seccomp):
// SysV shared memory and message queues fail with ENOSYS, as on a kernel
// built without them. Their segments outlive the process that made them
// (until the IPC namespace ends with the run) and are not address space: a
// program could create, fill and detach segment after segment past every
// memory bound (2 GB under memory_mb = 512 in a review). memfd_create alike:
// a memfd's pages are not address space either, and RLIMIT_FSIZE bounds each
// file only (a review held 20 of 60 MB under memory_mb = 256: 256 open files
// of workspace_mb each per process). POSIX shared memory goes through
// /dev/shm, which is bounded. Every other ABI (i386 through int 0x80, x32)
// gets ENOSYS for every call, so none is a way around it. Empty where the
// host is not x86-64 (no filter).
std::vector<sock_filter> ipc_filter() {
#if defined(__x86_64__)
  constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  return {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, kDeny),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u /* x32 */, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_shmget, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_msgget, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, kDeny),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
#else
  return {};
#endif
}

// Descriptor 4 of bwrap and of the sandbox's first process: the start
// report, written by the trampoline below once the sandbox runs, and closed
// before the program starts, so that nothing the program writes can pass for
// it (bwrap's own messages share the program's stdout and stderr, and the
// program reaches them again through its init's descriptors).
constexpr int kStartReportFd = 4;

// The sandbox's first program: /bin/sh, which reports "ran", or "missing"
// for a program that is no file (a name with a '/' that does not exist, or
// a name no folder of PATH holds as an executable file: a shell builtin or
// keyword such as "cd" is no program), then becomes the program with
// descriptor 4 closed and the environment as bwrap set it (dash exports a
// PWD of its own: unset). No subshell, no fork: nothing more counts against
// the process limit. A failure before it (bwrap's fork of the init, the exec
// of /bin/sh at the process limit) leaves the report empty.
constexpr const char* kTrampoline =
    "case $1 in */*) [ -e \"$1\" ] && found=1;; *) IFS=:; for d in $PATH; do "
    "[ -f \"$d/$1\" ] && [ -x \"$d/$1\" ] && found=1; done; unset IFS;; esac; "
    "[ -n \"$found\" ] || { echo missing >&4; exit 127; }; unset found PWD OLDPWD; echo ran >&4; exec \"$@\" 4>&-";

std::vector<std::string> bwrap_arguments(const SandboxRequest& request, const std::vector<int>& file_fds,
                                         const SandboxLimits& limits, int info_fd, int seccomp_fd) {
  const std::string size = std::to_string(limits.workspace_mb * 1024 * 1024);
  std::vector<std::string> a = {limits.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent",
                                "--new-session", "--clearenv", "--hostname", "sandbox"};
  a.insert(a.end(), system_mounts().begin(), system_mounts().end());
  // /dev is bwrap's own tmpfs, unbounded (half the host's memory) and not
  // counted by RLIMIT_AS: its shm gets the workspace's bound, the rest turns
  // read-only (the device nodes in it are binds and still work).
  a.insert(a.end(), {"--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--proc",
                     "/proc", "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/workspace"});
  std::set<std::string> dirs;
  for (size_t i = 0; i < request.files.size(); ++i) {
    const std::string& path = request.files[i].path;
    for (size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1)) {
      const std::string dir = "/workspace/" + path.substr(0, slash);
      if (dirs.insert(dir).second) a.insert(a.end(), {"--dir", dir});
    }
    a.insert(a.end(), {"--perms", request.files[i].executable ? "0755" : "0644", "--file",
                       std::to_string(file_fds[i]), "/workspace/" + path});
  }
  // The root is bwrap's tmpfs too (half the host's memory, not counted by
  // RLIMIT_AS, writable: files in /, /etc, /opt stayed in host memory until
  // the run ended): read-only once everything is in place. /workspace, /tmp
  // and /dev/shm are mounts of their own, bounded, and stay writable.
  a.insert(a.end(), {"--remount-ro", "/"});
  // PYTHONHASHSEED 0: a set's order, so a program's output, is the same on
  // every run (a random seed per run made a module that iterates a set pass
  // or fail at random, and a test-run cache keep whichever came first).
  a.insert(a.end(), {"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/workspace",
                     "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv",
                     "PYTHONHASHSEED", "0", "--chdir", "/workspace", "--info-fd", std::to_string(info_fd)});
  if (seccomp_fd >= 0) a.insert(a.end(), {"--seccomp", std::to_string(seccomp_fd)});
  a.insert(a.end(), {"--", "/bin/sh", "-c", kTrampoline, "sh"});
  return a;
}

SandboxResult start_failed(std::string why) {
  SandboxResult r;
  r.status = SandboxStatus::kStartFailed;
  r.error = std::move(why);
  return r;
}

void set_limit(int resource, rlim_t soft, rlim_t hard) {
  const rlimit l{soft, hard};
  setrlimit(resource, &l);
}

// The tasks (threads) the user `uid` runs now, from /proc: RLIMIT_NPROC
// counts all of them, forge's own threads and its other ranks included.
rlim_t tasks_of_user(uid_t uid) {
  rlim_t n = 0;
  DIR* proc = opendir("/proc");
  if (!proc) return 0;
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || st.st_uid != uid) continue;
    std::ifstream status(dir + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Threads:", 0) == 0) {
        n += static_cast<rlim_t>(std::strtoul(line.c_str() + 8, nullptr, 10));
        break;
      }
  }
  closedir(proc);
  return n;
}

// After fork: only async-signal-safe calls until exec. `nproc` is the
// RLIMIT_NPROC to set.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int out_w, int info_w, int report_w,
                             const std::vector<int>& file_fds, const SandboxLimits& limits, int uid, rlim_t nproc) {
  setpgid(0, 0);
  // Descriptors 0-4 are the sandbox's, or nothing starts (forge's own 1-4
  // would reach bwrap and the program).
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0 || dup2(info_w, 3) < 0 ||
      dup2(report_w, kStartReportFd) < 0)
    _exit(126);
  // Nothing of forge's (MPI sockets, HDF5 files) reaches the sandbox: every
  // descriptor from 5 up closes on exec but the workspace files. bwrap does
  // not close what it inherits, so a failure here must not start it.
  if (close_range(kStartReportFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0 && !mark_close_on_exec_from(kStartReportFd + 1)) {
    static const char msg[] = "sandbox: could not mark forge's descriptors close-on-exec\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(126);
  }
  for (int fd : file_fds) fcntl(fd, F_SETFD, 0);
  if (geteuid() == 0) {
    const gid_t g = static_cast<gid_t>(uid);
    const uid_t u = static_cast<uid_t>(uid);
    if (setgroups(0, nullptr) != 0 || setresgid(g, g, g) != 0 || setresuid(u, u, u) != 0) {
      static const char msg[] = "sandbox: could not drop root to the sandbox user\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(126);
    }
  }
  set_limit(RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_s), static_cast<rlim_t>(limits.cpu_s + 1));
  const rlim_t bytes = static_cast<rlim_t>(limits.memory_mb) * 1024 * 1024;
  set_limit(RLIMIT_AS, bytes, bytes);
  // A file (memfd included) no larger than the workspace: memfd pages, like
  // tmpfs ones, escape RLIMIT_AS.
  const rlim_t file_bytes = static_cast<rlim_t>(limits.workspace_mb) * 1024 * 1024;
  set_limit(RLIMIT_FSIZE, file_bytes, file_bytes);
  set_limit(RLIMIT_NPROC, nproc, nproc);
  set_limit(RLIMIT_NOFILE, kMaxOpenFiles, kMaxOpenFiles);
  set_limit(RLIMIT_CORE, 0, 0);
  execvp(argv[0], argv.data());
  // Async-signal-safe: the reason by errno from a fixed list, no formatting.
  const int err = errno;
  static const char head[] = "sandbox: could not execute bwrap: ";
  const char* why = err == ENOENT   ? "not found (is bubblewrap installed? tools/setup.sh installs it)\n"
                    : err == EAGAIN ? "Resource temporarily unavailable (the sandbox user's process limit)\n"
                    : err == EACCES ? "permission denied\n"
                    : err == ENOMEM ? "out of memory\n"
                                    : "exec failed\n";
  (void)!write(2, head, sizeof head - 1);
  (void)!write(2, why, strlen(why));
  _exit(127);
}

// bwrap's --info-fd JSON names the sandbox's first process (its PID
// namespace's init) by its host pid: {"child-pid": N}. 0 if absent.
pid_t child_pid_of(const std::string& info) {
  const size_t key = info.find("\"child-pid\"");
  if (key == std::string::npos) return 0;
  const size_t colon = info.find(':', key);
  return colon == std::string::npos ? 0 : static_cast<pid_t>(std::atol(info.c_str() + colon + 1));
}

// waitid's id type for a pidfd (P_PIDFD, Linux 5.4; named by glibc 2.36).
constexpr int kPidfdIdType = 3;

// Waits up to `ms` for our child `pid` to exit; true when it was reaped.
bool reap_within(pid_t pid, int ms, int& status) {
  for (int waited = 0; waited <= ms; ++waited) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return true;
    if (got < 0 && errno == ECHILD) return false;  // not (or no longer) ours
    usleep(1000);
  }
  return false;
}


}  // namespace

// Listed from /proc/self/fd with raw getdents64: no allocation, so it is
// safe between fork and exec.
bool mark_close_on_exec_from(int low) {
  const int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n < 0) {
      close(dir);
      return false;
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const struct linux_dirent64_view*>(buf + off);
      int fd = 0;
      bool number = d->name[0] != '\0';
      for (const char* c = d->name; *c; ++c) {
        number = number && *c >= '0' && *c <= '9';
        fd = fd * 10 + (*c - '0');
      }
      if (number && fd >= low && fd != dir) fcntl(fd, F_SETFD, FD_CLOEXEC);
      off += d->reclen;
    }
  }
  close(dir);
  return true;
}

SandboxResult run_sandboxed(const SandboxRequest& request, const SandboxLimits& limits, int uid) {
  if (request.argv.empty()) return start_failed("empty command");
  for (const SandboxFile& f : request.files)
    if (!valid_workspace_path(f.path)) return start_failed("bad workspace path '" + f.path + "'");

  // The workspace files, from memory.
  std::vector<Fd> files;
  std::vector<int> file_fds;
  for (const SandboxFile& f : request.files) {
    Fd fd = high_fd(memfd_create("forge-sandbox-file", MFD_CLOEXEC));
    if (fd.get() < 0) return start_failed(std::string("memfd_create: ") + std::strerror(errno));
    size_t done = 0;
    while (done < f.content.size()) {
      const ssize_t n = write(fd.get(), f.content.data() + done, f.content.size() - done);
      if (n <= 0) return start_failed(std::string("writing the workspace: ") + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    lseek(fd.get(), 0, SEEK_SET);
    file_fds.push_back(fd.get());
    files.push_back(std::move(fd));
  }
  // The seccomp program, from memory like the files (bwrap reads it whole).
  Fd seccomp;
  if (const std::vector<sock_filter> filter = ipc_filter(); !filter.empty()) {
    seccomp = high_fd(memfd_create("forge-sandbox-seccomp", MFD_CLOEXEC));
    if (seccomp.get() < 0)
      return start_failed(std::string("moving the seccomp filter above descriptor 10: ") + std::strerror(errno));
    const size_t size = filter.size() * sizeof(sock_filter);
    if (write(seccomp.get(), filter.data(), size) != static_cast<ssize_t>(size))
      return start_failed(std::string("writing the seccomp filter: ") + std::strerror(errno));
    lseek(seccomp.get(), 0, SEEK_SET);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return start_failed(std::string("pipe: ") + std::strerror(errno));
  Fd out_r = high_fd(p[0]), out_w = high_fd(p[1]);
  if (pipe2(p, O_CLOEXEC) != 0) return start_failed(std::string("pipe: ") + std::strerror(errno));
  Fd info_r = high_fd(p[0]), info_w = high_fd(p[1]);
  if (pipe2(p, O_CLOEXEC) != 0) return start_failed(std::string("pipe: ") + std::strerror(errno));
  Fd report_r = high_fd(p[0]), report_w = high_fd(p[1]);
  // Out of descriptors above 10: the child's dup2 onto 1 to 4 would fail
  // and bwrap would write into forge's own.
  if (out_r.get() < 0 || out_w.get() < 0 || info_r.get() < 0 || info_w.get() < 0 || report_r.get() < 0 ||
      report_w.get() < 0)
    return start_failed(std::string("moving the sandbox's pipes above descriptor 10: ") + std::strerror(errno));

  std::vector<std::string> args = bwrap_arguments(request, file_fds, limits, 3, seccomp.get());
  std::vector<int> inherited = file_fds;  // what bwrap reads: the files, the filter
  if (seccomp.get() >= 0) inherited.push_back(seccomp.get());
  args.insert(args.end(), request.argv.begin(), request.argv.end());
  std::vector<char*> argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  // RLIMIT_NPROC counts every task of the real user. As root the sandbox
  // runs as its own user, which runs nothing else; as another user the
  // limit must leave room for what that user already runs (forge's threads,
  // its other ranks), or no sandbox could start on a busy node.
  // Two more for bwrap and its init, which run as that user too (the
  // trampoline becomes the program: no process of its own).
  const rlim_t nproc =
      static_cast<rlim_t>(limits.max_procs) + 2 + (geteuid() == 0 ? 0 : tasks_of_user(getuid()));
  // The wall limit on the active clock (core/timer.hpp): a job suspend that
  // stops forge and the sandbox alike does not time the program out.
  // bwrap's init (the namespace's PID 1, above the program) outlives bwrap
  // by a moment when the program exits: bwrap returns at once and the init
  // dies of bwrap's death. It is then this process's to reap, not the
  // host's init (in a container, often one that reaps nothing: a zombie per
  // run, counted against the sandbox user's process limit).
  static const bool subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  (void)subreaper;
  const Stopwatch since_start;
  const pid_t pid = fork();
  if (pid < 0) return start_failed(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) exec_child(argv, out_w.get(), info_w.get(), report_w.get(), inherited, limits, uid, nproc);
  out_w.reset();
  info_w.reset();
  report_w.reset();
  files.clear();
  seccomp.reset();

  SandboxResult r;
  const size_t cap = static_cast<size_t>(limits.output_kb) * 1024;

  bool started = false, exited = false, timed_out = false;
  std::string info, report;
  Fd init_fd;  // pidfd of the sandbox's PID-namespace init, once bwrap names it
  pid_t init_pid = 0;
  int status = 0;
  char buf[65536];
  const auto keep_output = [&](size_t got) {  // the first `cap` bytes; the rest is dropped
    const size_t keep = std::min(got, cap - std::min(cap, r.output.size()));
    r.output.append(buf, keep);
    if (keep < got) r.truncated = true;
  };
  while (!exited || out_r.get() >= 0) {
    const double elapsed = since_start.seconds();
    if (elapsed >= limits.wall_s) {
      // A program that ended since the last look keeps its status, and
      // what it wrote that is still in the pipe.
      if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = true;
      timed_out = !exited;
      for (pollfd left{out_r.get(), POLLIN, 0}; exited && out_r.get() >= 0 && poll(&left, 1, 0) > 0;) {
        const ssize_t got = read(out_r.get(), buf, sizeof buf);
        if (got <= 0) break;
        keep_output(static_cast<size_t>(got));
      }
      break;
    }
    pollfd fds[2];
    nfds_t n = 0;
    if (out_r.get() >= 0) fds[n++] = {out_r.get(), POLLIN, 0};
    if (info_r.get() >= 0) fds[n++] = {info_r.get(), POLLIN, 0};
    // Once both pipes are closed only the exit is left: poll in short steps.
    const auto left = static_cast<int64_t>((limits.wall_s - elapsed) * 1e3) + 1;
    const int timeout = static_cast<int>(n == 0 ? std::min<int64_t>(left, 5) : std::min<int64_t>(left, 100));
    if (poll(fds, n, timeout) < 0 && errno != EINTR) break;
    for (nfds_t i = 0; i < n; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (fds[i].fd == info_r.get()) {
        if (got > 0) {
          started = true;
          info.append(buf, static_cast<size_t>(got));
          if (init_fd.get() < 0)
            if (const pid_t init = child_pid_of(info); init > 0 && init_pid == 0) {
              init_fd = Fd(static_cast<int>(syscall(SYS_pidfd_open, init, 0)));
              init_pid = init;
            }
        } else if (got == 0 || errno != EINTR) {
          info_r.reset();
        }
        continue;
      }
      if (got > 0) {
        keep_output(static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        out_r.reset();
      }
    }
    if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = true;
    // The program has exited: whatever still holds the pipe is gone with its
    // PID namespace; do not wait for more than the deadline anyway.
  }
  if (!exited) {
    // Kill the namespace's init first: the kernel then kills every process
    // of the namespace, and the pidfd turns readable once they are gone.
    // bwrap (our child) reaps it and exits; forced if it does not.
    if (init_fd.get() >= 0) {
      syscall(SYS_pidfd_send_signal, init_fd.get(), SIGKILL, nullptr, 0);
      pollfd gone{init_fd.get(), POLLIN, 0};
      poll(&gone, 1, 5000);
    }
    if (!reap_within(pid, init_fd.get() >= 0 ? 1000 : 0, status)) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
  // The init, if bwrap left it to us (it had not reaped it yet): gone once
  // its pidfd is readable, then ours to reap through the pidfd (never a
  // reused pid; not ours: ECHILD, nothing left). Without a pidfd (kernels
  // before 5.3, or refused by a seccomp profile), by its pid, for a second.
  if (init_fd.get() >= 0) {
    pollfd gone{init_fd.get(), POLLIN, 0};
    if (poll(&gone, 1, 5000) > 0) {
      siginfo_t info_of_init{};
      const auto pidfd = static_cast<id_t>(init_fd.get());
      int rc;
      while ((rc = waitid(static_cast<idtype_t>(kPidfdIdType), pidfd, &info_of_init, WEXITED)) < 0 && errno == EINTR) {
      }
      int init_status = 0;
      if (rc < 0 && errno == EINVAL) reap_within(init_pid, 1000, init_status);  // Linux 5.3: no P_PIDFD yet
    }
  } else if (init_pid > 0) {
    int init_status = 0;
    reap_within(init_pid, 1000, init_status);
  }
  r.wall_ms = since_start.ms();
  if (timed_out) {
    r.status = SandboxStatus::kTimedOut;
    return r;
  }
  // Nothing ran: the result names why (what was printed is bwrap's).
  const auto not_started = [&](std::string why) {
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    r.status = SandboxStatus::kStartFailed;
    r.error = std::move(why);
    r.output.clear();
    return r;
  };
  if (!started) return not_started(r.output.empty() ? "bwrap exited before the sandbox started" : r.output);
  // What the trampoline reported, written before the program ran (and
  // there, since the report's writers are gone once bwrap is reaped). None:
  // bwrap failed after it set the sandbox up ("bwrap: Can't fork for pid 1:
  // Resource temporarily unavailable", or its exec of /bin/sh at the process
  // limit): nothing ran, whatever the status.
  for (pollfd left{report_r.get(), POLLIN, 0}; report_r.get() >= 0 && poll(&left, 1, 0) > 0;) {
    const ssize_t got = read(report_r.get(), buf, 16);
    if (got <= 0) break;
    report.append(buf, static_cast<size_t>(got));
  }
  if (report.rfind("missing", 0) == 0) return not_started("no program '" + request.argv[0] + "' found in the sandbox");
  if (report.rfind("ran\n", 0) != 0)
    return not_started(r.output.empty() ? "bwrap ended after it set the sandbox up, before the program ran" : r.output);
  if (WIFSIGNALED(status)) {
    r.status = SandboxStatus::kSignaled;
    r.signal = WTERMSIG(status);
  } else {
    // bwrap exits with its program's status, 128 + N when a signal ended it.
    const int code = WEXITSTATUS(status);
    if (code > 128 && code < 128 + NSIG) {
      r.status = SandboxStatus::kSignaled;
      r.signal = code - 128;
    } else {
      r.status = SandboxStatus::kExited;
      r.exit_code = code;
    }
  }
  return r;
}

bool sandbox_has_own_user() { return geteuid() == 0; }

const std::string& sandbox_unavailable_reason() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    const SandboxResult r = run_sandboxed({{"/bin/true"}, {}}, SandboxLimits{});
    if (r.status == SandboxStatus::kStartFailed) reason = r.error;
    else if (!r.ok()) reason = std::string("a trivial sandbox ") + to_string(r.status) + ": " + r.output;
  });
  return reason;
}

}  // namespace forge
