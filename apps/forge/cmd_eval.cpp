// `forge eval CHECKPOINT`: greedy evaluation of a checkpoint's policy as an
// agent on tasks disjoint from training (the eval seed stream), in the seen
// scaffold styles and in the held-out perturbation families: success rate,
// mean reward by component and mean turns, per domain, why the failed
// episodes failed (agent/failure_mode.hpp) and success by the number of tool
// calls a task needs. --json writes the figures as one JSON object on stdout
// instead of the table.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "agent/agent_eval.hpp"
#include "agent/opening_fit.hpp"
#include "backend/backend_registry.hpp"
#include "cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "forge_config.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "pretrained/model_source.hpp"
#include "learner/run_checkpoints.hpp"
#include "text_formats.hpp"

namespace forge {
namespace {

std::string json_of(const AgentEval& e) {
  char buf[512];
  auto one = [&](const DomainEval& d) {
    // The shares of the episodes that met a tool error: null without one.
    const auto of_errors = [&](double share) {
      char v[32];
      std::snprintf(v, sizeof v, "%.6g", share);
      return d.with_error ? std::string(v) : std::string("null");
    };
    std::snprintf(buf, sizeof buf,
                  "{\"episodes\": %d, \"success\": %.6g, \"outcome\": %.6g, \"process\": %.6g, "
                  "\"efficiency\": %.6g, \"turns\": %.6g, \"met_tool_error\": %.6g, "
                  "\"recovered_after_error\": %s, \"success_after_error\": %s, "
                  "\"malformed_calls\": %.6g, \"test_runs\": %.6g, \"safety_events\": %.6g",
                  d.episodes, d.success, d.outcome, d.process, d.efficiency, d.turns, d.met_error,
                  of_errors(d.recovered).c_str(), of_errors(d.success_after_error).c_str(), d.malformed, d.test_runs,
                  d.safety_events);
    std::string out(buf);
    const char* sep = "";
    out += ", \"failures\": {";
    for (FailureMode m : kAllFailureModes) {
      std::snprintf(buf, sizeof buf, "%s\"%s\": %.6g", sep, to_string(m), d.failures[static_cast<int>(m)]);
      out += buf;
      sep = ", ";
    }
    sep = "";
    out += "}, \"by_needed_calls\": {";
    for (const auto& [calls, len] : d.by_needed_calls) {
      std::snprintf(buf, sizeof buf, "%s\"%d\": {\"episodes\": %d, \"success\": %.6g}", sep, calls, len.episodes,
                    len.success);
      out += buf;
      sep = ", ";
    }
    return out + "}}";
  };
  std::string s = "{\"all\": " + one(e.all);
  for (const auto& [name, d] : e.by_domain) s += ", \"" + name + "\": " + one(d);
  return s + "}";
}

int run_eval(int argc, char** argv) {
  std::string checkpoint;
  ForgeConfig all;
  int tasks = 500;
  bool json = false;
  OptionSet opts("forge eval",
                 "Greedy agent evaluation of a checkpoint (an .h5 file, or a run folder: its\n"
                 "newest checkpoint) or of a pretrained model (GGUF file or Hugging Face folder,\n"
                 "zero-shot) on held-out tasks, in seen and held-out scaffold styles. The task\n"
                 "stream is the one `forge train` and `forge sft` evaluate on for run.seed.");
  opts.add_positional("MODEL", &checkpoint, "checkpoint file, run folder, GGUF file or Hugging Face folder");
  opts.describe_section("eval", "forge eval: the held-out evaluation (the other commands refuse an [eval] section)");
  opts.add("eval.tasks", &tasks, 500, "tasks per style set", in_range(1, 1e6));
  opts.add("json", &json, false, "print one JSON object instead of tables");
  add_forge_options(opts, all);
  if (!cli::parse_options(opts, argc, argv)) return 0;
  cli::log_host_warnings(set_compute_threads(all.base.run.threads));
  const EnvConfig& env = all.env;
  AgentConfig agent = all.agent;
  agent.sampling.max_new_tokens = agent.max_new_tokens;

  auto backend = make_backend(all.base.run.backend, parse_precision(all.base.run.precision));
  std::string path = checkpoint;
  int64_t step = 0;
  ModelSource source;
  std::unique_ptr<PolicyModel> model;
  if (is_pretrained_path(checkpoint)) {  // zero-shot: the pretrained model itself
    ModelConfig m;
    m.pretrained = checkpoint;
    source = resolve_model(m, true);
    model = std::make_unique<PolicyModel>(source.config, *backend);
    model->set_params(source.weights);
  } else {
    path = resolve_checkpoint(checkpoint);
    CheckpointState state;
    load_chosen_checkpoint(checkpoint, path, [&] {
      source = model_source_of(path);
      model = std::make_unique<PolicyModel>(source.config, *backend);
      state = load_checkpoint(path, *model, nullptr);
    });
    step = state.step;
    // Figures comparable with the run's own evaluations need its tasks and scaffold.
    if (const std::string changes = resumed_setting_changes(state.config_ini, opts.dump_ini(), "eval");
        !changes.empty())
      log_warn("eval: settings differ from those of the run that wrote " + path + " (" + changes +
               "): the tasks or their scaffold are not the run's; --config RUN_DIR/config.ini evaluates as it "
               "trained");
  }
  log_model_keys_unread(all.base.model, checkpoint, source.config);
  agent.vocabulary = ScaffoldVocabulary::of(source.chat);
  warn_turns_below_largest_task(env, agent);
  check_openings_fit(env, agent);
  const StyleEvals ev = evaluate_styles(*model, env, agent, tasks, all.base.run.seed);
  if (json) {
    std::printf("{\"checkpoint\": %s, \"step\": %lld, \"seen\": %s, \"heldout_family\": %s}\n",
                json_string(path).c_str(), static_cast<long long>(step), json_of(ev.seen).c_str(),
                ev.has_heldout ? json_of(ev.heldout).c_str() : "null");
  } else {
    std::printf("%s (step %lld), %d tasks per style set; held-out families: %s\n%s", path.c_str(),
                static_cast<long long>(step), tasks, env.heldout_families.c_str(),
                format_style_evals(ev, "greedy evaluation").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("eval", "greedy agent evaluation of a checkpoint on held-out tasks and styles",
              forge::run_eval);
