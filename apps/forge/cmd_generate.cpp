// `forge generate CHECKPOINT --prompt TEXT`: loads a checkpoint (its model
// shape comes from the configuration stored in it) and completes one
// single-turn chat request with the rollout engine, printing the completion
// and, with --show_logprobs, every generated token with its logprob.
#include <cmath>
#include <filesystem>
#include <cstdio>

#include "cli.hpp"
#include "core/error.hpp"
#include "cpu/cpu_backend.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/h5_file.hpp"
#include "model/rollout_engine.hpp"
#include "model/tokenizer.hpp"
#include "standard_options.hpp"
#include "synthetic_task.hpp"

namespace forge {
namespace {

// The model section of the configuration a checkpoint was trained with.
ModelConfig model_config_of(const std::string& checkpoint) {
  const std::string ini = h5::File::open_read(checkpoint).attr_string("config");
  ModelConfig model;
  OptionSet stored("stored configuration");
  add_model_options(stored, model);
  // The stored INI also holds other sections; only [model] is read here.
  std::string model_section, line;
  bool in_model = false;
  for (size_t pos = 0; pos <= ini.size();) {
    const size_t nl = ini.find('\n', pos);
    line = ini.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? ini.size() + 1 : nl + 1;
    if (!line.empty() && line[0] == '[') in_model = line == "[model]";
    if (in_model) model_section += line + "\n";
  }
  stored.load_ini_text(model_section, checkpoint + " (stored config)");
  stored.run_checks();
  model.vocab = Tokenizer::kVocabSize;
  return model;
}

int run_generate(int argc, char** argv) {
  std::string checkpoint, prompt;
  bool show_logprobs = false;
  SamplingParams sampling;
  RunConfig run;
  OptionSet opts("forge generate CHECKPOINT",
                 "Complete one chat request with the policy of a checkpoint (an .h5 file from\n"
                 "RUN_DIR/checkpoints, or a run folder: its newest checkpoint).");
  opts.add_positional("CHECKPOINT", &checkpoint, "checkpoint file or run folder");
  opts.add("prompt", &prompt, "", "the user's request, e.g. 'reverse: lemon' (required)");
  opts.add("show_logprobs", &show_logprobs, false, "print each generated token with its logprob");
  add_sampling_options(opts, sampling);
  opts.add("run.threads", &run.threads, "OpenMP threads; 0 = all cores", in_range(0, 4096));
  if (!cli::parse_options(opts, argc, argv)) return 0;
  if (prompt.empty()) throw InputError("--prompt is required (the user's request)");
  set_cpu_threads(run.threads);

  std::string path = checkpoint;
  if (std::filesystem::is_directory(path)) {
    path = latest_checkpoint(path + "/checkpoints");
    if (path.empty()) path = latest_checkpoint(checkpoint);
    if (path.empty()) throw InputError("no checkpoint found in '" + checkpoint + "'");
  }
  auto backend = make_backend("cpu");
  PolicyModel model(model_config_of(path), *backend);
  const CheckpointState st = load_checkpoint(path, model, nullptr);

  EngineConfig ec;
  RolloutEngine engine(model, ec);
  engine.set_policy_version(static_cast<int>(st.policy_version));
  GenerationRequest req;
  req.prompt = single_turn_prompt(prompt);
  req.sampling = sampling;
  req.sampling.stop_tokens = {kEndOfTurn};
  engine.submit(req);
  const GenerationResult res = engine.run_until_done().at(0);
  Tokenizer tok;
  std::vector<int32_t> text = res.tokens;
  if (!text.empty() && text.back() == kEndOfTurn) text.pop_back();
  std::printf("%s\n", tok.decode(text).c_str());
  if (show_logprobs)
    for (size_t i = 0; i < res.tokens.size(); ++i)
      std::printf("  %-14s logprob %8.4f  p %.3f  version %d\n", tok.token_name(res.tokens[i]).c_str(),
                  res.logprobs[i], std::exp(res.logprobs[i]), res.versions[i]);
  std::fprintf(stderr, "(%s, step %lld, finish: %s)\n", path.c_str(),
               static_cast<long long>(st.step), to_string(res.finish));
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("generate", "complete one chat request with a checkpoint's policy", forge::run_generate);
