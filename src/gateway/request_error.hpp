// A request the gateway refuses: the HTTP status, the OpenAI error type and
// a message that names what was wrong. Thrown by the gateway's request
// handling, turned into {"error": {...}} by the HTTP layer; it never affects
// any other request or episode. parse_client_json parses what a client sent.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace forge {

class RequestError : public InputError {
 public:
  RequestError(int status, std::string type, const std::string& message, std::string code = {})
      : InputError(message), status_(status), type_(std::move(type)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  // The body's "code" when it is a name (OpenAI's context_length_exceeded);
  // empty: the status.
  const std::string& code() const { return code_; }
  // Whether the same request sent again may succeed. OpenAI's clients retry
  // 408, 409, 429 and 5xx unless the reply's x-should-retry says false: a
  // 409 is final (a closed, ending or full episode, a second answer) unless
  // marked as waiting for the episode's work under way.
  bool retryable() const { return retryable_; }
  RequestError& retry_later() {
    retryable_ = true;
    return *this;
  }

 private:
  int status_;
  std::string type_;
  std::string code_;
  bool retryable_ = status_ >= 500 || status_ == 408 || status_ == 429;
};

inline RequestError bad_request(const std::string& message) {
  return RequestError(400, "invalid_request_error", message);
}

// JSON from a client nests at most this deep: copying, comparing or dumping a
// value recurses once per level, so a deeper one could overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// `text` as JSON; RequestError 400 naming `what` (e.g. "the body") when it is
// malformed or nests deeper than kMaxJsonDepth. Every JSON text a client
// sends goes through here.
inline nlohmann::json parse_client_json(const std::string& text, const std::string& what) {
  using nlohmann::json;
  // depth: the containers around the one that starts (0 at the top).
  const json::parser_callback_t limit = [&what](int depth, json::parse_event_t event, json&) {
    if (depth >= kMaxJsonDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
      throw bad_request("JSON in " + what + " nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return true;
  };
  try {
    return json::parse(text, limit);
  } catch (const json::exception& e) {
    throw bad_request("malformed JSON in " + what + ": " + e.what());
  }
}

}  // namespace forge
