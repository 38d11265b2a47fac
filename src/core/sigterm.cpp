#include "core/sigterm.hpp"

#include "core/log.hpp"

namespace forge {
namespace {

volatile std::sig_atomic_t g_sigterm = 0;
extern "C" void on_sigterm(int) { g_sigterm = 1; }

}  // namespace

volatile std::sig_atomic_t* catch_sigterm() {
  std::signal(SIGTERM, on_sigterm);
  return &g_sigterm;
}

void log_stopped_at_step(int step, const std::string& path) {
  log_warn("SIGTERM: stopping after " + std::to_string(step) + " steps");
  log_info("checkpoint " + path + "; continue with --resume");
}

bool sigterm_before_final_evaluation(const std::string& run_dir, bool log) {
  std::signal(SIGTERM, SIG_DFL);  // first: a SIGTERM from here on is not lost
  if (g_sigterm == 0) return false;
  if (log)
    log_warn("SIGTERM: the run is complete; its final evaluation is skipped (forge eval " + run_dir +
             " evaluates it)");
  return true;
}

}  // namespace forge
