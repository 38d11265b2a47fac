// `forge train` on MPI ranks (mpirun -np N, or srun --mpi=pmix): asynchronous
// agent RL with the roles of src/mpi_roles.
//
//   learners     rank 0 consumes the data pool (Windowed FIFO, one group per
//                slot), broadcasts each batch of train.tasks groups to the
//                other learners; every learner trains its shard of the batch
//                (CISPO on prefix-tree bins, whole-batch denominators), the
//                gradients are summed with MPI_Allreduce, each applies the same
//                AdamW step; rank 0 publishes version step + 1 (weight
//                channel), writes rollouts.h5, checkpoints, evaluates
//   rollouts     pull each new version between decode steps and serve
//                generation requests (rollout_rank.hpp)
//   environments run episodes and deliver groups to the pool
//                (environment_rank.hpp)
//
// Every rank runs a watchdog thread (watchdog.hpp); every wait has the
// deadline mpi.deadline_s. An error on any rank aborts the job with a message
// naming the rank. SIGTERM (Slurm's time limit, mpirun forwarding) makes the
// learner finish at the next step boundary, write a checkpoint and stop the
// job; the exit code is then 143.
//
// Checkpoints (run.checkpoint_every, the end, SIGTERM) hold the data pool's
// state (io_hdf5/checkpoint.hpp); `--resume` restarts the slot sequence from
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
#include <cstring>
#include <deque>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "agent_eval.hpp"
#include "checkpoint_model.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "env/env_mix.hpp"
#include "cpu/cpu_backend.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "io_hdf5/rollout_store.hpp"
#include "model/optimizer.hpp"
#include "model/tokenizer.hpp"
#include "mpi_roles/data_pool.hpp"
#include "mpi_roles/environment_rank.hpp"
#include "mpi_roles/gateway_rank.hpp"
#include "mpi_roles/generation_rpc.hpp"
#include "mpi_roles/learner_gradient_sum.hpp"
#include "mpi_roles/mpi_runtime.hpp"
#include "mpi_roles/role_layout.hpp"
#include "mpi_roles/rollout_rank.hpp"
#include "mpi_roles/trajectory_codec.hpp"
#include "mpi_roles/watchdog.hpp"
#include "mpi_roles/weight_channel.hpp"
#include "train_progress.hpp"

namespace forge {
namespace {

volatile std::sig_atomic_t g_terminate = 0;
extern "C" void on_terminate(int) { g_terminate = 1; }

// OpenMP threads of this rank: run.threads when set; otherwise the node's
// cores shared among its learner and rollout ranks (environment ranks: 1).
int threads_for(const RoleLayout& layout, int rank, int configured) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  const Role role = layout.role_of(rank);
  int compute = role == Role::kEnvironment ? 0 : 1, on_node = 0;
  MPI_Allreduce(&compute, &on_node, 1, MPI_INT, MPI_SUM, node);
  MPI_Comm_free(&node);
  if (configured > 0) return configured;
  if (role == Role::kEnvironment) return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, on_node));
}

WindowConfig window_config(const MpiConfig& m) {
  WindowConfig w;
  w.kind = parse_window_kind(m.pool_policy);
  w.n_inflight = static_cast<uint64_t>(m.pool_inflight);
  w.window = static_cast<uint64_t>(std::min(m.pool_window, m.pool_inflight));
  w.staleness_cap = m.staleness_cap;
  w.cap_action = parse_cap_action(m.cap_action);
  w.validate();
  return w;
}

struct Batch {
  std::vector<Trajectory> episodes;
  std::vector<int64_t> staleness;  // per group
  int dropped = 0, masked = 0;
};

// A finished group the learner holds outside the pool: restored from a
// checkpoint, or taken from the pool by a batch that SIGTERM interrupted.
struct HeldGroup {
  uint64_t slot = 0;
  int64_t version = 0;
  int producer = -1;
  std::vector<uint8_t> payload;
};

