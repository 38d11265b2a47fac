#include "gateway/gateway_config.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace forge {

void GatewayConfig::resolve_and_validate() {
  if (token.empty())
    if (const char* t = std::getenv("FORGE_GATEWAY_TOKEN")) token = t;
  if (token.empty())
    throw InputError(
        "gateway.enabled = true needs a bearer token: set gateway.token or the environment variable "
        "FORGE_GATEWAY_TOKEN");
  if (token.size() < 8) throw InputError("gateway.token: use at least 8 characters");
  if (port < 0 || port > 65535) throw InputError("gateway.port = " + std::to_string(port) + ": not a port");
}

}  // namespace forge
