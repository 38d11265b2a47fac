#include "agent/episode_actions.hpp"

#include <chrono>
#include <exception>

#include "core/error.hpp"

namespace forge {

EpisodeActions::~EpisodeActions() {
  for (auto& [episode, done] : running_) done.wait();
}

void EpisodeActions::deliver(AgentEpisode& episode, GenerationResult result) {
  FORGE_CHECK(!busy(episode), "EpisodeActions::deliver to an episode whose last delivery still runs");
  if (!episode.env().slow_tools()) {
    episode.on_generation(result);
    return;
  }
  running_.emplace(&episode, std::async(std::launch::async, [&episode, r = std::move(result)] {
                     episode.on_generation(r);
                   }));
}

size_t EpisodeActions::reap() {
  size_t ended = 0;
  std::exception_ptr error;
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++it;
      continue;
    }
    try {
      it->second.get();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    it = running_.erase(it);
    ++ended;
  }
  if (error) std::rethrow_exception(error);
  return ended;
}

void EpisodeActions::wait_all() {
  for (auto& [episode, done] : running_) done.wait();
  reap();
}

}  // namespace forge
