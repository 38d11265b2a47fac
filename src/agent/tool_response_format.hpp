// Tool-response formats: how an observation's text is shown to the model
// inside the tool message of the chat template.
//
//   response.plain   391              error: rate limited        timeout
//   response.tagged  result: 391      error: rate limited        timeout
//   response.json    {"result":"391"} {"error":"rate limited"}   {"error":"timeout"}
//
// An injected failure marked names_call (env.error_names_call) is followed by
// ": " and the call it answers as the agent wrote it (`written_call`: the
// displayed tool name in the episode's call format), so that a retry copies
// it from the latest tool message: "timeout: lookup(Kavo,works_at)",
// {"error":"rate limited: {\"tool\":\"math\",\"args\":\"3+4\"}"}.
#pragma once
#include <string>

#include "env/environment.hpp"
#include "env/perturbation.hpp"

namespace forge {

std::string render_observation(ResponseFormat format, const Observation& observation,
                               const std::string& written_call);

}  // namespace forge
