// `forge train` end to end on a tiny model: two synchronous RL steps run,
// log rewards, the engine/learner logprob mismatch and the drift of stale
// tokens, evaluate on seen and
// held-out styles and checkpoint; --resume continues from the checkpoint.
#include <unistd.h>

#include <filesystem>

#include "e2e/forge_runner.hpp"

namespace {

using forge_e2e::contains;
using forge_e2e::forge;
using forge_e2e::Result;

const char* kTiny =
    "--model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
    "--model.ffn_dim=64 --train.tasks=2 --train.group=2 --train.eval_tasks=2 "
    "--agent.max_turns=3 --agent.max_new_tokens=16 --run.log_every=1 ";

TEST(Train, TinyRunThenResume) {
  const std::string dir = ::testing::TempDir() + "forge_train_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const Result r = forge(std::string("train ") + kTiny + "--train.steps=2 --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "step    2")) << r.err;
  EXPECT_TRUE(contains(r.err, "engine/learner ")) << r.err;
  EXPECT_TRUE(contains(r.err, "drift ")) << r.err;
  EXPECT_TRUE(contains(r.out, "held-out families")) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000002.h5"));

  const Result resumed = forge(std::string("train ") + kTiny + "--train.steps=3 --resume --run.dir=" + dir);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "step    3")) << resumed.err;
  EXPECT_FALSE(contains(resumed.err, "step    1 ")) << resumed.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000003.h5"));
}

TEST(Train, BadLossIsExitCode2) {
  const Result r = forge("train --loss.algorithm=reinforce");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "loss.algorithm")) << r.err;
}

TEST(Train, ResumeWithoutCheckpointIsExitCode2) {
  const Result r = forge("train --resume --run.dir=" + ::testing::TempDir() + "forge_no_run_" +
                         std::to_string(getpid()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "no checkpoint")) << r.err;
}

}  // namespace
