#include "io_hdf5/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
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

// Every tensor of `layout` under `group`, present and of its shape.
// Intermediate groups for dotted tensor names are not needed: names contain
// no '/', so each tensor is one dataset directly under its group.
void check_shapes(const h5::File& f, const std::string& group, const ParamLayout& layout) {
  for (const auto& t : layout.tensors) {
    const std::string name = group + "/" + t.name;
    if (!f.exists(name))
      throw InputError("checkpoint '" + f.path() + "' has no tensor '" + name +
                       "' (was it written for another model shape?)");
    const auto shape = f.shape(name);
    if (shape != t.shape)
      throw InputError("checkpoint '" + f.path() + "': tensor '" + name + "' has shape " +
                       shape_text(shape) + " but the configured model needs " +
                       shape_text(t.shape));
  }
}

// What the values of a group must be: weights and first moments finite;
// second moments >= 0, +inf allowed (AdamW squares a gradient in float: with
// optim.grad_clip = 0 one above ~1.8e19 makes v +inf and the update 0, and
// training goes on).
enum class Values { kFinite, kNonNegative };

std::vector<float> read_tensors(const h5::File& f, const std::string& group, const ParamLayout& layout,
                                Values values) {
  check_shapes(f, group, layout);
  std::vector<float> flat(layout.total);
  for (const auto& t : layout.tensors) {
    const std::string name = group + "/" + t.name;
    const auto data = f.read_f32(name);
    for (size_t i = 0; i < data.size(); ++i)
      if (values == Values::kFinite ? !std::isfinite(data[i]) : !(data[i] >= 0))
        throw InputError("checkpoint '" + f.path() + "': tensor '" + name + "' holds " + std::to_string(data[i]) +
                         " at element " + std::to_string(i) + " (expected " +
                         (values == Values::kFinite ? "finite values" : "values >= 0") +
                         "; a damaged or edited file)");
    std::copy(data.begin(), data.end(), flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  return flat;
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
  if (digits.size() > 18) return -1;  // beyond any step a run reaches (and int64_t)
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

const char* const kReservedGroups[] = {"model", "optim", "rng"};

void write_section(h5::File& f, const std::string& name, const CheckpointSection& sec) {
  f.create_group("/" + name);
  for (const auto& [key, v] : sec.i64) f.write_i64("/" + name + "/" + key, {static_cast<int64_t>(v.size())}, v.data());
  for (const auto& [key, v] : sec.u8) f.write_u8("/" + name + "/" + key, {static_cast<int64_t>(v.size())}, v.data());
}

CheckpointSection read_section(const h5::File& f, const std::string& name) {
  CheckpointSection sec;
  for (const std::string& key : f.members("/" + name)) {
    const std::string path = "/" + name + "/" + key;
    switch (f.element_size(path)) {
      case 8: sec.i64[key] = f.read_i64(path); break;
      case 1: sec.u8[key] = f.read_u8(path); break;
      default:
        throw InputError("checkpoint '" + f.path() + "': '" + path + "' is neither an int64 nor a byte array");
    }
  }
  return sec;
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const PolicyModel& model, AdamW* optimizer,
                            const CheckpointState& state, int keep_last) {
  fs::create_directories(dir);
  char name[64];
  std::snprintf(name, sizeof name, "ckpt_step_%08lld.h5", static_cast<long long>(state.step));
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp_path = final_path + ".tmp";
  // A write that fails (a full disk) leaves no partial file holding space.
  struct RemoveUnlessDone {
    const std::string& path;
    bool done = false;
    ~RemoveUnlessDone() {
      std::error_code ec;
      if (!done) fs::remove(path, ec);
    }
  } cleanup{tmp_path};
  {
    h5::File f = h5::File::create(tmp_path);
    f.set_attr("format", std::string(kFormat));
    f.set_attr("schema_version", kCheckpointSchemaVersion);
    f.set_attr("step", state.step);
    f.set_attr("policy_version", state.policy_version);
    f.set_attr("config", state.config_ini);
    if (!state.model_fingerprint.empty()) f.set_attr("model_fingerprint", state.model_fingerprint);
    write_tensors(f, "/model", model.layout(), model.get_params());
    if (optimizer) {
      f.create_group("/optim");
      write_tensors(f, "/optim/m", model.layout(), optimizer->m().download());
      write_tensors(f, "/optim/v", model.layout(), optimizer->v().download());
      f.set_attr("optim_steps", static_cast<int64_t>(optimizer->steps_taken()));
    }
    f.create_group("/rng");
    for (const auto& [rng_name, s] : state.rngs) f.write_u64("/rng/" + rng_name, {4}, s.data());
    for (const auto& [section, content] : state.sections) {
      for (const char* reserved : kReservedGroups)
        FORGE_CHECK(section != reserved, "checkpoint section name '" + section + "' is reserved");
      write_section(f, section, content);
    }
    f.flush();
    f.close();
  }
  h5::sync_to_disk(tmp_path, false);
  fs::rename(tmp_path, final_path);
  cleanup.done = true;
  h5::sync_to_disk(dir, true);

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

std::string checkpoint_before(const std::string& dir, const std::string& path) {
  std::string before;
  for (const auto& [step, p] : list_checkpoints(dir)) {
    if (p == path) return before;
    before = p;
  }
  return "";
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
  if (schema < 1)
    throw InputError("checkpoint '" + path + "' has schema version " + std::to_string(schema) +
                     "; versions start at 1 (damaged file)");
  return f;
}

}  // namespace

std::string checkpoint_config(const std::string& path) { return open_checkpoint(path).attr_string("config"); }

std::string checkpoint_model_fingerprint(const std::string& path) {
  const h5::File f = open_checkpoint(path);
  return f.has_attr("model_fingerprint") ? f.attr_string("model_fingerprint") : std::string();
}

void check_checkpoint_shapes(const std::string& path, const ParamLayout& layout) {
  check_shapes(open_checkpoint(path), "/model", layout);
}

std::vector<std::string> checkpoint_rng_names(const std::string& path) {
  const h5::File f = open_checkpoint(path);
  return f.exists("/rng") ? f.members("/rng") : std::vector<std::string>{};
}

std::optional<CheckpointSection> load_checkpoint_section(const std::string& path, const std::string& name) {
  const h5::File f = open_checkpoint(path);
  if (!f.exists("/" + name)) return std::nullopt;
  return read_section(f, name);
}

CheckpointState load_checkpoint(const std::string& path, PolicyModel& model, AdamW* optimizer) {
  const h5::File f = open_checkpoint(path);
  CheckpointState st;
  // Counts a run carries on from (as int): a value outside [0, INT_MAX] is a
  // damaged file, not a step to resume at.
  const auto count = [&](const char* name) {
    const int64_t x = f.attr_int(name);
    if (x < 0 || x > std::numeric_limits<int>::max())
      throw InputError("checkpoint '" + path + "': attribute '" + name + "' = " + std::to_string(x) +
                       " is not a step count (0 to " + std::to_string(std::numeric_limits<int>::max()) + ")");
    return x;
  };
  st.step = count("step");
  // Runs pick their newest checkpoint, and prune older ones, by the step in
  // the file name: a renamed or copied-over file would resume at one step
  // and be kept as another.
  const int64_t named = step_of(fs::path(path).filename().string());
  if (named >= 0 && named != st.step)
    throw InputError("checkpoint '" + path + "' holds step " + std::to_string(st.step) +
                     " but its name says step " + std::to_string(named) + " (renamed or copied over?)");
  st.policy_version = count("policy_version");
  st.config_ini = f.attr_string("config");
  if (f.has_attr("model_fingerprint")) st.model_fingerprint = f.attr_string("model_fingerprint");
  model.set_params(read_tensors(f, "/model", model.layout(), Values::kFinite));
  if (optimizer) {
    if (!f.exists("/optim"))
      throw InputError("checkpoint '" + path + "' holds no optimizer state");
    const auto m = read_tensors(f, "/optim/m", model.layout(), Values::kFinite);
    const auto v = read_tensors(f, "/optim/v", model.layout(), Values::kNonNegative);
    optimizer->m().upload(model.backend(), m);
    optimizer->v().upload(model.backend(), v);
    optimizer->set_steps_taken(static_cast<int>(count("optim_steps")));
  }
  if (f.exists("/rng")) {
    for (const std::string& name : f.members("/rng")) {
      // The shape first: a huge dataset of well-compressed chunks would be
      // read whole before its size was seen.
      if (f.shape("/rng/" + name) != std::vector<int64_t>{4})
        throw InputError("checkpoint '" + path + "': RNG state '" + name + "' has shape " +
                         shape_text(f.shape("/rng/" + name)) + ", expected [4]");
      const auto s = f.read_u64("/rng/" + name);
      if (s.size() != 4)
        throw InputError("checkpoint '" + path + "': RNG state '" + name + "' has " +
                         std::to_string(s.size()) + " words, expected 4");
      st.rngs[name] = {s[0], s[1], s[2], s[3]};
    }
  }
  for (const std::string& group : f.members("/")) {
    const bool reserved = std::find(std::begin(kReservedGroups), std::end(kReservedGroups), group) !=
                          std::end(kReservedGroups);
    if (!reserved) st.sections[group] = read_section(f, group);
  }
  return st;
}

}  // namespace forge
