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
//
// The text is plain, never markup: a tool's output and an error repeating
// the agent's arguments may hold a special token's name ("<|eot|>"), which
// must stay text, or the model could close the tool message and forge a turn
// by writing it (an added token that is not special becomes its id, as
// Hugging Face encodes it: Tokenizer::encode_ordinary). Only call.special's
// delimiters around a named call are the scaffold's markup (observation_parts).
#pragma once
#include <string>
#include <vector>

#include "agent/scaffold_vocabulary.hpp"
#include "env/environment.hpp"
#include "env/perturbation.hpp"
#include "env/tool_call.hpp"

namespace forge {

// The tool message's text for `observation`, the answer to the call `written`
// in `style` (its response and call formats), as parts to encode.
std::vector<ScaffoldVocabulary::Part> observation_parts(
    const ScaffoldStyle& style, const Observation& observation, const ToolCall& written,
    const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());
// The same as one text (what the gateway returns).
std::string render_observation(const ScaffoldStyle& style, const Observation& observation, const ToolCall& written,
                               const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());
std::string text_of(const std::vector<ScaffoldVocabulary::Part>& parts);

}  // namespace forge
