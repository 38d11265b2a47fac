// The benchmarks' flag parsing (bench/bench_util.hpp): switches, numbers,
// lists and unknown flags; a bad flag is a usage error (exit 2) naming the
// flag, and a value the program refuses later (InputError) exit 2 through
// guarded_main rather than an uncaught exception.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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

TEST(BenchFlags, ListsAndRefusedValues) {
  auto f = parse({"--sizes=1,2.5,16"});
  EXPECT_EQ(f.numbers("sizes", "4"), (std::vector<double>{1, 2.5, 16}));
  EXPECT_EQ(f.numbers("other", "3,4"), (std::vector<double>{3, 4}));
  EXPECT_TRUE(f.given("sizes"));
  EXPECT_FALSE(f.given("other"));
  for (const char* bad : {"--sizes=a,b", "--sizes=1,,2", "--sizes=1,", "--sizes=2x"})
    EXPECT_EXIT(parse({bad}).numbers("sizes", "4"), testing::ExitedWithCode(2), "--sizes needs a comma-separated list");
  static char prog[] = "bench";
  char* argv[] = {prog, nullptr};
  EXPECT_EQ(forge::bench::guarded_main(1, argv, [](int, char**) -> int { throw forge::InputError("bad size"); }), 2);
  EXPECT_EQ(forge::bench::guarded_main(1, argv, [](int, char**) -> int { throw std::runtime_error("broke"); }), 1);
  EXPECT_EQ(forge::bench::guarded_main(1, argv, [](int, char**) { return 0; }), 0);
}

// A flag given bare that needs a value (it read as 1: --reps ran one
// repetition, --floats benchmarked one float), a number that is not finite
// (--measure_s=inf never ended), a flag given twice (the last one won) and
// an unknown flag beside --help (which exited 0 without naming it) are
// usage errors; the JSON line writes a non-finite figure as null.
TEST(BenchFlags, MissingValuesNonFiniteNumbersAndRepeats) {
  EXPECT_EXIT(parse({"--reps"}).get("reps", 3), testing::ExitedWithCode(2), "--reps needs a value");
  EXPECT_EXIT(parse({"--scale"}).get("scale", 1.0), testing::ExitedWithCode(2), "--scale needs a value");
  EXPECT_EXIT(parse({"--model"}).get("model", std::string("x")), testing::ExitedWithCode(2), "--model needs a value");
  EXPECT_EXIT(parse({"--sizes"}).numbers("sizes", "4"), testing::ExitedWithCode(2), "--sizes needs a value");
  for (const char* bad : {"--scale=inf", "--scale=nan", "--scale=-inf", "--scale=1e999"})
    EXPECT_EXIT(parse({bad}).get("scale", 1.0), testing::ExitedWithCode(2), "--scale needs a (finite )?number");
  EXPECT_EXIT(parse({"--sizes=1,inf"}).numbers("sizes", "4"), testing::ExitedWithCode(2), "finite numbers");
  EXPECT_EXIT(parse({"--reps=2", "--reps=3"}), testing::ExitedWithCode(2), "--reps is given twice");
  EXPECT_EXIT(
      {
        auto f = parse({"--help", "--bogus"});
        f.get("reps", 3);
        f.finish();
      },
      testing::ExitedWithCode(2), "unknown flag --bogus");
  EXPECT_EQ(forge::bench::num(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(forge::bench::num(std::nan("")), "null");
  EXPECT_EQ(forge::bench::num(2.5), "2.5");
  // Strings are quoted and escaped (a GGUF model's name with a quote broke
  // the line).
  EXPECT_EQ(forge::bench::json_string("SmolLM2 \"135M\" a\\b\n"), "\"SmolLM2 \\\"135M\\\" a\\\\b\\n\"");
  EXPECT_EQ(forge::bench::json_string("zen3"), "\"zen3\"");
}

}  // namespace
