// `forge train` on MPI ranks (mpirun -np N, or srun --mpi=pmix): asynchronous
// agent RL with the roles of src/mpi_roles. This file is the job's set-up
// (role layout, threads, resume checks, the collective windows) and the
// dispatch of each rank to its role:
//
//   learners     consume the data pool and train (learner_rank.hpp): rank 0
//                takes each batch of train.tasks groups and shares it, every
//                learner trains its shard, rank 0 publishes version step + 1,
//                writes rollouts.h5, checkpoints, evaluates
//   rollouts     pull each new version between decode steps and serve
//                generation requests (rollout_rank.hpp)
//   environments run episodes and deliver groups to the pool
//                (environment_rank.hpp), or serve black-box agents over
//                HTTP (gateway_rank.hpp)
//
// Every rank runs a watchdog thread (watchdog.hpp); every wait has the
// deadline mpi.deadline_s. An error on any rank aborts the job with a message
// naming the rank. SIGTERM (Slurm's time limit, mpirun forwarding) makes the
// learner finish at the next step boundary, write a checkpoint and stop the
// job; the exit code is then 143.
//
// Checkpoints (run.checkpoint_every, the end, SIGTERM) hold the data pool's
// state (mpi_roles/data_pool_state.hpp); `--resume` restarts the slot sequence from
// it: trained groups are never trained again, finished ones are restored,
// in-flight ones are generated again, so no group is lost or trained twice.
//
// Shutdown: learner 0 sets the stop word; every rank leaves its loop, drains
// the generation RPC and meets the others at a barrier (quiesce), then the
// windows are freed collectively.
#include "async_train.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <thread>

#include "agent/agent_eval.hpp"
#include "agent/opening_fit.hpp"
#include "backend/backend_registry.hpp"
#include "backend/host_runtime.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop_signals.hpp"
#include "env/env_mix.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/learner.hpp"
#include "learner/run_checkpoints.hpp"
#include "learner/run_folder.hpp"
#include "learner/trainable_policy.hpp"
#include "model/optimizer.hpp"
#include "pretrained/model_fingerprint.hpp"
#include "pretrained/model_source.hpp"
#include "mpi_roles/data_pool.hpp"
#include "mpi_roles/environment_rank.hpp"
#include "mpi_roles/gateway_rank.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/group_wait.hpp"
#include "mpi_roles/learner_rank.hpp"
#include "mpi_roles/mpi_runtime.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/rollout_rank.hpp"
#include "mpi_roles/watchdog.hpp"
#include "mpi_roles/weight_channel.hpp"
#include "cli.hpp"
#include "text_formats.hpp"

