#include "forge_config.hpp"

#include <set>

#include "core/error.hpp"
#include "core/log.hpp"

namespace forge {
namespace {

void add_sft_options(OptionSet& o, SftConfig& s) {
  o.describe_section("sft", "forge sft: supervised training (synthetic chat task or agent demonstrations)");
  o.add("sft.task", &s.task, "reverse | sort | mix (synthetic chat) | agent (solver demonstrations)",
        one_of({"reverse", "sort", "mix", "agent"}));
  o.add("sft.steps", &s.steps, "optimizer steps", in_range(1, 1e7));
  o.add("sft.batch", &s.batch, "conversations (or agent demonstrations) per step", in_range(1, 1e6));
  o.add("sft.turns", &s.turns, "requests per synthetic conversation (turns share their history)",
        in_range(1, 64));
  o.add("sft.max_tokens", &s.max_tokens, "tokens per packed bin (one forward/backward)",
        in_range(64, 1 << 24));
  o.add("sft.merge", &s.merge, "merge the batch into prefix trees (false: each sample alone)");
  o.add("sft.eval_requests", &s.eval_requests,
        "held-out requests (synthetic: exact match) or tasks (agent: success) evaluated", in_range(1, 1e6));
  o.add("sft.show", &s.show, "sampled completions printed at the end", in_range(0, 1000));
  o.add("sft.plain_steps", &s.plain_steps,
        "agent task: the first steps use the default scaffold style only, then perturbed styles "
        "(a curriculum; 0 = perturbed from the start)", at_least(0));
  o.add("sft.retry_share", &s.retry_share,
        "agent task: share of the demonstrations in which one of the solver's tool calls fails once "
        "(tool error or timeout) and the solver repeats it; the rest are noise-free",
        in_range(0, 1));
}

void add_loss_options(OptionSet& o, PolicyLossConfig& l, RewardConfig& r) {
  o.describe_section("loss", "the policy-gradient objective");
  o.add("loss.algorithm", &l.algorithm, "cispo | ppo | grpo | dapo", one_of({"cispo", "ppo", "grpo", "dapo"}));
  o.add("loss.eps_low", &l.eps_low, "lower clip of the ratio (1 - eps_low); < 0: the algorithm's default (cispo none; ppo, grpo, dapo 0.2); >= 1: none");
  o.add("loss.eps_high", &l.eps_high, "upper clip of the ratio; < 0: the algorithm's default (cispo 0.28, ppo 0.2, grpo 0.2, dapo 0.28)");
  o.add("loss.is_mask", &l.is_mask, "masked importance sampling: none | token | sequence",
        one_of({"none", "token", "sequence"}));
  o.add("loss.is_low", &l.is_low, "mask ratios below this", in_range(0, 1, Interval::kOpen));
  o.add("loss.is_high", &l.is_high, "mask ratios above this", greater_than(1));
  o.add("loss.adv_std_norm", &l.adv_std_norm,
        "divide group advantages by the group's reward std (GRPO); false: reward minus group mean "
        "(Dr. GRPO), so near-equal rewards give near-zero advantages");
  o.describe_section("reward", "the composite reward");
  o.add("reward.outcome_weight", &r.outcome_weight, "weight of the verifier's score");
  o.add("reward.process_weight", &r.process_weight, "weight of the per-step process signals");
  o.add("reward.efficiency_weight", &r.efficiency_weight, "weight of the efficiency penalty");
  o.add("reward.safety_weight", &r.safety_weight,
        "weight of the safety component (-1 per action the sandbox blocked or env.safety_rules forbids)", at_least(0));
  for (auto [key, field] : {std::pair{"reward.outcome_norm", &r.outcome_norm},
                            std::pair{"reward.process_norm", &r.process_norm},
                            std::pair{"reward.efficiency_norm", &r.efficiency_norm}})
    o.add(key, field, "normalization before weighting: none | batch", one_of({"none", "batch"}));
}


void add_mpi_options(OptionSet& o, MpiConfig& m) {
  o.describe_section("mpi", "forge train under mpirun/srun: ranks and deadlines");
  o.add("mpi.learners", &m.learners, "learner ranks (data-parallel), ranks 0..learners-1", in_range(1, 1e5));
  o.add("mpi.rollouts", &m.rollouts, "rollout (LLM engine) ranks, after the learners; the rest run environments",
        in_range(1, 1e5));
  o.add("mpi.env_groups", &m.env_groups, "task groups each environment rank runs at once", in_range(1, 1e4));
  o.add("mpi.deadline_s", &m.deadline_s,
        "seconds any blocking wait may last, and the watchdog's heartbeat deadline (the learner waits twice this for a "
        "group)",
        in_range(1, 1e6));
  o.add("mpi.startup_s", &m.startup_s,
        "seconds rollout and environment ranks wait for learner 0's first weights (it loads the model and any "
        "checkpoint first)",
        in_range(1, 1e6));
  o.add("mpi.progress_deadline_s", &m.progress_deadline_s,
        "seconds one stage of learner 0's loop (a training step, a record with its checkpoint, an engine step of "
        "an evaluation) may last: longer, learner 0 is alive but stuck and the job ends naming the stage",
        in_range(1, 1e6));
  o.describe_section("pool", "the data pool between environment ranks and the learner (Windowed FIFO)");
  o.add("pool.policy", &m.pool_policy, "fifo (W = 1) | windowed (W = pool.window) | greedy (any finished group)",
        one_of({"fifo", "windowed", "greedy"}));
  o.add("pool.inflight", &m.pool_inflight, "N: groups generating at once at most (admission)", in_range(1, 1e6));
  o.add("pool.memory", &m.pool_memory, "M: no group starts while M finished groups wait for the learner (admission; "
        "running groups still finish, so the pool holds up to N + M - 1)",
        in_range(1, 1e6));
  o.add("pool.window", &m.pool_window, "W: groups visible to the learner past the head (windowed)",
        in_range(1, 1e6));
  o.add("pool.episode_deadline_s", &m.episode_deadline_s,
        "an episode still running this long after its group started is abandoned (recorded, not trained on)",
        in_range(0.1, 1e7));
  o.add("pool.staleness_cap", &m.staleness_cap, "drop or mask groups staler than this; < 0: no cap");
  o.add("pool.cap_action", &m.cap_action, "what the cap does: drop | mask", one_of({"drop", "mask"}));
  o.add("pool.slot_mib", &m.slot_mib, "payload capacity of one slot (one group), MiB", in_range(1, 1024));
}

void add_gateway_options(OptionSet& o, GatewayConfig& g) {
  o.describe_section("gateway", "the HTTP gateway for black-box agents (docs/gateway.md)");
  o.add("gateway.enabled", &g.enabled,
        "environment ranks serve black-box agents over HTTP instead of running forge's scaffold");
  o.add("gateway.bind", &g.bind, "address to listen on (loopback by default)");
  o.add("gateway.port", &g.port, "port of the first gateway rank (rank k: port + k); 0: any free port",
        in_range(0, 65535));
  o.add("gateway.token", &g.token,
        "bearer token for the gateway endpoints; empty: FORGE_GATEWAY_TOKEN (never stored with the run)");
  o.secret("gateway.token");
  o.add_check([&g] {  // the variable FORGE_GATEWAY_TOKEN is checked where it is read
    if (g.enabled && !g.token.empty()) check_gateway_token(g.token, "gateway.token");
  });
  o.add("gateway.http_threads", &g.http_threads, "requests served at once per gateway rank", in_range(1, 4096));
  o.add("gateway.max_request_kib", &g.max_request_kib, "largest request body (KiB); larger gets 413",
        in_range(1, 1 << 20));
  o.add("gateway.client_io_s", &g.client_io_s,
        "seconds a connection has, in all, to send its request and take its reply (a client trickling bytes is "
        "cut then; time spent generating does not count)",
        in_range(0.1, 3600));
  o.add("gateway.request_deadline_s", &g.request_deadline_s,
        "a request waiting on generation longer gets 504", in_range(0.1, 1e6));
  o.add("gateway.idle_deadline_s", &g.idle_deadline_s,
        "an open episode idle longer is closed as abandoned (not trained on)", in_range(0.1, 1e6));
  o.add("gateway.open_deadline_s", &g.open_deadline_s,
        "opening an episode waits this long for the data pool to admit one, then 503", in_range(0, 1e6));
  o.add("gateway.agent_wait_s", &g.agent_wait_s,
        "the learner waits this long for agents to close a group before giving up", in_range(1, 1e7));
}

}  // namespace

void check_mpi_deadlines(const MpiConfig& m) {
  // A training step holds the learners' watched waits (mpi.deadline_s),
  // which name a stuck other learner: the lead's own stage must outlast them.
  if (m.progress_deadline_s <= m.deadline_s)
    throw InputError("mpi.progress_deadline_s = " + format_number(m.progress_deadline_s) +
                     " must exceed mpi.deadline_s = " + format_number(m.deadline_s) +
                     " (a stage of learner 0's step holds waits of mpi.deadline_s on the other learners)");
}

void add_standard_options(OptionSet& opts, StandardConfig& c) {
  add_model_options(opts, c.model);
  add_optim_options(opts, c.optim);
  add_sampling_options(opts, c.sample);
  add_run_options(opts, c.run);
}

void add_forge_options(OptionSet& opts, ForgeConfig& c) {
  add_standard_options(opts, c.base);
  add_sft_options(opts, c.sft);
  add_env_options(opts, c.env);
  add_agent_options(opts, c.agent);
  add_loss_options(opts, c.update.loss, c.update.reward);
  add_train_options(opts, c.train);
  add_mpi_options(opts, c.mpi);
  add_gateway_options(opts, c.gateway);
}

void warn_turns_below_largest_task(const EnvConfig& env, const AgentConfig& agent) {
  if (const auto [need, what] = env.most_tool_calls_needed(); agent.max_turns < need + 1)
    log_warn("agent.max_turns = " + std::to_string(agent.max_turns) + " is below the " + std::to_string(need + 1) +
             " calls the largest task needs (" + what + ", then the answer): those tasks cannot succeed; raise " +
             "agent.max_turns or lower the task sizes");
}

void log_model_keys_unread(const ModelConfig& given, const std::string& model_path, const ModelConfig& loaded) {
  if (!given.pretrained.empty() && given.pretrained != model_path && given.pretrained != loaded.pretrained)
    log_info("model.pretrained = '" + given.pretrained + "' is not read: the model is " + model_path +
             " (its own [model] keys)");
  // Shape keys set away from their defaults and from the model's own.
  ModelConfig defaults;
  defaults.vocab = given.vocab;
  std::set<std::string> set;
  for (const ModelFieldDifference& d : model_field_differences(given, defaults)) set.insert(d.key);
  std::string unread;
  for (const ModelFieldDifference& d : model_field_differences(given, loaded))
    if (set.count(d.key))
      unread += (unread.empty() ? "" : ", ") + d.key + " " + d.here + " against " + d.there;
  if (!unread.empty())
    log_info("[model] keys given are not read: the model is " + model_path + ", with its own (" + unread + ")");
}

}  // namespace forge
