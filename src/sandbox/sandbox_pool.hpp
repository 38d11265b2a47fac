// A pool of sandboxes for one process (an environment rank): up to
// `concurrency` run at once, each on its own worker thread and its own
// sandbox user (limits.uid + node-local rank x concurrency + worker index,
// when forge runs as root, so that one sandbox's fork bomb meets its own
// process limit, not the others' on the node); the
// rest wait in a FIFO queue. submit() never blocks: the caller gets a future
// and goes on with other episodes. Every run ends by its deadline, so a
// future resolves within (queue wait + limits.wall_s); the destructor waits
// for the runs in progress and resolves the queued ones as kStartFailed
// ("the sandbox pool stopped"). stop_queueing(why) does the latter at once
// and resolves every later submit so too (a rank that is stopping waits
// only for the runs in progress, not for a queue of runs nobody will read).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/sandbox.hpp"

namespace forge {

class SandboxPool {
 public:
  SandboxPool(int concurrency, SandboxLimits limits);
  ~SandboxPool();
  SandboxPool(const SandboxPool&) = delete;
  SandboxPool& operator=(const SandboxPool&) = delete;

  std::future<SandboxResult> submit(SandboxRequest request);
  // Queued runs and every later submit resolve as kStartFailed with `why`.
  void stop_queueing(const std::string& why);

  struct Stats {
    uint64_t runs = 0;            // finished runs
    uint64_t timed_out = 0;
    uint64_t start_failed = 0;
    int max_running = 0;          // most runs at once, ever
  };
  Stats stats() const;
  int concurrency() const { return static_cast<int>(workers_.size()); }
  const SandboxLimits& limits() const { return limits_; }

 private:
  struct Job {
    SandboxRequest request;
    std::promise<SandboxResult> done;
  };
  void work(int index);
  static void refuse(Job& job, const std::string& why);

  const SandboxLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::string not_queueing_;  // stop_queueing's reason; "" while queueing
  int running_ = 0;
  Stats stats_;
  std::vector<std::thread> workers_;
};

}  // namespace forge
