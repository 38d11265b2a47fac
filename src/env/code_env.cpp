#include "env/code_env.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "env/safety_policy.hpp"
#include "sandbox/sandbox_pool.hpp"

namespace forge {
namespace {

constexpr size_t kShellChars = 400;      // shell output shown to the agent
constexpr size_t kCommandChars = 1024;   // longest shell command (the safety rules' regexes stay fast)

// The hidden cases' runner: imports the module and writes "=> " + canon() of
// each call's value (kCanonicalRepr, code_tasks.hpp), or "=> !" + the
// exception's name, one line per case.
// It is given the calls, never the expected values: forge compares the lines
// with them, so nothing the module does in this process (exit early with 0,
// patch unittest, print) passes a case it does not compute. The lines go to
// a copy of stdout taken before the import, and the module's own stdout and
// stderr to /dev/null: what the module prints (a partial line, 70 KiB of
// debug output) can neither split a record nor push it past the output cap.
const std::string kCaseRunner = std::string(kCanonicalRepr) +
    "import os, sys, importlib\n"
    "out = os.dup(1)\n"
    "null = os.open(os.devnull, os.O_WRONLY)\n"
    "os.dup2(null, 1)\n"
    "os.dup2(null, 2)\n"
    "ns = vars(importlib.import_module(sys.argv[1]))\n"
    "for call in sys.argv[2:]:\n"
    "    try:\n"
    "        r = canon(eval(call, ns))\n"
    "    except BaseException as e:\n"
    "        r = '!' + type(e).__name__\n"
    "    os.write(out, ('=> ' + r.replace('\\n', ' ') + '\\n').encode('utf-8', 'backslashreplace'))\n";

// The sandbox settings of a config, as a key (pools and kept test runs are
// per settings: a run under other limits may end otherwise).
std::string sandbox_settings(const EnvConfig& config) {
  const SandboxLimits& l = config.sandbox;
  std::ostringstream key;
  key << config.sandbox_concurrency << ' ' << l.wall_s << ' ' << l.cpu_s << ' ' << l.memory_mb << ' ' << l.max_procs
      << ' ' << l.output_kb << ' ' << l.workspace_mb << ' ' << l.uid << ' ' << l.bwrap;
  return key.str();
}

// The process's pool for `config`'s sandbox settings, made on first use. A
// run's environments share one config, so a process has one pool; a config
// with other settings (tests) gets a pool of its own rather than silently
// running under the first one's limits.
struct SandboxPools {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<SandboxPool>> by_settings;
};
SandboxPools& sandbox_pools() {
  static SandboxPools pools;
  return pools;
}

SandboxPool& shared_pool(const EnvConfig& config) {
  SandboxPools& pools = sandbox_pools();
  const std::string key = sandbox_settings(config);
  std::lock_guard<std::mutex> lock(pools.mu);
  auto& pool = pools.by_settings[key];
  if (!pool) pool = std::make_unique<SandboxPool>(config.sandbox_concurrency, config.sandbox);
  return *pool;
}

// Results of test runs by their exact command and files (env.code_test_cache):
// the tests are pure functions of the workspace. Only runs that exited are
// kept (a deadline or a start failure says nothing about the files). It is
// emptied when it holds `capacity` runs or kMaxBytes of keys and outputs.
class TestRunCache {
 public:
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static std::string key(const SandboxRequest& r) {
    std::string k;
    for (const std::string& a : r.argv) k.append(a).push_back('\0');
    k.push_back('\1');
    for (const SandboxFile& f : r.files) k.append(f.path).append(1, '\0').append(f.content).push_back('\0');
    return k;
  }
  std::optional<SandboxResult> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = kept_.find(key);
    ++(it == kept_.end() ? stats_.misses : stats_.hits);
    if (it == kept_.end()) return std::nullopt;
    return it->second;
  }
  void keep(std::string key, const SandboxResult& r, size_t capacity) {
    if (r.status != SandboxStatus::kExited || capacity == 0) return;
    const size_t bytes = key.size() + r.output.size();
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() >= capacity || bytes_ + bytes > kMaxBytes) {
      kept_.clear();
      bytes_ = 0;
    }
    if (kept_.emplace(std::move(key), r).second) bytes_ += bytes;
  }
  CodeTestCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, SandboxResult> kept_;
  size_t bytes_ = 0;
  CodeTestCacheStats stats_;
};

