// SIGTERM as a flag for trainers (Slurm's time limit, scancel, mpirun
// forwarding): while caught, a SIGTERM sets the flag to 1; a trainer reads it
// at each step boundary, writes a checkpoint there and exits 143, and
// `--resume` continues. Once the run's last checkpoint is written, the
// catching is released: SIGTERM's default action is restored first and the
// flag read after, so a SIGTERM between the two is never lost (it either set
// the flag or ends the process).
#pragma once
#include <csignal>
#include <string>

namespace forge {

// Catches SIGTERM from now on; returns the flag it sets to 1 (one per process).
volatile std::sig_atomic_t* catch_sigterm();

// Exit code of a process that SIGTERM stopped (128 + 15, what the shell and
// Slurm report of one it ended).
inline constexpr int kSigtermExit = 143;

// The step boundary's lines: "SIGTERM: stopping after N steps" and where the
// checkpoint `path` is.
void log_stopped_at_step(int step, const std::string& path);

// For a run whose last checkpoint is written: releases SIGTERM (one from now
// ends the process, its final evaluation too) and returns whether one was
// caught before; then, when `log`, says the final evaluation is skipped and
// which command evaluates `run_dir` later.
bool sigterm_before_final_evaluation(const std::string& run_dir, bool log = true);

}  // namespace forge
