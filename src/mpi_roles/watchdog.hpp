// The watchdog: a thread per rank that proves this rank alive and checks its
// peers, so that a dead or stalled rank ends the job within a deadline with a
// message that names it by role and rank, instead of a silent hang.
//
// Protocol. Each rank hosts one int64 heartbeat counter in a window
// (MPI_Win_allocate, passive target, MPI_Win_lock_all). Every period the
// thread increments its own counter (MPI_Fetch_and_op SUM on itself) and reads
// the counters of the ranks it watches (Fetch_and_op NO_OP, flush): its ring
// successor (rank + 1 mod world) and rank 0, the learner that hosts the data
// pool. A watched counter that has not moved for deadline seconds of this
// rank's clock means the peer is dead or stopped (SIGKILL, SIGSTOP, a hung
// node); the watchdog prints
//   forge: <me>: watchdog: no heartbeat from <role> rank <r> for <t> s ...
// and calls MPI_Abort, which ends every rank. Every rank is watched by its
// predecessor, so any single failure is caught.
//
// The heartbeat shows the process is scheduled, not that it makes progress.
// Waits for a generation result and for the learner's next group have their
// own deadlines in the roles; the learners' collective sums (gradients, loss
// denominators, the agreement hash, the start step) and learner 0's side of
// each batch's broadcast, which the learners reach after the same work (as
// far as their shards weigh the same), are watched waits: a thread blocked in one longer than the
// deadline makes this thread end the job, naming the other learners (one of
// them is alive but stuck, e.g. in a hung GPU kernel: its heartbeat goes
// on). An environment rank waiting for admission and the learners waiting
// for learner 0's batch rely on learner 0 being alive; learner 0 alive but
// stuck (in I/O on a hung file system, a hung device call) is caught by its
// own watchdog thread: its main thread reports progress() at each stage of
// its loop, and one stage past the progress deadline (mpi.progress_deadline_s)
// ends the job, naming the stage. Needs MPI_THREAD_MULTIPLE.
//
// Shutdown. Beside its counter each rank hosts a shutdown word: 0 while it
// runs, 1 once it is at the final barrier (quiesce) draining its messages, 2
// once it has joined the barrier. A barrier that does not complete within
// its deadline names, from these words, the ranks it waits for.
#pragma once
#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mpi_roles/role_layout.hpp"

namespace forge {

class Watchdog {
 public:
  // Collective over comm (window allocation); starts the thread.
  Watchdog(MPI_Comm comm, const RoleLayout& layout, double deadline_s, double period_s = 0.25);
  // Stops the thread, then frees the window (collective).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // This rank's shutdown word (1: at the barrier, draining; 2: joined it).
  void mark_shutdown(int64_t stage);
  // The ranks whose shutdown word is below 2, by role and rank, and why
  // ("environment rank 2 (not at the barrier)"); "" when none.
  std::string shutdown_laggards();

  // This rank's main thread begins `stage` (a string literal) of its work:
  // from the first call, a stage that lasts past `progress_deadline_s`
  // ends the job naming it, until progress_done(). Any thread may call it.
  void progress(const char* stage);
  void progress_done() { progress_since_ns_ = -1; }
  void set_progress_deadline(double seconds) { progress_deadline_s_ = seconds; }

  // A blocking wait on `peers` (world ranks) that reach it after the same
  // work as this rank, watched while the guard lives: past the deadline the
  // watchdog thread ends the job, naming `what` and the peers. One at a time
  // per rank; a null watchdog watches nothing. `deadline` (with the key that
  // sets it): another than the watchdog's, for a wait its peers reach after
  // work of their own that may take longer (loading a model).
  struct Deadline {
    double seconds;
    const char* key;
  };
  class WatchedWait {
   public:
    WatchedWait(Watchdog* watchdog, std::string what, std::vector<int> peers,
                std::optional<Deadline> deadline = std::nullopt);
    ~WatchedWait();
    WatchedWait(const WatchedWait&) = delete;
    WatchedWait& operator=(const WatchedWait&) = delete;

   private:
    Watchdog* watchdog_;
  };

 private:
  void loop();
  void check_wait(int64_t now_ns);  // aborts the job when the watched wait is past the deadline
  void check_progress(int64_t now_ns);  // aborts the job when a stage is past the progress deadline

  MPI_Comm comm_;
  RoleLayout layout_;
  double deadline_s_, period_s_;
  int rank_ = 0;
  MPI_Win win_ = MPI_WIN_NULL;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex wait_mu_;  // the watched wait: what, on whom, since when (-1: none)
  std::string wait_what_;
  std::vector<int> wait_peers_;
  Deadline wait_deadline_{0, ""};
  int64_t wait_since_ns_ = -1;
  std::atomic<int64_t> progress_since_ns_{-1};  // the stage's start on the active clock; -1: not watched
  std::atomic<const char*> progress_stage_{nullptr};
  std::atomic<double> progress_deadline_s_{1800};
};

}  // namespace forge
