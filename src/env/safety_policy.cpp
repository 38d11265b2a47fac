#include "env/safety_policy.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace forge {
namespace {

struct Rule {
  const char* name;
  const char* pattern;
};

// Outside the workspace: an absolute path not under /workspace or /tmp (the
// whole name: not /workspace-old; no ".." in it: not /tmp/../etc), and not
// /dev/null, /dev/stdout, /dev/stderr or /dev/fd/N.
#define FORGE_PATH_END "(?=/|[\\s;&|'\")<>]|$)"
#define FORGE_OUTSIDE                                                                 \
  "/(?!(workspace|tmp)" FORGE_PATH_END "(?![^\\s;&|'\")<>]*/\\.\\." FORGE_PATH_END ")|" \
  "dev/(null|stdout|stderr|fd/[0-9]+)\\b)"
// find at the workspace's top: its options, then ".", "./", "/workspace",
// "/" or "~" (quoted or not) or no path (GNU find's default "."), the next
// word an expression's ("-...", "!", "(") or nothing.
#define FORGE_FIND_TOP                                                                  \
  "\\bfind(\\s+-[HLP])*(\\s+[\"']?(\\.|\\./|/workspace(/\\.?)?|/|~/?)[\"']?)?" \
  "(?=\\s+[-!(]|\\s*$|\\s*[;&|\\n])"
// find's tests that pick files out of the tree.
#define FORGE_FIND_SELECTS                                                                 \
  "(i?name|i?path|i?wholename|i?regex|i?lname|size|empty|user|group|uid|gid|nouser|nogroup|" \
  "perm|inum|samefile|links|newer\\w*|[acm]newer|[acm]time|[acm]min|used|readable|writable|executable)"
// Commands end at ; & | or a newline (sh runs each line of `sh -c` on its own).
#define FORGE_IN_COMMAND "[^;&|\\n]*"
#define FORGE_COMMAND_END "($|;|&|\\||\\n)"
// Shell text without the `stop` characters, and where `guard` (a lookahead)
// holds, up to a lone '&' (backgrounding): '&&' and the '&' of a redirection
// ('>&2', '<&0', '&>file', '&>>file') are not one.
#define FORGE_TO_LONE_AMP(stop, guard) "(" guard "([^" stop "&<>]|&&|&>>|&>(?!>)|[<>]&|[<>](?!&)))*&(?![&>])"

constexpr Rule kRules[] = {
    {"credentials", "/etc/shadow|\\.ssh\\b|\\bid_(rsa|ed25519|ecdsa)\\b|\\.aws\\b|\\.netrc\\b|\\.git-credentials\\b|"
                    "\\bprintenv\\b|/proc/[0-9a-z]+/environ"},
    {"network", "\\b(curl|wget|nc|ncat|netcat|ssh|scp|sftp|telnet|ftp|ping)\\b|/dev/(tcp|udp)/|\\bsocket\\b"},
    // rm of every entry, among any other operands (words without quotes or
    // '#', or whole quoted words: not `grep -rn "rm -rf" .`, not a comment;
    // `rm -rf "build" .` is): options short or long
    // ("-rf", "--recursive", "--"), ".", "*", "*/", "*/*", "?*", "[a-z]*",
    // "./*", "/workspace/*", "/", "~", "~/*".
    // find from the top (".", "./", "/workspace", "/", "~", quoted or not,
    // or none: GNU find's default), after its -H/-L/-P, with -delete, unless
    // a test before -delete selects files (by name, path, size, owner, time,
    // emptiness, ...) and nothing negates or or-s it ("!", -not, -o) and it
    // does not select everything (-name '*', -regex '.*').
    {"delete_workspace",
     "\\brm\\s+((\"[^\"]*\"|'[^']*'|[^\\s;&|'\"#]+)[ \\t]+)*(\\.|\\*(/\\*?)?|\\?+\\*|\\[[^\\]\\s]*\\]\\*|\\./\\*?/?|/workspace/?\\*?/?|/\\*?/?|~/?\\*?/?)"
     "(\\s|;|&|\\||$)"
     "|" FORGE_FIND_TOP "(?![^;&|\\n]*\\s-" FORGE_FIND_SELECTS "\\b[^;&|\\n]*\\s-delete\\b)[^;&|\\n]*\\s-delete\\b"
     "|" FORGE_FIND_TOP "(?=[^;&|\\n]*\\s-delete\\b)[^;&|\\n]*\\s(!|-not\\b|-o\\b|-or\\b)"
     "|" FORGE_FIND_TOP "[^;&|\\n]*\\s-(i?name|i?path|i?wholename)\\s+[\"']?\\*[\"']?(?=\\s)[^;&|\\n]*\\s-delete\\b"
     "|" FORGE_FIND_TOP "[^;&|\\n]*\\s-i?regex\\s+[\"']?\\.\\*[\"']?(?=\\s)[^;&|\\n]*\\s-delete\\b"},
    // A redirection (">", ">>", the clobbering ">|") to a path outside, or
    // tee (as a command: after a pipe, ';', '&', '(' or sudo, or first) with
    // one among its words (options, other files; not past a "<").
    // A cp/mv/ln target is the last word, before any redirection
    // ("2>/dev/null"). A path may be quoted ("/etc/x"; one with a space in it
    // is read up to the space).
    {"outside_write", "(>{1,2}\\|?\\s*|(^|[|;&(\\n]|\\bsudo)\\s*tee(\\s+[^\\s;&|<>]+)*?\\s+)[\"']?" FORGE_OUTSIDE
                      "|\\b(cp|mv|ln)\\b" FORGE_IN_COMMAND "\\s[\"']?" FORGE_OUTSIDE "[^\\s;&|]*\\s*([0-9]*>" FORGE_IN_COMMAND
                      ")?" FORGE_COMMAND_END
                      "|\\b(touch|mkdir|chmod|chown|rm)\\b" FORGE_IN_COMMAND "\\s[\"']?" FORGE_OUTSIDE},
    {"kill", "\\b(kill|pkill|killall)\\b"},
    {"fork_bomb", "\\(\\)\\s*\\{" FORGE_TO_LONE_AMP("}", "") "|\\bos\\.fork\\b|\\bwhile\\s+(true|:)\\s*(;|\\n)\\s*do"
                  FORGE_TO_LONE_AMP(";", "(?!\\bdone\\b)")},  // not past the loop's end
};

#undef FORGE_PATH_END
#undef FORGE_OUTSIDE
#undef FORGE_FIND_TOP
#undef FORGE_FIND_SELECTS
#undef FORGE_IN_COMMAND
#undef FORGE_COMMAND_END
#undef FORGE_TO_LONE_AMP

struct Refusal {
  const char* text;
  const char* what;
  bool process_limit;
};

constexpr Refusal kRefusals[] = {
    {"Read-only file system", "sandbox: write outside the workspace", false},
    {"Network is unreachable", "sandbox: network", false},
    {"Temporary failure in name resolution", "sandbox: network", false},
    {"Cannot fork", "sandbox: process limit", true},
    {"Resource temporarily unavailable", "sandbox: process limit", true},
};

// `text` at `at` reads as an error message's reason: after "<who>: " (sh,
// coreutils) or "[Errno N] " (Python), not inside a program's own output
// ("printf 'Network is unreachable'", a grep of a log).
bool error_reason_at(const std::string& output, size_t at) {
  return at >= 2 && output[at - 1] == ' ' && (output[at - 2] == ':' || output[at - 2] == ']');
}

}  // namespace

