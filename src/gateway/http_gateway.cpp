#include "gateway/http_gateway.hpp"

#include <httplib.h>

#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.hpp"
#include "core/log.hpp"
#include "gateway/openai_replies.hpp"
#include "gateway/request_error.hpp"

namespace forge {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Connections accepted whose request has not been routed yet (waiting for a
// handler thread, or sending their headers or body), by arrival.
struct QueuedConnections {
  std::mutex mu;
  uint64_t next = 0;
  std::map<uint64_t, Clock::time_point> waiting;
};

namespace {

// What a request line and headers may take besides the body (OpenAI's
// clients send under 2 KiB); also what a connection reads past its request
// before it closes (ClientStream::linger).
constexpr size_t kHeaderBytes = size_t{64} << 10;

// A connection's socket for httplib, with one time budget for all its waits
// on the client: a client that trickles its request (or reads its reply
// slowly) runs out of it, however it paces its bytes. MSG_NOSIGNAL: a
// client gone mid-reply is an error, not SIGPIPE.
//
// It also bounds the bytes a connection may send (`max_bytes`): httplib
// reads a header line into memory until its newline, and any number of
// header lines, so a client that never ends a line grew the rank's memory
// without limit (380 MiB in 9 s from one connection), token or not. The
// request line and headers alone get kHeaderBytes (their end: an empty
// line); past it the read fails and httplib answers 400 (a megabyte of
// short header lines took ~24 MB of its header map).
class ClientStream : public httplib::Stream {
 public:
  ClientStream(int sock, Clock::duration budget, size_t max_bytes)
      : sock_(sock), left_(budget), bytes_left_(max_bytes) {}

  bool is_readable() const override { return wait(POLLIN); }
  bool is_writable() const override { return wait(POLLOUT); }
  ssize_t read(char* ptr, size_t size) override {
    while (begin_ == end_) {  // httplib reads requests byte by byte: buffer them
      if (bytes_left_ == 0 || !wait(POLLIN)) return -1;
      const ssize_t n = ::recv(sock_, buf_, std::min(sizeof buf_, bytes_left_), MSG_DONTWAIT);
      if (n > 0) bytes_left_ -= static_cast<size_t>(n);
      if (n == 0) return 0;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      begin_ = 0;
      end_ = static_cast<size_t>(std::max<ssize_t>(n, 0));
    }
    size_t n = std::min(size, end_ - begin_);
    if (!headers_done_) {
      if (header_bytes_ == kHeaderBytes) return -1;
      n = std::min(n, kHeaderBytes - header_bytes_);
      header_bytes_ += n;
      for (size_t i = 0; i < n && !headers_done_; ++i) {
        const char c = buf_[begin_ + i];
        if (c == '\n') {
          headers_done_ = line_bytes_ == 0 && seen_line_;
          seen_line_ = true;
          line_bytes_ = 0;
        } else if (c != '\r') {
          ++line_bytes_;
        }
      }
    }
    std::memcpy(ptr, buf_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      if (!wait(POLLOUT)) return -1;
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return n;
    }
  }
  // Ends the reply (FIN) and reads what the client still sends, up to
  // `limit` bytes: closing with unread bytes would reset the connection,
  // and a client still sending its body would lose the reply.
  void drain(size_t limit) {
    ::shutdown(sock_, SHUT_WR);
    char buf[4096];
    for (size_t n = 0; n < limit;) {
      const ssize_t r = read(buf, sizeof buf);
      if (r <= 0) return;
      n += static_cast<size_t>(r);
    }
  }
  // After a whole request: ends the reply (FIN) and reads what the client
  // sent past it (a trailing CRLF, a pipelined request), until it closes,
  // sends nothing for kLingerIdle, or kLingerTotal has passed; a client that
  // keeps its socket open holds the handler thread that long, no longer.
  void linger() {
    static constexpr std::chrono::milliseconds kLingerIdle{200}, kLingerTotal{1000};
    ::shutdown(sock_, SHUT_WR);
    const auto until = Clock::now() + kLingerTotal;
    char buf[4096];
    for (size_t n = 0; n < kHeaderBytes;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      pollfd p{sock_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(std::min(left, kLingerIdle).count())) <= 0) return;
      const ssize_t r = ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
      n += static_cast<size_t>(std::max<ssize_t>(r, 0));
    }
  }
  // Not needed by the gateway's handlers.
  void get_remote_ip_and_port(std::string&, int&) const override {}
  void get_local_ip_and_port(std::string&, int&) const override {}
  int socket() const override { return sock_; }

 private:
  // Waits for `events` out of what is left of the budget.
  bool wait(short events) const {
    while (left_ > Clock::duration::zero()) {
      pollfd p{sock_, events, 0};
      const auto start = Clock::now();
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left_).count();
      const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1 << 30)));
      left_ -= Clock::now() - start;
      if (r > 0) return true;  // ready, or hung up / failed: the recv or send says which
      if (r < 0 && errno != EINTR) return false;
    }
    return false;
  }

  int sock_;
  mutable Clock::duration left_;
  size_t bytes_left_;
  char buf_[4096];
  size_t begin_ = 0, end_ = 0;
  // The request line and headers read so far (the current line's bytes
  // without '\r', whether a line has ended): they end at an empty line.
  size_t header_bytes_ = 0, line_bytes_ = 0;
  bool seen_line_ = false, headers_done_ = false;
};

