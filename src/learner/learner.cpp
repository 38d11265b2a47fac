#include "learner/learner.hpp"

#include <cstdio>

#include "agent/agent_eval.hpp"
#include "core/config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/peak_memory.hpp"
#include "env/env_mix.hpp"
#include "env/perturbation.hpp"
#include "learner/run_checkpoints.hpp"
#include "learner/run_folder.hpp"
#include "learner/train_progress.hpp"

namespace forge {

LearnerStart load_learner_start(PolicyModel& model, AdamW& opt, const RunConfig& run, const TrainConfig& train,
                                bool resume) {
  LearnerStart start;
  if (resume) {
    ResumePoint point = load_resume_point(model, opt, run, "train.steps", train.steps,
                                          " (forge eval " + run.dir + " evaluates it)");
    start.resumed_from = point.path;
    start.checkpoint = std::move(point.state);
    start.step = point.step;
    // A requeued job repeats its command line: its train.init was the first
    // start's, and the run's own checkpoint supersedes it.
    if (!train.init.empty())
      log_info("train: --resume continues from " + start.resumed_from + "; train.init = '" + train.init +
               "' applied to the run's first start only and is not read");
  } else if (!train.init.empty()) {
    std::string path;
    try {
      path = resolve_checkpoint(train.init);
    } catch (const InputError& e) {
      throw InputError(std::string("train.init: ") + e.what());
    }
    require_same_model(model, path, "--train.init", "set the [model] keys it was trained with");
    load_checkpoint(path, model, nullptr);
  }
  return start;
}

Learner::Learner(const LearnerSetup& setup, PolicyModel& model, AdamW& opt, const LearnerStart& start)
    : setup_(setup), update_(setup.update), model_(model), opt_(opt), start_step_(start.step) {
  update_.max_tokens = setup.train.max_tokens;
  update_.merge = setup.train.merge;
  update_.inv_temperature = setup.sampling_temperature > 0 ? 1.0f / setup.sampling_temperature : 1.0f;
  update_.shard = setup.shard;
  update_.shards = setup.shards;
  update_.sum_across_shards = setup.sum_across_shards;
  if (!setup.lead) return;
  // The run's first write: from here no other forge may use the folder (one
  // that passed the start's check at the same time is refused now).
  hold_run_folder(setup.run.dir);
  if (start.resumed_from.empty()) refuse_existing_run(setup.run.dir, "forge train", true);
  if (!start.resumed_from.empty())
    if (const std::string changes = resumed_setting_changes(start.checkpoint.config_ini, setup.config_ini);
        !changes.empty())
      log_warn("train: --resume with settings other than the checkpoint's (" + changes +
               "): the run goes on from step " + std::to_string(start.step) +
               " under the new ones, unlike an uninterrupted run; config.ini records them");
  make_checkpoints_folder(setup.run.dir);  // before the store: a refusal leaves no rollouts.h5
  RolloutStoreOptions ro;
  ro.config_ini = setup.config_ini;
  ro.domains = EnvMix(setup.env).domains();
  ro.template_families = all_template_families();
  ro.flush_seconds = setup.run.flush_seconds;
  ro.resume_step = start.resumed_from.empty() ? -1 : start.step;  // rows past the checkpoint are cut
  rollouts_ = std::make_unique<RolloutStore>(setup.run.dir + "/rollouts.h5", ro);
  // After the store: a resume it refuses leaves the run's config.ini as it was.
  write_run_config(setup.run.dir, setup.config_ini);
}

Learner::~Learner() = default;

PolicyUpdateStats Learner::update(const std::vector<Trajectory>& episodes, int64_t version, double* grad_norm) {
  model_.zero_grads();
  update_.policy_version = version;
  const PolicyUpdateStats st = policy_forward_backward(model_, episodes, update_);
  if (setup_.gradient_sum) setup_.gradient_sum(model_.grads(), model_.layout().total);
  // No step when nothing trains (every group zero-variance or abandoned, or
  // every token masked): AdamW's momentum and weight decay would still move
  // the weights. kept_tokens is the whole batch's, so all learners agree.
  const bool trains = st.samples && st.loss.kept_tokens > 0;
  applied_lr_ = trains ? learning_rate_at(opt_.config(), opt_.steps_taken()) : 0.0;
  *grad_norm = trains ? opt_.step() : 0.0;
  return st;
}

void Learner::record(int step, const std::vector<Trajectory>& episodes, const PolicyUpdateStats& st,
                     double grad_norm, const StepTiming& timing, const std::string& progress_suffix,
                     const std::function<CheckpointState()>& stream_state, StaleGroups stale) {
  if (!setup_.lead) return;
  int64_t generated = 0;
  for (const auto& t : episodes)
    for (const auto& c : t.calls) generated += static_cast<int64_t>(c.generated.size());
  const double tokens_per_s = generated / std::max(timing.generation_seconds, 1e-9);
  rollouts_->append_episodes(episodes, step, step);
  rollouts_->append_step(step_metrics(
      step, st, {tokens_per_s, timing.step_seconds, grad_norm, applied_lr_, stale.dropped, stale.masked}));

  const int done = step + 1;
  const bool last = done == setup_.train.steps;
  // Masked importance sampling that keeps nothing trains nothing, silently
  // but for the step line's "masked 1.000": said once, with the usual causes.
  const PolicyLossConfig& loss = setup_.update.loss;
  if (!warned_all_masked_ && loss.is_mask != "none" && st.loss.tokens > 0 && st.loss.masked_tokens == st.loss.tokens) {
    warned_all_masked_ = true;
    log_warn("step " + std::to_string(done) + ": loss.is_mask = " + loss.is_mask +
             " masked every token (ratios pi/mu outside [loss.is_low, loss.is_high] = [" +
             format_float(loss.is_low) + ", " + format_float(loss.is_high) +
             "]): no optimizer step. Stale tokens cause it, and so do sample.top_k / sample.top_p: the behaviour "
             "logprobs are then the truncated sampler's, and an on-policy token's ratio is the policy's mass on "
             "the kept candidates (said once a run)");
  }
  if (done % setup_.run.log_every == 0 || last || step == start_step_)
    log_info(format_train_progress(done, st, grad_norm, tokens_per_s, timing.step_seconds) + progress_suffix);
  if (checkpoint_due(setup_.run, done, setup_.train.steps)) checkpoint(done, stream_state());
  if (setup_.train.eval_every > 0 && done % setup_.train.eval_every == 0 && !last) evaluate(done);
}

std::string Learner::checkpoint(int steps_done, CheckpointState stream_state) {
  FORGE_CHECK(setup_.lead, "only the lead learner writes checkpoints");
  if (steps_done == saved_step_) return saved_path_;
  rollouts_->sync();
  saved_path_ = save_run_checkpoint(setup_.run, setup_.config_ini, setup_.model_fingerprint, model_, opt_, steps_done,
                                    std::move(stream_state));
  saved_step_ = steps_done;
  return saved_path_;
}

void Learner::finish(int steps_done) {
  if (!setup_.lead) return;
  rollouts_->close();
  const std::string newest = latest_checkpoint(setup_.run.dir + "/checkpoints");
  log_info("train: wrote " + (newest.empty() ? "" : newest + " and ") + setup_.run.dir +
           "/rollouts.h5 (forge eval, forge inspect)");
  model_.release_activations();
  evaluate(steps_done);
  char line[96];
  std::snprintf(line, sizeof line, "learner: peak resident memory %.2f GiB", peak_resident_gib());
  log_info(line);
}

void Learner::evaluate(int steps_done) {
  std::function<void()> each_step;
  if (setup_.progress) each_step = [this] { setup_.progress("learner rank 0's evaluation (an engine step)"); };
  const StyleEvals ev = evaluate_styles(model_, setup_.env, setup_.agent, setup_.train.eval_tasks,
                                        setup_.run.seed, setup_.terminate, each_step);
  if (ev.stopped) return;  // its figures are not the evaluation's
  std::fputs(format_style_evals(ev, "eval at step " + std::to_string(steps_done)).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace forge
