#include "mpi_roles/rollout_rank.hpp"

#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "backend/host_pins.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "mpi_roles/held_requests.hpp"

namespace forge {

RolloutRankStats run_rollout_rank(MPI_Comm world, const RoleLayout& layout, PolicyModel& model,
                                  RolloutEngine& engine, WeightChannel& weights, SendQueue& sends,
                                  double startup_s) {
  RolloutRankStats stats;
  // A version is read into one of two host buffers (try_pull swaps them)
  // and loaded from it: on a device backend both are page-locked on first
  // use (HostPins), so the upload goes by DMA.
  std::vector<float> host(weights.size());
  HostPins pins(model.backend());
  pins.pin(host.data(), host.size() * sizeof(float));  // before any pull is timed (the other: at the first load)
  const auto load = [&] {
    pins.pin(host.data(), host.size() * sizeof(float));
    model.set_params(host);
  };
  int64_t version = -1;
  Stopwatch first;
  while (version < 0) {
    version = weights.try_pull(-1, host);
    if (version >= 0) break;
    if (weights.stop_code() != 0) return stats;
    if (first.seconds() > startup_s)
      throw Error(first_weights_late(startup_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  load();
  engine.set_policy_version(static_cast<int>(version));
  ++stats.weight_pulls;

  struct Origin {
    int source;
    uint64_t id;
  };
  std::map<uint64_t, Origin> origin;  // engine id -> client
  std::map<std::pair<int, uint64_t>, uint64_t> engine_id;  // (client rank, client id) -> engine id
  // A result (under its engine id) goes back to the client, under the client's id.
  const auto answer = [&](GenerationResult r) {
    const auto it = origin.find(r.id);
    FORGE_CHECK(it != origin.end(), "a result for an unknown engine request id");
    r.id = it->second.id;
    stats.generated += static_cast<int64_t>(r.tokens.size());
    sends.send(world, it->second.source, kResultTag, encode_result(r));
    engine_id.erase({it->second.source, it->second.id});
    origin.erase(it);
  };
  // A request answered without generating (refused, cancelled).
  const auto answer_now = [&](uint64_t id, FinishReason finish, std::string error = "") {
    GenerationResult r;
    r.id = id;
    r.finish = finish;
    r.error = std::move(error);
    answer(std::move(r));
  };
  // A request the engine refuses gets an error result at once.
  const auto submit = [&](GenerationRequest r) {
    const uint64_t id = r.id;
    try {
      engine.submit(std::move(r));
    } catch (const InputError& e) {
      answer_now(id, FinishReason::kError, e.what());
    }
  };
  HeldRequests held;  // waiting for newer weights than the engine's
  // Cancels that came before their request: requests and cancels travel
  // under different tags, whose order MPI does not promise. One whose
  // result was already sent stays here, a few words. A client id names one
  // episode's calls, one at a time, and a cancel comes only when that
  // episode is abandoned, so no later request of the id meets it (a client
  // that cancelled and then asked again under the same id would be answered
  // "cancelled").
  std::set<std::pair<int, uint64_t>> early_cancels;
  uint64_t next_id = 0;
  std::vector<uint8_t> bytes;
  int source = -1;
  while (weights.stop_code() == 0) {
    bool progressed = false;
    while (try_receive(world, kRequestTag, &source, &bytes)) {
      GenerationRequest r = decode_request(bytes, "generation request from " + layout.name(source));
      const uint64_t client_id = r.id;
      r.id = next_id++;
      ++stats.requests;
      origin[r.id] = {source, client_id};
      engine_id[{source, client_id}] = r.id;
      if (early_cancels.erase({source, client_id}))
        answer_now(r.id, FinishReason::kCancelled);
      else if (r.min_version > version)
        held.hold(std::move(r));
      else
        submit(std::move(r));
      progressed = true;
    }
    // Cancels, after the requests received above. One for a request not
    // held here is kept for the request (or its result already sent
    // answers it).
    while (try_receive(world, kCancelTag, &source, &bytes)) {
      const uint64_t client_id = decode_cancel(bytes, "cancel from " + layout.name(source));
      const auto it = engine_id.find({source, client_id});
      if (it == engine_id.end()) {
        early_cancels.insert({source, client_id});
      } else if (held.cancel(it->second)) {
        answer_now(it->second, FinishReason::kCancelled);
      } else {
        engine.cancel(it->second);
      }
      progressed = true;
    }
    Stopwatch pull;
    const int64_t v = weights.try_pull(version, host);
    if (v > version) {
      load();
      stats.pull_seconds += pull.seconds();
      version = v;
      engine.set_policy_version(static_cast<int>(v));
      engine.clear_prefix_cache();
      ++stats.weight_pulls;
    }
    for (GenerationRequest& r : held.release(static_cast<int>(version))) submit(std::move(r));
    if (!engine.idle()) {
      for (GenerationResult& r : engine.step()) answer(std::move(r));
      ++stats.engine_steps;
      progressed = true;
    }
    sends.progress();
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  stats.held = held.total_held();
  stats.longest_hold_s = held.longest_hold_s();
  return stats;
}

}  // namespace forge
