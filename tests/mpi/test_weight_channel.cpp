// The weight channel under concurrency: the learner (rank 0) publishes 2000
// versions of a 256k-float model as fast as it can while every other rank
// pulls; each pulled copy must be whole (every float equals its version, so
// a copy torn between two versions is caught: a reader's transfer then
// overlaps the write two versions on often enough that a seqlock without
// either check failed 6 runs of 6 at -np 3, where 64k floats let half
// pass), versions only increase, and
// the last version reaches everyone. The stop word reaches every rank. And
// the in-place publication a device backend uses.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "mpi_roles/weight_channel.hpp"

namespace forge {
namespace {

TEST(WeightChannel, PulledCopiesAreWholeAndVersionsIncrease) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr size_t kFloats = 1 << 18;
  constexpr int64_t kVersions = 2000;
  WeightChannel ch(MPI_COMM_WORLD, 0, kFloats);
  if (rank == 0) {
    std::vector<float> w(kFloats);
    for (int64_t v = 0; v < kVersions; ++v) {
      std::fill(w.begin(), w.end(), static_cast<float>(v));
      ch.publish(w.data(), v);
    }
    ch.request_stop(1);
  } else {
    std::vector<float> w(kFloats, -1.0f);
    int64_t have = -1, pulls = 0;
    Stopwatch sw;
    while (have < kVersions - 1) {
      ASSERT_LT(sw.seconds(), 60.0) << "rank " << rank << " stuck at version " << have;
      const int64_t v = ch.try_pull(have, w);
      if (v < 0) continue;
      ASSERT_GT(v, have);
      for (size_t i = 0; i < kFloats; ++i)
        ASSERT_EQ(w[i], static_cast<float>(v)) << "torn copy of version " << v << " at " << i;
      have = v;
      ++pulls;
    }
    std::printf("[rank %d] pulled %lld of %lld versions whole\n", rank, static_cast<long long>(pulls),
                static_cast<long long>(kVersions));
    Stopwatch stop_wait;
    while (ch.stop_code() == 0) ASSERT_LT(stop_wait.seconds(), 60.0);
    EXPECT_EQ(ch.stop_code(), 1);
    EXPECT_EQ(ch.latest_version(), kVersions - 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// In place: rank 0 fills the buffer begin_publish returns (as a device
// backend's download does) and commits; the others pull exactly those
// floats (a pull fills an empty vector, and one that finds nothing new
// leaves the caller's floats alone). A commit without its begin, a second
// begin, or the host's pull between begin and commit, is refused; the
// buffers lie in publish_memory(), the host's only.
TEST(WeightChannel, InPlacePublishIsPulledWhole) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  constexpr size_t kFloats = 1000;
  WeightChannel ch(MPI_COMM_WORLD, 0, kFloats);
  if (rank == 0) {
    EXPECT_THROW(ch.commit_publish(0), Error);
    EXPECT_THROW(ch.commit_publish(-1), Error);  // nothing pending is not version -1 pending
    // what a device learner page-locks: every buffer begin_publish hands out lies in it
    const auto [memory, memory_bytes] = ch.publish_memory();
    const char* lo = static_cast<const char*>(memory);
    for (int64_t v = 0; v < 3; ++v) {
      float* dst = ch.begin_publish(v);
      const char* at = reinterpret_cast<const char*>(dst);
      EXPECT_TRUE(at >= lo && at + kFloats * sizeof(float) <= lo + memory_bytes) << "version " << v;
      EXPECT_THROW(ch.begin_publish(v + 1), Error);
      std::vector<float> mine;
      EXPECT_THROW(ch.try_pull(-1, mine), Error);  // would take the buffer being filled
      for (size_t i = 0; i < kFloats; ++i) dst[i] = static_cast<float>(1000 * v + i);
      ch.commit_publish(v);
    }
  } else {
    EXPECT_THROW(ch.publish_memory(), Error);  // only the host publishes
    std::vector<float> w;  // empty: a pull gives it the channel's n floats
    int64_t have = -1;
    Stopwatch sw;
    while (have < 2) {
      ASSERT_LT(sw.seconds(), 60.0) << "rank " << rank << " stuck at version " << have;
      const int64_t v = ch.try_pull(have, w);
      if (v < 0) continue;
      ASSERT_EQ(w.size(), kFloats);
      for (size_t i = 0; i < kFloats; ++i) ASSERT_EQ(w[i], static_cast<float>(1000 * v + i)) << "version " << v;
      have = v;
    }
    // nothing newer: -1, and the caller's floats are its own, untouched
    const float* before = w.data();
    EXPECT_EQ(ch.try_pull(have, w), -1);
    EXPECT_EQ(w.data(), before);
    EXPECT_EQ(w[kFloats - 1], static_cast<float>(2000 + kFloats - 1));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace forge
