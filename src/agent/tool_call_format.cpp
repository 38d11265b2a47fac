#include "agent/tool_call_format.hpp"

#include <algorithm>
#include <cctype>

#include "core/json_escape.hpp"
#include "core/utf8.hpp"
#include "env/environment.hpp"
#include "tokenizer/byte_tokenizer.hpp"

namespace forge {
namespace {

bool is_identifier(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}

bool xml_unescape(std::string_view s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '>') return false;
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const std::string_view rest = s.substr(i);
    if (rest.starts_with("&amp;")) out += '&', i += 4;
    else if (rest.starts_with("&lt;")) out += '<', i += 3;
    else if (rest.starts_with("&gt;")) out += '>', i += 3;
    else return false;
  }
  return true;
}

ParsedAction invalid(std::string why) {
  ParsedAction a;
  a.error = std::move(why);
  return a;
}

// Built with append, not "'" + std::string&&: GCC 12 warns (-Wrestrict, a
// false positive) on that operator+ once inlined here.
ParsedAction not_a_tool_name(const std::string& name) {
  return invalid(std::string("'").append(name, 0, 40).append("' is not a tool name"));
}

ParsedAction action(std::string name, std::string args) {
  ParsedAction a;
  if (!is_identifier(name)) return not_a_tool_name(name);
  const std::string body(trim(args));
  if (name == kAnswerTool) {
    if (body.empty()) return invalid("empty answer");
    a.kind = ParsedAction::Kind::kAnswer;
    a.answer = body;
  } else {
    a.kind = ParsedAction::Kind::kCall;
    a.call = {std::move(name), body};
  }
  return a;
}

// A minimal JSON object of string (or bare number) values.
class JsonObject {
 public:
  explicit JsonObject(std::string_view s) : s_(s) {}
  bool parse(std::vector<std::pair<std::string, std::string>>& out, std::string& error) {
    skip();
    if (!eat('{')) return fail(error, "expected '{'");
    skip();
    if (eat('}')) return finish(error);
    while (true) {
      std::string key, value;
      skip();
      if (!string(key)) return fail(error, "expected a quoted key");
      skip();
      if (!eat(':')) return fail(error, "expected ':' after \"" + key + "\"");
      skip();
      // A quote starts a string, anything else a number: a string that
      // fails part-way is not read again as a number from where it stopped.
      const bool quoted = i_ < s_.size() && s_[i_] == '"';
      if (!(quoted ? string(value) : number(value)))
        return fail(error, "expected a string value for \"" + key + "\"");
      out.push_back({key, value});
      skip();
      if (eat(',')) continue;
      if (eat('}')) return finish(error);
      return fail(error, "expected ',' or '}'");
    }
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool string(std::string& out) {
    if (!eat('"')) return false;
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;  // JSON has them escaped
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        const char e = s_[i_++];
        if (e == 'u') {
          char32_t cp = 0;
          if (!hex4(cp)) return false;
          // A surrogate pair is one code point; a lone surrogate is not text.
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            char32_t low = 0;
            if (!eat('\\') || !eat('u') || !hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(cp, &out);
          continue;
        }
        constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
        const size_t k = kFrom.find(e);
        if (k == std::string_view::npos) return false;
        c = kTo[k];
      }
      out += c;
    }
    return false;
  }
  bool hex4(char32_t& cp) {
    if (s_.size() - i_ < 4) return false;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (v < 0) return false;
      cp = cp * 16 + static_cast<char32_t>(v);
    }
    return true;
  }
  // A JSON number, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, as its text.
  bool number(std::string& out) {
    const size_t begin = i_;
    const auto digits = [&] {
      const size_t from = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      return i_ > from;
    };
    eat('-');
    const bool leading_zero = i_ < s_.size() && s_[i_] == '0';
    const size_t int_begin = i_;
    bool ok = digits() && !(leading_zero && i_ - int_begin > 1);
    if (ok && eat('.')) ok = digits();
    if (ok && (eat('e') || eat('E'))) {
      if (!eat('+')) eat('-');
      ok = digits();
    }
    if (!ok) {
      i_ = begin;
      return false;
    }
    out = std::string(s_.substr(begin, i_ - begin));
    return true;
  }
  bool finish(std::string& error) {
    skip();
    return i_ == s_.size() || fail(error, "text after the closing '}'");
  }
  bool fail(std::string& error, const std::string& what) {
    error = "JSON: " + what + " at byte " + std::to_string(i_);
    return false;
  }
  std::string_view s_;
  size_t i_ = 0;
};

