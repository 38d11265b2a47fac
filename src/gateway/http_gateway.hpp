// The gateway's HTTP front (cpp-httplib): OpenAI-compatible endpoints and
// the episode endpoints, on a thread pool of gateway.http_threads.
//
//   GET  /v1/models                                 any valid token
//   POST /v1/episodes                               gateway token: open an episode
//   GET  /v1/episodes/{id}                          its calls so far (token ids)
//   POST /v1/episodes/{id}/tool|answer|reward|close
//   POST /episodes/{id}/v1/chat/completions         the episode's base URL
//   POST /episodes/{id}/v1/completions              (openai: base_url=...)
//   GET  /episodes/{id}/v1/models
//   POST /v1/chat/completions, /v1/completions      the episode named by its key
//
// Authorization: "Bearer <token>", either the gateway token or the
// episode's key (an episode's routes accept its own key only). Errors are
// OpenAI-shaped: {"error": {"message", "type", "code"}} with 400 malformed
// JSON or fields, 401 no or wrong token, 404 unknown episode or route,
// 409 closed episode, 410 the run has finished, 413 body over
// gateway.max_request_kib, 503 no episode admitted yet (retry; the reply
// has Retry-After) or a failed generation, 504 generation past
// gateway.request_deadline_s. "stream": true answers as server-sent events
// (chat.completion.chunk / text_completion chunks, then [DONE]) once the
// generation is complete. Every reply carries "forge": the episode, the call
// index, the sampled token ids, their behaviour logprobs and versions.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "gateway/gateway_config.hpp"
#include "gateway/gateway_service.hpp"

namespace httplib {
class Server;
}

namespace forge {

class HttpGateway {
 public:
  // Binds bind:port (0: a free port) and starts serving; InputError when it
  // cannot bind.
  HttpGateway(GatewayService& service, const GatewayConfig& config, int port);
  ~HttpGateway();
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  const std::string& url() const { return url_; }  // http://host:port
  // Connections accepted and waiting for a handler thread: while there are
  // any, some agent's request has not been seen yet, so no episode should
  // be judged idle.
  int64_t queued_connections() const { return *queued_; }
  void stop();                                      // idempotent

 private:
  void add_routes();

  GatewayService& service_;
  GatewayConfig config_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string url_;
  std::shared_ptr<std::atomic<int64_t>> queued_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace forge