// Learner 0: train.tasks groups, held ones first, then from the pool (over
// the staleness cap: dropped or masked, counted, not trained). Encoded as
// (uint64 size, bytes) per group. Empty after SIGTERM, with the groups taken
// so far returned to `held`.
std::vector<uint8_t> take_batch(DataPool& pool, std::deque<HeldGroup>& held, int groups, int64_t version,
                                double deadline_s, const std::string& deadline_key, const RoleLayout& layout,
                                int* dropped, int* masked,
                                std::vector<int64_t>* staleness, std::vector<std::string>* sources) {
  std::vector<HeldGroup> taken;
  Stopwatch waited;
  while (static_cast<int>(taken.size()) < groups) {
    if (g_terminate) {
      held.insert(held.begin(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
      return {};
    }
    if (!held.empty()) {
      taken.push_back(std::move(held.front()));
      held.pop_front();
      staleness->push_back(version - taken.back().version);
      continue;
    }
    std::optional<TakenTrajectory> t = pool.try_take();
    if (!t) {
      if (waited.seconds() > deadline_s)
        throw Error("waited " + std::to_string(static_cast<int>(deadline_s)) + " s (" + deadline_key +
                    ") for a group from the environment ranks: " + pool.describe_head());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    waited.reset();
    if (t->verdict == Verdict::kDrop) {
      ++*dropped;
      continue;
    }
    if (t->verdict == Verdict::kMask) {
      ++*masked;
      continue;
    }
    staleness->push_back(t->staleness);
    taken.push_back({t->slot, t->version, t->producer, std::move(t->payload)});
  }
  std::vector<uint8_t> out;
  for (const HeldGroup& g : taken) {
    const uint64_t size = g.payload.size();
    const auto* p = reinterpret_cast<const uint8_t*>(&size);
    out.insert(out.end(), p, p + sizeof size);
    out.insert(out.end(), g.payload.begin(), g.payload.end());
    sources->push_back("slot " + std::to_string(g.slot) +
                       (g.producer >= 0 ? " from " + layout.name(g.producer) : " (from the checkpoint)"));
  }
  return out;
}

// The pool's state plus the groups the learner holds (they are SKIP or
// consumed in the pool, and must be kept, not forgotten, by a resume).
DataPoolState pool_checkpoint(DataPool& pool, const std::deque<HeldGroup>& held) {
  DataPoolState st = pool.snapshot();
  for (const HeldGroup& g : held) {
    std::erase(st.consumed, static_cast<int64_t>(g.slot));
    st.kept_slot.push_back(static_cast<int64_t>(g.slot));
    st.kept_version.push_back(g.version);
    st.kept_bytes.insert(st.kept_bytes.end(), g.payload.begin(), g.payload.end());
    st.kept_offset.push_back(static_cast<int64_t>(st.kept_bytes.size()));
  }
  return st;
}

std::deque<HeldGroup> held_from(const DataPoolState& st) {
  std::deque<HeldGroup> held;
  for (size_t i = 0; i < st.kept_slot.size(); ++i)
    held.push_back({static_cast<uint64_t>(st.kept_slot[i]), st.kept_version[i], -1,
                    std::vector<uint8_t>(st.kept_bytes.begin() + st.kept_offset[i],
                                         st.kept_bytes.begin() + st.kept_offset[i + 1])});
  return held;
}

std::vector<Trajectory> decode_batch(const std::vector<uint8_t>& bytes, const std::vector<std::string>& sources) {
  std::vector<Trajectory> out;
  size_t pos = 0;
  int32_t group = 0;
  while (pos < bytes.size()) {
    uint64_t size = 0;
    FORGE_CHECK(pos + sizeof size <= bytes.size(), "truncated batch");
    std::memcpy(&size, bytes.data() + pos, sizeof size);
    pos += sizeof size;
    FORGE_CHECK(pos + size <= bytes.size(), "truncated batch");
    const std::string what = group < static_cast<int32_t>(sources.size()) ? sources[group]
                                                                          : "group " + std::to_string(group);
    for (Trajectory& t : decode_trajectories(bytes.data() + pos, size, Tokenizer::kVocabSize, what)) {
      t.group = group;  // advantage groups of this batch
      out.push_back(std::move(t));
    }
    pos += size;
    ++group;
  }
  return out;
}

struct Shared {
  ForgeConfig* all;
  const OptionSet* opts;
  const RoleLayout* layout;
  MPI_Comm learners;
  const std::string* resume_from;     // checkpoint path, or null
  const DataPoolState* resumed_pool;  // its data pool (learner 0)
};

int run_learner(const Shared& sh, DataPool& pool, WeightChannel& weights, SendQueue& sends) {
  ForgeConfig& all = *sh.all;
  StandardConfig& cfg = all.base;
  const TrainConfig& tc = all.train;
  PolicyUpdateConfig upd = all.update;
  upd.max_tokens = tc.max_tokens;
  upd.merge = tc.merge;
  upd.inv_temperature = cfg.sample.temperature > 0 ? 1.0f / cfg.sample.temperature : 1.0f;
  int learner_rank = 0, learner_count = 1;
  MPI_Comm_rank(sh.learners, &learner_rank);
  MPI_Comm_size(sh.learners, &learner_count);
  upd.shard = learner_rank;
  upd.shards = learner_count;
  if (learner_count > 1)
    upd.sum_across_shards = [comm = sh.learners](double* v, int n) {
      MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, comm);
    };
  const bool lead = learner_rank == 0;

  auto backend = make_backend(cfg.run.backend, parse_precision(cfg.run.precision));
  LearnerGradientSum gradient_sum(sh.learners, *backend);  // NCCL on cuda, MPI on cpu
  PolicyModel model(cfg.model, *backend);
  model.init_random(cfg.run.seed);
  cfg.optim.total_steps = tc.steps;
  AdamW opt(cfg.optim, model);
  int start = 0;
  std::deque<HeldGroup> held;
  if (sh.resume_from) {
    start = static_cast<int>(load_checkpoint(*sh.resume_from, model, &opt).step);
    if (lead) {
      held = held_from(*sh.resumed_pool);
      log_info("resumed from " + *sh.resume_from + " at step " + std::to_string(start) + "; pool head " +
               std::to_string(sh.resumed_pool->head) + ", " + std::to_string(held.size()) +
               " finished groups restored, in-flight groups generated again");
    }
  } else if (!tc.init.empty()) {
    load_checkpoint(resolve_checkpoint(tc.init), model, nullptr);
    if (lead) log_info("initial weights from " + tc.init);
  }
  // Version v to the rollout ranks (weights) and the pool (staleness). The
  // weight channel reads host memory: the CPU backend's parameters are, a
  // device's are staged through one reused host buffer.
  std::vector<float> staged;
  const auto publish = [&](int64_t version) {
    const float* host = model.params();
    if (backend->name() != "cpu") {
      staged.resize(model.layout().total);
      backend->to_host(staged.data(), model.params(), staged.size() * sizeof(float));
      host = staged.data();
    }
    weights.publish(host, version);
    pool.publish_version(version);
  };
  std::unique_ptr<RolloutStore> rollouts;
  if (lead) {
    std::filesystem::create_directories(cfg.run.dir);
    std::ofstream(cfg.run.dir + "/config.ini") << sh.opts->dump_ini();
    RolloutStoreOptions ro;
    ro.config_ini = sh.opts->dump_ini();
    ro.domains = EnvMix(all.env).domains();
    ro.flush_seconds = cfg.run.flush_seconds;
    ro.resume_step = sh.resume_from ? start : -1;  // rows past the checkpoint are cut
    rollouts = std::make_unique<RolloutStore>(cfg.run.dir + "/rollouts.h5", ro);
    publish(start);
    const RoleLayout& l = *sh.layout;
    log_info("train: " + std::to_string(model.layout().total) + " parameters; " +
             std::to_string(l.count(Role::kLearner)) + " learner, " + std::to_string(l.count(Role::kRollout)) +
             " rollout and " + std::to_string(l.count(Role::kEnvironment)) + " environment ranks; " +
             std::to_string(tc.tasks) + " groups of " + std::to_string(tc.group) + " episodes per step; pool " +
             all.mpi.pool_policy + " N=" + std::to_string(pool.config().window.n_inflight) +
             " W=" + std::to_string(pool.config().window.effective_window()) + "; loss " + upd.loss.algorithm);
  }

  // Black-box agents close groups at their own pace.
  const bool gateway = all.gateway.enabled;
  const double group_wait_s = gateway ? std::max(all.mpi.deadline_s, all.gateway.agent_wait_s) : all.mpi.deadline_s;
  const std::string group_wait_key = gateway ? "gateway.agent_wait_s" : "mpi.deadline_s";
  int stop = kStopFinished;
  int step = start;
  Stopwatch since_step;
  for (; step < tc.steps; ++step) {
    Stopwatch sw;
    std::vector<uint8_t> bytes;
    std::vector<int64_t> staleness;
    std::vector<std::string> sources;
    int dropped = 0, masked = 0;
    if (lead)
      bytes = take_batch(pool, held, tc.tasks, step, group_wait_s, group_wait_key, *sh.layout, &dropped,
                         &masked, &staleness, &sources);
    const double wait_s = sw.seconds();
    // A terminated lead sends an empty batch: every learner stops here.
    uint64_t size = bytes.size();
    MPI_Bcast(&size, 1, MPI_UINT64_T, 0, sh.learners);
    if (size == 0) {
      stop = kStopSignal;
      break;
    }
    bytes.resize(size);
    MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, 0, sh.learners);
    std::vector<Trajectory> trajs = decode_batch(bytes, sources);
    int64_t generated = 0;
    for (const auto& t : trajs)
      for (const auto& c : t.calls) generated += static_cast<int64_t>(c.generated.size());

    model.zero_grads();
    const PolicyUpdateStats st = policy_forward_backward(model, trajs, upd);
    gradient_sum(model.grads(), model.layout().total);
    const double gnorm = st.samples ? opt.step() : 0.0;
    if (!lead) continue;

    publish(step + 1);
    rollouts->append_episodes(trajs, step, step);
    const double step_s = since_step.seconds();
    since_step.reset();
    rollouts->append_step(step_metrics(step, st, generated / std::max(step_s, 1e-9), sw.seconds()));
    const bool last = step + 1 == tc.steps;
    if ((step + 1) % cfg.run.log_every == 0 || last || step == start) {
      int64_t smax = 0;
      double smean = 0;
      for (int64_t s : staleness) smax = std::max(smax, s), smean += double(s) / staleness.size();
      char pool_line[192];
      std::snprintf(pool_line, sizeof pool_line,
                    "  staleness mean %.2f max %lld  waited %.1f s  dropped %d masked %d%s", smean,
                    static_cast<long long>(smax), wait_s, dropped, masked,
                    st.abandoned ? ("  abandoned " + std::to_string(st.abandoned)).c_str() : "");
      log_info(format_train_progress(step + 1, st, gnorm, generated / std::max(step_s, 1e-9), step_s) +
               pool_line);
    }
    if (checkpoint_due(cfg.run, step + 1, tc.steps)) {
      rollouts->flush();
      const DataPoolState ps = pool_checkpoint(pool, held);
      save_run_checkpoint(cfg.run, *sh.opts, model, opt, step + 1, ps);
    }
    if (tc.eval_every > 0 && (step + 1) % tc.eval_every == 0 && !last) {
      const StyleEvals ev = evaluate_styles(model, all.env, all.agent, tc.eval_tasks, cfg.run.seed);
      std::fputs(format_style_evals(ev, "eval at step " + std::to_string(step + 1)).c_str(), stdout);
      std::fflush(stdout);
    }
  }

  if (lead) {
    if (stop == kStopSignal) {
      log_warn("SIGTERM: stopping after " + std::to_string(step) + " steps");
      rollouts->flush();
      const DataPoolState ps = pool_checkpoint(pool, held);
      log_info("checkpoint " + save_run_checkpoint(cfg.run, *sh.opts, model, opt, step, ps) +
               "; continue with --resume");
    }
    weights.request_stop(stop);
  }
  quiesce(MPI_COMM_WORLD, sends, all.mpi.deadline_s);
  if (lead && stop == kStopFinished) {
    rollouts->close();
    const StyleEvals ev = evaluate_styles(model, all.env, all.agent, tc.eval_tasks, cfg.run.seed);
    std::fputs(format_style_evals(ev, "eval at step " + std::to_string(step)).c_str(), stdout);
    std::fflush(stdout);
  }
  return stop == kStopSignal ? 143 : 0;
}

int run_rollout(const Shared& sh, WeightChannel& weights, SendQueue& sends) {
  ForgeConfig& all = *sh.all;
  auto backend = make_backend(all.base.run.backend, parse_precision(all.base.run.precision));
  PolicyModel model(all.base.model, *backend);
  AgentConfig agent = all.agent;
  const int envs = sh.layout->count(Role::kEnvironment), rollouts = sh.layout->count(Role::kRollout);
  const int episodes = std::max(1, envs * all.mpi.env_groups * all.train.group / rollouts);
  RolloutEngine engine(model, engine_for_agent(agent, episodes));
  const RolloutRankStats st = run_rollout_rank(MPI_COMM_WORLD, *sh.layout, model, engine, weights, sends,
                                               all.mpi.deadline_s);
  log_debug("rollout: " + std::to_string(st.requests) + " requests, " + std::to_string(st.weight_pulls) +
            " weight versions");
  quiesce(MPI_COMM_WORLD, sends, all.mpi.deadline_s);
  return weights.stop_code() == kStopSignal ? 143 : 0;
}

int run_environment(const Shared& sh, DataPool& pool, WeightChannel& control) {
  ForgeConfig& all = *sh.all;
  EnvironmentRankConfig ec;
  ec.env = all.env;
  ec.agent = all.agent;
  ec.agent.sampling = all.base.sample;
  ec.agent.sampling.max_new_tokens = all.agent.max_new_tokens;
  ec.run_seed = all.base.run.seed;
  ec.group = all.train.group;
  ec.groups_in_flight = all.mpi.env_groups;
  GenerationClient client(MPI_COMM_WORLD, all.mpi.deadline_s);
  const EnvironmentRankStats st = run_environment_rank(*sh.layout, pool, control, client, ec);
  log_debug("environment: " + std::to_string(st.groups) + " groups, " + std::to_string(st.requests) +
            " requests");
  quiesce(MPI_COMM_WORLD, client.sends(), all.mpi.deadline_s);
  return control.stop_code() == kStopSignal ? 143 : 0;
}

// A gateway rank: the environment rank's place, driven by black-box agents.
int run_gateway(const Shared& sh, DataPool& pool, WeightChannel& control) {
  ForgeConfig& all = *sh.all;
  GatewayRankConfig gc;
  gc.gateway = all.gateway;
  gc.env = all.env;
  gc.agent = all.agent;
  gc.agent.sampling = all.base.sample;
  gc.agent.sampling.max_new_tokens = all.agent.max_new_tokens;
  gc.max_seq_len = all.agent.max_context_tokens + all.agent.max_new_tokens;  // the rollout engine's
  gc.run_seed = all.base.run.seed;
  gc.group = all.train.group;
  gc.groups_in_flight = all.mpi.env_groups;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  gc.index = rank - sh.layout->first(Role::kEnvironment);
  gc.url_file = all.base.run.dir + "/gateway/" + std::to_string(gc.index) + ".json";
  GenerationClient client(MPI_COMM_WORLD, all.mpi.deadline_s);
  run_gateway_rank(*sh.layout, pool, control, client, gc);
  quiesce(MPI_COMM_WORLD, client.sends(), all.mpi.deadline_s);
  return control.stop_code() == kStopSignal ? 143 : 0;
}

}  // namespace

