// OpenAI response bodies for a finished generation.
//
//   chat        {"object": "chat.completion", "choices": [{"message", "finish_reason",
//               "logprobs": {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}}],
//               "usage", "forge"}
//   chat chunks role delta, content deltas (whole UTF-8 characters) or one
//               tool-call delta, then the finish chunk with "usage" and "forge";
//               with logprobs, the last delta before it carries them all
//   completion  {"object": "text_completion", "choices": [{"text", "finish_reason",
//               "logprobs": {"tokens", "token_logprobs"}}], ...}; the text
//               leaves out a final stop token (as chat's content does), the
//               logprobs and token counts keep it
//
// "forge": {"episode_id", "call_index", "token_ids", "logprobs", "versions",
// "prompt_tokens", "prefill_reused", "prefill_shared"}: the exact tokens behind
// the text.
#pragma once
#include <nlohmann/json.hpp>
#include <vector>

#include "gateway/gateway_service.hpp"

namespace forge {

inline constexpr const char* kPolicyModelName = "forge-policy";

nlohmann::json chat_reply(const GenerationReply& r, bool with_logprobs);
std::vector<nlohmann::json> chat_reply_chunks(const GenerationReply& r, bool with_logprobs);
nlohmann::json completion_reply(const GenerationReply& r, bool with_logprobs);
std::vector<nlohmann::json> completion_reply_chunks(const GenerationReply& r, bool with_logprobs);

}  // namespace forge
