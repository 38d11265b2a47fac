// SIGTERM and Ctrl-C as a stop flag for trainers (Slurm's time limit,
// scancel, mpirun forwarding; a user at the terminal): while caught, either
// signal sets the flag to its number; a trainer reads it at each step
// boundary, writes a checkpoint there and exits 128 + that number (143 after
// SIGTERM; after SIGINT it dies of SIGINT, which its shell reports as 130,
// so that a script's loop stops as on any Ctrl-C), and `--resume` continues.
// The first SIGINT puts back its default action, so a second Ctrl-C stops
// the process at once (no checkpoint; rows past the last flush are lost). A
// SIGINT ignored when the process started (a job started with `&` from a
// script) stays ignored. Under mpirun or srun the launcher takes the Ctrl-C
// and the ranks see SIGTERM (or, from srun, SIGINT); the MPI roles pass any
// stop on as 143. Once
// the run's last checkpoint is written, the catching is released: the default
// actions are restored first and the flag read after, so a signal between the
// two is never lost (it either set the flag or ends the process).
#pragma once
#include <csignal>
#include <string>

namespace forge {

// Catches SIGTERM and SIGINT from now on; returns the flag they set (one per
// process): 0, or the number of the first signal caught. Call it once: a
// second call would re-arm a SIGINT already taken.
volatile std::sig_atomic_t* catch_stop_signals();

// Exit code of a process that SIGTERM stopped (128 + 15, what the shell and
// Slurm report of one it ended); the MPI roles pass a stop on as this code.
inline constexpr int kSigtermExit = 143;

// 128 + the signal caught (143 after SIGTERM, 130 after SIGINT); 143 when none.
int stopped_exit_code();

// The signal caught as the stop lines name it: "SIGTERM" or "SIGINT (Ctrl-C)".
std::string stop_signal_name();

// The process's end: `code`, unless it is 130 from a stop by SIGINT; then,
// with stdout and stderr flushed, the process dies of SIGINT (bash goes on
// with a script's loop after a child that exited 130, and stops it after one
// that SIGINT ended). Called by main once every file is closed.
int exit_code_or_die_of_sigint(int code);

// The step boundary's lines: "SIGTERM: stopping after N steps" (or "SIGINT
// (Ctrl-C): ...") and where the checkpoint `path` is.
void log_stopped_at_step(int step, const std::string& path);

// For a run whose last checkpoint is written: releases SIGTERM and SIGINT (one
// from now ends the process, its final evaluation too) and returns whether
// one was caught before; then, when `log`, says the final evaluation is
// skipped and which command evaluates `run_dir` later.
bool stop_signal_before_final_evaluation(const std::string& run_dir, bool log = true);

}  // namespace forge
