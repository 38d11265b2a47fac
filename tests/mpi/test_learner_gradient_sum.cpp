// The learners' gradient sum (mpi_roles/learner_gradient_sum.hpp) on every
// rank of the job: on the cpu backend (MPI_Allreduce) always; on the cuda
// backend (NCCL, bootstrapped over MPI) where each rank of the node has a GPU
// of its own, else skipped with the reason. Also the device broadcast of the
// cuda backend's collectives (NCCL).
// Each rank's gradient is distinct, so a missing or doubled rank shows.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_registry.hpp"
#include "backend/device_array.hpp"
#include "mpi_roles/learner_gradient_sum.hpp"
#ifdef FORGE_WITH_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace forge {
namespace {

constexpr size_t kFloats = 100003;

float gradient_of(int rank, size_t i) { return static_cast<float>((rank + 1) * 0.5 + std::sin(double(i))); }

void expect_summed(Backend& backend) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<float> host(kFloats);
  for (size_t i = 0; i < kFloats; ++i) host[i] = gradient_of(rank, i);
  DeviceArray<float> grads;
  grads.upload(backend, host);
  LearnerGradientSum sum(MPI_COMM_WORLD, backend);
  sum(grads.data(), kFloats);
  const std::vector<float> got = grads.download();
  double worst = 0;
  for (size_t i = 0; i < kFloats; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += gradient_of(r, i);
    worst = std::max(worst, std::abs(got[i] - want) / std::max(std::abs(want), 1.0));
  }
  EXPECT_LE(worst, 1e-6) << backend.name() << " on rank " << rank;
}

TEST(LearnerGradientSum, CpuBackendSumsOverRanks) {
  auto cpu = make_backend("cpu");
  expect_summed(*cpu);
}

// Every rank of the node needs a device of its own; the ranks agree on it.
std::string why_no_gpu_per_rank() {
#ifdef FORGE_WITH_CUDA
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  const int ok = cuda::visible_cuda_devices() >= local_ranks ? 1 : 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all_ok ? "" : "fewer CUDA devices than ranks on a node";
#else
  return "built without CUDA";
#endif
}

TEST(LearnerGradientSum, CudaBackendSumsOverRanksWithNccl) {
  const std::string why = why_no_gpu_per_rank();
  if (!why.empty()) GTEST_SKIP() << why;
  auto gpu = make_backend("cuda");
  expect_summed(*gpu);
}

TEST(DeviceCollectives, CudaBroadcastGivesEveryRankTheRootsWeights) {
  const std::string why = why_no_gpu_per_rank();
  if (!why.empty()) GTEST_SKIP() << why;
#ifdef FORGE_WITH_CUDA
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto gpu = make_backend("cuda");
  const int root = size - 1;
  std::vector<float> host(kFloats);
  for (size_t i = 0; i < kFloats; ++i) host[i] = gradient_of(rank, i);
  DeviceArray<float> w;
  w.upload(*gpu, host);
  const std::unique_ptr<DeviceCollectives> comm = gpu->make_collectives(mpi_bootstrap(MPI_COMM_WORLD));
  ASSERT_TRUE(comm) << "the cuda backend offers no collectives";
  comm->broadcast(w.data(), kFloats, root);
  const std::vector<float> got = w.download();
  for (size_t i = 0; i < kFloats; ++i) ASSERT_EQ(got[i], gradient_of(root, i)) << "rank " << rank << " at " << i;
#endif
}

}  // namespace
}  // namespace forge
