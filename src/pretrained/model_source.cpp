#include "pretrained/model_source.hpp"

#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/cache_dir.hpp"
#include "core/log.hpp"
#include "pretrained/pretrained_model.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

ModelSource resolve_model(const ModelConfig& model, bool load_weights) {
  ModelSource s;
  if (model.pretrained.empty()) {
    s.config = model;
    s.config.vocab = ByteTokenizer::kVocabSize;
    s.tokenizer = std::make_shared<ByteTokenizer>();
    s.architecture = "forge";
    return s;
  }
  PretrainedModel pm = load_pretrained(model.pretrained, load_weights);
  s.config = pm.config;
  s.config.pretrained = model.pretrained;
  s.tokenizer = pm.tokenizer.tokenizer;
  const std::string bos = pm.tokenizer.bos_id >= 0 ? pm.tokenizer.tokenizer->token_text(pm.tokenizer.bos_id) : "";
  s.chat = std::make_shared<ChatFormat>(pm.tokenizer.chat_template, s.tokenizer, bos, model.pretrained,
                                        pm.tokenizer.end_ids, pm.tokenizer.text_prefix);
  s.pretrained_tokenizer = std::move(pm.tokenizer);
  s.architecture = pm.architecture;
  s.max_positions = pm.max_positions;
  s.weights = std::move(pm.weights);
  return s;
}

void warn_past_context(const ModelSource& source, int64_t longest, const std::string& what) {
  if (source.max_positions <= 0 || longest <= source.max_positions) return;
  log_warn(what + " = " + std::to_string(longest) + " tokens is past the model's context length, " +
           std::to_string(source.max_positions) + " (max_position_embeddings): positions beyond it were never " +
           "trained; lower them");
}

bool is_pretrained_path(const std::string& given) {
  const std::string path = expand_cache_path(given);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return std::filesystem::exists(path + "/config.json", ec);
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") return true;
  // A GGUF file by another name: its magic (a FIFO is not opened: it would
  // block; the checkpoint reader then refuses it by name).
  if (std::filesystem::status(path, ec).type() != std::filesystem::file_type::regular) return false;
  char magic[4] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

}  // namespace forge
