// The HDF5 rollout store: exact round trip of every array and table; an SWMR
// reader following a writer in another process (it sees what was flushed,
// then more after refresh); a writer killed with SIGKILL at an arbitrary
// point leaves a file holding at least everything up to its last completed
// flush, as whole episodes; a resumed run reopens such a file, keeps the
// steps before its checkpoint and appends after them; and InputError naming the file for a missing,
// non-HDF5, truncated, corrupted, foreign or newer-schema file.
//
// Processes synchronize through pipes (reads with a deadline), never sleeps.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "env/perturbation.hpp"
#include "io_hdf5/h5_file.hpp"
#include "io_hdf5/rollout_reader.hpp"
#include "io_hdf5/rollout_store.hpp"

namespace fs = std::filesystem;

namespace forge {
namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("forge_rollouts_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

RolloutStoreOptions options(double flush_seconds = 1e9) {
  RolloutStoreOptions o;
  o.config_ini = "[train]\nsteps = 3\n";
  o.domains = {"calc", "search"};
  o.template_families = all_template_families();
  o.flush_seconds = flush_seconds;
  return o;
}

// Episode i of a deterministic stream (same i, same episode).
Trajectory make_episode(uint64_t i) {
  Rng rng(i * 7919 + 1);
  static const auto families = all_template_families();
  Trajectory t;
  t.episode_id = i;
  t.env = i % 3 ? "calc" : "search";
  t.task_id = rng.next_u64();
  t.group = static_cast<int32_t>(i / 4);
  t.template_family = families[rng.below(families.size())];
  const int n_calls = 1 + static_cast<int>(rng.below(3));
  std::vector<int32_t> history;
  for (int c = 0; c < n_calls; ++c) {
    LlmCall call;
    for (int k = 0, n = 3 + static_cast<int>(rng.below(20)); k < n; ++k)
      history.push_back(static_cast<int32_t>(rng.below(272)));
    call.context = history;
    for (int k = 0, n = static_cast<int>(rng.below(12)); k < n; ++k) {  // 0 generated tokens happens
      call.generated.push_back(static_cast<int32_t>(rng.below(272)));
      call.logprobs.push_back(-static_cast<float>(rng.uniform() * 5));
      call.versions.push_back(static_cast<int32_t>(i / 8 + rng.below(2)));
    }
    history.insert(history.end(), call.generated.begin(), call.generated.end());
    t.calls.push_back(call);
  }
  t.reward = {static_cast<float>(rng.uniform()), static_cast<float>(rng.uniform() - 0.5),
              -static_cast<float>(rng.uniform())};
  t.success = rng.below(2) == 1;
  t.abandoned = rng.below(3) == 0;
  t.turns = n_calls;
  t.tool_errors = static_cast<int32_t>(rng.below(3));
  t.recoveries = static_cast<int32_t>(rng.below(2));
  t.safety_events = static_cast<int32_t>(rng.below(3));
  t.reward.safety = -static_cast<float>(t.safety_events);
  return t;
}

std::vector<Trajectory> batch(uint64_t first, int n) {
  std::vector<Trajectory> out;
  for (int k = 0; k < n; ++k) out.push_back(make_episode(first + k));
  return out;
}

// Step k of a run with n episodes a step: episodes k n .. (k + 1) n - 1,
// consumed at step k (policy version k), then the step's metrics.
void append_training_step(RolloutStore& store, int k, int n) {
  store.append_episodes(batch(static_cast<uint64_t>(k) * n, n), k, k);
  StepMetrics m;
  m.step = k;
  store.append_step(m);
}

void expect_same(const Trajectory& a, const Trajectory& b) {
  EXPECT_EQ(a.episode_id, b.episode_id);
  EXPECT_EQ(a.env, b.env);
  EXPECT_EQ(a.task_id, b.task_id);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.template_family, b.template_family);
  EXPECT_EQ(a.reward.outcome, b.reward.outcome);
  EXPECT_EQ(a.reward.process, b.reward.process);
  EXPECT_EQ(a.reward.efficiency, b.reward.efficiency);
  EXPECT_EQ(a.success, b.success);
  EXPECT_EQ(a.abandoned, b.abandoned);
  EXPECT_EQ(a.turns, b.turns);
  EXPECT_EQ(a.tool_errors, b.tool_errors);
  EXPECT_EQ(a.recoveries, b.recoveries);
  ASSERT_EQ(a.calls.size(), b.calls.size());
  for (size_t c = 0; c < a.calls.size(); ++c) {
    EXPECT_EQ(a.calls[c].context, b.calls[c].context);
    EXPECT_EQ(a.calls[c].generated, b.calls[c].generated);
    EXPECT_EQ(a.calls[c].logprobs, b.calls[c].logprobs);
    EXPECT_EQ(a.calls[c].versions, b.calls[c].versions);
  }
}

// ---- pipes with deadlines --------------------------------------------------------

struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe(fd), 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  // Used in the child: a failed write ends it with code 1 (through fork_child).
  void send(int64_t v) const {
    if (::write(fd[1], &v, sizeof v) != static_cast<ssize_t>(sizeof v))
      throw std::runtime_error("pipe write failed");
  }
  // The next value, or -1 after 60 s or when the other end closed.
  int64_t receive() const {
    pollfd p{fd[0], POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return -1;
    int64_t v = -1;
    return ::read(fd[0], &v, sizeof v) == static_cast<ssize_t>(sizeof v) ? v : -1;
  }
};

// Runs body in a child process; its exceptions end it with code 1.
pid_t fork_child(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 1;
    }
    ::_exit(rc);
  }
  return pid;
}

