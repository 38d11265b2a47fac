// `forge train` end to end on a tiny model: two synchronous RL steps run,
// log rewards, the engine/learner logprob mismatch and the drift of stale
// tokens, evaluate on seen and
// held-out styles and checkpoint; --resume continues from the checkpoint
// (and refuses another model).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e/forge_runner.hpp"

namespace {

using forge_e2e::contains;
using forge_e2e::forge;
using forge_e2e::fresh_dir;
using forge_e2e::Result;
using forge_e2e::slurp;

// The newest ckpt_step_*.h5 of a run folder, "" for none.
std::string latest_checkpoint_in(const std::string& dir) {
  std::string newest;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt_step_", 0) == 0 && name.size() == 21 && name.ends_with(".h5") && e.path().string() > newest)
      newest = e.path().string();
  }
  return newest;
}

const char* kTiny =
    "--model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
    "--model.ffn_dim=64 --train.tasks=2 --train.group=2 --train.eval_tasks=2 "
    "--agent.max_turns=3 --agent.max_new_tokens=16 --run.log_every=1 ";

TEST(Train, TinyRunThenResume) {
  const std::string dir = fresh_dir("train");
  const Result r = forge(std::string("train ") + kTiny + "--train.steps=2 --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "step    2")) << r.err;
  EXPECT_TRUE(contains(r.err, "engine/learner ")) << r.err;
  EXPECT_TRUE(contains(r.err, "drift ")) << r.err;
  EXPECT_TRUE(contains(r.out, "held-out families")) << r.out;
  EXPECT_FALSE(contains(r.err, "apply to MPI ranks")) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000002.h5"));

  const Result resumed = forge(std::string("train ") + kTiny + "--train.steps=3 --resume --run.dir=" + dir);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "resumed from")) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "step    3")) << resumed.err;
  EXPECT_FALSE(contains(resumed.err, "step    1 ")) << resumed.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000003.h5"));

  // A resume with another model of the same shapes (rope_base) is refused,
  // naming the key; so is one past train.steps (it trained nothing and
  // recorded the lower count in config.ini), naming `forge eval`.
  const Result rope = forge(std::string("train ") + kTiny +
                            "--train.steps=4 --model.rope_base=500000 --resume --run.dir=" + dir);
  EXPECT_EQ(rope.rc, 2);
  EXPECT_TRUE(contains(rope.err, "model.rope_base 5e+05 against 10000")) << rope.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000004.h5"));
  const Result past = forge(std::string("train ") + kTiny + "--train.steps=2 --resume --run.dir=" + dir);
  EXPECT_EQ(past.rc, 2) << past.err;
  EXPECT_TRUE(contains(past.err, "past train.steps = 2: raise train.steps to go on (forge eval " + dir)) << past.err;
  EXPECT_TRUE(contains(r.err, "agent.max_turns = 3 is below the 5 calls the largest task needs")) << r.err;

  // The stored config.ini is read by every command (no train-only --resume).
  const Result config = forge("config --config " + dir + "/config.ini");
  EXPECT_EQ(config.rc, 0) << config.err;

  // A new run never writes over this one: exit 2, the files as they were.
  const std::string rollouts = dir + "/rollouts.h5";
  const auto size = std::filesystem::file_size(rollouts);
  const Result again = forge(std::string("train ") + kTiny + "--train.steps=1 --run.dir=" + dir);
  EXPECT_EQ(again.rc, 2);
  EXPECT_TRUE(contains(again.err, "holds an earlier run")) << again.err;
  EXPECT_EQ(std::filesystem::file_size(rollouts), size);
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000003.h5"));

  // An export that fails (no such episode) leaves an existing --out as it
  // was; --out may not be the rollouts file itself.
  const std::string csv = dir + "/kept.csv";
  std::ofstream(csv) << "kept\n";
  const Result bad_export = forge("export " + rollouts + " --episode 999999 --out " + csv);
  EXPECT_EQ(bad_export.rc, 2);
  std::ifstream kept(csv);
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "kept");
  // ... also through a link to it (a link was opened in place and emptied),
  // and a good export through the link replaces the file and keeps the link.
  const std::string link = dir + "/link.csv";
  std::filesystem::create_symlink(csv, link);
  EXPECT_EQ(forge("export " + rollouts + " --episode 999999 --out " + link).rc, 2);
  std::ifstream kept_via_link(csv);
  std::getline(kept_via_link, line);
  EXPECT_EQ(line, "kept");
  ASSERT_EQ(forge("export " + rollouts + " --steps --out " + link).rc, 0);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  std::ifstream steps_via_link(csv);
  std::getline(steps_via_link, line);
  EXPECT_TRUE(contains(line, "step")) << line;
  std::filesystem::remove(link);
  // --out /dev/stdout writes to stdout where it points: the file a shell
  // redirected it to keeps the shell's other lines (it was replaced).
  const std::string redirected = dir + "/redirected.txt";
  for (const std::string stream : {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    const std::string shell = "{ echo BEFORE; '" FORGE_BINARY_DIR "/forge' export " + rollouts +
                              " --steps --out " + stream + "; echo AFTER; } >'" + redirected + "'";
    ASSERT_EQ(std::system(shell.c_str()), 0);
    const std::string both = slurp(redirected);
    EXPECT_EQ(both.rfind("BEFORE\nstep", 0), 0u) << stream << ": " << both;
    EXPECT_TRUE(both.ends_with("\nAFTER\n")) << stream << ": " << both;
  }
  const Result onto_itself = forge("export " + rollouts + " --out " + rollouts);
  EXPECT_EQ(onto_itself.rc, 2);
  EXPECT_EQ(std::filesystem::file_size(rollouts), size);
  // ... nor forge's standard error, where it logs (its start-up line went
  // into the table).
  const Result onto_log = forge("export " + rollouts + " --steps --out /dev/stderr");
  EXPECT_EQ(onto_log.rc, 2);
  EXPECT_TRUE(contains(onto_log.err, "is forge's standard error")) << onto_log.err;
  // A damaged newest checkpoint: forge eval of the run folder names the one
  // before it to give instead.
  const std::string newest = dir + "/checkpoints/ckpt_step_00000009.h5";
  std::ofstream(newest) << "not a checkpoint";
  const Result damaged = forge("eval " + dir + " --eval.tasks=1");
  EXPECT_EQ(damaged.rc, 2);
  EXPECT_TRUE(contains(damaged.err, "give the one before it: '" + dir + "/checkpoints/ckpt_step_00000003.h5'"))
      << damaged.err;
  std::filesystem::remove(newest);
  // Nor another HDF5 file: a copy of the rollouts, a checkpoint (it
  // replaced them with CSV).
  const std::string copy = dir + "/copy.h5", checkpoint = dir + "/checkpoints/ckpt_step_00000003.h5";
  std::filesystem::copy_file(rollouts, copy);
  const auto checkpoint_size = std::filesystem::file_size(checkpoint);
  for (const std::string& other : {copy, checkpoint}) {
    const Result onto_hdf5 = forge("export " + rollouts + " --out " + other);
    EXPECT_EQ(onto_hdf5.rc, 2);
    EXPECT_TRUE(contains(onto_hdf5.err, "is an HDF5 file")) << onto_hdf5.err;
  }
  EXPECT_EQ(std::filesystem::file_size(copy), size);
  EXPECT_EQ(std::filesystem::file_size(checkpoint), checkpoint_size);
  std::filesystem::remove(copy);
  ASSERT_EQ(forge("export " + rollouts + " --out " + csv).rc, 0);
  std::ifstream table(csv);
  std::getline(table, line);
  // Every episode column of the file (abandoned episodes are not trained
  // on: a table without the flag counted them as failures).
  for (const char* column : {"episode_id", "safety", "abandoned", "safety_events", "test_runs"})
    EXPECT_TRUE(contains(line, column)) << column << " missing from " << line;

  // inspect and export take the run folder for its rollouts.h5; a folder
  // without one is named. One process never trains a stale token.
  const Result inspected = forge("inspect " + dir);
  ASSERT_EQ(inspected.rc, 0) << inspected.err;
  EXPECT_TRUE(contains(inspected.out, "drift by staleness: none (no stale tokens)")) << inspected.out;
  // Over time in 2 ranges of the 3 steps: 0-0 holds step 0 alone (its 4
  // episodes and 1 training step; steps 0 and 1 were counted under it).
  const Result halves = forge("inspect " + dir + " --buckets=2 --json");
  ASSERT_EQ(halves.rc, 0) << halves.err;
  EXPECT_TRUE(contains(halves.out, "\"over_time\": [{\"first_step\": 0, \"last_step\": 0, \"rewards\": "
                                   "{\"episodes\": 4,")) << halves.out;
  EXPECT_EQ(forge("export " + dir + " --steps").out, forge("export " + rollouts + " --steps").out);
  // inspect's length percentiles are linear between the nearest ranks
  // (numpy's default), from the episodes export lists (it took the lower
  // rank alone: a p90 of 1 for {1, 100}).
  {
    std::vector<double> lengths;
    std::istringstream lines(forge("export " + dir + " --format jsonl").out);
    for (std::string line; std::getline(lines, line);)
      lengths.push_back(nlohmann::json::parse(line)["final_length"].get<double>());
    ASSERT_GT(lengths.size(), 2u);
    std::sort(lengths.begin(), lengths.end());
    const auto linear = [&](double q) {
      const double pos = q * static_cast<double>(lengths.size() - 1);
      const size_t lo = static_cast<size_t>(std::floor(pos));
      const size_t hi = std::min(lo + 1, lengths.size() - 1);
      return lengths[lo] + (pos - std::floor(pos)) * (lengths[hi] - lengths[lo]);
    };
    const nlohmann::json got = nlohmann::json::parse(forge("inspect " + dir + " --json").out)["lengths"]["final_length"];
    EXPECT_NEAR(got["p50"].get<double>(), linear(0.5), 1e-9) << got;
    EXPECT_NEAR(got["p90"].get<double>(), linear(0.9), 1e-9) << got;
    EXPECT_EQ(got["max"].get<double>(), lengths.back()) << got;
  }
  const Result no_rollouts = forge("inspect " + dir + "/checkpoints");
  EXPECT_EQ(no_rollouts.rc, 2);
  EXPECT_TRUE(contains(no_rollouts.err, "checkpoints' is a folder without a rollouts.h5")) << no_rollouts.err;

  // --train.init from a model of other heads with the same weight shapes
  // (4 heads of 8 against 2 of 16) is refused, naming the key.
  const std::string other = dir + "_heads";
  std::filesystem::remove_all(other);
  const Result heads = forge(std::string("train ") + kTiny + "--model.n_heads=4 --model.n_kv_heads=4 --train.steps=1 " +
                             "--train.init=" + dir + " --run.dir=" + other);
  EXPECT_EQ(heads.rc, 2);
  EXPECT_TRUE(contains(heads.err, "model.n_heads 4 against 2")) << heads.err;
  // The same model starts from it.
  const Result same = forge(std::string("train ") + kTiny + "--train.steps=1 --train.init=" + dir + " --run.dir=" + other);
  EXPECT_EQ(same.rc, 0) << same.err;
  std::filesystem::remove_all(other);
}

