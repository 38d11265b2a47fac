#include "gateway/http_gateway.hpp"

#include <httplib.h>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <functional>

#include "core/log.hpp"
#include "gateway/openai_replies.hpp"
#include "gateway/request_error.hpp"

namespace forge {

using nlohmann::json;

namespace {

// Debian's libcpp-httplib is built with a listen backlog of 5: a burst of
// connections overflows it and the kernel drops handshakes. Listening again
// on the bound socket raises the backlog (Linux updates it in place).
class GatewayHttpServer : public httplib::Server {
 public:
  bool raise_listen_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
};

// httplib's thread pool, counting the connections that wait for a thread.
class CountingThreadPool : public httplib::TaskQueue {
 public:
  CountingThreadPool(size_t threads, std::shared_ptr<std::atomic<int64_t>> queued)
      : pool_(threads), queued_(std::move(queued)) {}
  void enqueue(std::function<void()> fn) override {
    ++*queued_;
    pool_.enqueue([queued = queued_, fn = std::move(fn)] {
      --*queued;
      fn();
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  std::shared_ptr<std::atomic<int64_t>> queued_;
};

json error_body(const std::string& message, const std::string& type, int status) {
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

std::string bearer(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return h.rfind(prefix, 0) == 0 ? h.substr(prefix.size()) : "";
}

// Constant-time comparison of secrets.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  try {
    return json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw bad_request(std::string("malformed JSON body: ") + e.what());
  }
}

uint64_t episode_in_path(const httplib::Request& req) {
  const std::string s = req.matches[1].str();
  uint64_t id = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  if (ec != std::errc() || end != s.data() + s.size())
    throw RequestError(404, "not_found_error", "no episode '" + s + "'");
  return id;
}

bool wants(const json& body, const char* key) {
  if (!body.is_object() || !body.contains(key) || body[key].is_null()) return false;
  if (!body[key].is_boolean()) throw bad_request(std::string("\"") + key + "\" must be true or false");
  return body[key].get<bool>();
}

void send_events(httplib::Response& res, std::vector<json> chunks) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto events = std::make_shared<std::string>();
  for (const json& c : chunks) *events += "data: " + c.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  *events += "data: [DONE]\n\n";
  res.set_chunked_content_provider("text/event-stream", [events](size_t, httplib::DataSink& sink) {
    sink.write(events->data(), events->size());
    sink.done();
    return true;
  });
}

}  // namespace

HttpGateway::HttpGateway(GatewayService& service, const GatewayConfig& config, int port)
    : service_(service), config_(config), server_(std::make_unique<GatewayHttpServer>()) {
  const int threads = config.http_threads;
  server_->new_task_queue = [threads, queued = queued_] {
    return new CountingThreadPool(static_cast<size_t>(threads), queued);
  };
  server_->set_payload_max_length(static_cast<size_t>(config.max_request_kib) * 1024);
  // A handler thread serves one connection at a time: a kept-alive idle
  // connection would hold its thread (up to the keep-alive timeout) while
  // other requests queue, so each connection carries one request.
  server_->set_keep_alive_max_count(1);
  server_->set_read_timeout(30, 0);
  server_->set_write_timeout(30, 0);
  add_routes();
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(config.bind);
    if (bound <= 0) throw InputError("gateway: cannot bind " + config.bind + " on any port");
  } else if (!server_->bind_to_port(config.bind, port)) {
    throw InputError("gateway: cannot bind " + config.bind + ":" + std::to_string(port) +
                     " (in use? set gateway.port, or 0 for any free port)");
  }
  if (!static_cast<GatewayHttpServer&>(*server_).raise_listen_backlog(4096))
    throw Error("gateway: cannot raise the listen backlog of " + config.bind + ":" + std::to_string(bound));
  // Listening on every interface: name the host, so the URL can be used.
  std::string host = config.bind;
  if (host == "0.0.0.0" || host == "::") {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && name[0]) host = name;
  }
  url_ = "http://" + host + ":" + std::to_string(bound);
  // stop() is a no-op until the server runs: wait for it (or for a listen
  // that failed at once) so that an early stop cannot miss it.
  auto done = std::make_shared<std::atomic<bool>>(false);
  thread_ = std::thread([this, done] {
    server_->listen_after_bind();
    *done = true;
  });
  while (!server_->is_running() && !*done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

HttpGateway::~HttpGateway() { stop(); }

void HttpGateway::stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpGateway::add_routes() {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Errors become OpenAI-shaped bodies; nothing escapes to the server.
  const auto guarded = [](Handler h) {
    return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
      try {
        h(req, res);
      } catch (const RequestError& e) {
        send_json(res, e.status(), error_body(e.what(), e.type(), e.status()));
        if (e.status() == 503) res.set_header("Retry-After", "1");
      } catch (const std::exception& e) {
        log_warn(std::string("gateway: internal error on ") + req.method + " " + req.path + ": " + e.what());
        send_json(res, 500, error_body(std::string("internal error: ") + e.what(), "server_error", 500));
      }
    };
  };
  const auto unauthorized = [](const std::string& why) { return RequestError(401, "authentication_error", why); };
  const auto require_gateway_token = [this, unauthorized](const httplib::Request& req) {
    const std::string t = bearer(req);
    if (t.empty()) throw unauthorized("missing bearer token (Authorization: Bearer <gateway.token>)");
    if (!same_secret(t, config_.token)) throw unauthorized("wrong bearer token: this needs the gateway token");
  };
  // The episode of a request: from the path (its key or the gateway token)
  // or, without one, from the bearer key.
  const auto episode_of = [this, unauthorized](const httplib::Request& req, bool in_path) {
    const std::string t = bearer(req);
    if (t.empty()) throw unauthorized("missing bearer token (Authorization: Bearer <episode key>)");
    if (in_path) {
      const uint64_t id = episode_in_path(req);
      if (same_secret(t, config_.token) || service_.key_matches(id, t)) return id;
      throw unauthorized("this key does not open episode " + std::to_string(id));
    }
    if (const auto id = service_.episode_of_key(t)) return *id;
    if (same_secret(t, config_.token))
      throw bad_request("which episode? use the episode's base_url (/episodes/<id>/v1) or its api_key");
    throw unauthorized("unknown key (its episode may be closed)");
  };
  const auto any_token = [this, unauthorized](const httplib::Request& req) {
    const std::string t = bearer(req);
    if (t.empty() || !(same_secret(t, config_.token) || service_.episode_of_key(t)))
      throw unauthorized("missing or unknown bearer token");
  };

  const auto models = guarded([this, any_token](const httplib::Request& req, httplib::Response& res) {
    any_token(req);
    const json model = {{"id", kPolicyModelName}, {"object", "model"}, {"created", 0}, {"owned_by", "forge"},
                        {"forge", {{"policy_version", service_.policy_version()}}}};
    send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
  });
  server_->Get("/v1/models", models);
  server_->Get(R"(/episodes/([^/]+)/v1/models)", models);

  server_->Post("/v1/episodes", guarded([this, require_gateway_token](const httplib::Request& req,
                                                                      httplib::Response& res) {
    require_gateway_token(req);
    parse_body(req);
    json e = service_.open();
    e["base_url"] = url_ + "/episodes/" + std::to_string(e["id"].get<uint64_t>()) + "/v1";
    send_json(res, 200, e);
  }));
  server_->Get(R"(/v1/episodes/([^/]+))", guarded([this, episode_of](const httplib::Request& req,
                                                                       httplib::Response& res) {
    send_json(res, 200, service_.describe(episode_of(req, true)));
  }));
  using EpisodeAction = json (GatewayService::*)(uint64_t, const json&);
  const std::pair<const char*, EpisodeAction> actions[] = {{"tool", &GatewayService::tool},
                                                           {"answer", &GatewayService::answer},
                                                           {"reward", &GatewayService::reward},
                                                           {"close", &GatewayService::close}};
  for (const auto& [name, action] : actions)
    server_->Post(std::string(R"(/v1/episodes/([^/]+)/)") + name,
                  guarded([this, episode_of, action](const httplib::Request& req, httplib::Response& res) {
                    const uint64_t id = episode_of(req, true);
                    send_json(res, 200, (service_.*action)(id, parse_body(req)));
                  }));

  const auto chat = [this, episode_of](bool in_path) {
    return [this, episode_of, in_path](const httplib::Request& req, httplib::Response& res) {
      const uint64_t id = episode_of(req, in_path);
      const json body = parse_body(req);
      const bool stream = wants(body, "stream"), logprobs = wants(body, "logprobs");
      const GenerationReply r = service_.chat(id, body);
      if (stream) send_events(res, chat_reply_chunks(r));
      else send_json(res, 200, chat_reply(r, logprobs));
    };
  };
  const auto completion = [this, episode_of](bool in_path) {
    return [this, episode_of, in_path](const httplib::Request& req, httplib::Response& res) {
      const uint64_t id = episode_of(req, in_path);
      const json body = parse_body(req);
      const bool stream = wants(body, "stream");
      const bool logprobs = body.is_object() && body.contains("logprobs") && !body["logprobs"].is_null();
      const GenerationReply r = service_.completion(id, body);
      if (stream) send_events(res, completion_reply_chunks(r));
      else send_json(res, 200, completion_reply(r, logprobs));
    };
  };
  server_->Post(R"(/episodes/([^/]+)/v1/chat/completions)", guarded(chat(true)));
  server_->Post("/v1/chat/completions", guarded(chat(false)));
  server_->Post(R"(/episodes/([^/]+)/v1/completions)", guarded(completion(true)));
  server_->Post("/v1/completions", guarded(completion(false)));

  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413)
      send_json(res, 413, error_body("request body too large (gateway.max_request_kib)", "invalid_request_error", 413));
    else
      send_json(res, res.status,
                error_body("no route " + req.method + " " + req.path,
                           res.status == 404 ? "not_found_error" : "invalid_request_error", res.status));
  });
}

}  // namespace forge
