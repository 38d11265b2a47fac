// The forge executable: `forge <command> [options]`. Commands live one per
// file in apps/forge/cmd_*.cpp and register themselves (see cli.hpp).
#include "cli.hpp"

int main(int argc, char** argv) { return forge::cli::run_main(argc, argv); }
