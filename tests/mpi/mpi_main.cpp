// main of the MPI tests: MPI_Init, GoogleTest on every rank, MPI_Finalize.
// Rank 0 prints the usual report; other ranks print only their failures,
// prefixed with the rank. The exit code is non-zero on every rank when a test
// failed on any rank (mpirun then exits non-zero). A fatal failure (ASSERT_*)
// aborts the whole job after it is printed: the rank that leaves its test
// early would otherwise leave the others waiting at the test's next barrier
// until ctest's timeout.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

// Appended after the printers, so the failure is on stderr first.
class AbortOnFatalFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFatalFailure(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.fatally_failed()) return;
    std::fprintf(stderr, "[rank %d] fatal failure: aborting the MPI job\n", rank_);
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  // Full thread support, as forge itself requires (mpi_runtime.cpp): the
  // watchdog's thread makes one-sided calls beside the main thread's.
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "forge_mpi_tests: MPI gives thread level %d, not MPI_THREAD_MULTIPLE\n", provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  ::testing::UnitTest::GetInstance()->listeners().Append(new AbortOnFatalFailure(rank));
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed)
    std::fprintf(stderr, "FAILED on another rank (see the [rank r] lines above)\n");
  MPI_Finalize();
  return any_failed;
}
