// Reading pretrained models, without the reference packages: GGUF files and
// their quantized types (hand-built blocks with known values), safetensors
// files (round trips, shards), Hugging Face folders, and every kind of bad
// input, which must be an InputError naming the file and what was wrong,
// never a crash: a missing or truncated file (every prefix of a GGUF and of a
// safetensors file), a foreign file, an unsupported architecture or tensor
// type, a tensor of the wrong shape or dtype, a tokenizer that does not fit
// the model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/model_config.hpp"
#include "pretrained/ggml_quants.hpp"
#include "pretrained/gguf_file.hpp"
#include "pretrained/hf_export.hpp"
#include "pretrained/pretrained_model.hpp"
#include "pretrained/safetensors_file.hpp"
#include "tokenizer/bpe_tokenizer.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace forge {
namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("forge_pretrained_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

void expect_input_error(const std::function<void()>& f, const std::string& part) {
  const std::string m = message_of(f);
  EXPECT_NE(m.find(part), std::string::npos) << "message: " << m << "\nexpected to contain: " << part;
}

// ---- a minimal GGUF writer for the tests ------------------------------------

class GgufWriter {
 public:
  void kv_string(const std::string& k, const std::string& v) { kv(k, 8), str(v, meta_); }
  void kv_u32(const std::string& k, uint32_t v) { kv(k, 4), put(v, meta_); }
  void kv_f32(const std::string& k, float v) { kv(k, 6), put(v, meta_); }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    kv(k, 9), put(uint32_t{8}, meta_), put(uint64_t(v.size()), meta_);
    for (const auto& s : v) str(s, meta_);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    kv(k, 9), put(uint32_t{5}, meta_), put(uint64_t(v.size()), meta_);
    for (int32_t x : v) put(x, meta_);
  }
  // dims fastest first; data already in the type's encoding.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const std::vector<uint8_t>& data) {
    ++n_tensors_;
    str(name, infos_);
    put(uint32_t(dims.size()), infos_);
    for (uint64_t d : dims) put(d, infos_);
    put(type, infos_);
    while (data_.size() % 32) data_.push_back(0);
    put(uint64_t(data_.size()), infos_);
    data_.insert(data_.end(), data.begin(), data.end());
  }
  void tensor_f32(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    tensor(name, std::move(dims), ggml::kF32, b);
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    put(uint32_t{0x46554747}, out);
    put(uint32_t{3}, out);
    put(uint64_t(n_tensors_), out);
    put(uint64_t(n_kv_), out);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    while (out.size() % 32) out.push_back(0);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }
  void write(const std::string& path) const {
    const auto b = bytes();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }

 private:
  template <class T>
  static void put(T v, std::vector<uint8_t>& out) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
  }
  static void str(const std::string& s, std::vector<uint8_t>& out) {
    put(uint64_t(s.size()), out);
    out.insert(out.end(), s.begin(), s.end());
  }
  void kv(const std::string& k, uint32_t type) {
    ++n_kv_;
    str(k, meta_);
    put(type, meta_);
  }
  std::vector<uint8_t> meta_, infos_, data_;
  size_t n_tensors_ = 0, n_kv_ = 0;
};

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(uint8_t(v & 0xFF));
  b.push_back(uint8_t(v >> 8));
}

// A byte-level vocabulary: the 256 byte symbols, three merges, two specials.
BpeVocabulary tiny_vocab() {
  BpeVocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(to_byte_level(std::string(1, char(b))));
  v.merges = {{"a", "b"}, {"ab", "c"}, {"Ġ", "a"}};
  v.tokens.push_back("ab");
  v.tokens.push_back("abc");
  v.tokens.push_back("Ġa");
  v.tokens.push_back("<|im_start|>");
  v.tokens.push_back("<|im_end|>");
  v.added = {{259, true}, {260, true}};
  v.pre = PreTokenizer::kSmolLm;
  return v;
}

const char* const kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ModelConfig tiny_llama() {
  ModelConfig c;
  c.vocab = 261;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_dim = 24;
  c.rope_base = 10000;
  c.norm_eps = 1e-5f;
  return c;
}

// A tiny Hugging Face llama folder written by forge's exporter.
std::string tiny_hf_folder(const std::string& name, bool qwen2 = false) {
  const std::string dir = temp_dir(name);
  ModelConfig c = tiny_llama();
  c.qkv_bias = qwen2;
  std::vector<float> w(ParamLayout(c).total);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i));
  HfExport e;
  e.architecture = qwen2 ? "qwen2" : "llama";
  e.config = c;
  e.weights = &w;
  e.tokenizer.tokenizer = std::make_shared<BpeTokenizer>(tiny_vocab(), "test");
  e.tokenizer.chat_template = kChatMl;
  e.tokenizer.eos_id = 260;
  export_hf_folder(e, dir);
  return dir;
}

