// The forge binary end to end: command dispatch, help, exit codes (0 ok,
// 2 bad input, named on stderr), `forge config` on the default config, and
// run.backend = cuda where no GPU can run it, run.precision = bf16 on the cpu
// backend, and every key listed in configs/default.ini and docs/configuration.md.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "backend/backend.hpp"
#include "backend/backend_registry.hpp"
#include "backend/host_runtime.hpp"
#include "core/error.hpp"
#include "e2e/forge_runner.hpp"

namespace {

using forge_e2e::contains;
using forge_e2e::forge;
using forge_e2e::Result;

TEST(Cli, HelpListsCommands) {
  const Result r = forge("--help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Usage: forge <command>")) << r.out;
  for (const char* command : {"config", "eval", "export", "export-model", "generate", "inspect", "sft", "train"})
    EXPECT_TRUE(contains(r.out, std::string("\n  ") + command + " ")) << command << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "exit 143")) << r.out;
}

TEST(Cli, NoArgumentsIsUsageError) {
  const Result r = forge("");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "Usage")) << r.err;
}

TEST(Cli, Version) {
  const Result r = forge("--version");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "forge ")) << r.out;
}

// A word past `forge help COMMAND`, `forge --help` or `forge --version` is
// an error (it was ignored, exit 0).
TEST(Cli, TopLevelWordsTakeNothingMore) {
  for (const std::string args : {"help config extra", "--help bogus", "--version extra", "-V x"}) {
    const Result r = forge(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_TRUE(contains(r.err, "forge: error: unexpected argument")) << args << ": " << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
}

TEST(Cli, UnknownCommand) {
  const Result r = forge("no-such-command");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "forge: error: unknown command 'no-such-command'")) << r.err;
}

TEST(Cli, CommandHelpListsOptionsWithDefaults) {
  Result r = forge("config --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "--model.d_model <int>")) << r.out;
  EXPECT_TRUE(contains(r.out, "(default: 256")) << r.out;
  EXPECT_TRUE(contains(r.out, "--run.dir <string>")) << r.out;
  r = forge("help config");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "--optim.lr")) << r.out;
}

TEST(Cli, WrongTypeNamesTheKey) {
  const Result r = forge("config --model.d_model=abc");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "forge: error: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "model.d_model")) << r.err;
  EXPECT_TRUE(contains(r.err, "abc")) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, UnknownFlag) {
  const Result r = forge("config --nonsense=1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "nonsense")) << r.err;
}

// Output that cannot be written (a full disk) is a failure, named, not
// exit 0 with the output lost.
// Help and --version too (they exited 0 on a full disk).
TEST(Cli, OutputThatCannotBeWrittenIsAFailure) {
  const std::string err = ::testing::TempDir() + "forge_cli_full_" + std::to_string(getpid()) + ".err";
  for (const std::string args : {"config", "--help", "help config", "--version", "config --help"}) {
    const int status =
        std::system(("'" FORGE_BINARY_DIR "/forge' " + args + " > /dev/full 2>'" + err + "'").c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << args;
    const std::string message = forge_e2e::slurp(err);
    EXPECT_TRUE(contains(message, "forge: error: cannot write the output of 'forge ")) << args << ": " << message;
  }
  std::remove(err.c_str());
}

TEST(Cli, OutOfRangeAndMissingFile) {
  Result r = forge("config --optim.lr=-1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "optim.lr")) << r.err;
  r = forge("config --config configs/does-not-exist.ini");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "configs/does-not-exist.ini")) << r.err;
}

TEST(Cli, ConfigPrintsDefaultConfig) {
  const Result r = forge("config --config configs/default.ini");
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"[model]", "[optim]", "[sample]", "[run]", "d_model = 256"})
    EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
  // configs/default.ini holds the built-in defaults: same output without it.
  EXPECT_EQ(forge("config").out, r.out);
}

// Every key forge knows is listed in configs/default.ini (under its section)
// and documented in docs/configuration.md (as `section.key`).
TEST(Cli, EveryKeyIsInDefaultIniAndDocumented) {
  const Result r = forge("config");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto read = [](const std::string& rel) {
    std::ifstream in(std::string(FORGE_SOURCE_DIR) + "/" + rel);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string ini = read("configs/default.ini"), doc = read("docs/configuration.md");
  ASSERT_FALSE(ini.empty());
  ASSERT_FALSE(doc.empty());
  std::istringstream lines(r.out);
  std::string line, section;
  int keys = 0;
  while (std::getline(lines, line)) {
    if (line.size() > 2 && line.front() == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find(" =");
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    ++keys;
    EXPECT_TRUE(contains(doc, "`" + section + "." + key + "`")) << section << "." << key << " is not in docs/configuration.md";
    const size_t at = ini.find("[" + section + "]\n");
    const size_t end = ini.find("\n[", at + 1);
    const std::string block = at == std::string::npos ? "" : ini.substr(at, end == std::string::npos ? end : end - at);
    EXPECT_TRUE(contains(block, "\n" + key + " =")) << section << "." << key << " is not in configs/default.ini";
  }
  EXPECT_GT(keys, 50);
}

TEST(Cli, FlagOverridesConfigFile) {
  const Result r = forge("config --config configs/default.ini --optim.lr=0.5 --run.dir runs/x");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "lr = 0.5\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "dir = runs/x\n")) << r.out;
}

TEST(Cli, CudaBackendWithoutDeviceIsInputError) {
  try {
    forge::make_backend("cuda");
    GTEST_SKIP() << "a CUDA device is present";
  } catch (const forge::InputError&) {
  }
  const std::string dir = ::testing::TempDir() + "forge_cli_cuda_" + std::to_string(getpid());
  for (const char* cmd : {"sft --sft.steps=1", "train --train.steps=1"}) {
    const Result r = forge(std::string(cmd) + " --run.backend=cuda --run.dir=" + dir);
    EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "forge: error: backend 'cuda'")) << cmd << "\n" << r.err;
  }
}

