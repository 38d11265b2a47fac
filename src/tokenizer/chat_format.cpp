#include "tokenizer/chat_format.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "tokenizer/unicode.hpp"

namespace forge {
namespace {

// The template without white space outside string literals, and with
// Jinja's "\n" escapes and real newlines alike written as "\n": the form the
// recognizers compare. Inside a tag's quoted literal every character counts
// ("' \n'" prints a space; it is not "'\n'"). `in_tag`: `t` is one tag's
// content; otherwise tags are found by their {{ and {% openers.
std::string squeeze(const std::string& t, bool in_tag = false) {
  std::string out;
  char quote = 0;  // the open literal's quote character
  bool tag = in_tag;
  const auto put = [&](char c) {
    if (c == '\n') out += "\\n";
    else out.push_back(c);
  };
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    const char next = i + 1 < t.size() ? t[i + 1] : 0;
    if (quote) {
      put(c);
      if (c == '\\' && next) put(t[++i]);  // an escape: \' does not close
      else if (c == quote) quote = 0;
      continue;
    }
    if (!in_tag && c == '{' && (next == '{' || next == '%')) tag = true;
    if (!in_tag && (c == '}' || c == '%') && next == '}') tag = false;
    if (tag && (c == '\'' || c == '"')) quote = c;
    if (c != ' ' && c != '\t' && c != '\r') put(c);
  }
  return out;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The text a Jinja string literal's body `lit` renders (Jinja decodes it as
// Python's unicode-escape: \n \t \r \\ \' \" \xXX \uXXXX \UXXXXXXXX; other
// bytes, UTF-8 included, stay). False for an escape forge does not decode.
bool jinja_literal_text(const std::string& lit, std::string* text) {
  std::string out;
  for (size_t i = 0; i < lit.size(); ++i) {
    if (lit[i] != '\\') {
      out.push_back(lit[i]);
      continue;
    }
    if (++i == lit.size()) return false;
    const char e = lit[i];
    if (e == 'n') out.push_back('\n');
    else if (e == 't') out.push_back('\t');
    else if (e == 'r') out.push_back('\r');
    else if (e == '\\' || e == '\'' || e == '"') out.push_back(e);
    else if (e == 'x' || e == 'u' || e == 'U') {
      const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      if (i + digits >= lit.size()) return false;
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        const char h = lit[i + k];
        const int v = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        if (v < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      append_utf8(cp, &out);
      i += digits;
    } else {
      return false;
    }
  }
  *text = std::move(out);
  return true;
}

// What a template prints or runs besides the recognized pieces, or "" when
// nothing. `classify(kind, expr)` names each {{ }} (kind '{') and {% %}
// (kind '%') tag, squeezed and without a "-" at either end, by one letter,
// or 0 when it is not a recognized piece (an {% else %} or another condition
// would render otherwise than forge does); the tags' letters in order must
// be one of `shapes` (a recognized piece in another place, an
// add_generation_prompt block inside the loop, renders otherwise too). The
// text between tags must be white space that Jinja drops as transformers
// configures it: a "-" beside a tag strips the white space on that side;
// trim_blocks drops the one newline right after a {% %} or {# #};
// lstrip_blocks drops spaces and tabs from a line's start to a {% %} or
// {# #}; the template's one trailing newline goes. A template that holds
// the recognized line and prints more (Hermes' {{bos_token}}, a space after
// a }}) would render otherwise.
template <typename Classify>
std::string beyond_recognized(const std::string& t, Classify classify, const std::vector<std::string>& shapes) {
  char last_kind = 0;       // the previous tag's: '{', '%', '#' (0 at the start)
  bool last_strips = false;  // it ended with "-}}", "-%}" or "-#}"
  std::string shape;         // the tags' letters
  for (size_t i = 0; i <= t.size();) {
    size_t open = t.find('{', i);
    while (open != std::string::npos && !(open + 1 < t.size() && (t[open + 1] == '{' || t[open + 1] == '%' ||
                                                                    t[open + 1] == '#')))
      open = t.find('{', open + 1);
    const bool tag = open != std::string::npos;
    std::string text = t.substr(i, (tag ? open : t.size()) - i);
    const char kind = tag ? t[open + 1] : 0;
    const bool strips_before = tag && open + 2 < t.size() && t[open + 2] == '-';
    if (last_strips) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos
                                        ? text.size() : text.find_first_not_of(" \t\r\n"));
    else if ((last_kind == '%' || last_kind == '#') && !text.empty() && text[0] == '\n') text.erase(0, 1);
    if (strips_before) {
      text.erase(text.find_last_not_of(" \t\r\n") == std::string::npos ? 0 : text.find_last_not_of(" \t\r\n") + 1);
    } else if (kind == '%' || kind == '#') {  // lstrip_blocks: spaces and tabs from the line's start to the tag
      size_t p = open;
      while (p > i && (t[p - 1] == ' ' || t[p - 1] == '\t')) --p;
      if (p == 0 || t[p - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - p));
    }
    if (!tag && !text.empty() && text.back() == '\n') text.pop_back();  // the trailing newline
    if (!text.empty()) {
      if (text.find_first_not_of(" \t\r\n") != std::string::npos) return "text outside its tags";
      return text.find('\n') != std::string::npos ? "a line break outside its tags" : "white space outside its tags";
    }
    if (!tag) break;
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t end = t.find(close, open + 2);
    if (end == std::string::npos) return "an unclosed tag";
    if (kind == '{' || kind == '%') {
      std::string expr = squeeze(t.substr(open + 2, end - open - 2), true);
      if (!expr.empty() && expr.front() == '-') expr.erase(0, 1);  // {{- ... -}}
      if (!expr.empty() && expr.back() == '-') expr.pop_back();
      const char letter = classify(kind, expr);
      if (letter == 0) return kind == '{' ? "it prints {{" + expr + "}}" : "it runs {%" + expr + "%}";
      shape.push_back(letter);
    }
    last_kind = kind;
    last_strips = end > 0 && t[end - 1] == '-';
    i = end + 2;
  }
  if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end())
    return "its pieces in an order forge does not render";
  return "";
}

// Jinja's trim: Python's str.strip(), which drops Unicode white space
// (U+00A0, U+3000, ...) and the separators U+001C..U+001F too.
std::string trim(const std::string& s) {
  const auto space = [](char32_t c) { return unicode::is_space(c) || (c >= 0x1C && c <= 0x1F); };
  const std::vector<unicode::CodePoint> cps = unicode::decode_utf8(s);
  size_t a = 0, b = cps.size();
  while (a < b && space(cps[a].cp)) ++a;
  while (b > a && space(cps[b - 1].cp)) --b;
  if (a == b) return "";
  return s.substr(cps[a].offset, cps[b - 1].offset + cps[b - 1].bytes - cps[a].offset);
}

}  // namespace

