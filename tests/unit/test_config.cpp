// OptionSet: INI + flag precedence, every class of bad input (unknown key in a
// file or on the command line, wrong type, out of range, missing file) throws
// InputError naming the key, help lists every key with its default, and the
// INI dump reads back to the same values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"

namespace forge {
namespace {

struct Cfg {
  int d_model = 0;
  int64_t tokens = 0;
  uint64_t seed = 0;
  float lr = 0;
  double beta = 0;
  bool tree = false;
  std::string schedule;
  std::string dir;
  int top = 0;  // no section
};

void add_all(OptionSet& o, Cfg& c) {
  o.add("model.d_model", &c.d_model, 256, "width", in_range(8, 4096));
  o.add("data.tokens", &c.tokens, int64_t{1} << 40, "token budget", at_least(1));
  o.add("run.seed", &c.seed, 1234, "seed");
  o.add("optim.lr", &c.lr, 1e-3f, "learning rate", in_range(0, 10, Interval::kOpenLow));
  o.add("optim.beta", &c.beta, 0.9, "decay", in_range(0, 1, Interval::kOpenHigh));
  o.add("model.tree", &c.tree, true, "tree batches");
  o.add("optim.schedule", &c.schedule, "constant", "schedule", one_of({"constant", "cosine"}));
  o.add("run.dir", &c.dir, "runs/latest", "output folder", non_empty());
  o.add("top", &c.top, 3, "a key without a section");
}

std::string write_file(const std::string& name, const std::string& text) {
  // The pid in the name: two suites at once (two build trees) share TempDir.
  const std::string path = ::testing::TempDir() + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

// The InputError message of f(), or "" when f() does not throw one.
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsAreWrittenAtRegistration) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.tokens, int64_t{1} << 40);
  EXPECT_EQ(c.seed, 1234u);
  EXPECT_FLOAT_EQ(c.lr, 1e-3f);
  EXPECT_TRUE(c.tree);
  EXPECT_EQ(c.schedule, "constant");
  EXPECT_EQ(o.source("model.d_model"), "default");
}

TEST(Config, CurrentValueServesAsDefault) {
  int width = 77;
  OptionSet o;
  o.add("model.width", &width, "width", at_least(1));
  EXPECT_EQ(o.default_text("model.width"), "77");
  o.parse(std::vector<std::string>{});
  EXPECT_EQ(width, 77);
}

TEST(Config, IniThenFlagsOverride) {
  const std::string path = write_file("forge_cfg_precedence.ini",
                                      "; comment line\n"
                                      "# another\n"
                                      "top = 5\n"
                                      "[model]\n"
                                      "d_model = 512   ; trailing comment\n"
                                      "tree = false\n"
                                      "[optim]\n"
                                      "lr = 0.25\n"
                                      "schedule = cosine\n"
                                      "[run]\n"
                                      "dir = runs/x\n"
                                      "seed = 18446744073709551615\n");
  Cfg c;
  OptionSet o;
  add_all(o, c);
  o.parse(std::vector<std::string>{"--config", path, "--model.d_model=1024", "--optim.beta",
                                   "0.5"});
  EXPECT_EQ(c.d_model, 1024);       // flag beats file
  EXPECT_FLOAT_EQ(c.lr, 0.25f);     // file beats default
  EXPECT_DOUBLE_EQ(c.beta, 0.5);    // flag, `--key value` form
  EXPECT_FALSE(c.tree);
  EXPECT_EQ(c.schedule, "cosine");
  EXPECT_EQ(c.dir, "runs/x");
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(c.top, 5);
  EXPECT_EQ(c.tokens, int64_t{1} << 40);  // untouched default
  EXPECT_EQ(o.source("model.d_model"), "command line");
  EXPECT_NE(o.source("optim.lr").find(path), std::string::npos);
  EXPECT_EQ(o.source("data.tokens"), "default");
  ASSERT_EQ(o.config_files().size(), 1u);
}

TEST(Config, FlagsApplyLeftToRightAndConfigPositionDoesNotMatter) {
  const std::string path = write_file("forge_cfg_order.ini", "[model]\nd_model = 512\n");
  Cfg c;
  OptionSet o;
  add_all(o, c);
  ::testing::internal::CaptureStderr();
  o.parse(std::vector<std::string>{"--model.d_model=16", "--model.d_model", "32", "--config",
                                   path});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.d_model, 32);
  // the repeated flag is said to apply its last value (it was silent)
  EXPECT_NE(said.find("--model.d_model is given twice ('16', then '32'): the last applies"), std::string::npos)
      << said;
}

