// Checkpoints as a run uses them: when it writes one (every
// run.checkpoint_every steps and at its last step, into RUN_DIR/checkpoints),
// finding one, and the model shape it was trained with (generate, eval,
// train --train.init). The file format is io_hdf5/checkpoint.hpp.
#pragma once
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/learner_config.hpp"
#include "model/model_config.hpp"
#include "model/optimizer.hpp"
#include "model/policy_model.hpp"
#include "pretrained/model_source.hpp"

namespace forge {

// Whether a run writes a checkpoint after optimizer step `steps_done`
// (1-based) of `total_steps`: every run.checkpoint_every steps and at the end.
bool checkpoint_due(const RunConfig& run, int steps_done, int total_steps);

// Writes RUN_DIR/checkpoints/ckpt_step_<steps_done>.h5 (weights, AdamW state,
// the resolved config, the model's fingerprint (model_fingerprint.hpp), and
// the state of the run's data stream: `stream`'s RNG streams and sections)
// with the run.keep_checkpoints retention; returns its path.
std::string save_run_checkpoint(const RunConfig& run, const std::string& config_ini,
                                const std::string& model_fingerprint, const PolicyModel& model, AdamW& opt,
                                int steps_done, CheckpointState stream);

// A checkpoint file as given, or the newest checkpoint of a run folder
// (RUN_DIR/checkpoints, or the folder itself). InputError when none exists.
std::string resolve_checkpoint(const std::string& file_or_run_dir);

// The model of the configuration stored in the checkpoint (its [model]
// section, resolved: a fine-tuned pretrained model brings its tokenizer and
// chat format back from model.pretrained, without its original weights).
ModelSource model_source_of(const std::string& checkpoint);
// The model a checkpoint's stored [model] names could not be loaded (a
// pretrained model not found or refused): alike for every checkpoint of the
// run, so no older one is offered for it.
class UnresolvedModelError : public InputError {
 public:
  using InputError::InputError;
};

// What a resumed run changed of the settings that shape training's course,
// checkpoint's -> now ("optim.lr 0.003 -> 0.001; train.tasks 16 -> 8"), ""
// for none: every key but those that leave it alone (where the run writes,
// how often it logs, saves and evaluates, deadlines, the gateway's socket,
// sandbox concurrency) and [model] (load_resume_point compares it). For
// `command` "train": not [sft]; train.steps only where it is the cosine
// horizon. For "sft": [sft], [optim], [env], [agent], [sandbox] and [run]
// (sft.steps only as the cosine horizon; its evaluation's sizes not). For
// "eval" (forge eval against the run that wrote a checkpoint): what makes
// its tasks and scaffold, [env] (not env.code_test_cache), [agent] and run.seed. Both are INI texts
// as dump_ini writes them.
std::string resumed_setting_changes(const std::string& checkpoint_ini, const std::string& now_ini,
                                    const std::string& command = "train");

// The checkpoint --resume continues from: RUN_DIR/checkpoints' newest, loaded
// into `model` and `opt` (weights and AdamW state) once its [model] is this
// run's. InputError when there is none, when it is another model's, or when
// it is past `total_steps` (`steps_key` names that setting, `past_hint`
// what else to do with it); a damaged newest one names the one before it.
struct ResumePoint {
  std::string path;
  CheckpointState state;  // its step, RNG streams and sections
  int step = 0;
};
ResumePoint load_resume_point(PolicyModel& model, AdamW& opt, const RunConfig& run, const std::string& steps_key,
                              int total_steps, const std::string& past_hint);
// " at step N" of a resume's progress line, and " = KEY: nothing is left to
// train" when N is the run's last step (printed once the checks that may
// refuse the resume have passed).
std::string resumed_at(int step, int total_steps, const std::string& steps_key);
// `e`, from reading `path`, the newest checkpoint of `dir`, with the way on:
// move it aside and --resume continues from the one before, or (`resuming`
// false: a command that reads one checkpoint) give the one before instead
// (where there is one, and the file is damaged rather than another model's,
// a newer forge's or a model that cannot be loaded, which the older
// checkpoints share).
InputError with_older_checkpoint_hint(const InputError& e, const std::string& dir, const std::string& path,
                                      bool resuming = true);
// Runs load() on `path`, which resolve_checkpoint(given) chose; where
// `given` is a run folder (its newest checkpoint), an InputError from it
// names the checkpoint before as the one to give instead (not for an
// UnresolvedModelError).
template <class Load>
void load_chosen_checkpoint(const std::string& given, const std::string& path, Load&& load) {
  try {
    load();
  } catch (const InputError& e) {
    if (path == given) throw;
    throw with_older_checkpoint_hint(e, std::filesystem::path(path).parent_path().string(), path, false);
  }
}
// InputError unless the checkpoint at `path` was trained with this model:
// every [model] key, not the shapes alone (a changed rope_base or norm_eps
// loads without complaint). `flag` names the option, `fix` the remedy.
void require_same_model(const PolicyModel& model, const std::string& path, const std::string& flag,
                        const std::string& fix);
// The same from a run's configuration text (a checkpoint's or rollouts.h5's
// "config" attribute); `where` names it in errors.
ModelSource model_source_of_config(const std::string& ini, const std::string& where);

}  // namespace forge
