#include "agent/chat_template.hpp"

#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

// Role markers of template.text.
const char* text_marker(const std::string& role) {
  if (role == "system") return "System: ";
  if (role == "user") return "User: ";
  return "Tool: ";
}

}  // namespace

Tokens ChatTemplate::message(const std::string& role, const std::string& content, bool markup) const {
  using Part = ScaffoldVocabulary::Part;
  if (style_ == TemplateStyle::kText) return vocab_.encode(std::vector<Part>{{text_marker(role), true}, {content, markup}, {"\n", true}});
  if (const ChatFormat* native = vocab_.native())
    return vocab_.encode(std::vector<Part>{
        {native->message_prefix(role), true}, {native->message_content(content), markup}, {native->message_suffix(), true}});
  return vocab_.encode(std::vector<Part>{{"<|" + role + "|>", true}, {content, markup}, {"<|eot|>", true}});
}

Tokens ChatTemplate::opening(const std::string& system, const std::string& user, bool system_markup,
                             bool user_markup) const {
  const ChatFormat* native = vocab_.native();
  Tokens out;
  if (native) append(out, vocab_.encode(native->begin_text(style_ == TemplateStyle::kText || !system.empty())));
  else out.push_back(kBos);
  if (!system.empty()) append(out, message("system", system, system_markup));
  append(out, user_message(user, user_markup));
  return out;
}

Tokens ChatTemplate::user_message(const std::string& text, bool markup) const { return message("user", text, markup); }

Tokens ChatTemplate::tool_message(const std::string& text, bool markup) const {
  if (style_ == TemplateStyle::kToolAsUser) return message("user", "tool: " + text, markup);
  if (style_ == TemplateStyle::kToolAsSystem) return message("system", "tool: " + text, markup);
  return message("tool", text, markup);
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
