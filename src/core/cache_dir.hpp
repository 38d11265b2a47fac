// forge's cache of downloaded models and reference packages (tools/setup.sh
// fills it; never committed): $FORGE_CACHE, else ~/.cache/forge.
//
// A path given in a config may start with "$FORGE_CACHE/" so that a config
// names a cached model on every machine (configs/smollm2_agent.ini); the
// prefix is expanded where the file is opened, and the config, checkpoints
// included, keeps the portable form.
#pragma once
#include <string>

namespace forge {

std::string cache_dir();
// "$FORGE_CACHE/x" -> cache_dir() + "/x"; any other path unchanged.
std::string expand_cache_path(const std::string& path);

}  // namespace forge
