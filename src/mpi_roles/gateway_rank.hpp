// A gateway rank: an environment rank whose episodes are driven by black-box
// agents over HTTP (src/gateway) instead of forge's scaffold.
//
// Like an environment rank it runs up to mpi.env_groups data-pool slots; an
// admitted slot s becomes G = train.group openable episodes of the task
// seed hash(run.seed, s), ids s * G + g, styles as white-box episodes. The
// loop forwards the agents' generation requests to rollout ranks (episode e
// to rollout rank e mod R, so its cached prefix stays on one engine), hands
// back the results (at most requests_per_rollout of them outstanding at
// each rollout rank, its share of the engine's batch: the rest wait on this
// rank, so that a burst of agent requests queues here, where
// gateway.request_deadline_s answers it 504, instead of in the engine, where
// mpi.deadline_s took it for a stalled rollout rank and aborted the job; a
// job whose request timed out before it was sent is dropped), closes idle
// episodes as abandoned, and completes slot s
// in the data pool once all G episodes are closed (abandoned ones included,
// flagged; the learner leaves them out). Each episode may fill
// pool.slot_bytes / G of its slot (a group past its slot all the same is
// recorded as abandoned, never an error). At the learner's stop word (or an
// error on this rank) the service refuses new work (410) and the HTTP server
// stops, cutting its connections (HttpGateway::stop).
#pragma once
#include <cstdint>
#include <string>

#include "gateway/gateway_config.hpp"
#include "mpi_roles/data_pool.hpp"
#include "mpi_roles/environment_rank.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/weight_channel.hpp"

namespace forge {

struct GatewayRankConfig {
  EnvironmentRankConfig producer;  // tasks, slots and scaffold as an environment rank's
                                   // (agent.sampling: the run's; max_new_tokens caps requests)
  GatewayConfig gateway;
  int max_seq_len = 512;
  int requests_per_rollout = 64;  // generation requests outstanding at one rollout rank at most
  int index = 0;            // k-th gateway rank: port gateway.port + k
  std::string url_file;     // written with {"url", "rank"} once listening; removed at start and stop
};

// Runs until the stop word; logs its counters at the end.
void run_gateway_rank(const RoleLayout& layout, DataPool& pool, WeightChannel& control,
                      GenerationClient& client, const GatewayRankConfig& config);

}  // namespace forge