// A training bin must hold the longest call: refused at start (it was an
// error after the first step's rollouts), and no run folder is made.
TEST(Cli, TrainBinsSmallerThanACallAreRefusedAtStart) {
  const std::string dir = ::testing::TempDir() + "forge_cli_bins_" + std::to_string(getpid());
  const Result r = forge("train --train.steps=1 --train.max_tokens=128 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "forge: error: train.max_tokens = 128 cannot hold the longest LLM call")) << r.err;
  EXPECT_TRUE(contains(r.err, "agent.max_context_tokens + agent.max_new_tokens = 488")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// A model too large for the machine: exit 1 naming the model's sizes among
// what grows, and no run folder left behind (it kept one holding forge.lock).
TEST(Cli, AModelThatDoesNotFitLeavesNoRunFolder) {
  const std::string dir = ::testing::TempDir() + "forge_cli_oom_" + std::to_string(getpid());
  const Result r = forge("train --train.steps=1 --model.d_model=65536 --model.n_layers=1024 --model.ffn_dim=1048576 "
                         "--model.n_heads=64 --model.n_kv_heads=64 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "forge: error: out of memory")) << r.err;
  EXPECT_TRUE(contains(r.err, "[model] d_model, n_layers, ffn_dim and vocab")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// A file named "checkpoints" in the run folder: refused at the start, exit 2
// naming run.dir, with nothing written (the first checkpoint failed, exit 1,
// after the training before it; forge train left a rollouts.h5 that refused
// the next start).
TEST(Cli, ACheckpointsFileInTheRunFolderIsRefusedAtTheStart) {
  const std::string dir = ::testing::TempDir() + "forge_cli_ckfile_" + std::to_string(getpid());
  for (const std::string command : {"train --train.steps=1", "sft --sft.steps=1 --sft.eval_requests=1"}) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/checkpoints") << "in the way";
    const Result r = forge(command + " --run.dir=" + dir);
    EXPECT_EQ(r.rc, 2) << command << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "its checkpoints folder '" + dir + "/checkpoints' cannot be made")) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/rollouts.h5")) << command;
    EXPECT_FALSE(std::filesystem::exists(dir + "/config.ini")) << command;
  }
  std::filesystem::remove_all(dir);
}

// Greedy decoding cannot train (a group's episodes would be one, and its
// logprobs not a sampler's): refused at start, no run folder made.
TEST(Cli, TrainRefusesGreedySampling) {
  const std::string dir = ::testing::TempDir() + "forge_cli_greedy_" + std::to_string(getpid());
  const Result r = forge("train --train.steps=1 --sample.temperature=0 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "forge: error: sample.temperature = 0 (greedy) cannot train")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// N tasks of a Slurm step started without MPI (srun without --mpi=pmix
// where Open MPI does not fail) once each trained alone on run.dir: refused.
TEST(Cli, TrainAsTasksOfASlurmStepWithoutMpiIsRefused) {
  const std::string dir = ::testing::TempDir() + "forge_cli_srun_" + std::to_string(getpid());
  setenv("SLURM_STEP_NUM_TASKS", "3", 1);
  const Result r = forge("train --train.steps=1 --run.dir=" + dir);
  unsetenv("SLURM_STEP_NUM_TASKS");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "forge train is one of 3 tasks of a Slurm step but was not started as an MPI rank"))
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(Cli, Bf16OnCpuBackendIsInputError) {
  const std::string dir = ::testing::TempDir() + "forge_cli_bf16_" + std::to_string(getpid());
  const Result r = forge("sft --sft.steps=1 --run.precision=bf16 --run.dir=" + dir);
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "forge: error: backend 'cpu' computes in FP32 only")) << r.err;
}

// The startup line names the CPU kernels, the SGEMM library and its kernels;
// with OpenBLAS's fallback core forced (OPENBLAS_CORETYPE=Prescott), forge
// still runs fast kernels: BLIS's where BLIS runs the SGEMM, and with
// FORGE_SGEMM=openblas the CPU's own OpenBLAS core, saying so. A bad
// FORGE_CPU_KERNELS is exit 2, named.
TEST(Cli, StartupLineNamesTheBlasCoreAndReplacesTheFallback) {
  Result r = forge("config");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "BLAS " + forge::host_runtime().blas + " core")) << r.err;
  EXPECT_TRUE(contains(r.err, "core " + forge::host_runtime().blas_core)) << r.err;
  EXPECT_TRUE(contains(r.err, "(kernels " + forge::host_runtime().cpu_kernels + ")")) << r.err;
  const std::string level = forge::host_runtime().cpu_level;
  if (level == "x86-64-v3" || level == "x86-64-v4") {
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    r = forge("config");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_FALSE(contains(r.err, "core Prescott")) << r.err;
    // Where OpenBLAS runs the weight gradients beside BLIS, it does on the
    // CPU's own core, and the line says which and why.
    if (!forge::host_runtime().blas_at_b.empty()) {
      EXPECT_TRUE(contains(r.err, "A^T B OpenBLAS")) << r.err;
      EXPECT_TRUE(contains(r.err, "switched from Prescott")) << r.err;
      // FORGE_SGEMM=blis: BLIS for every layout.
      setenv("FORGE_SGEMM", "blis", 1);
      const Result only_blis = forge("config");
      unsetenv("FORGE_SGEMM");
      EXPECT_EQ(only_blis.rc, 0) << only_blis.err;
      EXPECT_TRUE(contains(only_blis.err, "BLAS BLIS")) << only_blis.err;
      EXPECT_FALSE(contains(only_blis.err, "A^T B")) << only_blis.err;
    }
    setenv("FORGE_SGEMM", "openblas", 1);
    r = forge("config");
    unsetenv("FORGE_SGEMM");
    unsetenv("OPENBLAS_CORETYPE");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "BLAS OpenBLAS")) << r.err;
    EXPECT_TRUE(contains(r.err, "switched from Prescott")) << r.err;
    EXPECT_FALSE(contains(r.err, "core Prescott")) << r.err;
  }
  setenv("FORGE_CPU_KERNELS", "pentium", 1);
  r = forge("config");
  unsetenv("FORGE_CPU_KERNELS");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "FORGE_CPU_KERNELS: no CPU kernels 'pentium'")) << r.err;
}

