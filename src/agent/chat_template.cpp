#include "agent/chat_template.hpp"

#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

void append(Tokens& out, const Tokens& more) { out.insert(out.end(), more.begin(), more.end()); }

Tokens text(const char* s) { return ByteTokenizer().encode(s); }

// <|role|> body <|eot|>
Tokens special_message(int32_t role, const Tokens& body) {
  Tokens out = {role};
  append(out, body);
  out.push_back(kEndOfTurn);
  return out;
}

// "Role: " body "\n"
Tokens text_message(const char* role, const Tokens& body) {
  Tokens out = text(role);
  append(out, body);
  out.push_back('\n');
  return out;
}

}  // namespace

Tokens ChatTemplate::opening(const Tokens& system, const Tokens& user) const {
  Tokens out = {kBos};
  if (!system.empty())
    append(out, style_ == TemplateStyle::kText ? text_message("System: ", system)
                                               : special_message(kSystem, system));
  append(out, user_message(user));
  return out;
}

Tokens ChatTemplate::user_message(const Tokens& body) const {
  return style_ == TemplateStyle::kText ? text_message("User: ", body) : special_message(kUser, body);
}

Tokens ChatTemplate::tool_message(const Tokens& body) const {
  switch (style_) {
    case TemplateStyle::kSpecial: return special_message(kTool, body);
    case TemplateStyle::kText: return text_message("Tool: ", body);
    case TemplateStyle::kToolAsUser: {
      Tokens b = text("tool: ");
      append(b, body);
      return special_message(kUser, b);
    }
  }
  return {};
}

Tokens ChatTemplate::assistant_start() const {
  return style_ == TemplateStyle::kText ? text("Assistant: ") : Tokens{kAssistant};
}

Tokens ChatTemplate::assistant_end(const Tokens& generated) const {
  Tokens out;
  if (generated.empty() || generated.back() != kEndOfTurn) out.push_back(kEndOfTurn);
  if (style_ == TemplateStyle::kText) out.push_back('\n');
  return out;
}

}  // namespace forge