TestRunCache& test_run_cache() {
  static TestRunCache cache;
  return cache;
}

// Compiled once per rule list.
const SafetyPolicy& safety_policy_for(const std::string& rules) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<SafetyPolicy>> policies;
  std::lock_guard<std::mutex> lock(mu);
  auto& p = policies[rules];
  if (!p) p = std::make_unique<SafetyPolicy>(rules);
  return *p;
}

// A control character (ASCII 0-31 or DEL) other than those `allowed`.
bool has_control_char(std::string_view s, std::string_view allowed) {
  return std::any_of(s.begin(), s.end(), [&](char c) {
    return ((static_cast<unsigned char>(c) < 0x20 || c == 0x7f) && allowed.find(c) == std::string_view::npos);
  });
}

// A line number: up to 9 digits (any int of them; a larger one is then a
// range error naming the file's lines, not a malformed call).
bool parse_int(const std::string& s, int& out) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoi(s);
  return true;
}

// "a b rest": the first two space-separated words and the rest (after one
// space, as given; `has_rest` tells "a b" from "a b ").
struct Words {
  std::string first, second, rest;
  bool has_rest = false;
};

Words split_words(const std::string& s) {
  Words w;
  const size_t s1 = s.find(' ');
  w.first = s.substr(0, s1);
  if (s1 == std::string::npos) return w;
  const size_t s2 = s.find(' ', s1 + 1);
  w.second = s.substr(s1 + 1, s2 == std::string::npos ? std::string::npos : s2 - s1 - 1);
  if (s2 == std::string::npos) return w;
  w.rest = s.substr(s2 + 1);
  w.has_rest = true;
  return w;
}

// " (SIGXCPU: past sandbox.cpu_s)", " (SIGSEGV)": what signal `sig` is.
std::string signal_reason(int sig) {
  const char* name = sigabbrev_np(sig);
  if (name == nullptr) return "";
  return std::string(" (SIG") + name + (sig == SIGXCPU ? ": past sandbox.cpu_s)" : ")");
}

// unittest's report, short: "FAIL: test_clamp: AssertionError: 10 != 5 |
// FAILED (failures=1)" or "OK (3 tests)". The verdict is the last "OK" or
// "FAILED" line that agrees with how the process ended (OK with exit status
// 0, FAILED otherwise): the module's own print of "OK" reached the output
// after unittest's "FAILED" (stdout is flushed at exit, unittest writes to
// stderr) and read as a pass. A report whose every verdict disagrees (an
// atexit handler's exit status after "OK") is an error naming both.
std::string summarize_unittest(const SandboxResult& r) {
  if (r.status == SandboxStatus::kStartFailed) return "error: the sandbox could not start: " + r.error;
  if (r.status == SandboxStatus::kTimedOut) return "error: the tests did not finish before the deadline";
  std::istringstream in(r.output);
  std::string line, ran, verdict, out, disagreeing;
  bool want_reason = false;  // a FAIL/ERROR named, its exception line not yet seen
  while (std::getline(in, line)) {
    if (line.rfind("FAIL: ", 0) == 0 || line.rfind("ERROR: ", 0) == 0) {
      out += (out.empty() ? "" : " | ") + line.substr(0, line.find(" ("));
      want_reason = true;
    } else if (line.rfind("Ran ", 0) == 0) {
      ran = line.substr(4, line.find(" test") - 4);
    } else if (line == "OK" || line.rfind("OK ", 0) == 0 || line.rfind("FAILED", 0) == 0) {
      const bool says_ok = line.rfind("OK", 0) == 0;
      if (says_ok == r.ok()) verdict = line;
      else disagreeing = line;
    } else if (want_reason && !line.empty() && line[0] != ' ' && line.find("Error") != std::string::npos) {
      out += ": " + line;  // e.g. "AssertionError: 10 != 5"
      want_reason = false;
    }
  }
  if (verdict.rfind("OK", 0) == 0) return "OK (" + ran + " tests)";
  if (verdict.empty() && !disagreeing.empty())
    return "error: unittest's report says '" + disagreeing + "' but the tests " +
           (r.ok() ? std::string("exited with status 0")
            : r.status == SandboxStatus::kSignaled
                ? "were ended by signal " + std::to_string(r.signal) + signal_reason(r.signal)
                : "exited with status " + std::to_string(r.exit_code));
  const std::string head = r.output.substr(0, utf8_char_start(r.output, kShellChars));
  const std::string tail =
      r.output.size() > kShellChars ? r.output.substr(utf8_char_start(r.output, r.output.size() - kShellChars))
                                    : r.output;
  // Killed (sandbox.cpu_s's SIGXCPU, a crash): the tests ran and did not end,
  // whether or not their output was cut too (a loop printing until cpu_s).
  if (verdict.empty() && r.status == SandboxStatus::kSignaled) {
    const std::string_view printed = trim(r.truncated ? head : tail);
    return "error: the tests were killed by signal " + std::to_string(r.signal) + signal_reason(r.signal) +
           (r.truncated ? " after printing past sandbox.output_kb" : "") +
           (printed.empty() ? "" : ": " + std::string(printed));
  }
  if (verdict.empty() && r.truncated)
    return "error: the output passed sandbox.output_kb and was cut before unittest's verdict (print less): " +
           std::string(trim(head));
  if (verdict.empty()) return "error: the tests did not run: " + std::string(trim(tail));
  return out + (out.empty() ? "" : " | ") + verdict;
}

