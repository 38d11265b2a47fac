// `forge inspect FILE [--json]`: what a rollouts.h5 holds (episodes, calls,
// tokens, steps, domains) and how training went:
//   - reward components and success over time, overall and per domain, in
//     up to --buckets equal ranges of the consuming step (episodes/*),
//   - training metrics over the same ranges (steps/*): objective, reward,
//     clip and masked fractions, the engine/learner mismatch (tokens of
//     staleness 0: mean and the largest step's) and the drift of stale tokens
//     (mean, and per staleness over the whole run), KL, entropy, tree/linear
//     token ratio, tokens/s (a file of schema <= 2 has one mixed "mismatch"
//     instead, shown as such),
//   - length distributions (turns, generated tokens, final context length),
//   - the staleness histogram, and the store's share of the step time.
// Works on a file that is being written (SWMR read: it shows what the writer
// has flushed). --json prints the same figures as one JSON object.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>

#include "cli.hpp"
#include "core/error.hpp"
#include "core/strings.hpp"
#include "io_hdf5/rollout_reader.hpp"
#include "learner/run_folder.hpp"
#include "text_formats.hpp"

namespace forge {
namespace {

// Mean of the values added; NaN ones (a step without such tokens) are skipped.
struct Mean {
  double sum = 0, max = std::nan("");
  int64_t n = 0;
  void add(double v) {
    if (std::isnan(v)) return;
    sum += v, ++n;
    max = std::isnan(max) ? v : std::max(max, v);
  }
  double value() const { return n ? sum / n : std::nan(""); }
};

struct Rewards {
  int64_t episodes = 0;
  Mean outcome, process, efficiency, success, safety_events, test_runs;
  void add(const EpisodeTable& e, size_t i) {
    ++episodes;
    safety_events.add(e.safety_events[i]);
    test_runs.add(e.test_runs[i]);
    outcome.add(e.outcome[i]);
    process.add(e.process[i]);
    efficiency.add(e.efficiency[i]);
    success.add(e.success[i]);
  }
  std::string json() const {
    return "{\"episodes\": " + std::to_string(episodes) + ", \"outcome\": " + json_number(outcome.value()) +
           ", \"process\": " + json_number(process.value()) + ", \"efficiency\": " +
           json_number(efficiency.value()) + ", \"success\": " + json_number(success.value()) +
           ", \"safety_events\": " + json_number(safety_events.value()) +
           ", \"test_runs\": " + json_number(test_runs.value()) + "}";
  }
};

struct Training {
  int64_t steps = 0;
  Mean objective, reward, clip, masked, engine_mismatch, stale_drift, mixed_mismatch, kl, entropy, tree_ratio,
      tokens_per_s;
  // Token-weighted drift per staleness needs token counts the file does not
  // keep: this is the mean over steps of each bin's mean.
  std::array<Mean, rollout_schema::kStalenessBins> drift;
  double step_seconds = 0, store_seconds = 0;
  // The store's share of the step time; NaN where the steps were too short
  // to hold it (timed at 0.0 s, it read 117%).
  double store_share() const {
    return step_seconds > 0 && store_seconds <= step_seconds ? store_seconds / step_seconds : std::nan("");
  }
  void add(const StepMetrics& m) {
    ++steps;
    engine_mismatch.add(m.engine_mismatch);
    stale_drift.add(m.stale_drift);
    mixed_mismatch.add(m.mixed_mismatch);
    for (int b = 0; b < rollout_schema::kStalenessBins; ++b) drift[b].add(m.drift_by_staleness[b]);
    objective.add(m.objective);
    reward.add(m.reward_mean);
    clip.add(m.clip_fraction);
    masked.add(m.masked_fraction);
    kl.add(m.kl);
    entropy.add(m.entropy);
    tree_ratio.add(m.tree_token_ratio);
    tokens_per_s.add(m.tokens_per_s);
    step_seconds += m.step_seconds;
    store_seconds += m.store_seconds;
  }
  std::string json() const {
    std::string s = "{\"steps\": " + std::to_string(steps);
    for (auto [key, v] : {std::pair{"objective", &objective}, {"reward_mean", &reward}, {"clip_fraction", &clip},
                          {"masked_fraction", &masked}, {"engine_mismatch", &engine_mismatch},
                          {"stale_drift", &stale_drift}, {"kl", &kl}, {"entropy", &entropy},
                          {"tree_token_ratio", &tree_ratio}, {"tokens_per_s", &tokens_per_s}})
      s += std::string(", \"") + key + "\": " + json_number(v->value());
    s += ", \"engine_mismatch_max\": " + json_number(engine_mismatch.max);
    if (mixed_mismatch.n) s += ", \"mixed_mismatch\": " + json_number(mixed_mismatch.value());
    s += ", \"drift_by_staleness\": [";
    for (int b = 0; b < rollout_schema::kStalenessBins; ++b) s += (b ? ", " : "") + json_number(drift[b].value());
    return s + "]}";
  }
};

struct Bucket {
  int64_t first_step = 0, last_step = 0;
  Rewards all;
  std::map<std::string, Rewards> by_domain;
  Training training;
};

struct Quantiles {
  double mean = 0, p50 = 0, p90 = 0, max = 0;
  static Quantiles of(std::vector<double> v) {
    Quantiles q;
    if (v.empty()) return {std::nan(""), std::nan(""), std::nan(""), std::nan("")};
    std::sort(v.begin(), v.end());
    for (double x : v) q.mean += x;
    q.mean /= static_cast<double>(v.size());
    // Linear between the two nearest ranks (numpy's default): the lower one
    // alone gave a p90 of 1 for {1, 100}.
    const auto at = [&](double fraction) {
      const double pos = fraction * static_cast<double>(v.size() - 1);
      const size_t lo = static_cast<size_t>(pos);
      const double hi = v[std::min(lo + 1, v.size() - 1)];
      return v[lo] + (pos - static_cast<double>(lo)) * (hi - v[lo]);
    };
    q.p50 = at(0.5);
    q.p90 = at(0.9);
    q.max = v.back();
    return q;
  }
  std::string json() const {
    return "{\"mean\": " + json_number(mean) + ", \"p50\": " + json_number(p50) + ", \"p90\": " +
           json_number(p90) + ", \"max\": " + json_number(max) + "}";
  }
};

struct Summary {
  int64_t episodes = 0, calls = 0, tokens = 0, generated_tokens = 0, steps = 0;
  int64_t abandoned = 0;  // stored but not trained on (engine error, agent gone)
  std::map<std::string, int64_t> domain_episodes;
  Rewards all;
  std::map<std::string, Rewards> by_domain;
  Training training;
  std::vector<Bucket> buckets;
  Quantiles turns, generated, final_length;
  std::array<int64_t, rollout_schema::kStalenessBins> staleness{};
  int64_t no_generated = 0;  // episodes without generated tokens (no staleness)
};

Summary summarize(const RolloutReader& r, int n_buckets) {
  Summary s;
  const EpisodeTable e = r.episodes();
  const std::vector<StepMetrics> steps = r.steps();
  s.episodes = r.n_episodes();
  s.calls = r.n_calls();
  s.tokens = r.n_tokens();
  s.steps = r.n_steps();

  // Buckets: equal ranges of the step index over what the file holds.
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int32_t c : e.consumed_step) lo = std::min<int64_t>(lo, c), hi = std::max<int64_t>(hi, c);
  for (const auto& m : steps) lo = std::min(lo, m.step), hi = std::max(hi, m.step);
  if (lo <= hi) {
    const int64_t span = hi - lo + 1, nb = std::min<int64_t>(n_buckets, span);
    for (int64_t b = 0; b < nb; ++b) {
      Bucket k;
      k.first_step = lo + span * b / nb;
      k.last_step = lo + span * (b + 1) / nb - 1;
      s.buckets.push_back(k);
    }
  }
  // The bucket whose [first_step, last_step] holds `step`: the last b with
  // floor(span b / nb) <= step - lo, as the ranges above are cut.
  auto bucket_of = [&](int64_t step) -> Bucket& {
    const int64_t span = hi - lo + 1, nb = static_cast<int64_t>(s.buckets.size());
    return s.buckets[static_cast<size_t>(((step - lo + 1) * nb + span - 1) / span - 1)];
  };

