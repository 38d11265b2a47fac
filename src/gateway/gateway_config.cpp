#include "gateway/gateway_config.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace forge {

void check_gateway_token(const std::string& token, const std::string& source) {
  if (token.size() < 8) throw InputError(source + ": use at least 8 characters");
}

void GatewayConfig::resolve_and_validate(int ranks) {
  std::string source = "gateway.token";
  if (token.empty())
    if (const char* t = std::getenv("FORGE_GATEWAY_TOKEN")) token = t, source = "FORGE_GATEWAY_TOKEN";
  if (token.empty())
    throw InputError(
        "gateway.enabled = true needs a bearer token: set gateway.token or the environment variable "
        "FORGE_GATEWAY_TOKEN");
  check_gateway_token(token, source);
  if (port < 0 || port > 65535) throw InputError("gateway.port = " + std::to_string(port) + ": not a port");
  // Past 65535 the resolver takes a port as 0 and the socket binds any
  // free one: the rank would name a port it does not listen on.
  if (port != 0 && port + ranks - 1 > 65535)
    throw InputError("gateway.port = " + std::to_string(port) + ": its " + std::to_string(ranks) +
                     " gateway ranks listen on ports " + std::to_string(port) + " to " +
                     std::to_string(port + ranks - 1) + ", past 65535; lower it (or 0: free ports)");
}

}  // namespace forge
