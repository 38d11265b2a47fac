// Byte-level BPE encode speed, forge against Hugging Face tokenizers, one
// core, the same corpus and vocabulary (bench/hf_tokenizer.py writes the
// corpus and times tokenizers; the SmolLM2 GGUF's vocabulary, merges, specials
// and pre-tokenizer). Each string is encoded on its own, special-token text
// included, as the rollout path encodes messages.
//
//   bench_tokenizer [--model=PATH] [--strings=12000] [--reps=3] [--no-hf]
//
// Prints MB/s and tokens/s of both and their ratios, and forge's with NFC
// applied (Qwen2's normalizer) beside it (tokenizers timed string by
// string through Python's encode, and in one encode_batch call); "tokens_equal" says both
// produced the same number of tokens (the token-exact check is the ctest
// Tokenizer.BpeMatchesHfTokenizers). Without the model: "model": "none".
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "core/cache_dir.hpp"
#include "pretrained/gguf_file.hpp"
#include "pretrained/tokenizer_files.hpp"
#include "tokenizer/bpe_tokenizer.hpp"

using namespace forge;

namespace {

std::string default_model() { return cache_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

}  // namespace

static int bench_main(int argc, char** argv) {
  bench::Flags flags(argc, argv);
  const std::string model = flags.get("model", default_model());
  const int strings = flags.get("strings", 12000), reps = flags.get("reps", 3);
  const bool with_hf = !flags.on("no-hf");
  const bool model_given = flags.given("model");
  flags.finish();
  if (strings < 1 || reps < 1) bench::Flags::usage("--strings and --reps must be at least 1");
  if (model_given && !std::filesystem::exists(model)) bench::Flags::usage("--model: no file '" + model + "'");
  if (!std::filesystem::exists(model)) {
    std::printf("bench_tokenizer: no model at %s (run tools/setup.sh)\n", model.c_str());
    bench::print_json({{"model", "\"none\""}});
    return 0;
  }
  const std::string corpus_path =
      (std::filesystem::temp_directory_path() / ("forge_tokenizer_corpus_" + std::to_string(getpid()) + ".jsonl")).string();
  const std::string cmd = bench::python() + " " + bench::shell_quoted(bench::script("hf_tokenizer.py")) +
                          " --model " + bench::shell_quoted(model) + " --out " + bench::shell_quoted(corpus_path) +
                          " --strings " + std::to_string(strings) +
                          " --reps " + std::to_string(with_hf ? reps : 0);
  double hf_s = -1, hf_batch_s = -1, hf_tokens = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    double v;
    while (fgets(line, sizeof line, p)) {
      if (std::sscanf(line, "hf_encode_s %lf", &v) == 1) hf_s = v;
      else if (std::sscanf(line, "hf_batch_s %lf", &v) == 1) hf_batch_s = v;
      else if (std::sscanf(line, "hf_tokens %lf", &v) == 1) hf_tokens = v;
    }
    pclose(p);
  }
  std::vector<std::string> corpus;
  {
    std::ifstream in(corpus_path);
    std::string line;
    while (std::getline(in, line)) corpus.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  std::filesystem::remove(corpus_path);
  if (corpus.empty()) {
    std::printf("bench_tokenizer: the corpus could not be written (python3 failed)\n");
    return 1;
  }
  size_t bytes = 0;
  for (const auto& s : corpus) bytes += s.size();

  const PretrainedTokenizer pt = tokenizer_from_gguf(GgufFile(model));
  size_t tokens = 0;
  const double forge_s = bench::median_seconds(1, reps, [&] {
    tokens = 0;
    for (const auto& s : corpus) tokens += pt.tokenizer->encode(s).size();
  });

  // The same vocabulary with Qwen2's NFC normalizer, side by side: what NFC
  // costs on text that is mostly NFC already (a quick check per piece).
  BpeVocabulary nfc_vocab = pt.tokenizer->vocabulary();
  nfc_vocab.nfc = true;
  const BpeTokenizer nfc_tok(std::move(nfc_vocab), model);
  const double nfc_s = bench::median_seconds(1, reps, [&] {
    for (const auto& s : corpus) nfc_tok.encode(s);
  });

  const double mb = bytes / 1e6;
  std::printf("bench_tokenizer: %zu strings, %.2f MB, %zu tokens (SmolLM2 vocabulary), one core\n", corpus.size(), mb,
              tokens);
  std::printf("%-14s %10s %12s\n", "", "MB/s", "tokens/s");
  std::printf("%-14s %10.2f %12.0f\n", "forge", mb / forge_s, tokens / forge_s);
  std::printf("%-14s %10.2f %12s   (the same with NFC, as Qwen2's tokenizer.json: %.2fx the time)\n", "forge nfc",
              mb / nfc_s, "", nfc_s / forge_s);
  if (hf_s > 0) {
    std::printf("%-14s %10.2f %12.0f   (encode, string by string from Python)\n", "tokenizers", mb / hf_s, hf_tokens / hf_s);
    std::printf("%-14s %10.2f %12.0f   (encode_batch, one call, one thread)\n", "tokenizers", mb / hf_batch_s,
                hf_tokens / hf_batch_s);
  }
  const auto ratio = [&](double hf) {
    char c[32] = "n/a";
    if (hf > 0) std::snprintf(c, sizeof c, "%.2f", hf / forge_s);
    return std::string(c);
  };
  std::printf("ratio forge / tokenizers: %s (string by string), %s (encode_batch)\n", ratio(hf_s).c_str(),
              ratio(hf_batch_s).c_str());
  bench::print_json({{"strings", bench::num(static_cast<double>(corpus.size()))},
                     {"bytes", bench::num(static_cast<double>(bytes))},
                     {"tokens", bench::num(static_cast<double>(tokens))},
                     {"forge_mb_s", bench::num(mb / forge_s)},
                     {"forge_nfc_mb_s", bench::num(mb / nfc_s)},
                     {"nfc_time_ratio", bench::num(nfc_s / forge_s)},
                     // null where Hugging Face did not run (--no-hf, no reference packages)
                     {"hf_mb_s", hf_s > 0 ? bench::num(mb / hf_s) : "null"},
                     {"hf_batch_mb_s", hf_batch_s > 0 ? bench::num(mb / hf_batch_s) : "null"},
                     {"ratio", hf_s > 0 ? bench::num(hf_s / forge_s) : "null"},
                     {"ratio_batch", hf_batch_s > 0 ? bench::num(hf_batch_s / forge_s) : "null"},
                     {"tokens_equal", hf_tokens < 0 ? "null" : hf_tokens == static_cast<double>(tokens) ? "true"
                                                                                                       : "false"}});
  return 0;
}

int main(int argc, char** argv) { return forge::bench::guarded_main(argc, argv, bench_main); }
