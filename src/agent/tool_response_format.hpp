// Tool-response formats: how an observation's text is shown to the model
// inside the tool message of the chat template.
//
//   response.plain   391              error: rate limited        timeout
//   response.tagged  result: 391      error: rate limited        timeout
//   response.json    {"result":"391"} {"error":"rate limited"}   {"error":"timeout"}
//
// An injected failure marked names_call (env.error_names_call) is followed by
// ": " and the call it answers as the agent wrote it (`written`: the
// displayed tool name, in the style's call format, action_markup), so that a
// retry copies it from the latest tool message: "timeout: lookup(Kavo,works_at)",
// {"error":"rate limited: {\"tool\":\"math\",\"args\":\"3+4\"}"}.
#pragma once
#include <string>

#include "agent/scaffold_vocabulary.hpp"
#include "env/environment.hpp"
#include "env/perturbation.hpp"
#include "env/tool_call.hpp"

namespace forge {

// The tool message's text for `observation`, the answer to the call `written`
// in `style` (its response and call formats).
std::string render_observation(const ScaffoldStyle& style, const Observation& observation, const ToolCall& written,
                               const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

}  // namespace forge
