#include "gateway/gateway_service.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "core/log.hpp"
#include "core/rng.hpp"
#include "episode/trajectory_codec.hpp"
#include "gateway/request_error.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {

using nlohmann::json;

namespace {

std::string random_key() {
  std::random_device rd;
  char buf[48];
  std::snprintf(buf, sizeof buf, "fgk-%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// A count field: a positive integer (also written as 4.0; huge ones
// saturate), or nothing when absent or null.
std::optional<int64_t> count_field(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  const double v = it->is_number() ? it->get<double>() : 0;
  if (!(v >= 1 && std::floor(v) == v)) throw bad_request(std::string(key) + " must be a positive integer");
  return v < 9e18 ? static_cast<int64_t>(v) : std::numeric_limits<int64_t>::max();
}

// max_tokens / max_completion_tokens of a request, capped at `cap`.
int requested_max_tokens(const json& body, int cap) {
  int n = cap;
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (const auto m = count_field(body, key)) n = static_cast<int>(std::min<int64_t>(n, *m));
  if (const auto choices = count_field(body, "n"); choices && *choices != 1)
    throw bad_request("n: this gateway returns one choice per request (n = 1)");
  return n;
}

// Fields a request may send that the run's sampling overrides (docs/gateway.md):
// ignored, but a mistyped one is a client bug named with 400.
void check_ignored_fields(const json& body) {
  for (const char* key : {"temperature", "top_p", "presence_penalty", "frequency_penalty"})
    if (body.contains(key) && !body[key].is_null() && !body[key].is_number())
      throw bad_request(std::string(key) + " must be a number (it is ignored: the run's [sample] decides)");
  if (body.contains("seed") && !body["seed"].is_null() && !body["seed"].is_number_integer())
    throw bad_request("seed must be an integer (it is ignored: the run's [sample] decides)");
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& stop = body["stop"];
    const bool strings = stop.is_array() && std::all_of(stop.begin(), stop.end(), [](const json& x) { return x.is_string(); });
    if (!stop.is_string() && !strings)
      throw bad_request("stop must be a string or an array of strings (it is ignored: a reply ends at the "
                        "policy's end-of-turn token)");
  }
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    const json& k = body["top_logprobs"];
    if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > 20)
      throw bad_request("top_logprobs must be an integer in [0, 20]");
    const bool logprobs = body.contains("logprobs") && body["logprobs"].is_boolean() && body["logprobs"].get<bool>();
    if (k.get<int64_t>() > 0 && !logprobs) throw bad_request("top_logprobs needs \"logprobs\": true");
  }
}

const json& object_body(const json& body) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  return body;
}

constexpr size_t kMaxToolName = 256;  // bytes; a tool name is echoed in its result

std::string string_field(const json& body, const char* key) {
  if (!body.contains(key) || !body[key].is_string())
    throw bad_request(std::string("\"") + key + "\" must be a string");
  return body[key].get<std::string>();
}

}  // namespace

GatewayService::GatewayService(const GatewayConfig& config, const SamplingParams& sampling, int max_new_tokens,
                               int max_seq_len, size_t episode_bytes, std::shared_ptr<const ScaffoldVocabulary> vocab)
    : config_(config),
      sampling_(sampling),
      max_new_tokens_(max_new_tokens),
      max_seq_len_(max_seq_len),
      episode_bytes_(episode_bytes),
      vocab_(std::move(vocab)) {}

// ---- the rank's loop

void GatewayService::add_group(uint64_t slot, std::vector<std::unique_ptr<GatewayEpisode>> episodes,
                               int32_t min_version) {
  std::lock_guard lock(mu_);
  groups_[slot].size = static_cast<int>(episodes.size());
  groups_[slot].min_version = min_version;
  for (auto& e : episodes) openable_.push_back(std::move(e));
  openable_cv_.notify_all();
}

std::vector<GenerationJob> GatewayService::take_jobs() {
  std::lock_guard lock(mu_);
  return std::exchange(jobs_, {});
}

std::vector<uint64_t> GatewayService::take_timed_out() {
  std::lock_guard lock(mu_);
  return std::exchange(timed_out_, {});
}

bool GatewayService::waits_for(uint64_t id) const {
  std::lock_guard lock(mu_);
  return waiting_.count(id) > 0;
}

