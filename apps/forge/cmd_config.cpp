// `forge config`: resolves the standard sections (defaults, then --config
// FILE, then --key=value flags) and prints them as INI, the same text a run
// stores with its outputs. Use it to check a config file or an override.
#include <iostream>

#include "cli.hpp"
#include "forge_config.hpp"

namespace forge {
namespace {

int run_config(int argc, char** argv) {
  ForgeConfig config;
  OptionSet opts("forge config",
                 "Print the resolved configuration as INI: the defaults, overridden by\n"
                 "--config FILE, overridden by --key=value flags. Exits with code 2 and\n"
                 "names the key when a key, type or value is wrong.");
  add_forge_options(opts, config);
  opts.add_check([&config] { check_mpi_deadlines(config.mpi); });  // the rule forge train applies on MPI ranks
  if (!cli::parse_options(opts, argc, argv)) return 0;
  opts.require_storable();
  std::cout << opts.dump_ini();
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("config", "print the resolved configuration (defaults < --config FILE < flags) as INI",
              forge::run_config);
