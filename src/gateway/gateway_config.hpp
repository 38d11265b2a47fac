// [gateway]: the HTTP front for black-box agents (docs/gateway.md).
//
// When enabled, the environment ranks of `forge train` under mpirun become
// gateway ranks: gateway rank k (k-th environment rank) listens on
// bind:port+k (port 0: a free port), and writes its URL to
// <run.dir>/gateway/<k>.json so that agents and scripts can find it.
#pragma once
#include <cstddef>
#include <string>

namespace forge {

struct GatewayConfig {
  bool enabled = false;
  std::string bind = "127.0.0.1";  // loopback unless asked otherwise
  int port = 8300;                 // gateway rank k listens on port + k; 0: any free port
  std::string token;               // bearer token; empty: FORGE_GATEWAY_TOKEN
  int http_threads = 128;          // requests served at once (others queue)
  int max_request_kib = 1024;      // larger bodies get 413
  double client_io_s = 30;         // a connection's time to send its request and take its reply, in all
  double request_deadline_s = 120; // a request waiting on generation longer gets 504
  double idle_deadline_s = 120;    // an open episode idle longer is closed, abandoned
  double open_deadline_s = 30;     // opening waits this long for admission, then 503
  double agent_wait_s = 600;       // the learner waits this long for agents' groups

  // The token from config or FORGE_GATEWAY_TOKEN; InputError naming both
  // when neither is set, or for values out of range (`ranks` gateway ranks
  // listen on port, port + 1, ...: the last must be a port too).
  void resolve_and_validate(int ranks);
};

// InputError unless `token` is long enough to guess no sooner than a key;
// `source` names where it came from (gateway.token, FORGE_GATEWAY_TOKEN).
void check_gateway_token(const std::string& token, const std::string& source);

}  // namespace forge
