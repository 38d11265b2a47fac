// The gateway's HTTP front in process, on loopback, with raw requests: an
// episode served end to end, what httplib would read without a bound refused
// before the body, its own errors named, stalled clients cut by stop() and
// a reply being made when stop() begins delivered whole.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "agent/agent_episode.hpp"
#include "core/error.hpp"
#include "env/env_mix.hpp"
#include "gateway/http_gateway.hpp"

namespace forge {
namespace {

using nlohmann::json;

const std::string kToken = "test-token-1234";

// The loopback address of the gateway at `url` (http://127.0.0.1:PORT).
sockaddr_in loopback(const std::string& url) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  return a;
}

// A client connection to the gateway at `url`; reads give up after 60 s so
// that a broken server fails the test instead of hanging it.
class Client {
 public:
  explicit Client(const std::string& url) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    const sockaddr_in a = loopback(url);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
    const timeval tv{60, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Client() { ::close(fd_); }
  void send(const std::string& data) {
    for (size_t off = 0; off < data.size();) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      off += static_cast<size_t>(n);
    }
  }
  // False once the server has closed the connection (a reset: the send
  // fails, or a recv sees the end).
  bool try_send(const std::string& data) {
    char c;
    if (::recv(fd_, &c, 1, MSG_DONTWAIT | MSG_PEEK) == 0) return false;
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  void end_sending() { ::shutdown(fd_, SHUT_WR); }
  int fd() const { return fd_; }
  // Everything until the server closes (a reset after the reply included).
  std::string receive() {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  int fd_;
};

struct Reply {
  int status = 0;
  std::string head;  // status line and headers
  json body;
};

Reply round_trip(const std::string& url, const std::string& request, bool end_sending = false) {
  Client c(url);
  c.send(request);
  if (end_sending) c.end_sending();
  const std::string r = c.receive();
  Reply out;
  if (r.size() > 12) out.status = std::stoi(r.substr(9, 3));  // "HTTP/1.1 NNN"
  const size_t body = r.find("\r\n\r\n");
  out.head = r.substr(0, body);
  if (body != std::string::npos) out.body = json::parse(r.substr(body + 4), nullptr, false);
  return out;
}

std::string message(const Reply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"].value("message", "") : "";
}

struct GatewayHttp : ::testing::Test {
  GatewayConfig gw;
  SamplingParams sampling;

  GatewayHttp() {
    gw.bind = "127.0.0.1";
    gw.token = kToken;
    gw.http_threads = 4;
    gw.max_request_kib = 256;
  }
  // One admitted single-episode group (episode and slot `id`).
  static void add_one_episode(GatewayService& service, uint64_t id = 0) {
    EnvConfig env;
    env.perturb = false;
    const EnvMix mix(env);
    std::vector<std::unique_ptr<GatewayEpisode>> group;
    group.push_back(std::make_unique<GatewayEpisode>(
        mix.make_for(11), 11, episode_style(PerturbationSampler(false, {}), 11, 0, StyleMode::kTrain),
        AgentConfig(), id, id));
    service.add_group(id, std::move(group));
  }
};

TEST_F(GatewayHttp, RefusesUnboundedBodiesAndNamesHttpErrors) {
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  add_one_episode(service);
  HttpGateway http(service, gw, 0, "test gateway");
  const std::string url = http.url(), auth = "Authorization: Bearer " + kToken + "\r\n";
  const std::string open = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\n" + auth;

  // An episode opened and a tool run, each body with its Content-Length.
  Reply r = round_trip(url, open + "Content-Length: 2\r\n\r\n{}");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string tool = R"({"name": "nope", "arguments": "{\"input\": \"1\"}"})";
  r = round_trip(url, "POST /v1/episodes/" + std::to_string(r.body["id"].get<uint64_t>()) +
                          "/tool HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + r.body["api_key"].get<std::string>() +
                          "\r\nContent-Length: " + std::to_string(tool.size()) + "\r\n\r\n" + tool);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["kind"], "bad_call") << r.body;

