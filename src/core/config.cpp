#include "core/config.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "core/utf8.hpp"

namespace forge {
namespace po = boost::program_options;

// ---- formatting -----------------------------------------------------------------

std::string format_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string format_float(float v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The candidate closest to `word`, if it is close enough to be a likely typo;
// a candidate whose last dotted component equals `word` also counts
// ("d_model" -> "model.d_model").
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  for (const auto& c : candidates) {
    size_t d = edit_distance(lower(word), lower(c));
    const size_t dot = c.rfind('.');
    if (dot != std::string::npos && c.substr(dot + 1) == word) d = std::min<size_t>(d, 1);
    if (d < best_d) best_d = d, best = c;
  }
  return best_d <= limit ? best : "";
}

const char* type_name(const OptionTarget& t) {
  switch (t.index()) {
    case 0: return "int";
    case 1: return "int";
    case 2: return "uint";
    case 3: return "float";
    case 4: return "float";
    case 5: return "bool";
    default: return "string";
  }
}

std::string current_text(const OptionTarget& t) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) return *p;
        else if constexpr (std::is_same_v<T, bool>) return *p ? "true" : "false";
        else if constexpr (std::is_same_v<T, float>) return format_float(*p);
        else if constexpr (std::is_same_v<T, double>) return format_number(*p);
        else return std::to_string(*p);
      },
      t);
}

template <class Int>
bool parse_integer(const std::string& s, Int* out, std::string* why) {
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (b != e && *b == '+' && ++b != e && *b == '-') {  // "+-5": one sign at most
    *why = std::is_unsigned_v<Int> ? "is not a non-negative integer" : "is not an integer";
    return false;
  }
  if constexpr (std::is_unsigned_v<Int>) {
    if (b != e && *b == '-') {
      *why = "is not a non-negative integer";
      return false;
    }
  }
  Int v{};
  auto r = std::from_chars(b, e, v);
  if (r.ec == std::errc::result_out_of_range) {
    *why = "is out of range: must be in [" + std::to_string(std::numeric_limits<Int>::min()) +
           ", " + std::to_string(std::numeric_limits<Int>::max()) + "]";
    return false;
  }
  if (b == e || r.ec != std::errc() || r.ptr != e) {
    *why = std::is_unsigned_v<Int> ? "is not a non-negative integer" : "is not an integer";
    return false;
  }
  *out = v;
  return true;
}

bool parse_real(const std::string& s, double* out, std::string* why) {
  // strtod accepts hex floats, "inf" and "nan"; only finite decimal numbers
  // are configuration values.
  const bool ok_chars = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
           c == '+' || c == '-';
  });
  if (!ok_chars) {
    *why = "is not a number";
    return false;
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) {
    *why = "is not a number";
    return false;
  }
  if (!std::isfinite(v)) {  // overflow
    *why = "is out of range for a floating-point number";
    return false;
  }
  // Underflow: a non-zero literal read as 0 (1e-400 would turn a
  // temperature or a clip off); a denormal is kept.
  if (v == 0 && s.find_first_of("123456789") < s.find_first_of("eE")) {
    *why = "is too small for a floating-point number (it reads as 0)";
    return false;
  }
  *out = v;
  return true;
}

bool parse_bool(const std::string& s, bool* out) {
  const std::string l = lower(s);
  if (l == "true" || l == "1" || l == "yes" || l == "on") return *out = true, true;
  if (l == "false" || l == "0" || l == "no" || l == "off") return *out = false, true;
  return false;
}

// Strips ';' comments (whole lines, or after whitespace) that Boost's INI
// reader does not know; it strips '#' comments itself. Keeps line numbers.
std::string strip_semicolon_comments(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string t = trim(line);
    if (!t.empty() && t[0] == ';') {
      line.clear();
    } else {
      for (size_t i = 1; i < line.size(); ++i)
        if (line[i] == ';' && std::isspace(static_cast<unsigned char>(line[i - 1]))) {
          line.resize(i);
          break;
        }
    }
    out += line + "\n";
  }
  return out;
}

// A line as Boost's INI reader reads it: without its '#' comment, trimmed.
std::string ini_content(const std::string& line) {
  const size_t hash = line.find('#');
  return trim(hash == std::string::npos ? line : line.substr(0, hash));
}

