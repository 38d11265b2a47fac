#include "env/calc_env.hpp"

#include <algorithm>
#include <charconv>

#include "core/rng.hpp"

namespace forge {
namespace {

struct Built {
  int64_t value;
  std::string text;
  bool leaf;
};

// Random tree of n operations; appends its operations bottom-up to ops.
Built build(Rng& rng, int n, std::vector<CalcEnv::Op>& ops) {
  if (n == 0) {
    const int64_t v = 11 + static_cast<int64_t>(rng.below(89));
    return {v, std::to_string(v), true};
  }
  const int left_ops = static_cast<int>(rng.below(static_cast<uint64_t>(n)));
  Built l = build(rng, left_ops, ops);
  Built r = build(rng, n - 1 - left_ops, ops);
  static const char kOps[] = {'+', '-', '*'};
  char op = kOps[rng.below(3)];
  if (op == '-' && l.value < r.value) std::swap(l, r);
  if (op == '*' && l.value * r.value > 99999) op = '+';
  CalcEnv::Op o{l.value, r.value, op};
  ops.push_back(o);
  auto wrap = [](const Built& b) { return b.leaf ? b.text : "(" + b.text + ")"; };
  return {o.result(), wrap(l) + op + wrap(r), false};
}

bool parse_int(std::string_view& s, int64_t& out) {
  s = trim(s);
  size_t n = 0;
  if (n < s.size() && s[n] == '-') ++n;
  const size_t digits_begin = n;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  if (n == digits_begin || n - digits_begin > 12) return false;
  std::from_chars(s.data() + (s[0] == '-' ? 1 : 0), s.data() + n, out);
  if (s[0] == '-') out = -out;
  s.remove_prefix(n);
  return true;
}

}  // namespace

int64_t CalcEnv::Op::result() const {
  return op == '+' ? a + b : op == '-' ? a - b : a * b;
}

bool CalcEnv::parse_op(std::string_view text, Op& out) {
  std::string_view s = text;
  if (!parse_int(s, out.a)) return false;
  s = trim(s);
  if (s.empty() || (s[0] != '+' && s[0] != '-' && s[0] != '*')) return false;
  out.op = s[0];
  s.remove_prefix(1);
  if (!parse_int(s, out.b)) return false;
  return trim(s).empty();
}

bool CalcEnv::Op::fits() const {
  int64_t r = 0;
  return !(op == '+'   ? __builtin_add_overflow(a, b, &r)
           : op == '-' ? __builtin_sub_overflow(a, b, &r)
                       : __builtin_mul_overflow(a, b, &r));
}

Task CalcEnv::generate(uint64_t seed) {
  Rng rng(seed ^ 0xCA1Cull);
  const int n = config().calc_min_ops +
                static_cast<int>(rng.below(config().calc_max_ops - config().calc_min_ops + 1));
  ops_.clear();
  const Built root = build(rng, n, ops_);
  done_.assign(ops_.size(), false);
  value_ = root.value;
  Task t;
  t.request = "Compute " + root.text + ".";
  t.tools = {{"calc", "a op b", "integers, op is + - or *", "3+4"}};
  t.steps_needed = static_cast<int>(ops_.size());
  return t;
}

Environment::ToolResult CalcEnv::call_tool(const ToolCall& call) {
  Op o;
  if (!parse_op(call.args, o))
    return {false, "calc expects 'a op b' with integers a, b of at most 12 digits and op one of + - *, got '" +
                       call.args + "'"};
  // 12-digit operands: a product can leave int64 (it came back wrong).
  if (!o.fits()) return {false, "calc: the result of '" + call.args + "' is beyond 64-bit integers"};
  bool useful = false;
  for (size_t i = 0; i < ops_.size() && !useful; ++i) {
    const Op& n = ops_[i];
    const bool same = n.op == o.op && ((n.a == o.a && n.b == o.b) ||
                                       (n.op != '-' && n.a == o.b && n.b == o.a));
    if (same && !done_[i]) useful = done_[i] = true;
  }
  return {true, std::to_string(o.result()), useful};
}

float CalcEnv::score(std::string_view answer) const {
  // The integer, or written as another decimal (JSON's {"answer": 31.0},
  // "+31", "3.1e1"): its digits D and exponent E (the value D x 10^E, read
  // exactly, not rounded as a double would) must be that integer.
  const std::string_view s = trim(answer);
  if (s.size() > 64) return 0;
  size_t n = 0;
  const bool negative = n < s.size() && s[n] == '-';
  if (n < s.size() && (s[n] == '+' || s[n] == '-')) ++n;
  std::string digits;
  int64_t exponent = 0;
  const auto read_digits = [&](bool fraction) {
    const size_t from = n;
    for (; n < s.size() && s[n] >= '0' && s[n] <= '9'; ++n) {
      digits += s[n];
      exponent -= fraction;
    }
    return n - from;
  };
  if (read_digits(false) == 0) return 0;
  if (n < s.size() && s[n] == '.') ++n, read_digits(true);
  if (n < s.size() && (s[n] == 'e' || s[n] == 'E')) {
    ++n;
    const bool down = n < s.size() && s[n] == '-';
    if (n < s.size() && (s[n] == '+' || s[n] == '-')) ++n;
    const size_t from = n;
    int64_t e = 0;
    for (; n < s.size() && s[n] >= '0' && s[n] <= '9'; ++n) e = std::min<int64_t>(10 * e + (s[n] - '0'), 100000);
    if (n == from) return 0;
    exponent += down ? -e : e;
  }
  if (n != s.size()) return 0;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  while (!digits.empty() && digits.back() == '0') digits.pop_back(), ++exponent;
  if (digits.empty()) return value_ == 0 ? 1.0f : 0.0f;
  if (exponent < 0 || static_cast<int64_t>(digits.size()) + exponent > 19) return 0;  // a fraction, or past int64
  __int128 x = 0;
  for (const char c : digits) x = 10 * x + (c - '0');
  for (int64_t i = 0; i < exponent; ++i) x *= 10;
  return (negative ? -x : x) == static_cast<__int128>(value_) ? 1.0f : 0.0f;
}

Solution CalcEnv::solve() const {
  Solution s;
  for (const Op& o : ops_)
    s.calls.push_back({"calc", std::to_string(o.a) + o.op + std::to_string(o.b)});
  s.answer = std::to_string(value_);
  return s;
}

}  // namespace forge