namespace forge {
namespace {

// The final barrier's deadline: mpi.deadline_s, and with code tasks in the
// mix the sandbox's wall limit too: an environment rank waits for the
// sandbox runs under way (up to sandbox.wall_s) before it gets there, while
// the others wait at it.
double shutdown_deadline(const ForgeConfig& all) {
  return all.mpi.deadline_s + (all.env.code_weight > 0 ? all.env.sandbox.wall_s : 0.0);
}


// OpenMP threads of this rank: run.threads when set; otherwise the node's
// cores shared among its learner and rollout ranks (environment ranks: 1).
// `on_node` receives the compute threads of the learner and rollout ranks on
// this node, for the oversubscription warning, on the node's first rank (0 on
// the others: the node's condition is reported once).
int threads_for(const RoleLayout& layout, int rank, int configured, int* on_node) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  const Role role = layout.role_of(rank);
  const bool computes = role != Role::kEnvironment;
  int compute = computes ? 1 : 0, compute_ranks = 0;
  MPI_Allreduce(&compute, &compute_ranks, 1, MPI_INT, MPI_SUM, node);
  int threads = configured;
  if (threads <= 0)
    threads = role == Role::kEnvironment ? 1 : std::max(1, host_runtime().cores / std::max(1, compute_ranks));
  int mine = computes ? threads : 0;
  MPI_Allreduce(&mine, on_node, 1, MPI_INT, MPI_SUM, node);
  int node_rank = 0;
  MPI_Comm_rank(node, &node_rank);
  if (node_rank != 0) *on_node = 0;
  MPI_Comm_free(&node);
  return threads;
}

WindowConfig window_config(const MpiConfig& m) {
  WindowConfig w;
  w.kind = parse_window_kind(m.pool_policy);
  w.n_running = static_cast<uint64_t>(m.pool_inflight);
  w.memory = static_cast<uint64_t>(m.pool_memory);
  w.window = static_cast<uint64_t>(m.pool_window);
  w.staleness_cap = m.staleness_cap;
  w.cap_action = parse_cap_action(m.cap_action);
  w.validate();
  return w;
}

struct Shared {
  ForgeConfig* all;
  const OptionSet* opts;
  const RoleLayout* layout;
  MPI_Comm learners;
  bool resume;                        // --resume (learners)
  const DataPoolState* resumed_pool;  // its data pool (learner 0)
  volatile std::sig_atomic_t* terminate;  // set by SIGTERM or SIGINT
  Watchdog* watchdog;                     // quiesce names the ranks it waits for
};

int run_learner(const Shared& sh, DataPool& pool, WeightChannel& weights, SendQueue& sends) {
  ForgeConfig& all = *sh.all;
  StandardConfig& cfg = all.base;
  TrainablePolicy policy = make_trainable_policy(cfg.model, cfg.optim, cfg.run, all.train.steps);
  PolicyModel& model = *policy.model;
  AdamW& opt = *policy.opt;
  const LearnerStart start = load_learner_start(model, opt, cfg.run, all.train, sh.resume);

  LearnerRankConfig lc;
  lc.setup.run = cfg.run;
  lc.setup.train = all.train;
  lc.setup.update = all.update;
  lc.setup.sampling_temperature = cfg.sample.temperature;
  lc.setup.env = all.env;
  lc.setup.agent = all.agent;
  lc.setup.config_ini = sh.opts->dump_ini();
  lc.setup.model_fingerprint = model_fingerprint(policy.source);
  lc.deadline_s = all.mpi.deadline_s;
  lc.shutdown_s = shutdown_deadline(all);
  lc.startup_s = all.mpi.startup_s;
  const GroupWait wait = group_wait({.deadline_s = all.mpi.deadline_s,
                                     .episode_deadline_s = all.mpi.episode_deadline_s,
                                     .tool_s = all.env.code_weight > 0 ? all.env.sandbox.wall_s : 0.0,
                                     .tool_rounds = (all.mpi.env_groups * all.train.group +
                                                     all.env.sandbox_concurrency - 1) /
                                                    all.env.sandbox_concurrency,
                                     .gateway = all.gateway.enabled,
                                     .request_deadline_s = all.gateway.request_deadline_s,
                                     .agent_wait_s = all.gateway.agent_wait_s});
  lc.group_wait_s = wait.seconds;
  lc.group_wait_key = wait.keys;
  lc.terminate = sh.terminate;
  lc.watchdog = sh.watchdog;
  return run_learner_rank(sh.learners, *sh.layout, pool, weights, sends, model, opt, std::move(lc), start,
                          sh.resumed_pool);
}

// Episodes one rollout engine serves at once (its max_batch, capped at 256):
// the environment ranks' groups in flight, whose episodes go to rollout rank
// id % R with a group's ids consecutive, so at most ceil(G / R) of each group
// (envs x groups x G / R rounded down once queued 2 of a group of 3 at R = 2
// behind a max_batch of 1). Where R does not divide G the KV cache is sized
// for the ceiling.
int engine_episodes(const Shared& sh) {
  const int envs = sh.layout->count(Role::kEnvironment), rollouts = sh.layout->count(Role::kRollout);
  const int per_group = (sh.all->train.group + rollouts - 1) / rollouts;
  return std::max(1, envs * sh.all->mpi.env_groups * per_group);
}

int run_rollout(const Shared& sh, WeightChannel& weights, SendQueue& sends) {
  ForgeConfig& all = *sh.all;
  auto backend = make_backend(all.base.run.backend, parse_precision(all.base.run.precision));
  PolicyModel model(all.base.model, *backend);
  AgentConfig agent = all.agent;
  RolloutEngine engine(model, engine_for_agent(agent, engine_episodes(sh)));
  const RolloutRankStats st = run_rollout_rank(MPI_COMM_WORLD, *sh.layout, model, engine, weights, sends,
                                               all.mpi.startup_s);
  char pull[64] = "";
  if (st.weight_pulls > 1)  // the first pull waits for the learner
    std::snprintf(pull, sizeof pull, ", %.2f ms each to read and load", st.pull_seconds * 1e3 / (st.weight_pulls - 1));
  const EngineStats& es = engine.stats();
  const std::string cancelled =
      es.cancelled > 0 ? " (" + std::to_string(es.cancelled) + " cancelled: their episodes were abandoned)" : "";
  // Requests that reached this rank before the weights of their slot's
  // start version (held_requests.hpp): they waited for them.
  char held[96] = "";
  if (st.held > 0)
    std::snprintf(held, sizeof held, "; %lld held for their slot's weights (longest %.1f ms)",
                  static_cast<long long>(st.held), st.longest_hold_s * 1e3);
  log_info("rollout: " + std::to_string(st.requests) + " requests" + cancelled + ", " +
           std::to_string(st.weight_pulls) + " weight versions" + pull + held);
  // Where the engine's rows went: prompt tokens computed (a new version drops
  // the session caches, so an episode's next turn computes its history
  // again), reused from the episode's cache, copied from another sequence or
  // episode cache with the same prefix (a group's prompt); the generated
  // tokens.
  char rows[240];
  std::snprintf(rows, sizeof rows,
                "rollout: %lld engine steps, %.1f rows a step; prompt tokens %lld computed, %lld reused, "
                "%lld shared; %lld generated",
                static_cast<long long>(es.steps),
                es.steps > 0 ? static_cast<double>(es.forward_tokens) / static_cast<double>(es.steps) : 0.0,
                static_cast<long long>(es.prefill_computed), static_cast<long long>(es.prefill_reused),
                static_cast<long long>(es.prefill_shared), static_cast<long long>(es.generated));
  log_info(rows);
  quiesce(MPI_COMM_WORLD, sends, shutdown_deadline(all), sh.watchdog);
  return weights.stop_code() == kStopSignal ? kSigtermExit : 0;
}

// What an environment or gateway rank produces: the run's tasks and
// scaffold, with the run's sampling.
EnvironmentRankConfig producer_config(const ForgeConfig& all) {
  EnvironmentRankConfig ec;
  ec.env = all.env;
  ec.agent = all.agent;
  ec.agent.sampling = all.base.sample;
  ec.agent.sampling.max_new_tokens = all.agent.max_new_tokens;
  ec.run_seed = all.base.run.seed;
  ec.group = all.train.group;
  ec.groups_in_flight = all.mpi.env_groups;
  ec.episode_deadline_s = all.mpi.episode_deadline_s;
  ec.startup_s = all.mpi.startup_s;
  return ec;
}

int run_environment(const Shared& sh, DataPool& pool, WeightChannel& control) {
  ForgeConfig& all = *sh.all;
  GenerationClient client(MPI_COMM_WORLD, all.mpi.deadline_s);
  const EnvironmentRankStats st = run_environment_rank(*sh.layout, pool, control, client, producer_config(all));
  log_debug("environment: " + std::to_string(st.groups) + " groups, " + std::to_string(st.requests) +
            " requests, " + std::to_string(st.abandoned) + " episodes abandoned (pool.episode_deadline_s)");
  quiesce(MPI_COMM_WORLD, client.sends(), shutdown_deadline(all), sh.watchdog);
  return control.stop_code() == kStopSignal ? kSigtermExit : 0;
}

// A gateway rank: the environment rank's place, driven by black-box agents.
int run_gateway(const Shared& sh, DataPool& pool, WeightChannel& control) {
  ForgeConfig& all = *sh.all;
  GatewayRankConfig gc;
  gc.producer = producer_config(all);
  gc.gateway = all.gateway;
  gc.max_seq_len = all.agent.max_context_tokens + all.agent.max_new_tokens;  // the rollout engine's
  gc.requests_per_rollout = std::max(
      1, engine_for_agent(all.agent, engine_episodes(sh)).max_batch / sh.layout->count(Role::kEnvironment));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gc.index = rank - sh.layout->first(Role::kEnvironment);
  gc.url_file = all.base.run.dir + "/gateway/" + std::to_string(gc.index) + ".json";
  GenerationClient client(MPI_COMM_WORLD, all.mpi.deadline_s);
  run_gateway_rank(*sh.layout, pool, control, client, gc);
  quiesce(MPI_COMM_WORLD, client.sends(), shutdown_deadline(all), sh.watchdog);
  return control.stop_code() == kStopSignal ? kSigtermExit : 0;
}

// Runs f; any error ends the whole job (MPI_Abort) with this rank's message:
// exit code 2 for bad input, 1 otherwise. A rank must not unwind into
// MPI_Finalize while its peers wait for it in a collective.
template <class F>
auto or_abort_job(const std::string& who, F&& f) {
  try {
    return f();
  } catch (const InputError& e) {
    abort_job(who, std::string("error: ") + e.what(), 2);
  } catch (const std::exception& e) {
    abort_job(who, std::string("error: ") + e.what(), 1);
  }
}

}  // namespace

