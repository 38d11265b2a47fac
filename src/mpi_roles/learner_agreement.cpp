#include "mpi_roles/learner_agreement.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace forge {

uint64_t parameter_hash(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t at = 0; at < bytes; at += 8) {
    uint64_t w = 0;
    std::memcpy(&w, p + at, std::min<size_t>(8, bytes - at));
    h = (h ^ w) * 0x100000001b3ull;
  }
  return h;
}

uint64_t parameter_hash(PolicyModel& model) {
  const float* params = std::as_const(model).params();  // const: the bf16 copy stays valid
  const size_t bytes = model.layout().total * sizeof(float);
  if (model.backend().host_memory()) return parameter_hash(params, bytes);
  std::vector<float> host(model.layout().total);
  model.backend().to_host(host.data(), params, bytes);
  return parameter_hash(host.data(), bytes);
}

void check_learners_agree(MPI_Comm learners, uint64_t hash, int steps_done) {
  int rank = 0, size = 1, world_rank = 0;
  MPI_Comm_rank(learners, &rank);
  MPI_Comm_size(learners, &size);
  if (size < 2) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const uint64_t mine[2] = {hash, static_cast<uint64_t>(world_rank)};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size));
  MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, learners);
  if (rank != 0) return;
  std::string differ;
  for (size_t r = 1; r < static_cast<size_t>(size); ++r)
    if (all[2 * r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(all[2 * r + 1]);
  if (!differ.empty())
    throw Error("the weights of learner rank(s) " + differ + " differ from the lead's after step " +
                std::to_string(steps_done) + " (each applies the same summed gradient to the same weights, so something computed " +
                "differently on them: learners on different CPU types, a non-deterministic reduction)");
}

void check_learners_start_together(MPI_Comm learners, int64_t start_step) {
  int rank = 0, size = 1, world_rank = 0;
  MPI_Comm_rank(learners, &rank);
  MPI_Comm_size(learners, &size);
  if (size < 2) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int64_t mine[2] = {start_step, world_rank};
  std::vector<int64_t> all(2 * static_cast<size_t>(size));
  MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, learners);
  if (rank != 0) return;
  std::string differ;
  for (size_t r = 1; r < static_cast<size_t>(size); ++r)
    if (all[2 * r] != all[0])
      differ += (differ.empty() ? "" : ", ") + std::to_string(all[2 * r + 1]) + " at step " + std::to_string(all[2 * r]);
  if (!differ.empty())
    throw Error("learner rank(s) " + differ + " start elsewhere than the lead, at step " + std::to_string(all[0]) +
                " (each resumes from the newest checkpoint it sees in run.dir: run.dir must be one folder every "
                "learner's node shares)");
}

}  // namespace forge
