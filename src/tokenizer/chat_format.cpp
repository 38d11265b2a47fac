#include "tokenizer/chat_format.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace forge {
namespace {

// The template without white space, and with Jinja's "\n" escapes and real
// newlines alike written as "\n": the form the recognizers compare.
std::string squeeze(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\n') {
      out += "\\n";
    } else if (t[i] != ' ' && t[i] != '\t' && t[i] != '\r') {
      out.push_back(t[i]);
    }
  }
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Text of the first "<|im_start|>system\n...<|im_end|>" inside the source, as
// rendered (Jinja's \n escape becomes a newline).
bool chatml_default_system(const std::string& t, std::string* text) {
  const std::string open = "<|im_start|>system";
  for (size_t at = t.find(open); at != std::string::npos; at = t.find(open, at + 1)) {
    size_t p = at + open.size();
    if (t.compare(p, 2, "\\n") == 0) p += 2;
    else if (t.compare(p, 1, "\n") == 0) p += 1;
    else continue;
    const size_t end = t.find("<|im_end|>", p);
    if (end == std::string::npos) return false;
    std::string body = t.substr(p, end - p);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == 'n') {
        out.push_back('\n');
        ++i;
      } else {
        out.push_back(body[i]);
      }
    }
    if (contains(out, "{") || contains(out, "'")) return false;  // Jinja inside: not a literal
    *text = out;
    return true;
  }
  return false;
}

std::string trim(const std::string& s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; };
  size_t a = 0, b = s.size();
  while (a < b && space(s[a])) ++a;
  while (b > a && space(s[b - 1])) --b;
  return s.substr(a, b - a);
}

}  // namespace

ChatFormat::ChatFormat(const std::string& jinja, std::shared_ptr<const Tokenizer> tokenizer, const std::string& bos_text,
                       const std::string& source)
    : tokenizer_(std::move(tokenizer)), bos_(bos_text) {
  const std::string s = squeeze(jinja);
  const auto refuse = [&](const std::string& why) {
    return InputError("chat template of '" + source + "' is not one forge renders (" + why +
                      "; forge renders the plain ChatML template of SmolLM2 and Qwen2 and Llama 3's header template)");
  };
  if (jinja.empty()) throw refuse("the model ships none");
  if (contains(s, "tool_calls") || contains(s, "tools") || contains(s, "CuttingKnowledge"))
    throw refuse("it has tool or date logic of its own");
  if (contains(s, "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>'+'\\n'") ||
      contains(s, "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>\\n'")) {
    family_ = Family::kChatMl;
    if (contains(s, "messages[0]['role']!='system'") || contains(s, "messages[0].role!='system'")) {
      if (!chatml_default_system(jinja, &default_system_)) throw refuse("a default system message forge cannot read");
      has_default_system_ = true;
    }
    if (!contains(s, "add_generation_prompt%}{{'<|im_start|>assistant\\n'}}")) throw refuse("an unknown generation prompt");
    end_of_turn_ = tokenizer_->special_id("<|im_end|>");
    if (end_of_turn_ < 0 || tokenizer_->special_id("<|im_start|>") < 0)
      throw refuse("its tokenizer lacks the special tokens <|im_start|> and <|im_end|>");
  } else if (contains(s, "'<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+message['content']|trim+'<|eot_id|>'")) {
    family_ = Family::kLlama3;
    if (!contains(s, "bos_token")) throw refuse("a Llama 3 template without bos_token");
    end_of_turn_ = tokenizer_->special_id("<|eot_id|>");
    if (end_of_turn_ < 0 || tokenizer_->special_id("<|start_header_id|>") < 0 || bos_.empty())
      throw refuse("its tokenizer lacks <|eot_id|>, <|start_header_id|> or a BOS token");
  } else {
    throw refuse("unrecognized");
  }
}

std::string ChatFormat::begin_text(bool first_is_system) const {
  if (family_ == Family::kLlama3) return bos_;
  if (has_default_system_ && !first_is_system) return message_text({"system", default_system_});
  return "";
}

std::string ChatFormat::message_text(const ChatMessage& m) const {
  return message_prefix(m.role) + message_content(m.content) + message_suffix();
}

std::string ChatFormat::message_prefix(const std::string& role) const {
  if (family_ == Family::kLlama3) return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
  return "<|im_start|>" + role + "\n";
}

std::string ChatFormat::message_content(const std::string& content) const {
  return family_ == Family::kLlama3 ? trim(content) : content;
}

std::string ChatFormat::message_suffix() const { return family_ == Family::kLlama3 ? "<|eot_id|>" : "<|im_end|>\n"; }

std::string ChatFormat::generation_prompt() const {
  return family_ == Family::kLlama3 ? "<|start_header_id|>assistant<|end_header_id|>\n\n" : "<|im_start|>assistant\n";
}

std::string ChatFormat::assistant_close() const { return family_ == Family::kLlama3 ? "" : "\n"; }

std::string ChatFormat::render_text(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (!messages.empty()) out += begin_text(messages.front().role == "system");
  for (const ChatMessage& m : messages) out += message_text(m);
  if (add_generation_prompt) out += generation_prompt();
  return out;
}

std::vector<int32_t> ChatFormat::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return tokenizer_->encode(render_text(messages, add_generation_prompt));
}

}  // namespace forge
