#include "learner/learner_config.hpp"

#include "core/error.hpp"

namespace forge {

void add_run_options(OptionSet& opts, RunConfig& r) {
  opts.describe_section("run", "where the run writes, its seed and its resources");
  opts.add("run.dir", &r.dir, "output folder (rollouts, checkpoints, logs)", non_empty());
  opts.add("run.seed", &r.seed, "root seed of every random stream of the run");
  opts.add("run.threads", &r.threads, "OpenMP threads per rank; 0 = all cores", in_range(0, 4096));
  opts.add("run.backend", &r.backend,
           "compute backend of training, generation and evaluation: cpu, or cuda (one GPU per rank)",
           one_of({"cpu", "cuda"}));
  opts.add("run.precision", &r.precision,
           "compute precision: fp32, or bf16 (cuda only: bf16 GEMM and attention inputs and "
           "head hidden states, FP32 accumulation, master weights and head weights)",
           one_of({"fp32", "bf16"}));
  opts.add("run.log_every", &r.log_every, "steps between progress lines", at_least(1));
  opts.add("run.checkpoint_every", &r.checkpoint_every,
           "steps between checkpoints in RUN_DIR/checkpoints; 0 = only at the end", at_least(0));
  opts.add("run.keep_checkpoints", &r.keep_checkpoints, "newest checkpoints kept; 0 = all",
           at_least(0));
  opts.add("run.flush_seconds", &r.flush_seconds,
           "seconds between flushes of RUN_DIR/rollouts.h5 (a reader sees data up to the last flush)",
           greater_than(0));
}

void check_bins_hold_calls(const std::string& key, int max_tokens, int max_call_tokens) {
  if (max_tokens < max_call_tokens)
    throw InputError(key + " = " + std::to_string(max_tokens) +
                     " cannot hold the longest LLM call an episode may make (agent.max_context_tokens + "
                     "agent.max_new_tokens = " + std::to_string(max_call_tokens) +
                     "): raise " + key + " or lower those");
}

void add_train_options(OptionSet& o, TrainConfig& t) {
  o.describe_section("train", "forge train: the RL loop (synchronous, or on MPI ranks)");
  o.add("train.steps", &t.steps, "RL steps", in_range(1, 1e7));
  o.add("train.tasks", &t.tasks, "tasks per step", in_range(1, 1e5));
  o.add("train.group", &t.group, "episodes per task (advantage group)", in_range(2, 1024));
  o.add("train.max_tokens", &t.max_tokens, "tokens per packed bin", in_range(64, 1 << 24));
  o.add("train.merge", &t.merge, "prefix-tree merging (false: each LLM call alone)");
  o.add("train.eval_every", &t.eval_every, "steps between held-out evaluations; 0 = at the end",
        at_least(0));
  o.add("train.eval_tasks", &t.eval_tasks, "held-out tasks per evaluation", in_range(1, 1e6));
  o.add("train.init", &t.init, "checkpoint (or run folder) to start from, weights only");
}

}  // namespace forge