// Whether Python and unittest run in a sandbox of `limits`: without them
// every test run would fail and every code reward be 0, silently. InputError
// naming what is missing. A verdict is kept per process and bwrap binary;
// a probe that says nothing about the machine (past its deadline, killed,
// the user's process limit reached for now) is not kept, and the next task
// probes again.
void require_code_runtime(const SandboxLimits& limits) {
  static std::mutex mu;
  static std::map<std::string, std::string> problems;  // bwrap -> "" or why not
  std::lock_guard<std::mutex> lock(mu);
  auto it = problems.find(limits.bwrap);
  if (it == problems.end()) {
    const SandboxResult r = run_sandboxed({{"python3", "-c", "import unittest, importlib"}, {}}, limits);
    const bool transient = r.status == SandboxStatus::kTimedOut || r.status == SandboxStatus::kSignaled ||
                           (r.status == SandboxStatus::kStartFailed &&
                            r.error.find("Resource temporarily unavailable") != std::string::npos);
    if (transient) return;
    std::string why;
    if (r.status == SandboxStatus::kStartFailed) why = r.error;
    else if (!r.ok()) why = "python3 -c 'import unittest' exited " + std::to_string(r.exit_code) + ": " +
                            std::string(trim(r.output));
    it = problems.emplace(limits.bwrap, why).first;
  }
  if (!it->second.empty())
    throw InputError("env.code_weight > 0, but the code domain cannot run Python in the sandbox (" + it->second +
                     "); tools/setup.sh installs bubblewrap and python3, or set env.code_weight = 0");
}

}  // namespace

Task CodeEnv::generate(uint64_t seed) {
  require_code_runtime(config().sandbox);
  task_ = make_code_task(seed, config().code_functions);
  lines_ = task_.lines;
  test_lines_.clear();
  std::istringstream tests(task_.visible_tests);
  for (std::string l; std::getline(tests, l);) test_lines_.push_back(l);
  read_bug_ = fixed_ = passed_ = false;
  Task t;
  t.request = "Fix the bug in " + task_.module_file + ". Issue: " + task_.issue + ". Files: " + task_.module_file +
              ", " + task_.test_file + ".";
  t.tools = {{"read", "FILE [START END]", "show a file's lines, numbered", task_.module_file + " 1 5"},
             {"replace", "FILE LINE TEXT", "replace one line of the module (TEXT with its indentation)",
              task_.module_file + " 2     return x"},
             {"run_tests", "[NAME]", "run the visible tests, or one test", ""},
             {"shell", "CMD", "run a shell command on a copy of the workspace", "ls"}};
  t.steps_needed = 3;
  return t;
}

Environment::ToolResult CodeEnv::call_tool(const ToolCall& call) {
  ToolResult r;
  if (call.tool == "read") r = read(call.args);
  else if (call.tool == "replace") r = replace(call.args);
  else if (call.tool == "run_tests") r = run_tests(call.args);
  else if (call.tool == "shell") r = shell(call.args);
  else r = {false, "no tool '" + call.tool + "'"};
  // Program output and the agent's own edits may hold any bytes.
  r.text = printable_text(r.text);
  return r;
}

