// The watchdog's shutdown words (watchdog.hpp), which let a final barrier
// that does not complete name the ranks it waits for: before any rank is at
// the barrier every rank lags ("not at the barrier"); a rank at the barrier
// whose own messages are undelivered is named so; quiesce marks every rank
// that joined, after which none lags. Needs 3 ranks (a role layout's least).
//
// Watched waits (DISABLED_: run alone by the ctest entry mpi_watched_wait,
// which expects the job to end with the watchdog's message): a watched
// barrier every rank reaches in time ends quietly, also when the deadline
// passes after it; one whose peers are alive but do not come ends the job
// within the deadline, naming the wait and the peers.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/watchdog.hpp"

namespace forge {
namespace {

TEST(WatchdogShutdown, NamesTheRanksNotAtTheBarrier) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 3) GTEST_SKIP() << "a role layout needs 3 ranks";
  const RoleLayout layout(world, RoleCounts{});
  Watchdog dog(MPI_COMM_WORLD, layout, 60);
  // No rank has marked yet: none passes the barrier below before all read.
  const std::string before = dog.shutdown_laggards();
  for (int r = 0; r < world; ++r)
    EXPECT_NE(before.find(layout.name(r) + " (not at the barrier)"), std::string::npos) << before;
  MPI_Barrier(MPI_COMM_WORLD);
  dog.mark_shutdown(rank == world - 1 ? 1 : 2);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(dog.shutdown_laggards(), layout.name(world - 1) + " (at the barrier, its own messages undelivered)");
  MPI_Barrier(MPI_COMM_WORLD);
  SendQueue sends;
  quiesce(MPI_COMM_WORLD, sends, 60, &dog);  // every rank marks 2 before it joins
  EXPECT_EQ(dog.shutdown_laggards(), "");
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(WatchedWait, DISABLED_AStuckPeerEndsTheJob) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 3) GTEST_SKIP() << "a role layout needs 3 ranks";
  const RoleLayout layout(world, RoleCounts{});
  // 4 s: a loaded 2-core machine may starve a rank's watchdog thread for a
  // second (its heartbeat would then be the job's end, not this wait).
  Watchdog dog(MPI_COMM_WORLD, layout, /*deadline_s=*/4.0, /*period_s=*/0.25);
  std::vector<int> others;
  for (int r = 0; r < world; ++r)
    if (r != rank) others.push_back(r);
  {
    const Watchdog::WatchedWait watched(&dog, "the quick barrier", others);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::this_thread::sleep_for(std::chrono::seconds(5));  // past the deadline: the wait has ended
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    const Watchdog::WatchedWait watched(&dog, "the stuck barrier", {1});
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));  // alive (heartbeats go on), not coming
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ADD_FAILURE() << "the watchdog did not end the job";
}

// A stage of rank 0's work past the progress deadline ends the job, naming
// the stage, though every heartbeat goes on (alive but stuck); stages that
// end in time, and a stage after progress_done(), do not.
TEST(WatchdogProgress, DISABLED_AStuckStageEndsTheJob) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 3) GTEST_SKIP() << "a role layout needs 3 ranks";
  const RoleLayout layout(world, RoleCounts{});
  Watchdog dog(MPI_COMM_WORLD, layout, /*deadline_s=*/30.0, /*period_s=*/0.25);
  dog.set_progress_deadline(3.0);
  if (rank == 0) {
    for (int i = 0; i < 8; ++i) {  // 4 s of stages, each in time
      dog.progress("a quick stage");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    dog.progress_done();
    std::this_thread::sleep_for(std::chrono::seconds(5));  // past the deadline, unwatched
    dog.progress("the stuck stage");
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));  // every rank alive, rank 0 stuck
  ADD_FAILURE() << "the watchdog did not end the job";
}

}  // namespace
}  // namespace forge
