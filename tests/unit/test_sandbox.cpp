// The sandbox (src/sandbox/): what a program inside sees and cannot do, its
// limits and deadline, start failures as results, the pool's concurrency, and
// that 1,000 runs (deadline kills, fork bombs, runaway output among them)
// leave no process, descriptor or temporary file behind (mounts live in each
// run's own mount namespace: none can reach the host's).
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "sandbox/sandbox.hpp"
#include "sandbox/sandbox_pool.hpp"
#include "unit/sandbox_required.hpp"

namespace forge {
namespace {

// Limits with sandbox users of this test's own (when root): ctest runs tests
// as parallel processes, and RLIMIT_NPROC and the leftover check count a
// user's processes across all of them.
SandboxLimits own_users(int test) {
  SandboxLimits l;
  l.uid = 210000 + 10 * test;
  return l;
}

SandboxRequest cmd(std::vector<std::string> argv) { return {std::move(argv), {}}; }

SandboxRequest sh(const std::string& script, std::vector<SandboxFile> files = {}) {
  return {{"/bin/sh", "-c", script}, std::move(files)};
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Entries of `dir` not in `before` that a sandbox could have left: owned by
// one of `uids`, or named like forge's or bwrap's temporary files.
std::vector<std::string> new_entries(const std::string& dir, const std::vector<std::string>& before,
                                     const std::set<int>& uids) {
  std::vector<std::string> found;
  for (const std::string& name : list_dir(dir)) {
    if (std::binary_search(before.begin(), before.end(), name)) continue;
    struct stat st;
    const bool owned = lstat((dir + "/" + name).c_str(), &st) == 0 && uids.count(static_cast<int>(st.st_uid));
    if (owned || name.find("sandbox") != std::string::npos || name.find("bwrap") != std::string::npos)
      found.push_back(dir + "/" + name);
  }
  return found;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes that are this process's children, or run as one of `uids`.
std::vector<std::string> stray_processes(const std::set<int>& uids) {
  std::vector<std::string> stray;
  const std::string self = std::to_string(getpid());
  for (const std::string& name : list_dir("/proc")) {
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name == self) continue;
    const std::string status = read_text("/proc/" + name + "/status");
    int ppid = -1, uid = -1;
    std::istringstream in(status);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("PPid:", 0) == 0) ppid = std::stoi(line.substr(5));
      if (line.rfind("Uid:", 0) == 0) uid = std::stoi(line.substr(4));
    }
    if (ppid == getpid() || uids.count(uid)) {
      const size_t state = status.find("State:");
      stray.push_back(name + " " + status.substr(6, status.find('\n') - 6) + " ppid " + std::to_string(ppid) + " " +
                      status.substr(state, status.find('\n', state) - state));
    }
  }
  return stray;
}

TEST(Sandbox, RunsAProgramOnItsWorkspaceFiles) {
  REQUIRE_SANDBOX();
  const SandboxResult r = run_sandboxed(
      {{"python3", "main.py"},
       {{"main.py", "import os\nprint(open('data/in.txt').read().strip(), os.getcwd())\n"}, {"data/in.txt", "hello\n"}}},
      {});
  ASSERT_EQ(r.status, SandboxStatus::kExited) << r.error << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "hello /workspace\n");
  EXPECT_FALSE(r.truncated);
}

