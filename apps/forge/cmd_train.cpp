// `forge train`: agent RL. Under mpirun/srun with more than one rank it runs
// asynchronously on learner, rollout and environment ranks (async_train.cpp);
// otherwise this file's synchronous loop in one process. Each step generates a
// batch (train.tasks tasks x train.group episodes, perturbed scaffolds, with
// tool noise) through the rollout engine, computes composite rewards and
// group-relative advantages, trains one CISPO (or PPO/GRPO/DAPO) step on
// prefix-tree-merged batches, and publishes the new weights to the engine
// (policy version + 1). Progress every run.log_every steps; held-out
// evaluation every train.eval_every steps; checkpoints per run.*.
//
// Start from a checkpoint (e.g. an SFT warm start) with --train.init=PATH or
// continue a run with --resume (its newest checkpoint; the data stream and
// step continue). Episodes and per-step metrics go to RUN_DIR/rollouts.h5
// (docs/hdf5-schema.md), readable while the run writes it (`forge inspect`).
#include <algorithm>
#include <cstdlib>
#include <optional>

#include "agent/agent_episode.hpp"
#include "agent/agent_eval.hpp"
#include "agent/opening_fit.hpp"
#include "agent/run_episodes.hpp"
#include "async_train.hpp"
#include "backend/backend_registry.hpp"
#include "cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/stop_signals.hpp"
#include "core/timer.hpp"
#include "forge_config.hpp"
#include "learner/learner.hpp"
#include "learner/run_checkpoints.hpp"
#include "learner/run_folder.hpp"
#include "learner/trainable_policy.hpp"
#include "pretrained/model_fingerprint.hpp"
#include "pretrained/model_source.hpp"
#include "model/optimizer.hpp"
#include "model/rollout_engine.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "mpi_roles/data_pool_state.hpp"
#include "mpi_roles/mpi_runtime.hpp"