// The arguments run from the first '(' to the last ')', parentheses in them
// unchecked (a program's string may hold one), except a second call: where
// the first '(' closes (or a ')' closes past it), text going on as `name(`,
// after whitespace or ; , . between them, is a second action.
ParsedAction parse_paren(std::string_view s) {
  const size_t open = s.find('(');
  if (open == std::string_view::npos || s.back() != ')')
    return invalid("expected name(args)");
  // Linear: the first '(' after i and the end of the text before it (its
  // trailing whitespace cut) are found once per run of closing ')'.
  int depth = 0;
  size_t next_open = open, name_end = open;
  for (size_t i = open; i + 1 < s.size(); ++i) {
    depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
    if (depth > 0 || s[i] != ')') continue;
    if (next_open <= i) {
      next_open = s.find('(', i + 1);
      if (next_open == std::string_view::npos) break;  // no name( follows
      name_end = next_open;
      while (name_end > i + 1 && std::isspace(static_cast<unsigned char>(s[name_end - 1]))) --name_end;
    }
    size_t name_begin = i + 1;
    while (name_begin < name_end && (std::isspace(static_cast<unsigned char>(s[name_begin])) || s[name_begin] == ';' ||
                                     s[name_begin] == ',' || s[name_begin] == '.'))
      ++name_begin;
    if (name_begin < name_end && is_identifier(s.substr(name_begin, name_end - name_begin)))
      return invalid("text after the call's closing ')': one action per turn");
  }
  return action(std::string(trim(s.substr(0, open))), std::string(s.substr(open + 1, s.size() - open - 2)));
}

ParsedAction parse_json(std::string_view s) {
  std::vector<std::pair<std::string, std::string>> fields;
  std::string error;
  if (!JsonObject(s).parse(fields, error)) return invalid(error);
  auto get = [&](const char* key) -> const std::string* {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  };
  for (const auto& [k, v] : fields)
    if (k != "tool" && k != "args" && k != kAnswerTool) return invalid("JSON: unexpected key \"" + k + "\"");
  if (const std::string* a = get(kAnswerTool)) {
    if (fields.size() != 1) return invalid("JSON: an answer has only the key \"answer\"");
    return action(kAnswerTool, *a);
  }
  const std::string* tool = get("tool");
  const std::string* args = get("args");
  if (!tool || !args || fields.size() != 2) return invalid("JSON: expected keys \"tool\" and \"args\"");
  if (*tool == kAnswerTool) return invalid("JSON: write the answer as {\"answer\":...}");
  return action(*tool, *args);
}

ParsedAction parse_xml(std::string_view s) {
  if (s.size() < 2 || s[0] != '<') return invalid("expected <name>args</name>");
  const size_t close = s.find('>');
  if (close == std::string_view::npos) return invalid("unterminated opening tag");
  const std::string name(s.substr(1, close - 1));
  const std::string end = "</" + name + ">";
  if (!is_identifier(name)) return not_a_tool_name(name);
  if (s.size() < close + 1 + end.size() || !s.ends_with(end))
    return invalid("expected the closing tag " + end);
  std::string body;
  if (!xml_unescape(s.substr(close + 1, s.size() - close - 1 - end.size()), body))
    return invalid("bad character or entity inside <" + name + ">");
  return action(name, body);
}

}  // namespace

