// The code domain's tasks, SWE-smith style: a small Python module of
// `functions` functions drawn from a library of templates (numbers, strings,
// lists, dicts), its visible tests, hidden cases, and one injected bug.
//
// Every template carries its body, three test cases and two or three bug
// mutations; each mutation names the test case that catches it. A task:
//   1. draws `functions` distinct templates and a module name;
//   2. draws one template and one of its mutations: that body line is
//      replaced by the buggy line;
//   3. visible tests (test_<module>.py): per function its first two cases,
//      plus, for the buggy function, the case that catches the bug;
//   4. hidden cases (never shown): every case of every function and its
//      unseen cases, which no test file holds;
//   5. the issue text names the failing visible test and its expectation.
// The fix is the original line; the hidden cases pass on the fixed module
// and fail on the buggy one (tests/unit/test_code_env.cpp runs every
// template and mutation in the sandbox to keep the library honest). A case
// passes when the canonical repr() of the call's value (kCanonicalRepr) is
// its expected literal (value and type: 0 is not 0.0).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace forge {

struct CodeTestCase {
  std::string call;      // e.g. "clamp(15, 0, 10)"
  std::string expected;  // canon() of the right value, e.g. "10"
};

// Python source that defines canon(v): repr(v), except that a dict's items
// (by their keys' canonical text) and a set's elements (by their own) come
// sorted, inside lists and tuples too. Their order is not part of the value ({'to': 2, 'be': 2} ==
// {'be': 2, 'to': 2}, as unittest's assertEqual agrees): a right answer built
// in another order failed on repr(). A subclass (OrderedDict, defaultdict)
// keeps its own repr, so its type still counts.
extern const char* const kCanonicalRepr;

struct CodeBug {
  int line = 0;           // index into the template's body
  std::string text;       // the buggy line, with its indentation
  int caught_by = 0;      // index of the test case that fails with it
};

struct CodeTemplate {
  std::string name;                 // the function's name
  std::string params;               // "x, lo, hi"
  std::vector<std::string> body;    // lines, indented by four spaces
  std::vector<CodeTestCase> tests;  // three cases
  std::vector<CodeBug> bugs;
  // Cases no test file shows: each bug fails at least one of them, so a
  // module that only knows the visible expectations cannot pass.
  std::vector<CodeTestCase> unseen;
};

const std::vector<CodeTemplate>& code_templates();

struct CodeTask {
  std::string module;                  // "geometry" -> geometry.py
  std::string module_file, test_file;
  std::string test_class;              // "MathxTest": the unittest class of both test files
  std::vector<std::string> lines;      // the module as the agent finds it (buggy)
  int bug_line = 0;                    // 1-based line of the bug in module_file
  std::string fixed_line;              // the correct text of that line
  int function_first = 0, function_last = 0;  // 1-based lines of the buggy function
  std::string visible_tests;                 // test_file's contents
  std::vector<CodeTestCase> visible_cases;   // the cases test_file checks
  std::vector<CodeTestCase> hidden_cases;    // graded by CodeEnv::score, never shown
  std::string issue;                   // "test_clamp fails: clamp(15, 0, 10) should return 10"
};

// A task from a seed; `functions` in [1, code_templates().size()].
CodeTask make_code_task(uint64_t seed, int functions);

// The module's text from its lines.
std::string join_lines(const std::vector<std::string>& lines);

}  // namespace forge
