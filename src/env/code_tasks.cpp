#include "env/code_tasks.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace forge {

const char* const kCanonicalRepr =
    "def canon(v):\n"
    "    t = type(v)\n"
    "    if t is dict:\n"
    "        return '{' + ', '.join(k + ': ' + x for k, x in sorted((canon(k), canon(x)) for k, x in v.items())) + '}'\n"
    "    if t is set or t is frozenset:\n"
    "        if not v:\n"
    "            return t.__name__ + '()'\n"
    "        inner = '{' + ', '.join(sorted(canon(x) for x in v)) + '}'\n"
    "        return inner if t is set else 'frozenset(' + inner + ')'\n"
    "    if t is list:\n"
    "        return '[' + ', '.join(canon(x) for x in v) + ']'\n"
    "    if t is tuple:\n"
    "        return '(' + ', '.join(canon(x) for x in v) + (',' if len(v) == 1 else '') + ')'\n"
    "    return repr(v)\n";

const std::vector<CodeTemplate>& code_templates() {
  static const std::vector<CodeTemplate> kTemplates = {
      {"clamp", "x, lo, hi",
       {"    if x < lo:", "        return lo", "    if x > hi:", "        return hi", "    return x"},
       {{"clamp(5, 0, 10)", "5"}, {"clamp(-3, 0, 10)", "0"}, {"clamp(15, 0, 10)", "10"}},
       {{2, "    if x < hi:", 0}, {1, "        return hi", 1}, {3, "        return lo", 2}},
       {{"clamp(7, 2, 9)", "7"}, {"clamp(-8, -5, 5)", "-5"}, {"clamp(12, 1, 4)", "4"}}},
      {"count_vowels", "s",
       {"    n = 0", "    for c in s.lower():", "        if c in 'aeiou':", "            n += 1", "    return n"},
       {{"count_vowels('banana')", "3"}, {"count_vowels('Sky')", "0"}, {"count_vowels('AEIOU')", "5"}},
       {{3, "            n += 2", 0}, {0, "    n = 1", 1}, {2, "        if c in 'aeio':", 2}},
       {{"count_vowels('Queue')", "4"}, {"count_vowels('rhythm')", "0"}}},
      {"sum_even", "xs",
       {"    total = 0", "    for x in xs:", "        if x % 2 == 0:", "            total += x", "    return total"},
       {{"sum_even([1, 2, 3, 4])", "6"}, {"sum_even([5, 7])", "0"}, {"sum_even([])", "0"}},
       {{2, "        if x % 2 == 1:", 0}, {3, "            total += 1", 0}, {0, "    total = 1", 2}},
       {{"sum_even([10, 3, -4])", "6"}, {"sum_even([7])", "0"}}},
      {"last_index", "xs, v",
       {"    for i in range(len(xs) - 1, -1, -1):", "        if xs[i] == v:", "            return i", "    return -1"},
       {{"last_index([1, 2, 1], 1)", "2"}, {"last_index([], 3)", "-1"}, {"last_index([4, 5], 4)", "0"}},
       {{0, "    for i in range(len(xs) - 1, 0, -1):", 2}, {3, "    return 0", 1}, {1, "        if xs[i] != v:", 0}},
       {{"last_index([3, 1, 3, 2], 3)", "2"}, {"last_index([9, 8], 9)", "0"}, {"last_index([5, 6], 7)", "-1"}}},
      {"word_lengths", "text",
       {"    out = {}", "    for w in text.split():", "        out[w] = len(w)", "    return out"},
       {{"word_lengths('a bb')", "{'a': 1, 'bb': 2}"}, {"word_lengths('')", "{}"}, {"word_lengths('ccc')", "{'ccc': 3}"}},
       {{2, "        out[w] = len(w) - 1", 0}, {1, "    for w in text.split(','):", 0}},
       {{"word_lengths('to be')", "{'be': 2, 'to': 2}"}}},
      {"average", "xs",
       {"    if not xs:", "        return 0.0", "    return sum(xs) / len(xs)"},
       {{"average([1, 2])", "1.5"}, {"average([])", "0.0"}, {"average([4])", "4.0"}},
       {{2, "    return sum(xs) / (len(xs) + 1)", 0}, {1, "        return 1.0", 1}, {2, "    return sum(xs) // len(xs)", 0}},
       {{"average([3, 4])", "3.5"}, {"average(())", "0.0"}}},
      {"max_gap", "xs",
       {"    best = 0", "    for a, b in zip(xs, xs[1:]):", "        best = max(best, abs(b - a))", "    return best"},
       {{"max_gap([1, 5, 2])", "4"}, {"max_gap([9, 1])", "8"}, {"max_gap([3])", "0"}},
       {{2, "        best = max(best, b - a)", 1}, {1, "    for a, b in zip(xs, xs[2:]):", 0}, {0, "    best = 1", 2}},
       {{"max_gap([10, 2, 5])", "8"}, {"max_gap([4, 4])", "0"}}},
      {"power", "base, exp",
       {"    result = 1", "    for _ in range(exp):", "        result *= base", "    return result"},
       {{"power(2, 3)", "8"}, {"power(5, 0)", "1"}, {"power(3, 2)", "9"}},
       {{0, "    result = 0", 0}, {1, "    for _ in range(exp - 1):", 0}, {2, "        result *= exp", 0}},
       {{"power(4, 3)", "64"}}},
      {"is_sorted", "xs",
       {"    for i in range(len(xs) - 1):", "        if xs[i] > xs[i + 1]:", "            return False", "    return True"},
       {{"is_sorted([1, 2, 2, 3])", "True"}, {"is_sorted([3, 1])", "False"}, {"is_sorted([])", "True"}},
       {{1, "        if xs[i] >= xs[i + 1]:", 0}, {1, "        if xs[i] < xs[i + 1]:", 0}, {2, "            return True", 1}},
       {{"is_sorted([5, 5])", "True"}, {"is_sorted([1, 3])", "True"}, {"is_sorted([2, 1, 3])", "False"}}},
      {"safe_div", "a, b",
       {"    if b == 0:", "        return None", "    return a / b"},
       {{"safe_div(6, 3)", "2.0"}, {"safe_div(1, 0)", "None"}, {"safe_div(0, 5)", "0.0"}},
       {{0, "    if a == 0:", 1}, {2, "    return b / a", 0}},
       {{"safe_div(9, 0)", "None"}, {"safe_div(8, 2)", "4.0"}}},
  };
  return kTemplates;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

namespace {

constexpr const char* kModules[] = {"utils", "helpers", "mathx", "textops", "listops", "core", "common", "tools"};

std::string test_method(const CodeTemplate& t, const std::vector<int>& cases) {
  std::string s = "    def test_" + t.name + "(self):\n";
  for (int c : cases)
    s += "        self.assertEqual(" + t.tests[static_cast<size_t>(c)].call + ", " +
         t.tests[static_cast<size_t>(c)].expected + ")\n";
  return s;
}

std::string test_file(const CodeTask& task, const std::vector<const CodeTemplate*>& fns,
                      const std::vector<std::vector<int>>& cases) {
  std::string imports;
  for (const CodeTemplate* t : fns) imports += (imports.empty() ? "" : ", ") + t->name;
  std::string s = "import unittest\nfrom " + task.module + " import " + imports + "\n\n\nclass " + task.test_class +
                  "(unittest.TestCase):\n";
  for (size_t i = 0; i < fns.size(); ++i) s += test_method(*fns[i], cases[i]);
  return s + "\n\nif __name__ == '__main__':\n    unittest.main()\n";
}

}  // namespace

CodeTask make_code_task(uint64_t seed, int functions) {
  const auto& lib = code_templates();
  if (functions < 1 || functions > static_cast<int>(lib.size()))
    throw InputError("env.code_functions = " + std::to_string(functions) + " must be in [1, " +
                     std::to_string(lib.size()) + "]");
  Rng rng(seed ^ 0xC0DEull);
  std::vector<int> order(lib.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  std::vector<const CodeTemplate*> fns;
  for (int i = 0; i < functions; ++i) fns.push_back(&lib[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  const size_t buggy = rng.below(fns.size());
  const CodeBug& bug = fns[buggy]->bugs[rng.below(fns[buggy]->bugs.size())];

  CodeTask t;
  t.module = kModules[rng.below(std::size(kModules))];
  t.module_file = t.module + ".py";
  t.test_file = "test_" + t.module + ".py";
  t.test_class = std::string(1, static_cast<char>(t.module[0] - 'a' + 'A')) + t.module.substr(1) + "Test";
  std::vector<std::vector<int>> visible;
  for (size_t i = 0; i < fns.size(); ++i) {
    const CodeTemplate& f = *fns[i];
    if (i > 0) t.lines.insert(t.lines.end(), {"", ""});
    t.lines.push_back("def " + f.name + "(" + f.params + "):");
    if (i == buggy) t.function_first = static_cast<int>(t.lines.size());
    for (size_t l = 0; l < f.body.size(); ++l) {
      if (i == buggy && static_cast<int>(l) == bug.line) {
        t.bug_line = static_cast<int>(t.lines.size()) + 1;
        t.fixed_line = f.body[l];
        t.lines.push_back(bug.text);
      } else {
        t.lines.push_back(f.body[l]);
      }
    }
    if (i == buggy) t.function_last = static_cast<int>(t.lines.size());
    std::vector<int> cases = {0, 1};
    if (i == buggy && bug.caught_by > 1) cases.push_back(bug.caught_by);
    visible.push_back(cases);
    for (int c : cases) t.visible_cases.push_back(f.tests[static_cast<size_t>(c)]);
    t.hidden_cases.insert(t.hidden_cases.end(), f.tests.begin(), f.tests.end());
    t.hidden_cases.insert(t.hidden_cases.end(), f.unseen.begin(), f.unseen.end());
  }
  t.visible_tests = test_file(t, fns, visible);
  const CodeTestCase& failing = fns[buggy]->tests[static_cast<size_t>(bug.caught_by)];
  t.issue = "test_" + fns[buggy]->name + " fails: " + failing.call + " should return " + failing.expected;
  return t;
}

}  // namespace forge