namespace forge {
namespace {

int run_train(int argc, char** argv) {
  ForgeConfig all;
  bool resume = false;
  OptionSet opts("forge train",
                 "Agent RL: generate episodes, compute composite rewards and group advantages,\n"
                 "train CISPO on prefix-tree-merged batches, publish, repeat. In one process it\n"
                 "is synchronous; under mpirun/srun the ranks split into learner, rollout and\n"
                 "environment roles and run asynchronously through the data pool ([mpi], [pool];\n"
                 "docs/roles.md).");
  add_forge_options(opts, all);
  opts.add("resume", &resume, "continue the run in run.dir from its newest checkpoint");
  opts.command_line_only("resume");
  // Greedy decoding gives a group's episodes the same tokens (no advantage
  // to learn from), and its behaviour logprobs are not those of a sampler.
  opts.add_check([&] {
    if (all.base.sample.temperature <= 0)
      throw InputError("sample.temperature = 0 (greedy) cannot train: RL samples at a temperature > 0 (top_k / "
                       "top_p may truncate it; the behaviour logprobs then follow the truncated sampler)");
  });
  if (!cli::parse_options(opts, argc, argv)) return 0;
  opts.require_storable();
  // SIGTERM (a Slurm time limit) or Ctrl-C from here on: the step under way
  // finishes, then a checkpoint, and exit 143 (after Ctrl-C the process ends
  // by SIGINT, 130; under mpirun the ranks see SIGTERM, 143); `--resume`
  // continues. One during the
  // start (a model loading) is acted on when the first step would begin.
  volatile std::sig_atomic_t* const terminate = catch_stop_signals();
  std::optional<MpiRuntime> mpi;
  if (launched_by_mpi()) {
    mpi.emplace(&argc, &argv);
    if (mpi->world() > 1) return run_async_train(all, opts, resume, terminate);
  } else if (const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS"); tasks && std::atoi(tasks) > 1) {
    // srun without --mpi=pmix where Open MPI is not told it runs under MPI:
    // every task would train alone on run.dir.
    throw InputError("forge train is one of " + std::string(tasks) +
                     " tasks of a Slurm step but was not started as an MPI rank: each would train alone on "
                     "run.dir. Launch it with srun --mpi=pmix (slurm/forge_job.sbatch) or mpirun");
  }
  // One process trains alone: the MPI role counts do not apply. Said where
  // the command line asked for them, as a run that asked for 3 learners
  // would otherwise look like one (a config file's [mpi] is the layout for
  // when it runs under mpirun: configs/agent_demo.ini serves both).
  const auto asked = [&](const char* key, int n) { return n > 1 && opts.source(key) == "command line"; };
  if (asked("mpi.learners", all.mpi.learners) || asked("mpi.rollouts", all.mpi.rollouts))
    log_warn("mpi.learners = " + std::to_string(all.mpi.learners) + " and mpi.rollouts = " +
             std::to_string(all.mpi.rollouts) + " apply to MPI ranks; this forge train is one process (" +
             (mpi ? "one MPI rank" : "not started by mpirun") +
             ") and trains alone, synchronously. For the roles launch it on at least " +
             std::to_string(all.mpi.learners + all.mpi.rollouts + 1) + " ranks (mpirun -np, or sbatch --ntasks)");
  if (all.gateway.enabled)
    throw InputError(
        "gateway.enabled = true needs forge train on MPI ranks (at least a learner, a rollout and a gateway "
        "rank: mpirun -np 3 forge train ...)");
  StandardConfig& cfg = all.base;
  AgentConfig& agent = all.agent;
  const TrainConfig& tc = all.train;
  all.update.loss.validate();
  all.update.reward.validate();
  check_bins_hold_calls("train.max_tokens", tc.max_tokens, agent.max_context_tokens + agent.max_new_tokens);
  // The folder is held before it is judged: a second forge on it is told
  // who holds it (not that it holds an earlier run).
  hold_run_folder(cfg.run.dir);
  if (!resume) refuse_existing_run(cfg.run.dir, "forge train", true);
  agent.sampling = cfg.sample;
  agent.sampling.max_new_tokens = agent.max_new_tokens;

  const int threads = set_compute_threads(cfg.run.threads);
  cli::log_host_warnings(threads);
  TrainablePolicy policy = make_trainable_policy(cfg.model, cfg.optim, cfg.run, tc.steps);
  warn_past_context(policy.source, agent.max_context_tokens + agent.max_new_tokens,
                    "agent.max_context_tokens + agent.max_new_tokens");
  warn_turns_below_largest_task(all.env, agent);
  PolicyModel& model = *policy.model;
  AdamW& opt = *policy.opt;
  agent.vocabulary = ScaffoldVocabulary::of(policy.source.chat);
  check_openings_fit(all.env, agent);
  // The data stream: one RNG draws each step's task seeds; a checkpoint holds it.
  Rng task_rng(cfg.run.seed ^ 0x7A5Cull);
  const LearnerStart start = load_learner_start(model, opt, cfg.run, tc, resume);
  if (!start.resumed_from.empty()) {
    const std::string& path = start.resumed_from;
    if (start.checkpoint.sections.count(kDataPoolSection))
      throw InputError("--resume: checkpoint '" + path +
                       "' was written by a run on MPI ranks (it holds data-pool state); resume it under "
                       "mpirun with the same ranks");
    const auto tasks = start.checkpoint.rngs.find("tasks");
    if (tasks == start.checkpoint.rngs.end())
      throw InputError("--resume: checkpoint '" + path +
                       "' was not written by forge train (no 'tasks' RNG state; forge sft's?); start a new run from "
                       "it: --train.init=" + path + " with another run.dir");
    task_rng.set_state(tasks->second);
    log_info("train: resumed from " + path + resumed_at(start.step, tc.steps, "train.steps"));
  } else if (!tc.init.empty()) {
    log_info("train: initial weights from " + tc.init);
  }

  LearnerSetup setup;
  setup.run = cfg.run;
  setup.train = tc;
  setup.update = all.update;
  setup.sampling_temperature = cfg.sample.temperature;
  setup.env = all.env;
  setup.agent = agent;
  setup.config_ini = opts.dump_ini();
  setup.model_fingerprint = model_fingerprint(policy.source);
  setup.terminate = terminate;
  Learner learner(setup, model, opt, start);
  log_info("train: " + std::to_string(model.layout().total) + " parameters, " + std::to_string(threads) +
           " threads, " + std::to_string(tc.tasks) + " tasks x " + std::to_string(tc.group) +
           " episodes per step, loss " + all.update.loss.algorithm + ", run folder " + cfg.run.dir);

  const EnvMix mix(all.env);
  const PerturbationSampler sampler = all.env.perturbation_sampler();
  const int batch = tc.tasks * tc.group;
  RolloutEngine engine(model, engine_for_agent(agent, batch));
  const auto stream_state = [&] {
    CheckpointState s;
    s.rngs["tasks"] = task_rng.state();
    return s;
  };
  for (int step = start.step; step < tc.steps; ++step) {
    if (*terminate) {
      log_stopped_at_step(step, learner.checkpoint(step, stream_state()));
      return stopped_exit_code();
    }
    Stopwatch sw;
    engine.set_policy_version(step);
    std::vector<AgentEpisode> episodes;
    for (int k = 0; k < tc.tasks; ++k) {
      const uint64_t task_seed = task_rng.next_u64();
      for (int g = 0; g < tc.group; ++g)
        episodes.push_back(make_episode(mix, sampler, agent, task_seed,
                                        static_cast<uint64_t>(step) * batch + k * tc.group + g,
                                        StyleMode::kTrain, k));
    }
    run_episodes(engine, episodes);
    std::vector<Trajectory> trajs;
    for (auto& e : episodes) trajs.push_back(e.take_trajectory());
    const double gen_s = sw.seconds();
    double grad_norm = 0;
    const PolicyUpdateStats st = learner.update(trajs, step, &grad_norm);
    engine.clear_prefix_cache();  // cached k/v belong to the old weights
    learner.record(step, trajs, st, grad_norm, {gen_s, sw.seconds()}, "", stream_state);
  }
  if (stop_signal_before_final_evaluation(cfg.run.dir)) return stopped_exit_code();
  learner.finish(tc.steps);  // a resume never starts past train.steps (load_learner_start refuses it)
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("train", "agent RL (CISPO on prefix-tree batches): synchronous, or asynchronous on MPI ranks",
              forge::run_train);