int run_async_train(ForgeConfig& all, const OptionSet& opts, bool resume) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const RoleLayout layout(world, {all.mpi.learners, all.mpi.rollouts});
  all.update.loss.validate();
  all.update.reward.validate();
  if (all.gateway.enabled) all.gateway.resolve_and_validate();
  all.base.model.vocab = Tokenizer::kVocabSize;
  DataPoolConfig pc;
  pc.window = window_config(all.mpi);
  pc.slot_bytes = static_cast<uint64_t>(all.mpi.slot_mib) << 20;
  pc.deadline_s = all.mpi.deadline_s;
  if (static_cast<uint64_t>(all.train.tasks) * pc.slot_bytes >= (uint64_t{1} << 31))
    throw InputError("train.tasks x pool.slot_mib = " + std::to_string(all.train.tasks * all.mpi.slot_mib) +
                     " MiB: a batch must stay below 2 GiB (one MPI broadcast); lower pool.slot_mib");
  const Role role = layout.role_of(rank);
  set_log_prefix(layout.name(rank));
  std::signal(SIGTERM, on_terminate);
  set_cpu_threads(threads_for(layout, rank, all.base.run.threads));

  // Resume: every learner loads the newest checkpoint; learner 0 also
  // restarts the data pool from it. An unusable checkpoint ends the job
  // (exit 2) before any window exists.
  std::string resume_from;
  std::optional<DataPoolState> resumed_pool;
  if (resume && role == Role::kLearner) {
    try {
      const std::string dir = all.base.run.dir + "/checkpoints";
      resume_from = latest_checkpoint(dir);
      if (resume_from.empty()) throw InputError("--resume: no checkpoint in '" + dir + "'");
      if (rank == 0) {
        resumed_pool = load_data_pool_state(resume_from);  // weights: in run_learner
        if (!resumed_pool)
          throw InputError("--resume: checkpoint '" + resume_from +
                           "' holds no data-pool state (written by a run in one process); resume it "
                           "without mpirun, or start from it with --train.init");
        check_resume_state(*resumed_pool, pc.window.n_inflight);
      }
    } catch (const InputError& e) {
      abort_job(layout.name(rank), std::string("error: ") + e.what(), 2);
    }
  }

  // Collective set-up, in the same order on every rank.
  MPI_Comm learners;
  MPI_Comm_split(MPI_COMM_WORLD, role == Role::kLearner ? 0 : MPI_UNDEFINED, rank, &learners);
  const size_t n_weights = ParamLayout(all.base.model).total;
  Watchdog watchdog(MPI_COMM_WORLD, layout, all.mpi.deadline_s);
  DataPool pool(MPI_COMM_WORLD, pc, resumed_pool ? &*resumed_pool : nullptr);
  WeightChannel weights(MPI_COMM_WORLD, 0, n_weights);
  const Shared sh{&all, &opts, &layout, learners, resume && role == Role::kLearner ? &resume_from : nullptr,
                  resumed_pool ? &*resumed_pool : nullptr};
  int code = 0;
  try {
    SendQueue sends;
    switch (role) {
      case Role::kLearner: code = run_learner(sh, pool, weights, sends); break;
      case Role::kRollout: code = run_rollout(sh, weights, sends); break;
      case Role::kEnvironment:
        code = all.gateway.enabled ? run_gateway(sh, pool, weights) : run_environment(sh, pool, weights);
        break;
    }
  } catch (const InputError& e) {
    abort_job(layout.name(rank), std::string("error: ") + e.what(), 2);
  } catch (const std::exception& e) {
    abort_job(layout.name(rank), std::string("error: ") + e.what(), 1);
  }
  if (learners != MPI_COMM_NULL) MPI_Comm_free(&learners);
  return code;
}

}  // namespace forge