// SIGTERM during an evaluation between steps ends it (a checkpoint waited on
// it, and under Slurm SIGKILL follows within KillWait): the checkpoint of
// the step boundary, exit 143, no figures of a cut evaluation.
TEST(Train, SigtermCutsAMidRunEvaluationShort) {
  const std::string dir = fresh_dir("train_evalterm");
  const std::string log = dir + ".log";
  // 1,500 tasks take seconds on the tiny model; SIGTERM follows the line
  // that starts them within 10 ms.
  const Result term = forge_e2e::forge_until_sigterm(
      "train " + std::string(kTiny) + "--train.steps=1000 --train.eval_every=1 --train.eval_tasks=1500 "
      "--run.threads=1 --run.dir=" + dir, "eval: 1500 tasks in seen styles", log);
  const std::string& out = term.out;
  EXPECT_EQ(term.rc, 143) << out;
  EXPECT_TRUE(contains(out, "eval: seen styles cut short by SIGTERM")) << out;
  EXPECT_FALSE(contains(out, "eval: seen styles done")) << out;
  EXPECT_FALSE(contains(out, "eval at step 1 (seen styles)")) << out;
  EXPECT_TRUE(contains(out, "SIGTERM: stopping after 1 steps")) << out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoints/ckpt_step_00000001.h5")) << out;
  std::filesystem::remove_all(dir);
  std::remove(log.c_str());
  }