TEST(Sandbox, ExitCodeAndBothStreamsComeBack) {
  REQUIRE_SANDBOX();
  const SandboxResult r = run_sandboxed(sh("echo out; echo err >&2; exit 3"), {});
  ASSERT_EQ(r.status, SandboxStatus::kExited) << r.error;
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.output.find("out\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("err\n"), std::string::npos) << r.output;
  const SandboxResult executable = run_sandboxed({{"./run.sh"}, {{"run.sh", "#!/bin/sh\necho ran\n", true}}}, {});
  EXPECT_TRUE(executable.ok()) << executable.error << executable.output;
  EXPECT_EQ(executable.output, "ran\n");
}

// No descriptor of forge's reaches the program (one left inheritable here
// is not in its /proc/self/fd), and it may open kMaxOpenFiles at most (the
// inherited limit, tens of thousands, allowed that many 64 MB memfds).
TEST(Sandbox, InheritsNoDescriptorAndFewOpenFiles) {
  REQUIRE_SANDBOX();
  const int inherited = ::fcntl(1, F_DUPFD, 47);  // no FD_CLOEXEC
  ASSERT_GE(inherited, 47);
  const SandboxResult r = run_sandboxed(sh("ulimit -n; ls /proc/self/fd"), {});
  ::close(inherited);
  ASSERT_EQ(r.status, SandboxStatus::kExited) << r.error << r.output;
  std::istringstream lines(r.output);
  std::string limit;
  std::getline(lines, limit);
  EXPECT_EQ(limit, std::to_string(kMaxOpenFiles)) << r.output;
  for (std::string fd; std::getline(lines, fd);)
    EXPECT_LE(std::stoi(fd), 3) << "descriptor " << fd << " reached the sandbox:\n" << r.output;
}

TEST(Sandbox, SeesNoHostFilesAndWritesNothingOutsideItsWorkspace) {
  REQUIRE_SANDBOX();
  // A file in the test's working folder (a run folder) and in its home.
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  const std::string secret = std::string(cwd) + "/sandbox_secret_" + std::to_string(getpid());
  std::ofstream(secret) << "token\n";
  const char* home = std::getenv("HOME");
  const std::string script = "for f in '" + secret + "' '" + (home ? home : "/root") +
                             "' /root /etc/shadow /etc/hostname; do test -e \"$f\" && echo \"seen $f\"; done;"
                             "echo x > /usr/forge_sandbox_probe 2>/dev/null && echo 'wrote /usr';"
                             // the root is bwrap's tmpfs (half the host's memory): read-only
                             "for f in /x /etc/x; do echo x > $f 2>/dev/null && echo \"wrote $f\"; done;"
                             "mkdir /opt/x 2>/dev/null && echo 'wrote /opt';"
                             "for d in /tmp /dev/shm; do echo x > $d/x && echo \"wrote $d\"; done;"
                             "echo x > workspace_file && echo 'wrote workspace'; id -u";
  const SandboxResult r = run_sandboxed(sh(script), {});
  std::remove(secret.c_str());
  ASSERT_TRUE(r.ok()) << r.error << r.output;
  EXPECT_EQ(r.output.find("seen"), std::string::npos) << r.output;
  for (const char* outside : {"wrote /usr", "wrote /x", "wrote /etc/x", "wrote /opt"})
    EXPECT_EQ(r.output.find(outside), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote /tmp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote /dev/shm"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote workspace"), std::string::npos) << r.output;
  EXPECT_NE(access("/usr/forge_sandbox_probe", F_OK), 0);
  const std::string user = r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1);
  if (geteuid() == 0) {
    EXPECT_NE(user, "0\n") << "the sandbox ran as root";
  }
}

TEST(Sandbox, HasNoNetworkButLoopback) {
  REQUIRE_SANDBOX();
  const SandboxResult r = run_sandboxed(
      cmd({"python3", "-c",
        "import socket\n"
        "s = socket.socket(); s.settimeout(2)\n"
        "try:\n  s.connect(('1.1.1.1', 53)); print('connected')\n"
        "except OSError as e:\n  print('blocked', e.errno)\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"}),
      {});
  ASSERT_TRUE(r.ok()) << r.error << r.output;
  EXPECT_NE(r.output.find("blocked"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("['lo']"), std::string::npos) << r.output;
}

TEST(Sandbox, DeadlineKillsEveryProcessOfTheRun) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(1);
  limits.wall_s = 0.5;
  const SandboxResult r = run_sandboxed(sh("sleep 100 & (setsid sleep 100 &); echo started; sleep 100"), limits, limits.uid);
  EXPECT_EQ(r.status, SandboxStatus::kTimedOut) << to_string(r.status) << " " << r.error;
  EXPECT_EQ(r.output, "started\n");
  EXPECT_GE(r.wall_ms, 500);
  EXPECT_EQ(stray_processes({limits.uid}), std::vector<std::string>{});
}

