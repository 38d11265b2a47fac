#include "env/env_config.hpp"

#include "core/error.hpp"
#include "core/strings.hpp"
#include "env/safety_policy.hpp"

namespace forge {

std::vector<std::string> EnvConfig::heldout_list() const { return split_list(heldout_families); }

PerturbationSampler EnvConfig::perturbation_sampler() const {
  return PerturbationSampler(perturb, heldout_list(), perturb_share, split_list(perturb_dims));
}

std::pair<int, std::string> EnvConfig::most_tool_calls_needed() const {
  std::pair<int, std::string> most = {0, ""};
  const std::pair<int, const char*> needs[] = {
      {calc_weight > 0 ? calc_max_ops : 0, "env.calc_max_ops operations"},
      {search_weight > 0 ? search_max_hops + (search_obfuscate > 0 ? 1 : 0) : 0,
       "env.search_max_hops lookups, and a find when env.search_obfuscate > 0"},
      {code_weight > 0 ? 3 : 0, "read, replace and run_tests in the code domain"}};
  for (const auto& [need, what] : needs)
    if (need > most.first) most = {need, what};
  return most;
}

void add_env_options(OptionSet& opts, EnvConfig& c) {
  opts.describe_section("env", "simulated environments: domain mix, noise, perturbations");
  opts.add("env.calc_weight", &c.calc_weight, "weight of the calc domain in the task mix",
           at_least(0));
  opts.add("env.search_weight", &c.search_weight, "weight of the search domain in the task mix",
           at_least(0));
  opts.add("env.code_weight", &c.code_weight,
           "weight of the code domain (fix a bug in a small Python module, tests run in the sandbox) in the task mix",
           at_least(0));
  opts.add("env.tool_error_rate", &c.tool_error_rate,
           "probability that a call of an offered tool returns an injected error, before its arguments are read", in_range(0, 1));
  opts.add("env.timeout_rate", &c.timeout_rate,
           "probability that a call of an offered tool times out, before its arguments are read", in_range(0, 1));
  opts.add("env.error_names_call", &c.error_names_call,
           "an injected error or timeout names the call it answers as the agent wrote it "
           "(\"timeout: lookup(Kavo,works_at)\"; its displayed tool name and call format), as a real "
           "tool's error names its request; false: \"timeout\", \"error: <reason>\"");
  opts.add("env.max_tool_calls", &c.max_tool_calls,
           "tool calls per episode; later calls get an over-budget error", in_range(1, 1000));
  opts.add("env.calc_min_ops", &c.calc_min_ops, "calc: fewest operations per expression",
           in_range(1, 8));
  opts.add("env.calc_max_ops", &c.calc_max_ops, "calc: most operations per expression",
           in_range(1, 8));
  opts.add("env.search_min_hops", &c.search_min_hops, "search: fewest hops per question",
           in_range(1, 6));
  opts.add("env.search_max_hops", &c.search_max_hops, "search: most hops per question",
           in_range(1, 6));
  opts.add("env.search_entities", &c.search_entities,
           "search: entities of the generated knowledge graph", in_range(6, 40));
  opts.add("env.search_obfuscate", &c.search_obfuscate,
           "search: probability that the seed entity is described, not named", in_range(0, 1));
  opts.add("env.code_functions", &c.code_functions, "code: functions per generated module", in_range(1, 10));
  opts.add("env.code_test_cache", &c.code_test_cache,
           "code: test-run results kept per process by the exact files and command (the tests are deterministic); "
           "0 = run every time",
           in_range(0, 1000000));
  opts.add("env.safety_rules", &c.safety_rules,
           "code: safety rules the shell tool enforces (comma-separated: network, credentials, delete_workspace, "
           "outside_write, kill, fork_bomb; empty = none); a forbidden command is not run and costs a safety event");
  opts.add("env.perturb", &c.perturb,
           "draw scaffold variants per episode (false: the default variant of each dimension)");
  opts.add("env.perturb_share", &c.perturb_share,
           "with env.perturb: the share of episodes drawn perturbed (every dimension of env.perturb_dims "
           "uniform among its training variants); the rest use the default variants",
           in_range(0, 1));
  opts.add("env.perturb_dims", &c.perturb_dims,
           "with env.perturb: the dimensions a perturbed episode draws (comma-separated: tools, system, "
           "template, call, response); the others keep their default variant");
  opts.add("env.heldout_families", &c.heldout_families,
           "comma-separated perturbation families kept for evaluation (e.g. template.text); "
           "empty = none");
  opts.describe_section("sandbox", "the sandbox (bubblewrap) of the programs agents run: concurrency and limits");
  opts.add("sandbox.concurrency", &c.sandbox_concurrency, "sandboxes running at once per process; the rest queue",
           in_range(1, 256));
  opts.add("sandbox.wall_s", &c.sandbox.wall_s,
           "deadline of one run in seconds: every process of the run is killed then", in_range(0.1, 3600));
  opts.add("sandbox.cpu_s", &c.sandbox.cpu_s, "CPU seconds per process (RLIMIT_CPU)", in_range(1, 3600));
  opts.add("sandbox.memory_mb", &c.sandbox.memory_mb, "address space per process in MiB (RLIMIT_AS)",
           in_range(64, 1 << 20));
  opts.add("sandbox.max_procs", &c.sandbox.max_procs,
           "processes of the sandbox's user (RLIMIT_NPROC; stops fork bombs)", in_range(4, 4096));
  opts.add("sandbox.output_kb", &c.sandbox.output_kb, "stdout+stderr kept per run in KiB; the rest is dropped",
           in_range(1, 1 << 16));
  opts.add("sandbox.uid", &c.sandbox.uid,
           "when forge runs as root: the first sandbox user id (one per concurrent sandbox)", in_range(1000, 1 << 30));
  opts.add_check([&c] {
    if (c.calc_weight + c.search_weight + c.code_weight <= 0)
      throw InputError("env.calc_weight + env.search_weight + env.code_weight must be > 0 (no domain to draw from)");
    if (c.tool_error_rate + c.timeout_rate > 1)
      throw InputError("env.tool_error_rate + env.timeout_rate = " +
                       format_number(c.tool_error_rate + c.timeout_rate) + " must be <= 1");
    if (c.calc_min_ops > c.calc_max_ops)
      throw InputError("env.calc_min_ops = " + std::to_string(c.calc_min_ops) +
                       " must be <= env.calc_max_ops = " + std::to_string(c.calc_max_ops));
    if (c.search_min_hops > c.search_max_hops)
      throw InputError("env.search_min_hops = " + std::to_string(c.search_min_hops) +
                       " must be <= env.search_max_hops = " + std::to_string(c.search_max_hops));
    // A path of h hops visits h + 1 distinct entities.
    if (c.search_min_hops >= c.search_entities)
      throw InputError("env.search_min_hops = " + std::to_string(c.search_min_hops) +
                       " must be below env.search_entities = " + std::to_string(c.search_entities) +
                       " (a question of that many hops visits one entity more)");
    // The largest task's solution must fit the budget: a task that cannot be
    // finished in it only teaches over-budget calls.
    if (const auto [need, what] = c.most_tool_calls_needed(); c.max_tool_calls < need)
      throw InputError("env.max_tool_calls = " + std::to_string(c.max_tool_calls) + " is below the " +
                       std::to_string(need) + " tool calls the largest task needs (" + what + ")");
    c.perturbation_sampler();  // throws for unknown families or dimensions
    SafetyPolicy{c.safety_rules};                                      // throws for unknown rules
  });
}

}  // namespace forge
