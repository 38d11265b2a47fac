#include "mpi_roles/environment_rank.hpp"

#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "agent/agent_episode.hpp"
#include "agent/episode_actions.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "env/code_env.hpp"
#include "episode/trajectory_codec.hpp"
#include "mpi_roles/producer_slots.hpp"

namespace forge {
namespace {

struct SlotGroup {
  uint64_t slot = 0;
  int32_t min_version = 0;  // every request's (producer_slots.hpp)
  Stopwatch since_start;
  std::vector<AgentEpisode> episodes;
};

}  // namespace

uint64_t slot_task_seed(uint64_t run_seed, uint64_t slot) {
  uint64_t x = run_seed ^ 0x7A5C5EEDull;
  splitmix64(x);
  x ^= slot * 0x9E3779B97F4A7C15ull;
  return splitmix64(x);
}

EnvironmentRankStats run_environment_rank(const RoleLayout& layout, DataPool& pool,
                                          WeightChannel& control, GenerationClient& client,
                                          const EnvironmentRankConfig& cfg) {
  const EnvMix mix(cfg.env);
  const PerturbationSampler sampler = cfg.env.perturbation_sampler();
  const int first_rollout = layout.first(Role::kRollout);
  const int rollouts = layout.count(Role::kRollout);
  const auto describe = [&](int rank) { return layout.name(rank); };
  EnvironmentRankStats stats;
  ProducerSlots slots(pool, cfg.groups_in_flight);
  std::vector<std::unique_ptr<SlotGroup>> active;  // admitted groups being played
  // Episode id -> (group, episode index) for results in flight.
  std::map<uint64_t, std::pair<SlotGroup*, size_t>> waiting;
  std::set<uint64_t> discard;  // ids of abandoned episodes whose generation is still in flight
  // Tool calls that run programs (code) run on threads, so that the rank's
  // other episodes go on generating meanwhile; a busy episode is left alone.
  EpisodeActions actions;
  // However the loop ends (the stop word, an error), queued sandbox runs are
  // refused before `actions` waits for the tool calls still running: they
  // end within one run's wall deadline, not a queue's, and this rank meets
  // the others (or aborts the job) in time.
  struct RefuseQueuedRuns {
    ~RefuseQueuedRuns() { stop_queueing_sandbox_runs("the environment rank is stopping"); }
  } refuse_queued_runs;

  await_first_weights(control, cfg.startup_s);
  while (control.stop_code() == 0) {
    bool progressed = false;
    for (const auto [slot, min_version] : slots.admit()) {
      auto g = std::make_unique<SlotGroup>();
      g->slot = slot;
      g->min_version = min_version;
      const uint64_t task_seed = slot_task_seed(cfg.run_seed, slot);
      for (int e = 0; e < cfg.group; ++e)
        g->episodes.push_back(make_episode(mix, sampler, cfg.agent, task_seed, slot_episode_id(slot, cfg.group, e),
                                           StyleMode::kTrain, static_cast<int32_t>(slot)));
      active.push_back(std::move(g));
      progressed = true;
    }
    // Requests of every episode that has none in flight.
    for (auto& g : active) {
      for (size_t i = 0; i < g->episodes.size(); ++i) {
        if (actions.busy(g->episodes[i])) continue;
        auto request = g->episodes[i].next_request();
        if (!request) continue;
        const uint64_t id = slot_episode_id(g->slot, cfg.group, static_cast<int>(i));
        request->id = id;
        request->min_version = g->min_version;
        client.send(first_rollout + static_cast<int>(id % rollouts), *request);
        waiting[id] = {g.get(), i};
        ++stats.requests;
        progressed = true;
      }
    }
    for (GenerationResult& r : client.poll(describe)) {
      if (discard.erase(r.id)) continue;
      const auto it = waiting.find(r.id);
      FORGE_CHECK(it != waiting.end(), "a generation result for an episode not waiting");
      actions.deliver(it->second.first->episodes[it->second.second], std::move(r));
      waiting.erase(it);
      progressed = true;
    }
    if (actions.reap() > 0) progressed = true;
    // Stragglers: episodes past the deadline are abandoned.
    for (auto& g : active) {
      if (g->since_start.seconds() < cfg.episode_deadline_s) continue;
      for (size_t i = 0; i < g->episodes.size(); ++i) {
        AgentEpisode& e = g->episodes[i];
        if (actions.busy(e) || e.done()) continue;  // a busy one: at its tool call's end
        const uint64_t id = slot_episode_id(g->slot, cfg.group, static_cast<int>(i));
        if (waiting.erase(id)) {  // its generation ends early; the result that answers it is dropped
          discard.insert(id);
          client.cancel(id);
        }
        e.abandon("deadline: still running after pool.episode_deadline_s = " +
                  std::to_string(cfg.episode_deadline_s) + " s");
        ++stats.abandoned;
        progressed = true;
      }
    }
    // Deliver finished groups.
    for (auto it = active.begin(); it != active.end();) {
      SlotGroup& g = **it;
      bool done = true;
      for (const auto& e : g.episodes) done = done && !actions.busy(e) && e.done();
      if (!done) {
        ++it;
        continue;
      }
      std::vector<Trajectory> trajs;
      for (auto& e : g.episodes) trajs.push_back(e.take_trajectory());
      // A group without a generated token is as fresh as the weights now
      // (as version 0 its staleness was the step: a false maximum).
      const int32_t oldest = oldest_version(trajs);
      // One too big for its slot is recorded as abandoned without its calls
      // (it once ended the job, hours in), with a warning to raise the key.
      std::string dropped;
      const std::vector<uint8_t> payload = encode_group_for_slot(trajs, pool.config().slot_bytes, &dropped);
      if (!dropped.empty()) {
        log_warn("slot " + std::to_string(g.slot) + ": " + dropped);
        stats.abandoned += static_cast<int64_t>(trajs.size());
      }
      pool.complete(g.slot, payload.data(), payload.size(), oldest < 0 ? pool.published_version() : oldest);
      slots.done(g.slot);
      ++stats.groups;
      stats.episodes += static_cast<int64_t>(trajs.size());
      it = active.erase(it);
      progressed = true;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return stats;
}

}  // namespace forge
