// The learners' weight agreement (mpi_roles/learner_agreement.hpp) on every
// rank of the job, as learners: equal hashes pass; a rank whose hash differs
// (the last one, then every other one) is named by its world rank in the
// lead's error, and only the lead raises it. The hash sees one bit of one
// float, and a trailing partial word. Learners starting at different steps
// are named the same way.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "mpi_roles/learner_agreement.hpp"

namespace forge {
namespace {

TEST(LearnerAgreement, HashSeesEveryBit) {
  std::vector<float> w(1001, 0.25f);
  const uint64_t h = parameter_hash(w.data(), w.size() * sizeof(float));
  EXPECT_EQ(h, parameter_hash(w.data(), w.size() * sizeof(float)));
  uint32_t bits = 0;
  std::memcpy(&bits, &w[1000], 4);
  bits ^= 1;  // the last float, in the trailing half word
  std::memcpy(&w[1000], &bits, 4);
  EXPECT_NE(h, parameter_hash(w.data(), w.size() * sizeof(float)));
  EXPECT_NE(h, parameter_hash(w.data(), 1000 * sizeof(float)));
}

TEST(LearnerAgreement, TheLeadNamesTheLearnersThatDiffer) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_NO_THROW(check_learners_agree(MPI_COMM_WORLD, 42, 7));

  const auto outcome = [&](uint64_t hash) {
    try {
      check_learners_agree(MPI_COMM_WORLD, hash, 7);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string last = outcome(rank == size - 1 ? 43 : 42);
  std::string odd_ranks;
  for (int r = 1; r < size; r += 2) odd_ranks += (odd_ranks.empty() ? "" : ", ") + std::to_string(r);
  const std::string odd = outcome(rank % 2 ? 43 : 42);
  if (rank == 0) {
    EXPECT_NE(last.find("learner rank(s) " + std::to_string(size - 1) + " differ from the lead's after step 7"),
              std::string::npos)
        << last;
    EXPECT_NE(odd.find("learner rank(s) " + odd_ranks + " differ"), std::string::npos) << odd;
  } else {
    EXPECT_EQ(last, "");
    EXPECT_EQ(odd, "");
  }
}

// Learners that resume at different steps (each found its own newest
// checkpoint) are named by the lead, with their steps.
TEST(LearnerAgreement, TheLeadNamesLearnersThatStartElsewhere) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_NO_THROW(check_learners_start_together(MPI_COMM_WORLD, 12));
  std::string error;
  try {
    check_learners_start_together(MPI_COMM_WORLD, rank == size - 1 ? 8 : 12);
  } catch (const Error& e) {
    error = e.what();
  }
  if (rank == 0 && size > 1)
    EXPECT_NE(error.find("learner rank(s) " + std::to_string(size - 1) + " at step 8 start elsewhere than the lead, "
                         "at step 12"),
              std::string::npos)
        << error;
  else
    EXPECT_EQ(error, "");
}

}  // namespace
}  // namespace forge
