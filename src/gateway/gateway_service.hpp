// The gateway's state and request handling, between HTTP handler threads
// (many, blocking) and the gateway rank's loop (one thread, all MPI).
//
//   loop:  add_group(slot, eps, v)     an admitted data-pool slot: G episodes
//                                      of one task become openable, served
//                                      by weights of version v or newer
//          take_jobs()                 generation requests to send to rollout ranks
//          take_timed_out()            requests answered 504: to cancel
//          fulfil(request, result)     a result came back
//          take_finished_groups()      every episode of a slot closed: to the pool
//          expire(deadline)            idle or overdue open episodes -> abandoned
//          stop(reason)                the run ends: waiters and later requests get 410
//   HTTP:  open / chat / completion / tool / answer / reward / close / describe
//
// One mutex guards everything; handlers wait for generation outside it, on
// a future, at most gateway.request_deadline_s (then 504, and the late
// result is dropped, not recorded). A request's episode is looked up again
// after the wait: one closed meanwhile gets 409 and nothing is recorded.
// Episode keys are 128-bit random hex; closed episodes are remembered by id
// and key (409 with how they ended, not 404 or 401), the most recent
// kRememberedEnded of them (older ones: 404 by id, 401 by key), so that a
// long run's memory stays bounded. At most a quarter of
// the HTTP threads wait in open() at once; more get 503 at once.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "episode/trajectory.hpp"
#include "gateway/gateway_config.hpp"
#include "gateway/gateway_episode.hpp"
#include "model/rollout_engine.hpp"

namespace forge {

struct GenerationJob {
  uint64_t episode_id = 0;
  GenerationRequest request;  // request.id: unique per gateway
};

struct FinishedGroup {
  uint64_t slot = 0;
  std::vector<Trajectory> episodes;
};

struct GatewayCounters {
  int64_t opened = 0, closed = 0, abandoned = 0, requests = 0, errors = 0, timeouts = 0;
};

// A chat or completion reply, before the HTTP layer formats it.
struct GenerationReply {
  uint64_t episode_id = 0;
  int call_index = 0;
  Tokens prompt;
  GenerationResult result;
  nlohmann::json message;     // chat only
  std::string finish_reason;  // "stop" | "length" | "tool_calls"
  const ScaffoldVocabulary* vocab = &ScaffoldVocabulary::builtin();  // the tokens' text
};

class GatewayService {
 public:
  // sampling: the run's sampling (behaviour logprobs must be the learner's
  // distribution); max_new_tokens caps each request.
  // episode_bytes: each episode's share of a data-pool slot. vocab: the
  // policy's (stop token, raw completions' text).
  GatewayService(const GatewayConfig& config, const SamplingParams& sampling, int max_new_tokens,
                 int max_seq_len, size_t episode_bytes,
                 std::shared_ptr<const ScaffoldVocabulary> vocab = ScaffoldVocabulary::builtin_ptr());

  // ---- the rank's loop
  // Its requests carry min_version: the oldest weights that may serve them
  // (the slot's start version, mpi_roles/producer_slots.hpp).
  void add_group(uint64_t slot, std::vector<std::unique_ptr<GatewayEpisode>> episodes, int32_t min_version = 0);
  std::vector<GenerationJob> take_jobs();
  // Whether a request still waits for request `id`'s result (false once it
  // timed out, 504): a job the rank has not sent yet is then dropped.
  bool waits_for(uint64_t id) const;
  // Requests that timed out (504) since the last call: the rank cancels
  // those it sent, so the rollout rank stops generating what nobody reads.
  std::vector<uint64_t> take_timed_out();
  void fulfil(const GenerationResult& result);
  std::vector<FinishedGroup> take_finished_groups();
  // Abandons open episodes with no call in flight that were idle longer than
  // gateway.idle_deadline_s or open longer than episode_deadline_s (the
  // pool's straggler deadline). One open too long with work under way (a
  // generation, a tool run) takes no new work (409) and is abandoned when
  // that work ends. unseen_s: how long the oldest request not yet seen
  // (waiting for a handler thread) has waited; it may be any episode's, so
  // idleness is judged as of its arrival.
  void expire(double episode_deadline_s, double unseen_s = 0);
  void stop(const std::string& reason);
  GatewayCounters counters() const;

