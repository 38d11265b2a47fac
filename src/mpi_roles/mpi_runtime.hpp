// MPI start-up for the forge executable. A command initialises MPI only when
// a launcher started it (mpirun/mpiexec of Open MPI, or srun --mpi=pmix), so a
// plain `forge train` stays a single process without MPI's singleton start.
// forge needs MPI_THREAD_MULTIPLE: the watchdog thread issues RMA while the
// main thread works.
#pragma once
#include <string>

namespace forge {

// True when the environment shows an MPI launcher (OMPI_COMM_WORLD_SIZE,
// PMIX_RANK or PMI_RANK).
bool launched_by_mpi();

class MpiRuntime {
 public:
  // MPI_Init_thread(MPI_THREAD_MULTIPLE); Error if the library cannot.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();  // MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  int rank_ = 0, world_ = 1;
};

// Prints "forge: <role rank>: <message>" on stderr and aborts the whole job
// with `code` (MPI_Abort on MPI_COMM_WORLD). Never returns.
[[noreturn]] void abort_job(const std::string& who, const std::string& message, int code);

}  // namespace forge
