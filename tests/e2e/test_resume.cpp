// Synchronous `forge train` interrupted and resumed gives bitwise the same
// training as an uninterrupted run with the same seed: the same per-step
// objectives and rewards in rollouts.h5, the same final weights and AdamW
// moments. Also: a resume refused for its rollouts.h5 leaves config.ini as
// it was, and `forge inspect` on a file that is not a rollout file is exit
// code 2 naming the file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "e2e/forge_runner.hpp"
#include "e2e/tiny_checkpoint.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/rollout_reader.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace {

using forge_e2e::contains;
using forge_e2e::forge;
using forge_e2e::params_of;
using forge_e2e::Result;

const char* kRun =
    "train --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
    "--model.ffn_dim=64 --train.tasks=3 --train.group=3 --train.eval_tasks=1 "
    "--agent.max_turns=3 --agent.max_new_tokens=24 --run.checkpoint_every=2 "
    // A random policy scores 0 on every task; the efficiency penalty (token
    // counts differ) keeps groups from having zero variance, so steps train.
    "--reward.efficiency_weight=1 ";

TEST(Resume, SynchronousTrainingResumesBitwise) {
  const std::string base = ::testing::TempDir() + "forge_resume_" + std::to_string(getpid());
  const std::string whole = base + "_whole", split = base + "_split";
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(split);
  ASSERT_EQ(forge(std::string(kRun) + "--train.steps=4 --run.dir=" + whole).rc, 0);
  ASSERT_EQ(forge(std::string(kRun) + "--train.steps=2 --run.dir=" + split).rc, 0);
  const Result r = forge(std::string(kRun) + "--train.steps=4 --resume --run.dir=" + split);
  ASSERT_EQ(r.rc, 0) << r.err;
  // More steps under a constant schedule change nothing of the course.
  EXPECT_FALSE(contains(r.err, "settings other than the checkpoint's")) << r.err;

  const forge::RolloutReader a(whole + "/rollouts.h5"), b(split + "/rollouts.h5");
  const auto sa = a.steps(), sb = b.steps();
  ASSERT_EQ(sa.size(), 4u);
  ASSERT_EQ(sb.size(), 4u);
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].step, sb[i].step);
    EXPECT_EQ(sa[i].objective, sb[i].objective) << "step " << i;
    EXPECT_EQ(sa[i].reward_mean, sb[i].reward_mean) << "step " << i;
  }
  EXPECT_EQ(a.n_episodes(), b.n_episodes());
  std::vector<float> ma, mb, m2;
  const auto pa = params_of(forge::latest_checkpoint(whole + "/checkpoints"), &ma);
  EXPECT_EQ(pa, params_of(forge::latest_checkpoint(split + "/checkpoints"), &mb));
  EXPECT_EQ(ma, mb);
  // Steps 3 and 4 did train: the weights moved after the step-2 checkpoint.
  EXPECT_NE(pa, params_of(whole + "/checkpoints/ckpt_step_00000002.h5", &m2));
}

// SIGTERM mid-run (a checkpoint at the step boundary it reached, exit 143)
// and --resume give bitwise the run that was never stopped: weights, AdamW's
// moments, every step's objective and reward (the resume above starts from
// a run's last checkpoint only).
TEST(Resume, ARunStoppedBySigtermResumesBitwise) {
  const std::string base = ::testing::TempDir() + "forge_term_resume_" + std::to_string(getpid());
  const std::string whole = base + "_whole", split = base + "_split", log = base + ".log";
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(split);
  const std::string run = std::string(kRun) + "--train.steps=60 --run.log_every=1 --optim.schedule=cosine ";
  ASSERT_EQ(forge(run + "--run.dir=" + whole).rc, 0);
  const Result term = forge_e2e::forge_until_sigterm(run + "--run.dir=" + split, "step    3 ", log);
  ASSERT_EQ(term.rc, 143) << term.out;
  const std::string stopped = forge::latest_checkpoint(split + "/checkpoints");
  ASSERT_NE(stopped, "");
  ASSERT_EQ(stopped.find("ckpt_step_00000060"), std::string::npos) << "the run was not stopped mid-way";
  const Result r = forge(run + "--resume --run.dir=" + split);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "resumed from " + stopped)) << r.err;

  const forge::RolloutReader a(whole + "/rollouts.h5"), b(split + "/rollouts.h5");
  const auto sa = a.steps(), sb = b.steps();
  ASSERT_EQ(sa.size(), 60u);
  ASSERT_EQ(sb.size(), 60u);
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].objective, sb[i].objective) << "step " << i;
    EXPECT_EQ(sa[i].reward_mean, sb[i].reward_mean) << "step " << i;
  }
  std::vector<float> ma, mb, va, vb;
  EXPECT_EQ(params_of(forge::latest_checkpoint(whole + "/checkpoints"), &ma, &va),
            params_of(forge::latest_checkpoint(split + "/checkpoints"), &mb, &vb));
  EXPECT_EQ(ma, mb);
  EXPECT_EQ(va, vb);
  std::filesystem::remove_all(whole);
  std::filesystem::remove_all(split);
  std::remove(log.c_str());
}

