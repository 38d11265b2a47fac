// Whether the task openings fit the context budget, checked before a run.
//
// An episode whose opening (system and user messages in its scaffold style)
// is over agent.max_context_tokens ends at once, abandoned: it made no call
// and is never trained on. A budget below every opening would run a whole
// training on nothing. `sample` tasks of the run's domain mix (seeds
// 0..sample-1, one episode each, styles drawn as in `mode`) are built and
// their openings measured.
#pragma once
#include <cstddef>

#include "agent/agent_config.hpp"
#include "env/env_config.hpp"
#include "env/perturbation.hpp"

namespace forge {

struct OpeningFit {
  int sampled = 0;
  int over = 0;              // openings over agent.max_context_tokens
  size_t longest = 0;        // tokens of the longest opening sampled
  size_t shortest = 0;       // and of the shortest
};

OpeningFit opening_fit(const EnvConfig& env, const AgentConfig& agent, StyleMode mode, int sample = 64);

// For the styles a run trains in and, where the run holds template families
// out, those its evaluation uses: InputError naming agent.max_context_tokens
// when no sampled opening fits; a warning with the share when some do not.
void check_openings_fit(const EnvConfig& env, const AgentConfig& agent);

}  // namespace forge
