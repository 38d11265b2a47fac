// The benchmarks' flag parsing (bench/bench_util.hpp): switches, numbers and
// unknown flags; a bad flag is a usage error (exit 2) naming the flag.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../bench/bench_util.hpp"

namespace {

forge::bench::Flags parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  static char prog[] = "bench";
  argv.push_back(prog);
  for (std::string& a : args) argv.push_back(a.data());
  return forge::bench::Flags(static_cast<int>(argv.size()), argv.data());
}

TEST(BenchFlags, SwitchesTakeOneOrZero) {
  EXPECT_TRUE(parse({"--quick"}).on("quick"));
  EXPECT_TRUE(parse({"--quick=1"}).on("quick"));
  EXPECT_TRUE(parse({"--quick=true"}).on("quick"));
  EXPECT_FALSE(parse({"--quick=0"}).on("quick"));
  EXPECT_FALSE(parse({"--quick=false"}).on("quick"));
  EXPECT_FALSE(parse({}).on("quick"));
  EXPECT_EXIT(parse({"--no-torch=yes"}).on("no-torch"), testing::ExitedWithCode(2),
              "--no-torch is a switch");
}

TEST(BenchFlags, NumbersAndUnknownFlags) {
  auto f = parse({"--reps=5", "--scale=0.5"});
  EXPECT_EQ(f.get("reps", 3), 5);
  EXPECT_DOUBLE_EQ(f.get("scale", 1.0), 0.5);
  EXPECT_EQ(f.get("rounds", 3), 3);
  f.finish();
  EXPECT_EXIT(parse({"--reps=5x"}).get("reps", 3), testing::ExitedWithCode(2), "--reps needs a number, got '5x'");
  EXPECT_EXIT(parse({"--rep=5"}).finish(), testing::ExitedWithCode(2), "unknown flag --rep");
  EXPECT_EXIT(parse({"reps"}), testing::ExitedWithCode(2), "unexpected argument 'reps'");
}

}  // namespace