ChatFormat::ChatFormat(const std::string& jinja, std::shared_ptr<const Tokenizer> tokenizer, const std::string& bos_text,
                       const std::string& source, const std::vector<int32_t>& end_ids,
                       std::vector<int32_t> text_prefix)
    : tokenizer_(std::move(tokenizer)), bos_(bos_text), text_prefix_(std::move(text_prefix)) {
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
    if (!contains(s, "add_generation_prompt%}{{'<|im_start|>assistant\\n'}}")) throw refuse("an unknown generation prompt");
    // The loop prints each message, after a default system message on the
    // first when the conversation has none; then the generation prompt.
    const std::string beyond = beyond_recognized(
        jinja,
        [&](char kind, const std::string& e) -> char {
          if (kind == '{') {
            const bool literal =
                e.size() > 2 && e.front() == '\'' && e.back() == '\'' && !contains(e.substr(1, e.size() - 2), "'");
            // The default system message: the text of this literal (the
            // first of the source may sit in a {# comment #}).
            const std::string head = "'<|im_start|>system\\n", tail = "<|im_end|>\\n'";
            if (literal && e.size() >= head.size() + tail.size() && e.starts_with(head) && e.ends_with(tail)) {
              if (!jinja_literal_text(e.substr(head.size(), e.size() - head.size() - tail.size()), &default_system_))
                throw refuse("a default system message forge cannot read");
              has_default_system_ = true;
              return 'Y';
            }
            if (e == "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>'+'\\n'" ||
                e == "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>\\n'")
              return 'M';
            return e == "'<|im_start|>assistant\\n'" ? 'A' : 0;
          }
          if (e == "formessageinmessages") return 'F';
          if (e == "endfor") return 'E';
          if (e == "endif") return 'I';
          if (e == "ifadd_generation_prompt") return 'G';
          if (e == "ifloop.firstandmessages[0]['role']!='system'" || e == "ifloop.firstandmessages[0].role!='system'")
            return 'S';
          return 0;
        },
        {"FMEGAI", "FSYIMEGAI"});
    if (has_default_system_ &&
        !(contains(s, "messages[0]['role']!='system'") || contains(s, "messages[0].role!='system'")))
      throw refuse("a system message forge cannot tell when it prints");
    if (!beyond.empty()) throw refuse(beyond);
    end_of_turn_ = tokenizer_->special_id("<|im_end|>");
    if (end_of_turn_ < 0 || tokenizer_->special_id("<|im_start|>") < 0)
      throw refuse("its tokenizer lacks the special tokens <|im_start|> and <|im_end|>");
  } else if (contains(s, "'<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+message['content']|trim+'<|eot_id|>'")) {
    family_ = Family::kLlama3;
    if (!contains(s, "bos_token")) throw refuse("a Llama 3 template without bos_token");
    // Each message's header, content and end, with the BOS before the first;
    // then the generation prompt.
    const std::string beyond = beyond_recognized(
        jinja,
        [](char kind, const std::string& e) -> char {
          if (kind == '{') {
            if (e == "content") return 'P';
            return e == "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'" ? 'A' : 0;
          }
          if (e == "setloop_messages=messages") return 'L';
          if (e == "formessageinloop_messages") return 'F';
          if (e == "setcontent='<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+message['content']"
                   "|trim+'<|eot_id|>'")
            return 'C';
          if (e == "ifloop.index0==0") return 'Z';
          if (e == "setcontent=bos_token+content") return 'B';
          if (e == "endif") return 'I';
          if (e == "endfor") return 'E';
          return e == "ifadd_generation_prompt" ? 'G' : 0;
        },
        {"LFCZBIPEGAI"});
    if (!beyond.empty()) throw refuse(beyond);
    end_of_turn_ = tokenizer_->special_id("<|eot_id|>");
    if (end_of_turn_ < 0 || tokenizer_->special_id("<|start_header_id|>") < 0 || bos_.empty())
      throw refuse("its tokenizer lacks <|eot_id|>, <|start_header_id|> or a BOS token");
  } else {
    throw refuse("unrecognized");
  }
  stop_tokens_ = {end_of_turn_};
  for (const int32_t id : end_ids)
    if (id >= 0 && id < tokenizer_->vocab_size() &&
        std::find(stop_tokens_.begin(), stop_tokens_.end(), id) == stop_tokens_.end())
      stop_tokens_.push_back(id);
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