void GatewayService::fulfil(const GenerationResult& result) {
  std::lock_guard lock(mu_);
  for (int32_t v : result.versions) version_ = std::max<int64_t>(version_, v);
  const auto it = waiting_.find(result.id);
  if (it == waiting_.end()) return;  // its request timed out
  it->second.set_value(result);
  waiting_.erase(it);
}

std::vector<FinishedGroup> GatewayService::take_finished_groups() {
  std::lock_guard lock(mu_);
  return std::exchange(finished_, {});
}

void GatewayService::expire(double episode_deadline_s, double unseen_s) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  const auto seen = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(unseen_s));
  std::vector<std::pair<uint64_t, std::string>> expired;
  for (auto& [id, o] : open_) {
    const bool overdue = std::chrono::duration<double>(now - o.opened).count() > episode_deadline_s;
    const std::string overdue_reason =
        "abandoned: open for more than " + seconds(episode_deadline_s) + " (pool.episode_deadline_s)";
    if (o.in_flight != 0 || o.busy) {
      // An agent that is never idle between requests is still bounded.
      if (overdue && o.ending.empty()) o.ending = overdue_reason;
      continue;
    }
    if (std::chrono::duration<double>(seen - o.last_active).count() > config_.idle_deadline_s)
      expired.emplace_back(id, "abandoned: idle for more than " + seconds(config_.idle_deadline_s) +
                                   " (gateway.idle_deadline_s)");
    else if (overdue)
      expired.emplace_back(id, overdue_reason);
  }
  for (const auto& [id, why] : expired) finish_locked(open_.at(id), true, why);
}

void GatewayService::stop(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (stopped_) return;
  stopped_ = true;
  stop_reason_ = reason;
  for (auto& [id, promise] : waiting_) {
    GenerationResult r;
    r.id = id;
    r.finish = FinishReason::kError;
    r.error = reason;
    promise.set_value(r);
  }
  waiting_.clear();
  openable_cv_.notify_all();
}

GatewayCounters GatewayService::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

int64_t GatewayService::policy_version() const {
  std::lock_guard lock(mu_);
  return version_;
}

// ---- helpers

GatewayService::Open& GatewayService::find_open(uint64_t episode_id) {
  // After stop nothing reaches the pool: work accepted now would be lost.
  if (stopped_) throw RequestError(410, "run_finished", "the episode's run has finished: " + stop_reason_);
  Open& o = const_cast<Open&>(lookup(episode_id));
  // An ending episode's refusal is final, a busy one's lasts only the tool run.
  if (!o.ending.empty())
    throw RequestError(409, "invalid_request_error",
                       "episode " + std::to_string(episode_id) + " takes no more requests: it is " + o.ending +
                           " when its requests under way end");
  if (o.busy)
    throw RequestError(409, "invalid_request_error",
                       "episode " + std::to_string(episode_id) +
                           " is running a tool call or answer: send the next request after its reply").retry_later();
  return o;
}

const GatewayService::Open& GatewayService::lookup(uint64_t episode_id) const {
  const auto it = open_.find(episode_id);
  if (it != open_.end()) return it->second;
  const auto ended = ended_.find(episode_id);
  if (ended != ended_.end())
    throw RequestError(409, "invalid_request_error",
                       "episode " + std::to_string(episode_id) + " is closed (" + ended->second + ")");
  throw RequestError(404, "not_found_error", "no open episode " + std::to_string(episode_id));
}

bool GatewayService::end_if_due(Open& o) {
  if (o.ending.empty() || o.in_flight != 0 || o.busy) return false;
  const std::string reason = o.ending;
  finish_locked(o, true, reason);
  return true;
}

void GatewayService::finish_locked(Open& o, bool abandoned, const std::string& reason) {
  const uint64_t id = o.episode->id(), slot = o.episode->slot();
  Group& g = groups_.at(slot);
  g.done.push_back(o.episode->finish(abandoned, reason));
  ended_[id] = reason;  // its key stays: later requests get 409
  ended_order_.emplace_back(id, o.key);
  while (ended_order_.size() > remembered_ended_) {
    ended_.erase(ended_order_.front().first);
    keys_.erase(ended_order_.front().second);
    ended_order_.pop_front();
  }
  open_.erase(id);  // o is gone from here on
  ++(abandoned ? counters_.abandoned : counters_.closed);
  if (static_cast<int>(g.done.size()) == g.size) {
    std::sort(g.done.begin(), g.done.end(),
              [](const Trajectory& a, const Trajectory& b) { return a.episode_id < b.episode_id; });
    finished_.push_back({slot, std::move(g.done)});
    groups_.erase(slot);
  }
}