TEST(Config, BoolFlagForms) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  o.parse(std::vector<std::string>{"--model.tree=off"});
  EXPECT_FALSE(c.tree);
  o.parse(std::vector<std::string>{"--model.tree"});
  EXPECT_TRUE(c.tree);
  o.parse(std::vector<std::string>{"--model.tree", "false"});
  EXPECT_FALSE(c.tree);
  EXPECT_NE(input_error([&] { o.parse(std::vector<std::string>{"--model.tree=maybe"}); })
                .find("model.tree"),
            std::string::npos);
}

// `--key value` by forge's rules: a key never takes a flag as its value (a
// forgotten value is an error naming both), a bare bool flag leaves a
// positional after it alone, and a value may start with one '-'.
TEST(Config, FlagValuesNeverSwallowFlagsOrPositionals) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  std::string msg = input_error([&] { o.parse(std::vector<std::string>{"--run.dir", "--optim.lr=3"}); });
  EXPECT_NE(msg.find("--run.dir needs a value"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'--optim.lr=3'"), std::string::npos) << msg;
  EXPECT_EQ(c.dir, "runs/latest");
  msg = input_error([&] { o.parse(std::vector<std::string>{"--optim.lr"}); });
  EXPECT_NE(msg.find("--optim.lr needs a value"), std::string::npos) << msg;
  o.parse(std::vector<std::string>{"--top", "-3", "--run.dir", "-dash"});
  EXPECT_EQ(c.top, -3);
  EXPECT_EQ(c.dir, "-dash");
  std::string empty = "x";
  OptionSet e;
  e.add("env.list", &empty, "a list; empty = none");
  e.parse(std::vector<std::string>{"--env.list", ""});
  EXPECT_EQ(empty, "");
  empty = "x";
  e.parse(std::vector<std::string>{"--env.list="});
  EXPECT_EQ(empty, "");

  std::string file;
  bool json = false;
  OptionSet p("forge inspect");
  p.add("json", &json, false, "JSON output");
  p.add_positional("FILE", &file, "HDF5 file");
  p.parse(std::vector<std::string>{"--json", "a.h5"});
  EXPECT_TRUE(json);
  EXPECT_EQ(file, "a.h5");
  p.parse(std::vector<std::string>{"--json", "no", "b.h5"});
  EXPECT_FALSE(json);
  EXPECT_EQ(file, "b.h5");
  // A mistyped value of a bare bool flag is read as an argument: a surplus
  // argument then says so, naming the flag (found by review: it blamed the
  // real argument alone).
  msg = input_error([&] { p.parse(std::vector<std::string>{"--json", "tru", "c.h5"}); });  // "tru": a misspelt true
  EXPECT_NE(msg.find("unexpected argument 'c.h5' ('tru' after --json was read as an argument: --json alone means "
                     "true"),
            std::string::npos)
      << msg;
  // A word that is no path after it, where the command takes a FILE: the
  // flag's value, said so (it read "unexpected argument 'd.h5'" alone).
  msg = input_error([&] { p.parse(std::vector<std::string>{"--json", "maybe", "d.h5"}); });
  EXPECT_NE(msg.find("unexpected argument 'd.h5' ('maybe' after --json was read as an argument"), std::string::npos)
      << msg;
  // A second file after a bare --json is a surplus file, not a bad value.
  for (const auto& args : {std::vector<std::string>{"a.h5", "b.h5"}, std::vector<std::string>{"--json", "a.h5", "b.h5"},
                           std::vector<std::string>{"a.h5", "--json", "b.h5"}}) {
    msg = input_error([&] { p.parse(args); });
    EXPECT_NE(msg.find("unexpected argument 'b.h5'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("after --json"), std::string::npos) << msg;
  }
  // A command without arguments: the word after the flag is its value.
  OptionSet none("forge config");
  none.add("json", &json, false, "JSON output");
  msg = input_error([&] { none.parse(std::vector<std::string>{"--json", "maybe"}); });
  EXPECT_NE(msg.find("'maybe' after --json was read as an argument"), std::string::npos) << msg;
}

// A key set twice in a file (one section, or a repeated one) is an error
// naming both lines, not a silent last-wins; a directory is not a config file.
TEST(Config, KeySetTwiceInAFileAndADirectoryAreErrors) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  std::string msg = input_error([&] { o.load_ini_text("[model]\nd_model = 64\nd_model = 128\n", "dup.ini"); });
  EXPECT_NE(msg.find("model.d_model is set twice in dup.ini (lines 2 and 3)"), std::string::npos) << msg;
  msg = input_error(
      [&] { o.load_ini_text("[model]\nd_model = 64\n[optim]\nlr = 1\n[model]\nd_model = 32\n", "again.ini"); });
  EXPECT_NE(msg.find("lines 2 and 6"), std::string::npos) << msg;
  // A '#' comment on a header does not hide it: steps under two sections
  // are two keys.
  int sft_steps = 0, train_steps = 0;
  OptionSet two;
  two.add("sft.steps", &sft_steps, 1, "sft");
  two.add("train.steps", &train_steps, 1, "train");
  two.load_ini_text("[sft]\nsteps = 100\n[train]  # RL\nsteps = 50\n", "commented.ini");
  EXPECT_EQ(sft_steps, 100);
  EXPECT_EQ(train_steps, 50);
  msg = input_error([&] { two.load_ini_text("[sft]  # SFT\nsteps = 1\nsteps = 2\n", "hash.ini"); });
  EXPECT_NE(msg.find("sft.steps is set twice in hash.ini (lines 2 and 3)"), std::string::npos) << msg;
  msg = input_error([&] { o.parse(std::vector<std::string>{"--config", ::testing::TempDir()}); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST(Config, ArgcArgvForm) {
  Cfg c;
  OptionSet o("forge test");
  add_all(o, c);
  const char* argv[] = {"test", "--model.d_model=64", "--optim.lr=2"};
  EXPECT_FALSE(o.parse(3, argv).help_requested);
  EXPECT_EQ(c.d_model, 64);
  EXPECT_FLOAT_EQ(c.lr, 2.0f);
  const char* help[] = {"test", "--model.d_model=abc", "--help"};
  EXPECT_TRUE(o.parse(3, help).help_requested);  // --help wins, nothing is parsed
  EXPECT_EQ(c.d_model, 64);
}

TEST(Config, UnknownKeyInFile) {
  const std::string path = write_file("forge_cfg_unknown.ini", "[model]\ndmodel = 3\n");
  Cfg c;
  OptionSet o;
  add_all(o, c);
  const std::string msg = input_error([&] { o.parse(std::vector<std::string>{"--config", path}); });
  EXPECT_NE(msg.find("model.dmodel"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean model.d_model"), std::string::npos) << msg;
}

TEST(Config, UnknownFlag) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  std::string msg = input_error([&] { o.parse(std::vector<std::string>{"--nonsense=1"}); });
  EXPECT_NE(msg.find("nonsense"), std::string::npos) << msg;
  msg = input_error([&] { o.parse(std::vector<std::string>{"--model.dmodel", "3"}); });
  EXPECT_NE(msg.find("model.dmodel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean --model.d_model"), std::string::npos) << msg;
  // --config and --help are among the names a misspelling is near
  msg = input_error([&] { o.parse(std::vector<std::string>{"--confg", "x.ini"}); });
  EXPECT_NE(msg.find("did you mean --config?"), std::string::npos) << msg;
  msg = input_error([&] { o.parse(std::vector<std::string>{"--hlep"}); });
  EXPECT_NE(msg.find("did you mean --help?"), std::string::npos) << msg;
  // No prefix guessing: an abbreviation is an unknown option, not d_model.
  msg = input_error([&] { o.parse(std::vector<std::string>{"--model.d=3"}); });
  EXPECT_NE(msg.find("model.d"), std::string::npos) << msg;
  // Positionals are rejected where none are declared.
  msg = input_error([&] { o.parse(std::vector<std::string>{"stray"}); });
  EXPECT_NE(msg.find("stray"), std::string::npos) << msg;
}

TEST(Config, WrongType) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model.d_model=abc", "model.d_model: 'abc' is not an integer"},
      {"--model.d_model=12.5", "model.d_model: '12.5' is not an integer"},
      {"--data.tokens=1e3", "data.tokens: '1e3' is not an integer"},
      {"--run.seed=-1", "run.seed: '-1' is not a non-negative integer"},
      {"--run.seed=+-1", "run.seed: '+-1' is not a non-negative integer"},
      {"--model.d_model=+-16", "model.d_model: '+-16' is not an integer"},
      {"--model.d_model=+", "model.d_model: '+' is not an integer"},
      {"--optim.lr=fast", "optim.lr: 'fast' is not a number"},
      {"--optim.lr=nan", "optim.lr: 'nan' is not a number"},
      {"--optim.beta=1e999", "optim.beta: '1e999' is out of range"},
      // Underflow: a non-zero number that would read as 0.
      {"--optim.beta=1e-400", "optim.beta: '1e-400' is too small for a floating-point number (it reads as 0)"},
      {"--optim.lr=-1e-400", "optim.lr: '-1e-400' is too small"},
      {"--model.tree=2", "model.tree: '2' is not a boolean: must be true or false (or 1/0, yes/no, on/off)"},
  };
  for (const auto& [arg, expect] : cases) {
    const std::string msg = input_error([&] { o.parse(std::vector<std::string>{arg}); });
    EXPECT_NE(msg.find(expect), std::string::npos) << arg << " -> " << msg;
  }
  // In a file the message also names the file and line.
  const std::string path = write_file("forge_cfg_type.ini", "[model]\n\nd_model = abc\n");
  const std::string msg = input_error([&] { o.parse(std::vector<std::string>{"--config", path}); });
  EXPECT_NE(msg.find("model.d_model: 'abc' is not an integer"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":3"), std::string::npos) << msg;
}

TEST(Config, OutOfRange) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--optim.lr=-1", "optim.lr = -1 is out of range: must be in (0, 10]"},
      {"--optim.lr=0", "optim.lr = 0 is out of range: must be in (0, 10]"},
      {"--optim.beta=1", "optim.beta = 1 is out of range: must be in [0, 1)"},
      {"--model.d_model=4", "model.d_model = 4 is out of range: must be in [8, 4096]"},
      {"--model.d_model=99999999999", "model.d_model = 99999999999 is out of range: must be in [8, 4096]"},
      {"--data.tokens=0", "data.tokens = 0 is out of range: must be >= 1"},
      // Past the type with a one-sided range: the type's end is named too
      // (">= 1" alone named a range 2^63 is in).
      {"--data.tokens=9223372036854775808",
       "data.tokens = 9223372036854775808 is out of range: must be >= 1 and at most 9223372036854775807"},
      {"--optim.schedule=cosin", "optim.schedule = 'cosin' is not allowed: must be one of: constant, cosine"},
      {"--run.dir=", "run.dir"},
  };
  for (const auto& [arg, expect] : cases) {
    const std::string msg = input_error([&] { o.parse(std::vector<std::string>{arg}); });
    EXPECT_NE(msg.find(expect), std::string::npos) << arg << " -> " << msg;
  }
  // Edges of the ranges are accepted, and zero written with an exponent.
  o.parse(std::vector<std::string>{"--optim.lr=10", "--optim.beta=0e5", "--model.d_model=8"});
  EXPECT_FLOAT_EQ(c.lr, 10.0f);
  EXPECT_EQ(c.beta, 0.0);
  EXPECT_EQ(c.d_model, 8);
}

// A flag no INI file may set is named as it is typed: forge export's
// --format=xml said "format = 'xml'", a key the user never wrote.
TEST(Config, FlagsThatNoFileSetsAreNamedWithDashes) {
  std::string format;
  int64_t episode = -1;
  OptionSet cli_only("forge export");
  cli_only.add("format", &format, std::string("csv"), "csv | jsonl", one_of({"csv", "jsonl"}));
  cli_only.add("episode", &episode, int64_t{-1}, "row", at_least(-1));
  cli_only.allow_config_file(false);
  std::string msg = input_error([&] { cli_only.parse(std::vector<std::string>{"--format=xml"}); });
  EXPECT_NE(msg.find("--format = 'xml' is not allowed"), std::string::npos) << msg;
  msg = input_error([&] { cli_only.parse(std::vector<std::string>{"--episode=-2"}); });
  EXPECT_NE(msg.find("--episode = -2 is out of range"), std::string::npos) << msg;
  // A command-line-only flag of a command that reads INI files too.
  Cfg c;
  int steps = 0;
  OptionSet o;
  add_all(o, c);
  o.add("max_steps", &steps, 0, "steps", at_least(0));
  o.command_line_only("max_steps");
  msg = input_error([&] { o.parse(std::vector<std::string>{"--max_steps=x"}); });
  EXPECT_NE(msg.find("--max_steps: 'x' is not an integer"), std::string::npos) << msg;
  // Keys a file may set keep their INI names.
  msg = input_error([&] { o.parse(std::vector<std::string>{"--model.d_model=4"}); });
  EXPECT_EQ(msg.rfind("model.d_model = 4", 0), 0u) << msg;
}

// A flag without a name is an unknown option: "--=x" was read as the
// positional "x" ("'x' does not exist"), "--=" failed in Boost's words.
TEST(Config, AFlagWithoutANameIsUnknown) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  for (const std::string bad : {"--=x", "--="}) {
    const std::string msg = input_error([&] { o.parse(std::vector<std::string>{bad}); });
    EXPECT_NE(msg.find("unknown option '" + bad + "'"), std::string::npos) << msg;
  }
}

// A 32-bit float key checks the value it stores: one that rounds onto an
// open end says so (it quoted a value inside the range as outside).
TEST(Config, AFloatThatRoundsOntoAnOpenEndSaysSo) {
  float beta1 = 0;
  OptionSet o;
  o.add("optim.beta1", &beta1, 0.9f, "decay", in_range(0, 1, Interval::kOpenHigh));
  const std::string msg = input_error([&] { o.parse(std::vector<std::string>{"--optim.beta1=0.99999999"}); });
  EXPECT_NE(msg.find("optim.beta1 = 0.99999999 is out of range: it rounds to 1 as a 32-bit float, and must be "
                     "in [0, 1)"),
            std::string::npos)
      << msg;
  o.parse(std::vector<std::string>{"--optim.beta1=0.9999"});
  EXPECT_FLOAT_EQ(beta1, 0.9999f);
}

// -h after a flag that takes a value is that value, not a help request.
TEST(Config, DashHAsAFlagsValueIsNotHelp) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  EXPECT_FALSE(o.parse(std::vector<std::string>{"--run.dir", "-h"}).help_requested);
  EXPECT_EQ(c.dir, "-h");
  EXPECT_TRUE(o.parse(std::vector<std::string>{"--run.dir", "x", "-h"}).help_requested);
  EXPECT_TRUE(o.parse(std::vector<std::string>{"--model.tree", "-h"}).help_requested);  // a bool takes no -h
  EXPECT_TRUE(o.parse(std::vector<std::string>{"--run.dir", "--help"}).help_requested);  // help wins over a missing value
}