Environment::ToolResult CodeEnv::read(const std::string& args) {
  const Words w = split_words(std::string(trim(args)));
  const std::string &file = w.first, &from = w.second, &to = w.rest;
  const std::vector<std::string>* lines = nullptr;
  if (file == task_.module_file) {
    lines = &lines_;
  } else if (file == task_.test_file) {
    lines = &test_lines_;
  } else {
    return {false, "read: no file '" + file + "' (files: " + task_.module_file + ", " + task_.test_file + ")"};
  }
  int a = 1, b = static_cast<int>(lines->size());
  if (!from.empty() || w.has_rest) {
    if (!parse_int(from, a) || !parse_int(std::string(trim(to)), b) || a < 1 || b < a)
      return {false, "read expects FILE or FILE START END with 1 <= START <= END, got '" + args + "'"};
    b = std::min(b, static_cast<int>(lines->size()));
    if (a > b) return {false, "read: " + file + " has " + std::to_string(lines->size()) + " lines"};
  }
  std::string out;
  for (int i = a; i <= b; ++i) out += std::to_string(i) + ": " + (*lines)[static_cast<size_t>(i - 1)] + "\n";
  const bool useful = !read_bug_ && file == task_.module_file && a <= task_.bug_line && task_.bug_line <= b;
  if (useful) read_bug_ = true;
  return {true, out, useful};
}

Environment::ToolResult CodeEnv::replace(const std::string& args) {
  const Words w = split_words(args);
  const std::string &file = w.first, &line_text = w.second, &text = w.rest;
  int line = 0;
  if (file == task_.test_file) return {false, "replace: the tests are read-only; edit " + task_.module_file};
  if (file != task_.module_file) return {false, "replace: no file '" + file + "' (edit " + task_.module_file + ")"};
  // One line: no line break Python knows (\r alone is one) nor other
  // control characters; a tab is indentation.
  // No TEXT ("FILE LINE": the call's args lose their surrounding white
  // space, so a trailing space cannot carry an empty one) blanks the line.
  const bool one_line = !has_control_char(text, "\t");
  if (!parse_int(line_text, line) || !one_line)
    return {false, "replace expects FILE LINE TEXT (one line, no control characters), got '" + args + "'"};
  if (line < 1 || line > static_cast<int>(lines_.size()))
    return {false, "replace: " + file + " has lines 1.." + std::to_string(lines_.size())};
  lines_[static_cast<size_t>(line - 1)] = text;
  const bool useful = !fixed_ && line == task_.bug_line && text == task_.fixed_line;
  if (useful) fixed_ = true;
  return {true, "line " + std::to_string(line) + " of " + file + " replaced", useful};
}

Environment::ToolResult CodeEnv::run_tests(const std::string& args) {
  std::string target = "test_" + task_.module;
  const std::string name(trim(args));
  if (!name.empty()) {
    if (name.find_first_not_of("abcdefghijklmnopqrstuvwxyz_0123456789") != std::string::npos)
      return {false, "run_tests expects nothing or a test name like test_clamp, got '" + args + "'"};
    const std::string test = name.rfind("test_", 0) == 0 ? name : "test_" + name;
    target += "." + task_.test_class + "." + test;
  }
  const SandboxResult r = run_test({{"python3", "-m", "unittest", "-q", target}, workspace()});
  const std::string summary = summarize_unittest(r);
  // Useful when the tests pass and the module computes their cases: the
  // module's own process cannot vouch for itself (an early exit 0 "passes").
  const bool useful = !passed_ && name.empty() && r.ok() && cases_pass(task_.visible_cases);
  if (useful) passed_ = true;
  return {.ok = true, .text = summary, .useful = useful, .test_run = true};
}

