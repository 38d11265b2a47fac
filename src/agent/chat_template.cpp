#include "agent/chat_template.hpp"

#include <algorithm>

#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

using Part = ScaffoldVocabulary::Part;

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

// Role markers of template.text.
const char* text_marker(const std::string& role) {
  if (role == "system") return "System: ";
  if (role == "user") return "User: ";
  return "Tool: ";
}

// A native format's content rule (Llama 3 trims it) applied to the whole
// text, each part keeping its kind.
std::vector<Part> native_content(const ChatFormat& native, const std::vector<Part>& content) {
  std::string text;
  for (const Part& p : content) text += p.text;
  const std::string shown = native.message_content(text);
  if (shown == text) return content;
  const size_t begin = shown.empty() ? text.size() : text.find(shown);  // trimming cuts the ends only
  const size_t end = begin + shown.size();
  std::vector<Part> out;
  size_t at = 0;
  for (const Part& p : content) {
    const size_t b = std::max(at, begin), e = std::min(at + p.text.size(), end);
    if (b < e) out.push_back({p.text.substr(b - at, e - b), p.markup});
    at += p.text.size();
  }
  return out;
}

}  // namespace

Tokens ChatTemplate::message(const std::string& role, const std::vector<Part>& content) const {
  const ChatFormat* native = vocab_.native();
  std::vector<Part> parts;
  if (style_ == TemplateStyle::kText) {
    parts.push_back({text_marker(role), true});
    parts.insert(parts.end(), content.begin(), content.end());
    parts.push_back({"\n", true});
  } else if (native) {
    parts.push_back({native->message_prefix(role), true});
    for (Part& p : native_content(*native, content)) parts.push_back(std::move(p));
    parts.push_back({native->message_suffix(), true});
  } else {
    parts.push_back({"<|" + role + "|>", true});
    parts.insert(parts.end(), content.begin(), content.end());
    parts.push_back({"<|eot|>", true});
  }
  return vocab_.encode(parts);
}

Tokens ChatTemplate::opening(const std::optional<std::string>& system, const std::string& user, bool system_markup,
                             bool user_markup) const {
  const ChatFormat* native = vocab_.native();
  Tokens out;
  if (native) append(out, vocab_.encode(native->begin_text(style_ == TemplateStyle::kText || system.has_value())));
  else out.push_back(kBos);
  if (system) append(out, message("system", {{*system, system_markup}}));
  append(out, user_message(user, user_markup));
  return out;
}

Tokens ChatTemplate::user_message(const std::string& text, bool markup) const {
  return message("user", {{text, markup}});
}

Tokens ChatTemplate::tool_message(const std::string& text, bool markup) const { return tool_message({{text, markup}}); }

Tokens ChatTemplate::tool_message(const std::vector<Part>& parts) const {
  if (style_ == TemplateStyle::kToolAsUser || style_ == TemplateStyle::kToolAsSystem) {
    std::vector<Part> content = {{"tool: ", false}};
    content.insert(content.end(), parts.begin(), parts.end());
    return message(style_ == TemplateStyle::kToolAsUser ? "user" : "system", content);
  }
  return message("tool", parts);
}

Tokens ChatTemplate::assistant_start() const {
  if (style_ == TemplateStyle::kText) return vocab_.encode("Assistant: ");
  if (const ChatFormat* native = vocab_.native()) return vocab_.encode(native->generation_prompt());
  return {kAssistant};
}

Tokens ChatTemplate::assistant_end(const Tokens& generated) const {
  Tokens out;
  if (generated.empty() || generated.back() != vocab_.stop_token()) out.push_back(vocab_.stop_token());
  const ChatFormat* native = vocab_.native();
  if (style_ == TemplateStyle::kText) append(out, vocab_.encode("\n"));
  else if (native) append(out, vocab_.encode(native->assistant_close()));
  return out;
}

}  // namespace forge
