// The driver of concurrent episodes against one batched engine: submit every
// episode's pending request, step the engine, route each result back to its
// episode by request id (the episode's index), until every episode is done.
// The results of one engine step reach their episodes at once: tool calls
// that run programs (the code domain's) run side by side
// (episode_actions.hpp), and all are in before the next step.
// The engine must be idle at the start and is idle at the end.
//
// Throws InputError when an episode's context budget plus its per-call
// generation does not fit the engine's max_seq_len (agent.max_context_tokens
// + agent.max_new_tokens must be <= engine max_seq_len).
#pragma once
#include <csignal>
#include <functional>
#include <vector>

#include "agent/agent_episode.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

struct DriverStats {
  int64_t requests = 0;       // generations run
  int64_t engine_steps = 0;
  bool stopped = false;       // `stop` was set: the episodes are not finished
};

// `stop` (a SIGTERM flag), when given and set, ends the run between engine
// steps with the episodes unfinished; the engine then holds their requests.
// `after_step`, when given, is called after each engine step with the number
// of episodes done so far (for progress lines).
DriverStats run_episodes(RolloutEngine& engine, std::vector<AgentEpisode>& episodes,
                         const volatile std::sig_atomic_t* stop = nullptr,
                         const std::function<void(size_t done)>& after_step = {});

}  // namespace forge