Environment::ToolResult CodeEnv::shell(const std::string& args) {
  if (trim(args).empty()) return {false, "shell expects a command, got nothing"};
  if (args.size() > kCommandChars)
    return {false, "shell: the command has " + std::to_string(args.size()) + " bytes; at most " +
                       std::to_string(kCommandChars)};
  // What the rules read is what runs: a NUL would end the command early for
  // exec ("rm -rf *\0..." passes a rule anchored at the end).
  if (has_control_char(args, "\t\n"))
    return {false, "shell: the command holds a control character (only tab and newline may appear)"};
  if (const auto rule = safety_policy_for(config().safety_rules).forbids(args))
    return {true, "blocked: the command breaks the safety rule '" + *rule + "' and was not run", false, *rule};
  const SandboxResult r = run({{"/bin/sh", "-c", args}, workspace()});
  const std::string refusal = SafetyPolicy::sandbox_refusal(r.output, sandbox_has_own_user()).value_or("");
  if (r.status == SandboxStatus::kStartFailed)
    return {true, "error: the sandbox could not start: " + r.error, false, refusal};
  std::string out =
      r.output.size() > kShellChars ? r.output.substr(0, utf8_char_start(r.output, kShellChars)) + "..." : r.output;
  if (r.status == SandboxStatus::kTimedOut) out += "\n[killed at the deadline]";
  else if (r.status == SandboxStatus::kSignaled)
    out += "\n[killed by signal " + std::to_string(r.signal) + signal_reason(r.signal) + "]";
  else if (r.exit_code != 0) out += "\n[exit " + std::to_string(r.exit_code) + "]";
  return {true, out.empty() ? "(no output)" : out, false, refusal};
}

std::vector<SandboxFile> CodeEnv::workspace() const {
  return {{task_.module_file, join_lines(lines_)}, {task_.test_file, task_.visible_tests}};
}

SandboxResult CodeEnv::run(SandboxRequest request) const {
  return shared_pool(config()).submit(std::move(request)).get();
}

void stop_queueing_sandbox_runs(const std::string& why) {
  SandboxPools& pools = sandbox_pools();
  std::lock_guard<std::mutex> lock(pools.mu);
  for (auto& [settings, pool] : pools.by_settings) pool->stop_queueing(why);
}

CodeTestCacheStats code_test_cache_stats() { return test_run_cache().stats(); }

SandboxResult CodeEnv::run_test(SandboxRequest request) const {
  const size_t capacity = static_cast<size_t>(config().code_test_cache);
  if (capacity == 0) return run(std::move(request));
  std::string key = sandbox_settings(config()) + '\2' + TestRunCache::key(request);
  if (auto kept = test_run_cache().find(key)) return *kept;
  SandboxResult r = run(std::move(request));
  test_run_cache().keep(std::move(key), r, capacity);
  return r;
}

bool CodeEnv::cases_pass(const std::vector<CodeTestCase>& cases, bool verifying) const {
  std::vector<std::string> argv = {"python3", "-c", kCaseRunner, task_.module};
  for (const CodeTestCase& c : cases) argv.push_back(c.call);
  // The module alone: the test file's expectations are not the module's to read.
  const SandboxRequest request{std::move(argv), {{task_.module_file, join_lines(lines_)}}};
  SandboxResult r = run_test(request);
  // A sandbox that did not start says nothing of the module: once more, then
  // the verdict is not the module's to take (a start failure is never kept
  // by the test-run cache).
  if (r.status == SandboxStatus::kStartFailed) r = run_test(request);
  if (r.status == SandboxStatus::kStartFailed && verifying)
    throw VerifierUnavailable("the code domain's verifier could not start its sandbox: " + r.error);
  // How the process ended once every line is there is not the module's
  // verdict: an exit status of 129..192 (an atexit handler's os._exit(137))
  // reads as a signal (sandbox.hpp).
  if (r.status == SandboxStatus::kTimedOut || r.status == SandboxStatus::kStartFailed || r.truncated) return false;
  // The runner's lines, in order; an extra or missing "=> " line fails.
  std::vector<std::string> got;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("=> ", 0) == 0) got.push_back(line.substr(3));
  if (got.size() != cases.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != cases[i].expected) return false;
  return true;
}

float CodeEnv::score(std::string_view) const { return cases_pass(task_.hidden_cases, true) ? 1.0f : 0.0f; }

Solution CodeEnv::solve() const {
  Solution s;
  s.calls.push_back({"read", task_.module_file + " " + std::to_string(task_.function_first) + " " +
                                 std::to_string(task_.function_last)});
  s.calls.push_back({"replace", task_.module_file + " " + std::to_string(task_.bug_line) + " " + task_.fixed_line});
  s.calls.push_back({"run_tests", ""});
  s.answer = "done";
  return s;
}

}  // namespace forge