int run_async_train(ForgeConfig& all, const OptionSet& opts, bool resume, volatile std::sig_atomic_t* terminate) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // Every check ends the whole job through or_abort_job: a check that fails
  // on some ranks only (FORGE_GATEWAY_TOKEN is not forwarded to other nodes
  // by default) must not leave them waiting in the collectives below.
  const RoleLayout layout = or_abort_job("rank " + std::to_string(rank), [&] {
    return RoleLayout(world, {all.mpi.learners, all.mpi.rollouts, all.gateway.enabled});
  });
  const Role role = layout.role_of(rank);
  const std::string me = layout.name(rank);
  set_log_prefix(me);
  // Ranks on this node: where the host rank shares its node, Open MPI backs
  // the windows with a shared-memory segment (/dev/shm).
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_ranks = 0;
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_free(&node);
  DataPoolConfig pc;
  or_abort_job(me, [&] {
    all.update.loss.validate();
    all.update.reward.validate();
    check_mpi_deadlines(all.mpi);
    check_bins_hold_calls("train.max_tokens", all.train.max_tokens,
                          all.agent.max_context_tokens + all.agent.max_new_tokens);
    if (all.gateway.enabled) all.gateway.resolve_and_validate(layout.count(Role::kEnvironment));
    // Every rank resolves the model (a pretrained one's configuration and
    // vocabulary; its weights only on the learners): the weight channel's
    // size, the rollout engine, the environments' scaffold.
    const ModelSource source = resolve_model(all.base.model, false);
    if (rank == 0) {
      warn_past_context(source, all.agent.max_context_tokens + all.agent.max_new_tokens,
                        "agent.max_context_tokens + agent.max_new_tokens");
      if (!all.gateway.enabled) warn_turns_below_largest_task(all.env, all.agent);  // black-box agents keep their own
    }
    all.base.model = source.config;
    all.agent.vocabulary = ScaffoldVocabulary::of(source.chat);
    if (rank == 0 && !all.gateway.enabled) check_openings_fit(all.env, all.agent);
    pc.window = window_config(all.mpi);
    pc.slot_bytes = static_cast<uint64_t>(all.mpi.slot_mib) << 20;
    pc.deadline_s = all.mpi.deadline_s;
    pc.rank_name = [layout](int r) { return layout.name(r); };
    if (rank == pc.host_rank) check_pool_fits_host(pc, node_ranks > 1);
  });
  int threads_on_node = 0;
  const int threads = set_compute_threads(threads_for(layout, rank, all.base.run.threads, &threads_on_node));
  cli::log_host_warnings(threads, threads_on_node);

  // Resume: every learner loads the newest checkpoint (in run_learner);
  // learner 0 also restarts the data pool from it. An unusable checkpoint
  // ends the job (exit 2) before any window exists.
  std::optional<DataPoolState> resumed_pool;
  // Learner 0 writes the run folder: it alone holds it (before any rank
  // touches it, and before a --resume picks its checkpoint) and looks.
  if (rank == 0)
    or_abort_job(me, [&] {
      hold_run_folder(all.base.run.dir);
      if (!resume) refuse_existing_run(all.base.run.dir, "forge train", true);
    });
  // Learner 0 alone judges the checkpoint here: a refusal by another rank
  // would kill it before it removed the folder it took for a run that never
  // started (the other learners load the same checkpoint in run_learner).
  if (resume && rank == 0) {
    or_abort_job(me, [&] {
      const std::string dir = all.base.run.dir + "/checkpoints";
      const std::string resume_from = latest_checkpoint(dir);
      if (resume_from.empty()) throw InputError("--resume: no checkpoint in '" + dir + "'");
      try {
        resumed_pool = load_data_pool_state(resume_from);
      } catch (const InputError& e) {
        throw with_older_checkpoint_hint(e, dir, resume_from);  // as load_resume_point says it
      }
      if (!resumed_pool)
        throw InputError("--resume: checkpoint '" + resume_from +
                         "' holds no data-pool state (written by a run in one process); resume it without mpirun, "
                         "or start a new run from it: --train.init=" + resume_from + " with another run.dir");
      check_resume_state(*resumed_pool);
    });
  }

  // Collective set-up, in the same order on every rank.
  MPI_Comm learners;
  MPI_Comm_split(MPI_COMM_WORLD, role == Role::kLearner ? 0 : MPI_UNDEFINED, rank, &learners);
  const size_t n_weights = ParamLayout(all.base.model).total;
  Watchdog watchdog(MPI_COMM_WORLD, layout, all.mpi.deadline_s);
  watchdog.set_progress_deadline(all.mpi.progress_deadline_s);
  DataPool pool(MPI_COMM_WORLD, pc, resumed_pool ? &*resumed_pool : nullptr);
  WeightChannel weights(MPI_COMM_WORLD, 0, n_weights);
  const Shared sh{&all, &opts, &layout, learners, resume && role == Role::kLearner,
                  resumed_pool ? &*resumed_pool : nullptr, terminate, &watchdog};
  const int code = or_abort_job(me, [&] {
    SendQueue sends;
    if (role == Role::kLearner) return run_learner(sh, pool, weights, sends);
    if (role == Role::kRollout) return run_rollout(sh, weights, sends);
    return all.gateway.enabled ? run_gateway(sh, pool, weights) : run_environment(sh, pool, weights);
  });
  // Learner 0 evaluates the final weights after the shutdown barrier; the
  // others wait for it here asleep between polls: the windows' frees below
  // are collectives whose wait would spin on the cores the evaluation uses.
  MPI_Request done_request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &done_request);
  for (int done = 0; MPI_Test(&done_request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (learners != MPI_COMM_NULL) MPI_Comm_free(&learners);
  return code;
}

}  // namespace forge
