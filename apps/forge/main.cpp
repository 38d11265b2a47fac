// The forge executable: `forge <command> [options]`. Commands live one per
// file in apps/forge/cmd_*.cpp and register themselves (see cli.hpp). A run
// that a first Ctrl-C stopped ends by SIGINT once it is closed
// (core/stop_signals.hpp).
#include "cli.hpp"
#include "core/stop_signals.hpp"

int main(int argc, char** argv) { return forge::exit_code_or_die_of_sigint(forge::cli::run_main(argc, argv)); }
