// A rollout rank under mpirun (rank 0 the learner publishing weights, rank 1
// the rollout rank, rank 2 an environment rank's generation client): a
// request whose slot started at a version the rank has not loaded yet
// (GenerationRequest::min_version) waits for those weights, so every token
// it generates carries that version; a request the loaded weights may serve
// runs at once; a cancel of a waiting request answers it with no token, and
// so does one that came before its request.
//
// No timing is assumed: request B (min_version 0) is sent after A (1) and
// C (2) on the same tag, so its result proves the rank received A and C
// before; only then is C cancelled and version 1 published. Without the
// hold, A would run on version 0 meanwhile.
#include <gtest/gtest.h>
#include <mpi.h>

#include <map>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "core/timer.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/rollout_rank.hpp"
#include "mpi_roles/weight_channel.hpp"
#include "unit/tiny_agent_model.hpp"

namespace forge {
namespace {

constexpr int kPublishOne = 900, kClientDone = 901;
constexpr double kDeadline = 60.0;

GenerationRequest request(uint64_t id, int32_t min_version) {
  GenerationRequest r;
  r.id = id;
  r.prompt = {72, 101, 108, 108, 111};
  r.sampling.max_new_tokens = 6;
  r.sampling.seed = 40 + id;
  r.min_version = min_version;
  return r;
}

// Waits (with a deadline) for an empty message with `tag` from `source`.
void await_word(int source, int tag) {
  for (Stopwatch sw;;) {
    int arrived = 0;
    MPI_Iprobe(source, tag, MPI_COMM_WORLD, &arrived, MPI_STATUS_IGNORE);
    if (arrived) break;
    ASSERT_LT(sw.seconds(), kDeadline) << "no message " << tag << " from rank " << source;
  }
  MPI_Recv(nullptr, 0, MPI_BYTE, source, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

TEST(RolloutRank, RequestWaitsForItsSlotsWeightsAndACancelAnswersIt) {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world < 3) GTEST_SKIP() << "needs a learner, a rollout and an environment rank";
  const RoleLayout layout(world, {1, 1});
  CpuBackend backend;
  PolicyModel model(tiny_agent_model_config(), backend);
  WeightChannel weights(MPI_COMM_WORLD, 0, model.layout().total);
  SendQueue sends;

  if (rank == 0) {
    model.init_random(5, 0.1f);
    weights.publish(model.get_params().data(), 0);
    await_word(2, kPublishOne);
    model.init_random(6, 0.1f);
    weights.publish(model.get_params().data(), 1);
    await_word(2, kClientDone);
    weights.request_stop(1);
  } else if (rank == 1) {
    EngineConfig e;
    e.max_batch = 4;
    e.max_seq_len = 64;
    e.kv_cache_tokens = 512;
    e.block_size = 4;
    RolloutEngine engine(model, e);
    const RolloutRankStats st = run_rollout_rank(MPI_COMM_WORLD, layout, model, engine, weights, sends, kDeadline);
    EXPECT_EQ(st.requests, 5);
    EXPECT_EQ(st.held, 2);  // A and C
    EXPECT_EQ(st.weight_pulls, 2);
  } else if (rank == 2) {
    GenerationClient client(MPI_COMM_WORLD, kDeadline);
    const auto describe = [&](int r) { return layout.name(r); };
    client.send(1, request(1, 1));  // A
    client.send(1, request(3, 2));  // C: its weights never come
    client.send(1, request(2, 0));  // B
    std::map<uint64_t, GenerationResult> got;
    const auto await_result = [&](uint64_t id) {
      for (Stopwatch sw; !got.count(id);) {
        for (GenerationResult& r : client.poll(describe)) got[r.id] = std::move(r);
        client.sends().progress();
        ASSERT_LT(sw.seconds(), kDeadline) << "no result for request " << id;
      }
    };
    await_result(2);
    ASSERT_FALSE(got[2].tokens.empty());
    for (const int32_t v : got[2].versions) EXPECT_EQ(v, 0) << "B runs on the weights loaded";
    EXPECT_EQ(got.count(1), 0u) << "A ran before the weights of its version";
    client.cancel(3);
    await_result(3);
    EXPECT_EQ(got[3].finish, FinishReason::kCancelled);
    EXPECT_TRUE(got[3].tokens.empty());
    MPI_Send(nullptr, 0, MPI_BYTE, 0, kPublishOne, MPI_COMM_WORLD);
    await_result(1);
    ASSERT_FALSE(got[1].tokens.empty());
    for (const int32_t v : got[1].versions) EXPECT_EQ(v, 1) << "a token of A from weights older than its slot's";
    // A cancel that comes before its request (another tag: MPI does not
    // order them) answers the request when it comes. D's result shows the
    // cancel was read; E's answer is then kCancelled without a token.
    const std::vector<uint8_t> early = encode_cancel(5);
    MPI_Send(early.data(), static_cast<int>(early.size()), MPI_BYTE, 1, kCancelTag, MPI_COMM_WORLD);
    client.send(1, request(4, 0));  // D
    await_result(4);
    client.send(1, request(5, 0));  // E
    await_result(5);
    EXPECT_EQ(got[5].finish, FinishReason::kCancelled);
    EXPECT_TRUE(got[5].tokens.empty()) << "E ran although its cancel came first";
    MPI_Send(nullptr, 0, MPI_BYTE, 0, kClientDone, MPI_COMM_WORLD);
    quiesce(MPI_COMM_WORLD, client.sends(), kDeadline);
    return;
  }
  quiesce(MPI_COMM_WORLD, sends, kDeadline);
}

}  // namespace
}  // namespace forge
