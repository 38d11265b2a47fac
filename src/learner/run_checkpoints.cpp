#include "learner/run_checkpoints.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "pretrained/model_fingerprint.hpp"
#include "pretrained/model_source.hpp"

namespace forge {

bool checkpoint_due(const RunConfig& run, int steps_done, int total_steps) {
  return steps_done == total_steps ||
         (run.checkpoint_every > 0 && steps_done % run.checkpoint_every == 0);
}

std::string save_run_checkpoint(const RunConfig& run, const std::string& config_ini,
                                const std::string& model_fingerprint, const PolicyModel& model, AdamW& opt,
                                int steps_done, CheckpointState stream) {
  stream.step = steps_done;
  stream.policy_version = steps_done;
  stream.config_ini = config_ini;
  stream.model_fingerprint = model_fingerprint;
  return save_checkpoint(run.dir + "/checkpoints", model, &opt, stream, run.keep_checkpoints);
}

std::string resolve_checkpoint(const std::string& given) {
  if (!std::filesystem::is_directory(given)) {
    if (!std::filesystem::exists(given)) throw InputError("'" + given + "' does not exist");
    return given;
  }
  std::string path = latest_checkpoint(given + "/checkpoints");
  if (path.empty()) path = latest_checkpoint(given);
  if (path.empty()) {
    // A Hugging Face folder is told by its config.json: say so where one
    // looks like a model folder without it.
    std::error_code ec;
    bool model_files = std::filesystem::exists(given + "/tokenizer.json", ec);
    for (const auto& e : std::filesystem::directory_iterator(given, ec))
      model_files = model_files || e.path().extension() == ".safetensors";
    throw InputError("no checkpoint found in '" + given + "'" +
                     (model_files ? " (it holds model files but no config.json, which a Hugging Face model folder "
                                    "needs to be read as one)"
                                  : ""));
  }
  return path;
}

ModelSource model_source_of(const std::string& checkpoint) {
  // Every forge command stores its whole configuration, [model] included:
  // without one the model would silently be the default.
  const std::string ini = checkpoint_config(checkpoint);
  if (ini.rfind("[model]\n", 0) != 0 && ini.find("\n[model]\n") == std::string::npos)
    throw InputError("checkpoint '" + checkpoint + "': its stored configuration (attribute 'config') has no "
                     "[model] section (a damaged file)");
  ModelSource source = model_source_of_config(ini, checkpoint);
  // The model file it names, read again, is the one it was trained with
  // (a file replaced at that path would pair these weights with another
  // tokenizer, chat template or RoPE).
  if (const std::string stored = checkpoint_model_fingerprint(checkpoint); !stored.empty())
    if (const std::string changed = fingerprint_differences(stored, model_fingerprint(source)); !changed.empty())
      throw InputError("checkpoint '" + checkpoint + "' was trained with another model: model.pretrained = '" +
                       source.config.pretrained + "', read now, has another " + changed +
                       " than when the checkpoint was written (the file was replaced or edited since); put the "
                       "model it was trained with back at that path");
  // Its tensors hold the stored configuration's shapes before a model of it
  // is allocated (an edited configuration asked gigabytes of a small file).
  check_checkpoint_shapes(checkpoint, ParamLayout(source.config));
  return source;
}

namespace {

// "section.key" -> value of INI text as dump_ini writes it.
std::map<std::string, std::string> ini_values(const std::string& ini) {
  std::map<std::string, std::string> out;
  std::string section;
  std::istringstream in(ini);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == ';' || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const auto trim = [](std::string t) {
      const size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t\r");
      return a == std::string::npos ? std::string() : t.substr(a, b - a + 1);
    };
    out[section + "." + trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

// Keys that leave every command's course alone: where the run writes, how
// often it logs and saves, deadlines, the gateway's listening socket, the
// evaluation's schedule, the test-run cache, forge generate's reply length,
// train.init (superseded on resume).
const std::set<std::string> kNeutral = {
    "run.dir", "run.threads", "run.log_every", "run.checkpoint_every", "run.keep_checkpoints",
    "run.flush_seconds", "train.eval_every", "train.eval_tasks", "train.init", "mpi.deadline_s",
    "mpi.startup_s", "mpi.progress_deadline_s", "sandbox.concurrency", "sandbox.uid", "gateway.bind", "gateway.port",
    "gateway.token", "gateway.http_threads", "gateway.max_request_kib", "gateway.client_io_s",
    "env.code_test_cache", "sample.max_new_tokens"};

// forge train's: every key but the neutral ones, [sft] (another command's)
// and [model] (compared whole by require_same_model).
bool shapes_training(const std::string& key) {
  return key.rfind("sft.", 0) != 0 && key.rfind("model.", 0) != 0 && key != "train.steps" && !kNeutral.count(key);
}

// The same for forge sft: its sections, but neither sft.steps nor the
// evaluation's sizes.
bool shapes_sft(const std::string& key) {
  const bool section = key.rfind("sft.", 0) == 0 || key.rfind("optim.", 0) == 0 || key.rfind("env.", 0) == 0 ||
                       key.rfind("agent.", 0) == 0 || key.rfind("sandbox.", 0) == 0 || key.rfind("run.", 0) == 0;
  return section && key != "sft.steps" && key != "sft.eval_requests" && key != "sft.show" &&
         (key.rfind("sft.", 0) == 0 || shapes_training(key));
}

// forge eval's: the held-out tasks and their scaffold.
bool shapes_eval(const std::string& key) {
  return (key.rfind("env.", 0) == 0 || key.rfind("agent.", 0) == 0 || key == "run.seed") && !kNeutral.count(key);
}

}  // namespace

std::string resumed_setting_changes(const std::string& checkpoint_ini, const std::string& now_ini,
                                    const std::string& command) {
  const bool sft = command == "sft";
  const std::string steps_key = sft ? "sft.steps" : "train.steps";
  const auto was = ini_values(checkpoint_ini), now = ini_values(now_ini);
  // Lists compare by their items ("a, b" is "a,b"); a set's in any order.
  static const std::set<std::string> kUnorderedLists = {"env.safety_rules"};
  const auto normal = [](const std::string& key, const std::string& v) {
    std::vector<std::string> items;
    std::istringstream in(v);
    for (std::string item; std::getline(in, item, ',');) {
      const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
      items.push_back(a == std::string::npos ? std::string() : item.substr(a, b - a + 1));
    }
    if (kUnorderedLists.count(key)) std::sort(items.begin(), items.end());
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
    return out;
  };
  const bool cosine_by_steps = now.count("optim.schedule") && now.at("optim.schedule") == "cosine" &&
                               now.count("optim.total_steps") && now.at("optim.total_steps") == "0";
  // Keys both configurations name: one an older forge did not write (or a
  // newer one no longer reads) is no change of the run's.
  std::string out;
  for (const auto& [k, v] : was) {
    const bool shapes = command == "eval" ? shapes_eval(k) : sft ? shapes_sft(k) : shapes_training(k);
    if (!now.count(k) || !(shapes || (command != "eval" && cosine_by_steps && k == steps_key)))
      continue;
    if (normal(k, v) != normal(k, now.at(k))) out += (out.empty() ? "" : "; ") + k + " " + v + " -> " + now.at(k);
  }
  return out;
}

void require_same_model(const PolicyModel& model, const std::string& path, const std::string& flag,
                        const std::string& fix) {
  const std::string differences = model_differences(model.config(), model_source_of(path).config);
  if (!differences.empty())
    throw InputError(flag + ": checkpoint '" + path + "' was trained with another model (this run against the "
                     "checkpoint's: " + differences + "); " + fix);
}

InputError with_older_checkpoint_hint(const InputError& e, const std::string& dir, const std::string& path,
                                      bool resuming) {
  const std::string what = e.what();
  const std::string older = checkpoint_before(dir, path);
  if (older.empty() || dynamic_cast<const UnresolvedModelError*>(&e) != nullptr ||
      what.find("was trained with another model") != std::string::npos || what.find("newer forge") != std::string::npos)
    return e;
  if (!resuming)
    return InputError(what + " (if the run's newest checkpoint is damaged, give the one before it: '" + older + "')");
  return InputError(what + " (if the newest checkpoint is damaged, move it out of '" + dir +
                    "': --resume then continues from '" + older + "')");
}

ResumePoint load_resume_point(PolicyModel& model, AdamW& opt, const RunConfig& run, const std::string& steps_key,
                              int total_steps, const std::string& past_hint) {
  ResumePoint r;
  const std::string dir = run.dir + "/checkpoints";
  r.path = latest_checkpoint(dir);
  if (r.path.empty()) throw InputError("--resume: no checkpoint in '" + dir + "'");
  try {
    require_same_model(model, r.path, "--resume", "resume with the run's [model] keys");
    r.state = load_checkpoint(r.path, model, &opt);
  } catch (const InputError& e) {
    throw with_older_checkpoint_hint(e, dir, r.path);
  }
  r.step = static_cast<int>(r.state.step);
  if (r.step > total_steps)
    throw InputError("--resume: the newest checkpoint, '" + r.path + "', is at step " + std::to_string(r.step) +
                     ", past " + steps_key + " = " + std::to_string(total_steps) + ": raise " + steps_key +
                     " to go on" + past_hint);
  return r;
}

std::string resumed_at(int step, int total_steps, const std::string& steps_key) {
  return " at step " + std::to_string(step) + (step == total_steps ? " = " + steps_key + ": nothing is left to train" : "");
}

ModelSource model_source_of_config(const std::string& ini, const std::string& where) {
  // The stored INI holds every section of its command; only [model] is read.
  std::string model_section;
  bool in_model = false;
  size_t pos = 0;
  while (pos < ini.size()) {
    const size_t nl = ini.find('\n', pos);
    const std::string line = ini.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? ini.size() : nl + 1;
    if (!line.empty() && line[0] == '[') in_model = line == "[model]";
    if (in_model) model_section += line + "\n";
  }
  ModelConfig model;
  OptionSet stored("stored configuration");
  add_model_options(stored, model);
  try {
    stored.load_ini_text(model_section, where + " (stored config)");
  } catch (const InputError& e) {
    if (std::string(e.what()).find("unknown option") == std::string::npos) throw;
    throw InputError(where + ": its stored [model] names a key this forge does not read (written by a newer "
                     "forge?): " + e.what());
  }
  stored.run_checks();
  try {
    return resolve_model(model, false);
  } catch (const InputError& e) {
    // The stored path is as the run was given it: a relative one is read
    // against the current folder, which need not be the run's. Said where
    // it is not there (not for a model found and refused).
    const std::string& p = model.pretrained;
    std::error_code ec;
    if (p.empty() || p[0] == '/' || p[0] == '$' || std::filesystem::exists(p, ec) || ec)
      throw UnresolvedModelError(e.what());
    throw UnresolvedModelError(std::string(e.what()) + " (model.pretrained = '" + p + "' as " + where +
                               " stores it, read against the current folder " +
                               std::filesystem::current_path(ec).string() +
                               "; run this command from the folder the run started in)");
  }
}

}  // namespace forge
