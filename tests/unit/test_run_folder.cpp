// The run folder rules (learner/run_folder.hpp): a new run refuses a folder
// that holds an earlier run's checkpoints or rollouts.h5, naming what it
// found, and takes one that holds nothing of a run; a folder that cannot be
// made is an InputError naming run.dir.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "learner/run_folder.hpp"

namespace forge {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "forge_run_folder_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  return dir;
}

std::string refusal(const std::string& dir) {
  try {
    refuse_existing_run(dir, "forge train", true);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(RunFolder, AnEarlierRunIsRefusedAndNothingElseIs) {
  const std::string dir = fresh_dir("refuse");
  EXPECT_EQ(refusal(dir), "");  // absent
  create_run_folder(dir);
  EXPECT_TRUE(fs::is_directory(dir));
  std::ofstream(dir + "/config.ini") << "[run]\n";  // a run that stopped before training
  fs::create_directories(dir + "/checkpoints");
  std::ofstream(dir + "/checkpoints/ckpt_step_00000003.h5.tmp") << "torn";  // not a checkpoint
  EXPECT_EQ(refusal(dir), "");

  std::ofstream(dir + "/rollouts.h5") << "x";
  std::string msg = refusal(dir);
  EXPECT_NE(msg.find(dir + "/rollouts.h5"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("--resume"), std::string::npos) << msg;  // no checkpoint to resume from
  std::ofstream(dir + "/checkpoints/ckpt_step_00000001.h5") << "x";
  msg = refusal(dir);
  EXPECT_NE(msg.find("ckpt_step_00000001.h5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  fs::remove(dir + "/checkpoints/ckpt_step_00000001.h5");
  fs::remove(dir + "/rollouts.h5");
  std::ofstream(dir + "/checkpoints/ckpt_step_00000002.h5") << "x";
  msg = refusal(dir);
  EXPECT_NE(msg.find("ckpt_step_00000002.h5"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(RunFolder, AFileInTheWayIsAnInputError) {
  const std::string dir = fresh_dir("file");
  std::ofstream(dir) << "a file";
  try {
    create_run_folder(dir + "/run");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.dir = '" + dir + "/run'"), std::string::npos) << e.what();
  }
  fs::remove(dir);
}

// A run folder another forge holds is refused naming the holder (here this
// process through a first hold: a second open of the lock file conflicts
// like another process's), before anything is written; the lock names
// this pid. Two jobs started at once on one run.dir once both passed the
// start's check and wrote the same files.
TEST(RunFolder, AFolderInUseIsRefusedNamingItsHolder) {
  const std::string dir = fresh_dir("held");
  hold_run_folder(dir);
  std::ifstream lock(dir + "/forge.lock");
  std::string holder;
  std::getline(lock, holder);
  EXPECT_EQ(holder.rfind("pid " + std::to_string(getpid()) + " on ", 0), 0u) << holder;
  try {
    hold_run_folder(dir);
    FAIL() << "a held run folder was taken again";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("is in use by another forge"), std::string::npos) << msg;
    EXPECT_NE(msg.find(holder), std::string::npos) << msg;
  }
  EXPECT_EQ(refusal(dir), "") << "the lock file alone is not an earlier run";
}

}  // namespace
}  // namespace forge