// Whether ini_content() is a [section] line.
bool is_section_line(const std::string& t) { return t.size() >= 2 && t.front() == '[' && t.back() == ']'; }

// The first line of `text` that Boost's INI reader refuses (neither blank, a
// '#' comment, a [section] nor key = value), as "N: 'line'"; empty if none.
std::string first_invalid_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = ini_content(line);
    const bool section = is_section_line(t);
    if (!t.empty() && !section && t.find('=') == std::string::npos)
      return std::to_string(n) + ": '" + t + "'";
  }
  return "";
}

// The first [section] line of `text` whose name is empty or has spaces at
// either end ("[]", "[ model ]"), which Boost's reader takes as a prefix
// of its own (" model .d_model", an empty name read before its start); as
// "N: 'line'"; empty if none.
std::string first_bad_section(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = ini_content(line);
    if (!is_section_line(t)) continue;
    const std::string name = t.substr(1, t.size() - 2);
    if (name.empty() || name != trim(name)) return std::to_string(n) + ": '" + t + "'";
  }
  return "";
}

// The first "key = value" line of `text` whose value holds a '#' right after
// another character (`token = abc#def`, `dir=#3`): Boost's reader ends the
// value there and takes the rest for a comment, so the value would be read
// cut. A '#' after whitespace is a comment as documented. As "N: 'line'";
// empty if none.
std::string first_value_cut_by_hash(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t eq = line.find('='), hash = line.find('#');
    if (eq == std::string::npos || hash == std::string::npos || hash < eq) continue;
    if (!std::isspace(static_cast<unsigned char>(line[hash - 1])))  // glued to the value or to '='
      return std::to_string(n) + ": '" + trim(line) + "'";
  }
  return "";
}

// The 1-based lines of `text` that set `key` (dotted, section-aware), in order.
std::vector<int> lines_of_key(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line, section;
  std::vector<int> lines;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string t = ini_content(line);
    if (is_section_line(t)) {
      section = trim(t.substr(1, t.size() - 2));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = trim(t.substr(0, eq));
    if ((section.empty() ? name : section + "." + name) == key) lines.push_back(n);
  }
  return lines;
}

po::options_description boost_description(const std::vector<std::string>& keys,
                                          const std::vector<bool>& is_bool, bool config) {
  po::options_description desc;
  desc.add_options()("help,h", "show this help");
  if (config) desc.add_options()("config", po::value<std::string>(), "INI file");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (is_bool[i])
      desc.add_options()(keys[i].c_str(), po::value<std::string>()->implicit_value("true"), "");
    else
      desc.add_options()(keys[i].c_str(), po::value<std::string>(), "");
  }
  return desc;
}

}  // namespace

// ---- validators -----------------------------------------------------------------

Validator in_range(double lo, double hi, Interval ends) {
  const bool open_lo = ends == Interval::kOpenLow || ends == Interval::kOpen;
  const bool open_hi = ends == Interval::kOpenHigh || ends == Interval::kOpen;
  Validator v;
  v.allowed = std::string("in ") + (open_lo ? "(" : "[") + format_number(lo) + ", " +
              format_number(hi) + (open_hi ? ")" : "]");
  v.number = [=](double x) {
    return (open_lo ? x > lo : x >= lo) && (open_hi ? x < hi : x <= hi);
  };
  return v;
}

Validator at_least(double lo) {
  Validator v;
  v.allowed = ">= " + format_number(lo);
  v.number = [lo](double x) { return x >= lo; };
  return v;
}

Validator greater_than(double lo) {
  Validator v;
  v.allowed = "> " + format_number(lo);
  v.number = [lo](double x) { return x > lo; };
  return v;
}

Validator one_of(std::vector<std::string> choices) {
  Validator v;
  v.allowed = "one of: " + join(choices, ", ");
  v.choices = choices;
  v.text = [choices](const std::string& s) {
    return std::find(choices.begin(), choices.end(), s) != choices.end();
  };
  return v;
}

Validator non_empty() {
  Validator v;
  v.allowed = "non-empty";
  v.text = [](const std::string& s) { return !s.empty(); };
  return v;
}

Validator satisfies(std::string allowed, std::function<bool(double)> ok) {
  Validator v;
  v.allowed = std::move(allowed);
  v.number = std::move(ok);
  return v;
}

// ---- OptionSet ------------------------------------------------------------------

