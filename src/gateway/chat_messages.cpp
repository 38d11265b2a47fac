#include "gateway/chat_messages.hpp"

#include <algorithm>
#include <optional>

#include "agent/tool_call_format.hpp"
#include "env/tool_call.hpp"
#include "gateway/request_error.hpp"

namespace forge {
namespace {

using nlohmann::json;

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

std::string where(size_t i) { return "messages[" + std::to_string(i) + "]"; }

// A string member, or nothing (absent or another type).
std::optional<std::string> string_at(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return std::nullopt;
  return j[key].get<std::string>();
}

// A message's text: a string, or an array of {"type": "text", "text": ...}.
// Only an assistant message that makes a tool call may leave it out (null).
std::string content_text(const json& m, size_t i) {
  const auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    const std::string role = m.value("role", std::string());
    throw bad_request(where(i) + ".content is missing: " +
                      (role == "assistant" ? std::string("an assistant message needs content or tool_calls")
                                           : "a " + role + " message needs its text (\"\" for none)"));
  }
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string out;
    for (const json& part : *it) {
      const auto text = string_at(part, "text");
      if (string_at(part, "type") != "text" || !text)
        throw bad_request(where(i) + ".content: only text parts are supported");
      out += *text;
    }
    return out;
  }
  throw bad_request(where(i) + ".content must be a string or an array of text parts");
}

// The one tool call of an assistant message, as the policy's action.
ToolCall call_of(const json& calls, size_t i) {
  if (!calls.is_array() || calls.empty()) throw bad_request(where(i) + ".tool_calls must be a non-empty array");
  if (calls.size() > 1)
    throw bad_request(where(i) + ".tool_calls: this policy makes one tool call per assistant message");
  const json& c = calls[0];
  if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
    throw bad_request(where(i) + ".tool_calls[0].function is missing");
  const json& f = c["function"];
  if (!f.contains("name") || !f["name"].is_string())
    throw bad_request(where(i) + ".tool_calls[0].function.name must be a string");
  ToolCall call{f["name"].get<std::string>(), ""};
  if (f.contains("arguments")) {
    if (!f["arguments"].is_string())
      throw bad_request(where(i) + ".tool_calls[0].function.arguments must be a JSON string");
    const json args =
        parse_client_json(f["arguments"].get<std::string>(), where(i) + ".tool_calls[0].function.arguments");
    if (!args.is_object() || !args.contains("input"))
      throw bad_request(where(i) + ".tool_calls[0].function.arguments must be a JSON object with \"input\"");
    call.args = args["input"].is_string() ? args["input"].get<std::string>() : args["input"].dump();
  }
  return call;
}

// An echoed tool call is the returned one: same id, name and "input".
bool same_calls(const json& echoed, const json& returned, size_t i) {
  if (!echoed.is_array() || echoed.size() != 1 || !echoed[0].is_object()) return false;
  const auto id = string_at(echoed[0], "id");
  if (!id || *id != returned[0]["id"].get<std::string>()) return false;
  try {
    return call_of(echoed, i) == call_of(returned, i);
  } catch (const RequestError&) {
    return false;
  }
}

// The tokens of an assistant message at prompt `so_far`: a reply the
// gateway returned (once per request; one generated for `so_far` first),
// else the message rendered as an action.
Tokens assistant_tokens(const json& m, size_t i, CallFormat format, const EpisodeTexts& texts,
                        const Tokens& so_far, std::vector<bool>& used, const ScaffoldVocabulary& vocab) {
  if (m.contains("function_call") && !m["function_call"].is_null())
    throw bad_request(where(i) + ".function_call is not supported: send tool_calls");
  // tool_calls null or [] (as some clients send with plain content): no call.
  const auto calls = m.find("tool_calls");
  const bool has_calls = calls != m.end() && !calls->is_null() && !(calls->is_array() && calls->empty());
  // The policy's turn is a tool call or text, never both (forge's replies
  // carry content null): text beside a call has no tokens it could render
  // as, and leaving it out would show the model a turn the agent did not send.
  if (has_calls && m.contains("content") && !m["content"].is_null()) {
    const std::string text = content_text(m, i);
    if (text.find_first_not_of(" \t\r\n") != std::string::npos)
      throw bad_request(where(i) + ".content: an assistant message with tool_calls has no text in this policy's "
                                   "format (its turn is the tool call alone); send content null or \"\"");
  }
  std::optional<size_t> pick;
  for (size_t r = 0; r < texts.replies.size(); ++r) {
    if (used[r]) continue;
    const json& reply = texts.replies[r].message;
    const bool reply_calls = reply.contains("tool_calls");
    if (has_calls != reply_calls) continue;
    const bool match = has_calls ? same_calls(*calls, reply["tool_calls"], i)
                                 : content_text(m, i) == reply["content"].get<std::string>();
    if (!match) continue;
    if (!pick) pick = r;
    if (texts.replies[r].prompt == so_far) {
      pick = r;
      break;
    }
  }
  if (pick) {
    used[*pick] = true;
    return texts.replies[*pick].generated;
  }
  if (has_calls) return render_action(format, call_of(*calls, i), vocab);
  return render_action(format, {kAnswerTool, content_text(m, i)}, vocab);
}

}  // namespace

