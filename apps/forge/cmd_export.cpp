// `forge export FILE --format csv|jsonl [--out PATH] [--steps | --episode N [--decode]]`:
// tables from a rollouts.h5 for pandas and friends, on stdout or into --out.
//
//   default           one row per episode: index, episode_id, env,
//                     template_family, task_id, group, consumed_step,
//                     staleness, outcome, process, efficiency, safety,
//                     success, abandoned, turns, tool_errors, recoveries,
//                     safety_events, test_runs, n_calls, generated_tokens,
//                     final_length
//   --steps           one row per training step: every steps/* column of
//                     one value a step that the current schema names
//                     (docs/hdf5-schema.md), empty / null where the file
//                     predates it (a schema 2 file's logprob_mismatch, which
//                     later schemas split, is not among them)
//   --episode N       one row per token of episode N (row index as in the
//                     default table): call, position, token, loss_mask,
//                     logprob (empty / null for context), version
//   ... --decode      one row per LLM call of episode N: call, context and
//                     generated text (through the run's tokenizer: its
//                     model.pretrained's, or bytes with special tokens as
//                     <|name|>), generated_tokens, logprob_sum
// Numbers are the shortest text that reads back to the stored value; NaN is
// empty (CSV) or null (JSON), an infinity inf or -inf in CSV (pandas reads
// them) and null in JSON, which has no infinities;
// episode_id and task_id are 64-bit (readers that parse JSON numbers as
// doubles, like jq, round them). Text is UTF-8: bytes that are not, and NUL
// in CSV, become U+FFFD. Works on a file that is being written (what the
// writer has flushed).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io_hdf5/h5_file.hpp"
#include "io_hdf5/rollout_reader.hpp"
#include "learner/run_checkpoints.hpp"
#include "learner/run_folder.hpp"
#include "tokenizer/tokenizer.hpp"
#include "text_formats.hpp"

namespace forge {
namespace {

// Rows of named fields, as CSV (header first) or JSON lines. Values are
// given as text; `quoted` marks strings (JSON quotes them, CSV when needed).
class TableWriter {
 public:
  TableWriter(std::FILE* out, bool jsonl, std::vector<std::string> columns)
      : out_(out), jsonl_(jsonl), columns_(std::move(columns)) {
    if (jsonl_) return;
    for (size_t i = 0; i < columns_.size(); ++i) std::fprintf(out_, "%s%s", i ? "," : "", columns_[i].c_str());
    std::fputc('\n', out_);
  }
  struct Value {
    std::string text;
    bool quoted = false;
    bool null = false;
  };
  template <std::floating_point T>  // float columns as floats: their shortest text
  static Value num(T v) {
    if (std::isinf(v)) return {v > 0 ? "inf" : "-inf", false, true};  // CSV's text; JSON's null
    return {std::isfinite(v) ? json_number(v) : "", false, !std::isfinite(v)};
  }
  static Value integer(int64_t v) { return {std::to_string(v)}; }
  static Value str(std::string s) { return {std::move(s), true}; }

  void row(const std::vector<Value>& values) {
    FORGE_CHECK(values.size() == columns_.size(), "export row width");
    std::string line = jsonl_ ? "{" : "";
    for (size_t i = 0; i < values.size(); ++i) {
      const Value& v = values[i];
      if (jsonl_)
        line += (i ? ", " : "") + json_string(columns_[i]) + ": " +
                (v.null ? "null" : v.quoted ? json_string(v.text) : v.text);
      else
        line += (i ? "," : "") + (v.quoted ? csv_field(v.text) : v.text);
    }
    line += jsonl_ ? "}\n" : "\n";
    std::fwrite(line.data(), 1, line.size(), out_);
    ++rows_;
  }
  size_t rows() const { return rows_; }