std::string action_markup(CallFormat format, const ToolCall& call, const ScaffoldVocabulary& vocab) {
  const bool answer = call.tool == kAnswerTool;
  switch (format) {
    case CallFormat::kParen:
      return paren_form(call);
    case CallFormat::kJson:
      return answer ? "{\"answer\":\"" + json_escape(call.args) + "\"}"
                    : "{\"tool\":\"" + json_escape(call.tool) + "\",\"args\":\"" + json_escape(call.args) + "\"}";
    case CallFormat::kXml:
      return "<" + call.tool + ">" + xml_escape(call.args) + "</" + call.tool + ">";
    case CallFormat::kSpecial:
      return vocab.tool_call_open() + call.tool + " " + call.args + vocab.tool_call_close();
  }
  return {};
}

std::vector<ScaffoldVocabulary::Part> action_parts(CallFormat format, const ToolCall& call,
                                                   const ScaffoldVocabulary& vocab) {
  if (format != CallFormat::kSpecial) return {{action_markup(format, call, vocab), false}};
  return {{vocab.tool_call_open(), true}, {call.tool + " " + call.args, false}, {vocab.tool_call_close(), true}};
}

std::vector<int32_t> render_action(CallFormat format, const ToolCall& call, const ScaffoldVocabulary& vocab) {
  return vocab.encode(action_parts(format, call, vocab));
}

ParsedAction parse_action(CallFormat format, const std::vector<int32_t>& generated, const ScaffoldVocabulary& vocab) {
  std::vector<int32_t> t = generated;
  if (!t.empty() && vocab.is_stop(t.back())) t.pop_back();
  std::string text;
  if (vocab.native()) {
    // A pretrained model writes every format as text: any special token is out of place.
    for (int32_t x : t)
      if (x < 0 || x >= vocab.vocab_size() || vocab.is_special(x))
        return invalid("unexpected token " + (x < 0 || x >= vocab.vocab_size() ? std::to_string(x)
                                                                                 : vocab.tokenizer().token_text(x)));
    text = vocab.decode(t);
    if (format == CallFormat::kSpecial) {
      const std::string_view s = trim(text);
      const std::string& open = vocab.tool_call_open();
      const std::string& close = vocab.tool_call_close();
      if (!s.starts_with(open) || !s.ends_with(close) || s.size() < open.size() + close.size())
        return invalid("expected " + open + "name args" + close);
      text = std::string(s.substr(open.size(), s.size() - open.size() - close.size()));
      // One action per turn, as the built-in vocabulary's special delimiters
      // make it: a delimiter inside is a second action, not arguments.
      if (text.find(open) != std::string::npos || text.find(close) != std::string::npos)
        return invalid("more than one " + open + "..." + close + " in one turn");
    }
  } else {
    // Whitespace bytes around the action are ignored (also around special tokens).
    auto space = [](int32_t x) { return x >= 0 && x < 256 && std::isspace(x); };
    size_t b = 0, e = t.size();
    while (b < e && space(t[b])) ++b;
    while (e > b && space(t[e - 1])) --e;
    if (b == e) return invalid("empty output");
    if (format == CallFormat::kSpecial) {
      if (t[b] != kToolCallOpen || t[e - 1] != kToolCallClose || e - b < 2)
        return invalid("expected <|tool_call|>name args<|/tool_call|>");
      ++b, --e;
    }
    for (size_t i = b; i < e; ++i) {
      if (vocab.is_special(t[i]) || t[i] < 0)
        return invalid("unexpected token " + (t[i] < 0 || t[i] >= vocab.vocab_size()
                                                  ? std::to_string(t[i])
                                                  : vocab.tokenizer().token_text(t[i])));
      text += static_cast<char>(t[i]);
    }
  }
  const std::string_view s = trim(text);
  if (s.empty()) return invalid("empty output");
  switch (format) {
    case CallFormat::kParen: return parse_paren(s);
    case CallFormat::kJson: return parse_json(s);
    case CallFormat::kXml: return parse_xml(s);
    case CallFormat::kSpecial: {
      const size_t sp = s.find_first_of(" \t\n");
      if (sp == std::string_view::npos) return action(std::string(s), "");
      return action(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
    }
  }
  return invalid("unknown format");
}

}  // namespace forge
