// HDF5 checkpoints: exact round trip (weights, AdamW moments and step, RNG
// states, config), retention, atomic naming, bitwise-identical resume of
// synchronous training, and a clear InputError for every bad file: missing,
// foreign, newer schema, truncated, garbage, and a model-shape mismatch that
// names the tensor; h5::File's refusals (a FIFO, a file another process
// holds) and its reading of a variable-length string attribute.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <functional>
#include <tuple>
#include <vector>

#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/scoped_env.hpp"
#include "core/rng.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/h5_file.hpp"
#include "learner/run_checkpoints.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "unit/file_size_limit.hpp"
#include "mpi_roles/data_pool_state.hpp"

namespace fs = std::filesystem;

namespace forge {
namespace {

ModelConfig tiny(int d = 32) {
  ModelConfig c;
  c.vocab = ByteTokenizer::kVocabSize;
  c.d_model = d;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 40;
  return c;
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("forge_ckpt_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::vector<Sample> batch(Rng& rng) {
  std::vector<Sample> out;
  const int32_t shared = static_cast<int32_t>(rng.below(200));
  for (int s = 0; s < 6; ++s) {
    Sample x;
    x.tokens = {shared, 7};
    x.trainable = {0, 0};
    for (int t = 0; t < 5 + s; ++t) {
      x.tokens.push_back(static_cast<int32_t>(rng.below(256)));
      x.trainable.push_back(1);
    }
    out.push_back(x);
  }
  return out;
}

void train_steps(PolicyModel& model, AdamW& opt, Rng& data_rng, int steps) {
  for (int i = 0; i < steps; ++i) {
    model.zero_grads();
    supervised_forward_backward(model, batch(data_rng), true, 4096);
    opt.step();
  }
}

// A FIFO as a checkpoint or rollouts file is refused by name (HDF5's open
// blocked on it until a writer came: forge eval and inspect hung).
TEST(Checkpoint, AFifoIsRefusedNotOpened) {
  const std::string dir = temp_dir("fifo");
  const std::string path = dir + "/step_1.h5";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  for (const auto& open : std::vector<std::function<void()>>{[&] { h5::File::open_read(path); },
                                                             [&] { h5::File::open_append(path); }}) {
    try {
      open();
      ADD_FAILURE() << "opened a FIFO";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("is a FIFO (named pipe), not a regular file"), std::string::npos) << e.what();
    }
  }
}

// A file another process holds (a reader's shared lock: h5py, forge
// inspect) is refused for writing with the cause and the ways out; the
// message was HDF5's "unable to lock file" alone.
TEST(Checkpoint, AFileAnotherProcessHoldsIsNamedAsHeld) {
  const ScopedEnv locking("HDF5_USE_FILE_LOCKING", nullptr);  // as the message's own way out would turn it off
  const std::string path = temp_dir("held") + "/rollouts.h5";
  h5::File::create(path);
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // system calls only: a reader's lock until the parent is done
    const int fd = ::open(path.c_str(), O_RDONLY);
    char c = fd >= 0 && ::flock(fd, LOCK_SH) == 0 ? 'y' : 'n';
    if (::write(from_child[1], &c, 1) != 1) ::_exit(1);
    if (::read(to_child[0], &c, 1) < 0) ::_exit(1);
    ::_exit(0);
  }
  char locked = 0;
  ASSERT_EQ(::read(from_child[0], &locked, 1), 1);
  EXPECT_EQ(locked, 'y');
  try {
    h5::File::open_append(path);
    ADD_FAILURE() << "opened a file another process holds";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("another process has it open"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HDF5_USE_FILE_LOCKING=FALSE"), std::string::npos) << e.what();
  }
  const char done = 'x';
  EXPECT_EQ(::write(to_child[1], &done, 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
  EXPECT_NO_THROW(h5::File::open_append(path));  // the lock gone, it opens
}

TEST(Checkpoint, RoundTripIsExact) {
  const std::string dir = temp_dir("roundtrip");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  OptimConfig oc;
  AdamW opt(oc, model);
  Rng data(5);
  train_steps(model, opt, data, 2);
  CheckpointState st;
  st.step = 2;
  st.policy_version = 2;
  st.config_ini = "[run]\nseed = 5\n";
  st.rngs["data"] = data.state();
  const std::string path = save_checkpoint(dir, model, &opt, st, 0);
  EXPECT_EQ(fs::path(path).filename(), "ckpt_step_00000002.h5");

  PolicyModel other(tiny(), *backend);
  AdamW other_opt(oc, other);
  const CheckpointState got = load_checkpoint(path, other, &other_opt);
  EXPECT_EQ(other.get_params(), model.get_params());
  EXPECT_EQ(other_opt.m().download(), opt.m().download());
  EXPECT_EQ(other_opt.v().download(), opt.v().download());
  EXPECT_EQ(other_opt.steps_taken(), 2);
  EXPECT_EQ(got.step, 2);
  EXPECT_EQ(got.policy_version, 2);
  EXPECT_EQ(got.config_ini, st.config_ini);
  EXPECT_EQ(got.rngs.at("data"), data.state());
}

TEST(Checkpoint, DataPoolStateRoundTripsAndInconsistencyIsAnInputError) {
  const std::string dir = temp_dir("pool");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(2);
  CheckpointState st;
  st.step = 3;
  DataPoolState pool;
  pool.head = 10;
  pool.consumed = {12, 13};
  pool.keep(9, 2, {1, 2});  // 9: taken by a batch SIGTERM interrupted, below head
  pool.keep(11, 3, {3, 4, 5});
  EXPECT_EQ(pool.kept_offset, (std::vector<int64_t>{0, 2, 5}));
  st.sections[kDataPoolSection] = pool.to_section();
  const std::string path = save_checkpoint(dir, model, nullptr, st, 0);
  const CheckpointState loaded = load_checkpoint(path, model, nullptr);
  const std::optional<DataPoolState> got = data_pool_state_of(loaded, path);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->head, 10);
  EXPECT_EQ(got->consumed, pool.consumed);
  EXPECT_EQ(got->kept_slot, pool.kept_slot);
  EXPECT_EQ(got->kept_version, pool.kept_version);
  EXPECT_EQ(got->kept_offset, pool.kept_offset);
  EXPECT_EQ(got->kept_bytes, pool.kept_bytes);
  EXPECT_EQ(got->kept_payload(1), (std::vector<uint8_t>{3, 4, 5}));
  // The section alone, without the model.
  const std::optional<DataPoolState> alone = load_data_pool_state(path);
  ASSERT_TRUE(alone.has_value());
  EXPECT_EQ(alone->kept_bytes, pool.kept_bytes);

  st.step = 4;
  st.sections[kDataPoolSection].i64["kept_offset"] = {0, 3, 4};  // does not cover the 5 bytes
  const std::string bad = save_checkpoint(dir, model, nullptr, st, 0);
  EXPECT_THROW(data_pool_state_of(load_checkpoint(bad, model, nullptr), bad), InputError);
  EXPECT_THROW(load_data_pool_state(bad), InputError);
  st.step = 5;
  st.sections[kDataPoolSection].i64.erase("head");
  const std::string headless = save_checkpoint(dir, model, nullptr, st, 0);
  EXPECT_THROW(load_data_pool_state(headless), InputError);
  // A checkpoint without pool state has none.
  st.step = 6;
  st.sections.clear();
  const std::string none = save_checkpoint(dir, model, nullptr, st, 0);
  EXPECT_FALSE(data_pool_state_of(load_checkpoint(none, model, nullptr), none));
  EXPECT_FALSE(load_data_pool_state(none));
}

TEST(Checkpoint, ResumeIsBitwiseIdenticalToUninterruptedTraining) {
  const std::string dir = temp_dir("resume");
  auto backend = make_backend("cpu");
  OptimConfig oc;
  oc.warmup_steps = 3;
  // Uninterrupted: 6 steps.
  PolicyModel a(tiny(), *backend);
  a.init_random(9);
  AdamW a_opt(oc, a);
  Rng a_data(77);
  train_steps(a, a_opt, a_data, 6);
  // Interrupted after 3 steps, resumed in fresh objects from the checkpoint.
  {
    PolicyModel b(tiny(), *backend);
    b.init_random(9);
    AdamW b_opt(oc, b);
    Rng b_data(77);
    train_steps(b, b_opt, b_data, 3);
    CheckpointState st;
    st.step = 3;
    st.rngs["data"] = b_data.state();
    save_checkpoint(dir, b, &b_opt, st, 2);
  }
  PolicyModel c(tiny(), *backend);
  c.init_random(123);  // overwritten by the checkpoint
  AdamW c_opt(oc, c);
  const CheckpointState st = load_checkpoint(latest_checkpoint(dir), c, &c_opt);
  Rng c_data;
  c_data.set_state(st.rngs.at("data"));
  train_steps(c, c_opt, c_data, 3);
  EXPECT_EQ(c.get_params(), a.get_params());
  EXPECT_EQ(c_opt.m().download(), a_opt.m().download());
}

TEST(Checkpoint, RetentionKeepsNewestAndIgnoresTemporaries) {
  const std::string dir = temp_dir("retention");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  std::ofstream(dir + "/ckpt_step_00000099.h5.tmp") << "torn";  // an interrupted write
  EXPECT_EQ(latest_checkpoint(dir), "");
  for (int s = 1; s <= 4; ++s) {
    CheckpointState st;
    st.step = s;
    save_checkpoint(dir, model, nullptr, st, 2);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt_step_00000003.h5", "ckpt_step_00000004.h5"}));
  EXPECT_EQ(fs::path(latest_checkpoint(dir)).filename(), "ckpt_step_00000004.h5");
  // The one just older, where a damaged newest one leaves a resume.
  EXPECT_EQ(fs::path(checkpoint_before(dir, latest_checkpoint(dir))).filename(), "ckpt_step_00000003.h5");
  EXPECT_EQ(checkpoint_before(dir, dir + "/ckpt_step_00000003.h5"), "");
  EXPECT_EQ(checkpoint_before(dir, dir + "/elsewhere.h5"), "");
}

// A checkpoint whose stored [model] has a key this forge lacks (a newer
// forge's) says so; it was "unknown option ... see --help".
TEST(Checkpoint, AStoredModelKeyThisForgeLacksNamesANewerForge) {
  try {
    model_source_of_config("[model]\nd_model = 32\nsliding_window = 4\n", "'c.h5'");
    ADD_FAILURE() << "an unknown [model] key was read";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'c.h5': its stored [model] names a key this forge does not read (written by a newer forge?)"),
              std::string::npos) << m;
    EXPECT_NE(m.find("sliding_window"), std::string::npos) << m;
  }
}

// A relative model.pretrained is stored as given and read against the
// current folder: where it is not there, the error says whose path it is
// and where it was looked for (it said only "'hf' does not exist").
TEST(Checkpoint, ARelativePretrainedPathNamesTheFolderItWasReadAgainst) {
  try {
    model_source_of_config("[model]\npretrained = no_such_model_folder\n", "'c.h5'");
    ADD_FAILURE() << "a missing pretrained model was read";
  } catch (const UnresolvedModelError& e) {  // no older checkpoint would help: not offered one
    const std::string m = e.what();
    EXPECT_NE(m.find("model.pretrained = 'no_such_model_folder' as 'c.h5' stores it, read against the current folder " +
                     std::filesystem::current_path().string()),
              std::string::npos) << m;
  }
}

void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& parts);

// A checkpoint the disk cannot hold whole (a full disk, here a file-size
// limit at several points of the write) is an error, and no file of that
// step is left in place to pass for a checkpoint.
TEST(Checkpoint, AWriteThatFailsLeavesNoCheckpoint) {
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  CheckpointState st;
  st.step = 7;
  const auto whole = static_cast<rlim_t>(fs::file_size(save_checkpoint(temp_dir("whole"), model, nullptr, st, 0)));
  for (const rlim_t limit : {rlim_t{1024}, whole / 4, whole / 2, whole - 512}) {
    const std::string dir = temp_dir("limited_" + std::to_string(limit));
    EXPECT_EQ(exit_code_under_file_limit(limit, [&] { save_checkpoint(dir, model, nullptr, st, 0); }), 1)
        << "the write did not fail under a " << limit << "-byte file limit";
    EXPECT_EQ(latest_checkpoint(dir), "") << "limit " << limit;
    // Nor a partial temporary holding space (it cannot pass for one anyway).
    for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
  }
}

// A run picks its newest checkpoint and prunes older ones by the step in the
// file name: a renamed or copied-over file whose step attribute differs is
// refused (it resumed at its own step and was kept as the newer one).
TEST(Checkpoint, ANameThatDisagreesWithTheStepIsRefused) {
  const std::string dir = temp_dir("renamed");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  CheckpointState st;
  st.step = 50;
  const std::string saved = save_checkpoint(dir, model, nullptr, st, 0);
  EXPECT_EQ(load_checkpoint(saved, model, nullptr).step, 50);
  const std::string renamed = dir + "/ckpt_step_00000099.h5";
  fs::rename(saved, renamed);
  expect_input_error([&] { load_checkpoint(renamed, model, nullptr); },
                     {"ckpt_step_00000099.h5", "holds step 50 but its name says step 99"});
  // Another name (an --train.init path) carries no step to compare.
  const std::string other = dir + "/init.h5";
  fs::rename(renamed, other);
  EXPECT_EQ(load_checkpoint(other, model, nullptr).step, 50);
}

// A stored configuration without [model] is a damaged file: the model was
// the default one and a resume blamed the user's [model] keys.
TEST(Checkpoint, AStoredConfigWithoutModelIsADamagedFile) {
  const std::string dir = temp_dir("no_model_section");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  CheckpointState st;
  st.step = 1;
  st.config_ini = "[run]\nseed = 1\n\n[model]\nd_model = 32\nn_layers = 2\nn_heads = 2\nn_kv_heads = 1\n"
                  "ffn_dim = 40\n";
  const std::string good = save_checkpoint(dir, model, nullptr, st, 0);
  EXPECT_EQ(model_source_of(good).config.d_model, 32);
  st.step = 2;
  st.config_ini = "[run]\nseed = 1\n";
  const std::string damaged = save_checkpoint(dir, model, nullptr, st, 0);
  expect_input_error([&] { model_source_of(damaged); }, {"ckpt_step_00000002.h5", "no [model] section"});
}

// A folder without checkpoints is named; one that holds model files but
// no config.json (so is not read as a Hugging Face folder) says what it lacks.
TEST(Checkpoint, AFolderWithoutCheckpointsSaysWhatItLacks) {
  const std::string dir = temp_dir("no_checkpoints");
  expect_input_error([&] { resolve_checkpoint(dir); }, {"no checkpoint found in '" + dir + "'"});
  try {
    resolve_checkpoint(dir);
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/model.safetensors") << "x";
  expect_input_error([&] { resolve_checkpoint(dir); }, {"holds model files but no config.json"});
}

void expect_input_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, BadFilesGiveClearErrors) {
  const std::string dir = temp_dir("bad");
  auto backend = make_backend("cpu");
  PolicyModel model(tiny(), *backend);
  model.init_random(1);
  CheckpointState st;
  st.step = 1;
  const std::string good = save_checkpoint(dir, model, nullptr, st, 0);

  expect_input_error([&] { load_checkpoint(dir + "/nope.h5", model, nullptr); }, {"nope.h5"});

  const std::string garbage = dir + "/garbage.h5";
  std::ofstream(garbage) << "this is not HDF5 at all";
  expect_input_error([&] { load_checkpoint(garbage, model, nullptr); }, {"garbage.h5", "not an HDF5"});

  const std::string truncated = dir + "/truncated.h5";
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  expect_input_error([&] { load_checkpoint(truncated, model, nullptr); }, {"truncated.h5"});

  const std::string foreign = dir + "/foreign.h5";
  {
    h5::File f = h5::File::create(foreign);
    f.set_attr("creator", std::string("someone else"));
  }
  expect_input_error([&] { load_checkpoint(foreign, model, nullptr); }, {"foreign.h5", "not a forge checkpoint"});

  const std::string newer = dir + "/newer.h5";
  {
    h5::File f = h5::File::create(newer);
    f.set_attr("format", std::string("forge-checkpoint"));
    f.set_attr("schema_version", kCheckpointSchemaVersion + 1);
  }
  expect_input_error([&] { load_checkpoint(newer, model, nullptr); }, {"newer.h5", "newer"});
  // Its configuration is not read either (a newer [model] key would be
  // called unknown rather than the file newer).
  expect_input_error([&] { checkpoint_config(newer); }, {"newer.h5", "newer"});

  // Counts a run carries on from: a negative or too large one is damage,
  // not a step to resume at (a negative step once truncated rollouts.h5;
  // an optim_steps of 2^31 wrapped into NaN weights).
  OptimConfig oc;
  AdamW opt(oc, model);
  const std::string with_optimizer = save_checkpoint(temp_dir("bad_optim"), model, &opt, st, 0);
  const std::tuple<const char*, int64_t, std::string> damaged[] = {
      {"step", -1, good}, {"policy_version", int64_t{1} << 31, good}, {"optim_steps", int64_t{1} << 31, with_optimizer}};
  for (const auto& [attr, value, source] : damaged) {
    const std::string path = dir + "/bad_" + attr + ".h5";
    std::filesystem::copy_file(source, path, std::filesystem::copy_options::overwrite_existing);
    {
      h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      ASSERT_TRUE(f.valid());
      h5::Handle a(H5Aopen(f.id(), attr, H5P_DEFAULT), H5Aclose);
      ASSERT_GE(H5Awrite(a.id(), H5T_NATIVE_INT64, &value), 0);
    }
    expect_input_error([&] { load_checkpoint(path, model, &opt); }, {path, attr, std::to_string(value)});
  }
  // A value a checkpoint must not hold, written as a user edits a tensor
  // (without its checksum): a non-finite weight, a negative second moment.
  // Resumed, the -1 was carried into every later checkpoint under a valid
  // checksum; a NaN weight failed later, at the first generation, naming no file.
  const std::string first = model.layout().tensors.front().name;
  const std::tuple<std::string, float, std::string> edited[] = {
      {"/model/" + first, std::nanf(""), "expected finite values;"},
      {"/optim/m/" + first, INFINITY, "expected finite values;"},
      {"/optim/v/" + first, -1.0f, "expected values >= 0"}};
  for (const auto& [dataset, value, why] : edited) {
    const std::string path = dir + "/edited.h5";
    std::filesystem::copy_file(with_optimizer, path, std::filesystem::copy_options::overwrite_existing);
    {
      h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      h5::Handle ds(H5Dopen2(f.id(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
      ASSERT_TRUE(ds.valid()) << dataset;
      h5::Handle space(H5Dget_space(ds.id()), H5Sclose);
      std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(space.id())));
      H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
      hsize_t n = 1;
      for (hsize_t d : dims) n *= d;
      std::vector<float> data(n);
      ASSERT_GE(H5Dread(ds.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
      data[3] = value;
      ASSERT_GE(H5Dwrite(ds.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()), 0);
      ASSERT_GE(H5Adelete(ds.id(), "fletcher64"), 0);
    }
    expect_input_error([&] { load_checkpoint(path, model, &opt); }, {path, "'" + dataset + "' holds", "element 3", why});
  }
  // A configuration edited to a shape its tensors do not have is refused
  // before a model of it is made (it asked gigabytes of a small file).
  {
    const std::string path = dir + "/huge_config.h5";
    CheckpointState big = st;
    big.config_ini = "[model]\nd_model = 8192\nn_layers = 64\nn_heads = 8\nn_kv_heads = 8\nffn_dim = 32768\n";
    std::filesystem::copy_file(save_checkpoint(temp_dir("huge_config"), model, nullptr, big, 0), path,
                               std::filesystem::copy_options::overwrite_existing);
    expect_input_error([&] { model_source_of(path); }, {path, "has shape", "but the configured model needs"});
  }
  // A version before the first, and attributes that are arrays (read into
  // room for one value, they once overflowed it).
  {
    const std::string path = dir + "/schema_0.h5";
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    h5::Handle a(H5Aopen(f.id(), "schema_version", H5P_DEFAULT), H5Aclose);
    const int64_t zero = 0;
    ASSERT_GE(H5Awrite(a.id(), H5T_NATIVE_INT64, &zero), 0);
    a.reset(), f.reset();
    expect_input_error([&] { load_checkpoint(path, model, nullptr); }, {path, "schema version 0"});
  }
  for (const char* attr : {"format", "step"}) {
    const std::string path = dir + "/array_" + attr + ".h5";
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    {
      h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      ASSERT_GE(H5Adelete(f.id(), attr), 0);
      const hsize_t n = 4000;
      h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type.id(), 16);
      const bool text = std::string(attr) == "format";
      const hid_t t = text ? type.id() : H5T_NATIVE_INT64;
      h5::Handle a(H5Acreate2(f.id(), attr, t, space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      std::vector<char> values(n * 16, 'x');
      if (!text) std::fill(values.begin(), values.end(), 0);
      ASSERT_GE(H5Awrite(a.id(), t, values.data()), 0);
    }
    expect_input_error([&] { load_checkpoint(path, model, nullptr); }, {path, attr, "not a single value"});
  }
  // A variable-length string attribute (h5py's default for a str, as a user
  // who rewrites an attribute writes it) reads as the fixed-length one.
  {
    const std::string path = dir + "/vlen_format.h5";
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    const std::string format = h5::File::open_read(good).attr_string("format");
    ASSERT_FALSE(format.empty());
    {
      h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      ASSERT_GE(H5Adelete(f.id(), "format"), 0);
      h5::Handle space(H5Screate(H5S_SCALAR), H5Sclose);
      h5::Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type.id(), H5T_VARIABLE);
      H5Tset_cset(type.id(), H5T_CSET_UTF8);
      h5::Handle a(H5Acreate2(f.id(), "format", type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
      const char* text = format.c_str();
      ASSERT_GE(H5Awrite(a.id(), type.id(), &text), 0);
    }
    EXPECT_EQ(h5::File::open_read(path).attr_string("format"), format);
    EXPECT_NO_THROW(load_checkpoint(path, model, nullptr));
  }
  // A flipped bit in a tensor's raw data (bit rot, a torn write below the
  // file system) fails the tensor's checksum: it once loaded as a changed
  // weight.
  {
    const std::string path = dir + "/flipped.h5";
    std::filesystem::copy_file(good, path, std::filesystem::copy_options::overwrite_existing);
    const haddr_t address = [&] {
      const h5::File f = h5::File::open_read(path);
      h5::Handle ds(H5Dopen2(f.id(), "/model/embed", H5P_DEFAULT), H5Dclose);
      return H5Dget_offset(ds.id());
    }();
    ASSERT_NE(address, HADDR_UNDEF);
    {
      std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
      io.seekg(static_cast<std::streamoff>(address + 100));
      char byte = 0;
      io.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x10);
      io.seekp(static_cast<std::streamoff>(address + 100));
      io.write(&byte, 1);
      ASSERT_TRUE(io.good());
    }
    expect_input_error([&] { load_checkpoint(path, model, nullptr); }, {path, "model/embed", "checksum"});
    // A dataset without the attribute (a checkpoint of an older forge, or
    // data another program changed on purpose) is taken as it reads.
    {
      h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
      ASSERT_GE(H5Adelete_by_name(f.id(), "/model/embed", "fletcher64", H5P_DEFAULT), 0);
    }
    PolicyModel changed(tiny(), *backend);
    EXPECT_NO_THROW(load_checkpoint(path, changed, nullptr));
    EXPECT_NE(changed.get_params(), model.get_params());
  }
  // A dataset that states far more elements than its file stores (2^40
  // words of an RNG state or a section in a file of kilobytes, chunked with
  // no chunk written; or contiguous and short): refused before anything is
  // allocated (forge allocated them, then ended with "out of memory").
  {
    st.rngs["tasks"] = {1, 2, 3, 4};
    st.sections["data_pool"].i64["head"] = {5, 6};
    const std::string with_rng = save_checkpoint(temp_dir("bad_sizes"), model, nullptr, st, 0);
    for (const char* name : {"/rng/tasks", "/data_pool/head"}) {
      for (const bool chunked : {true, false}) {
        const std::string path = dir + "/huge" + std::to_string(chunked) + std::string(name).substr(1, 3) + ".h5";
        std::filesystem::copy_file(with_rng, path, std::filesystem::copy_options::overwrite_existing);
        {
          h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
          ASSERT_GE(H5Ldelete(f.id(), name, H5P_DEFAULT), 0);
          const hsize_t n = chunked ? hsize_t{1} << 40 : 4, max = H5S_UNLIMITED, chunk = 1024;
          h5::Handle space(H5Screate_simple(1, &n, chunked ? &max : nullptr), H5Sclose);
          h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
          if (chunked) {
            ASSERT_GE(H5Pset_chunk(dcpl.id(), 1, &chunk), 0);
          }
          h5::Handle ds(H5Dcreate2(f.id(), name, H5T_NATIVE_UINT64, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
                        H5Dclose);
          ASSERT_TRUE(ds.valid());  // contiguous and never written: no storage at all
        }
        // An RNG state's shape is checked first ([4]); a section's size as stored.
        const bool rng_shape = chunked && std::string(name) == "/rng/tasks";
        expect_input_error([&] { load_checkpoint(path, model, nullptr); },
                           {path, rng_shape ? "RNG state 'tasks' has shape [1099511627776], expected [4]"
                                            : std::string(name) + "' states " +
                                                  std::to_string(chunked ? int64_t{1} << 40 : 4) + " elements"});
      }
    }
    st.rngs.clear();
    st.sections.clear();
  }
  // A file name with more digits than any step: not a checkpoint of the run.
  std::ofstream(dir + "/ckpt_step_99999999999999999999.h5") << "x";
  EXPECT_EQ(latest_checkpoint(dir), good);

  PolicyModel wider(tiny(48), *backend);
  expect_input_error([&] { load_checkpoint(good, wider, nullptr); }, {"embed", "[272, 32]", "[272, 48]"});

  expect_input_error([&] { load_checkpoint(good, model, &opt); }, {"no optimizer state"});
}


// A resume names every changed key that shapes training (the reward's
// weights, the sampling temperature, the environments' mix once went
// unnamed) and none of those that leave it alone (threads, logging, the
// evaluation's schedule); train.steps only as the cosine horizon.
TEST(Checkpoint, ResumeNamesEveryChangedKeyThatShapesTraining) {
  const std::string was =
      "[run]\nthreads = 2\nlog_every = 1\nseed = 7\n[reward]\nefficiency_weight = 0.1\n[sample]\ntemperature = 1\n"
      "[env]\ntool_error_rate = 0.1\n[train]\nsteps = 10\neval_every = 0\n[optim]\nschedule = constant\n"
      "total_steps = 0\n[sft]\nsteps = 5\n";
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = was;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_EQ(resumed_setting_changes(was, was), "");
  EXPECT_EQ(resumed_setting_changes(was, with("efficiency_weight = 0.1", "efficiency_weight = 0.5")),
            "reward.efficiency_weight 0.1 -> 0.5");
  EXPECT_EQ(resumed_setting_changes(was, with("temperature = 1", "temperature = 0.7")), "sample.temperature 1 -> 0.7");
  EXPECT_EQ(resumed_setting_changes(was, with("tool_error_rate = 0.1", "tool_error_rate = 0.5")),
            "env.tool_error_rate 0.1 -> 0.5");
  EXPECT_EQ(resumed_setting_changes(with("[train]\n", "[train]\nmerge = true\n"), with("[train]\n", "[train]\nmerge = false\n")),
            "train.merge true -> false");
  // A key the checkpoint's forge did not write yet is no change of the run's
  // (every key added since warned on any resume across an upgrade).
  EXPECT_EQ(resumed_setting_changes(was, with("[train]\n", "[train]\nmerge = false\n")), "");
  // One key of `section` set to `before` in the checkpoint, `after` now.
  const auto changed = [&](const std::string& section, const std::string& before, const std::string& after) {
    const std::string header = "[" + section + "]\n";
    return resumed_setting_changes(with(header, header + before + "\n"), with(header, header + after + "\n"));
  };
  // Lists by their items.
  EXPECT_EQ(changed("env", "safety_rules = network, credentials", "safety_rules = network,credentials"), "");
  // A set in another order, the test-run cache and forge generate's reply
  // length: no change of training's (each warned, from the learner review).
  EXPECT_EQ(changed("env", "safety_rules = network,credentials", "safety_rules = credentials,network"), "");
  EXPECT_EQ(changed("env", "code_test_cache = 1024", "code_test_cache = 0"), "");
  EXPECT_EQ(changed("sample", "max_new_tokens = 64", "max_new_tokens = 8"), "");
  // a list whose order may matter still counts
  EXPECT_EQ(changed("env", "perturb_dims = tools,call", "perturb_dims = call,tools"),
            "env.perturb_dims tools,call -> call,tools");
  EXPECT_EQ(resumed_setting_changes(was, with("threads = 2\nlog_every = 1", "threads = 8\nlog_every = 5")), "");
  EXPECT_EQ(resumed_setting_changes(was, with("eval_every = 0\n[optim]", "eval_every = 4\n[optim]")), "");
  EXPECT_EQ(resumed_setting_changes(was, with("[sft]\nsteps = 5", "[sft]\nsteps = 9")), "");
  EXPECT_EQ(resumed_setting_changes(was, with("steps = 10\n", "steps = 20\n")), "");  // a constant schedule
  EXPECT_EQ(resumed_setting_changes(was, with("schedule = constant", "schedule = cosine")),
            "optim.schedule constant -> cosine");
  const std::string cosine = with("schedule = constant", "schedule = cosine");
  std::string longer = cosine;
  longer.replace(longer.find("steps = 10\n"), 11, "steps = 20\n");
  EXPECT_EQ(resumed_setting_changes(cosine, longer), "train.steps 10 -> 20");  // the cosine horizon
}

}  // namespace
}  // namespace forge
