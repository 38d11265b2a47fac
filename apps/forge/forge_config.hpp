// The whole configuration of forge's training commands: the standard
// sections ([model], [optim], [sample], [run]) plus [sft], [env], [agent],
// [loss], [reward], [train], [mpi], [pool] and [gateway]. Every
// command registers all of them, so one INI file drives `forge sft`,
// `forge train` and `forge eval` alike, and a misspelt key is still an error
// in every command. Each command reads the sections it uses.
#pragma once
#include <string>

#include "agent/agent_config.hpp"
#include "algo/policy_update.hpp"
#include "core/config.hpp"
#include "env/env_config.hpp"
#include "gateway/gateway_config.hpp"
#include "learner/learner_config.hpp"
#include "model/model_config.hpp"
#include "model/optimizer.hpp"
#include "model/sampling.hpp"

namespace forge {

// The sections every command that builds a policy registers.
struct StandardConfig {
  ModelConfig model;
  OptimConfig optim;
  SamplingParams sample;
  RunConfig run;
};

// All four, in the order model, optim, sample, run.
void add_standard_options(OptionSet& opts, StandardConfig& config);

struct SftConfig {
  std::string task = "mix";  // reverse | sort | mix (synthetic chat) | agent (demonstrations)
  int steps = 300;
  int batch = 16;            // conversations (or demonstrations) per step
  int turns = 3;             // requests per synthetic conversation
  int max_tokens = 8192;     // tokens per packed bin
  bool merge = true;         // prefix-tree merging (false: each sample alone)
  int eval_requests = 128;   // held-out requests (synthetic) or tasks (agent) evaluated
  int show = 6;              // sampled completions printed at the end (synthetic)
  int plain_steps = 0;       // agent: first steps on the default scaffold style only (curriculum)
  double retry_share = 0;    // agent: share of demonstrations with one failed tool call and its retry
};

// [mpi] and [pool]: the distributed run (forge train under mpirun or srun).
struct MpiConfig {
  int learners = 1;           // ranks [0, learners)
  int rollouts = 1;           // then the rollout ranks; the rest are environment ranks
  int env_groups = 2;         // slots (groups) each environment rank runs at once
  double deadline_s = 120;    // every blocking wait, and the watchdog's heartbeat deadline
  double startup_s = 1800;    // the wait for learner 0's first weights (it loads the model first)
  double progress_deadline_s = 1800;  // a stage of learner 0's loop lasting longer: stuck
  std::string pool_policy = "windowed";  // fifo | windowed | greedy
  int pool_inflight = 16;     // N: groups generating at once at most
  int pool_memory = 16;       // M: finished groups waiting for the learner at most
  int pool_window = 8;        // W of the windowed policy
  double episode_deadline_s = 300;  // an episode running longer is abandoned
  int staleness_cap = -1;     // < 0: none
  std::string cap_action = "drop";  // drop | mask
  int slot_mib = 2;           // payload capacity of one slot, MiB
};

struct ForgeConfig {
  StandardConfig base;
  SftConfig sft;
  EnvConfig env;
  AgentConfig agent;
  PolicyUpdateConfig update;  // loss and reward
  TrainConfig train;
  MpiConfig mpi;
  GatewayConfig gateway;
};

void add_forge_options(OptionSet& opts, ForgeConfig& config);

// The [mpi] deadlines' rule across keys (InputError naming both): checked
// where ranks run (forge train under mpirun) and by forge config, not by the
// one-process commands that never read them.
void check_mpi_deadlines(const MpiConfig& m);

// For the commands whose model is the MODEL they are given (eval, generate):
// says so when a [model] key names another model (model.pretrained other
// than MODEL and than the pretrained model `loaded` starts from; a shape key
// set away from its default and from `loaded`'s), instead of ignoring it
// silently.
void log_model_keys_unread(const ModelConfig& given, const std::string& model_path, const ModelConfig& loaded);

// A warning when agent.max_turns cannot hold the largest task's tool calls
// and its answer (env.calc_max_ops, search_max_hops, the code domain): those
// tasks can only fail in the white-box scaffold (train, eval).
void warn_turns_below_largest_task(const EnvConfig& env, const AgentConfig& agent);

}  // namespace forge