  std::vector<double> turns, generated, final_length;
  for (size_t i = 0; i < e.size(); ++i) {
    const std::string& domain = r.domains()[e.env[i]];
    ++s.domain_episodes[domain];
    s.abandoned += e.abandoned[i];
    s.generated_tokens += e.generated_tokens[i];
    if (e.staleness[i] < 0) ++s.no_generated;
    else ++s.staleness[std::min(e.staleness[i], rollout_schema::kStalenessBins - 1)];
    // Rewards and lengths are the trained episodes', as the learner's
    // steps/success_rate is (an abandoned one was counted here).
    if (e.abandoned[i]) continue;
    s.all.add(e, i);
    s.by_domain[domain].add(e, i);
    Bucket& b = bucket_of(e.consumed_step[i]);
    b.all.add(e, i);
    b.by_domain[domain].add(e, i);
    turns.push_back(e.turns[i]);
    generated.push_back(static_cast<double>(e.generated_tokens[i]));
    final_length.push_back(static_cast<double>(e.final_length[i]));
  }
  for (const auto& m : steps) {
    s.training.add(m);
    bucket_of(m.step).training.add(m);
  }
  s.turns = Quantiles::of(turns);
  s.generated = Quantiles::of(generated);
  s.final_length = Quantiles::of(final_length);
  return s;
}

std::string json_of(const RolloutReader& r, const Summary& s) {
  std::string j = "{\"file\": " + json_string(r.path()) + ", \"schema_version\": " +
                  std::to_string(r.schema_version()) + ", \"episodes\": " + std::to_string(s.episodes) +
                  ", \"calls\": " + std::to_string(s.calls) + ", \"tokens\": " + std::to_string(s.tokens) +
                  ", \"generated_tokens\": " + std::to_string(s.generated_tokens) +
                  ", \"steps\": " + std::to_string(s.steps) + ", \"abandoned_episodes\": " +
                  std::to_string(s.abandoned) + ", \"domains\": {";
  bool first = true;
  for (const auto& [d, n] : s.domain_episodes)
    j += (first ? "" : ", ") + json_string(d) + ": " + std::to_string(n), first = false;
  j += "}, \"rewards\": " + s.all.json() + ", \"rewards_by_domain\": {";
  first = true;
  for (const auto& [d, rw] : s.by_domain) j += (first ? "" : ", ") + json_string(d) + ": " + rw.json(), first = false;
  j += "}, \"training\": " + s.training.json() + ", \"over_time\": [";
  for (size_t b = 0; b < s.buckets.size(); ++b) {
    const Bucket& k = s.buckets[b];
    j += (b ? ", " : "") + std::string("{\"first_step\": ") + std::to_string(k.first_step) +
         ", \"last_step\": " + std::to_string(k.last_step) + ", \"rewards\": " + k.all.json() +
         ", \"rewards_by_domain\": {";
    first = true;
    for (const auto& [d, rw] : k.by_domain) j += (first ? "" : ", ") + json_string(d) + ": " + rw.json(), first = false;
    j += "}, \"training\": " + k.training.json() + "}";
  }
  j += "], \"lengths\": {\"turns\": " + s.turns.json() + ", \"generated_tokens\": " + s.generated.json() +
       ", \"final_length\": " + s.final_length.json() + "}, \"staleness_histogram\": [";
  for (size_t i = 0; i < s.staleness.size(); ++i) j += (i ? ", " : "") + std::to_string(s.staleness[i]);
  j += "], \"episodes_without_generated_tokens\": " + std::to_string(s.no_generated) +
       ", \"store_overhead\": " + json_number(s.training.store_share()) + "}";
  return j;
}

void print_text(const RolloutReader& r, const Summary& s) {
  std::printf("%s: forge rollouts, schema %lld\n", r.path().c_str(), static_cast<long long>(r.schema_version()));
  std::printf("  %lld episodes, %lld LLM calls, %lld tokens (%lld generated), %lld training steps\n",
              static_cast<long long>(s.episodes), static_cast<long long>(s.calls), static_cast<long long>(s.tokens),
              static_cast<long long>(s.generated_tokens), static_cast<long long>(s.steps));
  if (s.abandoned > 0)
    std::printf("  %lld episodes abandoned (an opening over the context budget, an engine or verifier error, a "
                "deadline, a group over pool.slot_mib; gateway: the agent gone or idle): stored, not trained on\n",
                static_cast<long long>(s.abandoned));
  std::printf("  domains:");
  for (const auto& [d, n] : s.domain_episodes) std::printf(" %s (%lld)", d.c_str(), static_cast<long long>(n));
  std::printf("\n\n");
  if (s.episodes == 0 && s.steps == 0) return;

  std::printf("rewards over training (mean per trained episode, by consuming step, 0-based%s)\n",
              s.abandoned > 0 ? "; abandoned episodes left out" : "");
  std::printf("  %-13s %8s %8s %8s %10s %8s", "steps", "episodes", "outcome", "process", "efficiency", "success");
  for (const auto& [d, n] : s.domain_episodes) std::printf("  %10s", (d + ":succ").c_str());
  std::printf("\n");
  auto row = [&](const std::string& label, const Rewards& rw, const std::map<std::string, Rewards>& by) {
    std::printf("  %-13s %8lld %s %s %s %s", label.c_str(), static_cast<long long>(rw.episodes),
                number_or_dash(rw.outcome.value(), "%*.3f", 8).c_str(), number_or_dash(rw.process.value(), "%+*.3f", 8).c_str(),
                number_or_dash(rw.efficiency.value(), "%+*.3f", 10).c_str(), number_or_dash(rw.success.value(), "%*.3f", 8).c_str());
    for (const auto& [d, n] : s.domain_episodes) {
      const auto it = by.find(d);
      std::printf("  %s", number_or_dash(it == by.end() ? std::nan("") : it->second.success.value(), "%*.3f", 10).c_str());
    }
    std::printf("\n");
  };
  for (const auto& k : s.buckets)
    row(std::to_string(k.first_step) + "-" + std::to_string(k.last_step), k.all, k.by_domain);
  row("all", s.all, s.by_domain);
  std::printf("  by domain:");
  for (const auto& [d, rw] : s.by_domain)
    std::printf("  %s outcome %.3f process %+.3f efficiency %+.3f success %.3f safety events %.2f/episode test runs %.2f/episode;",
                d.c_str(), rw.outcome.value(), rw.process.value(), rw.efficiency.value(), rw.success.value(),
                rw.safety_events.value(), rw.test_runs.value());
  std::printf("\n\n");

  if (s.steps > 0) {
    const bool mixed = s.training.mixed_mismatch.n > 0;  // a schema <= 2 file
    std::printf("training (mean per step; steps 0-based)\n  %-13s %9s %9s %7s %7s %9s %9s %9s %8s %10s %9s\n", "steps", "objective",
                "reward", "clip", "masked", mixed ? "mismatch" : "eng/lrn", mixed ? "" : "drift", "kl", "entropy",
                "tree/lin", "tok/s");
    auto trow = [mixed](const std::string& label, const Training& t) {
      // A schema <= 2 file has no drift column: blank; no stale token: "-"
      // (as the progress line says it; it printed nan).
      // No staleness-0 token either: the mismatch column "-" too.
      const std::string drift = mixed ? std::string(9, ' ') : number_or_dash(t.stale_drift.value(), "%*.2e", 9);
      const std::string mismatch =
          number_or_dash(mixed ? t.mixed_mismatch.value() : t.engine_mismatch.value(), "%*.2e", 9);
      std::printf("  %-13s %s %s %s %s %s %s %s %s %s %s\n", label.c_str(), number_or_dash(t.objective.value(), "%+*.4f", 9).c_str(),
                  number_or_dash(t.reward.value(), "%+*.3f", 9).c_str(), number_or_dash(t.clip.value(), "%*.3f", 7).c_str(),
                  number_or_dash(t.masked.value(), "%*.3f", 7).c_str(), mismatch.c_str(), drift.c_str(),
                  number_or_dash(t.kl.value(), "%*.2e", 9).c_str(), number_or_dash(t.entropy.value(), "%*.3f", 8).c_str(),
                  number_or_dash(t.tree_ratio.value(), "%*.3f", 10).c_str(), number_or_dash(t.tokens_per_s.value(), "%*.0f", 9).c_str());
    };
    for (const auto& k : s.buckets)
      if (k.training.steps) trow(std::to_string(k.first_step) + "-" + std::to_string(k.last_step), k.training);
    trow("all", s.training);
    if (mixed)
      std::printf("  (schema <= 2: \"mismatch\" mixes the engine/learner mismatch with the drift of stale tokens)\n");
    else {
      if (std::isnan(s.training.engine_mismatch.max))
        std::printf("  engine/learner mismatch (staleness 0): - (no step had staleness-0 tokens); drift by staleness:");
      else
        std::printf("  engine/learner mismatch (staleness 0): largest step %.2e; drift by staleness:",
                    s.training.engine_mismatch.max);
      bool any = false;
      for (int b = 1; b < rollout_schema::kStalenessBins; ++b)
        if (s.training.drift[b].n) {
          std::printf(" %d: %.2e", b, s.training.drift[b].value());
          any = true;
        }
      std::printf("%s\n", any ? "" : " none (no stale tokens)");
    }
    if (const double share = s.training.store_share(); !std::isnan(share))
      std::printf("  rollout store: %.3f s of %.1f s step time (%.2f%%)\n", s.training.store_seconds,
                  s.training.step_seconds, 100 * share);
    else if (s.training.store_seconds > 0)
      std::printf("  rollout store: %.3f s (the steps' own time, %.3f s, is shorter)\n", s.training.store_seconds,
                  s.training.step_seconds);
    std::printf("\n");
  }

  std::printf("lengths per episode     mean      p50      p90      max%s\n",
              s.abandoned > 0 ? "  (trained episodes)" : "");
  for (auto [label, q] : {std::pair{"turns", &s.turns}, {"generated tokens", &s.generated},
                          {"final context", &s.final_length}})
    if (std::isnan(q->mean))  // every episode abandoned: no trained one
      std::printf("  %-18s %8s %8s %8s %8s\n", label, "-", "-", "-", "-");
    else
      std::printf("  %-18s %8.1f %8.0f %8.0f %8.0f\n", label, q->mean, q->p50, q->p90, q->max);
  std::printf("\nstaleness (learner version - oldest token version), episodes\n ");
  for (int k = 0; k < rollout_schema::kStalenessBins; ++k)
    if (s.staleness[k] || k == 0)
      std::printf(" %s%d: %lld", k == rollout_schema::kStalenessBins - 1 ? ">=" : "", k,
                  static_cast<long long>(s.staleness[k]));
  if (s.no_generated) std::printf("  (no generated tokens: %lld)", static_cast<long long>(s.no_generated));
  std::printf("\n");
}

int run_inspect(int argc, char** argv) {
  std::string file;
  bool json = false;
  int buckets = 10;
  OptionSet opts("forge inspect",
                 "Summarize a rollouts.h5 (RUN_DIR/rollouts.h5), also while it is being written:\n"
                 "contents, rewards and success over training by domain, training metrics,\n"
                 "lengths, staleness.");
  opts.add_positional("FILE", &file, "the rollouts.h5 file, or a run folder holding one");
  opts.add("json", &json, "print one JSON object instead of tables");
  opts.add("buckets", &buckets, "ranges of steps for the over-time tables", in_range(1, 1000));
  opts.allow_config_file(false);
  if (!cli::parse_options(opts, argc, argv)) return 0;
  const RolloutReader reader(resolve_rollouts(file));
  const Summary s = summarize(reader, buckets);
  if (json) std::printf("%s\n", json_of(reader, s).c_str());
  else print_text(reader, s);
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("inspect", "summarize a rollouts.h5 file (also while it is being written)", forge::run_inspect);