TEST(Config, MissingFile) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  const std::string msg =
      input_error([&] { o.parse(std::vector<std::string>{"--config", "no/such/file.ini"}); });
  EXPECT_NE(msg.find("no/such/file.ini"), std::string::npos) << msg;
}

TEST(Config, MalformedIniLine) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  // The message names the file, the line and its text (Boost's named neither line nor number).
  std::string msg = input_error([&] { o.load_ini_text("[model]\n; d_model is 16\nd_model\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:3: 'd_model' is neither 'key = value' nor a [section] line"), std::string::npos)
      << msg;
  msg = input_error([&] { o.load_ini_text("# a model\n[model\nd_model = 16\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:2: '[model'"), std::string::npos) << msg;
  // A '#' glued into a value would end it there (run.dir 'runs/exp#3' was
  // read as 'runs/exp'); one after a space starts a comment.
  msg = input_error([&] { o.load_ini_text("[run]\ndir = runs/exp#3\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:2: 'dir = runs/exp#3': a value cannot hold '#'"), std::string::npos) << msg;
  msg = input_error([&] { o.load_ini_text("[run]\ndir=#3\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:2: 'dir=#3': a value cannot hold '#'"), std::string::npos) << msg;
  o.load_ini_text("[run]\ndir = runs/exp # the third\n#dir = x#y\n", "good.ini");
  EXPECT_EQ(c.dir, "runs/exp");
  // An empty section name and one with spaces at its ends, named with their
  // line (Boost's reader took "[ model ]" as the prefix " model ", and "[]"
  // as an empty one: "unknown option '.d_model'" with no line).
  msg = input_error([&] { o.load_ini_text("[]\nd_model = 16\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:1: '[]': a section's name is a word between its brackets, not empty"), std::string::npos)
      << msg;
  msg = input_error([&] { o.load_ini_text("# x\n[ model ]\nd_model = 16\n", "bad.ini"); });
  EXPECT_NE(msg.find("bad.ini:2: '[ model ]'"), std::string::npos) << msg;
  // Lines ended by a carriage return alone read as one line.
  msg = input_error([&] { o.load_ini_text("[model]\rd_model = 16\r", "mac.ini"); });
  EXPECT_NE(msg.find("mac.ini: a line ends in a carriage return alone"), std::string::npos) << msg;
}

// A NUL byte in a file is refused by its line (run.dir 'a<NUL>b' was stored
// and the run written to the folder 'a'), and files that are not text by
// what they are: an HDF5 file was "old Mac line endings", and UTF-16's
// message ended at its first NUL.
TEST(Config, FilesThatAreNotTextAreRefusedByWhatTheyAre) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  std::string msg = input_error([&] { o.load_ini_text(std::string("[run]\ndir = a\0b\n", 16), "nul.ini"); });
  EXPECT_NE(msg.find("nul.ini:2: a NUL byte: not a text file"), std::string::npos) << msg;
  EXPECT_EQ(c.dir, "runs/latest");
  msg = input_error([&] { o.load_ini_text(std::string("\x89HDF\r\n\x1a\n\0\0", 10), "ckpt.h5"); });
  EXPECT_NE(msg.find("ckpt.h5: an HDF5 file (a checkpoint or rollouts.h5), not an INI configuration"),
            std::string::npos) << msg;
  msg = input_error([&] { o.load_ini_text(std::string("\xFF\xFE[\0m\0]\0", 8), "u16.ini"); });
  EXPECT_NE(msg.find("u16.ini: UTF-16 or UTF-32 text"), std::string::npos) << msg;
  // and a value from the command line
  msg = input_error([&] { o.parse(std::vector<std::string>{std::string("--run.dir=a\0b", 14)}); });
  EXPECT_NE(msg.find("run.dir: its value holds a NUL byte"), std::string::npos) << msg;
}

TEST(Config, AByteOrderMarkIsNotPartOfTheFirstKey) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  o.load_ini_text("\xEF\xBB\xBF[model]\r\nd_model = 16\r\n", "bom.ini");
  EXPECT_EQ(c.d_model, 16);
}

TEST(Config, CrossFieldChecksRunAfterParsing) {
  int a = 8, b = 2;
  OptionSet o;
  o.add("x.a", &a, "a", at_least(1));
  o.add("x.b", &b, "b; divides a", at_least(1));
  o.add_check([&] {
    if (a % b) throw InputError("x.b = " + std::to_string(b) + " must divide x.a");
  });
  // Checked on the final values, not on each flag: a=9 then b=3 is fine.
  o.parse(std::vector<std::string>{"--x.a=9", "--x.b=3"});
  EXPECT_NE(input_error([&] { o.parse(std::vector<std::string>{"--x.b=2"}); }).find("x.b"),
            std::string::npos);
}

TEST(Config, Positionals) {
  std::string file, out;
  int n = 1;
  OptionSet o("forge inspect");
  o.add("inspect.rows", &n, "rows", at_least(1));
  o.add_positional("FILE", &file, "HDF5 file");
  o.add_positional("OUT", &out, "output", /*required=*/false);
  EXPECT_NE(input_error([&] { o.parse(std::vector<std::string>{}); }).find("FILE"),
            std::string::npos);
  o.parse(std::vector<std::string>{"a.h5", "--inspect.rows=3"});
  EXPECT_EQ(file, "a.h5");
  EXPECT_EQ(out, "");
  EXPECT_EQ(n, 3);
  o.parse(std::vector<std::string>{"b.h5", "c.txt"});
  EXPECT_EQ(file, "b.h5");
  EXPECT_EQ(out, "c.txt");
  EXPECT_NE(input_error([&] { o.parse(std::vector<std::string>{"1", "2", "3"}); }).find("'3'"),
            std::string::npos);
  const std::string h = o.help();
  EXPECT_NE(h.find("Usage: forge inspect [options] FILE [OUT]"), std::string::npos) << h;
}

TEST(Config, HelpListsEveryKeyWithDefault) {
  Cfg c;
  OptionSet o("forge test", "A test command.");
  add_all(o, c);
  o.describe_section("optim", "the optimizer");
  const std::string h = o.help();
  for (const auto& key : o.keys()) {
    const size_t at = h.find("--" + key + " ");
    ASSERT_NE(at, std::string::npos) << key << "\n" << h;
    const std::string line = h.substr(at, h.find('\n', at) - at);
    EXPECT_NE(line.find("(default: " + o.default_text(key)), std::string::npos) << line;
  }
  EXPECT_NE(h.find("(default: 256; in [8, 4096])"), std::string::npos) << h;
  EXPECT_NE(h.find("one of: constant, cosine"), std::string::npos) << h;
  EXPECT_NE(h.find("[optim] the optimizer:"), std::string::npos) << h;
  EXPECT_NE(h.find("--config FILE"), std::string::npos) << h;
  EXPECT_NE(h.find("A test command."), std::string::npos) << h;
  // Grouped by section: both model keys before the optim section.
  EXPECT_LT(h.find("--model.tree"), h.find("[optim]"));
}

TEST(Config, DumpRoundTrips) {
  Cfg a;
  OptionSet oa;
  add_all(oa, a);
  oa.parse(std::vector<std::string>{"--model.d_model=1000", "--optim.lr=0.1", "--optim.beta=0.3",
                                    "--run.seed=18446744073709551615", "--model.tree=false",
                                    "--optim.schedule=cosine", "--run.dir=some dir/with spaces",
                                    "--data.tokens=+77", "--top=-7"});
  a.lr = 3.3333333e-4f;  // needs all float digits to come back exactly
  const std::string ini = oa.dump_ini(/*with_comments=*/true);

  Cfg b;
  OptionSet ob;
  add_all(ob, b);
  ob.load_ini_text(ini, "dump");
  EXPECT_EQ(b.d_model, 1000);
  EXPECT_EQ(b.lr, a.lr);  // exact
  EXPECT_EQ(b.beta, a.beta);
  EXPECT_EQ(b.seed, a.seed);
  EXPECT_EQ(b.tree, false);
  EXPECT_EQ(b.schedule, "cosine");
  EXPECT_EQ(b.dir, "some dir/with spaces");
  EXPECT_EQ(b.tokens, 77);
  EXPECT_EQ(b.top, -7);
  for (const auto& key : oa.keys()) EXPECT_EQ(ob.value_text(key), oa.value_text(key)) << key;
  // The plain dump is the same values, and reading it again changes nothing.
  EXPECT_EQ(ob.dump_ini(), oa.dump_ini());
  // A key without a section comes before the first [section].
  EXPECT_LT(ini.find("top = "), ini.find('['));
}

// A flag of one invocation (forge train's --resume) is not part of the
// stored configuration, which every command must read back.
TEST(Config, CommandLineOnlyKeysAreLeftOutOfTheDump) {
  Cfg c;
  bool resume = false;
  OptionSet o;
  add_all(o, c);
  o.add("resume", &resume, false, "continue");
  EXPECT_NE(o.dump_ini().find("resume = false"), std::string::npos);
  o.command_line_only("resume");
  o.parse(std::vector<std::string>{"--resume"});
  EXPECT_TRUE(resume);
  const std::string ini = o.dump_ini();
  EXPECT_EQ(ini.find("resume"), std::string::npos) << ini;
  Cfg d;
  OptionSet without;
  add_all(without, d);
  without.load_ini_text(ini, "dump");  // throws on an unknown key
  EXPECT_NE(o.help().find("--resume"), std::string::npos);  // still a flag of the command
  const std::string msg = input_error([&] { o.load_ini_text("resume = true\n", "old.ini"); });
  EXPECT_NE(msg.find("command-line flag (--resume)"), std::string::npos) << msg;
  EXPECT_THROW(o.command_line_only("no.such.key"), Error);
}

// A secret (gateway.token) is dumped empty: config.ini, rollouts.h5 and
// checkpoints store the dump, and once held the token in plain text.
TEST(Config, SecretsAreDumpedEmpty) {
  std::string token, name;
  OptionSet o;
  o.add("gateway.token", &token, "bearer token");
  o.add("gateway.name", &name, "not a secret");
  o.secret("gateway.token");
  o.parse(std::vector<std::string>{"--gateway.token=s3cret-value", "--gateway.name=visible"});
  EXPECT_EQ(token, "s3cret-value");
  const std::string ini = o.dump_ini(true);
  EXPECT_EQ(ini.find("s3cret-value"), std::string::npos) << ini;
  EXPECT_NE(ini.find("\ntoken = \n"), std::string::npos) << ini;
  EXPECT_NE(ini.find("name = visible"), std::string::npos) << ini;
  std::string read_back = "x";
  OptionSet again;
  again.add("gateway.token", &read_back, "bearer token");
  again.add("gateway.name", &name, "not a secret");
  again.load_ini_text(ini, "dump");
  EXPECT_EQ(read_back, "");
  bool flag = false;
  o.add("gateway.flag", &flag, false, "a bool");
  EXPECT_THROW(o.secret("gateway.flag"), Error);
  EXPECT_THROW(o.secret("no.such.key"), Error);
}

// A stored string value must read back from config.ini as it is: '#'
// anywhere, ';' at the start or after a space (comments), a line break and
// spaces at either end are refused naming the key, by require_storable()
// (the commands that store their configuration call it; a run.dir of
// "runs/a#b" was stored and read back as "runs/a"). A ';' inside a word
// reads back; a secret and a flag of one invocation are never stored.
TEST(Config, ValuesThatWouldNotReadBackAreRefused) {
  for (const char* bad : {"--run.dir=runs/a#b", "--run.dir=runs/a ;b", "--run.dir=;x", "--run.dir=a\nd_model = 8",
                          "--run.dir= padded"}) {
    std::string dir;
    OptionSet o;
    o.add("run.dir", &dir, "output folder");
    o.parse(std::vector<std::string>{bad});
    const std::string msg = input_error([&] { o.require_storable(); });
    EXPECT_NE(msg.find("run.dir"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("would not read it back"), std::string::npos) << msg;
  }
  std::string dir, token, prompt;
  OptionSet o;
  o.add("run.dir", &dir, "output folder");
  o.add("gateway.token", &token, "bearer token");
  o.add("prompt", &prompt, "a prompt");
  o.secret("gateway.token");
  o.command_line_only("prompt");
  o.parse(std::vector<std::string>{"--run.dir=runs/a;b", "--gateway.token=abc#defgh", "--prompt=Write C# code"});
  EXPECT_NO_THROW(o.require_storable());
  std::string back, back_token;
  OptionSet again;
  again.add("run.dir", &back, "output folder");
  again.add("gateway.token", &back_token, "bearer token");
  again.load_ini_text(o.dump_ini(), "dump");
  EXPECT_EQ(back, "runs/a;b");
}

TEST(Config, DumpIsReadByConfigFlag) {
  Cfg a;
  OptionSet oa;
  add_all(oa, a);
  oa.parse(std::vector<std::string>{"--model.d_model=64", "--optim.beta=0.125"});
  const std::string path = write_file("forge_cfg_dump.ini", oa.dump_ini());
  Cfg b;
  OptionSet ob;
  add_all(ob, b);
  ob.parse(std::vector<std::string>{"--config", path});
  EXPECT_EQ(b.d_model, 64);
  EXPECT_EQ(b.beta, 0.125);
}

TEST(Config, RegistrationBugsAreErrorsNotInputErrors) {
  int x = 0;
  std::string s;
  OptionSet o;
  o.add("a.x", &x, 1, "x");
  EXPECT_THROW(o.add("a.x", &x, 1, "again"), Error);                         // duplicate
  EXPECT_THROW(o.add("a.y", &x, 0, "y", in_range(1, 2)), Error);             // bad default
  EXPECT_THROW(o.add("a.s", &s, "v", "s", in_range(1, 2)), Error);           // wrong kind
  EXPECT_THROW(o.add("bad key", &x, 0, "x"), Error);
  try {
    o.add("a.z", &x, 0, "z", in_range(1, 2));
  } catch (const InputError&) {
    FAIL() << "a registration bug must not look like the user's input error";
  } catch (const Error&) {
  }
}

TEST(Config, Suggest) {
  Cfg c;
  OptionSet o;
  add_all(o, c);
  EXPECT_EQ(o.suggest("model.dmodel"), "model.d_model");
  EXPECT_EQ(o.suggest("optim.lR"), "optim.lr");
  EXPECT_EQ(o.suggest("d_model"), "model.d_model");
  EXPECT_EQ(o.suggest("completely.different.thing"), "");
  EXPECT_EQ(o.suggest("hlep"), "");  // a key in a file
  EXPECT_EQ(o.suggest("hlep", true), "help");  // a flag
}

}  // namespace
}  // namespace forge