// The program runs under bwrap's init, not as the namespace's PID 1: its
// own signals reach it (as PID 1 `kill -9 $$` was ignored), the orphans it
// leaves are reaped (as PID 1 they stayed zombies and counted against
// max_procs: the 14th `sleep 0 &` could not fork), and what is still
// running when it exits ends with it, leaving no zombie init behind.
TEST(Sandbox, TheProgramIsNotTheNamespacesInit) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(10);
  limits.max_procs = 16;
  const SandboxResult self = run_sandboxed(sh("kill -9 $$; echo survived"), limits);
  EXPECT_EQ(self.status, SandboxStatus::kSignaled) << to_string(self.status) << " " << self.output;
  EXPECT_EQ(self.signal, SIGKILL);
  EXPECT_EQ(self.output, "");
  const SandboxResult orphans = run_sandboxed(
      cmd({"python3", "-c",
           "import subprocess\nfor i in range(60): subprocess.run('sleep 0 &', shell=True, check=True)\n"
           "print('forked 60')\n"}),
      limits);
  ASSERT_TRUE(orphans.ok()) << orphans.error << orphans.output;
  EXPECT_EQ(orphans.output, "forked 60\n");
  const SandboxResult left = run_sandboxed(sh("sleep 100 & (setsid sleep 100 &); echo left"), limits);
  ASSERT_TRUE(left.ok()) << left.error << left.output;
  EXPECT_LT(left.wall_ms, 5000);
  EXPECT_EQ(stray_processes({limits.uid}), std::vector<std::string>{});
}

TEST(Sandbox, ProcessLimitStopsAForkBomb) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(2);
  limits.max_procs = 16;
  limits.wall_s = 5;
  // Tries 100 children that each wait; prints how many forks succeeded.
  const SandboxResult r = run_sandboxed(
      cmd({"python3", "-c",
        "import os, time\n"
        "n = 0\n"
        "for i in range(100):\n"
        "  try:\n"
        "    if os.fork() == 0:\n      time.sleep(1); os._exit(0)\n"
        "    n += 1\n"
        "  except OSError:\n    pass\n"
        "print(n)\n"}),
      limits);
  ASSERT_TRUE(r.ok()) << r.error << r.output;
  const int forked = std::stoi(r.output);
  EXPECT_GT(forked, 0);
  // As another user than root the limit sits max_procs above what the user
  // already runs (this test's threads, other processes of the user).
  int above = 0;
  if (geteuid() != 0)
    for (const std::string& name : list_dir("/proc")) {
      struct stat st;
      if (name[0] < '0' || name[0] > '9' || stat(("/proc/" + name).c_str(), &st) != 0 || st.st_uid != getuid())
        continue;
      std::istringstream in(read_text("/proc/" + name + "/status"));
      for (std::string line; std::getline(in, line);)
        if (line.rfind("Threads:", 0) == 0) above += std::stoi(line.substr(8));
    }
  EXPECT_LT(forked, limits.max_procs + above) << "the process limit did not hold";
  // As root, exactly: the program and its children number max_procs.
  if (geteuid() == 0) {
    EXPECT_EQ(forked, limits.max_procs - 1);
  }
  // A real one: bounded by the limit, ended by the deadline.
  limits.wall_s = 0.5;
  const SandboxResult bomb = run_sandboxed(sh("f() { f | f & }; f; sleep 100"), limits);
  EXPECT_EQ(bomb.status, SandboxStatus::kTimedOut);
  EXPECT_EQ(stray_processes({limits.uid}), std::vector<std::string>{});
}

TEST(Sandbox, RunawayOutputIsCutAtTheCap) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(3);
  limits.output_kb = 16;
  limits.wall_s = 0.5;
  const SandboxResult r = run_sandboxed(cmd({"yes"}), limits);
  EXPECT_EQ(r.status, SandboxStatus::kTimedOut);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.output.size(), 16u * 1024);
  const SandboxResult small = run_sandboxed(sh("head -c 1000 /dev/zero"), limits);
  EXPECT_TRUE(small.ok());
  EXPECT_FALSE(small.truncated);
  EXPECT_EQ(small.output.size(), 1000u);
}

TEST(Sandbox, MemoryAndCpuLimitsHold) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(4);
  limits.memory_mb = 256;
  limits.cpu_s = 1;
  limits.wall_s = 20;
  const SandboxResult mem = run_sandboxed(
      cmd({"python3", "-c", "try:\n  x = bytearray(512 << 20); print('allocated')\nexcept MemoryError:\n  print('refused')\n"}),
      limits);
  ASSERT_TRUE(mem.ok()) << mem.error << mem.output;
  EXPECT_EQ(mem.output, "refused\n");
  const SandboxResult cpu = run_sandboxed(cmd({"python3", "-c", "while True: pass"}), limits);
  EXPECT_EQ(cpu.status, SandboxStatus::kSignaled) << to_string(cpu.status) << " " << cpu.output;
}