// ---- HTTP handlers

json GatewayService::open() {
  std::unique_lock lock(mu_);
  if (openable_.empty() && !stopped_ && open_waiters_ >= std::max(1, config_.http_threads / 4))
    throw RequestError(503, "server_error",
                       "no episode is admitted now and " + std::to_string(open_waiters_) +
                           " requests already wait for one; retry");
  const auto deadline = std::chrono::duration<double>(config_.open_deadline_s);
  ++open_waiters_;
  openable_cv_.wait_for(lock, deadline, [&] { return stopped_ || !openable_.empty(); });
  --open_waiters_;
  if (stopped_) throw RequestError(410, "run_finished", "no more episodes: " + stop_reason_);
  if (openable_.empty())
    throw RequestError(503, "server_error",
                       "no episode could be admitted within " + seconds(config_.open_deadline_s) +
                           " (gateway.open_deadline_s): the data pool is full (pool.inflight groups in "
                           "flight); close open episodes, or retry");
  std::unique_ptr<GatewayEpisode> e = std::move(openable_.front());
  openable_.pop_front();
  const uint64_t id = e->id();
  json out = {{"id", id}, {"slot", e->slot()}, {"task", e->task_json()}};
  const std::string key = random_key();
  Open o;
  o.opened = o.last_active = Clock::now();
  o.episode = std::move(e);
  o.key = key;
  out["api_key"] = key;
  keys_[key] = id;
  open_.emplace(id, std::move(o));
  ++counters_.opened;
  return out;
}

