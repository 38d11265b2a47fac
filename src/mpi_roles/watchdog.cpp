#include "mpi_roles/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "mpi_roles/mpi_runtime.hpp"

namespace forge {

Watchdog::Watchdog(MPI_Comm comm, const RoleLayout& layout, double deadline_s, double period_s)
    : comm_(comm), layout_(layout), deadline_s_(deadline_s), period_s_(period_s) {
  MPI_Comm_rank(comm, &rank_);
  int64_t* base = nullptr;  // [0] the heartbeat counter, [1] the shutdown word
  if (MPI_Win_allocate(2 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, comm, &base, &win_) != MPI_SUCCESS)
    throw Error("watchdog: MPI_Win_allocate failed");
  base[0] = base[1] = 0;
  MPI_Win_lock_all(0, win_);
  MPI_Win_sync(win_);  // the local store is the window's (separate memory model)
  MPI_Barrier(comm);   // every counter is zero before anyone reads it
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  MPI_Win_unlock_all(win_);
  MPI_Win_free(&win_);
}

void Watchdog::mark_shutdown(int64_t stage) {
  MPI_Accumulate(&stage, 1, MPI_INT64_T, rank_, 1, 1, MPI_INT64_T, MPI_REPLACE, win_);
  MPI_Win_flush(rank_, win_);
}

std::string Watchdog::shutdown_laggards() {
  std::string out;
  for (int r = 0; r < layout_.world(); ++r) {
    int64_t stage = 0;
    MPI_Fetch_and_op(nullptr, &stage, MPI_INT64_T, r, 1, MPI_NO_OP, win_);
    MPI_Win_flush(r, win_);
    if (stage >= 2) continue;
    out += (out.empty() ? "" : ", ") + layout_.name(r) +
           (stage == 1 ? " (at the barrier, its own messages undelivered)" : " (not at the barrier)");
  }
  return out;
}

Watchdog::WatchedWait::WatchedWait(Watchdog* watchdog, std::string what, std::vector<int> peers,
                                   std::optional<Deadline> deadline)
    : watchdog_(watchdog) {
  if (!watchdog_) return;
  std::lock_guard lock(watchdog_->wait_mu_);
  watchdog_->wait_what_ = std::move(what);
  watchdog_->wait_peers_ = std::move(peers);
  watchdog_->wait_deadline_ = deadline.value_or(Deadline{watchdog_->deadline_s_, "mpi.deadline_s"});
  watchdog_->wait_since_ns_ = active_ns();
}

Watchdog::WatchedWait::~WatchedWait() {
  if (!watchdog_) return;
  std::lock_guard lock(watchdog_->wait_mu_);
  watchdog_->wait_since_ns_ = -1;
}

void Watchdog::progress(const char* stage) {
  progress_stage_ = stage;
  progress_since_ns_ = active_ns();
}

void Watchdog::check_progress(int64_t now_ns) {
  const int64_t since = progress_since_ns_;
  if (since < 0) return;
  const double lasted = static_cast<double>(now_ns - since) * 1e-9;
  if (lasted <= progress_deadline_s_) return;
  char figures[160];
  std::snprintf(figures, sizeof figures, " has lasted %.1f s (mpi.progress_deadline_s = %g)", lasted,
                progress_deadline_s_.load());
  abort_job(layout_.name(rank_),
            std::string("watchdog: ") + progress_stage_.load() + figures +
                ": this rank is alive but stuck (in I/O on a hung file system, a hung device call, ...); aborting "
                "the job",
            3);
}

void Watchdog::check_wait(int64_t now_ns) {
  std::lock_guard lock(wait_mu_);
  if (wait_since_ns_ < 0) return;
  const double waited = static_cast<double>(now_ns - wait_since_ns_) * 1e-9;
  if (waited <= wait_deadline_.seconds) return;
  std::string peers;
  for (int r : wait_peers_) peers += (peers.empty() ? "" : ", ") + layout_.name(r);
  char figures[96];
  std::snprintf(figures, sizeof figures, " has waited %.1f s for ", waited);
  char deadline[96];
  std::snprintf(deadline, sizeof deadline, " (%s = %g)", wait_deadline_.key, wait_deadline_.seconds);
  abort_job(layout_.name(rank_),
            "watchdog: " + wait_what_ + figures + peers + deadline +
                ": one of them is stuck, stopped or dead (one alive but stuck keeps its heartbeat, which no other "
                "check sees); aborting the job",
            3);
}

void Watchdog::loop() {
  std::vector<int> peers;
  const int world = layout_.world();
  if (world > 1) peers.push_back((rank_ + 1) % world);
  if (rank_ != 0 && (rank_ + 1) % world != 0) peers.push_back(0);
  std::vector<int64_t> last(peers.size(), -1);
  std::vector<int64_t> moved(peers.size(), active_ns());  // on the active clock
  const int64_t one = 1;
  // This thread is the process's ticker of the active clock (core/timer.hpp):
  // a stop of the process (a whole-job suspend; every rank's watchdog sees
  // its own) is left out of every deadline, and no peer is blamed for it:
  // their counters could not move while it lasted (nor be read): the peers'
  // silence restarts when a beat left time out after one that did not (a
  // beat late every time, a starved thread, must not forgive them forever).
  double left_out_seen = left_out_seconds();
  bool late_before = false;
  while (!stop_) {
    int64_t old = 0, seen = 0;
    tick(period_s_);
    MPI_Fetch_and_op(&one, &old, MPI_INT64_T, rank_, 0, MPI_SUM, win_);
    MPI_Win_flush(rank_, win_);
    const int64_t now = active_ns();
    const double left_out = left_out_seconds();
    const bool late = left_out != left_out_seen;  // this beat came late: time was left out
    if (late && !late_before) std::fill(moved.begin(), moved.end(), now);
    check_wait(now);
    check_progress(now);
    left_out_seen = left_out;
    late_before = late;
    for (size_t i = 0; i < peers.size(); ++i) {
      MPI_Fetch_and_op(nullptr, &seen, MPI_INT64_T, peers[i], 0, MPI_NO_OP, win_);
      MPI_Win_flush(peers[i], win_);
      if (seen != last[i]) {
        last[i] = seen;
        moved[i] = active_ns();
        continue;
      }
      const double quiet = static_cast<double>(now - moved[i]) * 1e-9;
      if (quiet > deadline_s_) {
        char msg[256];
        std::snprintf(msg, sizeof msg,
                      "watchdog: no heartbeat from %s for %.1f s (dead or stopped; mpi.deadline_s = %g); "
                      "aborting the job",
                      layout_.name(peers[i]).c_str(), quiet, deadline_s_);
        abort_job(layout_.name(rank_), msg, 3);
      }
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(period_s_));
  }
}

}  // namespace forge