// /dev is read-only but for its device nodes, and /dev/shm holds no more
// than the workspace: tmpfs pages escape RLIMIT_AS, so an unbounded one let
// a program fill the host's memory.
TEST(Sandbox, DevIsReadOnlyAndItsShmIsBounded) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(7);
  limits.workspace_mb = 4;
  const SandboxResult r = run_sandboxed(
      sh("echo x > /dev/null && echo 'null ok'; (echo x > /dev/forge_probe) 2>/dev/null && echo 'wrote /dev';"
         "head -c 8388608 /dev/zero > /dev/shm/fill 2>/dev/null; wc -c < /dev/shm/fill"),
      limits);
  ASSERT_TRUE(r.ok()) << r.error << r.output;
  EXPECT_NE(r.output.find("null ok"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("wrote /dev"), std::string::npos) << r.output;
  const std::string kept = r.output.substr(r.output.rfind("ok\n") + 3);
  ASSERT_TRUE(!kept.empty() && std::isdigit(static_cast<unsigned char>(kept[0]))) << r.output;
  EXPECT_EQ(std::stoll(kept), 4LL << 20) << r.output;
}

// SysV shared memory and message queues are not there (ENOSYS): a segment
// outlives the process that made it and is not address space, so creating,
// filling and detaching one after another got past every memory bound.
// Python's SysV-free shared memory (/dev/shm) still works, and the call
// through the 32-bit ABI (int 0x80) is refused too.
TEST(Sandbox, SysVSharedMemoryAndMemfdsAreNotAWayPastTheMemoryBound) {
  REQUIRE_SANDBOX();
  SandboxLimits limits = own_users(11);
  const char* program =
      "import ctypes, errno, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('shmget', libc.shmget(0, 1 << 20, 0o1600), errno.errorcode.get(ctypes.get_errno()))\n"
      "print('msgget', libc.msgget(0, 0o1600), errno.errorcode.get(ctypes.get_errno()))\n"
      "from multiprocessing import shared_memory\n"
      "m = shared_memory.SharedMemory(create=True, size=4096); m.buf[0] = 7; print('posix', m.buf[0])\n"
      "m.close(); m.unlink()\n"
      "print('getpid', libc.syscall(39) == os.getpid())\n"
      "try:\n  os.memfd_create('x'); print('memfd made')\nexcept OSError as e: print('memfd', errno.errorcode[e.errno])\n";
  const SandboxResult r = run_sandboxed(cmd({"python3", "-c", program}), limits);
  ASSERT_TRUE(r.ok()) << to_string(r.status) << " " << r.error << r.output;
  EXPECT_NE(r.output.find("shmget -1 ENOSYS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("msgget -1 ENOSYS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("posix 7"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("getpid True"), std::string::npos) << r.output;  // other calls pass
  EXPECT_NE(r.output.find("memfd ENOSYS"), std::string::npos) << r.output;
  // Every call through the 32-bit entry (int 0x80; here getpid, number 20) is
  // refused, shmget through ipc() with it.
  const SandboxResult i386 = run_sandboxed(
      sh("printf 'int main(){int r;__asm__ volatile(\"int $0x80\":\"=a\"(r):\"a\"(20));return r==-38?0:1;}' > t.c && "
         "(cc -o t t.c 2>/dev/null || echo nocc) && (test -x t && ./t && echo refused)"),
      limits);
  if (i386.output.find("nocc") == std::string::npos) {
    EXPECT_NE(i386.output.find("refused"), std::string::npos) << i386.output;
  }
}

// A program not found is a start failure: nothing ran, and no test result
// may be made of it. A program cannot pass for one: bwrap's own words,
// printed alone before exit 1 (on its stdout, or on bwrap's descriptors
// through its init's /proc entry), are its output and its exit (a module
// that did so had its episode abandoned instead of scored 0).
TEST(Sandbox, OnlyAProgramThatNeverRanIsAStartFailure) {
  REQUIRE_SANDBOX();
  const SandboxResult r = run_sandboxed(cmd({"forge_no_such_program"}), own_users(8));
  EXPECT_EQ(r.status, SandboxStatus::kStartFailed) << to_string(r.status) << " " << r.output;
  EXPECT_NE(r.error.find("forge_no_such_program"), std::string::npos) << r.error;
  for (const char* line : {"echo 'bwrap: execvp /bin/sh: Read-only file system'; exit 1",
                           "echo 'bwrap: execvp /bin/sh: Resource temporarily unavailable' > /proc/1/fd/2; exit 1",
                           "echo \"bwrap: Can't fork for pid 1: Resource temporarily unavailable\" >&2; exit 1",
                           "echo 'bwrap: execvp /bin/sh: x' >&4; exit 1"}) {
    const SandboxResult mimic = run_sandboxed(sh(line), own_users(8));
    EXPECT_EQ(mimic.status, SandboxStatus::kExited) << line << ": " << to_string(mimic.status) << " " << mimic.error;
    EXPECT_EQ(mimic.exit_code, 1) << line;
  }
  const SandboxResult mimic = run_sandboxed(sh("echo 'bwrap: execvp /bin/sh: Read-only file system'; exit 1"), own_users(8));
  EXPECT_EQ(mimic.output, "bwrap: execvp /bin/sh: Read-only file system\n");
  // A shell builtin or keyword is no program (the trampoline's shell would
  // have run "cd" as one), nor is a name that starts with '-'.
  for (const char* name : {"cd", "if", "-x"}) {
    const SandboxResult builtin = run_sandboxed(cmd({name, "/tmp"}), own_users(8));
    EXPECT_EQ(builtin.status, SandboxStatus::kStartFailed) << name << ": " << to_string(builtin.status);
    EXPECT_NE(builtin.error.find(std::string("no program '") + name + "'"), std::string::npos) << builtin.error;
  }
  // The program's environment is bwrap's, the trampoline's shell adding
  // nothing (dash exported a PWD of its own).
  const SandboxResult env = run_sandboxed(cmd({"/usr/bin/env"}), own_users(8));
  ASSERT_TRUE(env.ok()) << to_string(env.status) << " " << env.error;
  std::vector<std::string> names;
  std::istringstream lines(env.output);
  for (std::string line; std::getline(lines, line);) names.push_back(line.substr(0, line.find('=')));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}))
      << env.output;
  // A fixed hash seed: a set of strings prints in the same order every run.
  std::set<std::string> orders;
  for (int i = 0; i < 4; ++i)
    orders.insert(run_sandboxed(cmd({"python3", "-c", "print(list({'alpha', 'beta', 'gamma', 'delta', 'eps'}))"}),
                                own_users(8))
                      .output);
  EXPECT_EQ(orders.size(), 1u) << *orders.begin();
  // A workspace file that is not executable is the program's failure.
  const SandboxResult plain = run_sandboxed({{"./run.sh"}, {{"run.sh", "#!/bin/sh\necho ran\n", false}}}, own_users(8));
  EXPECT_EQ(plain.status, SandboxStatus::kExited) << to_string(plain.status) << " " << plain.error;
  EXPECT_EQ(plain.exit_code, 126);
}

