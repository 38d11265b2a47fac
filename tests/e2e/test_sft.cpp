// `forge sft` end to end on a tiny model: it trains (the loss falls), writes
// its run folder and checkpoint, prints the evaluation, and rejects a bad task
// name; `forge generate` samples from the checkpoint; --resume and SIGTERM.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "e2e/forge_runner.hpp"
#include "e2e/tiny_checkpoint.hpp"

namespace {

using forge_e2e::contains;
using forge_e2e::forge;
using forge_e2e::Result;
using forge_e2e::slurp;

double json_number(const std::string& json, const std::string& key) {
  const auto p = json.find("\"" + key + "\": ");
  if (p == std::string::npos) return -1e300;
  return std::stod(json.substr(p + key.size() + 4));
}

TEST(Sft, TinyRunLossFallsAndWritesSummary) {
  const std::string dir = ::testing::TempDir() + "forge_sft_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);  // a run folder of an earlier process with this pid is refused
  const Result r = forge(
      "sft --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
      "--model.ffn_dim=64 --optim.lr=0.003 --sft.steps=40 --sft.batch=8 --sft.eval_requests=8 "
      "--sft.show=2 --run.log_every=20 --run.dir=" + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "exact-match accuracy")) << r.out;
  EXPECT_TRUE(contains(r.err, "step    40/40")) << r.err;
  const std::string summary = slurp(dir + "/summary.json");
  const double first = json_number(summary, "loss_first"), last = json_number(summary, "loss_last");
  EXPECT_GT(first, 0) << summary;
  EXPECT_LT(last, 0.75 * first) << summary;
  EXPECT_LT(json_number(summary, "packed_tokens"), json_number(summary, "linear_tokens")) << summary;
  EXPECT_TRUE(contains(slurp(dir + "/config.ini"), "steps = 40"));

  // The final checkpoint serves `forge generate`, model shape read from it.
  const Result g = forge("generate " + dir + " --prompt='sort: cab' --show_logprobs");
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_TRUE(contains(g.err, "ckpt_step_00000040.h5")) << g.err;
  EXPECT_TRUE(contains(g.out, "logprob")) << g.out;
  // One line a token, its text quoted (a newline token broke the table).
  for (size_t at = g.out.find(" logprob "); at != std::string::npos; at = g.out.find(" logprob ", at + 1))
    EXPECT_EQ(g.out.compare(g.out.rfind('\n', at) + 1, 3, "  \""), 0) << g.out;
  EXPECT_FALSE(contains(g.err, "[model] keys given are not read")) << "no [model] key given: " << g.err;
  EXPECT_EQ(forge("generate " + dir + "/missing.h5 --prompt=x").rc, 2);
  // Near-uniform sampling writes control bytes: piped, as generated; on a
  // terminal (script(1) gives one), as \xNN, so none reaches it raw.
  const std::string hot = "generate " + dir + " --prompt='sort: cab' --sample.temperature=50 --sample.max_new_tokens=300";
  const auto has_control = [](const std::string& text) {
    return std::any_of(text.begin(), text.end(), [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\n' && c != '\r' && c != '\t') || u == 0x7F;
    });
  };
  const Result piped = forge(hot);
  ASSERT_EQ(piped.rc, 0) << piped.err;
  EXPECT_TRUE(has_control(piped.out)) << "the case needs control bytes in the generation";
  if (std::system("command -v script >/dev/null 2>&1") == 0) {
    const std::string shown_at = dir + "/generate_on_a_tty.out";
    const std::string on_tty = "cd '" FORGE_SOURCE_DIR "' && script -qec \"'" FORGE_BINARY_DIR "/forge' " + hot +
                               " 2>/dev/null\" /dev/null >'" + shown_at + "'";
    ASSERT_EQ(std::system(on_tty.c_str()), 0) << on_tty;
    const Result tty{0, slurp(shown_at), ""};
    EXPECT_FALSE(has_control(tty.out)) << tty.out;
    EXPECT_TRUE(contains(tty.out, "\\x")) << tty.out;
  }
  // The run's own config.ini is a config it reads (every key of the suite;
  // it was refused for its [model] and [sft] keys), and a model.pretrained
  // that is not MODEL is said to be unread.
  const Result c = forge("generate " + dir + " --config " + dir +
                         "/config.ini --prompt='sort: cab' --model.pretrained=other.gguf");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(contains(c.err, "model.pretrained = 'other.gguf' is not read")) << c.err;
  EXPECT_FALSE(contains(c.err, "[model] keys given are not read")) << "the run's own keys are the model's: " << c.err;
  // A shape key given away from the model's is said to be unread (it was
  // ignored silently), naming only the keys given.
  const Result shape = forge("generate " + dir + " --prompt='sort: cab' --model.n_layers=7");
  ASSERT_EQ(shape.rc, 0) << shape.err;
  EXPECT_TRUE(contains(shape.err, "[model] keys given are not read")) << shape.err;
  EXPECT_TRUE(contains(shape.err, "(model.n_layers 7 against ")) << shape.err;
}

