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

namespace {

// Collective over learners: each gives `value`. On the lead, the learners
// (world rank, value) whose value differs from its own; elsewhere (and with
// one learner) nothing.
std::vector<std::pair<int64_t, int64_t>> differing_from_lead(MPI_Comm learners, int64_t value, int64_t* lead_value) {
  int rank = 0, size = 1, world_rank = 0;
  MPI_Comm_rank(learners, &rank);
  MPI_Comm_size(learners, &size);
  if (size < 2) return {};
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int64_t mine[2] = {value, world_rank};
  std::vector<int64_t> all(2 * static_cast<size_t>(size));
  MPI_Allgather(mine, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, learners);
  if (rank != 0) return {};
  *lead_value = all[0];
  std::vector<std::pair<int64_t, int64_t>> differ;
  for (size_t r = 1; r < static_cast<size_t>(size); ++r)
    if (all[2 * r] != all[0]) differ.emplace_back(all[2 * r + 1], all[2 * r]);
  return differ;
}

}  // namespace

void check_learners_agree(MPI_Comm learners, uint64_t hash, int steps_done) {
  int64_t lead = 0;
  std::string differ;
  for (const auto& [world_rank, h] : differing_from_lead(learners, static_cast<int64_t>(hash), &lead))
    differ += (differ.empty() ? "" : ", ") + std::to_string(world_rank);
  if (!differ.empty())
    throw Error("the weights of learner rank(s) " + differ + " differ from the lead's after step " +
                std::to_string(steps_done) + " (each applies the same summed gradient to the same weights, so something computed " +
                "differently on them: learners on different CPU types, a non-deterministic reduction)");
}

void check_learners_start_together(MPI_Comm learners, int64_t start_step) {
  int64_t lead = 0;
  std::string differ;
  for (const auto& [world_rank, step] : differing_from_lead(learners, start_step, &lead))
    differ += (differ.empty() ? "" : ", ") + std::to_string(world_rank) + " at step " + std::to_string(step);
  if (!differ.empty())
    throw Error("learner rank(s) " + differ + " start elsewhere than the lead, at step " + std::to_string(lead) +
                " (each resumes from the newest checkpoint it sees in run.dir: run.dir must be one folder every "
                "learner's node shares)");
}

}  // namespace forge