OptionSet::OptionSet(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

OptionSet& OptionSet::add_option(const std::string& key, OptionTarget target,
                                 const std::string& help, Validator validator) {
  FORGE_CHECK(std::visit([](auto* p) { return p != nullptr; }, target),
              "option '" + key + "' has no target");
  FORGE_CHECK(!key.empty() && key.front() != '.' && key.back() != '.' &&
                  key.find_first_of(" \t=[]#;,") == std::string::npos,
              "bad option key '" + key + "'");
  FORGE_CHECK(key != "help" && key != "config" && key != "h", "reserved option key '" + key + "'");
  FORGE_CHECK(!has(key), "option '" + key + "' registered twice");
  const bool is_string = std::holds_alternative<std::string*>(target);
  const bool is_bool = std::holds_alternative<bool*>(target);
  FORGE_CHECK(!validator.number || (!is_string && !is_bool),
              "numeric validator on non-numeric option '" + key + "'");
  FORGE_CHECK(!validator.text || is_string, "string validator on non-string option '" + key + "'");

  Option o;
  o.key = key;
  const size_t dot = key.rfind('.');
  o.section = dot == std::string::npos ? "" : key.substr(0, dot);
  o.name = dot == std::string::npos ? key : key.substr(dot + 1);
  o.help = help;
  o.target = target;
  o.default_text = current_text(target);
  o.validator = std::move(validator);
  if (std::none_of(sections_.begin(), sections_.end(),
                   [&](const auto& s) { return s.first == o.section; }))
    sections_.emplace_back(o.section, "");
  options_.push_back(std::move(o));
  // The default must satisfy the validator: re-set it through the checks.
  try {
    set(key, options_.back().default_text, "default");
  } catch (const InputError& e) {
    throw Error(std::string("default value violates its validator: ") + e.what());
  }
  return *this;
}

OptionSet& OptionSet::add_positional(const std::string& name, std::string* target,
                                     const std::string& help, bool required) {
  FORGE_CHECK(target != nullptr, "positional '" + name + "' has no target");
  FORGE_CHECK(!required || positionals_.empty() || positionals_.back().required,
              "required positional '" + name + "' after an optional one");
  positionals_.push_back({name, help, target, required});
  return *this;
}

OptionSet& OptionSet::describe_section(const std::string& section, const std::string& help) {
  for (auto& s : sections_)
    if (s.first == section) {
      s.second = help;
      return *this;
    }
  sections_.emplace_back(section, help);
  return *this;
}

OptionSet& OptionSet::add_check(std::function<void()> check) {
  checks_.push_back(std::move(check));
  return *this;
}

OptionSet& OptionSet::allow_config_file(bool allow) {
  allow_config_ = allow;
  return *this;
}

OptionSet& OptionSet::command_line_only(const std::string& key) {
  Option* o = find(key);
  FORGE_CHECK(o != nullptr, "command_line_only: option '" + key + "' is not registered");
  o->stored = false;
  return *this;
}

void OptionSet::require_storable() const {
  for (const Option& o : options_) {
    if (!o.stored || o.secret || !std::holds_alternative<std::string*>(o.target)) continue;
    const std::string& value = *std::get<std::string*>(o.target);
    // What the INI reader would not give back: a comment ('#' anywhere, as
    // Boost's reader takes it; ';' as strip_semicolon_comments takes it in
    // the line dump_ini writes), a line break (another line), spaces at
    // either end (trimmed).
    const std::string line = o.name + " = " + value + "\n";
    const bool comment = value.find('#') != std::string::npos || strip_semicolon_comments(line) != line;
    const bool broken = value.find_first_of("\r\n") != std::string::npos || trim(value) != value;
    if (comment || broken)
      throw InputError(o.key + " = '" + value + "': the run's config.ini, which stores it, would not read it back (" +
                       (comment ? "'#', or ';' at the start or after a space, begins a comment there"
                                : "a line break or spaces at either end") +
                       ")");
  }
}

OptionSet& OptionSet::secret(const std::string& key) {
  Option* o = find(key);
  FORGE_CHECK(o != nullptr && std::holds_alternative<std::string*>(o->target),
              "secret: option '" + key + "' is not a registered string");
  o->secret = true;
  return *this;
}

// The hint for a surplus argument `surplus` that a word after a bare bool
// flag explains: that word was meant as the flag's value.
std::string OptionSet::word_after_bare_bool(const std::vector<std::string>& args, const std::string& surplus) const {
  // A word is taken for the flag's value when it is a boolean misspelt
  // ("tru", "flase"), the surplus argument of a command that takes none
  // (`forge config --model.qkv_bias maybe`), or, where the command takes
  // arguments, a word that is no path (`forge inspect --json maybe f.h5`:
  // "maybe" took FILE; `--json a.h5 b.h5` is a surplus file).
  const auto no_path = [](const std::string& w) {
    std::error_code ec;
    return w.find_first_of("./") == std::string::npos && !std::filesystem::exists(w, ec);
  };
  const auto misspelt_bool = [](const std::string& w) {
    for (const char* b : {"true", "false", "yes", "no", "on", "off"})
      if (edit_distance(lower(w), b) <= (std::strlen(b) > 3 ? 2u : 1u)) return true;
    return false;
  };
  for (size_t i = 0; i + 1 < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    bool b;
    if (a.size() > 2 && a.compare(0, 2, "--") == 0 && a.find('=') == std::string::npos && has(a.substr(2)) &&
        std::holds_alternative<bool*>(get(a.substr(2)).target) && args[i + 1].compare(0, 2, "--") != 0 &&
        !parse_bool(args[i + 1], &b) &&
        ((positionals_.empty() ? args[i + 1] == surplus : no_path(args[i + 1])) || misspelt_bool(args[i + 1])))
      return " ('" + args[i + 1] + "' after " + a + " was read as an argument: " + a +
             " alone means true, and its value is true/false, yes/no, on/off or 1/0: " + a + "=VALUE)";
  }
  return "";
}

// `--key value` as `--key=value`, by forge's rules rather than Boost's (which
// takes whatever follows, a flag included, and lets a bare bool flag swallow
// a positional): a bool key takes the next argument only when it is a
// boolean; another key never takes a flag as its value.
std::vector<std::string> OptionSet::attach_values(const std::vector<std::string>& args) const {
  const auto takes_value = [&](const std::string& key) { return key == "config" ? allow_config_ : has(key); };
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const bool flag = a.size() > 2 && a.compare(0, 2, "--") == 0;
    const size_t eq = a.find('=');
    if (flag && eq == a.size() - 1 && takes_value(a.substr(2, eq - 2))) {
      out.push_back(a.substr(0, eq));  // `--key=`: the empty value, which Boost refuses in that form
      out.emplace_back();
      continue;
    }
    if (!flag || eq != std::string::npos || !takes_value(a.substr(2))) {
      out.push_back(a);
      continue;
    }
    const std::string key = a.substr(2);
    const bool has_next = i + 1 < args.size();
    bool b;
    if (key != "config" && std::holds_alternative<bool*>(get(key).target)) {
      const bool take = has_next && parse_bool(args[i + 1], &b);
      out.push_back(a + "=" + (take ? args[++i] : std::string("true")));
      continue;
    }
    if (!has_next || args[i + 1].compare(0, 2, "--") == 0)
      throw InputError(a + " needs a value" +
                       (has_next ? ", but the next argument is '" + args[i + 1] + "' (write " + a +
                                       "=VALUE for a value that starts with --)"
                                 : std::string(" (" + a + "=VALUE or " + a + " VALUE)")));
    if (args[i + 1].empty()) {  // an empty value: Boost takes it only as its own argument
      out.push_back(a);
      out.push_back(args[++i]);
      continue;
    }
    out.push_back(a + "=" + args[++i]);
  }
  return out;
}

