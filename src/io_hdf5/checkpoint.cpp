#include "io_hdf5/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "io_hdf5/h5_file.hpp"

namespace fs = std::filesystem;

namespace forge {
namespace {

constexpr const char* kFormat = "forge-checkpoint";

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

void write_tensors(h5::File& f, const std::string& group, const ParamLayout& layout,
                   const std::vector<float>& flat) {
  f.create_group(group);
  for (const auto& t : layout.tensors)
    f.write_f32(group + "/" + t.name, t.shape, flat.data() + t.offset);
}

// Intermediate groups for dotted tensor names are not needed: names contain
// no '/', so each tensor is one dataset directly under its group.
std::vector<float> read_tensors(const h5::File& f, const std::string& group,
                                const ParamLayout& layout) {
  std::vector<float> flat(layout.total);
  for (const auto& t : layout.tensors) {
    const std::string name = group + "/" + t.name;
    if (!f.exists(name))
      throw InputError("checkpoint '" + f.path() + "' has no tensor '" + name +
                       "' (was it written for another model shape?)");
    const auto shape = f.shape(name);
    if (shape != t.shape)
      throw InputError("checkpoint '" + f.path() + "': tensor '" + t.name + "' has shape " +
                       shape_text(shape) + " but the configured model needs " +
                       shape_text(t.shape));
    const auto data = f.read_f32(name);
    std::copy(data.begin(), data.end(), flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  return flat;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// step of "ckpt_step_00000012.h5", or -1 for any other name
int64_t step_of(const std::string& filename) {
  const std::string prefix = "ckpt_step_", suffix = ".h5";
  if (filename.size() <= prefix.size() + suffix.size() || filename.rfind(prefix, 0) != 0 ||
      filename.substr(filename.size() - suffix.size()) != suffix)
    return -1;
  const std::string digits =
      filename.substr(prefix.size(), filename.size() - prefix.size() - suffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0) out.push_back({s, e.path().string()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

namespace {

void write_data_pool(h5::File& f, const DataPoolState& p) {
  f.create_group("/data_pool");
  const int64_t head[1] = {p.head};
  f.write_i64("/data_pool/head", {1}, head);
  f.write_i64("/data_pool/consumed", {static_cast<int64_t>(p.consumed.size())}, p.consumed.data());
  f.write_i64("/data_pool/kept_slot", {static_cast<int64_t>(p.kept_slot.size())}, p.kept_slot.data());
  f.write_i64("/data_pool/kept_version", {static_cast<int64_t>(p.kept_version.size())}, p.kept_version.data());
  f.write_i64("/data_pool/kept_offset", {static_cast<int64_t>(p.kept_offset.size())}, p.kept_offset.data());
  f.write_u8("/data_pool/kept_bytes", {static_cast<int64_t>(p.kept_bytes.size())}, p.kept_bytes.data());
}

DataPoolState read_data_pool(const h5::File& f, const std::string& path) {
  DataPoolState p;
  const auto head = f.read_i64("/data_pool/head");
  p.consumed = f.read_i64("/data_pool/consumed");
  p.kept_slot = f.read_i64("/data_pool/kept_slot");
  p.kept_version = f.read_i64("/data_pool/kept_version");
  p.kept_offset = f.read_i64("/data_pool/kept_offset");
  p.kept_bytes = f.read_u8("/data_pool/kept_bytes");
  const auto bad = [&](const std::string& what) {
    return InputError("checkpoint '" + path + "': /data_pool is inconsistent: " + what);
  };
  if (head.size() != 1 || head[0] < 0) throw bad("head");
  p.head = head[0];
  if (p.kept_version.size() != p.kept_slot.size() || p.kept_offset.size() != p.kept_slot.size() + 1)
    throw bad("kept_slot, kept_version and kept_offset lengths");
  for (size_t i = 0; i + 1 < p.kept_offset.size(); ++i)
    if (p.kept_offset[i] < 0 || p.kept_offset[i] > p.kept_offset[i + 1]) throw bad("kept_offset not ascending");
  if (p.kept_offset.front() != 0 || p.kept_offset.back() != static_cast<int64_t>(p.kept_bytes.size()))
    throw bad("kept_offset does not cover kept_bytes");
  for (int64_t s : p.consumed) if (s < p.head) throw bad("a consumed slot below head");
  for (int64_t s : p.kept_slot) if (s < 0) throw bad("a negative kept slot");
  return p;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const PolicyModel& model, AdamW* optimizer,
                            const CheckpointState& state, int keep_last) {
  fs::create_directories(dir);
  char name[64];
  std::snprintf(name, sizeof name, "ckpt_step_%08lld.h5", static_cast<long long>(state.step));
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp_path = final_path + ".tmp";
  {
    h5::File f = h5::File::create(tmp_path);
    f.set_attr("format", std::string(kFormat));
    f.set_attr("schema_version", kCheckpointSchemaVersion);
    f.set_attr("step", state.step);
    f.set_attr("policy_version", state.policy_version);
    f.set_attr("config", state.config_ini);
    write_tensors(f, "/model", model.layout(), model.get_params());
    if (optimizer) {
      f.create_group("/optim");
      write_tensors(f, "/optim/m", model.layout(), optimizer->m().download());
      write_tensors(f, "/optim/v", model.layout(), optimizer->v().download());
      f.set_attr("optim_steps", static_cast<int64_t>(optimizer->steps_taken()));
    }
    f.create_group("/rng");
    for (const auto& [rng_name, s] : state.rngs) f.write_u64("/rng/" + rng_name, {4}, s.data());
    if (state.data_pool) write_data_pool(f, *state.data_pool);
    f.flush();
  }
  fsync_path(tmp_path);
  fs::rename(tmp_path, final_path);
  fsync_path(dir);

  // Retention, and leftovers of interrupted writes.
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string fn = e.path().filename().string();
    if (fn.size() > 4 && fn.substr(fn.size() - 4) == ".tmp" && step_of(fn.substr(0, fn.size() - 4)) >= 0)
      fs::remove(e.path());
  }
  if (keep_last > 0) {
    auto all = list_checkpoints(dir);
    for (size_t i = 0; i + keep_last < all.size(); ++i) fs::remove(all[i].second);
  }
  return final_path;
}

std::string latest_checkpoint(const std::string& dir) {
  const auto all = list_checkpoints(dir);
  return all.empty() ? "" : all.back().second;
}

namespace {

// Opens a checkpoint for reading; InputError for a foreign or newer file.
h5::File open_checkpoint(const std::string& path) {
  h5::File f = h5::File::open_read(path);
  if (!f.has_attr("format") || f.attr_string("format") != kFormat)
    throw InputError("'" + path + "' is not a forge checkpoint (no format = \"" + kFormat +
                     "\" attribute)");
  const int64_t schema = f.attr_int("schema_version");
  if (schema > kCheckpointSchemaVersion)
    throw InputError("checkpoint '" + path + "' has schema version " + std::to_string(schema) +
                     "; this forge reads up to " + std::to_string(kCheckpointSchemaVersion) +
                     " (written by a newer forge)");
  return f;
}

}  // namespace

std::optional<DataPoolState> load_data_pool_state(const std::string& path) {
  const h5::File f = open_checkpoint(path);
  if (!f.exists("/data_pool")) return std::nullopt;
  return read_data_pool(f, path);
}

CheckpointState load_checkpoint(const std::string& path, PolicyModel& model, AdamW* optimizer) {
  const h5::File f = open_checkpoint(path);
  CheckpointState st;
  st.step = f.attr_int("step");
  st.policy_version = f.attr_int("policy_version");
  st.config_ini = f.attr_string("config");
  model.set_params(read_tensors(f, "/model", model.layout()));
  if (optimizer) {
    if (!f.exists("/optim"))
      throw InputError("checkpoint '" + path + "' holds no optimizer state");
    const auto m = read_tensors(f, "/optim/m", model.layout());
    const auto v = read_tensors(f, "/optim/v", model.layout());
    optimizer->m().upload(model.backend(), m);
    optimizer->v().upload(model.backend(), v);
    optimizer->set_steps_taken(static_cast<int>(f.attr_int("optim_steps")));
  }
  if (f.exists("/rng")) {
    H5G_info_t info;
    h5::Handle g(H5Gopen2(f.id(), "/rng", H5P_DEFAULT), H5Gclose);
    H5Gget_info(g.id(), &info);
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      char buf[256];
      H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, buf, sizeof buf, H5P_DEFAULT);
      const auto s = f.read_u64(std::string("/rng/") + buf);
      if (s.size() != 4)
        throw InputError("checkpoint '" + path + "': RNG state '" + buf + "' has " +
                         std::to_string(s.size()) + " words, expected 4");
      st.rngs[buf] = {s[0], s[1], s[2], s[3]};
    }
  }
  if (f.exists("/data_pool")) st.data_pool = read_data_pool(f, path);
  return st;
}

}  // namespace forge