Tokens render_chat(const json& messages, TemplateStyle chat_template, CallFormat format,
                   const EpisodeTexts& texts, const ScaffoldVocabulary& vocab) {
  if (!messages.is_array() || messages.empty()) throw bad_request("messages must be a non-empty array");
  const ChatTemplate tmpl(chat_template, vocab);
  size_t i = 0;
  const auto role_of = [&](size_t k) {
    if (!messages[k].is_object() || !messages[k].contains("role") || !messages[k]["role"].is_string())
      throw bad_request(where(k) + " needs a string \"role\"");
    return messages[k]["role"].get<std::string>();
  };
  std::optional<std::string> system;  // none unless the request sends one (even empty)
  const std::string first = role_of(0);
  if (first == "system" || first == "developer") {
    system = content_text(messages[0], 0);
    i = 1;
  }
  if (i < messages.size() && i == 1 && (role_of(1) == "system" || role_of(1) == "developer"))
    throw bad_request(where(1) + ".role '" + role_of(1) +
                      "': this policy's chat has one system message, the first (join the two)");
  if (i >= messages.size() || role_of(i) != "user")
    throw bad_request(where(i) + ": the conversation must open with [system,] user");
  // The task's texts as handed out are the scaffold's markup; anything else is plain.
  const std::string user = content_text(messages[i], i);
  Tokens out = tmpl.opening(system, user, system && *system == texts.system, user == texts.user);
  std::vector<bool> used(texts.replies.size(), false);
  for (++i; i < messages.size(); ++i) {
    const std::string role = role_of(i);
    if (role == "assistant") {
      append(out, tmpl.assistant_start());
      const Tokens gen = assistant_tokens(messages[i], i, format, texts, out, used, vocab);
      append(out, gen);
      append(out, tmpl.assistant_end(gen));
    } else if (role == "tool") {
      const std::string content = content_text(messages[i], i);
      const auto handed_out = std::find_if(texts.tool_contents.begin(), texts.tool_contents.end(),
                                           [&](const EpisodeTexts::ToolContent& t) { return t.text == content; });
      append(out, handed_out != texts.tool_contents.end() ? tmpl.tool_message(handed_out->parts)
                                                          : tmpl.tool_message(content, false));
    } else if (role == "user") {
      append(out, tmpl.user_message(content_text(messages[i], i), false));
    } else {
      throw bad_request(where(i) + ".role '" + role +
                        "': expected user, assistant or tool (system only first)");
    }
  }
  if (role_of(messages.size() - 1) == "assistant")
    throw bad_request("the last message is the assistant's: nothing to reply to");
  append(out, tmpl.assistant_start());
  return out;
}

json reply_message(const Tokens& generated, CallFormat format, const std::string& call_id, bool cut_by_length,
                   std::string* finish_reason, const ScaffoldVocabulary& vocab) {
  const ParsedAction a = parse_action(format, generated, vocab);
  json m = {{"role", "assistant"}};
  if (a.kind == ParsedAction::Kind::kCall) {
    const json args = {{"input", valid_utf8(a.call.args)}};
    m["content"] = nullptr;
    m["tool_calls"] = json::array({{{"id", call_id},
                                    {"type", "function"},
                                    {"function", {{"name", valid_utf8(a.call.tool)}, {"arguments", args.dump()}}}}});
    *finish_reason = "tool_calls";
  } else if (a.kind == ParsedAction::Kind::kAnswer) {
    m["content"] = valid_utf8(a.answer);
    *finish_reason = "stop";
  } else {
    Tokens body = generated;
    if (!body.empty() && vocab.is_stop(body.back())) body.pop_back();
    m["content"] = tokens_text(body, vocab);
    *finish_reason = cut_by_length ? "length" : "stop";
  }
  return m;
}

}  // namespace forge
