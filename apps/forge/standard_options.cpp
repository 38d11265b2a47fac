#include "standard_options.hpp"

#include "core/error.hpp"

namespace forge {

void add_model_options(OptionSet& opts, ModelConfig& m) {
  opts.describe_section("model", "policy size (a Llama-style transformer)");
  opts.add("model.d_model", &m.d_model, "width of the residual stream", in_range(8, 65536));
  opts.add("model.n_layers", &m.n_layers, "number of transformer blocks", in_range(1, 1024));
  opts.add("model.n_heads", &m.n_heads, "attention (query) heads; must divide d_model",
           in_range(1, 1024));
  opts.add("model.n_kv_heads", &m.n_kv_heads,
           "key/value heads (grouped-query attention); must divide n_heads", in_range(1, 1024));
  opts.add("model.ffn_dim", &m.ffn_dim, "hidden width of the SwiGLU MLP", in_range(1, 1 << 20));
  opts.add("model.rope_base", &m.rope_base, "RoPE frequency base",
           in_range(1, 1e9, Interval::kOpenLow));
  opts.add("model.norm_eps", &m.norm_eps, "epsilon of RMSNorm", in_range(0, 1, Interval::kOpen));
  // The same cross-field rules as ModelConfig::validate(), checked at parse
  // time (validate() also needs the vocabulary, which config does not set).
  opts.add_check([&m] {
    if (m.d_model % m.n_heads != 0)
      throw InputError("model.n_heads = " + std::to_string(m.n_heads) +
                       " must divide model.d_model = " + std::to_string(m.d_model));
    if (m.n_heads % m.n_kv_heads != 0)
      throw InputError("model.n_kv_heads = " + std::to_string(m.n_kv_heads) +
                       " must divide model.n_heads = " + std::to_string(m.n_heads));
    if ((m.d_model / m.n_heads) % 2 != 0)
      throw InputError("model.d_model / model.n_heads = " + std::to_string(m.d_model / m.n_heads) +
                       " (the head dimension) must be even for RoPE");
  });
}

void add_optim_options(OptionSet& opts, OptimConfig& o) {
  opts.describe_section("optim", "AdamW, gradient clipping and the learning-rate schedule");
  opts.add("optim.lr", &o.lr, "peak learning rate", in_range(0, 10, Interval::kOpenLow));
  opts.add("optim.beta1", &o.beta1, "AdamW first-moment decay", in_range(0, 1, Interval::kOpenHigh));
  opts.add("optim.beta2", &o.beta2, "AdamW second-moment decay",
           in_range(0, 1, Interval::kOpenHigh));
  opts.add("optim.eps", &o.eps, "AdamW epsilon", in_range(0, 1, Interval::kOpenLow));
  opts.add("optim.weight_decay", &o.weight_decay, "decoupled weight decay (matrices only)",
           in_range(0, 10));
  opts.add("optim.grad_clip", &o.grad_clip, "clip the global gradient L2 norm to this; 0 disables",
           at_least(0));
  opts.add("optim.warmup_steps", &o.warmup_steps, "steps of linear learning-rate warm-up",
           at_least(0));
  opts.add("optim.schedule", &o.schedule, "learning rate after warm-up",
           one_of({"constant", "cosine"}));
  opts.add("optim.total_steps", &o.total_steps, "horizon of the cosine schedule, in steps",
           at_least(1));
  opts.add("optim.min_lr_ratio", &o.min_lr_ratio,
           "final learning rate of the cosine schedule, as a fraction of optim.lr", in_range(0, 1));
}

void add_sampling_options(OptionSet& opts, SamplingParams& s) {
  opts.describe_section("sample", "token sampling of the rollout engine");
  opts.add("sample.temperature", &s.temperature, "softmax temperature; 0 = greedy",
           in_range(0, 100));
  opts.add("sample.top_p", &s.top_p, "nucleus sampling: smallest token set reaching this mass",
           in_range(0, 1, Interval::kOpenLow));
  opts.add("sample.top_k", &s.top_k, "sample among the k most likely tokens; 0 = all",
           at_least(0));
  opts.add("sample.max_new_tokens", &s.max_new_tokens, "most tokens generated per request",
           in_range(1, 1 << 20));
  opts.add("sample.seed", &s.seed, "seed of the sampler's counter-based random numbers");
}

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

void add_standard_options(OptionSet& opts, StandardConfig& c) {
  add_model_options(opts, c.model);
  add_optim_options(opts, c.optim);
  add_sampling_options(opts, c.sample);
  add_run_options(opts, c.run);
}

}  // namespace forge