// Kills and reaps a child that a failed assertion left running.
struct ChildGuard {
  pid_t pid;
  ~ChildGuard() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// ---- tests -----------------------------------------------------------------------

TEST(RolloutStore, RoundTripOfEveryArrayAndTable) {
  const std::string path = temp_dir("roundtrip") + "/rollouts.h5";
  std::vector<Trajectory> all;
  {
    RolloutStore store(path, options());
    for (int step = 0; step < 3; ++step) {
      const auto b = batch(all.size(), 7 + step);
      store.append_episodes(b, step, step + 1);  // versions are i/8 + {0,1}: staleness varies
      all.insert(all.end(), b.begin(), b.end());
      StepMetrics m;
      m.step = step;
      m.objective = 0.5 * step;
      m.reward_mean = 0.25 + step;
      m.tree_token_ratio = 0.6;
      m.tokens_per_s = 1000 + step;
      m.engine_mismatch = step == 0 ? std::nan("") : 1e-7 * step;  // NaN: a step without staleness-0 tokens
      m.stale_drift = 0.01 * (step + 1);
      m.safety_mean = -0.5 * step;
      m.grad_norm = step == 2 ? 0.0 : 1.5 + step;  // 0: no optimizer step
      m.lr = step == 2 ? 0.0 : 1e-4 * (step + 1);
      m.groups = 4 + step;
      m.zero_variance_groups = step;
      m.dropped_groups = 2 * step;
      m.masked_groups = 3 * step;
      m.abandoned = step + 1;
      for (int b = 0; b < rollout_schema::kStalenessBins; ++b) m.drift_by_staleness[b] = b == 3 ? std::nan("") : step + 0.001 * b;
      store.append_step(m);
      if (step == 1) store.flush();
    }
  }
  RolloutReader r(path);
  EXPECT_TRUE(r.swmr());
  EXPECT_EQ(r.schema_version(), rollout_schema::kSchemaVersion);
  EXPECT_EQ(r.config_ini(), "[train]\nsteps = 3\n");
  EXPECT_EQ(r.domains(), (std::vector<std::string>{"calc", "search"}));
  EXPECT_EQ(r.template_families(), all_template_families());
  ASSERT_EQ(r.n_episodes(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) expect_same(r.episode(static_cast<int64_t>(i)), all[i]);

  // The flat arrays: context tokens carry NaN, -1 and mask 0.
  const auto lp = r.read<float>("logprobs", 0, r.n_tokens());
  const auto ver = r.read<int32_t>("versions", 0, r.n_tokens());
  const auto mask = r.read<uint8_t>("loss_mask", 0, r.n_tokens());
  int64_t pos = 0, calls = 0;
  for (const auto& t : all)
    for (const auto& c : t.calls) {
      for (size_t k = 0; k < c.context.size(); ++k, ++pos) {
        EXPECT_TRUE(std::isnan(lp[pos]));
        EXPECT_EQ(ver[pos], -1);
        EXPECT_EQ(mask[pos], 0);
      }
      for (size_t k = 0; k < c.generated.size(); ++k, ++pos) EXPECT_EQ(mask[pos], 1);
      ++calls;
    }
  EXPECT_EQ(pos, r.n_tokens());
  EXPECT_EQ(calls, r.n_calls());

  const EpisodeTable e = r.episodes();
  ASSERT_EQ(e.size(), all.size());
  std::array<std::array<int32_t, rollout_schema::kStalenessBins>, 3> hist{};
  for (size_t i = 0; i < all.size(); ++i) {
    const int step = e.consumed_step[i];
    EXPECT_EQ(e.staleness[i], all[i].oldest_version() < 0 ? -1 : step + 1 - all[i].oldest_version());
    if (e.staleness[i] >= 0) ++hist[step][std::min(e.staleness[i], rollout_schema::kStalenessBins - 1)];
    int64_t gen = 0;
    for (const auto& c : all[i].calls) gen += static_cast<int64_t>(c.generated.size());
    EXPECT_EQ(e.generated_tokens[i], gen);
    EXPECT_EQ(r.domains()[e.env[i]], all[i].env);
  }
  const auto steps = r.steps();
  ASSERT_EQ(steps.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(steps[s].step, s);
    EXPECT_EQ(steps[s].objective, 0.5 * s);
    EXPECT_EQ(steps[s].reward_mean, 0.25 + s);
    EXPECT_EQ(steps[s].tree_token_ratio, 0.6);
    EXPECT_EQ(steps[s].tokens_per_s, 1000 + s);
    EXPECT_EQ(steps[s].staleness_hist, hist[s]);
    if (s == 0) EXPECT_TRUE(std::isnan(steps[s].engine_mismatch));
    else EXPECT_EQ(steps[s].engine_mismatch, 1e-7 * s);
    EXPECT_EQ(steps[s].stale_drift, 0.01 * (s + 1));
    EXPECT_TRUE(std::isnan(steps[s].drift_by_staleness[3]));
    EXPECT_EQ(steps[s].drift_by_staleness[7], s + 0.001 * 7);
    EXPECT_TRUE(std::isnan(steps[s].mixed_mismatch));
    EXPECT_EQ(steps[s].safety_mean, -0.5 * s);
    EXPECT_EQ(steps[s].grad_norm, s == 2 ? 0.0 : 1.5 + s);
    EXPECT_EQ(steps[s].lr, s == 2 ? 0.0 : 1e-4 * (s + 1));
    EXPECT_EQ(steps[s].groups, 4 + s);
    EXPECT_EQ(steps[s].zero_variance_groups, s);
    EXPECT_EQ(steps[s].dropped_groups, 2 * s);
    EXPECT_EQ(steps[s].masked_groups, 3 * s);
    EXPECT_EQ(steps[s].abandoned, s + 1);
  }
  EXPECT_THROW(r.episode(static_cast<int64_t>(all.size())), InputError);
}

TEST(RolloutStore, UndeclaredDomainIsAnError) {
  const std::string path = temp_dir("undeclared") + "/rollouts.h5";
  RolloutStore store(path, options());
  Trajectory t = make_episode(1);
  t.env = "chess";
  try {
    store.append_episodes({t}, 0, 0);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'chess'"), std::string::npos) << e.what();
  }
}

TEST(RolloutStore, SwmrReaderFollowsTheWriter) {
  const std::string path = temp_dir("swmr") + "/rollouts.h5";
  Pipe to_parent, to_child;
  const pid_t pid = fork_child([&] {
    RolloutStore store(path, options());
    store.append_episodes(batch(0, 5), 0, 0);
    store.append_step(StepMetrics{});
    store.flush();
    to_parent.send(1);
    if (to_child.receive() != 1) return;
    store.append_episodes(batch(5, 6), 1, 1);  // buffered, not flushed
    to_parent.send(2);
    if (to_child.receive() != 2) return;
    store.flush();
    to_parent.send(3);
    if (to_child.receive() != 3) return;  // the reader is done before the writer closes
  });
  ASSERT_EQ(to_parent.receive(), 1);
  {
    RolloutReader r(path);
    EXPECT_TRUE(r.swmr());
    EXPECT_EQ(r.n_episodes(), 5);
    EXPECT_EQ(r.n_steps(), 1);
    to_child.send(1);
    ASSERT_EQ(to_parent.receive(), 2);
    r.refresh();
    EXPECT_EQ(r.n_episodes(), 5);  // not flushed yet
    to_child.send(2);
    ASSERT_EQ(to_parent.receive(), 3);
    r.refresh();
    ASSERT_EQ(r.n_episodes(), 11);
    for (int i = 0; i < 11; ++i) expect_same(r.episode(i), make_episode(i));
  }
  to_child.send(3);
  const int status = wait_child(pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(RolloutStore, SigkilledWriterLeavesEverythingUpToTheLastFlush) {
  const std::string path = temp_dir("sigkill") + "/rollouts.h5";
  constexpr int kPerBatch = 9;
  Pipe flushed;
  const pid_t pid = fork_child([&] {
    RolloutStore store(path, options());
    // Flush after every batch and report it; keep going until killed.
    for (int k = 0; k < 100000; ++k) {
      append_training_step(store, k, kPerBatch);
      store.flush();
      flushed.send((k + 1) * kPerBatch);
    }
  });
  ChildGuard guard{pid};
  int64_t acknowledged = 0;
  for (int i = 0; i < 5; ++i) acknowledged = flushed.receive();
  ASSERT_EQ(acknowledged, 5 * kPerBatch);
  ::kill(pid, SIGKILL);  // somewhere in appending or flushing a later batch
  const int status = wait_child(pid);
  guard.pid = 0;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  RolloutReader r(path);
  ASSERT_GE(r.n_episodes(), acknowledged);
  EXPECT_GE(r.n_steps(), acknowledged / kPerBatch);
  for (int64_t i = 0; i < r.n_episodes(); ++i) expect_same(r.episode(i), make_episode(i));
  const EpisodeTable e = r.episodes();
  EXPECT_EQ(static_cast<int64_t>(e.size()), r.n_episodes());
}

TEST(RolloutStore, ResumeAfterSigkillKeepsEarlierStepsAndDropsTheRest) {
  const std::string path = temp_dir("resume") + "/rollouts.h5";
  constexpr int kPerStep = 4;
  Pipe flushed;
  const pid_t pid = fork_child([&] {
    RolloutStore store(path, options());
    for (int k = 0; k < 100000; ++k) {
      append_training_step(store, k, kPerStep);
      store.flush();
      flushed.send(k + 1);
    }
  });
  ChildGuard guard{pid};
  for (int i = 0; i < 6; ++i) ASSERT_EQ(flushed.receive(), i + 1);
  ::kill(pid, SIGKILL);
  wait_child(pid);
  guard.pid = 0;

  // As if the newest checkpoint were at step 3: steps 3.. run again.
  {
    RolloutStoreOptions o = options();
    o.resume_step = 3;
    RolloutStore store(path, o);
    for (int k = 3; k < 8; ++k) append_training_step(store, k, kPerStep);
  }
  RolloutReader r(path);
  ASSERT_EQ(r.n_episodes(), 8 * kPerStep);
  for (int64_t i = 0; i < r.n_episodes(); ++i) expect_same(r.episode(i), make_episode(i));
  const auto steps = r.steps();
  ASSERT_EQ(steps.size(), 8u);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(steps[k].step, k);
  const EpisodeTable e = r.episodes();
  for (int64_t i = 0; i < r.n_episodes(); ++i) EXPECT_EQ(e.consumed_step[i], i / kPerStep);
}

// A newer forge may append a domain (code after calc and search): resuming
// an older file keeps its episodes and extends its domain list; any other
// change of the list is refused.
TEST(RolloutStore, ResumeAcceptsDomainsAppendedAtTheEnd) {
  const std::string path = temp_dir("domains") + "/rollouts.h5";
  {
    RolloutStore store(path, options());
    store.append_episodes(batch(0, 4), 0, 0);
  }
  RolloutStoreOptions grown = options();
  grown.domains.push_back("code");
  grown.resume_step = 5;
  {
    RolloutStore store(path, grown);
  }
  RolloutReader r(path);
  EXPECT_EQ(r.domains(), grown.domains);
  EXPECT_EQ(r.n_episodes(), 4);
  RolloutStoreOptions swapped = options();
  swapped.domains = {"search", "calc", "code"};
  swapped.resume_step = 5;
  EXPECT_THROW(RolloutStore(path, swapped), InputError);
}

void write_four_steps(const std::string& path, int per_step);
void make_schema_4(const std::string& from, const std::string& to);
void set_schema_version(const std::string& path, int64_t version);
void extend_table(const std::string& path, const std::string& table, hsize_t rows);

// A run resumed by a newer forge (a requeued Slurm job after an upgrade)
// goes on in its file: the columns the file predates get its kept rows as a
// reader of the old file saw them. A schema older than the oldest resumable
// one is refused, the file unchanged.
TEST(RolloutStore, ResumeUpgradesAnOlderSchemaInPlace) {
  const std::string dir = temp_dir("upgrade");
  const std::string current = dir + "/current.h5", path = dir + "/rollouts.h5";
  write_four_steps(current, 3);
  make_schema_4(current, path);
  // An upgrade cut short after it created a column: readers skip the
  // column (its rows would hide every step), the resume recreates it.
  {
    h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    const hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = 16;
    h5::Handle space(H5Screate_simple(1, &zero, &unlimited), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.id(), 1, &chunk);
    h5::Handle d(H5Dcreate2(f.id(), "steps/grad_norm", H5T_NATIVE_DOUBLE, space.id(), H5P_DEFAULT, dcpl.id(),
                            H5P_DEFAULT),
                 H5Dclose);
    ASSERT_TRUE(d.valid());
  }
  EXPECT_EQ(RolloutReader(path).steps().size(), 4u);
  {
    RolloutStoreOptions o = options();
    o.resume_step = 2;  // steps 0 and 1 kept, 2.. run again
    RolloutStore store(path, o);
    for (int k = 2; k < 5; ++k) {
      store.append_episodes(batch(static_cast<uint64_t>(k) * 3, 3), k, k);
      StepMetrics m;
      m.step = k;
      m.grad_norm = 0.25 * k;
      m.groups = k;
      store.append_step(m);
    }
  }
  {
    const RolloutReader r(path);
    EXPECT_EQ(r.schema_version(), rollout_schema::kSchemaVersion);
    ASSERT_EQ(r.n_episodes(), 15);
    for (int64_t i = 0; i < r.n_episodes(); ++i) expect_same(r.episode(i), make_episode(i));
    const std::vector<StepMetrics> steps = r.steps();
    ASSERT_EQ(steps.size(), 5u);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(steps[k].step, k);
      if (k < 2) {
        EXPECT_TRUE(std::isnan(steps[k].grad_norm));
        EXPECT_EQ(steps[k].groups, -1);
      } else {
        EXPECT_EQ(steps[k].grad_norm, 0.25 * k);
        EXPECT_EQ(steps[k].groups, k);
      }
    }
  }
  // Schema 2 as a reader accepts it: steps/logprob_mismatch, not its three successors.
  const std::string old = dir + "/v2.h5";
  fs::copy_file(current, old);
  {
    h5::Handle f(H5Fopen(old.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    for (const char* name : {"steps/engine_mismatch", "steps/stale_drift", "steps/drift_by_staleness"})
      ASSERT_GE(H5Ldelete(f.id(), name, H5P_DEFAULT), 0);
    const hsize_t n = 4;
    h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle d(H5Dcreate2(f.id(), "steps/logprob_mismatch", H5T_NATIVE_DOUBLE, space.id(), H5P_DEFAULT,
                            H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
    const std::vector<double> values(n, 0.5);
    ASSERT_GE(H5Dwrite(d.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  set_schema_version(old, 2);
  const auto size_before = fs::file_size(old);
  try {
    RolloutStoreOptions o = options();
    o.resume_step = 1;
    RolloutStore store(old, o);
    ADD_FAILURE() << "a schema-2 file was resumed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 2, older than this forge resumes"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fs::file_size(old), size_before);
  EXPECT_EQ(RolloutReader(old).steps().size(), 4u);
}

// A schema 4 file has no commit record: step rows whose extent was set but
// whose data never landed read as step 0. A resume keeps the steps only
// while they increase (it once kept two such rows as real steps 0, for good).
TEST(RolloutStore, ResumeOfAnOlderSchemaKeepsStepsWhileTheyIncrease) {
  const std::string dir = temp_dir("upgrade_unwritten");
  const std::string current = dir + "/current.h5", path = dir + "/rollouts.h5";
  write_four_steps(current, 3);
  make_schema_4(current, path);
  extend_table(path, "steps/", 6);
  // A reader ends them there too, in its count as in its table (an upgrade
  // records that count: one killed before the resume's own record left a
  // record over the unwritten rows, which a schema 5 reader refuses).
  EXPECT_EQ(RolloutReader(path).n_steps(), 4);
  EXPECT_EQ(RolloutReader(path).steps().size(), 4u);
  {
    RolloutStoreOptions o = options();
    o.resume_step = 6;
    RolloutStore store(path, o);
    append_training_step(store, 6, 3);
  }
  std::vector<int64_t> steps;
  for (const StepMetrics& m : RolloutReader(path).steps()) steps.push_back(m.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2, 3, 6}));
}

template <typename T>
void poke(const std::string& path, const char* dataset, hsize_t row, T value);
void expect_input_error(const std::string& path, const std::vector<std::string>& fragments);

// A file of another template-family list (a schema 3 file predates
// template.tool_as_system, whose names interleave with the old ones): the
// resume keeps the file's codes and appends the run's new families (it was
// refused as "another template family list").
TEST(RolloutStore, ResumeKeepsTheFilesFamilyCodesAndAddsTheRunsNewOnes) {
  const std::string path = temp_dir("families") + "/rollouts.h5";
  const std::vector<std::string> all = all_template_families();
  const std::vector<std::string> older(all.rbegin(), all.rend() - 1);  // another order, without all[0]
  {
    RolloutStoreOptions o = options();
    o.template_families = older;
    RolloutStore store(path, o);
    for (int k = 0; k < 3; ++k) {
      std::vector<Trajectory> b = batch(static_cast<uint64_t>(k) * 3, 3);
      for (Trajectory& t : b) t.template_family = older[static_cast<size_t>(k)];
      store.append_episodes(b, k, k);
      StepMetrics m;
      m.step = k;
      store.append_step(m);
    }
  }
  std::vector<Trajectory> late = batch(100, 3);
  late[0].template_family = all[0];
  {
    RolloutStoreOptions o = options();
    o.resume_step = 2;
    RolloutStore store(path, o);
    store.append_episodes(late, 2, 2);
    StepMetrics m;
    m.step = 2;
    store.append_step(m);
  }
  const RolloutReader r(path);
  std::vector<std::string> want = older;
  want.push_back(all[0]);
  EXPECT_EQ(r.template_families(), want);
  ASSERT_EQ(r.n_episodes(), 9);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(r.episode(i).template_family, older[static_cast<size_t>(i / 3)]) << i;
  for (int64_t i = 6; i < 9; ++i) EXPECT_EQ(r.episode(i).template_family, late[static_cast<size_t>(i - 6)].template_family);
}

// Likewise episode and call rows (offset 0, no calls or tokens): they end
// the tables, rather than reading as episodes without calls or as damage.
TEST(RolloutStore, UnwrittenRowsOfAnOlderSchemaEndItsTables) {
  const std::string dir = temp_dir("legacy_unwritten");
  const std::string current = dir + "/current.h5", path = dir + "/rollouts.h5";
  write_four_steps(current, 3);
  const RolloutReader before(current);
  const int64_t episodes = before.n_episodes(), calls = before.n_calls(), tokens = before.n_tokens();
  make_schema_4(current, path);
  extend_table(path, "episodes/", static_cast<hsize_t>(episodes + 3));
  extend_table(path, "calls/", static_cast<hsize_t>(calls + 5));
  for (const char* array : {"tokens", "logprobs", "versions", "loss_mask"})  // (found by review: counted)
    extend_table(path, array, static_cast<hsize_t>(tokens + 100));
  {
    const RolloutReader r(path);
    EXPECT_EQ(r.n_episodes(), episodes);
    EXPECT_EQ(r.n_calls(), calls);
    EXPECT_EQ(r.n_tokens(), tokens);
    EXPECT_EQ(r.episodes().size(), static_cast<size_t>(episodes));
    for (int64_t i = 0; i < r.n_episodes(); ++i) EXPECT_FALSE(r.episode(i).calls.empty()) << i;
  }
  // A row that does not follow, with rows that point into the table after
  // it, is damage, not the end of the table.
  poke(path, "episodes/call_offset", 5, int64_t{1});
  expect_input_error(path, {"episodes row 5 does not follow the rows before it while row 6 after it points into "
                            "its table (corrupted?)"});
}

template <typename T>
void poke(const std::string& path, const char* dataset, hsize_t row, T value);

// How a read of `path` ends in a child process under a 1 GiB address-space
// limit: 0 read, 2 InputError, 3 out of memory, 4 another error.
int read_under_memory_limit(const std::string& path, const std::function<void(const RolloutReader&)>& read) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const rlimit small{rlim_t{1} << 30, rlim_t{1} << 30};
    setrlimit(RLIMIT_AS, &small);
    int code = 4;
    try {
      read(RolloutReader(path));
      code = 0;
    } catch (const InputError&) {
      code = 2;
    } catch (const std::bad_alloc&) {
      code = 3;
    } catch (...) {
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Damaged lengths are refused before anything is allocated for them: a call
// of 2^28 tokens (an episode read once zero-filled its buffer first), and a
// table stored whole (not chunked) whose extent is 2^36 rows with no storage
// (the chunk count that bounds a chunked one's rows does not apply).
TEST(RolloutStore, DamagedLengthsAllocateNothing) {
  const std::string dir = temp_dir("damaged_lengths");
  const std::string good = dir + "/good.h5", v4 = dir + "/v4.h5";
  write_four_steps(good, 3);
  make_schema_4(good, v4);
  poke<int32_t>(v4, "calls/context_len", 5, int32_t{1} << 28);
  EXPECT_EQ(read_under_memory_limit(v4, [](const RolloutReader& r) {
              for (int64_t i = 0; i < r.n_episodes(); ++i) r.episode(i);
            }),
            2);
  // A schema 4 file: no commit record bounds its tables.
  const std::string whole = dir + "/whole.h5";
  make_schema_4(good, whole);
  {
    h5::Handle f(H5Fopen(whole.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    for (const auto& c : rollout_schema::columns()) {
      const std::string name = c.path;
      if (name.rfind("steps/", 0) != 0 || H5Lexists(f.id(), c.path, H5P_DEFAULT) <= 0) continue;
      ASSERT_GE(H5Ldelete(f.id(), c.path, H5P_DEFAULT), 0) << name;
      const hsize_t dims[2] = {hsize_t{1} << 36, static_cast<hsize_t>(c.width)};
      h5::Handle space(H5Screate_simple(c.width == 1 ? 1 : 2, dims, nullptr), H5Sclose);
      h5::Handle d(H5Dcreate2(f.id(), c.path, rollout_schema::native_type(c.type), space.id(), H5P_DEFAULT,
                              H5P_DEFAULT, H5P_DEFAULT),
                   H5Dclose);
      ASSERT_TRUE(d.valid()) << name;
    }
  }
  const int whole_read = read_under_memory_limit(whole, [](const RolloutReader& r) { r.steps(); });
  EXPECT_TRUE(whole_read == 0 || whole_read == 2) << whole_read;  // not 3: out of memory
}

// A writer killed while it held the file open outside SWMR (a resume
// trimming or upgrading it) leaves an "open for write" flag that no reader
// gets past; the next resume clears it and goes on.
TEST(RolloutStore, ResumeClearsTheFlagOfAWriterKilledOutsideSwmr) {
  const std::string path = temp_dir("flag") + "/rollouts.h5";
  write_four_steps(path, 2);
  Pipe opened;
  const pid_t pid = fork_child([&] {
    h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_libver_bounds(fapl.id(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.id());
    opened.send(f >= 0 ? 1 : 0);
    for (;;) ::pause();
  });
  ChildGuard guard{pid};
  ASSERT_EQ(opened.receive(), 1);
  ::kill(pid, SIGKILL);
  wait_child(pid);
  guard.pid = 0;
  EXPECT_THROW(RolloutReader{path}, InputError);  // as any reader of it would
  {
    RolloutStoreOptions o = options();
    o.resume_step = 3;
    RolloutStore store(path, o);
    append_training_step(store, 3, 2);
  }
  const RolloutReader r(path);
  EXPECT_EQ(r.steps().size(), 4u);
  EXPECT_EQ(r.n_episodes(), 8);
}

// A dataset's extent past its written chunks (2^40 rows of a sparse file;
// or a writer's extent whose rows have not landed) holds fill values, not
// rows: the reader counts what the chunks hold (it once allocated for 2^40
// rows and failed with an out-of-memory error naming the KV cache).
TEST(RolloutStore, ExtentsPastTheWrittenChunksAreNotRows) {
  const std::string path = temp_dir("extent") + "/rollouts.h5";
  write_four_steps(path, 3);
  const int64_t calls = RolloutReader(path).n_calls();
  extend_table(path, "steps/", hsize_t{1} << 40);
  extend_table(path, "calls/", hsize_t{1} << 40);
  const RolloutReader r(path);
  EXPECT_EQ(r.n_calls(), calls);
  EXPECT_EQ(r.steps().size(), 4u);
  EXPECT_EQ(r.episodes().size(), 12u);
}

void expect_input_error(const std::string& path, const std::vector<std::string>& fragments) {
  try {
    RolloutReader r(path);
    r.episodes();
    r.steps();
    for (int64_t i = 0; i < r.n_episodes(); ++i) r.episode(i);
    r.read<int32_t>("tokens", 0, r.n_tokens());
    r.read<float>("logprobs", 0, r.n_tokens());
    r.read<int32_t>("versions", 0, r.n_tokens());
    r.read<uint8_t>("loss_mask", 0, r.n_tokens());
    FAIL() << "expected an InputError for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
}

// A file of 4 steps of `per_step` episodes each (consumed at steps 0..3).
void write_four_steps(const std::string& path, int per_step) {
  RolloutStore store(path, options());
  for (int s = 0; s < 4; ++s) append_training_step(store, s, per_step);
}

// Every dataset of `table` ("steps/") the file has, extended to `rows`
// without writing them (as a writer killed before its flush leaves them).
void extend_table(const std::string& path, const std::string& table, hsize_t rows) {
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(f.valid());
  for (const auto& c : rollout_schema::columns()) {
    const std::string name = c.path;
    if (name.rfind(table, 0) != 0 || H5Lexists(f.id(), c.path, H5P_DEFAULT) <= 0) continue;
    h5::Handle d(H5Dopen2(f.id(), c.path, H5P_DEFAULT), H5Dclose);
    const hsize_t dims[2] = {rows, static_cast<hsize_t>(c.width)};
    ASSERT_GE(H5Dset_extent(d.id(), dims), 0) << name;
  }
}

void set_schema_version(const std::string& path, int64_t version) {
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(f.valid());
  h5::Handle a(H5Aopen(f.id(), "schema_version", H5P_DEFAULT), H5Aclose);
  ASSERT_GE(H5Awrite(a.id(), H5T_NATIVE_INT64, &version), 0);
}

// A copy of `from` as schema 4 wrote it: without the columns of schema 5.
void make_schema_4(const std::string& from, const std::string& to) {
  fs::copy_file(from, to);
  {
    h5::Handle f(H5Fopen(to.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    int removed = 0;
    for (const auto& c : rollout_schema::columns())
      if (rollout_schema::introduced_in(c.path) == 5) {
        ASSERT_GE(H5Ldelete(f.id(), c.path, H5P_DEFAULT), 0) << c.path;
        ++removed;
      }
    ASSERT_EQ(removed, 9);
  }
  set_schema_version(to, 4);
}

TEST(RolloutStore, BadFilesGiveInputErrorsNamingTheFile) {
  const std::string dir = temp_dir("bad");
  const std::string good = dir + "/good.h5";
  write_four_steps(good, 50);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 4096u);

  expect_input_error(dir + "/missing.h5", {"does not exist"});

  const std::string garbage = dir + "/garbage.h5";
  std::ofstream(garbage) << "this is not HDF5 at all";
  expect_input_error(garbage, {"not an HDF5"});

  const std::string truncated = dir + "/truncated.h5";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_input_error(truncated, {"truncated"});

  const std::string corrupted = dir + "/corrupted.h5";
  {
    std::string b = bytes;
    Rng rng(7);
    for (size_t i = b.size() / 4; i < 3 * b.size() / 4; ++i) b[i] = static_cast<char>(rng.below(256));
    std::ofstream(corrupted, std::ios::binary) << b;
  }
  expect_input_error(corrupted, {});

  // One flipped byte in the root group's header (its checksum fails): damage,
  // not a file of another kind.
  const std::string damaged_root = dir + "/damaged_root.h5";
  {
    std::string b = bytes;
    const size_t name = b.find("format");
    ASSERT_NE(name, std::string::npos);
    b[name + 2] = static_cast<char>(~b[name + 2]);
    std::ofstream(damaged_root, std::ios::binary) << b;
  }
  expect_input_error(damaged_root, {"damaged_root.h5", "damaged file"});

  const std::string foreign = dir + "/foreign.h5";
  {
    h5::File f = h5::File::create(foreign);
    f.set_attr("format", std::string("forge-checkpoint"));
  }
  expect_input_error(foreign, {"not a forge rollout file"});
  const std::string bare = dir + "/bare.h5";
  { h5::File::create(bare); }
  expect_input_error(bare, {"not a forge rollout file"});

  const std::string newer = dir + "/newer.h5";
  fs::copy_file(good, newer);
  {
    h5::Handle f(H5Fopen(newer.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    h5::Handle a(H5Aopen(f.id(), "schema_version", H5P_DEFAULT), H5Aclose);
    const int64_t v = rollout_schema::kSchemaVersion + 1;
    ASSERT_GE(H5Awrite(a.id(), H5T_NATIVE_INT64, &v), 0);
  }
  expect_input_error(newer, {"schema version " + std::to_string(rollout_schema::kSchemaVersion + 1), "newer"});

  // Older schemas: version 1 had no episodes/abandoned (read as all 0; a
  // version-2 file without it is corrupted); versions 1 and 2 had one mixed
  // steps/logprob_mismatch instead of the three schema-3 columns (read as
  // mixed_mismatch; the new figures read as NaN).
  const auto make_old = [&](const std::string& path, int64_t version, bool drop_abandoned) {
    fs::copy_file(good, path);
    h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(f.valid());
    if (drop_abandoned) {
      ASSERT_GE(H5Ldelete(f.id(), "episodes/abandoned", H5P_DEFAULT), 0);
    }
    hsize_t n = 0;
    {
      h5::Handle d(H5Dopen2(f.id(), "steps/step", H5P_DEFAULT), H5Dclose);
      h5::Handle space(H5Dget_space(d.id()), H5Sclose);
      H5Sget_simple_extent_dims(space.id(), &n, nullptr);
    }
    for (const char* name : {"steps/engine_mismatch", "steps/stale_drift", "steps/drift_by_staleness"})
      ASSERT_GE(H5Ldelete(f.id(), name, H5P_DEFAULT), 0);
    h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle d(H5Dcreate2(f.id(), "steps/logprob_mismatch", H5T_NATIVE_DOUBLE, space.id(), H5P_DEFAULT,
                            H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
    const std::vector<double> values(n, 0.125);
    ASSERT_GE(H5Dwrite(d.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    h5::Handle a(H5Aopen(f.id(), "schema_version", H5P_DEFAULT), H5Aclose);
    ASSERT_GE(H5Awrite(a.id(), H5T_NATIVE_INT64, &version), 0);
  };
  const std::string v2_without_abandoned = dir + "/v2-no-abandoned.h5";
  make_old(v2_without_abandoned, 2, true);
  expect_input_error(v2_without_abandoned, {"episodes/abandoned"});
  for (const int64_t version : {int64_t{1}, int64_t{2}}) {
    const std::string old = dir + "/v" + std::to_string(version) + ".h5";
    make_old(old, version, version == 1);
    const RolloutReader r(old);
    const EpisodeTable e = r.episodes();
    ASSERT_GT(e.size(), 0u);
    if (version == 1) {
      EXPECT_EQ(e.abandoned, std::vector<uint8_t>(e.size(), 0));
      EXPECT_FALSE(r.episode(0).abandoned);
    }
    const std::vector<StepMetrics> steps = r.steps();
    ASSERT_GT(steps.size(), 0u);
    for (const StepMetrics& m : steps) {
      EXPECT_EQ(m.mixed_mismatch, 0.125);
      EXPECT_TRUE(std::isnan(m.engine_mismatch));
      EXPECT_TRUE(std::isnan(m.stale_drift));
      EXPECT_TRUE(std::isnan(m.drift_by_staleness[3]));
    }
  }
  // Schema 4 had no step counts, gradient norm, learning rate or safety
  // mean: they read as -1 and NaN; a current file without one is corrupted.
  const std::string v4 = dir + "/v4.h5";
  make_schema_4(good, v4);
  {
    const RolloutReader r(v4);
    EXPECT_EQ(r.schema_version(), 4);
    const std::vector<StepMetrics> steps = r.steps();
    ASSERT_EQ(steps.size(), 4u);
    for (const StepMetrics& m : steps) {
      EXPECT_TRUE(std::isnan(m.grad_norm) && std::isnan(m.lr) && std::isnan(m.safety_mean));
      EXPECT_EQ(m.groups, -1);
      EXPECT_EQ(m.zero_variance_groups, -1);
      EXPECT_EQ(m.dropped_groups, -1);
      EXPECT_EQ(m.masked_groups, -1);
      EXPECT_EQ(m.abandoned, -1);
    }
  }
  const std::string no_lr = dir + "/v5-no-lr.h5";
  fs::copy_file(good, no_lr);
  {
    h5::Handle f(H5Fopen(no_lr.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Ldelete(f.id(), "steps/lr", H5P_DEFAULT), 0);
  }
  expect_input_error(no_lr, {"steps/lr"});

  // A current file without a schema-3 column is corrupted.
  const std::string missing = dir + "/v3-no-drift.h5";
  fs::copy_file(good, missing);
  {
    h5::Handle f(H5Fopen(missing.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Ldelete(f.id(), "steps/stale_drift", H5P_DEFAULT), 0);
  }
  expect_input_error(missing, {"steps/stale_drift"});
}

// Sets element `row` of a one-column dataset of `path` (int32 or int64 as T).
template <typename T>
void poke(const std::string& path, const char* dataset, hsize_t row, T value) {
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(f.valid());
  h5::Handle d(H5Dopen2(f.id(), dataset, H5P_DEFAULT), H5Dclose);
  ASSERT_TRUE(d.valid()) << dataset;
  h5::Handle space(H5Dget_space(d.id()), H5Sclose);
  const hsize_t one = 1;
  h5::Handle mem(H5Screate_simple(1, &one, nullptr), H5Sclose);
  ASSERT_GE(H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, &row, nullptr, &one, nullptr), 0);
  const hid_t type = sizeof(T) == 8 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32;
  ASSERT_GE(H5Dwrite(d.id(), type, mem.id(), space.id(), H5P_DEFAULT, &value), 0);
}

// A resume of `path` at `step` is an InputError whose message holds `part`.
void expect_resume_refused(const std::string& path, int step, const std::string& part) {
  RolloutStoreOptions o = options();
  o.resume_step = step;
  try {
    RolloutStore store(path, o);
    ADD_FAILURE() << "expected an InputError for a resume of " << path;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Offsets and counts that break the layout (overlapping calls, an episode
// that does not follow the one before it, a length past the tokens, a step
// index no run reaches) are InputErrors naming the row, not garbage rows, a
// crash or a silently shorter file; a resume never cuts a file whose rows
// are out of step order.
TEST(RolloutStore, DamagedOffsetsAndStepsAreInputErrors) {
  const std::string dir = temp_dir("damaged");
  const std::string good = dir + "/good.h5";
  write_four_steps(good, 10);
  const auto damaged = [&](const std::string& name, auto&& edit) {
    const std::string path = dir + "/" + name + ".h5";
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    edit(path);
    return path;
  };
  expect_input_error(damaged("overlap", [](const std::string& p) { poke<int64_t>(p, "calls/token_offset", 1, 0); }),
                     {"call 1", "does not follow"});
  expect_input_error(damaged("long", [](const std::string& p) {
                       poke<int32_t>(p, "calls/generated_len", 0, std::numeric_limits<int32_t>::max());
                     }),
                     {"call 0"});
  expect_input_error(damaged("episode", [](const std::string& p) { poke<int64_t>(p, "episodes/call_offset", 5, 0); }),
                     {"episode 5", "does not follow"});
  // A call that names another episode than the one whose calls it lies
  // among (an h5py reader following calls/episode got the wrong episode):
  // both the table and the single episode's read refuse it.
  const std::string owner = damaged("owner", [](const std::string& p) { poke<int64_t>(p, "calls/episode", 5, 999); });
  expect_input_error(owner, {"call 5 names episode 999"});
  {
    RolloutReader r(owner);
    int refused = 0;
    for (int64_t i = 0; i < r.n_episodes(); ++i) {
      try {
        r.episode(i);
      } catch (const InputError& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("names episode 999"), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(refused, 1);
  }
  expect_input_error(damaged("step", [](const std::string& p) {
                       poke<int64_t>(p, "steps/step", 2, std::numeric_limits<int64_t>::max());
                     }),
                     {"steps/step[2]"});
  // Steps out of order ([0, 1, 1, 3] was read as it stood).
  expect_input_error(damaged("step_order", [](const std::string& p) { poke<int64_t>(p, "steps/step", 2, 1); }),
                     {"steps/step[2] = 1 follows step 1"});

  // A damaged row in the middle of a table, where the search for the whole
  // rows looks first: an error, not a table cut there (which a resume would
  // then have cut from the file).
  const int64_t calls = RolloutReader(good).n_calls(), episodes = RolloutReader(good).n_episodes();
  for (const int64_t row : {calls / 2, calls / 2 + 1}) {
    const std::string path = damaged("middle_call_" + std::to_string(row), [&](const std::string& p) {
      poke<int64_t>(p, "calls/token_offset", row, int64_t{1} << 50);
    });
    expect_input_error(path, {std::to_string(row), "corrupted"});
    const auto size = fs::file_size(path);
    expect_resume_refused(path, 3, std::to_string(row));
    EXPECT_EQ(fs::file_size(path), size);
  }
  // A dataset that cannot grow (contiguous, as another writer may leave it):
  // the resume refuses before cutting any dataset.
  const std::string fixed = damaged("contiguous", [](const std::string& p) {
    h5::Handle f(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    std::vector<int32_t> turns;
    {
      h5::Handle d(H5Dopen2(f.id(), "episodes/turns", H5P_DEFAULT), H5Dclose);
      h5::Handle space(H5Dget_space(d.id()), H5Sclose);
      turns.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space.id())));
      ASSERT_GE(H5Dread(d.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, turns.data()), 0);
    }
    ASSERT_GE(H5Ldelete(f.id(), "episodes/turns", H5P_DEFAULT), 0);
    const hsize_t n = turns.size();
    h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle d(H5Dcreate2(f.id(), "episodes/turns", H5T_NATIVE_INT32, space.id(), H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT),
                 H5Dclose);
    ASSERT_GE(H5Dwrite(d.id(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, turns.data()), 0);
  });
  const int64_t tokens_before = RolloutReader(fixed).n_tokens(), calls_before = RolloutReader(fixed).n_calls();
  expect_resume_refused(fixed, 2, "episodes/turns");
  EXPECT_EQ(RolloutReader(fixed).n_tokens(), tokens_before);
  EXPECT_EQ(RolloutReader(fixed).n_calls(), calls_before);

  expect_input_error(damaged("middle_episode", [&](const std::string& p) {
                       poke<int32_t>(p, "episodes/n_calls", episodes / 2, -1);
                     }),
                     {"episode " + std::to_string(episodes / 2)});
  // The last row damaged: within the commit record it is damage too, not a
  // partial write to drop (a resume once cut that episode from the file).
  expect_input_error(damaged("last_episode", [&](const std::string& p) {
                       poke<int32_t>(p, "episodes/n_calls", episodes - 1, -1);
                     }),
                     {"episode " + std::to_string(episodes - 1), "a flush recorded it whole"});
  // A row past the record (a flush under way, or zeros a damaged extent
  // shows) is not read: the table keeps the recorded rows.
  const std::string extra = damaged("extra_row", [](const std::string& p) {
    h5::Handle f(H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    for (const auto& c : rollout_schema::columns()) {
      if (std::string(c.path).rfind("episodes/", 0) != 0) continue;
      h5::Handle d(H5Dopen2(f.id(), c.path, H5P_DEFAULT), H5Dclose);
      h5::Handle space(H5Dget_space(d.id()), H5Sclose);
      hsize_t dims[2] = {0, 0};
      H5Sget_simple_extent_dims(space.id(), dims, nullptr);
      dims[0] += 1;
      ASSERT_GE(H5Dset_extent(d.id(), dims), 0);
    }
  });
  EXPECT_EQ(RolloutReader(extra).n_episodes(), episodes);
  EXPECT_EQ(RolloutReader(extra).episodes().size(), static_cast<size_t>(episodes));

  const std::string order = damaged("order", [](const std::string& p) {
    poke<int32_t>(p, "episodes/consumed_step", 3, 7);
  });
  const auto size_before = fs::file_size(order);
  expect_resume_refused(order, 2, "out of step order");
  EXPECT_EQ(fs::file_size(order), size_before);
  EXPECT_EQ(RolloutReader(order).n_episodes(), 40);
}

// The commit record's own unwritten rows: its extent grown past the rows
// written (a kill between the two, or damage) read the fill value. At fill 0
// that was a record of nothing: every table read empty, and a resume cut
// the whole file to it.
TEST(RolloutStore, UnwrittenRowsOfTheCommitRecordArePassedOver) {
  const std::string dir = temp_dir("record_extent");
  const std::string good = dir + "/good.h5";
  write_four_steps(good, 3);
  const auto grow_record = [&](const std::string& name, hsize_t by) {
    const std::string path = dir + "/" + name + ".h5";
    fs::copy_file(good, path, fs::copy_options::overwrite_existing);
    h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    h5::Handle d(H5Dopen2(f.id(), rollout_schema::kFlushes, H5P_DEFAULT), H5Dclose);
    h5::Handle space(H5Dget_space(d.id()), H5Sclose);
    hsize_t dims[2] = {0, 0};
    H5Sget_simple_extent_dims(space.id(), dims, nullptr);
    dims[0] += by;
    EXPECT_GE(H5Dset_extent(d.id(), dims), 0);
    return path;
  };
  for (const hsize_t by : {hsize_t{1}, hsize_t{1} << 40}) {
    const std::string path = grow_record("grown_" + std::to_string(by), by);
    EXPECT_EQ(RolloutReader(path).n_episodes(), 12) << by;
    EXPECT_EQ(RolloutReader(path).steps().size(), 4u) << by;
  }
  {
    const std::string path = dir + "/grown_1.h5";
    RolloutStoreOptions o = options();
    o.resume_step = 3;
    { RolloutStore store(path, o); }
    EXPECT_EQ(RolloutReader(path).n_episodes(), 9);  // steps 0-2 kept
  }
  // An extent of 2^40 rows is refused by a resume (HDF5 would visit every
  // chunk position it cuts: the resume hung), the file unchanged.
  const std::string huge = dir + "/grown_" + std::to_string(hsize_t{1} << 40) + ".h5";
  const auto size = fs::file_size(huge);
  expect_resume_refused(huge, 3, "far past the");
  EXPECT_EQ(fs::file_size(huge), size);
  EXPECT_EQ(RolloutReader(huge).n_episodes(), 12);
  // The same refusal of a schema 4 file, which is upgraded first: the file
  // byte for byte as it was, no upgraded copy left (the upgraded file was
  // cut back to the original's size, and no reader could open it).
  const std::string s4 = dir + "/schema_4_far.h5";
  make_schema_4(good, s4);
  {
    std::string step_column;
    for (const auto& c : rollout_schema::columns())
      if (step_column.empty() && rollout_schema::table_of(c.path) == 3 && rollout_schema::introduced_in(c.path) <= 4)
        step_column = c.path;
    ASSERT_FALSE(step_column.empty());
    h5::Handle f(H5Fopen(s4.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    h5::Handle d(H5Dopen2(f.id(), step_column.c_str(), H5P_DEFAULT), H5Dclose);
    hsize_t dims[1] = {hsize_t{1} << 40};
    ASSERT_GE(H5Dset_extent(d.id(), dims), 0) << step_column;
  }
  const auto bytes_of = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string s4_bytes = bytes_of(s4);
  expect_resume_refused(s4, 3, "which is removed: '" + s4 + "' is as it was");
  EXPECT_EQ(bytes_of(s4) == s4_bytes, true);
  EXPECT_FALSE(fs::exists(s4 + ".upgrade"));
  EXPECT_EQ(RolloutReader(s4).n_episodes(), 12);
  // A file written before the record's fill value was -1 (fill 0): an
  // all-zero row after a non-zero one is passed over too.
  const std::string old = dir + "/zero_fill.h5";
  fs::copy_file(good, old, fs::copy_options::overwrite_existing);
  {
    h5::Handle f(H5Fopen(old.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    std::vector<int64_t> rows;
    {
      h5::Handle d(H5Dopen2(f.id(), rollout_schema::kFlushes, H5P_DEFAULT), H5Dclose);
      h5::Handle space(H5Dget_space(d.id()), H5Sclose);
      rows.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(space.id())));
      ASSERT_GE(H5Dread(d.id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
    }
    ASSERT_GE(H5Ldelete(f.id(), rollout_schema::kFlushes, H5P_DEFAULT), 0);
    const hsize_t n = rows.size() / 4, dims[2] = {n, 4}, grown[2] = {n + 1, 4}, maxdims[2] = {H5S_UNLIMITED, 4},
                  chunk[2] = {256, 4};
    h5::Handle space(H5Screate_simple(2, dims, maxdims), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.id(), 2, chunk);
    h5::Handle d(H5Dcreate2(f.id(), rollout_schema::kFlushes, H5T_NATIVE_INT64, space.id(), H5P_DEFAULT, dcpl.id(),
                            H5P_DEFAULT),
                 H5Dclose);
    ASSERT_GE(H5Dwrite(d.id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
    ASSERT_GE(H5Dset_extent(d.id(), grown), 0);
  }
  EXPECT_EQ(RolloutReader(old).n_episodes(), 12);
  // Such a file resumed to nothing (a checkpoint at step 0): its record of
  // zero rows restarts at row 0 (after the others it read as unwritten, and
  // every later read and resume called the file corrupted).
  for (int k = 0; k < 2; ++k) {
    RolloutStoreOptions o = options();
    o.resume_step = 0;
    RolloutStore store(old, o);
  }
  EXPECT_EQ(RolloutReader(old).n_episodes(), 0);
  // A table dataset shorter than the record names is damage: named, and a
  // resume refused (it once read 10 of 12 episodes, and a resume made it so).
  const std::string shorter = dir + "/shorter.h5";
  fs::copy_file(good, shorter, fs::copy_options::overwrite_existing);
  {
    h5::Handle f(H5Fopen(shorter.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    h5::Handle d(H5Dopen2(f.id(), "episodes/outcome", H5P_DEFAULT), H5Dclose);
    const hsize_t dims[1] = {10};
    ASSERT_GE(H5Dset_extent(d.id(), dims), 0);
  }
  expect_input_error(shorter, {"dataset 'episodes/outcome' holds 10 rows but the commit record (flushes) names 12"});
  expect_resume_refused(shorter, 3, "episodes/outcome");
}

// A checkpoint past the file's last step (the file's last flushes lost with
// the node, the checkpoint on the disk): the resume says which steps are
// missing.
TEST(RolloutStore, AResumePastTheFilesStepsNamesTheMissingSteps) {
  const std::string path = temp_dir("resume_gap") + "/rollouts.h5";
  write_four_steps(path, 3);
  ::testing::internal::CaptureStderr();
  {
    RolloutStoreOptions o = options();
    o.resume_step = 10;
    RolloutStore store(path, o);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("holds steps up to 3 but the checkpoint resumes after step 9: the rows of steps 4 to 9 were lost"),
            std::string::npos)
      << err;
  ::testing::internal::CaptureStderr();
  {
    RolloutStoreOptions o = options();
    o.resume_step = 4;
    RolloutStore store(path, o);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("were lost"), std::string::npos);
  // No file at all: a new one starts, and the log says what it lacks.
  const std::string gone = temp_dir("resume_gone") + "/rollouts.h5";
  ::testing::internal::CaptureStderr();
  {
    RolloutStoreOptions o = options();
    o.resume_step = 5;
    RolloutStore store(gone, o);
  }
  const std::string missing = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(missing.find("is missing although the checkpoint resumes after step 4: a new file starts, without the "
                         "rows of steps 0 to 4"),
            std::string::npos)
      << missing;
}

}  // namespace
}  // namespace forge
