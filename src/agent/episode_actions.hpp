// Generation results delivered to their episodes without holding up the
// others. AgentEpisode::on_generation runs the episode's tool call; a domain
// whose tools run programs (Environment::slow_tools(): code, whose tests and
// shell run in the sandbox) takes milliseconds to seconds per call, and one
// rank plays many episodes at once. Such a delivery runs on a thread of its
// own (the process's sandbox pool bounds the programs running at once);
// every other delivery runs inline, as before.
//
//   actions.deliver(ep, result);   // inline, or on a thread (ep is busy)
//   if (actions.busy(ep)) ...      // do not touch ep: no next_request,
//                                  // done, abandon or take_trajectory
//   actions.reap();                // ends finished deliveries, rethrows
//   actions.wait_all();            // ends every delivery
//
// Episodes are independent (each owns its environment), so deliveries to
// different episodes may run at once; one episode has at most one. The
// destructor waits for deliveries still running (the sandbox's wall
// deadline bounds them).
#pragma once
#include <cstddef>
#include <future>
#include <map>

#include "agent/agent_episode.hpp"

namespace forge {

class EpisodeActions {
 public:
  EpisodeActions() = default;
  EpisodeActions(const EpisodeActions&) = delete;
  EpisodeActions& operator=(const EpisodeActions&) = delete;
  ~EpisodeActions();

  void deliver(AgentEpisode& episode, GenerationResult result);
  bool busy(const AgentEpisode& episode) const { return running_.count(&episode) > 0; }
  size_t in_flight() const { return running_.size(); }
  // Ends the deliveries that have finished and returns how many; the first
  // error one of them threw is rethrown (after all finished ones are ended).
  size_t reap();
  void wait_all();

 private:
  std::map<const AgentEpisode*, std::future<void>> running_;
};

}  // namespace forge