OptionSet::Option* OptionSet::find(const std::string& key) {
  for (auto& o : options_)
    if (o.key == key) return &o;
  return nullptr;
}

const OptionSet::Option& OptionSet::get(const std::string& key) const {
  for (const auto& o : options_)
    if (o.key == key) return o;
  throw Error("no option '" + key + "' is registered");
}

bool OptionSet::has(const std::string& key) const {
  return std::any_of(options_.begin(), options_.end(), [&](const Option& o) { return o.key == key; });
}

std::vector<std::string> OptionSet::keys() const {
  std::vector<std::string> k;
  for (const auto& o : options_) k.push_back(o.key);
  return k;
}

std::string OptionSet::value_text(const std::string& key) const { return current_text(get(key).target); }
std::string OptionSet::default_text(const std::string& key) const { return get(key).default_text; }
std::string OptionSet::source(const std::string& key) const { return get(key).source; }

std::string OptionSet::suggest(const std::string& key, bool flag) const {
  std::vector<std::string> candidates = keys();
  if (flag) {  // on the command line, --help and --config are options too (--confg x)
    candidates.push_back("help");
    if (allow_config_) candidates.push_back("config");
  }
  return closest(key, candidates);
}

std::string OptionSet::unknown_message(const std::string& shown, const std::string& key,
                                       const std::string& where) const {
  std::string msg = "unknown option '" + shown + "'" + where;
  const std::string s = suggest(key, shown.rfind("--", 0) == 0);
  if (!s.empty()) msg += std::string(" (did you mean ") + (shown.rfind("--", 0) == 0 ? "--" : "") + s + "?)";
  else msg += "; see --help for the list of options";
  return msg;
}

