#include "agent/run_episodes.hpp"

#include "agent/episode_actions.hpp"
#include "core/error.hpp"

namespace forge {

DriverStats run_episodes(RolloutEngine& engine, std::vector<AgentEpisode>& episodes,
                         const volatile std::sig_atomic_t* stop,
                         const std::function<void(size_t done)>& after_step) {
  FORGE_CHECK(engine.idle(), "run_episodes needs an idle engine (its results would be misrouted)");
  const int max_seq = engine.config().max_seq_len;
  for (const auto& ep : episodes)
    if (ep.config().max_context_tokens + ep.config().max_new_tokens > max_seq)
      throw InputError("agent.max_context_tokens + agent.max_new_tokens = " +
                       std::to_string(ep.config().max_context_tokens + ep.config().max_new_tokens) +
                       " exceeds the engine's max_seq_len = " + std::to_string(max_seq));
  DriverStats stats;
  size_t in_flight = 0, done = 0;
  for (const auto& ep : episodes) done += ep.done();
  while (true) {
    if (stop && *stop) {
      stats.stopped = true;
      break;
    }
    for (size_t i = 0; i < episodes.size(); ++i)
      if (auto request = episodes[i].next_request()) {
        request->id = i;
        engine.submit(std::move(*request));
        ++in_flight;
        ++stats.requests;
      }
    if (in_flight == 0) break;
    // One step's results are delivered at once (slow tools on threads) and
    // all are in before the next step, so the engine's batches, and with
    // them every episode, are the same on every run.
    EpisodeActions actions;
    std::vector<size_t> delivered;
    for (GenerationResult& r : engine.step()) {
      FORGE_CHECK(r.id < episodes.size(), "engine returned an unknown request id");
      delivered.push_back(r.id);
      actions.deliver(episodes[r.id], std::move(r));
      --in_flight;
    }
    actions.wait_all();
    ++stats.engine_steps;
    for (size_t i : delivered) done += episodes[i].done();
    if (after_step) after_step(done);
  }
  return stats;
}

}  // namespace forge
