#include "algo/policy_update.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "algo/advantages.hpp"
#include "algo/token_loss.hpp"
#include "core/error.hpp"
#include "tree/packed_batch.hpp"
#include "tree/prefix_tree.hpp"

namespace forge {
namespace {

// engine_mismatch, stale_drift and drift_by_staleness (policy_update.hpp)
// from the filled logprobs; tokens without a version are left out. A token's
// version here is its call's first one: the rollout engine may take new
// weights between steps (within a chunked prefill, or between decodes), and
// a token decoded under version v still attends to keys and values computed
// under the call's earlier versions, so only a call run wholly on the
// learner's weights measures the numerical mismatch.
void split_mismatch(const PackedPolicyTokens& tokens, const std::vector<int32_t>& token_version,
                    const PolicyUpdateConfig& config, PolicyUpdateStats* st) {
  double v[2 * kDriftBuckets] = {};  // sums of |delta|, then token counts
  for (size_t j = 0; j < token_version.size(); ++j) {
    if (token_version[j] < 0) continue;
    const int64_t s = std::max<int64_t>(0, config.policy_version - token_version[j]);
    const int b = static_cast<int>(std::min<int64_t>(s, kDriftBuckets - 1));
    v[b] += std::fabs(static_cast<double>(tokens.logprob[j]) - tokens.behaviour_logprob[j]);
    v[kDriftBuckets + b] += 1;
  }
  if (config.sum_across_shards) config.sum_across_shards(v, 2 * kDriftBuckets);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double stale_sum = 0, stale_n = 0;
  for (int b = 0; b < kDriftBuckets; ++b) {
    const double n = v[kDriftBuckets + b];
    st->tokens_by_staleness[b] = static_cast<int64_t>(n);
    st->drift_by_staleness[b] = n > 0 ? v[b] / n : nan;
    if (b > 0) stale_sum += v[b], stale_n += n;
  }
  st->engine_mismatch = st->drift_by_staleness[0];
  st->stale_drift = stale_n > 0 ? stale_sum / stale_n : nan;
}

}  // namespace

PolicyUpdateStats policy_forward_backward(PolicyModel& model, const std::vector<Trajectory>& episodes,
                                          const PolicyUpdateConfig& config) {
  FORGE_CHECK(config.shards <= 1 || config.sum_across_shards,
              "policy_forward_backward: several shards need sum_across_shards (their denominators are global)");
  PolicyUpdateStats st;
  st.episodes = static_cast<int>(episodes.size());
  if (episodes.empty()) return st;

  // Abandoned episodes (engine error, agent gone, idle past its deadline)
  // are left out of rewards, advantages and the batch.
  std::vector<int> kept_index(episodes.size(), -1);
  std::vector<const Trajectory*> kept;
  for (size_t i = 0; i < episodes.size(); ++i) {
    if (episodes[i].abandoned) {
      ++st.abandoned;
      continue;
    }
    kept_index[i] = static_cast<int>(kept.size());
    kept.push_back(&episodes[i]);
  }
  if (kept.empty()) return st;
  std::vector<RewardComponents> comps;
  std::vector<int32_t> groups;
  for (const Trajectory* tp : kept) {
    const Trajectory& t = *tp;
    // One non-finite component would make its group's (or, normalized over
    // the batch, every) advantage NaN and end the run at AdamW's norm check
    // naming no episode.
    const RewardComponents& r = t.reward;
    if (!std::isfinite(r.outcome) || !std::isfinite(r.process) || !std::isfinite(r.efficiency) ||
        !std::isfinite(r.safety))
      throw Error("episode " + std::to_string(t.episode_id) + " (group " + std::to_string(t.group) + ", " + t.env +
                  ") has a reward component that is not finite: outcome " + std::to_string(r.outcome) + ", process " +
                  std::to_string(r.process) + ", efficiency " + std::to_string(r.efficiency) + ", safety " +
                  std::to_string(r.safety));
    comps.push_back(t.reward);
    groups.push_back(t.group);
    st.component_mean.outcome += t.reward.outcome;
    st.component_mean.process += t.reward.process;
    st.component_mean.efficiency += t.reward.efficiency;
    st.component_mean.safety += t.reward.safety;
    st.success_rate += t.success;
  }
  const double n = static_cast<double>(kept.size());
  st.component_mean.outcome = static_cast<float>(st.component_mean.outcome / n);
  st.component_mean.process = static_cast<float>(st.component_mean.process / n);
  st.component_mean.efficiency = static_cast<float>(st.component_mean.efficiency / n);
  st.component_mean.safety = static_cast<float>(st.component_mean.safety / n);
  st.success_rate /= n;
  const std::vector<float> reward = composite_rewards(config.reward, comps);
  for (size_t i = 0; i < reward.size(); ++i)  // finite components, weights near FLT_MAX
    if (!std::isfinite(reward[i]))
      throw Error("episode " + std::to_string(kept[i]->episode_id) + " (group " + std::to_string(kept[i]->group) +
                  ", " + kept[i]->env + "): its composite reward is not finite (" + std::to_string(reward[i]) +
                  "); reward.outcome_weight " + std::to_string(config.reward.outcome_weight) + ", process_weight " +
                  std::to_string(config.reward.process_weight) + ", efficiency_weight " +
                  std::to_string(config.reward.efficiency_weight) + ", safety_weight " +
                  std::to_string(config.reward.safety_weight) + " are too large");
  for (float r : reward) st.reward_mean += r / n;
  const AdvantageResult adv = group_advantages(reward, groups, config.loss.adv_std_norm);
  st.groups = adv.groups;
  st.zero_variance_groups = adv.zero_variance_groups;

  // Samples: every call of a kept episode outside zero-variance groups.
  std::vector<Sample> samples;
  PackedPolicyTokens tokens;  // advantage, behaviour logprobs, current logprobs (filled in pass 1)
  std::vector<int32_t> context_len;
  std::vector<int32_t> token_version;  // per generated token, as tokens.logprob
  // Which episodes' samples this shard holds, as a count and a sum of a
  // 24-bit hash of the episode's index and id per sample (exact in a
  // double): the shards' sums must give the batch's (each sample on one
  // learner, every learner with the same batch).
  const auto tag = [&](size_t i) {
    return static_cast<double>(((episodes[i].episode_id * 0x100000001B3ull + i) * 0x9E3779B97F4A7C15ull) >> 40);
  };
  double batch_samples = 0, batch_tags = 0, shard_tags = 0;
  for (size_t i = 0; i < episodes.size(); ++i) {
    const int k = kept_index[i];
    if (k < 0 || adv.in_zero_variance_group[k]) continue;
    double calls = 0;
    for (const LlmCall& c : episodes[i].calls) calls += !c.generated.empty();
    batch_samples += calls;
    batch_tags += calls * tag(i);
    if (config.shards > 1 && static_cast<int>(i % config.shards) != config.shard) continue;
    shard_tags += calls * tag(i);
    for (const LlmCall& c : episodes[i].calls) {
      if (c.generated.empty()) continue;
      Sample s;
      s.tokens = c.context;
      s.tokens.insert(s.tokens.end(), c.generated.begin(), c.generated.end());
      s.trainable.assign(c.context.size(), 0);
      s.trainable.resize(s.tokens.size(), 1);
      if (c.context.empty()) throw Error("episode " + std::to_string(episodes[i].episode_id) + ": an LLM call without context");
      samples.push_back(std::move(s));
      SampleTokens t;
      t.advantage = adv.advantage[k];
      t.behaviour_logprob = c.logprobs;
      t.logprob.assign(c.generated.size(), 0.0f);
      tokens.add(t);
      // The call's first version (the engine stamps every token with the
      // oldest weights it depends on; see split_mismatch).
      const int32_t first = c.versions.size() == c.generated.size() ? c.versions.front() : -1;
      token_version.resize(token_version.size() + c.generated.size(), first);
      context_len.push_back(static_cast<int32_t>(c.context.size()));
    }
  }
  st.samples = static_cast<int>(samples.size());
  if (samples.empty() && config.shards <= 1) return st;
  st.linear_tokens = linear_token_count(samples);
  const std::vector<PackedBin> bins = pack_forest(build_prefix_forest(samples, config.merge), config.max_tokens);

  // Pass 1: current logprobs of every generated token. The bins go last to
  // first, so that the model still holds bin 0's activations when pass 2
  // starts with it: one forward pass fewer per step (the forward is
  // deterministic, so reusing it equals recomputing it).
  BinForward fwd;
  double entropy_sum = 0;
  int64_t entropy_rows = 0;
  for (auto it = bins.rbegin(); it != bins.rend(); ++it) {
    const PackedBin& bin = *it;
    st.tree_tokens += bin.tokens();
    model.forward(bin, config.inv_temperature, &fwd);
    for (int32_t e = 0; e < bin.entries(); ++e)
      for (int32_t r = bin.ref_begin[e]; r < bin.ref_begin[e + 1]; ++r) {
        const SampleRef ref = bin.refs[r];
        tokens.logprob[tokens.sample_begin[ref.sample] + ref.position - context_len[ref.sample]] = fwd.logprob[e];
      }
    // A merged row stands for every (sample, token) that references its
    // entries: weighted so, the mean is the linear batch's.
    for (int32_t r = 0; r < bin.rows(); ++r) {
      const int64_t refs = bin.ref_begin[bin.row_begin[r + 1]] - bin.ref_begin[bin.row_begin[r]];
      entropy_sum += double(fwd.entropy[r]) * refs;
      entropy_rows += refs;
    }
  }
  if (config.sum_across_shards) {
    double v[4] = {entropy_sum, double(entropy_rows), double(st.linear_tokens), double(st.tree_tokens)};
    double n[2] = {double(st.samples), shard_tags};
    config.sum_across_shards(v, 4);
    config.sum_across_shards(n, 2);
    entropy_sum = v[0], entropy_rows = int64_t(v[1]), st.linear_tokens = int64_t(v[2]);
    st.tree_tokens = int64_t(v[3]), st.samples = int(n[0]);
    FORGE_CHECK(n[0] == batch_samples && n[1] == batch_tags,
                "the learners' shards hold " + std::to_string(st.samples) + " samples of the batch's " +
                    std::to_string(int64_t(batch_samples)) +
                    (n[0] == batch_samples ? " but not each once" : "") +
                    " (each learner needs its own shard of shards)");
  }
  st.entropy_mean = entropy_rows ? entropy_sum / entropy_rows : std::nan("");
  split_mismatch(tokens, token_version, config, &st);
  const std::vector<float> w =
      policy_coefficients(model.backend(), config.loss, tokens, &st.loss, config.sum_across_shards);

  // Pass 2: L = -sum_e (sum_refs w) logprob_e.
  for (size_t b = 0; b < bins.size(); ++b) {
    const PackedBin& bin = bins[b];
    const auto ew = entry_weights(bin, [&](const SampleRef& ref) {
      return w[tokens.sample_begin[ref.sample] + ref.position - context_len[ref.sample]];
    });
    if (b > 0) model.forward(bin, config.inv_temperature, &fwd);  // bin 0's is still held from pass 1
    std::vector<float> dl(ew.size());
    for (size_t e = 0; e < ew.size(); ++e) dl[e] = -ew[e];
    model.backward(dl);
  }
  return st;
}

}  // namespace forge
