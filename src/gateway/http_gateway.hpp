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
// 409 closed, full, busy or overdue episode, 410 the run has finished, 411 a
// body sent with Transfer-Encoding (chunked; send Content-Length: a request
// with neither has no body), 413 body over gateway.max_request_kib, 415 a
// compressed body or a form, 503 no episode admitted yet (retry; the reply has
// Retry-After) or a failed generation, 504 generation past
// gateway.request_deadline_s. "stream": true answers as server-sent events
// (chat.completion.chunk / text_completion chunks, then [DONE]) once the
// generation is complete. Every reply carries "forge": the episode, the call
// index, the sampled token ids, their behaviour logprobs and versions.
//
// Connections carry one request each, and a client has gateway.client_io_s
// in all to send its request and take the reply (however it trickles bytes;
// time spent generating does not count), so a slow client holds a handler
// thread that long at most.
#pragma once
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "gateway/gateway_config.hpp"
#include "gateway/gateway_service.hpp"

namespace httplib {
class Server;
}

namespace forge {

struct QueuedConnections;

class HttpGateway {
 public:
  static constexpr int kStopSeconds = 10;      // stop() waits this long for the handler threads
  static constexpr int kReplyGraceSeconds = 2;  // ... and first this long for replies being written

  // Binds bind:port (0: a free port) and starts serving; InputError when it
  // cannot bind. name: this gateway in log lines ("gateway rank 3").
  HttpGateway(GatewayService& service, const GatewayConfig& config, int port, std::string name = "gateway");
  ~HttpGateway();
  HttpGateway(const HttpGateway&) = delete;
  HttpGateway& operator=(const HttpGateway&) = delete;

  const std::string& url() const { return url_; }  // http://host:port
  // How long the oldest connection whose request has not reached routing
  // (waiting for a handler thread, or still sending its headers) has
  // existed, seconds (0: none): its request may be any episode's.
  double oldest_queued_s() const;
  // Connections a handler thread is serving now.
  size_t connections_served() const;
  // Error when the server stopped accepting before stop() (httplib leaves
  // its accept loop on an error such as ENFILE or ENOMEM): every agent's
  // connection would be refused while the run went on.
  void check_listening() const;
  // Idempotent. Stops accepting, cuts the connections still sending their
  // request, lets those being replied to finish (up to kReplyGraceSeconds,
  // then cuts them) and waits up to kStopSeconds for the handler threads
  // (call GatewayService::stop first: it releases the handlers waiting on
  // it, which then reply 410). False, with a warning,
  // when they did not stop in time: they are left running (the process is
  // ending).
  bool stop();

 private:
  void add_routes();

  GatewayService& service_;
  GatewayConfig config_;
  std::string name_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::future<void> served_;  // ready once the server has stopped and its threads are joined
  std::string url_;
  std::shared_ptr<QueuedConnections> queued_;
};

}  // namespace forge