// Where BLIS runs the SGEMM, forge passes its configuration to bli_init
// (blis_config.hpp): a BLIS_ARCH_TYPE naming a fallback (generic) is replaced
// by the configuration forge runs without it, a usable one is used by name
// (BLIS alone reads "haswell" as 0, skx), and one BLIS would abort on (knc,
// not in Debian's build) is ignored with a warning instead of killing the
// process.
TEST(Cli, BlisArchTypeReplacedWhenAFallbackAndNeverFatal) {
  if (forge::host_runtime().blas.rfind("BLIS", 0) != 0 || std::getenv("BLIS_ARCH_TYPE"))
    GTEST_SKIP() << "BLIS does not run the SGEMM here";
  const std::string own = forge::host_runtime().blas_core;
  const std::string level = forge::host_runtime().cpu_level;
  auto with = [](const char* value) {
    setenv("BLIS_ARCH_TYPE", value, 1);
    const Result r = forge("config");
    unsetenv("BLIS_ARCH_TYPE");
    return r;
  };
  if (level == "x86-64-v3" || level == "x86-64-v4") {
    Result r = with("generic");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "core " + own + " (switched from generic")) << r.err;
    r = with("haswell");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.err, "core haswell (BLIS_ARCH_TYPE=haswell)")) << r.err;
  }
  const Result r = with("2");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "core " + own + " (BLIS_ARCH_TYPE=2 ignored: knc is not a configuration")) << r.err;

  // FORGE_BLAS_CORETYPE=keep: BLIS's own choice runs, and a warning says so
  // exactly when it is not the configuration forge would have chosen (a
  // Zen 5 gets generic, an Emerald Rapids haswell, a Zen 1 zen; a Zen 4
  // zen3, no warning).
  setenv("FORGE_BLAS_CORETYPE", "keep", 1);
  const Result kept = forge("config");
  unsetenv("FORGE_BLAS_CORETYPE");
  ASSERT_EQ(kept.rc, 0) << kept.err;
  const size_t at = kept.err.find("BLAS BLIS ");
  ASSERT_NE(at, std::string::npos) << kept.err;
  ASSERT_NE(kept.err.find(" core ", at), std::string::npos) << kept.err;
  const size_t core_at = kept.err.find(" core ", at) + 6;
  const std::string kept_core = kept.err.substr(core_at, kept.err.find_first_of(" ,", core_at) - core_at);
  EXPECT_EQ(contains(kept.err, "BLIS runs its " + kept_core + " kernels"), kept_core != own)
      << "forge's choice " << own << ", BLIS's own " << kept_core << ": " << kept.err;
}

}  // namespace
