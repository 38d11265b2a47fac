#include "cli.hpp"

#include <algorithm>
#include <boost/version.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <memory>
#include <sstream>

#include "backend/host_runtime.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/utf8.hpp"
#include "learner/run_folder.hpp"

namespace forge::cli {
namespace {

// Function-local so that registration from other translation units' static
// initializers never sees it unconstructed. Stable addresses for find_command.
std::vector<std::unique_ptr<Command>>& table() {
  static std::vector<std::unique_ptr<Command>> t;
  return t;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string version_line() {
  std::string v = std::string("forge ") + kVersion + " (C++20, Boost " + BOOST_LIB_VERSION;
#ifdef FORGE_WITH_CUDA
  v += ", CUDA backend: built";
#else
  v += ", CUDA backend: not built";
#endif
  return v + ", CPU kernels built: " + cpu_kernels_built() + ")";
}

// The first process of an MPI job (or the only process) prints the host line.
bool first_process() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const char* v = std::getenv(var);
    if (v) return std::string(v) == "0";
  }
  return true;
}

bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace

void log_host_warnings(int threads, int threads_on_node) {
  for (const auto& w : host_runtime_warnings(threads, threads_on_node)) log_warn(w);
}

bool register_command(Command command) {
  FORGE_CHECK(!command.name.empty() && command.run, "command without a name or function");
  FORGE_CHECK(find_command(command.name) == nullptr,
              "command '" + command.name + "' registered twice");
  table().push_back(std::make_unique<Command>(std::move(command)));
  return true;
}

std::vector<Command> commands() {
  std::vector<Command> out;
  for (const auto& c : table()) out.push_back(*c);
  std::sort(out.begin(), out.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  return out;
}

const Command* find_command(const std::string& name) {
  for (const auto& c : table())
    if (c->name == name) return c.get();
  return nullptr;
}

std::string usage() {
  std::ostringstream out;
  out << "forge " << kVersion << ": asynchronous agent reinforcement learning on MPI ranks\n\n"
      << "Usage: forge <command> [options]\n"
      << "       forge <command> --help    the command's options with their defaults\n"
      << "       forge --version\n\n"
      << "Commands:\n";
  const auto cmds = commands();
  size_t width = 0;
  for (const auto& c : cmds) width = std::max(width, c.name.size());
  for (const auto& c : cmds)
    out << "  " << c.name << std::string(width - c.name.size() + 3, ' ') << c.summary << "\n";
  out << "\nOptions come from defaults, then --config FILE (INI), then --key=value flags.\n"
      << "See docs/configuration.md. Bad input exits with code 2, other failures with 1; sft and train\n"
      << "write a checkpoint on SIGTERM and exit 143, or on Ctrl-C and then end by SIGINT (130; a second Ctrl-C stops\n"
      << "at once).\n";
  return out.str();
}

bool parse_options(OptionSet& opts, int argc, char** argv) {
  if (opts.parse(argc, argv).help_requested) {
    std::cout << opts.help() << std::flush;
    return false;
  }
  return true;
}

// A command's output that could not be written (a full disk, a closed pipe)
// is a failure, not exit 0 with a truncated table or JSON.
static int output_written(int code, const std::string& what) {
  std::cout.flush();
  if (code == 0 && (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout))) {
    std::cerr << "forge: error: cannot write the output of 'forge " << what << "' (disk full or closed pipe?)\n";
    return 1;
  }
  return code;
}

int run_main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::cerr << usage();
      return 2;
    }
    const std::string first = argv[1];
    // `forge help [COMMAND]`, `forge --help` and `forge --version` take
    // nothing more: a word past them was a mistake, not something to ignore.
    const bool top_level = first == "--help" || first == "-h" || first == "help" || first == "--version" ||
                           first == "-V";
    const int words = first == "help" ? 3 : 2;
    if (top_level && argc > words)
      throw InputError("unexpected argument '" + std::string(argv[words]) + "' after 'forge " + first +
                       (words == 3 ? " " + std::string(argv[2]) : std::string()) + "'");
    if (first == "--help" || first == "-h" || first == "help") {
      if (first == "help" && argc >= 3) {
        // `forge help <command>` is `forge <command> --help`.
        const Command* c = find_command(argv[2]);
        if (!c) throw InputError("unknown command '" + std::string(argv[2]) + "'");
        char help_flag[] = "--help";
        char* sub[] = {argv[2], help_flag, nullptr};
        return output_written(c->run(2, sub), "help " + std::string(argv[2]));
      }
      std::cout << usage();
      return output_written(0, first);
    }
    if (first == "--version" || first == "-V") {
      std::cout << version_line() << "\n";
      return output_written(0, first);
    }
    const Command* c = find_command(first);
    if (!c) {
      std::string msg = "unknown command '" + first + "'";
      std::string best;
      size_t best_d = 3;
      for (const auto& cmd : commands()) {
        const size_t d = edit_distance(first, cmd.name);
        if (d < best_d) best_d = d, best = cmd.name;
      }
      if (!best.empty()) msg += " (did you mean '" + best + "'?)";
      if (!first.empty() && first[0] == '-') msg = "unknown option '" + first + "' before the command";
      std::cerr << "forge: error: " << msg << "\nRun 'forge --help' for the list of commands.\n";
      return 2;
    }
    if (!asks_for_help(argc, argv) && first_process()) log_info("forge " + first + ": " + host_runtime_line());
    return output_written(c->run(argc - 1, argv + 1), first);
  } catch (const InputError& e) {
    std::cout.flush();
    std::cerr << "forge: error: " << escape_controls(e.what()) << "\n";
    remove_unused_run_folders();
    return 2;
  } catch (const std::bad_alloc&) {
    std::cout.flush();
    std::cerr << "forge: error: out of memory: a size the configuration asks for does not fit this machine "
                 "(the model's parameters, with AdamW's two moments and the gradients: four floats each, grow with "
                 "[model] d_model, n_layers, ffn_dim and vocab; the rollout engine's KV cache with "
                 "agent.max_context_tokens + agent.max_new_tokens and the episodes in flight; a training batch "
                 "with train.max_tokens)\n";
    remove_unused_run_folders();
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "forge: error: " << escape_controls(e.what()) << "\n";
    remove_unused_run_folders();
    return 1;
  } catch (...) {
    std::cerr << "forge: error: unknown exception\n";
    return 1;
  }
}

}  // namespace forge::cli