// A full disk (here a file size limit) stops the run with exit 1 (HDF5's
// clean-up at exit crashed after the failed close: 139), leaves a
// rollouts.h5 shorter than its recorded end that inspect names, and
// --resume extends it and goes on with every row its commit record names.
TEST(Train, AFullDiskStopsTheRunAndResumeGoesOn) {
  const std::string dir = fresh_dir("train_full");
  const std::string args = std::string(kTiny) + "--run.checkpoint_every=1 --run.dir=" + dir;
  const std::string log = dir + ".log";
  const std::string full = "cd '" FORGE_SOURCE_DIR "' && trap '' XFSZ && ulimit -f 400 && '" FORGE_BINARY_DIR
                           "/forge' train " + args + " --train.steps=80 --run.flush_seconds=0.001 >'" + log + "' 2>&1";
  const int status = std::system(("bash -c \"" + full + "\"").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  const std::string out = slurp(log);
  ASSERT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_TRUE(contains(out, "forge: error: cannot flush '" + dir)) << out;
  EXPECT_TRUE(contains(out, "File too large")) << out;
  const Result cut = forge("inspect " + dir);
  EXPECT_EQ(cut.rc, 2) << cut.err;
  EXPECT_TRUE(contains(cut.err, "is truncated")) << cut.err;
  EXPECT_TRUE(contains(cut.err, "After a full disk, forge train --resume extends the file")) << cut.err;
  const std::string newest = std::filesystem::path(latest_checkpoint_in(dir)).filename().string();
  ASSERT_FALSE(newest.empty()) << out;
  const int done = std::stoi(newest.substr(10, 8));
  const Result resumed = forge("train " + args + " --train.steps=" + std::to_string(done + 2) + " --resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "(a write that failed, a full disk?): extended with zeros")) << resumed.err;
  const Result inspected = forge("inspect " + dir);
  ASSERT_EQ(inspected.rc, 0) << inspected.err;
  EXPECT_TRUE(contains(inspected.out, std::to_string(done + 2) + " training steps")) << inspected.out;
  // A file cut short (a copy stopped midway) is extended for the resume too,
  // but does not read whole: refused, and cut back to its size.
  const std::string rollouts = dir + "/rollouts.h5";
  const auto whole = std::filesystem::file_size(rollouts);
  std::filesystem::resize_file(rollouts, whole * 6 / 10);
  const Result refused = forge("train " + args + " --train.steps=" + std::to_string(done + 3) + " --resume");
  EXPECT_EQ(refused.rc, 2) << refused.err;
  EXPECT_TRUE(contains(refused.err, "is truncated: extended to its recorded end for this resume, it did not read "
                                    "whole, and is cut back")) << refused.err;
  EXPECT_EQ(std::filesystem::file_size(rollouts), whole * 6 / 10);
  std::filesystem::remove_all(dir);
  std::remove(log.c_str());
}

// One process asked for MPI roles on its command line trains alone, and
// says so (a run that asked for 2 learners looked like a run of two).
TEST(Train, RoleCountsOutsideMpiAreWarnedAbout) {
  const std::string dir = fresh_dir("train_roles");
  const Result r = forge("train " + std::string(kTiny) + "--train.steps=1 --mpi.learners=2 --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "mpi.learners = 2 and mpi.rollouts = 1 apply to MPI ranks")) << r.err;
  EXPECT_TRUE(contains(r.err, "at least 4 ranks")) << r.err;
  std::filesystem::remove_all(dir);
  // A config file's [mpi] is its layout under mpirun (configs/agent_demo.ini
  // runs both ways): not warned about.
  const std::string ini = dir + ".ini";
  std::ofstream(ini) << "[mpi]\nrollouts = 2\n";
  const Result file = forge("train " + std::string(kTiny) + "--train.steps=1 --config " + ini + " --run.dir=" + dir);
  ASSERT_EQ(file.rc, 0) << file.err;
  EXPECT_FALSE(contains(file.err, "apply to MPI ranks")) << file.err;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(ini);
}

// forge inspect of a run whose steps trained no token (every group
// zero-variance) and whose middle step's episodes were all abandoned (a
// context budget some openings pass): "-" where there is nothing to
// average, never nan.
TEST(Train, InspectShowsADashWhereThereIsNothingToAverage) {
  const std::string dir = fresh_dir("train_dash");
  const Result r = forge("train --model.d_model=16 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
                         "--model.ffn_dim=32 --train.steps=3 --train.tasks=2 --train.group=2 "
                         "--agent.max_context_tokens=100 --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const Result i = forge("inspect " + dir);
  ASSERT_EQ(i.rc, 0) << i.err;
  EXPECT_FALSE(contains(i.out, "nan")) << i.out;
  EXPECT_TRUE(contains(i.out, "        -")) << i.out;
  // The store's share of the step time, where shown, is one (it read 117%).
  if (const size_t at = i.out.find("step time ("); at != std::string::npos)
    EXPECT_LE(std::stod(i.out.substr(at + 11)), 100.0) << i.out;
  std::filesystem::remove_all(dir);
}

// Masked importance sampling that keeps no token trains nothing: said once.
// With top_k 2 of a near-uniform tiny policy an on-policy ratio is about
// 2 / vocabulary, far below loss.is_low.
TEST(Train, AStepThatMasksEveryTokenIsWarnedAboutOnce) {
  const std::string dir = fresh_dir("train_masked");
  const Result r = forge("train " + std::string(kTiny) +
                         "--train.steps=2 --sample.top_k=2 --loss.is_mask=token --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string said = "masked every token";
  const size_t first = r.err.find(said);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(said, first + 1), std::string::npos) << r.err;
  EXPECT_TRUE(contains(r.err, "masked 1.000")) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(Train, BadLossIsExitCode2) {
  const Result r = forge("train --loss.algorithm=reinforce");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "loss.algorithm")) << r.err;
}

// A context budget below every task opening is refused before the run (it
// trained on nothing, every episode abandoned, exit 0), and leaves no run
// folder; under MPI rank 0 ends the job the same way.
TEST(Train, AContextBudgetBelowTheOpeningsIsExitCode2) {
  const std::string dir = fresh_dir("train_budget");
  const Result r = forge("train " + std::string(kTiny) + "--train.steps=1 --agent.max_context_tokens=16 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "agent.max_context_tokens = 16 is below the task opening")) << r.err;
  EXPECT_TRUE(contains(r.err, "every such episode would be abandoned before its first call")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(Train, ResumeWithoutCheckpointIsExitCode2) {
  const Result r = forge("train --resume --run.dir=" + ::testing::TempDir() + "forge_no_run_" +
                         std::to_string(getpid()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "no checkpoint")) << r.err;
}

}  // namespace