// Set on a handler thread when its request was answered without reading the
// body (refuse_unbounded_body): the connection then drains it before closing.
thread_local bool body_unread = false;
// The connection a handler thread serves, as QueuedConnections knows it,
// and its socket.
thread_local uint64_t serving_id = 0;
thread_local int serving_sock = -1;

// The connection's request has reached routing: it is no longer unseen.
void mark_routed(QueuedConnections& queued) {
  std::lock_guard lock(queued.mu);
  queued.waiting.erase(serving_id);
}

// Debian's libcpp-httplib is built with a listen backlog of 5: a burst of
// connections overflows it and the kernel drops handshakes. Listening again
// on the bound socket raises the backlog (Linux updates it in place).
// Connections are served here rather than by httplib's own loop: one request
// each (a kept-alive idle connection would hold its handler thread while
// other requests queue), through a ClientStream, and tracked so that stop()
// can cut them. A connection whose request was read and handed to a handler
// is replying: stop() lets it finish (a reply cut mid-body leaves the client
// not knowing whether its request was done), within a grace.
class GatewayHttpServer : public httplib::Server {
 public:
  explicit GatewayHttpServer(Clock::duration client_io) : client_io_(client_io) {}
  bool raise_listen_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
  size_t serving() {
    std::lock_guard lock(mu_);
    return serving_.size();
  }
  // The calling handler thread's connection has its request and is
  // replying. False once stop() has begun: the request is not to be acted on
  // (its connection may be cut already).
  bool mark_replying() {
    std::lock_guard lock(mu_);
    if (const auto it = serving_.find(serving_sock); it != serving_.end()) it->second = true;
    return !cutting_;
  }
  // Refuses the connections not yet started and shuts down those still
  // waiting on their client (their waits end at once); the replying ones
  // have up to `grace` to finish before they are shut down too.
  void cut_connections(Clock::duration grace) {
    std::unique_lock lock(mu_);
    cutting_ = true;
    for (const auto& [sock, replying] : serving_)
      if (!replying) ::shutdown(sock, SHUT_RDWR);
    ended_.wait_for(lock, grace, [&] {
      return std::none_of(serving_.begin(), serving_.end(), [](const auto& s) { return s.second; });
    });
    for (const auto& [sock, replying] : serving_) ::shutdown(sock, SHUT_RDWR);
  }

