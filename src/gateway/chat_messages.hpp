// OpenAI chat messages <-> tokens, exactly (token-in/token-out).
//
// A request's messages render with the episode's chat template:
//
//   opening(system, first user) then, per later message,
//     assistant  assistant_start + its tokens + assistant_end
//     tool       tool_message(content)      user  user_message(content)
//   and assistant_start after the last one (the model writes the reply).
//
// Texts render through the policy's vocabulary (agent/scaffold_vocabulary.hpp):
// the task's system and user messages are the scaffold's markup, and the
// tool results the gateway handed out keep their parts (plain text but for
// a named failed call's call.special delimiters, tool_response_format.hpp),
// so echoed unchanged they encode to the tokens the white-box scaffold uses;
// every assistant message it returned renders to the tokens it was
// generated as, never re-encoded
// (matched by tool-call id, or by content for a reply without tool calls,
// each reply used once per request). Anything else is the agent's own text
// and is encoded as text (special-token spellings stay text; an added token
// that is not special becomes its id, as Hugging Face encodes it). An assistant
// message maps to one action of the policy's call format: tool_calls[0] ->
// the call (function.name, arguments {"input": "..."}), content -> the
// final answer.
//
// A generation maps back the same way: a parsed call becomes one tool call
// with id "<call_id>", a parsed answer the content, anything else the raw
// text as content (all valid UTF-8, utf8_text.hpp). A reply matches an
// echoed message by tool-call id and name with the same "input" (however
// the arguments are serialised), or by content; among equal candidates the
// one generated at this point of the conversation (same prompt) wins.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/chat_template.hpp"
#include "env/perturbation.hpp"
#include "gateway/utf8_text.hpp"

namespace forge {

// One reply the gateway returned, with its exact tokens.
struct ReturnedReply {
  nlohmann::json message;  // {"role": "assistant", "content" | "tool_calls": ...}
  Tokens prompt;           // the prompt it was generated for
  Tokens generated;        // sampled tokens (with the stop token, if emitted)
};

// What the gateway handed out in one episode.
struct EpisodeTexts {
  std::string system, user;  // the task's messages as returned by open ("" system: none)
  std::vector<ReturnedReply> replies;
  // Tool results as the tool endpoint returned them, with their parts (what
  // is the scaffold's markup: tool_response_format.hpp).
  struct ToolContent {
    std::string text;
    std::vector<ScaffoldVocabulary::Part> parts;
  };
  std::vector<ToolContent> tool_contents;
};

// The prompt tokens of `messages` (a JSON array). RequestError (400) naming
// the message index for anything malformed.
Tokens render_chat(const nlohmann::json& messages, TemplateStyle chat_template, CallFormat format,
                   const EpisodeTexts& texts, const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());

// The assistant message for `generated`; finish_reason "tool_calls" or
// "stop" ("length" when cut by max_tokens and not a complete action).
nlohmann::json reply_message(const Tokens& generated, CallFormat format, const std::string& call_id,
                             bool cut_by_length, std::string* finish_reason,
                             const ScaffoldVocabulary& vocab = ScaffoldVocabulary::builtin());


}  // namespace forge