 private:
  std::FILE* out_;
  bool jsonl_;
  std::vector<std::string> columns_;
  size_t rows_ = 0;
};

using V = TableWriter;

size_t export_episodes(const RolloutReader& r, std::FILE* out, bool jsonl) {
  const EpisodeTable e = r.episodes();
  TableWriter w(out, jsonl,
                {"index", "episode_id", "env", "template_family", "task_id", "group", "consumed_step", "staleness",
                 "outcome", "process", "efficiency", "safety", "success", "abandoned", "turns", "tool_errors",
                 "recoveries", "safety_events", "test_runs", "n_calls", "generated_tokens", "final_length"});
  for (size_t i = 0; i < e.size(); ++i)
    w.row({V::integer(static_cast<int64_t>(i)), {std::to_string(e.episode_id[i])}, V::str(r.domains()[e.env[i]]),
           V::str(r.template_families()[e.template_family[i]]), {std::to_string(e.task_id[i])},
           V::integer(e.group[i]), V::integer(e.consumed_step[i]), V::integer(e.staleness[i]), V::num(e.outcome[i]),
           V::num(e.process[i]), V::num(e.efficiency[i]), V::num(e.safety[i]), V::integer(e.success[i]),
           V::integer(e.abandoned[i]), V::integer(e.turns[i]), V::integer(e.tool_errors[i]),
           V::integer(e.recoveries[i]), V::integer(e.safety_events[i]), V::integer(e.test_runs[i]),
           V::integer(e.n_calls[i]), V::integer(e.generated_tokens[i]), V::integer(e.final_length[i])});
  return w.rows();
}

size_t export_steps(const RolloutReader& r, std::FILE* out, bool jsonl) {
  TableWriter w(out, jsonl,
                {"step", "objective", "reward_mean", "outcome_mean", "process_mean", "efficiency_mean", "safety_mean",
                 "success_rate", "clip_fraction", "masked_fraction", "engine_mismatch", "stale_drift", "kl", "entropy",
                 "tree_token_ratio", "tokens_per_s", "step_seconds", "store_seconds", "grad_norm", "lr", "groups",
                 "zero_variance_groups", "dropped_groups", "masked_groups", "abandoned"});
  // A count a file predates reads as -1: empty / null here, as a NaN metric.
  const auto count = [](int32_t v) { return v < 0 ? V::Value{"", false, true} : V::integer(v); };
  for (const StepMetrics& m : r.steps())
    w.row({V::integer(m.step), V::num(m.objective), V::num(m.reward_mean), V::num(m.outcome_mean),
           V::num(m.process_mean), V::num(m.efficiency_mean), V::num(m.safety_mean), V::num(m.success_rate),
           V::num(m.clip_fraction), V::num(m.masked_fraction), V::num(m.engine_mismatch), V::num(m.stale_drift),
           V::num(m.kl), V::num(m.entropy), V::num(m.tree_token_ratio), V::num(m.tokens_per_s),
           V::num(m.step_seconds), V::num(m.store_seconds), V::num(m.grad_norm), V::num(m.lr), count(m.groups),
           count(m.zero_variance_groups), count(m.dropped_groups), count(m.masked_groups), count(m.abandoned)});
  return w.rows();
}

size_t export_tokens(const Trajectory& t, std::FILE* out, bool jsonl) {
  TableWriter w(out, jsonl, {"call", "position", "token", "loss_mask", "logprob", "version"});
  for (size_t c = 0; c < t.calls.size(); ++c) {
    const LlmCall& call = t.calls[c];
    const int64_t nc = static_cast<int64_t>(call.context.size());
    for (int64_t p = 0; p < nc; ++p)
      w.row({V::integer(static_cast<int64_t>(c)), V::integer(p), V::integer(call.context[p]), V::integer(0),
             V::num(std::nan("")), V::integer(-1)});
    for (size_t g = 0; g < call.generated.size(); ++g)
      w.row({V::integer(static_cast<int64_t>(c)), V::integer(nc + static_cast<int64_t>(g)),
             V::integer(call.generated[g]), V::integer(1), V::num(call.logprobs[g]), V::integer(call.versions[g])});
  }
  return w.rows();
}

// `where` ("'FILE', episode N") names a token the tokenizer refuses.
size_t export_decoded(const Trajectory& t, const Tokenizer& tok, std::FILE* out, bool jsonl, const std::string& where) {
  TableWriter w(out, jsonl, {"call", "context", "generated", "generated_tokens", "logprob_sum"});
  for (size_t c = 0; c < t.calls.size(); ++c) {
    const LlmCall& call = t.calls[c];
    double lp = 0;
    for (float x : call.logprobs) lp += x;
    std::string context, generated;
    try {
      context = tok.decode(call.context);
      generated = tok.decode(call.generated);
    } catch (const InputError& e) {
      throw InputError(where + ", call " + std::to_string(c) + ": " + e.what() + " (a damaged file, or another run's tokenizer)");
    }
    w.row({V::integer(static_cast<int64_t>(c)), V::str(context), V::str(generated),
           V::integer(static_cast<int64_t>(call.generated.size())), V::num(lp)});
  }
  return w.rows();
}

// 1 or 2 when `path` is the file this process's stdout or stderr is (the
// same device and inode), else -1.
int stream_behind(const std::string& path) {
  struct stat target {};
  if (::stat(path.c_str(), &target) != 0) return -1;
  for (const int fd : {1, 2}) {
    struct stat held {};
    if (::fstat(fd, &held) == 0 && held.st_dev == target.st_dev && held.st_ino == target.st_ino) return fd;
  }
  return -1;
}

int run_export(int argc, char** argv) {
  std::string file, format, out_path;
  int64_t episode = -1;
  bool decode = false, steps = false;
  OptionSet opts("forge export",
                 "Write tables from a rollouts.h5 as CSV or JSON lines: one row per episode, with\n"
                 "--steps one row per training step, or with --episode N the tokens of one episode\n"
                 "(--decode: its calls as text).");
  opts.add_positional("FILE", &file, "the rollouts.h5 file, or a run folder holding one");
  opts.add("format", &format, std::string("csv"), "csv | jsonl", one_of({"csv", "jsonl"}));
  opts.add("out", &out_path, std::string(""), "output file; empty = stdout");
  opts.add("episode", &episode, int64_t{-1}, "row index of one episode to export; -1 = the episode table",
           at_least(-1));
  opts.add("decode", &decode, false, "with --episode: one row per LLM call with decoded text");
  opts.add("steps", &steps, false, "one row per training step (the steps table) instead of the episode table");
  opts.allow_config_file(false);
  if (!cli::parse_options(opts, argc, argv)) return 0;
  if (decode && episode < 0) throw InputError("--decode needs --episode N (the episode to decode)");
  if (steps && episode >= 0) throw InputError("--steps and --episode are two different tables: give one");

  file = resolve_rollouts(file);
  std::error_code ec;
  if (!out_path.empty() && std::filesystem::equivalent(file, out_path, ec))
    throw InputError("--out '" + out_path + "' is the rollouts file itself; write the export elsewhere");
  const RolloutReader reader(file);
  // The streams forge holds are written through: opening /dev/stdout (or
  // /dev/fd/1, /proc/self/fd/1, ...) anew truncates the file a shell
  // redirected it to and writes from its start.
  const int held_fd = out_path.empty() ? -1 : stream_behind(out_path);
  const bool held_stream = held_fd >= 0;
  if (held_fd == 2)  // forge logs there (its start-up line is already in it)
    throw InputError("--out '" + out_path + "' is forge's standard error, where it logs; leave out --out to write "
                     "the table to standard output");
  // A regular file (or a new one) OUT is written as OUT.tmp-<pid>, renamed to
  // OUT once complete: an error (a bad --episode, a full disk) leaves an
  // existing OUT as it was. A link to a regular file is the file (the
  // temporary beside it, the link kept). Anything else is written in place:
  // a pipe, a dangling link, and the process's own streams (/dev/stdout is a
  // link through /proc to whatever stdout is; renaming over that file would
  // take it from the shell that redirected there).
  std::string target = out_path;
  const auto streams = [](const std::string& p) { return p.rfind("/dev/", 0) == 0 || p.rfind("/proc/", 0) == 0; };
  if (!out_path.empty() && !streams(out_path) &&
      std::filesystem::is_symlink(std::filesystem::symlink_status(out_path, ec))) {
    const std::filesystem::path resolved = std::filesystem::canonical(out_path, ec);
    if (!ec && !streams(resolved.string()) && std::filesystem::is_regular_file(resolved, ec))
      target = resolved.string();
  }
  const auto status = std::filesystem::symlink_status(target, ec);
  // An export replaces an earlier export, never forge's own data: an HDF5
  // file there (a run's rollouts.h5, a checkpoint) is refused.
  if (status.type() == std::filesystem::file_type::regular && h5::is_hdf5(target))
    throw InputError("--out '" + out_path + "' is an HDF5 file (rollouts or a checkpoint?); an export does not "
                     "replace it: write the export elsewhere");
  const bool via_tmp = !out_path.empty() && !held_stream && (status.type() == std::filesystem::file_type::not_found ||
                                             status.type() == std::filesystem::file_type::regular);
  const std::string write_path = via_tmp ? target + ".tmp-" + std::to_string(::getpid()) : out_path;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(nullptr, std::fclose);
  std::FILE* out = stdout;  // also where --out names it (held_fd 1)
  if (!out_path.empty() && !held_stream) {
    owned.reset(std::fopen(write_path.c_str(), "w"));
    if (!owned) throw InputError("--out: cannot write '" + out_path + "': " + std::strerror(errno));
    out = owned.get();
  }
  const auto discard = [&] {
    owned.reset();
    if (via_tmp) std::filesystem::remove(write_path, ec);
  };
  const auto fail = [&](const std::string& why) {
    discard();
    throw Error("cannot write the export to '" + out_path + "'" + why);
  };
  size_t rows = 0;
  try {
    const bool jsonl = format == "jsonl";
    if (steps) rows = export_steps(reader, out, jsonl);
    else if (episode < 0) rows = export_episodes(reader, out, jsonl);
    else if (decode)
      rows = export_decoded(reader.episode(episode), *model_source_of_config(reader.config_ini(), file).tokenizer, out,
                            jsonl, "'" + file + "', episode " + std::to_string(episode));
    else rows = export_tokens(reader.episode(episode), out, jsonl);
  } catch (...) {
    discard();
    throw;
  }
  if (std::fflush(out) != 0 || std::ferror(out)) {
    if (!owned) throw Error(std::string("cannot write the export to ") + (out == stderr ? "stderr" : "stdout"));
    fail("");
  }
  if (owned && std::fclose(owned.release()) != 0) fail("");
  if (via_tmp) {
    std::filesystem::rename(write_path, target, ec);
    if (ec) fail(": " + ec.message());
  }
  if (!out_path.empty() && !held_stream) log_info("export: wrote " + std::to_string(rows) + " rows to " + out_path);
  return 0;
}

}  // namespace
}  // namespace forge

FORGE_COMMAND("export", "write per-episode or per-step tables (or one episode's tokens / text) as CSV or JSON lines",
              forge::run_export);
