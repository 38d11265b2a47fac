#include "agent/opening_fit.hpp"

#include <algorithm>
#include <string>

#include "agent/agent_episode.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "env/env_mix.hpp"

namespace forge {

OpeningFit opening_fit(const EnvConfig& env, const AgentConfig& agent, StyleMode mode, int sample) {
  const EnvMix mix(env);
  const PerturbationSampler sampler = env.perturbation_sampler();
  OpeningFit fit;
  for (int k = 0; k < sample; ++k) {
    const AgentEpisode e = make_episode(mix, sampler, agent, static_cast<uint64_t>(k), static_cast<uint64_t>(k), mode);
    const size_t n = e.context().size();
    fit.longest = std::max(fit.longest, n);
    fit.shortest = fit.sampled == 0 ? n : std::min(fit.shortest, n);
    ++fit.sampled;
    if (n > static_cast<size_t>(agent.max_context_tokens)) ++fit.over;
  }
  return fit;
}

void check_openings_fit(const EnvConfig& env, const AgentConfig& agent) {
  for (const StyleMode mode : {StyleMode::kTrain, StyleMode::kHeldOut}) {
    if (mode == StyleMode::kHeldOut && !env.perturbation_sampler().has_heldout()) continue;
    const OpeningFit fit = opening_fit(env, agent, mode);
    if (fit.over == 0) continue;
    const std::string what =
        "agent.max_context_tokens = " + std::to_string(agent.max_context_tokens) +
        " is below the task opening (system and user messages) of " + std::to_string(fit.over) + " of " +
        std::to_string(fit.sampled) + " sampled episodes in " +
        (mode == StyleMode::kTrain ? "the trained styles" : "the held-out template families (the evaluation's)") +
        " (openings of " + std::to_string(fit.shortest) + " to " + std::to_string(fit.longest) + " tokens)";
    if (fit.over == fit.sampled)
      throw InputError(what + ": every such episode would be abandoned before its first call; raise it to at least " +
                       std::to_string(fit.longest) + " plus room for the turns");
    log_warn(what + ": those episodes are abandoned before their first call (context_budget); raise it to at "
             "least " + std::to_string(fit.longest));
  }
}

}  // namespace forge