void rewrite_json(const std::string& path, const std::function<void(json&)>& edit) {
  json j;
  {
    std::ifstream in(path);
    j = json::parse(in);
  }
  edit(j);
  std::ofstream(path) << j.dump(2);
}

// ---- GGUF -------------------------------------------------------------------

TEST(Gguf, ReadsMetadataAndTensors) {
  const std::string dir = temp_dir("meta");
  GgufWriter g;
  g.kv_string("general.architecture", "llama");
  g.kv_u32("llama.block_count", 3);
  g.kv_f32("llama.rope.freq_base", 500000.0f);
  g.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
  g.kv_i32s("tokenizer.ggml.token_type", {1, 1, 3});
  g.tensor_f32("w", {3, 2}, {1, 2, 3, 4, 5, 6});
  g.write(dir + "/m.gguf");
  const GgufFile f(dir + "/m.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 3);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.rope.freq_base")), 500000.0f);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
  ASSERT_NE(f.find("w"), nullptr);
  EXPECT_EQ(f.find("w")->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(f.tensor(*f.find("w")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  expect_input_error([&] { f.get_int("general.architecture"); }, "is not an integer");
  expect_input_error([&] { f.get_string("no.such.key"); }, "no metadata 'no.such.key'");
}

// One block of each quantized type with known values.
TEST(Gguf, DequantizesEveryTypeForgeReads) {
  const std::string dir = temp_dir("quant");
  GgufWriter g;
  std::vector<uint8_t> q8, q40, q41, f16, bf16;
  put16(q8, ggml::float_to_half(0.5f));
  for (int i = 0; i < 32; ++i) q8.push_back(uint8_t(int8_t(i - 16)));
  put16(q40, ggml::float_to_half(0.25f));
  for (int i = 0; i < 16; ++i) q40.push_back(uint8_t((i & 0xF) | ((15 - i) << 4)));
  put16(q41, ggml::float_to_half(2.0f));
  put16(q41, ggml::float_to_half(-1.0f));
  for (int i = 0; i < 16; ++i) q41.push_back(uint8_t((i & 0xF) | ((i & 0xF) << 4)));
  for (int i = 0; i < 4; ++i) put16(f16, ggml::float_to_half(0.125f * float(i) - 0.2f));
  for (int i = 0; i < 4; ++i) put16(bf16, ggml::float_to_bf16(3.0f * float(i) + 0.5f));
  g.tensor("q8", {32}, ggml::kQ8_0, q8);
  g.tensor("q40", {32}, ggml::kQ4_0, q40);
  g.tensor("q41", {32}, ggml::kQ4_1, q41);
  g.tensor("f16", {4}, ggml::kF16, f16);
  g.tensor("bf16", {4}, ggml::kBF16, bf16);
  g.tensor("q6k", {256}, 14, std::vector<uint8_t>(210, 0));
  g.write(dir + "/q.gguf");
  const GgufFile f(dir + "/q.gguf");
  const auto q8v = f.tensor(*f.find("q8"));
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(q8v[i], 0.5f * float(i - 16));
  const auto q40v = f.tensor(*f.find("q40"));
  for (int i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(q40v[i], 0.25f * float(i - 8));              // low nibbles: the first 16
    EXPECT_FLOAT_EQ(q40v[i + 16], 0.25f * float(15 - i - 8));    // high nibbles: the last 16
  }
  const auto q41v = f.tensor(*f.find("q41"));
  for (int i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(q41v[i], 2.0f * float(i) - 1.0f);
    EXPECT_FLOAT_EQ(q41v[i + 16], 2.0f * float(i) - 1.0f);
  }
  const auto f16v = f.tensor(*f.find("f16"));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f16v[i], 0.125f * float(i) - 0.2f, 1e-3);
  const auto bf16v = f.tensor(*f.find("bf16"));
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(bf16v[i], 3.0f * float(i) + 0.5f);
  expect_input_error([&] { f.tensor(*f.find("q6k")); }, "has type Q6_K");
}

TEST(Gguf, HalfAndBf16ConversionsRoundToNearestEven) {
  for (float x : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, 1234.567f})
    EXPECT_NEAR(ggml::half_to_float(ggml::float_to_half(x)), x, std::fabs(x) * 1e-3 + 1e-7) << x;
  EXPECT_TRUE(std::isinf(ggml::half_to_float(ggml::float_to_half(70000.0f))));
  EXPECT_TRUE(std::isnan(ggml::half_to_float(ggml::float_to_half(std::nanf("")))));
  // 1 + 2^-11 lies halfway between two halves: ties go to the even one (1.0).
  EXPECT_EQ(ggml::float_to_half(1.0f + 0x1p-11f), ggml::float_to_half(1.0f));
  EXPECT_EQ(ggml::float_to_bf16(1.0f + 0x1p-8f), ggml::float_to_bf16(1.0f));
  EXPECT_EQ(ggml::bf16_to_float(ggml::float_to_bf16(3.140625f)), 3.140625f);
}

