#include "mpi_roles/gateway_rank.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "core/timer.hpp"
#include "env/env_mix.hpp"
#include "episode/trajectory_codec.hpp"
#include "gateway/gateway_service.hpp"
#include "gateway/http_gateway.hpp"
#include "mpi_roles/environment_rank.hpp"
#include "mpi_roles/producer_slots.hpp"

namespace forge {
namespace {

void write_url_file(const std::string& path, const std::string& url, int rank) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << nlohmann::json{{"url", url}, {"rank", rank}}.dump() << "\n";
  std::filesystem::rename(tmp, path);
}

}  // namespace

void run_gateway_rank(const RoleLayout& layout, DataPool& pool, WeightChannel& control,
                      GenerationClient& client, const GatewayRankConfig& cfg) {
  const EnvMix mix(cfg.producer.env);
  const PerturbationSampler sampler = cfg.producer.env.perturbation_sampler();
  const int first_rollout = layout.first(Role::kRollout);
  const int rollouts = layout.count(Role::kRollout);
  const auto describe = [&](int rank) { return layout.name(rank); };
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  const size_t episode_bytes = pool.config().slot_bytes / static_cast<size_t>(cfg.producer.group) - 64;
  const AgentConfig& agent = cfg.producer.agent;
  auto service_owner = std::make_unique<GatewayService>(
      cfg.gateway, agent.sampling, agent.max_new_tokens, cfg.max_seq_len, episode_bytes,
      agent.vocabulary ? agent.vocabulary : ScaffoldVocabulary::builtin_ptr());
  GatewayService& service = *service_owner;
  const int port = cfg.gateway.port == 0 ? 0 : cfg.gateway.port + cfg.index;
  const std::string name = "gateway rank " + std::to_string(rank);
  auto http_owner = std::make_unique<HttpGateway>(service, cfg.gateway, port, name);
  HttpGateway& http = *http_owner;
  // However this function ends (an error included), waiting requests are
  // released before the server's threads are joined. Handler threads that
  // did not stop in time still use the service and the server: both are
  // then left alive for the rest of the process, not freed under them.
  // The URL file goes with the server: one left from an earlier attempt
  // (--resume, a Slurm requeue) named a dead port until the new one was out.
  struct StopOnExit {
    std::unique_ptr<GatewayService>& service;
    std::unique_ptr<HttpGateway>& http;
    const std::string& url_file;
    void operator()(const std::string& why) const {
      if (!http) return;
      std::error_code ignored;
      if (!url_file.empty()) std::filesystem::remove(url_file, ignored);
      service->stop(why);
      if (!http->stop()) {
        static_cast<void>(http.release());
        static_cast<void>(service.release());
      }
    }
    ~StopOnExit() { (*this)("the gateway rank stopped"); }
  } stop_on_exit{service_owner, http_owner, cfg.url_file};
  if (!cfg.url_file.empty()) {
    std::error_code ignored;
    std::filesystem::remove(cfg.url_file, ignored);
  }
  // Agents learn the URL once the learner's first weights are out.
  await_first_weights(control, cfg.producer.startup_s);
  if (!cfg.url_file.empty()) write_url_file(cfg.url_file, http.url(), rank);
  log_info("gateway listening on " + http.url() + " (episodes: POST " + http.url() + "/v1/episodes)");

  int64_t groups = 0;  // delivered to the pool
  std::list<GenerationJob> pending;  // taken from the service, not yet sent (FIFO)
  ProducerSlots slots(pool, cfg.producer.groups_in_flight);
  Stopwatch since_expiry;
  while (control.stop_code() == 0) {
    bool progressed = false;
    for (const auto [slot, min_version] : slots.admit()) {
      const uint64_t task_seed = slot_task_seed(cfg.producer.run_seed, slot);
      std::vector<std::unique_ptr<GatewayEpisode>> episodes;
      for (int g = 0; g < cfg.producer.group; ++g) {
        const uint64_t id = slot_episode_id(slot, cfg.producer.group, g);
        episodes.push_back(std::make_unique<GatewayEpisode>(
            mix.make_for(task_seed), task_seed, episode_style(sampler, task_seed, id, StyleMode::kTrain),
            cfg.producer.agent, id, slot));
      }
      service.add_group(slot, std::move(episodes), min_version);
      progressed = true;
    }
    for (GenerationJob& job : service.take_jobs()) pending.push_back(std::move(job));
    if (!pending.empty()) {
      std::vector<size_t> in_flight(static_cast<size_t>(rollouts));  // per rollout rank, counted once a pass
      for (int k = 0; k < rollouts; ++k) in_flight[k] = client.outstanding_to(first_rollout + k);
      for (auto it = pending.begin(); it != pending.end();) {
        const int k = static_cast<int>(it->episode_id % rollouts);
        if (in_flight[k] >= static_cast<size_t>(cfg.requests_per_rollout)) {
          ++it;  // its rollout rank is full; a job that times out meanwhile is dropped when there is room
        } else if (!service.waits_for(it->request.id)) {
          it = pending.erase(it);  // its request timed out while it waited here
        } else {
          client.send(first_rollout + k, it->request);
          ++in_flight[k];
          it = pending.erase(it);
          progressed = true;
        }
      }
    }
    for (const uint64_t id : service.take_timed_out()) client.cancel(id);  // one not sent yet is dropped above
    for (const GenerationResult& r : client.poll(describe)) {
      service.fulfil(r);
      progressed = true;
    }
    for (FinishedGroup& g : service.take_finished_groups()) {
      // Before the payload, which may drop the calls; without a generated
      // token, as fresh as the weights now.
      const int32_t oldest = oldest_version(g.episodes);
      std::string dropped;
      const std::vector<uint8_t> payload = encode_group_for_slot(g.episodes, pool.config().slot_bytes, &dropped);
      if (!dropped.empty()) log_warn("slot " + std::to_string(g.slot) + ": " + dropped);
      pool.complete(g.slot, payload.data(), payload.size(), oldest < 0 ? pool.published_version() : oldest);
      slots.done(g.slot);
      ++groups;
      progressed = true;
    }
    if (since_expiry.seconds() > 0.25) {
      service.expire(cfg.producer.episode_deadline_s, http.oldest_queued_s());
      http.check_listening();
      since_expiry.reset();
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stop_on_exit(control.stop_code() == kStopSignal ? "the run was stopped (SIGTERM)" : "the run has finished");
  const GatewayCounters c = service.counters();
  log_info("gateway: " + std::to_string(groups) + " groups to the pool; " + std::to_string(c.opened) +
           " episodes opened, " + std::to_string(c.closed) + " closed, " +
           std::to_string(c.abandoned) + " abandoned; " + std::to_string(c.requests) + " requests (" +
           std::to_string(c.timeouts) + " past the deadline, " + std::to_string(c.errors) + " failed)");
}

}  // namespace forge