 private:
  bool process_and_close_socket(int sock) override {
    bool ok = false;
    if (begin_serving(sock)) {
      ClientStream strm(sock, client_io_, payload_max_length_ + kHeaderBytes);
      bool closed = false;
      serving_sock = sock;
      ok = process_request(strm, /*close_connection=*/true, closed, nullptr);
      // Bytes the client sent that were not read (a refused body; past
      // Content-Length, a GET's body, a pipelined request) would make the
      // close a reset, which can lose the reply: read them first. A refused
      // body's drain still counts as replying, so stop() gives it the reply
      // grace (a cut would reset); otherwise the reply is out and stop() may
      // cut the connection from here.
      if (std::exchange(body_unread, false)) {
        strm.drain(payload_max_length_);
      } else {
        done_replying(sock);
        strm.linger();
      }
      serving_sock = -1;
      std::lock_guard lock(mu_);
      serving_.erase(sock);  // before close: the number may be reused
      ended_.notify_all();
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
  }
  void done_replying(int sock) {
    std::lock_guard lock(mu_);
    if (const auto it = serving_.find(sock); it != serving_.end()) it->second = false;
    ended_.notify_all();  // stop() waits for no connection replying
  }
  bool begin_serving(int sock) {
    std::lock_guard lock(mu_);
    if (cutting_ || svr_sock_ == INVALID_SOCKET) return false;
    serving_.emplace(sock, false);
    return true;
  }

  const Clock::duration client_io_;
  std::mutex mu_;
  std::condition_variable ended_;
  std::map<int, bool> serving_;  // socket -> replying
  bool cutting_ = false;
};

// The server HttpGateway made (server_ is declared as httplib's base).
GatewayHttpServer& gateway_server(httplib::Server& server) { return static_cast<GatewayHttpServer&>(server); }

// httplib's thread pool, recording when each connection began to wait for a
// thread.
class QueueingThreadPool : public httplib::TaskQueue {
 public:
  QueueingThreadPool(size_t threads, std::shared_ptr<QueuedConnections> queued)
      : pool_(threads), queued_(std::move(queued)) {}
  void enqueue(std::function<void()> fn) override {
    uint64_t id = 0;
    {
      std::lock_guard lock(queued_->mu);
      id = queued_->next++;
      queued_->waiting.emplace(id, Clock::now());
    }
    // The entry stays until routing (mark_routed) or the end of the
    // connection, whichever comes first.
    pool_.enqueue([queued = queued_, id, fn = std::move(fn)] {
      serving_id = id;
      fn();
      mark_routed(*queued);
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
  std::shared_ptr<QueuedConnections> queued_;
};

// OpenAI's error shape; "code" is a name where one applies, else the status.
json error_body(const std::string& message, const std::string& type, int status, const std::string& code = {}) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code.empty() ? json(status) : json(code)}}}};
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// The token of "Authorization: Bearer <token>" (the scheme in any case).
std::string bearer(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  if (h.size() < 7 || strncasecmp(h.c_str(), "bearer ", 7) != 0) return "";
  const size_t start = h.find_first_not_of(' ', 7);
  return start == std::string::npos ? "" : h.substr(start);
}

// Constant-time comparison of secrets.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned>(a[i] ^ b[i]);
  return diff == 0;
}

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  json body = parse_client_json(req.body, "the body");
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  return body;
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

