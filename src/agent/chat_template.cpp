#include "agent/chat_template.hpp"

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

}  // namespace

Tokens ChatTemplate::message(const std::string& role, const std::vector<Part>& content) const {
  if (const ChatFormat* native = vocab_.native()) {
    // Llama 3 trims the whole content. Markup only when all of it is: the
    // native format's tool-call delimiters are text, so a tool message's
    // markup parts lose nothing, and its plain parts stay plain.
    std::string text;
    bool markup = true;
    for (const Part& p : content) text += p.text, markup = markup && p.markup;
    const Part body{native->message_content(text), markup};
    if (style_ == TemplateStyle::kText)
      return vocab_.encode(std::vector<Part>{{text_marker(role), true}, body, {"\n", true}});
    return vocab_.encode(std::vector<Part>{{native->message_prefix(role), true}, body, {native->message_suffix(), true}});
  }
  std::vector<Part> parts;
  parts.push_back(style_ == TemplateStyle::kText ? Part{text_marker(role), true} : Part{"<|" + role + "|>", true});
  parts.insert(parts.end(), content.begin(), content.end());
  parts.push_back(style_ == TemplateStyle::kText ? Part{"\n", true} : Part{"<|eot|>", true});
  return vocab_.encode(parts);
}

Tokens ChatTemplate::opening(const std::string& system, const std::string& user, bool system_markup,
                             bool user_markup) const {
  const ChatFormat* native = vocab_.native();
  Tokens out;
  if (native) append(out, vocab_.encode(native->begin_text(style_ == TemplateStyle::kText || !system.empty())));
  else out.push_back(kBos);
  if (!system.empty()) append(out, message("system", {{system, system_markup}}));
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