// A resume refused for its rollouts.h5 leaves the run as it was: its
// config.ini still describes the run that happened, not the refused command.
TEST(Resume, ARefusedResumeLeavesTheRunsConfigAsItWas) {
  const std::string dir = ::testing::TempDir() + "forge_refused_resume_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(forge(std::string(kRun) + "--train.steps=2 --run.dir=" + dir).rc, 0);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const std::string config = slurp(dir + "/config.ini");
  ASSERT_TRUE(contains(config, "steps = 2")) << config;
  std::ofstream(dir + "/rollouts.h5", std::ios::trunc) << "not an HDF5 file";
  const Result r = forge(std::string(kRun) + "--train.steps=7 --optim.lr=0.5 --resume --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "rollouts.h5")) << r.err;
  EXPECT_EQ(slurp(dir + "/config.ini"), config);
  EXPECT_FALSE(std::filesystem::exists(dir + "/config.ini.tmp"));
  std::filesystem::remove_all(dir);
}

// A resume under other settings of the training's course (the learning
// rate, the cosine horizon) is said: the run no longer matches an
// uninterrupted one.
TEST(Resume, AResumeUnderOtherSettingsIsWarnedAbout) {
  const std::string dir = ::testing::TempDir() + "forge_changed_resume_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(forge(std::string(kRun) + "--train.steps=2 --optim.schedule=cosine --run.dir=" + dir).rc, 0);
  const Result r = forge(std::string(kRun) +
                         "--train.steps=3 --optim.schedule=cosine --optim.lr=0.0001 --resume --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "--resume with settings other than the checkpoint's (optim.lr ")) << r.err;
  EXPECT_TRUE(contains(r.err, "-> 1e-04; train.steps 2 -> 3)")) << r.err;
  // A train.steps below the checkpoint's step is refused, the run as it was
  // (it once trained nothing, said nothing and recorded the lower count).
  const auto config = [&] {
    std::ifstream in(dir + "/config.ini");
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = config();
  const Result past = forge(std::string(kRun) + "--train.steps=1 --optim.schedule=cosine --resume --run.dir=" + dir);
  EXPECT_EQ(past.rc, 2) << past.err;
  EXPECT_TRUE(contains(past.err, "is at step 3, past train.steps = 1")) << past.err;
  EXPECT_EQ(config(), before);
  std::filesystem::remove_all(dir);
}

// A damaged newest checkpoint is refused, naming the one a resume could
// continue from once it is moved aside (the error named only the file).
TEST(Resume, ADamagedNewestCheckpointNamesTheOneBefore) {
  const std::string dir = ::testing::TempDir() + "forge_damaged_resume_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(forge(std::string(kRun) + "--train.steps=4 --run.dir=" + dir).rc, 0);
  const std::string newest = dir + "/checkpoints/ckpt_step_00000004.h5";
  ASSERT_TRUE(std::filesystem::exists(newest));
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
  const Result r = forge(std::string(kRun) + "--train.steps=5 --resume --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--resume then continues from '" + dir + "/checkpoints/ckpt_step_00000002.h5'"))
      << r.err;
  std::filesystem::remove_all(dir);
}

// Bad input refused after the run folder was taken leaves no folder behind
// (a mistyped run.dir with --resume, a missing train.init): forge.lock and
// its folder were left. A folder that was there stays; new parents go.
TEST(Resume, ARefusedStartLeavesNoNewFolder) {
  const std::string dir = ::testing::TempDir() + "forge_no_such_run_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  Result r = forge(std::string(kRun) + "--train.steps=2 --resume --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "no checkpoint in")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  r = forge(std::string(kRun) + "--train.steps=2 --train.init=" + dir + "_missing.h5 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  r = forge("sft --resume --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir));
  // A refused sft --resume into `run_dir` (exit 2).
  const auto refused = [&](const std::string& run_dir) {
    const Result res = forge("sft --resume --run.dir=" + run_dir);
    EXPECT_EQ(res.rc, 2) << run_dir << ": " << res.err;
  };
  // The parent folders it created for the run folder go too (found by
  // review: runs/ stayed), and one that holds something else stays.
  refused(dir + "/a/b/run");
  EXPECT_FALSE(std::filesystem::exists(dir));
  refused(dir + "/a/b/run/");  // a trailing '/' is no folder
  EXPECT_FALSE(std::filesystem::exists(dir));
  // '..' in run.dir: a folder that was there stays (x/../y was taken for a
  // new folder while x was missing, and y was removed).
  std::filesystem::create_directories(dir + "/y");
  refused(dir + "/x/../y/run");
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/y"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/x"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/a/other");
  refused(dir + "/a/b/run");
  EXPECT_FALSE(std::filesystem::exists(dir + "/a/b"));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/a/other"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  r = forge(std::string(kRun) + "--train.steps=2 --resume --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  std::filesystem::remove_all(dir);
}

TEST(Resume, InspectRejectsForeignFilesWithExitCode2) {
  const std::string path = ::testing::TempDir() + "forge_not_rollouts_" + std::to_string(getpid()) + ".h5";
  std::ofstream(path) << "not an HDF5 file";
  const Result r = forge("inspect " + path);
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, path)) << r.err;
  const Result e = forge("export " + path + " --format csv");
  EXPECT_EQ(e.rc, 2);
}

}  // namespace
