#include "mpi_roles/mpi_runtime.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "learner/run_folder.hpp"

namespace forge {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Error("MPI_Init_thread failed");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw Error("the MPI library does not provide MPI_THREAD_MULTIPLE (the watchdog thread needs it)");
  }
}

MpiRuntime::~MpiRuntime() { MPI_Finalize(); }

void abort_job(const std::string& who, const std::string& message, int code) {
  std::fprintf(stderr, "forge: %s: %s\n", who.c_str(), message.c_str());
  std::fflush(stderr);
  remove_unused_run_folders();  // a run refused before its first write leaves no folder
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace forge