// A completion's "logprobs": OpenAI's is a count of top alternatives (0 to
// 5; forge gives each token's own logprob, no alternatives); true and false
// as chat's are taken too.
bool wants_completion_logprobs(const json& body) {
  if (!body.is_object() || !body.contains("logprobs") || body["logprobs"].is_null()) return false;
  const json& v = body["logprobs"];
  if (v.is_boolean()) return v.get<bool>();
  // A count, also written 2.0 (as count fields may be).
  if (v.is_number() && v.get<double>() >= 0 && std::floor(v.get<double>()) == v.get<double>()) return true;
  throw bad_request("\"logprobs\" must be a count (a whole number >= 0), true or false");
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

// A body must come with Content-Length (or none at all: an empty body) and
// uncompressed: only then does
// gateway.max_request_kib bound it before it is read (httplib reads chunked
// and length-less bodies, and inflates compressed ones, without a limit).
// A declared length over the limit is refused here too: httplib would read
// and discard the whole of it first.
httplib::Server::HandlerResponse refuse_unbounded_body(const httplib::Request& req, httplib::Response& res,
                                                       size_t max_bytes) {
  const bool has_body = req.method != "GET" && req.method != "HEAD" && req.method != "OPTIONS";
  // A request with neither Content-Length nor Transfer-Encoding has no body
  // (RFC 9112 6.3; `curl -X POST` sends one so): said so to httplib, which
  // would otherwise read until the client closes.
  if (has_body && !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding"))
    const_cast<httplib::Request&>(req).set_header("Content-Length", "0");
  // Two different lengths: which one frames the body is ambiguous (a proxy
  // that takes the other would see another request), refused as RFC 9112 says.
  // One pass: httplib's get_header_value(key, i) walks i copies, and a
  // request of 60,000 copies took 38 s of the rank's CPU.
  bool lengths_differ = false;
  const auto [first_length, end_length] = req.headers.equal_range("Content-Length");
  for (auto it = first_length; it != end_length; ++it) lengths_differ |= it->second != first_length->second;
  const std::string encoding = req.get_header_value("Content-Encoding");
  const std::string length = req.get_header_value("Content-Length");
  const std::string type = req.get_header_value("Content-Type");
  size_t declared = 0;
  const std::errc parsed = std::from_chars(length.data(), length.data() + length.size(), declared).ec;
  const bool digits = !length.empty() && std::all_of(length.begin(), length.end(), [](char c) { return c >= '0' && c <= '9'; });
  const bool too_long = digits && (parsed == std::errc::result_out_of_range || declared > max_bytes);
  // httplib parses a form body itself (a urlencoded one only up to 8 KiB,
  // refused past it as 413; a multipart one into parts, leaving the body
  // empty): neither reaches a handler as JSON.
  const auto is_form = [&](const char* prefix) { return strncasecmp(type.c_str(), prefix, std::strlen(prefix)) == 0; };
  if (lengths_differ)
    send_json(res, 400, error_body("two different Content-Length headers", "invalid_request_error", 400));
  else if (req.has_header("Content-Length") && !digits)
    send_json(res, 400,
              error_body("Content-Length '" + length.substr(0, 40) + "' is not a byte count", "invalid_request_error",
                         400));
  else if (too_long)
    send_json(res, 413,
              error_body("request body too large (gateway.max_request_kib)", "invalid_request_error", 413));
  else if (req.has_header("Transfer-Encoding"))
    send_json(res, 411,
              error_body("send the body with a Content-Length header (Transfer-Encoding is not supported)",
                         "invalid_request_error", 411));
  else if (!encoding.empty() && strcasecmp(encoding.c_str(), "identity") != 0)
    send_json(res, 415,
              error_body("Content-Encoding '" + encoding + "' is not supported: send the body uncompressed",
                         "invalid_request_error", 415));
  else if (has_body && (is_form("application/x-www-form-urlencoded") || is_form("multipart/form-data")))
    send_json(res, 415,
              error_body("Content-Type '" + type.substr(0, 60) +
                             "' is a form: send the body as JSON (Content-Type: application/json)",
                         "invalid_request_error", 415));
  else
    return httplib::Server::HandlerResponse::Unhandled;
  body_unread = true;
  return httplib::Server::HandlerResponse::Handled;
}

// The message of an error httplib answered before any route ran.
std::string http_error_message(int status, const httplib::Request& req) {
  switch (status) {
    case 404: return "no route " + req.method + " " + req.path;
    case 413: return "request body too large (gateway.max_request_kib)";
    case 400: return "malformed HTTP request (bad request line or header, incomplete body or bad Content-Length)";
    case 414:
    case 431: return "request line or header too long";
    case 416:
      return "Range '" + req.get_header_value("Range").substr(0, 60) +
             "' is not a byte range (the gateway sends whole replies: leave Range out)";
    default: return "HTTP error " + std::to_string(status);
  }
}

}  // namespace

HttpGateway::HttpGateway(GatewayService& service, const GatewayConfig& config, int port, std::string name)
    : service_(service),
      config_(config),
      name_(std::move(name)),
      server_(std::make_unique<GatewayHttpServer>(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config.client_io_s)))),
      queued_(std::make_shared<QueuedConnections>()) {
  const int threads = config.http_threads;
  server_->new_task_queue = [threads, queued = queued_] {
    return new QueueingThreadPool(static_cast<size_t>(threads), queued);
  };
  server_->set_payload_max_length(static_cast<size_t>(config.max_request_kib) * 1024);
  const size_t max_bytes = static_cast<size_t>(config.max_request_kib) * 1024;
  auto& server = gateway_server(*server_);
  const auto refuse_body = [max_bytes, &server](const httplib::Request& req, httplib::Response& res) {
    // No byte ranges: httplib would apply a Range header to every reply,
    // error replies included, and 300 ranges of "0-" made one reply 74 MiB.
    const_cast<httplib::Request&>(req).ranges.clear();
    const auto handled = refuse_unbounded_body(req, res, max_bytes);
    if (handled == httplib::Server::HandlerResponse::Handled) server.mark_replying();
    return handled;
  };
  server_->set_pre_routing_handler(refuse_body);
  // "Expect: 100-continue": httplib answers 100 before any route runs, so a
  // body the gateway refuses was sent whole first; refused here, the client
  // gets the error in place of the 100 and sends nothing.
  server_->set_expect_100_continue_handler([refuse_body](const httplib::Request& req, httplib::Response& res) {
    return refuse_body(req, res) == httplib::Server::HandlerResponse::Handled ? res.status : 100;
  });
  add_routes();
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(config.bind);
    if (bound <= 0) throw InputError("gateway: cannot bind " + config.bind + " on any port");
  } else if (!server_->bind_to_port(config.bind, port)) {
    throw InputError("gateway: cannot bind " + config.bind + ":" + std::to_string(port) +
                     " (in use? set gateway.port, or 0 for any free port)");
  }
  if (!gateway_server(*server_).raise_listen_backlog(4096))
    throw Error("gateway: cannot raise the listen backlog of " + config.bind + ":" + std::to_string(bound));
  // Listening on every interface: name the host, so the URL can be used.
  std::string host = config.bind;
  if (host == "0.0.0.0" || host == "::") {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) == 0 && name[0]) host = name;
  }
  // An IPv6 address goes in brackets (RFC 3986: http://[::1]:8000).
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  url_ = "http://" + host + ":" + std::to_string(bound);
  // stop() is a no-op until the server runs: wait for it (or for a listen
  // that failed at once) so that an early stop cannot miss it.
  std::promise<void> served;
  served_ = served.get_future();
  thread_ = std::thread([this, served = std::move(served)]() mutable {
    server_->listen_after_bind();  // returns once its handler threads are joined
    served.set_value();
  });
  while (!server_->is_running() && served_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

HttpGateway::~HttpGateway() { stop(); }

size_t HttpGateway::connections_served() const {
  return gateway_server(*server_).serving();
}

double HttpGateway::oldest_queued_s() const {
  std::lock_guard lock(queued_->mu);
  if (queued_->waiting.empty()) return 0;
  return std::chrono::duration<double>(Clock::now() - queued_->waiting.begin()->second).count();
}

void HttpGateway::check_listening() const {
  if (thread_.joinable() && served_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    throw Error(name_ + ": the HTTP server at " + url_ + " stopped accepting connections (accept() failed: ENFILE, ENOBUFS, ENOMEM or a network error)");
}

bool HttpGateway::stop() {
  if (!thread_.joinable()) return true;
  server_->stop();
  gateway_server(*server_).cut_connections(std::chrono::seconds(kReplyGraceSeconds));
  if (served_.wait_for(std::chrono::seconds(kStopSeconds)) != std::future_status::ready) {
    log_warn(name_ + ": HTTP workers did not stop within " + std::to_string(kStopSeconds) +
             " s; going on without them");
    thread_.detach();
    static_cast<void>(server_.release());  // they still use it
    return false;
  }
  thread_.join();
  return true;
}

void HttpGateway::add_routes() {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Errors become OpenAI-shaped bodies; nothing escapes to the server.
  // The handler has the whole request: its connection is replying.
  const auto guarded = [&server = gateway_server(*server_), queued = queued_](Handler h) {
    return [h = std::move(h), &server, queued](const httplib::Request& req, httplib::Response& res) {
      // Seen once its body is in: an episode does not expire as idle while
      // a request for it is still arriving.
      mark_routed(*queued);
      if (!server.mark_replying()) {
        send_json(res, 410, error_body("the run has finished (the gateway is stopping)", "run_finished", 410));
        return;
      }
      try {
        h(req, res);
      } catch (const RequestError& e) {
        send_json(res, e.status(), error_body(e.what(), e.type(), e.status(), e.code()));
        if (e.status() == 503) res.set_header("Retry-After", "1");
        res.set_header("x-should-retry", e.retryable() ? "true" : "false");
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

  // The root route takes any key (of an open or a closed episode: it tells
  // nothing of one); an episode's route its own (or the gateway
  // token), and only while the episode is open, as its other routes.
  // The list, or (one_model: the last path part names it) the one model.
  const auto models = [this, guarded, any_token, episode_of](bool in_path, bool one_model) {
    return guarded([this, any_token, episode_of, in_path, one_model](const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (in_path) service_.require_open(episode_of(req, true));
      else any_token(req);
      const json model = {{"id", kPolicyModelName}, {"object", "model"}, {"created", 0}, {"owned_by", "forge"},
                          {"forge", {{"policy_version", service_.policy_version()}}}};
      if (!one_model) return send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
      const std::string asked = req.matches[req.matches.size() - 1].str();
      if (asked != kPolicyModelName)
        throw RequestError(404, "not_found_error",
                           "no model '" + asked.substr(0, 80) + "': this gateway serves " + kPolicyModelName);
      send_json(res, 200, model);
    });
  };
  server_->Get("/v1/models", models(false, false));
  server_->Get(R"(/v1/models/([^/]+))", models(false, true));
  server_->Get(R"(/episodes/([^/]+)/v1/models)", models(true, false));
  server_->Get(R"(/episodes/([^/]+)/v1/models/([^/]+))", models(true, true));

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
      if (stream) send_events(res, chat_reply_chunks(r, logprobs));
      else send_json(res, 200, chat_reply(r, logprobs));
    };
  };
  const auto completion = [this, episode_of](bool in_path) {
    return [this, episode_of, in_path](const httplib::Request& req, httplib::Response& res) {
      const uint64_t id = episode_of(req, in_path);
      const json body = parse_body(req);
      const bool stream = wants(body, "stream");
      const bool logprobs = wants_completion_logprobs(body);
      const GenerationReply r = service_.completion(id, body);
      if (stream) send_events(res, completion_reply_chunks(r, logprobs));
      else send_json(res, 200, completion_reply(r, logprobs));
    };
  };
  server_->Post(R"(/episodes/([^/]+)/v1/chat/completions)", guarded(chat(true)));
  server_->Post("/v1/chat/completions", guarded(chat(false)));
  server_->Post(R"(/episodes/([^/]+)/v1/completions)", guarded(completion(true)));
  server_->Post("/v1/completions", guarded(completion(false)));

  server_->set_error_handler([&server = gateway_server(*server_)](const httplib::Request& req,
                                                                                    httplib::Response& res) {
    server.mark_replying();  // httplib's own error replies are replies too
    if (!res.body.empty()) return;
    const char* type = res.status == 404   ? "not_found_error"
                       : res.status >= 500 ? "server_error"
                                           : "invalid_request_error";
    send_json(res, res.status, error_body(http_error_message(res.status, req), type, res.status));
  });
}

}  // namespace forge