TEST(Sft, AgentDemonstrationsTrainAndEvaluate) {
  const std::string dir = ::testing::TempDir() + "forge_sft_agent_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);  // a run folder of an earlier process with this pid is refused
  const Result r = forge(
      "sft --sft.task=agent --model.d_model=32 --model.n_layers=1 --model.n_heads=2 "
      "--model.n_kv_heads=2 --model.ffn_dim=64 --optim.lr=0.003 --sft.steps=20 --sft.plain_steps=10 --sft.batch=4 "
      "--sft.eval_requests=4 --agent.max_turns=4 --env.calc_max_ops=2 --env.search_max_hops=2 "
      "--run.log_every=10 --run.dir=" + dir);  // 4 turns hold 3 tool calls and the answer
  ASSERT_EQ(r.rc, 0) << r.err;
  // Tasks of 4 calls do not fit 3 turns: refused, not demonstrations cut short.
  const Result cut = forge("sft --sft.task=agent --sft.steps=1 --agent.max_turns=3 --run.dir=" + dir + "_cut");
  EXPECT_EQ(cut.rc, 2) << cut.err;
  EXPECT_TRUE(contains(cut.err, "agent.max_turns = 3")) << cut.err;
  std::filesystem::remove_all(dir + "_cut");
  EXPECT_TRUE(contains(r.out, "held-out families")) << r.out;
  const std::string summary = slurp(dir + "/summary.json");
  // Learned: 5.60 -> 5.12 in 20 steps (with optim.lr 1e-9 it ends at 5.62);
  // a mere decrease would let a gradient that barely moves pass.
  EXPECT_LT(json_number(summary, "loss_last"), 0.95 * json_number(summary, "loss_first")) << summary;
  // Both success rates are written, and are fractions (a missing key reads as -1e300).
  for (const char* key : {"success_seen", "success_heldout_family"}) {
    EXPECT_GE(json_number(summary, key), 0.0) << key << ": " << summary;
    EXPECT_LE(json_number(summary, key), 1.0) << key << ": " << summary;
  }
  const Result e = forge("eval " + dir + " --eval.tasks=2 --agent.max_turns=3 --json");
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_TRUE(contains(e.out, "\"heldout_family\"")) << e.out;
  // The shares of the episodes that met a tool error are null where none
  // met one (they read 0, a recovery of 0%), numbers elsewhere.
  int domains = 0;
  for (size_t at = e.out.find("\"met_tool_error\": "); at != std::string::npos;
       at = e.out.find("\"met_tool_error\": ", at + 1), ++domains) {
    const bool none = e.out.compare(at + 18, 2, "0,") == 0;
    const size_t rec = e.out.find("\"recovered_after_error\": ", at);
    ASSERT_NE(rec, std::string::npos) << e.out;
    EXPECT_EQ(e.out.compare(rec + 25, 4, "null") == 0, none) << e.out.substr(at, 120);
  }
  EXPECT_GT(domains, 0) << e.out;
  // Not the run's tasks and scaffold: said, naming the keys; under the run's
  // own config.ini, nothing to say.
  EXPECT_TRUE(contains(e.err, "eval: settings differ from those of the run that wrote")) << e.err;
  EXPECT_TRUE(contains(e.err, "agent.max_turns 4 -> 3; env.calc_max_ops 2 -> ")) << e.err;
  const Result same = forge("eval " + dir + " --config " + dir + "/config.ini --eval.tasks=2 --json");
  ASSERT_EQ(same.rc, 0) << same.err;
  EXPECT_FALSE(contains(same.err, "settings differ")) << same.err;
}

