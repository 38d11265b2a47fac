#include "checkpoint_model.hpp"

#include <filesystem>

#include "core/config.hpp"
#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/h5_file.hpp"
#include "model/tokenizer.hpp"
#include "standard_options.hpp"

namespace forge {

bool checkpoint_due(const RunConfig& run, int steps_done, int total_steps) {
  return steps_done == total_steps ||
         (run.checkpoint_every > 0 && steps_done % run.checkpoint_every == 0);
}

namespace {

CheckpointState run_state(const OptionSet& opts, int steps_done) {
  CheckpointState cs;
  cs.step = steps_done;
  cs.policy_version = steps_done;
  cs.config_ini = opts.dump_ini();
  return cs;
}

}  // namespace

std::string save_run_checkpoint(const RunConfig& run, const OptionSet& opts,
                                const PolicyModel& model, AdamW& opt, int steps_done,
                                const std::string& rng_name, const Rng& rng) {
  CheckpointState cs = run_state(opts, steps_done);
  cs.rngs[rng_name] = rng.state();
  return save_checkpoint(run.dir + "/checkpoints", model, &opt, cs, run.keep_checkpoints);
}

std::string save_run_checkpoint(const RunConfig& run, const OptionSet& opts,
                                const PolicyModel& model, AdamW& opt, int steps_done,
                                const DataPoolState& data_pool) {
  CheckpointState cs = run_state(opts, steps_done);
  cs.data_pool = data_pool;
  return save_checkpoint(run.dir + "/checkpoints", model, &opt, cs, run.keep_checkpoints);
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

ModelConfig model_config_of(const std::string& checkpoint) {
  const std::string ini = h5::File::open_read(checkpoint).attr_string("config");
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
  stored.load_ini_text(model_section, checkpoint + " (stored config)");
  stored.run_checks();
  model.vocab = Tokenizer::kVocabSize;
  return model;
}

}  // namespace forge
