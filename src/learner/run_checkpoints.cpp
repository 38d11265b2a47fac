#include "learner/run_checkpoints.hpp"

#include <filesystem>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "pretrained/model_source.hpp"

namespace forge {

bool checkpoint_due(const RunConfig& run, int steps_done, int total_steps) {
  return steps_done == total_steps ||
         (run.checkpoint_every > 0 && steps_done % run.checkpoint_every == 0);
}

std::string save_run_checkpoint(const RunConfig& run, const std::string& config_ini, const PolicyModel& model,
                                AdamW& opt, int steps_done, CheckpointState stream) {
  stream.step = steps_done;
  stream.policy_version = steps_done;
  stream.config_ini = config_ini;
  return save_checkpoint(run.dir + "/checkpoints", model, &opt, stream, run.keep_checkpoints);
}

std::string resolve_checkpoint(const std::string& given) {
  if (!std::filesystem::is_directory(given)) {
    if (!std::filesystem::exists(given)) throw InputError("'" + given + "' does not exist");
    return given;
  }
  std::string path = latest_checkpoint(given + "/checkpoints");
  if (path.empty()) path = latest_checkpoint(given);
  if (path.empty()) throw InputError("no checkpoint found in '" + given + "'");
  return path;
}

ModelSource model_source_of(const std::string& checkpoint) {
  return model_source_of_config(checkpoint_config(checkpoint), checkpoint);
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
  stored.load_ini_text(model_section, where + " (stored config)");
  stored.run_checks();
  return resolve_model(model, false);
}

}  // namespace forge