// A tool-call budget that holds the largest task but not the retry a
// demonstration shows is refused before the run folder is made (it was
// found at the first such demonstration, the folder written).
TEST(Sft, ABudgetWithoutRoomForTheRetryIsRefusedFirst) {
  const std::string dir = ::testing::TempDir() + "forge_sft_retry_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const std::string args = "sft --sft.task=agent --sft.steps=1 --env.search_weight=0 --env.calc_max_ops=4 "
                           "--env.max_tool_calls=4 --agent.max_turns=20 --run.dir=" + dir;
  const Result r = forge(args + " --sft.retry_share=0.25");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "sft.retry_share")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/config.ini"));
  std::filesystem::remove_all(dir);
}

// Bins smaller than the longest synthetic conversation are refused at start
// (a step drew one after checkpoints were written, and the folder then
// refused a rerun); the bound is the longest the task draws: it trains.
TEST(Sft, BinsSmallerThanTheLongestConversationAreRefusedAtStart) {
  const std::string dir = ::testing::TempDir() + "forge_sft_bins_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const std::string tiny = "sft --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
                           "--model.ffn_dim=64 --sft.steps=40 --sft.batch=8 --sft.eval_requests=2 --run.dir=" + dir;
  const Result r = forge(tiny + " --sft.max_tokens=81");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "sft.max_tokens = 81 cannot hold the longest synthetic conversation of sft.turns = 3 "
                              "(82 tokens)")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/config.ini"));
  const Result fits = forge(tiny + " --sft.max_tokens=82");
  EXPECT_EQ(fits.rc, 0) << fits.err;
  std::filesystem::remove_all(dir);
}

// A warm-up as long as the run is said (the rate never got to optim.lr, and
// a cosine schedule never started, silently); a shorter one is not.
TEST(Sft, AWarmUpAsLongAsTheRunIsWarnedAbout) {
  const std::string dir = ::testing::TempDir() + "forge_sft_warmup_" + std::to_string(getpid());
  const std::string tiny = "sft --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
                           "--model.ffn_dim=64 --sft.steps=5 --sft.eval_requests=2 --optim.schedule=cosine --run.dir=";
  std::filesystem::remove_all(dir);
  const Result r = forge(tiny + dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: optim.warmup_steps = 20 is not below the run's 5 steps: the learning "
                              "rate rises all run and ends at 0.00025, not optim.lr = 0.001 (the cosine decay "
                              "never starts)")) << r.err;
  std::filesystem::remove_all(dir);
  const Result shorter = forge(tiny + dir + " --optim.warmup_steps=4");
  ASSERT_EQ(shorter.rc, 0) << shorter.err;
  EXPECT_FALSE(contains(shorter.err, "optim.warmup_steps")) << shorter.err;
  std::filesystem::remove_all(dir);
  // As long as the run: the last step is at optim.lr; only a cosine decay
  // is missed.
  const Result equal = forge(tiny + dir + " --optim.warmup_steps=5");
  ASSERT_EQ(equal.rc, 0) << equal.err;
  EXPECT_TRUE(contains(equal.err, "warning: optim.warmup_steps = 5 is not below the run's 5 steps: the "
                                  "learning rate rises all run (the cosine decay never starts)")) << equal.err;
  std::filesystem::remove_all(dir);
  const Result constant = forge(tiny + dir + " --optim.warmup_steps=5 --optim.schedule=constant");
  ASSERT_EQ(constant.rc, 0) << constant.err;
  EXPECT_FALSE(contains(constant.err, "optim.warmup_steps")) << constant.err;
  std::filesystem::remove_all(dir);
  // Against the run's steps, not a cosine horizon set apart from them: a
  // warm-up of 4 in a run of 5 toward a horizon of 4 was warned about (the
  // rate "rises all run"; it reached optim.lr at step 4).
  const Result horizon = forge(tiny + dir + " --optim.warmup_steps=4 --optim.total_steps=4");
  ASSERT_EQ(horizon.rc, 0) << horizon.err;
  EXPECT_FALSE(contains(horizon.err, "optim.warmup_steps")) << horizon.err;
  std::filesystem::remove_all(dir);
  // A horizon below the warm-up is refused (the rate climbed past it, then
  // went back to optim.lr and down to the floor), and leaves no run folder.
  const Result below = forge(tiny + dir + " --optim.warmup_steps=4 --optim.total_steps=3");
  EXPECT_EQ(below.rc, 2) << below.err;
  EXPECT_TRUE(contains(below.err, "forge: error: optim.total_steps = 3 is below optim.warmup_steps = 4")) << below.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  std::filesystem::remove_all(dir);
  // Decay of lr x weight_decay >= 1 a step would zero or flip the weights.
  const Result decay = forge(tiny + dir + " --optim.lr=2 --optim.weight_decay=0.5");
  EXPECT_EQ(decay.rc, 2) << decay.err;
  EXPECT_TRUE(contains(decay.err, "forge: error: optim.lr x optim.weight_decay = 2 x 0.5 is 1 or more")) << decay.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  std::filesystem::remove_all(dir);
}

