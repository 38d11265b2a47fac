// A run folder (run.dir) as `forge sft` and `forge train` start one: a new
// run never writes into a folder that holds an earlier run's data (its
// checkpoints or rollouts.h5), which it would otherwise truncate or mix with
// its own; `forge train --resume` continues the run that is there. A folder
// with nothing of a run in it (absent, empty, or only a config.ini of a run
// that stopped before training) is taken.
#pragma once
#include <string>

namespace forge {

// Creates the folder (and its parents). InputError naming run.dir when it
// cannot be made (a file in the way, no permission).
void create_run_folder(const std::string& dir);

// Holds RUN_DIR/forge.lock (flock, exclusive) until the process exits, with
// "pid@host" written in it: a second forge on the same run.dir (two jobs
// started at once, or a --resume while the run still goes on) is an
// InputError naming the holder, before either writes anything the other
// would truncate or mix with. Creates the folder. Taken before a --resume
// chooses its checkpoint and before the run's first write; taking it again
// in the same process is a no-op. Where the file system
// does not lock (a Lustre without the flock mount option) it warns once and
// goes on unlocked.
void hold_run_folder(const std::string& dir);

// Removes every folder hold_run_folder created in this process that holds
// nothing but its forge.lock (and the empty checkpoints folder a start
// makes), and the parent folders it created for it that
// are then empty: a command that fails before its first write
// (bad input: a --resume of a mistyped run.dir, a missing --train.init)
// leaves no folder behind. Called by the CLI on its way out with an error,
// and by abort_job under MPI; a no-op while another thread holds the folder
// list (it never waits).
void remove_unused_run_folders();

// The first line of a run's config.ini (an ini comment): the file is the
// run's own, which a later run in the folder may replace.
inline constexpr const char* kRunConfigMark = "; the resolved configuration of this run, written by forge";

// Writes RUN_DIR/config.ini whole (kRunConfigMark, then `ini`; a temporary
// file renamed over it): Error naming the file when it cannot be written (a
// full disk).
void write_run_config(const std::string& dir, const std::string& ini);
// Makes RUN_DIR/checkpoints at the run's start, before anything else is
// written: InputError naming run.dir when it cannot be a folder (a file of
// that name failed the first checkpoint, after the training before it).
void make_checkpoints_folder(const std::string& dir);

// InputError when `dir` holds a run: RUN_DIR/checkpoints/ckpt_step_*.h5
// (the message suggests --resume where `command`, "forge sft" or "forge
// train", is `resumable`) or, with no checkpoint to continue from,
// RUN_DIR/rollouts.h5; or a RUN_DIR/config.ini that does not start with
// kRunConfigMark (a file of the user's, which the run would replace).
void refuse_existing_run(const std::string& dir, const std::string& command, bool resumable);

// A rollouts file as given, or RUN_DIR/rollouts.h5 of a run folder:
// InputError naming the folder when it has none.
std::string resolve_rollouts(const std::string& file_or_run_dir);

}  // namespace forge
