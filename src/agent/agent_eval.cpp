#include "agent/agent_eval.hpp"

#include <cstdio>
#include <vector>

#include "agent/agent_episode.hpp"
#include "agent/run_episodes.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "core/strings.hpp"
#include "core/timer.hpp"
#include "env/process_signals.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

EngineConfig engine_for_agent(const AgentConfig& agent, int episodes) {
  EngineConfig ec;
  ec.max_batch = std::max(1, std::min(episodes, 256));
  ec.max_seq_len = agent.max_context_tokens + agent.max_new_tokens;
  ec.kv_cache_tokens = static_cast<int64_t>(ec.max_batch) * ec.max_seq_len * 2;
  return ec;
}

AgentEval evaluate_agent(PolicyModel& model, const EnvConfig& env, const AgentConfig& agent,
                         int tasks, uint64_t seed, StyleMode mode, const volatile std::sig_atomic_t* stop,
                         bool* stopped, const std::function<void()>& each_step) {
  AgentConfig greedy = agent;
  greedy.sampling.temperature = 0;
  const EnvMix mix(env);
  const PerturbationSampler sampler = env.perturbation_sampler();
  std::vector<AgentEpisode> episodes;
  for (int i = 0; i < tasks; ++i)
    episodes.push_back(make_episode(mix, sampler, greedy, seed + static_cast<uint64_t>(i) * 7919,
                                    static_cast<uint64_t>(i), mode, i));
  RolloutEngine engine(model, engine_for_agent(greedy, tasks));
  // A progress line every 30 s: a real model's evaluation takes minutes.
  const Stopwatch sw;
  double report_at = 30;
  const auto progress = [&](size_t done) {
    if (each_step) each_step();
    if (sw.seconds() < report_at) return;
    report_at = sw.seconds() + 30;
    char line[128];
    std::snprintf(line, sizeof line, "eval: %zu of %d episodes done (%.0f s)", done, tasks, sw.seconds());
    log_info(line);
  };
  const DriverStats run = run_episodes(engine, episodes, stop, progress);
  if (stopped) *stopped = run.stopped;
  if (run.stopped) return {};
  std::vector<Trajectory> done;
  for (auto& ep : episodes) done.push_back(ep.take_trajectory());
  return summarize_episodes(done);
}

AgentEval summarize_episodes(const std::vector<Trajectory>& episodes) {
  AgentEval out;
  for (const Trajectory& t : episodes) {
    const std::optional<FailureMode> failure = classify_failure(t);
    for (DomainEval* d : {&out.all, &out.by_domain[t.env]}) {
      d->episodes++;
      d->success += t.success;
      d->outcome += t.reward.outcome;
      d->process += t.reward.process;
      d->efficiency += t.reward.efficiency;
      d->turns += t.turns;
      d->safety_events += t.safety_events;
      d->test_runs += t.test_runs;
      for (const ProcessSignal& sig : t.signals) d->malformed += sig.kind == signal::kMalformedCall;
      if (failure) d->failures[static_cast<int>(*failure)] += 1;
      DomainEval::ByLength& len = d->by_needed_calls[t.needed_calls()];
      len.episodes++;
      len.success += t.success;
      if (t.tool_errors > 0) {
        d->with_error++;
        d->recovered += t.recoveries > 0;
        d->success_after_error += t.success;
      }
    }
  }
  auto finish = [](DomainEval& d) {
    if (!d.episodes) return;
    d.success /= d.episodes;
    d.outcome /= d.episodes;
    d.process /= d.episodes;
    d.efficiency /= d.episodes;
    d.turns /= d.episodes;
    d.malformed /= d.episodes;
    d.safety_events /= d.episodes;
    d.test_runs /= d.episodes;
    for (double& f : d.failures) f /= d.episodes;
    for (auto& [calls, len] : d.by_needed_calls) len.success /= len.episodes;
    d.met_error = static_cast<double>(d.with_error) / d.episodes;
    if (d.with_error) {
      d.recovered /= d.with_error;
      d.success_after_error /= d.with_error;
    }
  };
  finish(out.all);
  for (auto& [name, d] : out.by_domain) finish(d);
  return out;
}

StyleEvals evaluate_styles(PolicyModel& model, const EnvConfig& env, const AgentConfig& agent,
                           int tasks, uint64_t run_seed, const volatile std::sig_atomic_t* stop,
                           const std::function<void()>& each_step) {
  StyleEvals out;
  const uint64_t seed = eval_task_seed(run_seed);
  out.has_heldout = env.perturbation_sampler().has_heldout();
  // A progress line per style set: an evaluation of a real model takes minutes.
  const auto timed = [&](const char* what, StyleMode mode) {
    log_info("eval: " + std::to_string(tasks) + " tasks in " + what + "...");
    const Stopwatch sw;
    bool stopped = false;
    AgentEval e = evaluate_agent(model, env, agent, tasks, seed, mode, stop, &stopped, each_step);
    if (stopped) {
      out.stopped = true;
      log_warn(std::string("eval: ") + what + " cut short by " + stop_signal_name() + " after " + std::to_string(sw.seconds()) + " s");
      return e;
    }
    char line[96];
    std::snprintf(line, sizeof line, "eval: %s done in %.1f s, success %.1f%%", what, sw.seconds(),
                  100 * e.all.success);
    log_info(line);
    return e;
  };
  out.seen = timed("seen styles", StyleMode::kTrain);
  if (out.has_heldout && !out.stopped) out.heldout = timed("held-out template families", StyleMode::kHeldOut);
  return out;
}

std::string format_style_evals(const StyleEvals& e, const std::string& title) {
  std::string s = title + " (seen styles):\n" + format_eval(e.seen);
  if (e.has_heldout) s += title + " (held-out families):\n" + format_eval(e.heldout);
  return s;
}

namespace {
// A share of the episodes that met a tool error, as a percentage; "-"
// where none met one.
std::string after_error(const DomainEval& d, double share) {
  return d.with_error ? number_or_dash(100 * share, "%*.1f%%", 5) : std::string("    -");
}
}  // namespace

std::string format_eval(const AgentEval& e) {
  char buf[320];
  std::string s;
  auto line = [&](const std::string& name, const DomainEval& d) {
    std::snprintf(buf, sizeof buf,
                  "  %-8s %5d episodes  success %5.1f%%  outcome %.3f  process %+.3f  efficiency %+.3f  "
                  "turns %.2f  tool error in %4.1f%%: recovered %s, solved %s  tests %.2f/ep  unsafe %.2f/ep\n",
                  name.c_str(), d.episodes, 100 * d.success, d.outcome, d.process, d.efficiency, d.turns,
                  100 * d.met_error, after_error(d, d.recovered).c_str(), after_error(d, d.success_after_error).c_str(),
                  d.test_runs, d.safety_events);
    s += buf;
    const std::string under(10, ' ');  // below the domain's name column
    std::string why = under + " failed:";
    for (FailureMode m : kAllFailureModes) {
      std::snprintf(buf, sizeof buf, " %s %.1f%%", to_string(m), 100 * d.failures[static_cast<int>(m)]);
      why += buf;
    }
    std::string by_len = "\n" + under + " success by tool calls needed:";
    for (const auto& [calls, len] : d.by_needed_calls) {
      std::snprintf(buf, sizeof buf, " %d: %.1f%% (%d)", calls, 100 * len.success, len.episodes);
      by_len += buf;
    }
    s += why + by_len + "\n";
  };
  line("all", e.all);
  for (const auto& [name, d] : e.by_domain) line(name, d);
  return s;
}

}  // namespace forge