void OptionSet::set(const std::string& key, const std::string& value, const std::string& source) {
  Option* o = find(key);
  if (!o) throw InputError(unknown_message(key, key, source == "command line" ? "" : " in " + source));
  const std::string where =
      (source == "command line" || source == "default") ? "" : " (in " + source + ")";
  const std::string shown = value;
  // A flag that no INI file may set is named as it is typed (--format).
  const std::string name = (allow_config_ && o->stored) ? key : "--" + key;
  auto fail = [&](const std::string& why) {
    throw InputError(name + ": '" + shown + "' " + why + where);
  };
  const Validator& v = o->validator;
  auto check_number = [&](double x) {
    if (v.number && !v.number(x))
      throw InputError(name + " = " + shown + " is out of range: must be " + v.allowed + where);
  };
  // A NUL byte ends the value for every file and system call that reads it
  // (a run.dir 'a<NUL>b' is the folder 'a'): no key takes one.
  if (value.find('\0') != std::string::npos)
    throw InputError(name + ": its value holds a NUL byte, where a path or name would end" + where);
  const std::string s = trim(value);
  std::string why;
  // An integer too large for its type is reported against the validator's
  // range where it bounds both ends ("must be in [8, 65536]"), else with
  // the type's end too (">= 0" alone named a range the value is in).
  auto fail_integer = [&](auto max) {
    if (v.number && why.rfind("is out of range", 0) == 0)
      throw InputError(name + " = " + shown + " is out of range: must be " + v.allowed +
                       (v.allowed.rfind("in ", 0) == 0 ? "" : " and at most " + std::to_string(max)) + where);
    fail(why);
  };
  switch (o->target.index()) {
    case 0: {
      int x;
      if (!parse_integer(s, &x, &why)) fail_integer(std::numeric_limits<int>::max());
      check_number(x);
      *std::get<int*>(o->target) = x;
      break;
    }
    case 1: {
      int64_t x;
      if (!parse_integer(s, &x, &why)) fail_integer(std::numeric_limits<int64_t>::max());
      check_number(static_cast<double>(x));
      *std::get<int64_t*>(o->target) = x;
      break;
    }
    case 2: {
      uint64_t x;
      if (!parse_integer(s, &x, &why)) fail_integer(std::numeric_limits<uint64_t>::max());
      check_number(static_cast<double>(x));
      *std::get<uint64_t*>(o->target) = x;
      break;
    }
    case 3: {
      double x;
      if (!parse_real(s, &x, &why)) fail(why);
      if (std::fabs(x) > std::numeric_limits<float>::max())
        fail("is out of range for a 32-bit float");
      const float f = static_cast<float>(x);
      if (x != 0.0 && f == 0.0f) fail("is too small for a 32-bit float");
      // Checked as stored: a value that rounds onto a bound says so (0.99999999
      // is 1 as a float, outside [0, 1)).
      if (v.number && !v.number(f) && v.number(x))
        throw InputError(name + " = " + shown + " is out of range: it rounds to " + format_float(f) +
                         " as a 32-bit float, and must be " + v.allowed + where);
      check_number(f);
      *std::get<float*>(o->target) = f;
      break;
    }
    case 4: {
      double x;
      if (!parse_real(s, &x, &why)) fail(why);
      check_number(x);
      *std::get<double*>(o->target) = x;
      break;
    }
    case 5: {
      bool b;
      if (!parse_bool(s, &b)) fail("is not a boolean: must be true or false (or 1/0, yes/no, on/off)");
      *std::get<bool*>(o->target) = b;
      break;
    }
    default: {
      // Strings are taken verbatim (INI values are trimmed by the reader).
      if (v.text && !v.text(value)) {
        std::string msg = name + " = '" + value + "' is not allowed: must be " + v.allowed;
        if (!v.choices.empty()) {
          const std::string c = closest(value, v.choices);
          if (!c.empty()) msg += " (did you mean " + c + "?)";
        }
        throw InputError(msg + where);
      }
      *std::get<std::string*>(o->target) = value;
      break;
    }
  }
  o->source = source;
}

