// `forge sft`: supervised training of the policy with prefix-tree-merged
// batches, then evaluation through the rollout engine. Two data sources:
//  - sft.task = reverse | sort | mix: the synthetic chat task
//    (synthetic_task.hpp); evaluation is greedy exact match, then samples;
//  - sft.task = agent: demonstrations that each environment's reference
//    solver writes (noise off, so recovery from tool errors is not in them),
//    in perturbed scaffold styles: the warm start before `forge train`;
//    evaluation is the agent's greedy success rate on seen and held-out styles.
//
// Writes RUN_DIR/config.ini (the resolved configuration),
// RUN_DIR/checkpoints/ckpt_step_*.h5 (every run.checkpoint_every steps and at
// the end; `forge generate` samples from one) and RUN_DIR/summary.json (loss
// curve end points, accuracy before and after, token counts). SIGTERM (a
// Slurm time limit) or Ctrl-C ends the step under way, writes a checkpoint
// and exits 143 (after Ctrl-C the process ends by SIGINT: 130); --resume continues from the newest checkpoint (weights, AdamW state,
// step and the data stream's RNG, so the batches are those of an
// uninterrupted run).
#include <algorithm>
#include <bit>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <functional>
#include <iostream>
#include <limits>
#include <sstream>

#include "agent/agent_eval.hpp"
#include "agent/scripted_policy.hpp"
#include "algo/token_loss.hpp"
#include "backend/backend_registry.hpp"
#include "cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/peak_memory.hpp"
#include "core/rng.hpp"
#include "core/stop_signals.hpp"
#include "core/timer.hpp"
#include "forge_config.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/run_checkpoints.hpp"
#include "learner/run_folder.hpp"
#include "learner/trainable_policy.hpp"
#include "pretrained/model_fingerprint.hpp"
#include "pretrained/model_source.hpp"
#include "model/optimizer.hpp"
#include "model/rollout_engine.hpp"
#include "tokenizer/byte_tokenizer.hpp"
#include "synthetic_task.hpp"
#include "text_formats.hpp"

namespace forge {
namespace {

// RUN_DIR/summary.json, checked: Error naming the file when it cannot be
// written. A resume with no step left trains nothing: the run's summary
// (its loss curve, its token counts) is kept, not replaced by an empty loop's.
void write_summary(const std::string& dir, const std::string& json, int start_step, int steps) {
  const std::string path = dir + "/summary.json";
  if (start_step >= steps && std::filesystem::exists(path)) {
    std::printf("kept %s/summary.json (no step trained) and wrote %s/config.ini\n", dir.c_str(), dir.c_str());
    return;
  }
  std::ofstream out(path);
  out << json;
  out.close();
  if (!out) throw Error("cannot write " + path);
  std::printf("wrote %s/summary.json and %s/config.ini\n", dir.c_str(), dir.c_str());
}

struct EvalResult {
  double accuracy = 0;
  std::vector<std::pair<std::string, std::string>> examples;  // request, completion
  bool stopped = false;  // cut short by `stop` between engine steps: no figures
};

// Exact match of the completion (up to <|eot|>) on fresh requests. `stop`
// (a SIGTERM flag), when given and set, ends it between engine steps.
EvalResult evaluate(PolicyModel& model, const std::string& task, int n, uint64_t seed,
                    const SamplingParams& sampling, int show,
                    const volatile std::sig_atomic_t* stop = nullptr) {
  EngineConfig ec;
  ec.max_batch = 64;
  ec.max_seq_len = 256;
  ec.kv_cache_tokens = 64 * 256;
  RolloutEngine engine(model, ec);
  Rng rng(seed);
  std::vector<SyntheticQuery> queries;
  for (int i = 0; i < n; ++i) {
    queries.push_back(make_query(rng, task));
    GenerationRequest r;
    r.id = i;
    r.prompt = single_turn_prompt(queries.back().request);
    r.sampling = sampling;
    r.sampling.max_new_tokens = 16;
    r.sampling.stop_tokens = {kEndOfTurn};
    r.sampling.seed = seed + i;
    engine.submit(std::move(r));
  }
  ByteTokenizer tok;
  EvalResult out;
  int correct = 0;
  while (!engine.idle()) {
    if (stop && *stop) {
      out.stopped = true;
      return out;
    }
    for (const GenerationResult& res : engine.step()) {  // scored as they finish
      std::vector<int32_t> text = res.tokens;
      if (!text.empty() && text.back() == kEndOfTurn) text.pop_back();
      const std::string completion = tok.decode(text);
      const auto& q = queries[res.id];
      correct += res.finish == FinishReason::kStop && completion == q.answer;
      if (static_cast<int>(res.id) < show) out.examples.push_back({q.request, completion});
    }
  }
  std::sort(out.examples.begin(), out.examples.end());
  out.accuracy = static_cast<double>(correct) / n;
  return out;
}

// The supervised loop shared by both data sources: next_batch draws a step's
// samples from rng; progress lines every run.log_every steps; checkpoints
// (with the data stream's RNG state) every run.checkpoint_every steps and at
// the end.
// Figures of the steps this process trained: the first step's loss, the mean
// of the last progress window's; NaN (null in summary.json) where it trained
// none (a --resume after a SIGTERM in the final evaluation wrote -1 and 0).
struct LoopResult {
  int trained = 0;  // steps this process trained (a NaN loss is a loss, not "none yet")
  double seconds = std::nan(""), first_loss = std::nan(""), last_loss = std::nan("");
  int64_t linear_tokens = 0, packed_tokens = 0;
  bool terminated = false;  // SIGTERM: stopped at a step boundary, checkpoint written
};

// The steps since the last line on the run.log_every grid (a run's last
// line off it does not end a window): their loss and token counts. A
// checkpoint keeps them (section "sft_log_window"), so that a run resumed
// between two lines prints the lines, and ends with the loss, of a run never
// stopped (its window began afresh: the first line after a resume, and
// summary.json's loss_last, averaged fewer steps).
struct LossWindow {
  double loss = 0;
  int64_t tokens = 0, linear = 0;
  int steps = 0;

