// `forge generate MODEL --prompt TEXT`: loads a checkpoint (its model shape
// comes from the configuration stored in it) or a pretrained model (a GGUF
// file or a Hugging Face folder) and completes one single-turn chat request
// with the rollout engine, printing the completion and, with
// --show_logprobs, every generated token with its logprob. The request is
// rendered in the model's chat format: a pretrained model's native template,
// the built-in policy's byte format otherwise. It takes every key of the
// suite (a run's config.ini or configs/*.ini as --config) and reads
// sample.* and run.threads/backend/precision; the model is MODEL's own, so
// [model] keys are not read (forge_config.hpp: log_model_keys_unread).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <unistd.h>

#include "backend/backend_registry.hpp"
#include "cli.hpp"
#include "text_formats.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "forge_config.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/learner_config.hpp"
#include "learner/run_checkpoints.hpp"
#include "model/rollout_engine.hpp"
#include "pretrained/model_source.hpp"
#include "model/sampling.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "synthetic_task.hpp"

namespace forge {
namespace {

int run_generate(int argc, char** argv) {
  std::string checkpoint, prompt;
  bool show_logprobs = false;
  ForgeConfig all;
  OptionSet opts("forge generate",
                 "Complete one chat request with the policy of a checkpoint (an .h5 file from\n"
                 "RUN_DIR/checkpoints, or a run folder: its newest checkpoint), or of a\n"
                 "pretrained model (a GGUF file or a Hugging Face folder).");
  opts.add_positional("MODEL", &checkpoint, "checkpoint file, run folder, GGUF file or Hugging Face folder");
  opts.add("prompt", &prompt, "", "the user's request, e.g. 'reverse: lemon' (required)");
  opts.add("show_logprobs", &show_logprobs, false, "print each generated token with its logprob (the sampling distribution's; greedy, "
                               "temperature 0: the log-softmax at temperature 1)");
  add_forge_options(opts, all);
  if (!cli::parse_options(opts, argc, argv)) return 0;
  if (prompt.empty()) throw InputError("--prompt is required (the user's request)");
  const SamplingParams& sampling = all.base.sample;
  const RunConfig& run = all.base.run;
  cli::log_host_warnings(set_compute_threads(run.threads));

  auto backend = make_backend(run.backend, parse_precision(run.precision));
  std::string path = checkpoint;
  int64_t step = 0, version = 0;
  ModelSource source;
  std::unique_ptr<PolicyModel> model;
  if (is_pretrained_path(checkpoint)) {
    ModelConfig m;
    m.pretrained = checkpoint;
    source = resolve_model(m, true);
    model = std::make_unique<PolicyModel>(source.config, *backend);
    model->set_params(source.weights);
  } else {
    path = resolve_checkpoint(checkpoint);
    CheckpointState st;
    load_chosen_checkpoint(checkpoint, path, [&] {
      source = model_source_of(path);
      model = std::make_unique<PolicyModel>(source.config, *backend);
      st = load_checkpoint(path, *model, nullptr);
    });
    step = st.step;
    version = st.policy_version;
  }

  log_model_keys_unread(all.base.model, checkpoint, source.config);
  GenerationRequest req;
  std::vector<int32_t> stops = {kEndOfTurn};
  if (source.chat) {
    req.prompt = source.chat->render({{"user", prompt}}, true);
    stops = source.chat->stop_tokens();
  } else {
    req.prompt = single_turn_prompt(prompt);
  }
  // The engine sized for this prompt and its generation (a long prompt
  // exceeded the default 4096 tokens). A pretrained model's context caps
  // the generation (finish: context_limit), and its KV pool, which is
  // allocated whole (2^20 new tokens of SmolLM2 were 48 GB).
  EngineConfig ec;
  ec.max_batch = 1;
  const int64_t prompt_len = static_cast<int64_t>(req.prompt.size());
  int64_t room = prompt_len + sampling.max_new_tokens;
  if (source.max_positions > 0) {
    warn_past_context(source, prompt_len, "the prompt");
    room = std::min<int64_t>(room, std::max<int64_t>(source.max_positions, prompt_len + 1));
  }
  ec.max_seq_len = static_cast<int>(room);
  ec.kv_cache_tokens = ec.max_seq_len + ec.block_size;  // one sequence's, whole blocks
  RolloutEngine engine(*model, ec);
  engine.set_policy_version(static_cast<int>(version));
  req.sampling = sampling;
  req.sampling.stop_tokens = stops;
  engine.submit(req);
  const GenerationResult res = engine.run_until_done().at(0);
  const Tokenizer& tok = *source.tokenizer;
  std::vector<int32_t> text = res.tokens;
  if (!text.empty() && std::find(stops.begin(), stops.end(), text.back()) != stops.end()) text.pop_back();
  // On a terminal a control byte is shown as \xNN: a model's escape
  // sequence would act on the terminal. Piped, the text is as generated.
  const std::string generated = tok.decode(text);
  std::printf("%s\n", isatty(STDOUT_FILENO) ? escape_controls(generated).c_str() : generated.c_str());
  // One line a token, its text quoted as JSON: a newline or control byte
  // token would break the table (or reach the terminal raw).
  if (show_logprobs)
    for (size_t i = 0; i < res.tokens.size(); ++i)
      std::printf("  %-14s logprob %8.4f  p %.3f  version %d\n", json_string(tok.token_text(res.tokens[i])).c_str(),
                  res.logprobs[i], std::exp(res.logprobs[i]), res.versions[i]);
  std::fprintf(stderr, "(%s, step %lld, finish: %s)\n", path.c_str(), static_cast<long long>(step),
               to_string(res.finish));
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("generate", "complete one chat request with a checkpoint's policy", forge::run_generate);
