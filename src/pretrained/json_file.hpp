// Reading the JSON files of a Hugging Face model folder (config.json,
// tokenizer.json, tokenizer_config.json, the shard index): a file that is
// missing or not JSON is an InputError naming it.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace forge {

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + path + "' is not valid JSON: " + e.what());
  }
}

}  // namespace forge