std::optional<uint64_t> GatewayService::episode_of_key(const std::string& key) const {
  std::lock_guard lock(mu_);
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

bool GatewayService::key_matches(uint64_t episode_id, const std::string& key) const {
  const auto e = episode_of_key(key);
  return e && *e == episode_id;
}

GenerationReply GatewayService::generate(uint64_t episode_id, Tokens prompt, int max_tokens, bool chat) {
  std::future<GenerationResult> result;
  uint64_t request_id = 0;
  size_t reserve = 0;
  {
    std::lock_guard lock(mu_);
    if (stopped_) throw RequestError(410, "run_finished", "no more generations: " + stop_reason_);
    Open& o = find_open(episode_id);
    const int room = max_seq_len_ - static_cast<int>(prompt.size());
    if (room < 1)
      // Worded and coded as OpenAI and vLLM do, which clients (litellm's
      // ContextWindowExceededError) recognise to shorten the history.
      throw RequestError(400, "invalid_request_error",
                         "This model's maximum context length is " + std::to_string(max_seq_len_) +
                             " tokens. However, the prompt has " + std::to_string(prompt.size()) +
                             " tokens, leaving no room for a reply (the context is agent.max_context_tokens + "
                             "agent.max_new_tokens); shorten the messages",
                         "context_length_exceeded");
    // Concurrent calls reserve their share, so together they cannot pass it.
    reserve = GatewayEpisode::call_bytes(prompt.size(), static_cast<size_t>(std::min(max_tokens, room)));
    try {
      o.episode->check_budget(o.reserved + reserve, episode_bytes_);
    } catch (RequestError& e) {
      // Calls in flight hold room for their whole max_tokens, and give back
      // what they do not use: full only for now.
      if (o.reserved == 0) throw;
      throw RequestError(409, e.type(),
                         std::string(e.what()) + " (with the room its " + std::to_string(o.in_flight) +
                             " call(s) in flight hold: retry when they are answered)")
          .retry_later();
    }
    o.reserved += reserve;
    GenerationRequest r;
    r.id = request_id = next_request_++;
    r.prompt = prompt;
    r.sampling = sampling_;
    r.sampling.max_new_tokens = std::min(max_tokens, room);
    r.sampling.stop_tokens = vocab_->stop_tokens();
    uint64_t seed = sampling_.seed ^ (episode_id * 0x9E3779B97F4A7C15ull) ^ (request_id << 1);
    r.sampling.seed = splitmix64(seed);
    if (o.in_flight == 0) r.session = "gw-episode-" + std::to_string(episode_id);
    r.min_version = groups_.at(o.episode->slot()).min_version;
    ++o.in_flight;
    o.last_active = Clock::now();
    ++counters_.requests;
    result = waiting_[request_id].get_future();
    jobs_.push_back({episode_id, std::move(r)});
  }
  result.wait_for(std::chrono::duration<double>(config_.request_deadline_s));
  std::lock_guard lock(mu_);
  // Under the lock: a result that came just after the deadline still counts.
  const bool ready = result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  const auto it = open_.find(episode_id);
  if (it != open_.end()) {
    --it->second.in_flight;
    it->second.reserved -= reserve;
    it->second.last_active = Clock::now();
    end_if_due(it->second);  // overdue: this reply is not recorded (409 below)
  }
  if (!ready) {
    waiting_.erase(request_id);
    timed_out_.push_back(request_id);
    ++counters_.timeouts;
    throw RequestError(504, "timeout",
                       "no generation within " + seconds(config_.request_deadline_s) + " (gateway.request_deadline_s)");
  }
  GenerationReply reply;
  reply.vocab = vocab_.get();
  reply.result = result.get();
  if (stopped_) throw RequestError(410, "run_finished", "no more generations: " + stop_reason_);
  if (reply.result.finish == FinishReason::kError) {
    ++counters_.errors;
    throw RequestError(503, "server_error", "generation failed: " + reply.result.error);
  }
  Open& o = find_open(episode_id);  // 409 if it was closed meanwhile
  reply.episode_id = episode_id;
  reply.call_index = o.episode->calls();
  reply.prompt = std::move(prompt);
  if (chat) {
    reply.message = o.episode->record_chat(reply.prompt, reply.result, &reply.finish_reason);
  } else {
    o.episode->record_completion(reply.prompt, reply.result);
    reply.finish_reason = reply.result.finish == FinishReason::kStop ? "stop" : "length";
  }
  return reply;
}

GenerationReply GatewayService::chat(uint64_t episode_id, const json& body) {
  object_body(body);
  const int max_tokens = requested_max_tokens(body, max_new_tokens_);
  check_ignored_fields(body);
  if (!body.contains("messages")) throw bad_request("\"messages\" is required");
  if (body.contains("tools") && !body["tools"].is_null() && !body["tools"].is_array())
    throw bad_request("\"tools\" must be an array");
  Tokens prompt;
  {
    std::lock_guard lock(mu_);
    prompt = find_open(episode_id).episode->render_chat(body["messages"]);
  }
  return generate(episode_id, std::move(prompt), max_tokens, true);
}

GenerationReply GatewayService::completion(uint64_t episode_id, const json& body) {
  object_body(body);
  const int max_tokens = requested_max_tokens(body, max_new_tokens_);
  check_ignored_fields(body);
  if (!body.contains("prompt")) throw bad_request("\"prompt\" is required");
  // A list of one prompt (LangChain's OpenAI LLM sends ["text"]) is that prompt.
  const json& listed = body["prompt"];
  const bool one_listed = listed.is_array() && listed.size() == 1 && (listed[0].is_string() || listed[0].is_array());
  const json& p = one_listed ? listed[0] : listed;
  if (body.contains("echo") && body["echo"].is_boolean() && body["echo"].get<bool>())
    throw bad_request("\"echo\": this gateway returns generated tokens only (their logprobs are the "
                      "policy's; a prompt's are not computed)");
  if (const auto best_of = count_field(body, "best_of"); best_of && *best_of != 1)
    throw bad_request("best_of: this gateway generates one completion per request (best_of = 1)");
  if (body.contains("suffix") && !body["suffix"].is_null() &&
      !(body["suffix"].is_string() && body["suffix"].get<std::string>().empty()))
    throw bad_request("\"suffix\" is not supported (no insertion: the policy continues the prompt)");
  Tokens prompt;
  if (p.is_string()) {
    prompt = vocab_->encode_prompt(p.get<std::string>());
  } else if (p.is_array()) {
    for (const json& t : p) {
      if (t.is_string() || t.is_array())
        throw bad_request("\"prompt\": one prompt per request (an episode is one conversation): send a string, "
                          "an array of token ids, or a list of one of them, not a batch");
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab_->vocab_size())
        throw bad_request("\"prompt\" as token ids: each must be an integer in [0, " +
                          std::to_string(vocab_->vocab_size()) + ")");
      prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    throw bad_request("\"prompt\" must be a string or an array of token ids");
  }
  if (prompt.empty()) throw bad_request("\"prompt\" is empty");
  return generate(episode_id, std::move(prompt), max_tokens, false);
}

json GatewayService::tool(uint64_t episode_id, const json& body) {
  object_body(body);
  const std::string name = string_field(body, "name");
  if (name.size() > kMaxToolName)
    throw bad_request("\"name\" has " + std::to_string(name.size()) + " bytes; at most " +
                      std::to_string(kMaxToolName));
  std::string args;
  if (body.contains("arguments")) {
    // An OpenAI tool call's arguments: a JSON string or object with "input".
    const json& a = body["arguments"];
    json parsed;
    if (a.is_string()) parsed = parse_client_json(a.get<std::string>(), "\"arguments\"");
    const json& obj = a.is_string() ? parsed : a;
    if (!obj.is_object() || !obj.contains("input"))
      throw bad_request("\"arguments\" must be {\"input\": ...} (an object or its JSON text)");
    const json& input = obj["input"];
    args = input.is_string() ? input.get<std::string>() : input.dump();
  }
  return run_unlocked(episode_id,
                      [&](GatewayEpisode& e, size_t budget) { return e.run_tool(name, args, budget); });
}

json GatewayService::answer(uint64_t episode_id, const json& body) {
  object_body(body);
  const std::string text = string_field(body, "answer");
  return run_unlocked(episode_id, [&](GatewayEpisode& e, size_t budget) { return e.answer(text, budget); });
}

json GatewayService::run_unlocked(uint64_t episode_id, const std::function<json(GatewayEpisode&, size_t)>& f) {
  GatewayEpisode* episode = nullptr;
  size_t budget = 0;
  {
    std::lock_guard lock(mu_);
    Open& o = find_open(episode_id);
    if (o.in_flight > 0)
      throw RequestError(409, "invalid_request_error",
                         "episode " + std::to_string(episode_id) +
                             " has a generation in flight: send the tool call or answer after its reply").retry_later();
    o.busy = true;  // from here nothing closes, expires or touches it but f
    episode = o.episode.get();
    budget = episode_bytes_ - o.reserved;
  }
  const Clock::time_point started = Clock::now();
  // An accepted request counts as activity; a refused one does not, and the
  // time f ran is not the agent's idleness either.
  const auto idle_again = [&](bool accepted) {
    std::lock_guard lock(mu_);
    Open& o = open_.at(episode_id);
    o.busy = false;
    const Clock::time_point now = Clock::now();
    o.last_active = accepted ? now : o.last_active + (now - started);
    end_if_due(o);  // overdue meanwhile: abandoned now (its reply still goes out)
  };
  json out;
  try {
    out = f(*episode, budget);
  } catch (...) {
    idle_again(false);
    throw;
  }
  idle_again(true);
  return out;
}

json GatewayService::reward(uint64_t episode_id, const json& body) {
  std::lock_guard lock(mu_);
  Open& o = find_open(episode_id);
  o.episode->post_reward(body);
  o.last_active = Clock::now();  // accepted (a refused reward is not activity)
  return {{"id", episode_id}, {"reward", body}};
}

json GatewayService::close(uint64_t episode_id, const json& body) {
  object_body(body);
  bool abandon = false;
  if (body.contains("abandon")) {
    if (!body["abandon"].is_boolean()) throw bad_request("\"abandon\" must be true or false");
    abandon = body["abandon"].get<bool>();
  }
  std::lock_guard lock(mu_);
  Open& o = find_open(episode_id);
  const int calls = o.episode->calls();
  finish_locked(o, abandon, abandon ? "abandoned: by the agent" : "closed");
  return {{"id", episode_id}, {"status", abandon ? "abandoned" : "closed"}, {"calls", calls}};
}

void GatewayService::require_open(uint64_t episode_id) const {
  std::lock_guard lock(mu_);
  lookup(episode_id);
}

json GatewayService::describe(uint64_t episode_id) const {
  std::lock_guard lock(mu_);
  const Open& o = lookup(episode_id);
  if (o.busy)  // the tool run changes its record outside the lock
    throw RequestError(409, "invalid_request_error",
                       "episode " + std::to_string(episode_id) +
                           " is running a tool call or answer: read it after that reply").retry_later();
  json calls = json::array();
  for (const LlmCall& c : o.episode->record_so_far().calls)
    calls.push_back({{"prompt_token_ids", c.context},
                     {"token_ids", c.generated},
                     {"logprobs", c.logprobs},
                     {"versions", c.versions}});
  return {{"id", episode_id}, {"status", "open"}, {"slot", o.episode->slot()}, {"calls", calls}};
}

}  // namespace forge