TEST(Gguf, EveryTruncationIsAnInputErrorNeverACrash) {
  const std::string dir = temp_dir("trunc");
  GgufWriter g;
  g.kv_string("general.architecture", "llama");
  g.kv_strings("tokenizer.ggml.tokens", {"x", "yz"});
  g.tensor_f32("w", {4}, {1, 2, 3, 4});
  const std::vector<uint8_t> whole = g.bytes();
  int errors = 0;
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string path = dir + "/t.gguf";
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(whole.data()),
                                                                   std::streamsize(n));
    try {
      const GgufFile f(path);
      f.tensor(*f.find("w"));
    } catch (const InputError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(errors, int(whole.size())) << "a truncated GGUF file was read without an error";
}

TEST(Gguf, ForeignMissingAndUnsupportedFilesAreInputErrors) {
  const std::string dir = temp_dir("foreign");
  std::ofstream(dir + "/not.gguf") << "this is not a model";
  expect_input_error([&] { GgufFile(dir + "/not.gguf"); }, "not a GGUF file");
  expect_input_error([&] { GgufFile(dir + "/missing.gguf"); }, "does not exist");
  GgufWriter g;
  g.kv_string("general.architecture", "falcon");
  g.write(dir + "/falcon.gguf");
  expect_input_error([&] { load_pretrained(dir + "/falcon.gguf"); }, "architecture 'falcon' is not supported");
}

// ---- safetensors ------------------------------------------------------------

TEST(Safetensors, RoundTripsFp32AndBf16AndShards) {
  const std::string dir = temp_dir("st");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const std::vector<float> b = {0.1f, 0.2f};
  write_safetensors(dir + "/model.safetensors", {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}});
  const SafetensorsModel one(dir);
  EXPECT_EQ(one.shape("a"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(one.read("a"), a);
  EXPECT_EQ(one.read("b"), b);
  write_safetensors(dir + "/h.safetensors", {{"a", {2, 3}, a.data()}}, true);
  const SafetensorsFile h(dir + "/h.safetensors");
  EXPECT_EQ(h.entries().at("a").dtype, "BF16");
  EXPECT_EQ(h.read("a"), a);  // these values are exact in bf16
  // Two shards and an index.
  const std::string sharded = temp_dir("shards");
  write_safetensors(sharded + "/model-00001-of-00002.safetensors", {{"a", {2, 3}, a.data()}});
  write_safetensors(sharded + "/model-00002-of-00002.safetensors", {{"b", {2}, b.data()}});
  std::ofstream(sharded + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})";
  const SafetensorsModel two(sharded);
  EXPECT_EQ(two.read("a"), a);
  EXPECT_EQ(two.read("b"), b);
  expect_input_error([&] { two.read("c"); }, "has no tensor 'c'");
}

TEST(Safetensors, EveryTruncationAndBadHeaderIsAnInputError) {
  const std::string dir = temp_dir("stbad");
  const std::vector<float> a = {1, 2, 3, 4};
  write_safetensors(dir + "/whole.safetensors", {{"a", {4}, a.data()}});
  std::ifstream in(dir + "/whole.safetensors", std::ios::binary);
  const std::vector<char> whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int errors = 0;
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string path = dir + "/t.safetensors";
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(whole.data(), std::streamsize(n));
    try {
      SafetensorsFile(path).read("a");
    } catch (const InputError&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, int(whole.size()));
  // A header that is not JSON, and a dtype forge does not read.
  std::string header = "{not json}";
  uint64_t n = header.size();
  std::ofstream bad(dir + "/bad.safetensors", std::ios::binary);
  bad.write(reinterpret_cast<const char*>(&n), 8);
  bad << header;
  bad.close();
  expect_input_error([&] { SafetensorsFile(dir + "/bad.safetensors"); }, "header is not JSON");
  header = R"({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})";
  n = header.size();
  std::ofstream i64(dir + "/i64.safetensors", std::ios::binary);
  i64.write(reinterpret_cast<const char*>(&n), 8);
  i64 << header << std::string(8, '\0');
  i64.close();
  expect_input_error([&] { SafetensorsFile(dir + "/i64.safetensors").read("x"); }, "has dtype I64");
}

// ---- Hugging Face folders -----------------------------------------------------

