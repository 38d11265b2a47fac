// The side of forge that the Hugging Face oracle tests compare
// (tests/reference/test_hf_*.py run it): JSON lines in, JSON lines out.
//
//   forge_hf_dump tokenize MODEL [--pre NAME] [--nfc on|off]
//                                               stdin: a JSON string per line;
//                                               stdout: its token ids
//   forge_hf_dump nfc MODEL                     stdin: a JSON string per line;
//                                               stdout: its NFC (tokenizer/nfc.hpp)
//   forge_hf_dump prompt MODEL                  stdin: a JSON string per line;
//                                               stdout: its ids as a text prompt
//                                               (ScaffoldVocabulary::encode_prompt)
//   forge_hf_dump decode MODEL                  stdin: token ids; stdout: the text
//   forge_hf_dump chat MODEL                    stdin: {"messages": [...],
//                                               "add_generation_prompt": bool};
//                                               stdout: the native chat format's tokens
//   forge_hf_dump logits MODEL OUT_DIR          stdin: token ids; writes the FP32
//                                               logits of every position of line i
//                                               to OUT_DIR/logits_<i>.npy [T, V]
//   forge_hf_dump generate MODEL N              stdin: prompt ids; stdout: the N
//                                               greedy tokens the rollout engine adds
//
// MODEL is a GGUF file or a Hugging Face folder (logits and generate also take
// a checkpoint, .h5, of a run that started from one); --pre replaces the
// tokenizer's pre-tokenizer (gpt2, smollm, llama3, qwen2), so that one
// vocabulary can test every pattern, and --nfc on normalizes as Qwen2's
// tokenizer.json does.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/scaffold_vocabulary.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "core/npy.hpp"
#include "model/policy_model.hpp"
#include "model/rollout_engine.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/run_checkpoints.hpp"
#include "pretrained/model_source.hpp"
#include "pretrained/pretrained_model.hpp"
#include "pretrained/tokenizer_files.hpp"
#include "tokenizer/chat_format.hpp"
#include "tokenizer/nfc.hpp"

using namespace forge;
using nlohmann::json;

namespace {

PretrainedTokenizer load(const std::string& model) {
  if (std::filesystem::is_directory(model)) return tokenizer_from_hf_folder(model);
  return tokenizer_from_gguf(GgufFile(model));
}

// One sequence as a bin whose head rows are all its positions.
PackedBin chain(const std::vector<int32_t>& ids) {
  PackedBin b;
  const int T = static_cast<int>(ids.size());
  for (int t = 0; t < T; ++t) {
    b.token.push_back(ids[t]);
    b.position.push_back(t);
    b.subtree_end.push_back(T);
    b.head_row.push_back(t);
    b.row_begin.push_back(t);
    b.target.push_back(t + 1 < T ? ids[t + 1] : 0);
  }
  b.row_begin.push_back(T);
  return b;
}

// A pretrained model (GGUF file, Hugging Face folder), or a checkpoint of a
// run that started from one (an .h5 file): its trained weights.
std::unique_ptr<PolicyModel> load_model(const std::string& path, Backend& backend) {
  if (is_pretrained_path(path)) {
    const PretrainedModel pm = load_pretrained(path);
    auto model = std::make_unique<PolicyModel>(pm.config, backend);
    model->set_params(pm.weights);
    return model;
  }
  const ModelSource s = model_source_of(path);
  auto model = std::make_unique<PolicyModel>(s.config, backend);
  load_checkpoint(path, *model, nullptr);
  return model;
}

int model_command(const std::string& cmd, const std::string& path, const std::string& arg) {
  auto backend = make_backend("cpu");
  const std::unique_ptr<PolicyModel> loaded = load_model(path, *backend);
  PolicyModel& model = *loaded;
  std::string line;
  for (int i = 0; std::getline(std::cin, line); ++i) {
    const std::vector<int32_t> ids = json::parse(line).get<std::vector<int32_t>>();
    if (cmd == "logits") {
      BinForward out;
      out.want_logits = true;
      model.forward(chain(ids), 1.0f, &out);
      npy::save(arg + "/logits_" + std::to_string(i) + ".npy", out.logits,
                {static_cast<int64_t>(ids.size()), model.config().vocab});
    } else {
      EngineConfig ec;
      ec.max_batch = 1;
      ec.max_seq_len = static_cast<int>(ids.size()) + std::stoi(arg) + 1;
      ec.kv_cache_tokens = ec.max_seq_len + 16;
      RolloutEngine engine(model, ec);
      GenerationRequest r;
      r.prompt = ids;
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = std::stoi(arg);
      engine.submit(r);
      std::cout << json(engine.run_until_done().at(0).tokens).dump() << std::endl;
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: forge_hf_dump tokenize|decode|chat|nfc|logits|generate MODEL [ARG] [--pre NAME] [--nfc on|off]\n");
    return 2;
  }
  const std::string cmd = argv[1], model = argv[2];
  if (cmd == "logits" || cmd == "generate") {
    if (argc < 4) throw InputError(cmd + " needs a third argument");
    return model_command(cmd, model, argv[3]);
  }
  PretrainedTokenizer pt = load(model);
  std::shared_ptr<const BpeTokenizer> tok = pt.tokenizer;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag != "--pre" && flag != "--nfc") throw InputError("unknown flag '" + flag + "'");
    BpeVocabulary v = tok->vocabulary();
    if (flag == "--pre") {
      v.pre = parse_pre_tokenizer(value);
      v.ignore_merges = v.pre == PreTokenizer::kLlama3;  // as the reference's llama3 tokenizer (and a GGUF's)
    } else {
      v.nfc = value == "on";
    }
    tok = std::make_shared<BpeTokenizer>(std::move(v), model);
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    const json in = json::parse(line);
    if (cmd == "tokenize") {
      std::cout << json(tok->encode(in.get<std::string>())).dump() << "\n";
    } else if (cmd == "nfc") {
      std::cout << json(unicode::nfc(in.get<std::string>())).dump(-1, ' ', true) << "\n";
    } else if (cmd == "chat") {
      const std::string bos = pt.bos_id >= 0 ? tok->token_text(pt.bos_id) : "";
      const ChatFormat chat(pt.chat_template, tok, bos, model);
      std::vector<ChatMessage> messages;
      for (const json& m : in.at("messages")) messages.push_back({m.at("role"), m.at("content")});
      std::cout << json(chat.render(messages, in.value("add_generation_prompt", false))).dump() << "\n";
    } else if (cmd == "prompt") {
      const std::string bos = pt.bos_id >= 0 ? tok->token_text(pt.bos_id) : "";
      const ScaffoldVocabulary vocab(std::make_shared<ChatFormat>(pt.chat_template, tok, bos, model, pt.end_ids,
                                                                  pt.text_prefix));
      std::cout << json(vocab.encode_prompt(in.get<std::string>())).dump() << "\n";
    } else if (cmd == "decode") {
      std::cout << json(tok->decode(in.get<std::vector<int32_t>>())).dump(-1, ' ', true, json::error_handler_t::replace)
                << "\n";
    } else {
      std::fprintf(stderr, "forge_hf_dump: unknown command '%s'\n", cmd.c_str());
      return 2;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    std::fprintf(stderr, "forge_hf_dump: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forge_hf_dump: error: %s\n", e.what());
    return 1;
  }
}