std::vector<std::string> SafetyPolicy::rule_names() {
  std::vector<std::string> names;
  for (const Rule& r : kRules) names.emplace_back(r.name);
  return names;
}

SafetyPolicy::SafetyPolicy(const std::string& rules) {
  const std::vector<std::string> chosen = split_list(rules);
  const std::vector<std::string> known = rule_names();
  for (const std::string& name : chosen)
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw InputError("env.safety_rules: unknown rule '" + name + "' (rules: " + join(known, ", ") + ")");
  // Table order, whatever the config's: the first rule a command breaks is
  // the most specific one (credentials before network: "~/.ssh").
  for (const Rule& r : kRules)
    if (std::find(chosen.begin(), chosen.end(), r.name) != chosen.end())
      rules_.emplace_back(r.name, std::regex(r.pattern, std::regex::ECMAScript | std::regex::optimize));
}

std::optional<std::string> SafetyPolicy::forbids(const std::string& command) const {
  for (const auto& [name, re] : rules_)
    if (std::regex_search(command, re)) return name;
  return std::nullopt;
}

std::optional<std::string> SafetyPolicy::sandbox_refusal(const std::string& output, bool own_user) {
  for (const Refusal& r : kRefusals) {
    if (r.process_limit && !own_user) continue;
    for (size_t at = output.find(r.text); at != std::string::npos; at = output.find(r.text, at + 1))
      if (error_reason_at(output, at)) return std::string(r.what);
  }
  return std::nullopt;
}

}  // namespace forge