TEST(PretrainedModel, LoadsWhatTheExporterWrites) {
  for (bool qwen2 : {false, true}) {
    const std::string dir = tiny_hf_folder(qwen2 ? "roundtrip_qwen2" : "roundtrip_llama", qwen2);
    const PretrainedModel m = load_pretrained(dir);
    EXPECT_EQ(m.architecture, qwen2 ? "qwen2" : "llama");
    EXPECT_EQ(m.config.d_model, 16);
    EXPECT_EQ(m.config.qkv_bias, qwen2);
    ASSERT_EQ(m.weights.size(), ParamLayout(m.config).total);
    for (size_t i = 0; i < m.weights.size(); ++i) ASSERT_EQ(m.weights[i], std::sin(0.37f * float(i))) << i;
    EXPECT_EQ(m.tokenizer.tokenizer->encode("abc ab<|im_end|>"), (std::vector<int32_t>{257, 32, 256, 260}));
  }
}

TEST(PretrainedModel, RefusesUnsupportedArchitecturesByName) {
  const std::string dir = tiny_hf_folder("arch");
  for (const std::string type : {"gemma", "qwen3", "mistral"}) {
    rewrite_json(dir + "/config.json", [&](json& j) { j["model_type"] = type; });
    expect_input_error([&] { load_pretrained(dir); }, "architecture '" + type + "' is not supported");
  }
  rewrite_json(dir + "/config.json", [](json& j) {
    j["model_type"] = "llama";
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  });
  expect_input_error([&] { load_pretrained(dir); }, "rope_scaling type 'yarn'");
  rewrite_json(dir + "/config.json", [](json& j) {
    j["rope_scaling"] = nullptr;
    j["attention_bias"] = true;
  });
  expect_input_error([&] { load_pretrained(dir); }, "attention_bias");
  rewrite_json(dir + "/config.json", [](json& j) {
    j["attention_bias"] = false;
    j["hidden_act"] = "gelu";
  });
  expect_input_error([&] { load_pretrained(dir); }, "hidden_act 'gelu'");
}

TEST(PretrainedModel, NamesTheTensorOfTheWrongShapeOrDtype) {
  const std::string dir = tiny_hf_folder("shape");
  rewrite_json(dir + "/config.json", [](json& j) { j["intermediate_size"] = 32; });
  expect_input_error([&] { load_pretrained(dir); }, "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [24, 16]");
  const std::string dtype = tiny_hf_folder("dtype");
  // Rewrite one tensor's dtype in the header (same byte size: I32 for F32).
  std::fstream f(dtype + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), std::streamsize(n));
  const size_t at = header.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  header.replace(at, 5, "\"I32\"");
  f.seekp(8);
  f.write(header.data(), std::streamsize(n));
  f.close();
  expect_input_error([&] { load_pretrained(dtype); }, "has dtype I32");
}

TEST(PretrainedModel, MissingOrForeignFilesAreInputErrors) {
  expect_input_error([] { load_pretrained("/nonexistent/model"); }, "does not exist");
  const std::string empty = temp_dir("empty");
  expect_input_error([&] { load_pretrained(empty); }, "has no config.json");
  const std::string notok = tiny_hf_folder("notok");
  fs::remove(notok + "/tokenizer.json");
  expect_input_error([&] { load_pretrained(notok); }, "has no tokenizer.json");
  const std::string noweights = tiny_hf_folder("noweights");
  fs::remove(noweights + "/model.safetensors");
  expect_input_error([&] { load_pretrained(noweights); }, "neither model.safetensors nor model.safetensors.index.json");
  const std::string truncated = tiny_hf_folder("truncated");
  fs::resize_file(truncated + "/model.safetensors", fs::file_size(truncated + "/model.safetensors") - 100);
  expect_input_error([&] { load_pretrained(truncated); }, "truncated");
}

TEST(PretrainedModel, RefusesATokenizerThatDoesNotFitTheModel) {
  const std::string dir = tiny_hf_folder("vocab");
  rewrite_json(dir + "/config.json", [](json& j) { j["vocab_size"] = 200; });  // embedding smaller than the tokenizer
  expect_input_error([&] { load_pretrained(dir, false); }, "has 261 tokens but the model's embedding only 200 rows");
  rewrite_json(dir + "/config.json", [](json& j) { j["vocab_size"] = 4000; });
  expect_input_error([&] { load_pretrained(dir, false); }, "do not belong together");
  // A tokenizer.json of another kind of model.
  rewrite_json(dir + "/config.json", [](json& j) { j["vocab_size"] = 261; });
  rewrite_json(dir + "/tokenizer.json", [](json& j) { j["model"]["type"] = "Unigram"; });
  expect_input_error([&] { load_pretrained(dir, false); }, "model type 'Unigram'");
  rewrite_json(dir + "/tokenizer.json", [](json& j) {
    j["model"]["type"] = "BPE";
    j["pre_tokenizer"] = {{"type", "Metaspace"}};
  });
  expect_input_error([&] { load_pretrained(dir, false); }, "pre_tokenizer");
}

}  // namespace
}  // namespace forge