  // ---- HTTP handlers (RequestError for refusals)
  // Waits up to gateway.open_deadline_s for an admitted episode.
  nlohmann::json open();
  // The episode named by an episode key (nothing if the key is unknown).
  std::optional<uint64_t> episode_of_key(const std::string& key) const;
  bool key_matches(uint64_t episode_id, const std::string& key) const;
  GenerationReply chat(uint64_t episode_id, const nlohmann::json& body);
  GenerationReply completion(uint64_t episode_id, const nlohmann::json& body);
  nlohmann::json tool(uint64_t episode_id, const nlohmann::json& body);
  nlohmann::json answer(uint64_t episode_id, const nlohmann::json& body);
  nlohmann::json reward(uint64_t episode_id, const nlohmann::json& body);
  nlohmann::json close(uint64_t episode_id, const nlohmann::json& body);
  nlohmann::json describe(uint64_t episode_id) const;
  // RequestError as every episode route answers when the episode is not
  // open (404 never opened, 409 closed).
  void require_open(uint64_t episode_id) const;
  int64_t policy_version() const;

  // How many ended episodes are remembered (tests lower it).
  static constexpr size_t kRememberedEnded = 1 << 16;
  void set_remembered_ended(size_t n) { remembered_ended_ = n; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Open {
    std::unique_ptr<GatewayEpisode> episode;
    Clock::time_point opened, last_active;
    int in_flight = 0;
    size_t reserved = 0;  // bytes the calls in flight may add to the record
    bool busy = false;    // a tool call or answer runs on it outside mu_ (run_unlocked)
    std::string key;
    // Set when it is overdue with work under way: new work gets 409, and it
    // is abandoned with this reason once that work ends.
    std::string ending;
  };
  struct Group {
    int size = 0;
    int32_t min_version = 0;
    std::vector<Trajectory> done;
  };

  // The open episode for new work: RequestError 410 (stopped), 404, 409
  // (closed, busy, or ending).
  Open& find_open(uint64_t episode_id);
  // The open episode: RequestError 404, 409 (closed).
  const Open& lookup(uint64_t episode_id) const;
  // Abandons `o` with its `ending` reason when it has one and no work is
  // under way (o is gone then); returns whether it did.
  bool end_if_due(Open& o);
  // f(episode, its byte budget) outside mu_, the episode marked busy: a slow
  // environment's tool or verifier (the code domain's sandbox, seconds)
  // holds neither the other episodes nor the rank loop. 409 while the
  // episode has a generation in flight.
  nlohmann::json run_unlocked(uint64_t episode_id,
                              const std::function<nlohmann::json(GatewayEpisode&, size_t)>& f);
  void finish_locked(Open& o, bool abandoned, const std::string& reason);
  // Queues a request and waits for its result; the reply's episode is open.
  GenerationReply generate(uint64_t episode_id, Tokens prompt, int max_tokens, bool chat);

  GatewayConfig config_;
  SamplingParams sampling_;
  int max_new_tokens_;
  int max_seq_len_;
  size_t episode_bytes_;
  std::shared_ptr<const ScaffoldVocabulary> vocab_;
  int open_waiters_ = 0;
  mutable std::mutex mu_;
  std::condition_variable openable_cv_;
  std::deque<std::unique_ptr<GatewayEpisode>> openable_;
  std::unordered_map<uint64_t, Open> open_;
  std::unordered_map<std::string, uint64_t> keys_;
  std::unordered_map<uint64_t, std::string> ended_;  // id -> how it ended
  std::deque<std::pair<uint64_t, std::string>> ended_order_;  // (id, key), oldest first
  size_t remembered_ended_ = kRememberedEnded;
  std::map<uint64_t, Group> groups_;
  std::vector<FinishedGroup> finished_;
  std::vector<GenerationJob> jobs_;
  std::vector<uint64_t> timed_out_;
  std::unordered_map<uint64_t, std::promise<GenerationResult>> waiting_;
  uint64_t next_request_ = 0;
  int64_t version_ = 0;
  bool stopped_ = false;
  std::string stop_reason_;
  GatewayCounters counters_;
};

}  // namespace forge