// bwrap's failures after it set the sandbox up, here its fork of the
// namespace's init refused at the process limit ("bwrap: Can't fork for pid
// 1: Resource temporarily unavailable": the user already runs max_procs
// tasks, bwrap the next, the limit is max_procs + 2), are start failures
// naming bwrap's reason, not the program's exit 1 (which a verifier scored
// 0 and the test-run cache kept for every later episode of the task).
TEST(Sandbox, AProcessLimitMetBeforeTheProgramIsAStartFailure) {
  REQUIRE_SANDBOX();
  if (geteuid() != 0) GTEST_SKIP() << "fills a sandbox user's process limit: needs root";
  SandboxLimits limits = own_users(12);
  limits.max_procs = 4;
  limits.wall_s = 20;
  // Processes of the sandbox's user outside the sandbox, as another run of
  // the same user would be.
  std::vector<pid_t> sleepers;
  for (int i = 0; i < limits.max_procs; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (::setresgid(limits.uid, limits.uid, limits.uid) != 0 || ::setresuid(limits.uid, limits.uid, limits.uid) != 0)
        ::_exit(1);
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(1);
    }
    sleepers.push_back(pid);
  }
  const SandboxResult r = run_sandboxed(sh("echo ran"), limits);
  for (pid_t pid : sleepers) ::kill(pid, SIGKILL);
  for (pid_t pid : sleepers) ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(r.status, SandboxStatus::kStartFailed) << to_string(r.status) << " " << r.output;
  EXPECT_NE(r.error.find("Resource temporarily unavailable"), std::string::npos) << r.error;
  // Once they are gone, the same run runs.
  const SandboxResult again = run_sandboxed(sh("echo ran"), limits);
  EXPECT_TRUE(again.ok()) << to_string(again.status) << " " << again.error;
}