void OptionSet::load_ini_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError("config file '" + path + "' is a directory, not an INI file");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("cannot open config file '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  load_ini_text(ss.str(), path);
}

void OptionSet::load_ini_text(const std::string& text, const std::string& source) {
  std::vector<std::string> ks;
  std::vector<bool> is_bool;
  for (const auto& o : options_) {
    ks.push_back(o.key);
    is_bool.push_back(std::holds_alternative<bool*>(o.target));
  }
  const po::options_description desc = boost_description(ks, is_bool, false);
  // Not text: an HDF5 file (`--config ckpt.h5` for --train.init), UTF-16 or
  // UTF-32 (Notepad's "Unicode"), another binary file. Its bytes read as
  // old Mac line endings, or cut the message at their first NUL.
  if (text.compare(0, 4, "\x89HDF") == 0)
    throw InputError(source + ": an HDF5 file (a checkpoint or rollouts.h5), not an INI configuration (a checkpoint "
                     "to start from is --train.init=FILE)");
  if (text.compare(0, 2, "\xFF\xFE") == 0 || text.compare(0, 2, "\xFE\xFF") == 0)
    throw InputError(source + ": UTF-16 or UTF-32 text (its byte order mark says so); save the file as UTF-8");
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw InputError(source + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + nul, '\n')) +
                     ": a NUL byte: not a text file (binary, or UTF-16 or UTF-32 without a byte order mark; save "
                     "the configuration as UTF-8)");
  // A UTF-8 byte order mark (Windows editors write one) is not part of the first key.
  const bool bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0;
  // A carriage return not before a newline: the file ends its lines in CR
  // alone (old Mac), which would read as one long line.
  for (size_t cr = text.find('\r'); cr != std::string::npos; cr = text.find('\r', cr + 1))
    if (cr + 1 == text.size() || text[cr + 1] != '\n')
      throw InputError(source + ": a line ends in a carriage return alone (old Mac line endings); save the file with "
                       "LF or CRLF line endings");
  const std::string stripped = strip_semicolon_comments(bom ? text.substr(3) : text);
  const std::string section = first_bad_section(stripped);
  if (!section.empty())
    throw InputError(source + ":" + section + ": a section's name is a word between its brackets, not empty and "
                     "without spaces at its ends, as [model]");
  const std::string cut = first_value_cut_by_hash(stripped);
  if (!cut.empty())
    throw InputError(source + ":" + cut + ": a value cannot hold '#' (the reader would end it there; a comment "
                     "after a value needs a space before its '#')");
  std::istringstream in(stripped);
  po::parsed_options parsed(&desc);
  try {
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    const std::string bad = first_invalid_line(stripped);
    if (bad.empty()) throw InputError(source + ": " + e.what());
    throw InputError(source + ":" + bad + " is neither 'key = value' nor a [section] line");
  }
  auto at = [&](const std::string& key) {
    const std::vector<int> lines = lines_of_key(stripped, key);
    return lines.empty() ? source : source + ":" + std::to_string(lines.front());
  };
  for (const auto& opt : parsed.options) {
    if (opt.unregistered || !has(opt.string_key) || opt.string_key == "help")
      throw InputError(unknown_message(opt.string_key, opt.string_key, " in " + at(opt.string_key)));
    if (!get(opt.string_key).stored)
      throw InputError(opt.string_key + " in " + at(opt.string_key) + " is a command-line flag (--" +
                       opt.string_key + "), not a configuration key; delete the line (config.ini files "
                       "that forge train wrote before 2026-11-29 carry it)");
  }
  // A key set twice (in one section, or in a repeated [section]) is a
  // mistake that the last value would hide.
  std::map<std::string, int> times;
  for (const auto& opt : parsed.options) {
    if (++times[opt.string_key] < 2) continue;
    const std::vector<int> lines = lines_of_key(stripped, opt.string_key);
    throw InputError(opt.string_key + " is set twice in " + source +
                     (lines.size() > 1 ? " (lines " + std::to_string(lines[0]) + " and " + std::to_string(lines[1]) + ")"
                                       : std::string()));
  }
  for (const auto& opt : parsed.options) {
    set(opt.string_key, opt.value.empty() ? "" : opt.value.front(), at(opt.string_key));
  }
}

