// calc: multi-step integer arithmetic through a calculator tool.
//
// A task is a random binary expression tree of calc_min_ops..calc_max_ops
// operations over two-digit numbers, e.g. "Compute ((17*23)+45)-8." Every
// operation needs one call calc("a op b") (op one of + - *), so the task
// needs as many calls as operations; results stay non-negative (a - b with
// a < b is generated as b - a) and a product at most 99999 (else +).
// The tool rejects anything but "<int> <op> <int>". A call is useful when it
// computes one of the expression's operations (either order for + and *)
// not computed before. verify(): 1 for the exact integer value, else 0.
// The solver computes the operations bottom-up, left to right.
#pragma once
#include <cstdint>
#include <vector>

#include "env/environment.hpp"

namespace forge {

class CalcEnv : public Environment {
 public:
  using Environment::Environment;
  std::string name() const override { return "calc"; }
  Solution solve() const override;

  struct Op {
    int64_t a = 0, b = 0;
    char op = '+';
    int64_t result() const;  // needs fits()
    bool fits() const;       // the result is an int64
  };
  // Parses "<int> <op> <int>" (spaces allowed); false on anything else.
  static bool parse_op(std::string_view text, Op& out);

 protected:
  Task generate(uint64_t seed) override;
  ToolResult call_tool(const ToolCall& call) override;
  float score(std::string_view answer) const override;

 private:
  std::vector<Op> ops_;      // the expression's operations, bottom-up
  std::vector<bool> done_;   // computed already (for usefulness)
  int64_t value_ = 0;
};

}  // namespace forge
