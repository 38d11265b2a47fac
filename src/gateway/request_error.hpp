// A request the gateway refuses: the HTTP status, the OpenAI error type and
// a message that names what was wrong. Thrown by the gateway's request
// handling, turned into {"error": {...}} by the HTTP layer; it never affects
// any other request or episode.
#pragma once
#include <string>

#include "core/error.hpp"

namespace forge {

class RequestError : public InputError {
 public:
  RequestError(int status, std::string type, const std::string& message)
      : InputError(message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string type_;
};

inline RequestError bad_request(const std::string& message) {
  return RequestError(400, "invalid_request_error", message);
}

}  // namespace forge
