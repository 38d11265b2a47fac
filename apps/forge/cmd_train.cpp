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
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "agent/agent_episode.hpp"
#include "agent/run_episodes.hpp"
#include "agent_eval.hpp"
#include "async_train.hpp"
#include "mpi_roles/mpi_runtime.hpp"
#include "algo/policy_update.hpp"
#include "cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rng.hpp"
#include "core/timer.hpp"
#include "cpu/cpu_backend.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/rollout_store.hpp"
#include "model/optimizer.hpp"
#include "model/rollout_engine.hpp"
#include "model/tokenizer.hpp"
#include "checkpoint_model.hpp"
#include "forge_config.hpp"
#include "train_progress.hpp"

namespace forge {
namespace {

int run_train(int argc, char** argv) {
  ForgeConfig all;
  bool resume = false;
  OptionSet opts("forge train",
                 "Synchronous agent RL: generate episodes, compute composite rewards and group\n"
                 "advantages, train CISPO on prefix-tree-merged batches, publish, repeat.");
  add_forge_options(opts, all);
  opts.add("resume", &resume, "continue the run in run.dir from its newest checkpoint");
  if (!cli::parse_options(opts, argc, argv)) return 0;
  std::optional<MpiRuntime> mpi;
  if (launched_by_mpi()) {
    mpi.emplace(&argc, &argv);
    if (mpi->world() > 1) return run_async_train(all, opts, resume);
  }
  if (all.gateway.enabled)
    throw InputError(
        "gateway.enabled = true needs forge train on MPI ranks (at least a learner, a rollout and a gateway "
        "rank: mpirun -np 3 forge train ...)");
  StandardConfig& cfg = all.base;
  EnvConfig& env = all.env;
  AgentConfig& agent = all.agent;
  PolicyUpdateConfig& upd = all.update;
  const TrainConfig& tc = all.train;
  upd.loss.validate();
  upd.reward.validate();
  upd.max_tokens = tc.max_tokens;
  upd.merge = tc.merge;
  agent.sampling = cfg.sample;
  agent.sampling.max_new_tokens = agent.max_new_tokens;
  upd.inv_temperature = cfg.sample.temperature > 0 ? 1.0f / cfg.sample.temperature : 1.0f;

  const int threads = set_cpu_threads(cfg.run.threads);
  std::filesystem::create_directories(cfg.run.dir);
  auto backend = make_backend(cfg.run.backend, parse_precision(cfg.run.precision));
  cfg.model.vocab = Tokenizer::kVocabSize;
  PolicyModel model(cfg.model, *backend);
  model.init_random(cfg.run.seed);
  cfg.optim.total_steps = tc.steps;
  AdamW opt(cfg.optim, model);
  Rng task_rng(cfg.run.seed ^ 0x7A5Cull);
  int start = 0;
  const std::string ckpt_dir = cfg.run.dir + "/checkpoints";
  if (resume) {
    const std::string path = latest_checkpoint(ckpt_dir);
    if (path.empty()) throw InputError("--resume: no checkpoint in '" + ckpt_dir + "'");
    const CheckpointState st = load_checkpoint(path, model, &opt);
    if (st.data_pool)
      throw InputError("--resume: checkpoint '" + path +
                       "' was written by a run on MPI ranks (it holds data-pool state); resume it under "
                       "mpirun with the same ranks");
    start = static_cast<int>(st.step);
    const auto tasks = st.rngs.find("tasks");
    if (tasks == st.rngs.end())
      throw InputError("--resume: checkpoint '" + path +
                       "' was not written by forge train (no 'tasks' RNG state); start from it with "
                       "--train.init instead");
    task_rng.set_state(tasks->second);
    log_info("train: resumed from " + path + " at step " + std::to_string(start));
  } else if (!tc.init.empty()) {
    load_checkpoint(resolve_checkpoint(tc.init), model, nullptr);
    log_info("train: initial weights from " + tc.init);
  }
  std::ofstream(cfg.run.dir + "/config.ini") << opts.dump_ini();
  log_info("train: " + std::to_string(model.layout().total) + " parameters, " +
           std::to_string(threads) + " threads, " + std::to_string(tc.tasks) + " tasks x " +
           std::to_string(tc.group) + " episodes per step, loss " + upd.loss.algorithm);

  const EnvMix mix(env);
  const PerturbationSampler sampler(env.perturb, env.heldout_list());
  RolloutStoreOptions ro;
  ro.config_ini = opts.dump_ini();
  ro.domains = mix.domains();
  ro.flush_seconds = cfg.run.flush_seconds;
  ro.resume_step = resume ? start : -1;  // cut rows past the checkpoint: none is stored twice
  RolloutStore rollouts(cfg.run.dir + "/rollouts.h5", ro);
  const int batch = tc.tasks * tc.group;
  RolloutEngine engine(model, engine_for_agent(agent, batch));
  auto evaluate = [&](int step) {
    const StyleEvals ev = evaluate_styles(model, env, agent, tc.eval_tasks, cfg.run.seed);
    std::fputs(format_style_evals(ev, "eval at step " + std::to_string(step)).c_str(), stdout);
    std::fflush(stdout);
  };

  for (int step = start; step < tc.steps; ++step) {
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
    int64_t generated = 0;
    for (auto& e : episodes) {
      trajs.push_back(e.take_trajectory());
      for (const auto& c : trajs.back().calls) generated += static_cast<int64_t>(c.generated.size());
    }
    const double gen_s = sw.seconds();
    model.zero_grads();
    const PolicyUpdateStats st = policy_forward_backward(model, trajs, upd);
    const double gnorm = st.samples ? opt.step() : 0.0;
    engine.clear_prefix_cache();  // cached k/v belong to the old weights
    rollouts.append_episodes(trajs, step, step);
    rollouts.append_step(step_metrics(step, st, generated / std::max(gen_s, 1e-9), sw.seconds()));

    const bool last = step + 1 == tc.steps;
    if ((step + 1) % cfg.run.log_every == 0 || last || step == start) {
      log_info(format_train_progress(step + 1, st, gnorm, generated / std::max(gen_s, 1e-9),
                                     sw.seconds()));
    }
    if (checkpoint_due(cfg.run, step + 1, tc.steps)) {
      rollouts.flush();  // a checkpoint never covers steps the rollout file lacks
      save_run_checkpoint(cfg.run, opts, model, opt, step + 1, "tasks", task_rng);
    }
    if ((tc.eval_every > 0 && (step + 1) % tc.eval_every == 0) || last) evaluate(step + 1);
  }
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("train", "agent RL (CISPO on prefix-tree batches): synchronous, or asynchronous on MPI ranks",
              forge::run_train);
