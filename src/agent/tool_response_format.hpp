// Tool-response formats: how an observation's text is shown to the model
// inside the tool message of the chat template.
//
//   response.plain   391              error: rate limited        timeout
//   response.tagged  result: 391      error: rate limited        timeout
//   response.json    {"result":"391"} {"error":"rate limited"}   {"error":"timeout"}
#pragma once
#include <string>

#include "env/environment.hpp"
#include "env/perturbation.hpp"

namespace forge {

std::string render_observation(ResponseFormat format, const Observation& observation);

}  // namespace forge