  CheckpointSection to_section() const {
    CheckpointSection s;
    s.i64["loss_bits"] = {std::bit_cast<int64_t>(loss)};
    s.i64["counts"] = {tokens, linear, steps};
    return s;
  }
  // A checkpoint's window; an empty one where it has none (written before
  // 2026-12-02: such a resume's first line averages the steps after it).
  static LossWindow from(const CheckpointState& state, const std::string& path) {
    LossWindow w;
    const auto it = state.sections.find(kSection);
    if (it == state.sections.end()) return w;
    const auto bits = it->second.i64.find("loss_bits"), counts = it->second.i64.find("counts");
    if (bits == it->second.i64.end() || bits->second.size() != 1 || counts == it->second.i64.end() ||
        counts->second.size() != 3 || counts->second[0] < 0 || counts->second[1] < 0 || counts->second[2] < 0 ||
        counts->second[2] > std::numeric_limits<int>::max())
      throw InputError("--resume: checkpoint '" + path + "': its " + std::string(kSection) +
                       " group is not loss_bits [1] and counts [3] of non-negative numbers");
    w.loss = std::bit_cast<double>(bits->second[0]);
    w.tokens = counts->second[0];
    w.linear = counts->second[1];
    w.steps = static_cast<int>(counts->second[2]);
    return w;
  }
  static constexpr const char* kSection = "sft_log_window";
};

// Where a run starts: step 0 of a new run, or a resumed checkpoint's step
// with its data stream and progress window.
struct SftStart {
  int step = 0;
  LossWindow window;
  volatile std::sig_atomic_t* terminate = nullptr;  // set by SIGTERM
  std::string model_fingerprint;                     // the checkpoints' (pretrained/model_fingerprint.hpp)
};

// What this process trained: "40 steps in 3.1 s; loss 5.6 -> 0.3; ...", of a
// resumed run the steps after its resume (the figures are theirs).
std::string trained_text(const LoopResult& r, int start_step, int steps) {
  char line[256];
  if (start_step >= steps) {
    std::snprintf(line, sizeof line, "resumed at step %d of %d: no step left to train", start_step, steps);
    return line;
  }
  std::snprintf(line, sizeof line, "%d steps%s in %.1f s; loss %.3f -> %.3f; tree-merged batches ran %.2fx fewer tokens",
                steps - start_step, start_step > 0 ? (" (resumed at step " + std::to_string(start_step) + ")").c_str() : "",
                r.seconds, r.first_loss, r.last_loss,
                static_cast<double>(r.linear_tokens) / std::max<int64_t>(1, r.packed_tokens));
  return line;
}

LoopResult supervised_loop(const StandardConfig& cfg, const SftConfig& sft, const OptionSet& opts,
                           PolicyModel& model, AdamW& opt, Rng& rng, const SftStart& start,
                           const std::function<std::vector<Sample>(Rng&)>& next_batch) {
  LoopResult out;
  Stopwatch total, window;
  LossWindow w = start.window;  // the line's figures, from the resumed checkpoint's on
  double window_saving = 0;      // the checkpoint writes' seconds: not training
  int64_t window_tokens_here = 0;  // trained by this process since the window began (tokens/s)
  // `window_ends`: this step closes a window of run.log_every steps (its
  // line empties it after the checkpoint is written): the checkpoint keeps
  // the empty window a run going on has. A run's last line off that grid
  // keeps its window, which a run extended from it goes on filling.
  const auto stream = [&](bool window_ends) {
    CheckpointState s;
    s.rngs["data"] = rng.state();
    s.sections[LossWindow::kSection] = (window_ends ? LossWindow{} : w).to_section();
    return s;
  };
  std::string saved;  // the checkpoint of the step before, when one was written
  for (int step = start.step; step < sft.steps; ++step) {
    if (start.terminate && *start.terminate) {
      // Not again when the step just wrote one (Slurm's KillWait is short).
      if (saved.empty())
        saved = save_run_checkpoint(cfg.run, opts.dump_ini(), start.model_fingerprint, model, opt, step, stream(false));
      log_stopped_at_step(step, saved);
      out.terminated = true;
      break;
    }
    const std::vector<Sample> samples = next_batch(rng);
    model.zero_grads();
    const SupervisedStats st = supervised_forward_backward(model, samples, sft.merge, sft.max_tokens);
    const double gnorm = opt.step();
    if (out.trained++ == 0) out.first_loss = st.loss;
    w.loss += st.loss;
    w.tokens += st.packed_tokens;
    w.linear += st.linear_tokens;
    ++w.steps;
    window_tokens_here += st.packed_tokens;
    out.linear_tokens += st.linear_tokens;
    out.packed_tokens += st.packed_tokens;
    const bool last = step + 1 == sft.steps;
    const bool window_ends = (step + 1) % cfg.run.log_every == 0;
    saved.clear();
    if (checkpoint_due(cfg.run, step + 1, sft.steps)) {
      const Stopwatch saving;
      saved = save_run_checkpoint(cfg.run, opts.dump_ini(), start.model_fingerprint, model, opt, step + 1,
                                  stream(window_ends));
      window_saving += saving.seconds();
      if (last) log_info("sft: wrote " + saved);
    }
    if (window_ends || last) {
      out.last_loss = w.loss / w.steps;
      char line[256];
      std::snprintf(line, sizeof line,
                    "step %5d/%d  loss %.4f  grad_norm %.3f  lr %.2e  tokens/s %.0f  tree/linear tokens %.2f",
                    step + 1, sft.steps, out.last_loss, gnorm, learning_rate_at(opt.config(), opt.steps_taken() - 1),
                    window_tokens_here / std::max(1e-9, window.seconds() - window_saving),
                    static_cast<double>(w.tokens) / std::max<int64_t>(1, w.linear));
      log_info(line);
      w = LossWindow{};
      window_tokens_here = 0;
      window_saving = 0;
      window.reset();
    }
  }
  if (out.trained > 0) out.seconds = total.seconds();
  return out;
}

// Supervised warm start on solver demonstrations of the agent environments.
int run_agent_sft(const StandardConfig& cfg, const SftConfig& sft, const EnvConfig& env,
                  AgentConfig agent, const OptionSet& opts, PolicyModel& model, AdamW& opt, Rng& rng,
                  const SftStart& start) {
  agent.sampling = cfg.sample;
  agent.sampling.max_new_tokens = agent.max_new_tokens;
  const PerturbationSampler sampler = env.perturbation_sampler();
  const PerturbationSampler plain(false, env.heldout_list());  // the curriculum's first phase
  const int eval_tasks = sft.eval_requests;
  // Each step draws sft.batch demonstrations: a resumed run's ids go on.
  uint64_t episode_id = static_cast<uint64_t>(start.step) * static_cast<uint64_t>(sft.batch);
  int step = start.step;
  int64_t long_calls = 0, demo_calls = 0;  // calls past agent.max_new_tokens, of all
  const LoopResult r = supervised_loop(cfg, sft, opts, model, opt, rng, start, [&](Rng& g) {
    const PerturbationSampler& styles = step++ < sft.plain_steps ? plain : sampler;
    // The batch's demonstrations are drawn in order, then played side by
    // side: the code domain's run programs in the sandbox.
    std::vector<std::future<Trajectory>> demos;
    for (int c = 0; c < sft.batch; ++c) {
      const uint64_t task_seed = g.next_u64();
      const ScaffoldStyle style = styles.draw(task_seed, StyleMode::kTrain);
      const bool retry = counter_uniform(task_seed ^ 0x7E7Bull, episode_id) < sft.retry_share;
      demos.push_back(std::async(std::launch::async, [&env, &agent, task_seed, style, id = episode_id++, retry] {
        return make_demonstration(env, agent, task_seed, style, id, retry);
      }));
    }
    std::vector<Sample> samples;
    for (auto& pending : demos) {
      const Trajectory demo = pending.get();
      if (const int past = calls_past_max_new_tokens(demo, agent); past > 0) {
        if (long_calls == 0)
          log_warn("sft: a demonstration (episode " + std::to_string(demo.episode_id) + ") has a call longer than "
                   "agent.max_new_tokens = " + std::to_string(agent.max_new_tokens) +
                   ": trained in full, the policy's own call would be cut there (counted at the end; raise "
                   "agent.max_new_tokens if they are many)");
        long_calls += past;
      }
      demo_calls += static_cast<int64_t>(demo.calls.size());
      for (const LlmCall& call : demo.calls) {
        // A solver's call may pass agent.max_new_tokens (trained in full),
        // and so the bins the start checked.
        const size_t length = call.context.size() + call.generated.size();
        if (length > static_cast<size_t>(sft.max_tokens))
          throw InputError("sft.max_tokens = " + std::to_string(sft.max_tokens) + " cannot hold a demonstration call "
                           "of " + std::to_string(length) + " tokens (episode " + std::to_string(demo.episode_id) +
                           ": a context of " + std::to_string(call.context.size()) + " and " +
                           std::to_string(call.generated.size()) + " generated, against agent.max_context_tokens = " +
                           std::to_string(agent.max_context_tokens) + " and agent.max_new_tokens = " +
                           std::to_string(agent.max_new_tokens) + "): raise sft.max_tokens to at least " +
                           std::to_string(length));
        Sample s;
        s.tokens = call.context;
        s.tokens.insert(s.tokens.end(), call.generated.begin(), call.generated.end());
        s.trainable.assign(call.context.size(), 0);
        s.trainable.resize(s.tokens.size(), 1);
        samples.push_back(std::move(s));
      }
    }
    return samples;
  });
  if (r.terminated || stop_signal_before_final_evaluation(cfg.run.dir)) return stopped_exit_code();
  model.release_activations();
  const StyleEvals ev = evaluate_styles(model, env, agent, eval_tasks, cfg.run.seed);
  std::printf("\nforge sft (agent demonstrations): %s; peak resident memory %.2f GiB\n",
              trained_text(r, start.step, sft.steps).c_str(), peak_resident_gib());
  if (long_calls > 0)
    std::printf("%lld of %lld demonstration calls were longer than agent.max_new_tokens = %d\n",
                static_cast<long long>(long_calls), static_cast<long long>(demo_calls), agent.max_new_tokens);
  std::printf("%s", format_style_evals(ev, "greedy evaluation on " + std::to_string(eval_tasks) +
                                               " held-out tasks").c_str());
  const double heldout_success = ev.has_heldout ? ev.heldout.all.success : -1;
  write_summary(cfg.run.dir, "{\"command\": \"sft\", \"task\": \"agent\", \"steps\": " + std::to_string(sft.steps) +
                                 ", \"resumed_at_step\": " + std::to_string(start.step) +
                                 ", \"train_seconds\": " + json_number(r.seconds) +
                                 ", \"loss_first\": " + json_number(r.first_loss) +
                                 ", \"loss_last\": " + json_number(r.last_loss) +
                                 ", \"success_seen\": " + json_number(ev.seen.all.success) +
                                 ", \"success_heldout_family\": " + json_number(heldout_success) +
                                 ", \"linear_tokens\": " + std::to_string(r.linear_tokens) +
                                 ", \"packed_tokens\": " + std::to_string(r.packed_tokens) +
                                 ", \"calls_past_max_new_tokens\": " + std::to_string(long_calls) + "}\n",
                start.step, sft.steps);
  return 0;
}

int run_sft(int argc, char** argv) {
  ForgeConfig all;
  OptionSet opts("forge sft",
                 "Supervised training with prefix-tree-merged batches: on a synthetic chat task\n"
                 "(reverse or sort a word, several requests per conversation; greedy exact-match\n"
                 "evaluation and samples), or on the agent environments' solver demonstrations\n"
                 "(sft.task = agent; greedy success rate on held-out tasks).");
  add_forge_options(opts, all);
  bool resume = false;
  opts.add("resume", &resume, "continue the run in run.dir from its newest checkpoint");
  opts.command_line_only("resume");
  if (!cli::parse_options(opts, argc, argv)) return 0;
  opts.require_storable();
  // SIGTERM or Ctrl-C from here on: the step under way finishes, then a
  // checkpoint, and exit 143 (after Ctrl-C, SIGINT: 130); --resume continues.
  volatile std::sig_atomic_t* const terminate = catch_stop_signals();
  StandardConfig& cfg = all.base;
  const SftConfig& sft = all.sft;
  const EnvConfig& env = all.env;
  const AgentConfig& agent = all.agent;

  const int threads = set_compute_threads(cfg.run.threads);
  cli::log_host_warnings(threads);
  if (!all.train.init.empty())
    throw InputError("train.init = '" + all.train.init + "' is read by forge train; forge sft starts from "
                     "model.pretrained or from random weights");
  if (!resume) refuse_existing_run(cfg.run.dir, "forge sft", true);
  if (sft.task != "agent" && !cfg.model.pretrained.empty())  // before minutes of loading it
    throw InputError("sft.task = " + sft.task + " is the built-in policy's synthetic chat task (byte tokenizer); a "
                     "pretrained model (model.pretrained) trains on the agent demonstrations: sft.task = agent");
  if (sft.task == "agent")
    check_bins_hold_calls("sft.max_tokens", sft.max_tokens, agent.max_context_tokens + agent.max_new_tokens);
  else if (const int longest = longest_conversation_tokens(sft.turns); sft.max_tokens < longest)
    throw InputError("sft.max_tokens = " + std::to_string(sft.max_tokens) + " cannot hold the longest synthetic "
                     "conversation of sft.turns = " + std::to_string(sft.turns) + " (" + std::to_string(longest) +
                     " tokens): raise sft.max_tokens or lower sft.turns");
  if (const auto [need, what] = env.most_tool_calls_needed();
      sft.task == "agent" && sft.retry_share > 0 && env.max_tool_calls < need + 1)
    throw InputError("env.max_tool_calls = " + std::to_string(env.max_tool_calls) + " holds the largest task's " +
                     std::to_string(need) + " tool calls (" + what + ") but not the retry that sft.retry_share = " +
                     format_number(sft.retry_share) + " demonstrates: raise it to " + std::to_string(need + 1) +
                     ", or set sft.retry_share = 0");

  // The model is built and the bins known to hold a call before the run
  // folder and its config.ini are written. (An agent demonstration that
  // agent.max_turns or the token budgets cut short is found when it is
  // drawn: make_demonstration's InputError then ends the run.)
  TrainablePolicy policy = make_trainable_policy(cfg.model, cfg.optim, cfg.run, sft.steps);
  if (sft.task == "agent")
    warn_past_context(policy.source, agent.max_context_tokens + agent.max_new_tokens,
                      "agent.max_context_tokens + agent.max_new_tokens");
  PolicyModel& model = *policy.model;
  AdamW& opt = *policy.opt;
  hold_run_folder(cfg.run.dir);
  SftStart start;
  start.terminate = terminate;
  start.model_fingerprint = model_fingerprint(policy.source);
  Rng rng(cfg.run.seed);
  if (resume) {
    const ResumePoint point = load_resume_point(model, opt, cfg.run, "sft.steps", sft.steps, "");
    const auto data = point.state.rngs.find("data");
    if (data == point.state.rngs.end())
      throw InputError("--resume: checkpoint '" + point.path + "' holds no forge sft data stream (written by "
                       "another command?)");
    rng.set_state(data->second);
    start.step = point.step;
    start.window = LossWindow::from(point.state, point.path);
    if (const std::string changes = resumed_setting_changes(point.state.config_ini, opts.dump_ini(), "sft");
        !changes.empty())
      log_warn("sft: --resume with settings changed since the checkpoint (" + changes + "): the steps left train "
               "under the new ones, unlike an uninterrupted run; config.ini records them");
    log_info("sft: resumed from " + point.path + resumed_at(start.step, sft.steps, "sft.steps"));
  } else {
    refuse_existing_run(cfg.run.dir, "forge sft", true);  // again, under the lock: another may have started
  }
  make_checkpoints_folder(cfg.run.dir);
  write_run_config(cfg.run.dir, opts.dump_ini());
  log_info("sft: task " + sft.task + ", " + std::to_string(model.layout().total) +
           " parameters, " + std::to_string(threads) + " threads, run folder " + cfg.run.dir);

  if (sft.task == "agent") {
    AgentConfig with_vocab = agent;
    with_vocab.vocabulary = ScaffoldVocabulary::of(policy.source.chat);
    return run_agent_sft(cfg, sft, env, with_vocab, opts, model, opt, rng, start);
  }

  SamplingParams greedy = cfg.sample;
  greedy.temperature = 0;
  const uint64_t eval_seed = eval_task_seed(cfg.run.seed);
  // SIGTERM or Ctrl-C during it: cut short, and the loop's first boundary checkpoints.
  const EvalResult before = evaluate(model, sft.task, sft.eval_requests, eval_seed, greedy, 0, terminate);
  const std::string at = start.step > 0 ? "at the resumed step " + std::to_string(start.step) : "before training";
  if (before.stopped) {
    log_warn("sft: the evaluation " + at + " was cut short by " + stop_signal_name());
  } else {
    char line[48];
    std::snprintf(line, sizeof line, " %.1f%%", 100 * before.accuracy);
    log_info("sft: exact-match accuracy " + at + line);
  }

  const LoopResult r = supervised_loop(cfg, sft, opts, model, opt, rng, start, [&](Rng& g) {
    std::vector<Sample> samples;
    for (int c = 0; c < sft.batch; ++c)
      for (auto& s : make_conversation(g, sft.task, sft.turns)) samples.push_back(std::move(s));
    return samples;
  });
  if (r.terminated || stop_signal_before_final_evaluation(cfg.run.dir)) return stopped_exit_code();

  const EvalResult after = evaluate(model, sft.task, sft.eval_requests, eval_seed, greedy, 0);
  SamplingParams sampled = cfg.sample;
  const EvalResult shown = evaluate(model, sft.task, sft.show, eval_seed + 1, sampled, sft.show);

  std::printf("\nforge sft: %s\n", trained_text(r, start.step, sft.steps).c_str());
  std::printf("exact-match accuracy on %d held-out requests (greedy): %.1f%% %s, %.1f%% after\n",
              sft.eval_requests, 100 * before.accuracy, start.step > 0 ? "at the resumed step" : "before",
              100 * after.accuracy);
  if (!shown.examples.empty()) std::printf("samples (temperature %.2f):\n", sampled.temperature);
  for (const auto& [req, completion] : shown.examples)  // quoted: an undertrained model writes any byte
    std::printf("  %-22s -> %s\n", req.c_str(), json_string(completion).c_str());

  write_summary(cfg.run.dir, "{\"command\": \"sft\", \"task\": " + json_string(sft.task) +
                                 ", \"steps\": " + std::to_string(sft.steps) +
                                 ", \"train_seconds\": " + json_number(r.seconds) +
                                 ", \"loss_first\": " + json_number(r.first_loss) +
                                 ", \"loss_last\": " + json_number(r.last_loss) +
                                 ", \"resumed_at_step\": " + std::to_string(start.step) +
                                 ", \"accuracy_before\": " + json_number(before.accuracy) +
                                 ", \"accuracy_after\": " + json_number(after.accuracy) +
                                 ", \"linear_tokens\": " + std::to_string(r.linear_tokens) +
                                 ", \"packed_tokens\": " + std::to_string(r.packed_tokens) + "}\n",
                start.step, sft.steps);
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("sft", "supervised training on a synthetic chat task, then evaluation and sampling",
              forge::run_sft);