ParseResult OptionSet::parse(int argc, const char* const argv[]) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(args);
}

ParseResult OptionSet::parse(const std::vector<std::string>& args) {
  // Help is --help or -h as an argument of its own, not a flag's value
  // (`--prompt -h` is the prompt "-h"); on a line that does not pair its
  // values (`--prompt --help`) help still wins.
  std::vector<std::string> paired;
  try {
    paired = attach_values(args);
  } catch (const InputError&) {
    paired = args;
  }
  for (const auto& a : paired) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") return ParseResult{true};
  }
  std::vector<std::string> ks;
  std::vector<bool> is_bool;
  for (const auto& o : options_) {
    ks.push_back(o.key);
    is_bool.push_back(std::holds_alternative<bool*>(o.target));
  }
  // A flag without a name ("--=x") is none (Boost reads it as a positional
  // "x", or fails in its own words).
  for (const auto& a : args) {
    if (a == "--") break;
    if (a.rfind("--=", 0) == 0) throw InputError("unknown option '" + a + "': a flag has a name, --key=value");
  }
  const po::options_description desc = boost_description(ks, is_bool, allow_config_);
  namespace style = po::command_line_style;
  po::parsed_options parsed(&desc);
  const std::vector<std::string> attached = attach_values(args);
  try {
    parsed = po::command_line_parser(attached)
                 .options(desc)
                 .style(style::unix_style & ~style::allow_guessing)
                 .allow_unregistered()
                 .run();
  } catch (const po::error& e) {
    throw InputError(e.what());
  }

  // Unknown flags and surplus positionals first: nothing is read before the
  // whole command line is known to be well-formed.
  size_t n_positional = 0;
  for (const auto& opt : parsed.options) {
    if (opt.position_key >= 0 || (opt.string_key.empty() && !opt.unregistered)) {
      const std::string tok = opt.value.empty() ? "" : opt.value.front();
      if (n_positional >= positionals_.size())
        throw InputError("unexpected argument '" + tok + "'" +
                         (positionals_.empty() ? std::string(" (this command takes no arguments)")
                                               : "") +
                         word_after_bare_bool(args, tok));
      ++n_positional;
      continue;
    }
    if (opt.unregistered) {
      std::string shown = opt.original_tokens.empty() ? opt.string_key : opt.original_tokens.front();
      const size_t eq = shown.find('=');
      if (eq != std::string::npos) shown.resize(eq);
      std::string key = opt.string_key;
      while (!key.empty() && key.front() == '-') key.erase(0, 1);
      throw InputError(unknown_message(shown, key, ""));
    }
  }
  for (size_t i = n_positional; i < positionals_.size(); ++i)
    if (positionals_[i].required) throw InputError("missing argument " + positionals_[i].name);

  // --config files, in order, then the flags, left to right.
  for (const auto& opt : parsed.options)
    if (opt.string_key == "config" && opt.position_key < 0) {
      const std::string path = opt.value.empty() ? "" : opt.value.front();
      load_ini_file(path);
      config_files_.push_back(path);
    }
  size_t pos = 0;
  std::map<std::string, std::string> given;  // a flag repeated with another value: the last applies, said so
  for (const auto& opt : parsed.options) {
    if (opt.position_key >= 0 || opt.string_key.empty()) {
      *positionals_[pos++].target = opt.value.empty() ? "" : opt.value.front();
      continue;
    }
    if (opt.string_key == "config" || opt.string_key == "help") continue;
    // A bare bool flag (`--model.tree`) carries no value: Boost applies the
    // implicit "true" only when storing into a variables_map.
    const std::string value = opt.value.empty() ? "true" : opt.value.front();
    if (const auto [it, first] = given.emplace(opt.string_key, value); !first && it->second != value) {
      Option* o = find(opt.string_key);
      log_warn("--" + opt.string_key + " is given twice" +
               (o && o->secret ? std::string() : escape_controls(" ('" + it->second + "', then '" + value + "')")) +
               ": the last applies");
      it->second = value;
    }
    set(opt.string_key, value, "command line");
  }
  run_checks();
  return ParseResult{false};
}