// The fallback for kernels without close_range(CLOSE_RANGE_CLOEXEC): every
// descriptor from `low` up is marked, those below are left alone.
TEST(Sandbox, MarkCloseOnExecCoversEveryDescriptorFromLow) {
  int below[2], from[2];
  ASSERT_EQ(pipe(below), 0);
  ASSERT_EQ(pipe(from), 0);
  const int low = std::min(from[0], from[1]);
  ASSERT_GT(low, std::max(below[0], below[1]));
  ASSERT_TRUE(mark_close_on_exec_from(low));
  for (int fd : from) EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC) << fd;
  for (int fd : below) EXPECT_FALSE(fcntl(fd, F_GETFD) & FD_CLOEXEC) << fd;
  for (int fd : {below[0], below[1], from[0], from[1]}) close(fd);
}

TEST(Sandbox, StartFailuresAreResultsNotExceptions) {
  SandboxLimits limits;
  limits.bwrap = "/nonexistent/bwrap";
  const SandboxResult r = run_sandboxed(sh("true"), limits);
  EXPECT_EQ(r.status, SandboxStatus::kStartFailed);
  EXPECT_NE(r.error.find("bubblewrap"), std::string::npos) << r.error;
  EXPECT_FALSE(r.ok());
  // One that is there but cannot run says why (it asked whether bubblewrap
  // was installed whatever the reason).
  const std::string plain = ::testing::TempDir() + "/not_executable_bwrap_" + std::to_string(getpid());
  std::ofstream(plain) << "#!/bin/sh\n";
  limits.bwrap = plain.c_str();
  const SandboxResult denied = run_sandboxed(sh("true"), limits);
  EXPECT_EQ(denied.status, SandboxStatus::kStartFailed);
  EXPECT_NE(denied.error.find("could not execute bwrap: permission denied"), std::string::npos) << denied.error;
  std::remove(plain.c_str());
  for (const char* bad : {"../escape.py", "/etc/passwd", "a//b", "dir/", ""}) {
    const SandboxResult b = run_sandboxed(sh("true", {{bad, "x"}}), {});
    EXPECT_EQ(b.status, SandboxStatus::kStartFailed) << bad;
    EXPECT_NE(b.error.find("bad workspace path"), std::string::npos) << b.error;
  }
  EXPECT_EQ(run_sandboxed(cmd({}), {}).status, SandboxStatus::kStartFailed);
}

