// Finding a checkpoint and the model shape it was trained with, for the
// commands that load one (generate, eval, train --train.init).
#pragma once
#include <string>

#include "model/model_config.hpp"

namespace forge {

// A checkpoint file as given, or the newest checkpoint of a run folder
// (RUN_DIR/checkpoints, or the folder itself). InputError when none exists.
std::string resolve_checkpoint(const std::string& file_or_run_dir);

// The [model] section of the configuration stored in the checkpoint.
ModelConfig model_config_of(const std::string& checkpoint);

}  // namespace forge
