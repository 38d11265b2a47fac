// The rollout rank's hold for requests that need newer weights
// (mpi_roles/held_requests.hpp): release by version in arrival order,
// cancel of a held request, and the counts the rank reports.
#include "mpi_roles/held_requests.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace forge {
namespace {

GenerationRequest request(uint64_t id, int32_t min_version) {
  GenerationRequest r;
  r.id = id;
  r.prompt = {1, 2, 3};
  r.min_version = min_version;
  return r;
}

std::vector<uint64_t> ids(const std::vector<GenerationRequest>& rs) {
  std::vector<uint64_t> out;
  for (const auto& r : rs) out.push_back(r.id);
  return out;
}

TEST(HeldRequests, ReleasedOnceTheirVersionIsLoadedInArrivalOrder) {
  HeldRequests h;
  h.hold(request(10, 3));
  h.hold(request(11, 2));
  h.hold(request(12, 3));
  h.hold(request(13, 5));
  EXPECT_TRUE(h.release(1).empty());
  EXPECT_EQ(h.size(), 4u);
  EXPECT_EQ(ids(h.release(2)), (std::vector<uint64_t>{11}));
  const std::vector<GenerationRequest> at4 = h.release(4);
  EXPECT_EQ(ids(at4), (std::vector<uint64_t>{10, 12}));
  EXPECT_EQ(at4[0].prompt, (std::vector<int32_t>{1, 2, 3}));  // whole requests come back
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(ids(h.release(7)), (std::vector<uint64_t>{13}));
  EXPECT_EQ(h.size(), 0u);
  EXPECT_EQ(h.total_held(), 4);
}

TEST(HeldRequests, CancelRemovesOnlyAHeldRequest) {
  HeldRequests h;
  h.hold(request(1, 4));
  h.hold(request(2, 4));
  EXPECT_TRUE(h.cancel(1));
  EXPECT_FALSE(h.cancel(1));  // already gone
  EXPECT_FALSE(h.cancel(9));  // never held
  EXPECT_EQ(ids(h.release(4)), (std::vector<uint64_t>{2}));
  EXPECT_EQ(h.total_held(), 2);
}

}  // namespace
}  // namespace forge