// No descriptor free from 10 up (the pipes move there, above the sandbox's
// 0-3): the run does not start. It started with forge's own 1-3 in place of
// the sandbox's, and bwrap wrote its JSON into the file of forge's at 3.
TEST(Sandbox, OutOfDescriptorsIsAStartFailureThatWritesNothingOfForges) {
  REQUIRE_SANDBOX();
  char path[] = "/tmp/forge-sandbox-fd-XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  ASSERT_LT(file, 10) << "the check needs forge's file among the descriptors the sandbox's pipes must avoid";
  ::unlink(path);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 10;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const SandboxResult r = run_sandboxed(sh("echo ran"), {});
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_EQ(r.status, SandboxStatus::kStartFailed) << r.output;
  EXPECT_NE(r.error.find("above descriptor 10"), std::string::npos) << r.error;
  struct stat st {};
  ASSERT_EQ(fstat(file, &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the sandbox wrote into descriptor " << file << " of forge's";
  ::close(file);
}

TEST(SandboxPool, RunsAtMostConcurrencyAtOnceEachAsItsOwnUser) {
  REQUIRE_SANDBOX();
  SandboxPool pool(2, own_users(5));
  std::vector<std::future<SandboxResult>> runs;
  for (int i = 0; i < 6; ++i) runs.push_back(pool.submit(sh("sleep 0.2; id -u")));
  std::set<std::string> users;
  for (auto& f : runs) {
    const SandboxResult r = f.get();
    EXPECT_TRUE(r.ok()) << r.error << r.output;
    users.insert(r.output);
  }
  const SandboxPool::Stats s = pool.stats();
  EXPECT_EQ(s.runs, 6u);
  EXPECT_EQ(s.max_running, 2);
  if (geteuid() == 0) {
    EXPECT_EQ(users, (std::set<std::string>{std::to_string(pool.limits().uid) + "\n",
                                            std::to_string(pool.limits().uid + 1) + "\n"}));
  }
  EXPECT_THROW(SandboxPool(0, {}), InputError);
}

// stop_queueing: the queued runs resolve at once as start failures naming
// why, the run in progress ends as it would, and a later submit is refused
// at once (a stopping environment rank waits for one run, not a queue).
TEST(SandboxPool, StopQueueingRefusesQueuedAndLaterRuns) {
  REQUIRE_SANDBOX();
  SandboxPool pool(1, own_users(9));
  std::vector<std::future<SandboxResult>> runs;
  runs.push_back(pool.submit(sh("sleep 0.5; echo done")));
  for (int i = 0; i < 3; ++i) runs.push_back(pool.submit(sh("echo queued")));
  pool.stop_queueing("the rank is stopping");
  for (size_t i = 1; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].wait_for(std::chrono::seconds(0)), std::future_status::ready) << i;
    const SandboxResult r = runs[i].get();
    EXPECT_EQ(r.status, SandboxStatus::kStartFailed);
    EXPECT_EQ(r.error, "the rank is stopping");
  }
  std::future<SandboxResult> later = pool.submit(sh("echo later"));
  ASSERT_EQ(later.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(later.get().status, SandboxStatus::kStartFailed);
  const SandboxResult first = runs[0].get();
  // The first run either had started (it finishes) or was still queued when
  // the pool stopped queueing (refused): never lost.
  if (first.status == SandboxStatus::kExited) {
    EXPECT_EQ(first.output, "done\n");
  } else {
    EXPECT_EQ(first.error, "the rank is stopping");
  }
}

TEST(SandboxPool, AThousandRunsLeaveNothingBehind) {
  REQUIRE_SANDBOX();
  const auto fds = list_dir("/proc/self/fd").size();
  const auto tmp = list_dir("/tmp");
  const auto shm = list_dir("/dev/shm");
  SandboxLimits limits = own_users(6);
  limits.wall_s = 0.6;  // ~25x an ordinary run's 24 ms here: the 940 must pass on a loaded machine too
  limits.max_procs = 16;
  limits.output_kb = 4;
  SandboxPool::Stats stats;
  {
    SandboxPool pool(2, limits);
    std::vector<std::future<SandboxResult>> runs;
    for (int i = 0; i < 1000; ++i) {
      const int kind = i % 50;
      if (kind == 0) runs.push_back(pool.submit(sh("sleep 100 & sleep 100")));     // killed at the deadline
      else if (kind == 1) runs.push_back(pool.submit(sh("f() { f | f & }; f; sleep 100")));  // fork bomb
      else if (kind == 2) runs.push_back(pool.submit(cmd({"yes"})));                  // runaway output
      else runs.push_back(pool.submit(sh("echo x > f; cat f > /tmp/g", {{"in.txt", "data"}})));
    }
    size_t ok = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      const SandboxResult r = runs[i].get();
      ok += r.ok();
      if (!r.ok() && i % 50 > 2) ADD_FAILURE() << "run " << i << ": " << to_string(r.status) << " " << r.error << r.output;
    }
    EXPECT_EQ(ok, 940u);
    stats = pool.stats();
  }
  EXPECT_EQ(stats.runs, 1000u);
  EXPECT_GE(stats.timed_out, 40u);  // sleep and yes; a fork bomb may also fail to fork its sleep
  EXPECT_EQ(stats.start_failed, 0u);
  EXPECT_EQ(stray_processes({limits.uid, limits.uid + 1}), std::vector<std::string>{});
  EXPECT_EQ(list_dir("/proc/self/fd").size(), fds);
  // Other tests may write /tmp meanwhile: what counts is what the sandboxes'
  // users own or what is named after them.
  EXPECT_EQ(new_entries("/tmp", tmp, {limits.uid, limits.uid + 1}), std::vector<std::string>{});
  EXPECT_EQ(new_entries("/dev/shm", shm, {limits.uid, limits.uid + 1}), std::vector<std::string>{});
}

}  // namespace
}  // namespace forge
