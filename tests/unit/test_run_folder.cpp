// The run folder rules (learner/run_folder.hpp): a new run refuses a folder
// that holds an earlier run's checkpoints or rollouts.h5, naming what it
// found, and takes one that holds nothing of a run; a folder that cannot be
// made is an InputError naming run.dir.
#include <gtest/gtest.h>
#include <sys/wait.h>
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
  // A config.ini of the user's (a --config file kept there, notes) is not
  // replaced (it was, comments and all); one a run wrote, of a run that
  // stopped before training, is.
  std::ofstream(dir + "/config.ini") << "; my notes\n[run]\n";
  std::string mine = refusal(dir);
  EXPECT_NE(mine.find("holds a config.ini without the first line a run writes (" + dir + "/config.ini: a file of yours"),
            std::string::npos)
      << mine;
  write_run_config(dir, "[run]\n");
  EXPECT_EQ(refusal(dir), "");
  // The run's own, saved again by an editor with CRLF line endings.
  std::ofstream(dir + "/config.ini") << kRunConfigMark << "\r\n[run]\r\n";
  EXPECT_EQ(refusal(dir), "");
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

// A file named "checkpoints" in the run folder is refused when the run
// starts (the first checkpoint failed after the training before it, exit 1);
// tests/e2e/test_cli.cpp runs forge sft and train on one.
TEST(RunFolder, ACheckpointsFileInTheWayIsRefusedAtTheStart) {
  const std::string dir = fresh_dir("ckfile");
  fs::create_directories(dir);
  std::ofstream(dir + "/checkpoints") << "a file";
  try {
    make_checkpoints_folder(dir);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("its checkpoints folder '" + dir + "/checkpoints' cannot be made"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A run folder another process holds is refused naming the holder (a
// child process here), before anything is written; the lock file names
// the holder's pid. Two jobs started at once on one run.dir once both passed
// the start's check and wrote the same files. Within one process taking it
// again is a no-op (learner 0 takes it before choosing its checkpoint, its
// learner again).
TEST(RunFolder, AFolderInUseIsRefusedNamingItsHolder) {
  const std::string dir = fresh_dir("held");
  int held[2], release[2];
  ASSERT_EQ(pipe(held), 0);
  ASSERT_EQ(pipe(release), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(held[0]);
    close(release[1]);  // else its own copy would keep the read below from seeing the end
    char c = 0;
    try {
      hold_run_folder(dir);
      c = 1;
    } catch (...) {
    }
    (void)!write(held[1], &c, 1);
    (void)!read(release[0], &c, 1);  // until the parent closes its end
    _exit(0);
  }
  close(held[1]);
  close(release[0]);
  char ok = 0;
  ASSERT_EQ(read(held[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1) << "the child could not take the run folder";
  try {
    hold_run_folder(dir);
    ADD_FAILURE() << "a run folder another process holds was taken";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("is in use by another forge"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pid " + std::to_string(child) + " on "), std::string::npos) << msg;
  }
  EXPECT_EQ(refusal(dir), "") << "the lock file alone is not an earlier run";
  close(release[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(held[0]);
  // Released with its holder: this process takes it, then again.
  EXPECT_NO_THROW(hold_run_folder(dir));
  EXPECT_NO_THROW(hold_run_folder(dir));
}

}  // namespace
}  // namespace forge