void OptionSet::run_checks() const {
  for (const auto& c : checks_) c();
}

// ---- help and dump --------------------------------------------------------------

std::string OptionSet::help() const {
  std::ostringstream out;
  out << "Usage: " << usage_ << " [options]";
  for (const auto& p : positionals_) out << (p.required ? " " + p.name : " [" + p.name + "]");
  out << "\n";
  if (!description_.empty()) out << "\n" << description_ << "\n";

  struct Row {
    std::string left, right;
  };
  // One column width for all groups, so that the help reads as one table.
  size_t width = 14;  // "--config FILE"
  for (const auto& p : positionals_) width = std::max(width, p.name.size());
  for (const auto& o : options_)
    width = std::max(width, o.key.size() + std::strlen(type_name(o.target)) + 5);
  width = std::min<size_t>(width, 34);
  auto print_rows = [&](const std::vector<Row>& rows) {
    for (const auto& r : rows) {
      out << "  " << r.left;
      if (r.left.size() > width) out << "\n  " << std::string(width, ' ');
      else out << std::string(width - r.left.size(), ' ');
      out << "  " << r.right << "\n";
    }
  };

  if (!positionals_.empty()) {
    out << "\nArguments:\n";
    std::vector<Row> rows;
    for (const auto& p : positionals_)
      rows.push_back({p.name, p.help + (p.required ? "" : " (optional)")});
    print_rows(rows);
  }

  out << "\nGeneral options:\n";
  {
    std::vector<Row> rows;
    rows.push_back({"-h, --help", "show this help and exit"});
    if (allow_config_)
      rows.push_back({"--config FILE",
                      "read options from an INI file ([section] then key = value); "
                      "flags given on the command line override it"});
    print_rows(rows);
  }

  for (const auto& [section, section_help] : sections_) {
    std::vector<Row> rows;
    for (const auto& o : options_) {
      if (o.section != section) continue;
      std::string right = o.help;
      std::string def = o.default_text;
      if (std::holds_alternative<std::string*>(o.target) && def.empty()) def = "\"\"";
      // Appended piecewise: `"x" + std::string&&` trips a false -Wrestrict in GCC 12 at -O3.
      if (!right.empty()) right.append(" ");
      right.append("(default: ").append(def);
      if (!o.validator.allowed.empty()) right.append("; ").append(o.validator.allowed);
      right.append(")");
      std::string left = "--";
      left.append(o.key).append(" <").append(type_name(o.target)).append(">");
      rows.push_back({std::move(left), std::move(right)});
    }
    if (rows.empty()) continue;
    out << "\n" << (section.empty() ? "Options" : "[" + section + "]");
    if (!section_help.empty()) out << " " << section_help;
    out << ":\n";
    print_rows(rows);
  }
  return out.str();
}

std::string OptionSet::dump_ini(bool with_comments) const {
  std::ostringstream out;
  auto write = [&](const Option& o) {
    if (with_comments) {
      out << "; " << o.help;
      if (!o.validator.allowed.empty()) out << " (" << o.validator.allowed << ")";
      out << "\n";
    }
    out << o.name << " = " << (o.secret ? std::string() : current_text(o.target)) << "\n";
  };
  // Keys without a section must come before the first [section] header.
  std::vector<std::pair<std::string, std::string>> order;
  for (const auto& s : sections_)
    if (s.first.empty()) order.push_back(s);
  for (const auto& s : sections_)
    if (!s.first.empty()) order.push_back(s);
  bool first = true;
  for (const auto& [section, section_help] : order) {
    bool any = false;
    for (const auto& o : options_) {
      if (o.section != section || !o.stored) continue;
      if (!any) {
        if (!section.empty()) {
          if (!first) out << "\n";
          if (with_comments && !section_help.empty()) out << "; " << section_help << "\n";
          out << "[" << section << "]\n";
        }
        any = true;
        first = false;
      }
      write(o);
    }
  }
  return out.str();
}

}  // namespace forge
