// `forge export-model SOURCE --out DIR [--bf16]`: a model as a Hugging Face
// folder (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json with the chat template, generation_config.json) that
// transformers loads with the same logits (pretrained/hf_export.hpp).
//
// SOURCE is a checkpoint of forge (an .h5 file, or a run folder: its newest
// checkpoint) of a run that started from a pretrained model (model.pretrained
// in its stored configuration gives the architecture and the tokenizer), or
// a pretrained model itself (a GGUF file or a Hugging Face folder), which
// converts it. The built-in policy (byte tokenizer) has no Hugging Face form.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "backend/backend_registry.hpp"
#include "cli.hpp"
#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/run_checkpoints.hpp"
#include "model/policy_model.hpp"
#include "pretrained/hf_export.hpp"
#include "pretrained/model_source.hpp"

namespace forge {
namespace {

// A new --out folder can be created: the nearest existing path above it is
// a folder forge may write into. Checked before the model is loaded, so that
// "afile/sub" is refused at once, not after the weights are read.
void check_creatable(const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(out, ec).parent_path();
  fs::file_status st = fs::status(p, ec);
  while (st.type() == fs::file_type::not_found && p.has_relative_path()) st = fs::status(p = p.parent_path(), ec);
  if (!fs::is_directory(st))
    throw InputError("--out '" + out + "': '" + p.string() + "' is not a folder" +
                     (ec ? " (" + ec.message() + ")" : "") + ", so the folder cannot be created");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    throw InputError("--out '" + out + "': cannot create a folder in '" + p.string() + "': " + std::strerror(errno));
}

int run_export_model(int argc, char** argv) {
  std::string source, out;
  bool bf16 = false;
  OptionSet opts("forge export-model",
                 "Write a model as a Hugging Face folder: a checkpoint of a run that started from a\n"
                 "pretrained model (model.pretrained), or a pretrained model (GGUF file or HF folder).");
  opts.add_positional("SOURCE", &source, "checkpoint (.h5 or run folder), GGUF file or Hugging Face folder");
  opts.add("out", &out, std::string(""), "the folder to write (required)");
  opts.add("bf16", &bf16, false, "store the weights as bf16 (false: FP32, bitwise what forge trained)");
  opts.allow_config_file(false);
  if (!cli::parse_options(opts, argc, argv)) return 0;
  if (out.empty()) throw InputError("--out is required (the folder to write)");
  // A new or empty folder only: an export never replaces files (an earlier
  // export, or the very model it reads).
  std::error_code ec;
  // A link to a folder is the folder (the final move onto the link's own
  // name failed after all the work, with "it must be empty or absent").
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(out, ec))) {
    // A link to nothing: weakly_canonical gives the link's own name back, and
    // the final move onto it fails after the work.
    if (!std::filesystem::exists(std::filesystem::status(out, ec)))
      throw InputError("--out '" + out + "' is a link to '" + std::filesystem::read_symlink(out, ec).string() +
                       "', which does not exist: make that folder, or give it as --out");
    const std::filesystem::path target = std::filesystem::weakly_canonical(out, ec);
    if (ec) throw InputError("--out '" + out + "': cannot follow the link: " + ec.message());
    out = target.string();
  }
  const auto status = std::filesystem::status(out, ec);
  if (ec && status.type() != std::filesystem::file_type::not_found)
    throw InputError("--out '" + out + "': " + ec.message());
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_directory(status))
      throw InputError("--out '" + out + "' is a file; export-model writes a folder");
    const bool empty = std::filesystem::is_empty(out, ec);
    if (ec) throw InputError("--out '" + out + "': cannot read the folder: " + ec.message());
    if (!empty)
      throw InputError("--out '" + out + "' is a folder that is not empty; export-model writes into a new or "
                       "empty folder and never replaces files");
  } else {
    check_creatable(out);
  }

  HfExport e;
  std::vector<float> weights;
  std::string from;
  if (is_pretrained_path(source)) {
    ModelConfig m;
    m.pretrained = source;
    ModelSource s = resolve_model(m, true);
    e.config = s.config;
    e.architecture = s.architecture;
    e.max_positions = s.max_positions;
    e.tokenizer = s.pretrained_tokenizer;
    weights = std::move(s.weights);
    from = source;
  } else {
    const std::string path = resolve_checkpoint(source);
    ModelSource s;
    load_chosen_checkpoint(source, path, [&] { s = model_source_of(path); });
    if (!s.is_pretrained())
      throw InputError("'" + path + "' is a checkpoint of the built-in policy (byte tokenizer), which has no "
                       "Hugging Face form; export-model writes models that started from model.pretrained");
    auto backend = make_backend("cpu");
    PolicyModel model(s.config, *backend);
    CheckpointState st;
    load_chosen_checkpoint(source, path, [&] { st = load_checkpoint(path, model, nullptr); });
    weights = model.get_params();
    e.config = s.config;
    e.architecture = s.architecture;
    e.max_positions = s.max_positions;
    e.tokenizer = s.pretrained_tokenizer;
    from = path + " (step " + std::to_string(st.step) + ")";
  }
  e.weights = &weights;
  e.bf16 = bf16;
  export_hf_folder(e, out);
  std::printf("wrote %s: %s, %zu parameters (%s), from %s\n", out.c_str(), e.architecture.c_str(), weights.size(),
              bf16 ? "bf16" : "fp32", from.c_str());
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("export-model", "write a model (a checkpoint, a GGUF file or a Hugging Face folder) as a Hugging Face folder",
              forge::run_export_model);
