#include "sandbox/sandbox_pool.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/host_resources.hpp"

namespace forge {
namespace {

// One user per worker on the whole node: the ranks of a node take their
// turns from sandbox.uid, so RLIMIT_NPROC (per user) never couples two
// sandboxes, not even of two ranks.
SandboxLimits with_node_users(SandboxLimits limits, int concurrency) {
  limits.uid += node_local_rank() * concurrency;
  return limits;
}

}  // namespace

// A run that never starts: kStartFailed, naming why.
void SandboxPool::refuse(Job& job, const std::string& why) {
  SandboxResult r;
  r.error = why;
  job.done.set_value(std::move(r));
}

SandboxPool::SandboxPool(int concurrency, SandboxLimits limits)
    : limits_(with_node_users(std::move(limits), concurrency)) {
  if (concurrency < 1) throw InputError("sandbox.concurrency must be at least 1 (got " + std::to_string(concurrency) + ")");
  for (int i = 0; i < concurrency; ++i) workers_.emplace_back([this, i] { work(i); });
}

SandboxPool::~SandboxPool() {
  std::deque<Job> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  ready_.notify_all();
  for (Job& job : dropped) refuse(job, "the sandbox pool stopped");
  for (std::thread& t : workers_) t.join();
}

std::future<SandboxResult> SandboxPool::submit(SandboxRequest request) {
  Job job{std::move(request), {}};
  std::future<SandboxResult> f = job.done.get_future();
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Error("SandboxPool::submit after the pool stopped");
    if (not_queueing_.empty()) queue_.push_back(std::move(job));
    else refused = not_queueing_;
  }
  if (refused.empty()) ready_.notify_one();
  else refuse(job, refused);
  return f;
}

void SandboxPool::stop_queueing(const std::string& why) {
  std::deque<Job> dropped;
  const std::string reason = why.empty() ? "the sandbox pool stopped queueing" : why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    not_queueing_ = reason;
    dropped.swap(queue_);
  }
  for (Job& job : dropped) refuse(job, reason);
}

SandboxPool::Stats SandboxPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void SandboxPool::work(int index) {
  const int uid = limits_.uid + index;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
      stats_.max_running = std::max(stats_.max_running, running_);
    }
    SandboxResult r = run_sandboxed(job.request, limits_, uid);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      ++stats_.runs;
      if (r.status == SandboxStatus::kTimedOut) ++stats_.timed_out;
      if (r.status == SandboxStatus::kStartFailed) ++stats_.start_failed;
    }
    job.done.set_value(std::move(r));
  }
}

}  // namespace forge