// --resume continues a run from its newest checkpoint exactly: a run of 3
// steps resumed to 6 ends with the loss of an uninterrupted run of 6
// (weights, AdamW state, the data stream). A run folder is refused without
// --resume, and a checkpoint past sft.steps with it.
TEST(Sft, ResumeContinuesExactlyAndSigtermOrCtrlCCheckpoints) {
  const std::string dir = ::testing::TempDir() + "forge_sft_resume_" + std::to_string(getpid());
  const std::string base = "sft --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
                           "--model.ffn_dim=64 --sft.batch=2 --sft.eval_requests=2 --run.threads=1 "
                           "--optim.warmup_steps=0 ";
  const std::string tiny = base + "--run.log_every=1 ";
  std::filesystem::remove_all(dir + "_whole");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(forge(tiny + "--sft.steps=6 --run.dir=" + dir + "_whole").rc, 0);
  ASSERT_EQ(forge(tiny + "--sft.steps=3 --run.dir=" + dir).rc, 0);
  const Result again = forge(tiny + "--sft.steps=6 --run.dir=" + dir);
  EXPECT_EQ(again.rc, 2);
  EXPECT_TRUE(contains(again.err, "holds an earlier run")) << again.err;
  EXPECT_TRUE(contains(again.err, "continue it with --resume")) << again.err;
  // forge train in it: not "--resume" (it cannot continue an sft run), but
  // --train.init with another run.dir.
  const Result rl = forge("train --model.d_model=32 --model.n_layers=1 --model.n_heads=2 --model.n_kv_heads=2 "
                          "--model.ffn_dim=64 --train.steps=1 --run.dir=" + dir);
  EXPECT_EQ(rl.rc, 2);
  EXPECT_TRUE(contains(rl.err, "holds a forge sft run (" + dir + "/checkpoints/ckpt_step_00000003.h5); forge train "
                               "neither overwrites nor continues it: start from it with --train.init=" + dir +
                               "/checkpoints/ckpt_step_00000003.h5 and another run.dir")) << rl.err;
  const Result resumed = forge(tiny + "--sft.steps=6 --resume --run.dir=" + dir);
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "sft: resumed from " + dir + "/checkpoints/ckpt_step_00000003.h5 at step 3"))
      << resumed.err;
  EXPECT_FALSE(contains(resumed.err, "settings changed")) << resumed.err;
  const std::string whole = slurp(dir + "_whole/summary.json"), parts = slurp(dir + "/summary.json");
  ASSERT_GT(json_number(whole, "loss_last"), 0) << whole;
  EXPECT_EQ(json_number(parts, "loss_last"), json_number(whole, "loss_last")) << parts << "\n" << whole;
  // The last step's update too: weights and both AdamW moments, bitwise.
  std::vector<float> m_whole, v_whole, m_parts, v_parts;
  const auto w_whole = forge_e2e::params_of(dir + "_whole/checkpoints/ckpt_step_00000006.h5", &m_whole, &v_whole);
  EXPECT_EQ(forge_e2e::params_of(dir + "/checkpoints/ckpt_step_00000006.h5", &m_parts, &v_parts), w_whole);
  EXPECT_EQ(m_parts, m_whole);
  EXPECT_EQ(v_parts, v_whole);
  EXPECT_EQ(json_number(parts, "resumed_at_step"), 3) << parts;
  // Resumed with no step left: nothing trained, the summary kept (an empty
  // loop's placeholders replaced the loss curve).
  const Result idle = forge(tiny + "--sft.steps=6 --resume --run.dir=" + dir);
  ASSERT_EQ(idle.rc, 0) << idle.err;
  EXPECT_TRUE(contains(idle.out, "no step left to train")) << idle.out;
  EXPECT_TRUE(contains(idle.err, "at step 6 = sft.steps: nothing is left to train")) << idle.err;
  // forge train --resume on it at its last step: refused as forge sft's, with
  // no "nothing is left to train" before the refusal.
  const Result rl_resume = forge("train --model.d_model=32 --model.n_layers=1 --model.n_heads=2 "
                                 "--model.n_kv_heads=2 --model.ffn_dim=64 --train.steps=6 --resume --run.dir=" + dir);
  EXPECT_EQ(rl_resume.rc, 2) << rl_resume.err;
  EXPECT_TRUE(contains(rl_resume.err, "was not written by forge train")) << rl_resume.err;
  EXPECT_FALSE(contains(rl_resume.err, "nothing is left to train")) << rl_resume.err;
  EXPECT_TRUE(contains(idle.out, "kept " + dir + "/summary.json (no step trained)")) << idle.out;
  EXPECT_EQ(slurp(dir + "/summary.json"), parts);
  // Without a summary to keep (a SIGTERM in the final evaluation ends the
  // process before it writes one), its training figures are null, not an
  // empty loop's -1 and 0 (found by review).
  std::filesystem::remove(dir + "/summary.json");
  ASSERT_EQ(forge(tiny + "--sft.steps=6 --resume --run.dir=" + dir).rc, 0);
  const std::string fresh = slurp(dir + "/summary.json");
  for (const char* key : {"\"loss_first\": null", "\"loss_last\": null", "\"train_seconds\": null"})
    EXPECT_TRUE(contains(fresh, key)) << key << " in " << fresh;
  const Result past = forge(tiny + "--sft.steps=4 --resume --run.dir=" + dir);
  EXPECT_EQ(past.rc, 2);
  EXPECT_TRUE(contains(past.err, "is at step 6, past sft.steps = 4: raise sft.steps to go on")) << past.err;
  const Result changed = forge(tiny + "--sft.steps=7 --sft.batch=3 --resume --run.dir=" + dir);
  ASSERT_EQ(changed.rc, 0) << changed.err;
  EXPECT_TRUE(contains(changed.err, "settings changed since the checkpoint (sft.batch 2 -> 3)")) << changed.err;

  // The same for agent demonstrations, across the plain-styles phase (the
  // episode ids and the phase go on from the step), resumed inside a
  // progress window: the checkpoint keeps the window's steps, so the last
  // line and loss_last average all four (they averaged the three after it).
  const std::string agent = base + "--run.log_every=4 --sft.task=agent --sft.plain_steps=2 --agent.max_turns=6 "
                                   "--env.calc_max_ops=2 --env.search_max_hops=2 ";
  for (const std::string& d : {dir, dir + "_whole"}) std::filesystem::remove_all(d);
  ASSERT_EQ(forge(agent + "--sft.steps=4 --run.dir=" + dir + "_whole").rc, 0);
  ASSERT_EQ(forge(agent + "--sft.steps=1 --run.dir=" + dir).rc, 0);
  ASSERT_EQ(forge(agent + "--sft.steps=4 --resume --run.dir=" + dir).rc, 0);
  const std::string agent_whole = slurp(dir + "_whole/summary.json"), agent_parts = slurp(dir + "/summary.json");
  ASSERT_GT(json_number(agent_whole, "loss_last"), 0) << agent_whole;
  EXPECT_EQ(json_number(agent_parts, "loss_last"), json_number(agent_whole, "loss_last")) << agent_parts;
  // Resumed from a checkpoint at a progress line (the last of a run that is
  // then extended): the window after it starts empty (the checkpoint kept
  // the window the line had just printed, counting step 2 twice).
  const std::string two = base + "--run.log_every=2 ";
  for (const std::string& d : {dir, dir + "_whole"}) std::filesystem::remove_all(d);
  ASSERT_EQ(forge(two + "--sft.steps=4 --run.dir=" + dir + "_whole").rc, 0);
  ASSERT_EQ(forge(two + "--sft.steps=2 --run.dir=" + dir).rc, 0);
  ASSERT_EQ(forge(two + "--sft.steps=4 --resume --run.dir=" + dir).rc, 0);
  EXPECT_EQ(json_number(slurp(dir + "/summary.json"), "loss_last"),
            json_number(slurp(dir + "_whole/summary.json"), "loss_last"));

  // SIGTERM at a step boundary: a checkpoint, exit 143; --resume goes on.
  std::filesystem::remove_all(dir);
  const std::string log = dir + ".log";
  const Result term = forge_e2e::forge_until_sigterm(tiny + "--sft.steps=1000000 --run.dir=" + dir,
                                                     "step  *[0-9]*/", log);
  const std::string& out = term.out;
  EXPECT_EQ(term.rc, 143) << out;
  EXPECT_EQ(term.signal, 0) << out;  // exit(143): stopped, not killed
  const auto stop = out.find("SIGTERM: stopping after ");
  ASSERT_NE(stop, std::string::npos) << out;
  const int done = std::stoi(out.substr(stop + 24));
  EXPECT_TRUE(contains(out, "continue with --resume")) << out;
  const Result go_on = forge(tiny + "--sft.steps=" + std::to_string(done + 2) + " --resume --run.dir=" + dir);
  ASSERT_EQ(go_on.rc, 0) << go_on.err;
  EXPECT_TRUE(contains(go_on.err, "at step " + std::to_string(done))) << go_on.err;
  // Ctrl-C (SIGINT) acts as SIGTERM does; the run goes on from its
  // checkpoint.
  std::filesystem::remove_all(dir);
  const Result intr = forge_e2e::forge_until_signal(tiny + "--sft.steps=1000000 --run.dir=" + dir,
                                                    "step  *[0-9]*/", log, SIGINT);
  // A checkpoint, then the process ends by SIGINT itself (a shell's loop
  // stops), not by exit(130).
  EXPECT_EQ(intr.signal, SIGINT) << intr.out;
  EXPECT_EQ(intr.rc, 130) << intr.out;
  EXPECT_TRUE(contains(intr.out, "Ctrl-C: stopping at the next step boundary")) << intr.out;
  const auto istop = intr.out.find("SIGINT (Ctrl-C): stopping after ");
  ASSERT_NE(istop, std::string::npos) << intr.out;
  const int idone = std::stoi(intr.out.substr(istop + 32));
  const Result igo_on = forge(tiny + "--sft.steps=" + std::to_string(idone + 2) + " --resume --run.dir=" + dir);
  ASSERT_EQ(igo_on.rc, 0) << igo_on.err;
  EXPECT_TRUE(contains(igo_on.err, "at step " + std::to_string(idone))) << igo_on.err;
  // SIGTERM during the evaluation before training (100,000 requests: long)
  // cuts it short between engine steps, then the first step boundary
  // checkpoints (it ran to its end first).
  std::filesystem::remove_all(dir);
  const Result early = forge_e2e::forge_until_sigterm(
      tiny + "--sft.steps=5 --sft.eval_requests=100000 --run.dir=" + dir, "sft: task", log);
  EXPECT_EQ(early.rc, 143) << early.out;
  EXPECT_TRUE(contains(early.out, "sft: the evaluation before training was cut short by SIGTERM")) << early.out;
  EXPECT_TRUE(contains(early.out, "SIGTERM: stopping after 0 steps")) << early.out;
  EXPECT_FALSE(contains(early.out, "exact-match accuracy before training")) << early.out;
  for (const std::string& d : {dir, dir + "_whole"}) std::filesystem::remove_all(d);
  std::remove(log.c_str());
}

TEST(Sft, UnknownTaskIsExitCode2) {
  const Result r = forge("sft --sft.task=juggle --sft.steps=1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.err, "sft.task")) << r.err;
}

}  // namespace
