// code: fix one injected bug in a small Python module (code_tasks.hpp),
// verified by hidden cases that run in the sandbox (src/sandbox/).
//
// The agent sees the issue (the failing visible test and its expectation)
// and the file list. Tools, each taking one argument string:
//   read      "FILE" or "FILE START END"  the file's lines, numbered
//   replace   "FILE LINE TEXT"            line LINE of the module becomes TEXT
//                                         (everything after the second space,
//                                         indentation included; "FILE LINE"
//                                         blanks it; the call's args are
//                                         trimmed, so TEXT's trailing white
//                                         space is not kept); the test
//                                         files are read-only
//   run_tests "" or "NAME"                the visible tests (or test_NAME) in
//                                         the sandbox: the last lines of
//                                         unittest's report
//   shell     "CMD"                       sh -c CMD in the sandbox, on a copy
//                                         of the workspace (edits there do
//                                         not persist: edit with replace);
//                                         a command env.safety_rules forbids
//                                         is not run, and it or a refusal of
//                                         the sandbox is an "unsafe" signal
//                                         (safety_policy.hpp); at most 1024
//                                         characters
// Useful (first time only): a read whose range covers the buggy line, the
// replace that restores it, a run_tests that passes on a module that computes
// the visible cases (the case runner's verdict, not unittest's exit status).
// The solver reads the buggy function, replaces the line, runs the tests and
// answers "done".
// verify(): 1 when the final module computes every hidden case, else 0 (one
// sandbox run; the answer text is not read); a sandbox that does not start,
// twice, is VerifierUnavailable (environment.hpp), not 0. The module runs alone, in a
// process that is given the cases' calls and prints repr() of each value;
// forge compares them with the expected values, which never enter the
// sandbox, so the module's exit status and anything it patches in its own
// process count for nothing, and the unseen cases defeat a module that
// answers from what the test file shows. Test runs (run_tests, verify)
// are pure functions of the files: their results are kept per process by the
// exact command and files (env.code_test_cache), so a workspace seen before
// does not run Python again. Every program runs through the
// process's shared SandboxPool (env.code_* and sandbox.* keys); a sandbox
// that cannot start is an "error:" observation, not a bad call. Tool output
// is shown as printable UTF-8 (core/utf8.hpp: invalid bytes and control
// characters other than newline and tab as U+FFFD).
#pragma once
#include <string>
#include <vector>

#include "env/code_tasks.hpp"
#include "env/environment.hpp"
#include "sandbox/sandbox.hpp"

namespace forge {

// The process's test-run cache so far (env.code_test_cache): lookups answered
// from it and lookups that ran the tests.
struct CodeTestCacheStats {
  int64_t hits = 0, misses = 0;
};
CodeTestCacheStats code_test_cache_stats();

// The process's sandbox pools stop queueing (SandboxPool::stop_queueing): a
// rank that stops waits for the runs in progress only, within their wall
// deadline, not for every queued run of episodes it drops.
void stop_queueing_sandbox_runs(const std::string& why);

class CodeEnv : public Environment {
 public:
  using Environment::Environment;
  std::string name() const override { return "code"; }
  bool slow_tools() const override { return true; }
  Solution solve() const override;

  const CodeTask& code_task() const { return task_; }
  const std::vector<std::string>& module_lines() const { return lines_; }

 protected:
  Task generate(uint64_t seed) override;
  ToolResult call_tool(const ToolCall& call) override;
  float score(std::string_view answer) const override;

 private:
  ToolResult read(const std::string& args);
  ToolResult replace(const std::string& args);
  ToolResult run_tests(const std::string& args);
  ToolResult shell(const std::string& args);
  // The workspace as it is now (module as edited, visible tests).
  std::vector<SandboxFile> workspace() const;
  SandboxResult run(SandboxRequest request) const;
  // Whether the module as it is now computes every one of `cases` (one
  // cached run of the case runner on the module alone; a sandbox that does
  // not start is tried once more, then, when `verifying`, VerifierUnavailable).
  bool cases_pass(const std::vector<CodeTestCase>& cases, bool verifying = false) const;
  // A test run, answered from the process's cache when the same command ran
  // on the same files before (env.code_test_cache).
  SandboxResult run_test(SandboxRequest request) const;

  CodeTask task_;
  std::vector<std::string> lines_;       // the module as edited so far
  std::vector<std::string> test_lines_;  // the visible tests (read-only)
  bool read_bug_ = false, fixed_ = false, passed_ = false;
};

}  // namespace forge
