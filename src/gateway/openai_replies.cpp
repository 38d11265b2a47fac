#include "gateway/openai_replies.hpp"

#include <ctime>
#include <string>

#include "gateway/chat_messages.hpp"

namespace forge {

using nlohmann::json;

namespace {

std::string reply_id(const char* prefix, const GenerationReply& r) {
  return std::string(prefix) + std::to_string(r.episode_id) + "-" + std::to_string(r.call_index);
}

json forge_part(const GenerationReply& r) {
  return {{"episode_id", r.episode_id},
          {"call_index", r.call_index},
          {"token_ids", r.result.tokens},
          {"logprobs", r.result.logprobs},
          {"versions", r.result.versions},
          {"prompt_tokens", r.prompt.size()},
          {"prefill_reused", r.result.prefill_reused},
          {"prefill_shared", r.result.prefill_shared}};
}

json usage(const GenerationReply& r) {
  const size_t p = r.prompt.size(), c = r.result.tokens.size();
  return {{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
}

json head(const char* object, const std::string& id) {
  return {{"id", id}, {"object", object}, {"created", static_cast<int64_t>(std::time(nullptr))},
          {"model", kPolicyModelName}};
}

// A text in pieces of whole UTF-8 characters, about `bytes` each.
std::vector<std::string> pieces(const std::string& text, size_t bytes) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 1; i <= text.size(); ++i) {
    const bool boundary = i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    if (boundary && (i - start >= bytes || i == text.size())) {
      out.push_back(text.substr(start, i - start));
      start = i;
    }
  }
  return out;
}

// Chat's "logprobs": one entry per generated token.
json chat_logprobs(const GenerationReply& r) {
  json content = json::array();
  for (size_t i = 0; i < r.result.tokens.size(); ++i) {
    const std::string raw = r.vocab->decode({r.result.tokens[i]});
    json bytes = json::array();
    for (unsigned char b : raw) bytes.push_back(b);
    content.push_back(
        {{"token", valid_utf8(raw)}, {"logprob", r.result.logprobs[i]}, {"bytes", bytes}, {"top_logprobs", json::array()}});
  }
  return {{"content", content}};
}

// A completion's "logprobs": each generated token's text and logprob, no
// alternatives (an empty object each), and where each token's text starts
// in the concatenated token texts, in characters (code points, as Python
// and vLLM count).
json completion_logprobs(const GenerationReply& r) {
  json tokens = json::array(), top = json::array(), offsets = json::array();
  size_t offset = 0;
  for (int32_t t : r.result.tokens) {
    const std::string text = valid_utf8(r.vocab->decode({t}));
    tokens.push_back(text);
    top.push_back(json::object());
    offsets.push_back(offset);
    for (unsigned char c : text) offset += (c & 0xC0) != 0x80;
  }
  return {{"tokens", tokens}, {"token_logprobs", r.result.logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// A completion's text: its tokens less a final stop token, which an
// OpenAI-compatible server leaves out (an agent that sends prompt + text
// back must not send the stop token's name as text).
std::string completion_text(const GenerationReply& r) {
  Tokens body = r.result.tokens;
  if (!body.empty() && r.vocab->is_stop(body.back())) body.pop_back();
  return tokens_text(body, *r.vocab);
}

}  // namespace

json chat_reply(const GenerationReply& r, bool with_logprobs) {
  json choice = {{"index", 0}, {"message", r.message}, {"finish_reason", r.finish_reason}, {"logprobs", nullptr}};
  if (with_logprobs) choice["logprobs"] = chat_logprobs(r);
  json out = head("chat.completion", reply_id("chatcmpl-", r));
  out["choices"] = json::array({choice});
  out["usage"] = usage(r);
  out["forge"] = forge_part(r);
  return out;
}

std::vector<json> chat_reply_chunks(const GenerationReply& r, bool with_logprobs) {
  const std::string id = reply_id("chatcmpl-", r);
  const auto chunk = [&](json delta, json finish) {
    json c = head("chat.completion.chunk", id);
    c["choices"] = json::array({{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", std::move(finish)}}});
    return c;
  };
  std::vector<json> out = {chunk({{"role", "assistant"}, {"content", ""}}, nullptr)};
  if (r.message.contains("tool_calls")) {
    json calls = r.message["tool_calls"];
    for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
    out.push_back(chunk({{"tool_calls", calls}}, nullptr));
  } else {
    for (const std::string& p : pieces(r.message.value("content", ""), 8)) out.push_back(chunk({{"content", p}}, nullptr));
  }
  if (with_logprobs) out.back()["choices"][0]["logprobs"] = chat_logprobs(r);
  json last = chunk(json::object(), r.finish_reason);
  last["usage"] = usage(r);
  last["forge"] = forge_part(r);
  out.push_back(std::move(last));
  return out;
}

json completion_reply(const GenerationReply& r, bool with_logprobs) {
  json choice = {{"index", 0}, {"text", completion_text(r)}, {"finish_reason", r.finish_reason}, {"logprobs", nullptr}};
  if (with_logprobs) choice["logprobs"] = completion_logprobs(r);
  json out = head("text_completion", reply_id("cmpl-", r));
  out["choices"] = json::array({choice});
  out["usage"] = usage(r);
  out["forge"] = forge_part(r);
  return out;
}

std::vector<json> completion_reply_chunks(const GenerationReply& r, bool with_logprobs) {
  const std::string id = reply_id("cmpl-", r);
  const auto chunk = [&](const std::string& text, json finish) {
    json c = head("text_completion", id);
    c["choices"] = json::array({{{"index", 0}, {"text", text}, {"finish_reason", std::move(finish)}}});
    return c;
  };
  std::vector<json> out;
  for (const std::string& p : pieces(completion_text(r), 8)) out.push_back(chunk(p, nullptr));
  json last = chunk("", r.finish_reason);
  if (with_logprobs) last["choices"][0]["logprobs"] = completion_logprobs(r);
  last["usage"] = usage(r);
  last["forge"] = forge_part(r);
  out.push_back(std::move(last));
  return out;
}

}  // namespace forge
