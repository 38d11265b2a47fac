#include "core/stop_signals.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "core/log.hpp"

namespace forge {
namespace {

volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop == 0) g_stop = sig;
  if (sig == SIGINT) {
    // Async-signal-safe only: signal() and write().
    std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C stops at once
    static const char kSay[] =
        "\nCtrl-C: stopping at the next step boundary with a checkpoint (a second SIGINT stops at once)\n";
    const ssize_t ignored = ::write(STDERR_FILENO, kSay, sizeof kSay - 1);
    (void)ignored;
  }
}

// Whether SIGINT is ignored now (read without changing it: a Ctrl-C in
// between would find no handler, or the wrong one).
bool sigint_ignored() {
  struct sigaction now {};
  sigaction(SIGINT, nullptr, &now);
  return now.sa_handler == SIG_IGN;
}

}  // namespace

volatile std::sig_atomic_t* catch_stop_signals() {
  std::signal(SIGTERM, on_stop_signal);
  // A SIGINT the process was started ignoring (a background job of a
  // script) is left ignored: the terminal's Ctrl-C is not meant for it.
  if (!sigint_ignored()) std::signal(SIGINT, on_stop_signal);
  return &g_stop;
}

int stopped_exit_code() { return g_stop == 0 ? kSigtermExit : 128 + g_stop; }

std::string stop_signal_name() { return g_stop == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM"; }

int exit_code_or_die_of_sigint(int code) {
  if (code != 128 + SIGINT || g_stop != SIGINT) return code;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::signal(SIGINT, SIG_DFL);
  std::raise(SIGINT);
  return code;  // not reached
}

void log_stopped_at_step(int step, const std::string& path) {
  log_warn(stop_signal_name() + ": stopping after " + std::to_string(step) + " steps");
  log_info("checkpoint " + path + "; continue with --resume");
}

bool stop_signal_before_final_evaluation(const std::string& run_dir, bool log) {
  // First: a signal from here on is not lost. SIGINT only where it is caught.
  std::signal(SIGTERM, SIG_DFL);
  if (!sigint_ignored()) std::signal(SIGINT, SIG_DFL);
  if (g_stop == 0) return false;
  if (log)
    log_warn(stop_signal_name() + ": the run is complete; its final evaluation is skipped (forge eval " + run_dir +
             " evaluates it)");
  return true;
}

}  // namespace forge
