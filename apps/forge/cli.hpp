// The forge command line: a table of subcommands and the dispatch from
// `forge <command> ...` to them, with the error convention of the suite:
//
//   exit 0  success (also --help and --version)
//   exit 1  anything else that went wrong (forge::Error, std::exception)
//   exit 2  the user's input: an unknown command, a bad flag, config key,
//           value or file (forge::InputError); printed as
//           "forge: error: <message>" on stderr
//
// A command is a new file in apps/forge/ that registers itself:
//
//   // apps/forge/cmd_sft.cpp
//   #include "cli.hpp"
//   #include "forge_config.hpp"
//   namespace {
//   int run_sft(int argc, char** argv) {          // argv[0] is "sft"
//     forge::StandardConfig cfg;
//     forge::OptionSet opts("forge sft", "Supervised fine-tuning on a synthetic task.");
//     forge::add_standard_options(opts, cfg);
//     if (!forge::cli::parse_options(opts, argc, argv)) return 0;  // --help shown
//     ...
//     return 0;
//   }
//   }  // namespace
//   FORGE_COMMAND("sft", "supervised fine-tuning on a synthetic task", run_sft);
//
// Registration runs from a static initializer, which works because the CLI's
// sources are compiled into the executable itself (not into a library that
// the linker could leave unused).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace forge::cli {

inline constexpr const char* kVersion = "0.1.0";

using CommandFn = std::function<int(int argc, char** argv)>;

struct Command {
  std::string name;     // the word after `forge`
  std::string summary;  // one line for `forge --help`
  CommandFn run;        // receives argv[0] = name, then the command's arguments
};

// Adds a command to the table (throws forge::Error on a duplicate name).
// Returns true so that it can initialize a namespace-scope static.
bool register_command(Command command);
// All commands, sorted by name.
std::vector<Command> commands();
// The command called `name`, or nullptr.
const Command* find_command(const std::string& name);

// Text of `forge --help`.
std::string usage();

// Warnings about known slow paths of this host (a BLAS fallback core, more
// compute threads than cores; backend/host_runtime.hpp), once per process,
// after the command has set its thread count (each command calls it once). `threads_on_node`: the compute
// threads of every rank on this node, 0 when unknown.
void log_host_warnings(int threads, int threads_on_node = 0);

// The whole program: dispatch, --help, --version, errors to exit codes.
int run_main(int argc, char** argv);

// For commands: parses argv with `opts`; on --help prints opts.help() to
// stdout and returns false (the command then returns 0). Errors propagate as
// forge::InputError to run_main.
bool parse_options(OptionSet& opts, int argc, char** argv);

}  // namespace forge::cli

#define FORGE_CLI_CONCAT2(a, b) a##b
#define FORGE_CLI_CONCAT(a, b) FORGE_CLI_CONCAT2(a, b)
// Registers a command from any .cpp in apps/forge/.
#define FORGE_COMMAND(name, summary, fn)                                       \
  static const bool FORGE_CLI_CONCAT(forge_command_registered_, __LINE__) = \
      ::forge::cli::register_command({(name), (summary), (fn)})