  r = round_trip(url, open + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 411) << r.body;
  EXPECT_NE(message(r).find("Content-Length"), std::string::npos) << r.body;
  // Neither Content-Length nor Transfer-Encoding: no body (it was 411; and
  // httplib, left to itself, reads such a body until the client closes).
  r = round_trip(url, "POST /v1/episodes/999/close HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n");
  EXPECT_EQ(r.status, 404) << r.body;  // the handler ran, on an empty body
  // Two different lengths are refused; the same one twice is one length.
  r = round_trip(url, open + "Content-Length: 2\r\nContent-Length: 100\r\n\r\n{}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(message(r).find("two different Content-Length headers"), std::string::npos) << r.body;
  r = round_trip(url, open + "Content-Length: 2\r\ncontent-length: 2\r\nCONTENT-LENGTH: 3\r\n\r\n{}");
  EXPECT_EQ(r.status, 400) << r.body;  // the third differs
  r = round_trip(url, "POST /v1/episodes/999/close HTTP/1.1\r\nHost: x\r\n" + auth +
                          "Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}");
  EXPECT_EQ(r.status, 404) << r.body;  // the handler ran
  r = round_trip(url, open + "Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_NE(message(r).find("gzip"), std::string::npos) << r.body;

  // A Content-Length that is not a byte count was read as 0: the handler ran
  // on an empty body ({"abandon": true} closed an episode as not abandoned).
  r = round_trip(url, open + "Content-Length: abc\r\n\r\n{}");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(message(r).find("Content-Length 'abc' is not a byte count"), std::string::npos) << r.body;
  // A form (curl -d's default type) httplib would parse itself: a urlencoded
  // body over 8 KiB was refused as "too large (gateway.max_request_kib)".
  const std::string form = std::string(9000, 'x');
  r = round_trip(url, open + "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
                          std::to_string(form.size()) + "\r\n\r\n" + form);
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_NE(message(r).find("is a form: send the body as JSON"), std::string::npos) << r.body;
  r = round_trip(url, open + "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(r.status, 415) << r.body;
  // Bytes past the body (a trailing CRLF) are read before the close: the
  // reply arrives whole, not cut by a reset.
  r = round_trip(url, "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n" + std::string(20000, ' '));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.body.is_object() && r.body.contains("data")) << "the reply was cut: " << r.body;

  r = round_trip(url, open + "Content-Length: 300000\r\n\r\n" + std::string(300000, ' '));
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_NE(message(r).find("too large"), std::string::npos) << r.body;
  // "Expect: 100-continue": an oversized body is refused in place of the
  // 100, before the client sends it (httplib said 100 first); a body within
  // the bound gets the 100, then its reply.
  {
    Client c(url);
    c.send(open + "Expect: 100-continue\r\nContent-Length: 300000\r\n\r\n");
    const std::string reply = c.receive();
    EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 413") << reply;
    EXPECT_NE(reply.find("too large"), std::string::npos) << reply;
  }
  {
    Client c(url);
    c.send("POST /v1/episodes/999/close HTTP/1.1\r\nHost: x\r\n" + auth +
           "Expect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    char head[25] = {};
    ASSERT_EQ(::recv(c.fd(), head, 25, MSG_WAITALL), 25);
    EXPECT_EQ(std::string(head, 25), "HTTP/1.1 100 Continue\r\n\r\n");
    c.send("{}");
    const std::string reply = c.receive();
    EXPECT_EQ(reply.substr(0, 12), "HTTP/1.1 404") << reply;  // the handler ran on the body
  }
  r = round_trip(url, open + "Content-Length: 100\r\n\r\n{}", /*end_sending=*/true);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(message(r).find("malformed HTTP request"), std::string::npos) << r.body;
  r = round_trip(url, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(message(r).find("no route GET /nowhere"), std::string::npos) << r.body;

  // JSON nested 100,000 deep: 400 naming the limit, and the gateway goes on.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  r = round_trip(url, open + "Content-Length: " + std::to_string(deep.size()) + "\r\n\r\n" + deep);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(message(r).find("nests deeper than 64"), std::string::npos) << r.body;

  // The bearer scheme in any case.
  r = round_trip(url, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: bearer " + kToken + "\r\n\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["data"][0]["id"], "forge-policy");
  // A Range httplib cannot parse is named (it was "HTTP error 416").
  r = round_trip(url, "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + "Range: garbage\r\n\r\n");
  EXPECT_EQ(r.status, 416) << r.body;
  EXPECT_NE(message(r).find("Range 'garbage' is not a byte range"), std::string::npos) << r.body;
}

// An episode's routes take its own key (or the gateway token), the models
// list included; a body that is not a JSON object opens no episode.
TEST_F(GatewayHttp, EpisodeRoutesTakeTheirOwnKeyAndObjectBodies) {
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  add_one_episode(service, 0);
  add_one_episode(service, 1);
  HttpGateway http(service, gw, 0, "test gateway");
  const std::string url = http.url(), auth = "Authorization: Bearer " + kToken + "\r\n";
  const std::string open = "POST /v1/episodes HTTP/1.1\r\nHost: x\r\n" + auth;
  for (const std::string body : {"\"x\"", "[1]", "3"}) {
    const Reply r = round_trip(url, open + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    EXPECT_EQ(r.status, 400) << body << ": " << r.body;
    EXPECT_NE(message(r).find("must be a JSON object"), std::string::npos) << r.body;
  }
  std::vector<Reply> opened;
  for (int i = 0; i < 2; ++i) {  // both admitted episodes are still there to open
    opened.push_back(round_trip(url, open + "Content-Length: 2\r\n\r\n{}"));
    ASSERT_EQ(opened.back().status, 200) << opened.back().body;
  }
  const auto models = [&](const std::string& path, const std::string& key) {
    return round_trip(url, "GET " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\n\r\n");
  };
  const std::string id0 = std::to_string(opened[0].body["id"].get<uint64_t>());
  const std::string id1 = std::to_string(opened[1].body["id"].get<uint64_t>());
  const std::string key0 = opened[0].body["api_key"].get<std::string>();
  EXPECT_EQ(models("/episodes/" + id0 + "/v1/models", key0).status, 200);
  EXPECT_EQ(models("/episodes/" + id0 + "/v1/models", kToken).status, 200);
  EXPECT_EQ(models("/v1/models", key0).status, 200);
  // One model by name (the OpenAI client's models.retrieve), at both roots.
  for (const std::string& path : {std::string("/v1/models/forge-policy"), "/episodes/" + id0 + "/v1/models/forge-policy"}) {
    const Reply one = models(path, key0);
    EXPECT_EQ(one.status, 200) << path << ": " << one.body;
    EXPECT_EQ(one.body.value("id", ""), "forge-policy") << one.body;
    EXPECT_EQ(one.body.value("object", ""), "model") << one.body;
  }
  const Reply unknown = models("/v1/models/gpt-4", key0);
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_NE(message(unknown).find("no model 'gpt-4'"), std::string::npos) << unknown.body;
  EXPECT_EQ(models("/episodes/" + id0 + "/v1/models/gpt-4", key0).status, 404);
  const Reply other = models("/episodes/" + id1 + "/v1/models", key0);
  EXPECT_EQ(other.status, 401) << other.body;
  EXPECT_NE(message(other).find("does not open episode " + id1), std::string::npos) << other.body;
  EXPECT_EQ(models("/episodes/abc/v1/models", key0).status, 404);
  // With the gateway token, an id no episode has is 404 as on the other
  // routes (it answered 200).
  const Reply none = models("/episodes/987654/v1/models", kToken);
  EXPECT_EQ(none.status, 404) << none.body;
  EXPECT_NE(message(none).find("no open episode 987654"), std::string::npos) << none.body;
  // A closed episode's: 409, with its own key and with the gateway token.
  const Reply closed = round_trip(url, "POST /v1/episodes/" + id0 + "/close HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                           key0 + "\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(closed.status, 200) << closed.body;
  for (const std::string& key : {key0, kToken}) {
    const Reply after = models("/episodes/" + id0 + "/v1/models", key);
    EXPECT_EQ(after.status, 409) << after.body;
    EXPECT_NE(message(after).find("episode " + id0 + " is closed"), std::string::npos) << after.body;
    // OpenAI-shaped, and final: OpenAI's clients would retry a 409 unless told not to.
    EXPECT_EQ(after.body["error"]["code"], 409) << after.body;
    EXPECT_TRUE(after.body["error"].contains("param")) << after.body;
    EXPECT_NE(after.head.find("x-should-retry: false"), std::string::npos) << after.head;
  }
}

// A client that trickles its request, a byte every 100 ms, is cut once it
// has had gateway.client_io_s in all (a per-read timeout never fires on it).
TEST_F(GatewayHttp, ATricklingClientIsCutAtItsTimeBudget) {
  gw.client_io_s = 1;
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  HttpGateway http(service, gw, 0, "test gateway");
  Client trickle(http.url());
  const auto began = std::chrono::steady_clock::now();
  trickle.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ");
  bool cut = false;
  for (int i = 0; i < 100 && !cut; ++i) {  // 10 s of trickling at most
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cut = !trickle.try_send("a");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_TRUE(cut) << "a client trickling for 10 s was still served";
  // at its budget (1 s), not at some multiple of it: the slack is the
  // reset's way back to this client on a loaded machine
  EXPECT_LT(seconds, gw.client_io_s + 2.0) << "cut after " << seconds << " s";
  EXPECT_EQ(trickle.receive().find(" 200 "), std::string::npos);
  service.stop("the run has finished");
  EXPECT_TRUE(http.stop());
}

// What a client sends cannot grow the rank's memory or the reply: a header
// line that never ends is cut at max_request_kib + 64 KiB (httplib kept
// reading it into memory for client_io_s), a Range header is ignored (it
// made every reply, errors included, a multipart copy per range), and a
// request whose body is still arriving counts as unseen (its episode is not
// idle).
// An IPv6 address is named in brackets in the URL (RFC 3986; found by
// review: "http://::1:PORT").
TEST_F(GatewayHttp, AnIpv6AddressIsBracketedInTheUrl) {
  gw.bind = "::1";
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  std::unique_ptr<HttpGateway> http;
  try {
    http = std::make_unique<HttpGateway>(service, gw, 0, "test gateway");
  } catch (const InputError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(http->url().rfind("http://[::1]:", 0), 0u) << http->url();
  service.stop("the run has finished");
  EXPECT_TRUE(http->stop());
}

TEST_F(GatewayHttp, ClientsCannotGrowMemoryRepliesOrIdleness) {
  gw.client_io_s = 60;
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  HttpGateway http(service, gw, 0, "test gateway");
  {
    Client bomb(http.url());
    bomb.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    const std::string chunk(64 << 10, 'A');
    size_t sent = 0;
    while (sent < (size_t{64} << 20) && bomb.try_send(chunk)) sent += chunk.size();
    EXPECT_LT(sent, size_t{64} << 20) << "the gateway read 64 MiB of one header line";
  }
  // The request line and headers get 64 KiB, however short their lines (a
  // megabyte of them filled httplib's header map, 24 MB, and a check that
  // walked it took 38 s): past it, 400. Just under it, the request is read.
  const auto padded = [&](size_t lines) {
    std::string r = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken + "\r\n";
    for (size_t i = 0; i < lines; ++i) r += "X-Pad: a\r\n";
    return r + "\r\n";
  };
  {
    Client many(http.url());
    const std::string request = padded(20000);
    for (size_t off = 0; off < request.size() && many.try_send(request.substr(off, 4096));) off += 4096;
    const std::string reply = many.receive();
    EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply.substr(0, 200);
  }
  const std::string under = padded(6000);
  ASSERT_LT(under.size(), size_t{64} << 10);
  EXPECT_EQ(round_trip(http.url(), under).status, 200);
  std::string ranges;
  for (int i = 0; i < 300; ++i) ranges += i ? ",0-" : "0-";
  Client ranged(http.url());
  ranged.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nRange: bytes=" + ranges + "\r\n\r\n");
  const std::string reply = ranged.receive();
  EXPECT_EQ(reply.rfind("HTTP/1.1 401", 0), 0u) << reply.substr(0, 200);
  EXPECT_LT(reply.size(), 4096u);
  EXPECT_EQ(reply.find("multipart"), std::string::npos);

  Client slow_body(http.url());
  slow_body.send("POST /v1/episodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken +
                 "\r\nContent-Length: 2\r\n\r\n{");
  // Its headers are read within milliseconds; counted as seen from then on,
  // its age would fall back to 0 and never reach 1 s.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (http.oldest_queued_s() < 1.0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(http.oldest_queued_s(), 1.0) << "a request whose body is still arriving counted as seen";
  service.stop("the run has finished");
  EXPECT_TRUE(http.stop());
}

// A client stalled mid-request holds the only handler thread, so another
// request queues (its age is reported); stop() cuts both at once (the
// stalled one has a minute of its time budget left).
TEST_F(GatewayHttp, StopCutsStalledAndQueuedConnections) {
  gw.http_threads = 1;
  gw.client_io_s = 60;
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  HttpGateway http(service, gw, 0, "test gateway");
  Client stalled(http.url()), queued(http.url());
  stalled.send("GET /v1/mo");
  queued.send("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken + "\r\n\r\n");
  // The stalled one holds the thread: one connection served, one unseen
  // beside it (the stalled request has not reached routing either).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (http.connections_served() == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(http.connections_served(), 1u);
  EXPECT_GT(http.oldest_queued_s(), 0);
  service.stop("the run has finished");
  EXPECT_TRUE(http.stop());
  EXPECT_EQ(stalled.receive(), "");
  EXPECT_EQ(queued.receive(), "");
}

// A chat completion is in its handler, waiting for its generation, when
// stop() begins. The generation then arrives: the client gets the whole
// reply, not a connection cut after part of it (its request was done, and
// it must be able to know that).
TEST_F(GatewayHttp, AReplyBeingMadeWhenStopBeginsIsDeliveredWhole) {
  gw.request_deadline_s = 60;
  GatewayService service(gw, sampling, 8, 256, 1 << 20);
  add_one_episode(service);
  HttpGateway http(service, gw, 0, "test gateway");
  const std::string url = http.url();
  const Reply opened = round_trip(url, "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken +
                                           "\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_EQ(opened.status, 200) << opened.body;
  const std::string chat = R"({"model": "forge-policy", "messages": [{"role": "user", "content": "hi"}]})";
  Client c(url);
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
         opened.body["api_key"].get<std::string>() + "\r\nContent-Length: " + std::to_string(chat.size()) +
         "\r\n\r\n" + chat);
  std::vector<GenerationJob> jobs;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (jobs.empty() && std::chrono::steady_clock::now() < give_up) jobs = service.take_jobs();
  ASSERT_EQ(jobs.size(), 1u) << "the chat completion never asked for a generation";

  std::thread stopping([&] { EXPECT_TRUE(http.stop()); });
  // stop() has begun once the listener is closed: a new connection is refused.
  const sockaddr_in a = loopback(url);
  bool refused = false;
  while (!refused && std::chrono::steady_clock::now() < give_up) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    refused = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0;
    ::close(fd);
  }
  EXPECT_TRUE(refused) << "stop() never closed the listener: the reply below was not made during stop";
  GenerationResult result;
  result.id = jobs[0].request.id;
  result.tokens = {ScaffoldVocabulary::builtin().stop_token()};
  result.logprobs = {-0.5f};
  result.versions = {1};
  service.fulfil(result);
  const std::string reply = c.receive();
  service.stop("the run has finished");
  stopping.join();
  ASSERT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
  const json body = json::parse(reply.substr(reply.find("\r\n\r\n") + 4), nullptr, false);
  ASSERT_TRUE(body.is_object()) << reply;
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << body;
}

}  // namespace
}  // namespace forge
