// Configuration of the simulations: the domain mix, noise, budgets, the
// domains' sizes and the perturbation pipeline. add_env_options() registers
// the [env] section (keys env.*) with defaults from the member initializers
// and validators; cross-key rules run as OptionSet checks.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "env/perturbation.hpp"
#include "sandbox/sandbox.hpp"

namespace forge {

struct EnvConfig {
  // Domain mix: a task's domain is drawn with probability weight / sum.
  double calc_weight = 1.0;
  double search_weight = 1.0;
  double code_weight = 0.0;

  // Noise on valid tool calls (an injected error, or a timeout).
  double tool_error_rate = 0.1;
  double timeout_rate = 0.05;
  // The injected error names the call it answers, as the agent wrote it
  // ("timeout: lookup(Kavo,works_at)"), as a real tool's error names its
  // request (rendered by the scaffold: tool_response_format.hpp).
  bool error_names_call = false;
  int max_tool_calls = 8;  // tool calls per episode; later ones are errors

  // calc: operations per expression.
  int calc_min_ops = 2;
  int calc_max_ops = 4;
  // search: hops of the question, entities of the generated graph, and the
  // probability that the seed entity is described instead of named.
  int search_min_hops = 1;
  int search_max_hops = 3;
  int search_entities = 10;
  double search_obfuscate = 0.7;

  // code: functions per generated module (code_tasks.hpp), and the safety
  // rules its shell enforces (safety_policy.hpp; comma-separated).
  int code_functions = 3;
  // Test-run results kept per process, by the exact workspace and command
  // (code_env.hpp); 0: every run runs.
  int code_test_cache = 4096;
  std::string safety_rules = "network,credentials,delete_workspace,outside_write,kill,fork_bomb";
  // The sandbox of the code domain's programs (src/sandbox/): runs at once
  // per process, and each run's limits (the [sandbox] keys).
  int sandbox_concurrency = 2;
  SandboxLimits sandbox;

  // Perturbations (perturbation.hpp): off = every episode uses the default
  // variant of each dimension. Held-out families (comma-separated names such
  // as "template.tool_as_user") are never drawn in training mode.
  bool perturb = true;
  double perturb_share = 1.0;  // with perturb: the share of episodes perturbed
  // The dimensions a perturbed episode draws (comma-separated); the others
  // keep their default variant.
  std::string perturb_dims = "tools,system,template,call,response";
  std::string heldout_families = "template.tool_as_user";

  std::vector<std::string> heldout_list() const;  // heldout_families split on ','
  // The tool calls of the largest task's solution among the domains drawn
  // (calc_max_ops; search_max_hops, plus a find when obfuscated; 3 for
  // code), and what sets it; add_env_options requires max_tool_calls >= it.
  std::pair<int, std::string> most_tool_calls_needed() const;
  // The sampler of these keys (env.perturb, perturb_share, perturb_dims,
  // heldout_families); InputError for a bad name or share.
  PerturbationSampler perturbation_sampler() const;
};

void add_env_options(OptionSet& opts, EnvConfig& config);

}  // namespace forge
