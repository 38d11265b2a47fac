// Reading pretrained models, without the reference packages: GGUF files and
// their quantized types (hand-built blocks with known values), safetensors
// files (round trips, shards), Hugging Face folders, and every kind of bad
// input, which must be an InputError naming the file and what was wrong,
// never a crash: a missing or truncated file (every prefix of a GGUF and of a
// safetensors file), a foreign file, an unsupported architecture or tensor
// type, a tensor of the wrong shape or dtype, a tokenizer that does not fit
// the model, and hostile values: offsets and sizes that wrap around 2^64,
// counts and ids far beyond the file, integers that an int would truncate,
// keys of the wrong JSON type, names given twice, text that is not UTF-8.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/scaffold_vocabulary.hpp"
#include "agent/tool_call_format.hpp"
#include "backend/backend_registry.hpp"
#include "core/error.hpp"
#include "gateway/chat_messages.hpp"
#include "io_hdf5/checkpoint.hpp"
#include "learner/run_checkpoints.hpp"
#include "model/model_config.hpp"
#include "model/policy_model.hpp"
#include "pretrained/ggml_quants.hpp"
#include "pretrained/gguf_file.hpp"
#include "pretrained/hf_export.hpp"
#include "pretrained/model_fingerprint.hpp"
#include "pretrained/model_source.hpp"
#include "pretrained/pretrained_model.hpp"
#include "pretrained/safetensors_file.hpp"
#include "tokenizer/bpe_tokenizer.hpp"
#include "tokenizer/chat_format.hpp"
#include "e2e/forge_runner.hpp"
#include "unit/file_size_limit.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

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
  void kv_u64(const std::string& k, uint64_t v) { kv(k, 10), put(v, meta_); }
  void kv_f32(const std::string& k, float v) { kv(k, 6), put(v, meta_); }
  void kv_bool(const std::string& k, bool v) { kv(k, 7), meta_.push_back(v ? 1 : 0); }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    kv(k, 9), put(uint32_t{8}, meta_), put(uint64_t(v.size()), meta_);
    for (const auto& s : v) str(s, meta_);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    kv(k, 9), put(uint32_t{5}, meta_), put(uint64_t(v.size()), meta_);
    for (int32_t x : v) put(x, meta_);
  }
  void kv_u64s(const std::string& k, const std::vector<uint64_t>& v) {
    kv(k, 9), put(uint32_t{10}, meta_), put(uint64_t(v.size()), meta_);
    for (uint64_t x : v) put(x, meta_);
  }
  // An array's header alone: its element type and a count its elements need not fill.
  void kv_array_header(const std::string& k, uint32_t elem, uint64_t count) {
    kv(k, 9), put(elem, meta_), put(count, meta_);
  }
  // dims fastest first; data already in the type's encoding.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, const std::vector<uint8_t>& data) {
    ++n_tensors_;
    str(name, infos_);
    put(uint32_t(dims.size()), infos_);
    for (uint64_t d : dims) put(d, infos_);
    put(type, infos_);
    while (data_.size() % 32) data_.push_back(0);
    offset_at_.push_back(infos_.size());
    put(uint64_t(data_.size()), infos_);
    data_.insert(data_.end(), data.begin(), data.end());
  }
  void tensor_f32(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    tensor(name, std::move(dims), ggml::kF32, b);
  }
  // The i-th tensor's offset as written, into the data section.
  void set_offset(size_t i, uint64_t offset) { std::memcpy(infos_.data() + offset_at_[i], &offset, 8); }
  uint64_t data_offset() const { return (24 + meta_.size() + infos_.size() + 31) / 32 * 32; }
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
  std::vector<size_t> offset_at_;
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

// A vocabulary token with a character outside the byte-level alphabet
// decodes as its text, whole, as Hugging Face's ByteLevel decoder takes it
// ("Ġ中" was " 中": its Ġ mapped back to a space).
TEST(BpeTokenizer, ATokenOutsideTheByteAlphabetDecodesAsItsText) {
  BpeVocabulary v = tiny_vocab();
  v.tokens.push_back("\xC4\xA0\xE4\xB8\xAD");  // "Ġ中"
  const BpeTokenizer t(v, "test");
  const int32_t id = static_cast<int32_t>(v.tokens.size()) - 1;
  EXPECT_EQ(t.decode({id}), "\xC4\xA0\xE4\xB8\xAD");
  EXPECT_EQ(t.decode({258, id}), " a\xC4\xA0\xE4\xB8\xAD");  // "Ġa" is byte-level: " a"
}

// Long pieces are encoded but not cached: each distinct one was kept (a
// 1 MiB run of letters, one piece, held 7 MB), 65,536 before a clear.
TEST(BpeTokenizer, LongPiecesAreNotCached) {
  const BpeTokenizer t(tiny_vocab(), "test");
  const std::string word(300, 'a');
  EXPECT_EQ(t.encode(word).size(), 300u);
  EXPECT_EQ(t.cached_pieces(), 0u);
  EXPECT_EQ(t.encode("abc abc").size(), 3u);  // pieces "abc" and " abc": [abc], [Ġ, abc]
  EXPECT_EQ(t.cached_pieces(), 2u);
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

// tiny_llama for the exporter, its weights (sin(0.37 i)) in w.
HfExport tiny_export(std::vector<float>& w, bool qwen2) {
  ModelConfig c = tiny_llama();
  c.qkv_bias = qwen2;
  w.resize(ParamLayout(c).total);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i));
  HfExport e;
  e.architecture = qwen2 ? "qwen2" : "llama";
  e.config = c;
  e.weights = &w;
  e.tokenizer.tokenizer = std::make_shared<BpeTokenizer>(tiny_vocab(), "test");
  e.tokenizer.chat_template = kChatMl;
  e.tokenizer.eos_id = 260;
  return e;
}

// A tiny Hugging Face llama folder written by forge's exporter.
std::string tiny_hf_folder(const std::string& name, bool qwen2 = false) {
  const std::string dir = temp_dir(name);
  std::vector<float> w;
  export_hf_folder(tiny_export(w, qwen2), dir);
  return dir;
}

// A tiny llama GGUF file that load_pretrained reads (tiny_llama's sizes,
// tiny_vocab's tokenizer, every weight 0.5, or values that name their place);
// a test changes a value, a token or a tensor's name before it is written.
struct TinyGguf {
  std::map<std::string, uint64_t> ints = {{"llama.embedding_length", 16},
                                          {"llama.block_count", 1},
                                          {"llama.attention.head_count", 2},
                                          {"llama.attention.head_count_kv", 1},
                                          {"llama.feed_forward_length", 24}};
  std::map<std::string, float> floats = {{"llama.rope.freq_base", 10000.0f},
                                         {"llama.attention.layer_norm_rms_epsilon", 1e-5f}};
  std::map<std::string, bool> bools;
  std::vector<std::string> tokens = tiny_vocab().tokens;
  std::map<std::string, std::string> renamed;  // a tensor's name -> the name written
  std::map<std::string, uint32_t> no_data;      // a tensor's name -> a type it is declared as, without data
  uint64_t ffn_rows = 24;                       // the FFN tensors' rows as written
  uint64_t q_rows = 16, kv_rows = 8;            // heads x head size of the query, of the key and value
  std::string pre = "smollm";                   // tokenizer.ggml.pre; "" leaves the key out
  float ffn_value = 0.5f;                       // the FFN tensors' values
  bool coded = false;  // values that name their place: the k-th tensor written holds 10000 k + i at i
  std::vector<std::string> extra;               // tensors of 16 values written besides the model's

  std::string write(const std::string& name) const {
    const BpeVocabulary v = tiny_vocab();
    GgufWriter g;
    g.kv_string("general.architecture", "llama");
    for (const auto& [k, x] : ints) g.kv_u64(k, x);
    for (const auto& [k, x] : floats) g.kv_f32(k, x);
    for (const auto& [k, x] : bools) g.kv_bool(k, x);
    g.kv_string("tokenizer.ggml.model", "gpt2");
    if (!pre.empty()) g.kv_string("tokenizer.ggml.pre", pre);
    g.kv_strings("tokenizer.ggml.tokens", tokens);
    std::vector<int32_t> types(tokens.size(), 1);
    for (const auto& a : v.added) types[a.id] = 3;
    g.kv_i32s("tokenizer.ggml.token_type", types);
    std::vector<std::string> merges;
    for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
    g.kv_strings("tokenizer.ggml.merges", merges);
    int written = 0;
    const auto tensor = [&](const std::string& t, std::vector<uint64_t> dims) {  // dims fastest first: {in, out}
      const auto it = renamed.find(t);
      ++written;
      if (no_data.count(t)) return g.tensor(t, dims, no_data.at(t), {});
      const size_t n = dims[0] * (dims.size() > 1 ? dims[1] : 1);
      const float value = t.find("ffn_") != std::string::npos && t.find("norm") == std::string::npos ? ffn_value : 0.5f;
      std::vector<float> data(n, value);
      if (coded)
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(10000 * written + static_cast<int>(i));
      g.tensor_f32(it == renamed.end() ? t : it->second, dims, data);
    };
    const uint64_t ffn = ffn_rows;
    tensor("token_embd.weight", {16, 261});
    tensor("blk.0.attn_norm.weight", {16});
    tensor("blk.0.attn_q.weight", {16, q_rows});
    tensor("blk.0.attn_k.weight", {16, kv_rows});
    tensor("blk.0.attn_v.weight", {16, kv_rows});
    tensor("blk.0.attn_output.weight", {q_rows, 16});
    tensor("blk.0.ffn_norm.weight", {16});
    tensor("blk.0.ffn_gate.weight", {16, ffn});
    tensor("blk.0.ffn_up.weight", {16, ffn});
    tensor("blk.0.ffn_down.weight", {ffn, 16});
    tensor("output_norm.weight", {16});
    for (const std::string& e : extra) tensor(e, {16});
    const std::string path = temp_dir(name) + "/tiny.gguf";
    g.write(path);
    return path;
  }
};

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
  EXPECT_EQ(f.get_int("llama.block_count", 1, 1000), 3);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.rope.freq_base")), 500000.0f);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(f.get_ints("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
  ASSERT_NE(f.find("w"), nullptr);
  EXPECT_EQ(f.find("w")->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(f.tensor(*f.find("w")), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  expect_input_error([&] { f.get_int("general.architecture", 0, 1); }, "is not an integer");
  expect_input_error([&] { f.get_int("llama.block_count", 4, 10); },
                     "metadata 'llama.block_count' is 3, outside [4, 10]");
  expect_input_error([&] { f.get_string("no.such.key"); }, "no metadata 'no.such.key'");
  // A uint64 array element past int64 is refused, not wrapped negative.
  GgufWriter big;
  big.kv_string("general.architecture", "llama");
  big.kv_u64s("tokenizer.ggml.token_type", {1, (uint64_t{1} << 63) + 5});
  big.write(dir + "/big.gguf");
  expect_input_error([&] { GgufFile{dir + "/big.gguf"}; },
                     "metadata 'tokenizer.ggml.token_type'[1] = 9223372036854775813 is past the integers forge reads");
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
  for (int i = 0; i < 16; ++i) q41.push_back(uint8_t((i & 0xF) | ((15 - i) << 4)));  // nibbles differ: a swap shows
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
    EXPECT_FLOAT_EQ(q41v[i], 2.0f * float(i) - 1.0f);              // low nibbles: the first 16
    EXPECT_FLOAT_EQ(q41v[i + 16], 2.0f * float(15 - i) - 1.0f);    // high nibbles: the last 16
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
  // 1 + 2^-11 lies halfway between two halves: ties go to the even one (1.0);
  // 1 + 3 x 2^-11 halfway up to the even 0x3C02 (truncation gives 0x3C01).
  EXPECT_EQ(ggml::float_to_half(1.0f + 0x1p-11f), ggml::float_to_half(1.0f));
  EXPECT_EQ(ggml::float_to_half(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(ggml::float_to_half(1234.567f), 0x64D3);  // 1235: rounded up, not cut to 1234
  EXPECT_EQ(ggml::float_to_bf16(1.0f + 0x1p-8f), ggml::float_to_bf16(1.0f));
  EXPECT_EQ(ggml::float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(ggml::bf16_to_float(ggml::float_to_bf16(3.140625f)), 3.140625f);
  // Subnormal halves, exactly (a flush to zero passed the tolerance above):
  // 2^-24 is the smallest, 2^-15 has one bit set, and the largest subnormal
  // plus half a step rounds up to the smallest normal.
  EXPECT_EQ(ggml::float_to_half(0x1p-24f), 0x0001);
  EXPECT_EQ(ggml::half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(ggml::half_to_float(0x0200), 0x1p-15f);
  EXPECT_EQ(ggml::float_to_half(0x1p-15f), 0x0200);
  EXPECT_EQ(ggml::float_to_half(0x3FFp-24f + 0x1p-25f), 0x0400);
  EXPECT_EQ(ggml::float_to_half(0x1p-26f), 0x0000);  // below half the smallest: zero
  EXPECT_EQ(ggml::float_to_half(0x3p-26f), 0x0001);  // 0.75 of it: rounds up
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

// An offset near 2^64 once wrapped the bounds check (data + offset + bytes)
// and read the file's own header as weights.
TEST(Gguf, OffsetsThatWrapMisalignOrOverlapAreInputErrors) {
  const std::string path = temp_dir("offsets") + "/o.gguf";
  const auto write = [&](const std::function<void(GgufWriter&)>& edit) {
    GgufWriter g;
    g.tensor_f32("a", {4}, {1, 2, 3, 4});
    g.tensor_f32("b", {4}, {5, 6, 7, 8});
    edit(g);
    g.write(path);
  };
  write([](GgufWriter& g) { g.set_offset(0, 0 - g.data_offset()); });  // data + offset = 0 (mod 2^64)
  expect_input_error([&] { GgufFile f(path); },
                     "GGUF file '" + path + "' is truncated or corrupted: tensor 'a' (F32, 4 values at offset 18446744");
  write([](GgufWriter& g) { g.set_offset(1, 16); });
  expect_input_error([&] { GgufFile f(path); },
                     "GGUF file '" + path + "': tensor 'b' has offset 16, not a multiple of general.alignment 32");
  write([](GgufWriter& g) { g.set_offset(1, 0); });
  expect_input_error([&] { GgufFile f(path); }, "GGUF file '" + path + "': tensors 'a' and 'b' overlap");
}

// A count is checked against the bytes left before anything is reserved
// (2^32 strings once reserved 128 GiB: bad_alloc).
TEST(Gguf, ArrayCountsBeyondTheFileAreInputErrors) {
  const std::string path = temp_dir("arrays") + "/a.gguf";
  GgufWriter g;
  g.kv_array_header("tokenizer.ggml.tokens", 8, uint64_t{1} << 32);
  g.write(path);
  expect_input_error([&] { GgufFile f(path); }, "GGUF file '" + path +
                                                    "' is truncated or corrupted: array 'tokenizer.ggml.tokens' of "
                                                    "4294967296 elements");
}

// Dimensions whose product (or its bytes) overflows: 2^62 + 1 F32 values
// once made 4 bytes, passed the bounds check, and asked for 2^62 floats.
TEST(Gguf, ElementCountsThatOverflowOrSplitABlockAreInputErrors) {
  const std::string path = temp_dir("elements") + "/e.gguf";
  const auto write = [&](std::vector<uint64_t> dims, uint32_t type) {
    GgufWriter g;
    g.tensor("w", std::move(dims), type, std::vector<uint8_t>(64, 0));
    g.write(path);
  };
  write({5 * 5581, 8681 * 49477, 384773}, ggml::kF32);  // 2^62 + 1 = 5 * 5581 * 8681 * 49477 * 384773
  expect_input_error([&] { GgufFile f(path); f.tensor(*f.find("w")); },
                     "GGUF file '" + path + "' is truncated or corrupted: tensor 'w' (F32, 4611686018427387905 values");
  write({uint64_t{1} << 40, uint64_t{1} << 40}, ggml::kF32);
  expect_input_error([&] { GgufFile f(path); }, "tensor 'w' of more values than an int64 counts");
  write({48}, ggml::kQ8_0);
  expect_input_error([&] { GgufFile f(path); },
                     "GGUF file '" + path + "': tensor 'w' has rows of 48 values, not a multiple of Q8_0's block of 32");
  // 16 x 8 = 128 values, four blocks, but every block would span two rows.
  write({16, 8}, ggml::kQ8_0);
  expect_input_error([&] { GgufFile f(path); }, "tensor 'w' has rows of 16 values, not a multiple of Q8_0's block of 32");
  // An empty tensor is named as such, not as a corrupted file.
  write({16, 0}, ggml::kF32);
  expect_input_error([&] { GgufFile f(path); },
                     "GGUF file '" + path + "': tensor 'w' has a dimension of 0 (an empty tensor, which forge does not read)");
}

// The first of two once won silently.
TEST(Gguf, KeysAndTensorNamesGivenTwiceAreInputErrors) {
  const std::string path = temp_dir("twice") + "/t.gguf";
  GgufWriter keys;
  keys.kv_u32("llama.block_count", 1);
  keys.kv_u32("llama.block_count", 30);
  keys.write(path);
  expect_input_error([&] { GgufFile f(path); },
                     "GGUF file '" + path + "': metadata key 'llama.block_count' appears twice");
  GgufWriter tensors;
  tensors.tensor_f32("w", {4}, {1, 2, 3, 4});
  tensors.tensor_f32("w", {4}, {5, 6, 7, 8});
  tensors.write(path);
  expect_input_error([&] { GgufFile f(path); }, "GGUF file '" + path + "': two tensors are named 'w'");
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
  // A tensor a listed shard holds but weight_map leaves out is read from its
  // shard and named (found by review: "has no tensor"); in two shards it is
  // ambiguous.
  std::ofstream(sharded + "/model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "a2": "model-00002-of-00002.safetensors"}})";
  write_safetensors(sharded + "/model-00002-of-00002.safetensors", {{"a2", {2}, b.data()}, {"b", {2}, b.data()}});
  const SafetensorsModel unlisted(sharded);
  EXPECT_EQ(unlisted.read("b"), b);
  EXPECT_EQ(unlisted.names(), (std::vector<std::string>{"a", "a2", "b"}));
  write_safetensors(sharded + "/model-00001-of-00002.safetensors", {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}});
  const SafetensorsModel twice(sharded);  // loads: a model may not use 'b'
  EXPECT_EQ(twice.read("a"), a);
  expect_input_error([&] { twice.read("b"); }, "lists no shard for tensor 'b', which two shards hold");
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
  expect_input_error([&] { SafetensorsFile(dir + "/bad.safetensors"); }, "is not valid JSON");
  header = R"({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})";
  n = header.size();
  std::ofstream i64(dir + "/i64.safetensors", std::ios::binary);
  i64.write(reinterpret_cast<const char*>(&n), 8);
  i64 << header << std::string(8, '\0');
  i64.close();
  expect_input_error([&] { SafetensorsFile(dir + "/i64.safetensors").read("x"); }, "has dtype I64");
  // Tensors sharing bytes (each sized on its own, 3000 of them once asked
  // for 84 GB from a 7 MB file), a dtype the format lacks, and a shape or
  // offset that is not an integer (16.7 was read as 16).
  const auto header_only = [&](const std::string& name, const std::string& h, size_t data) {
    const uint64_t len = h.size();
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << h << std::string(data, '\0');
    return dir + "/" + name;
  };
  const std::string overlap = header_only(
      "overlap.safetensors",
      R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      12);
  expect_input_error([&] { SafetensorsFile f(overlap); }, "tensors 'a' and 'b' overlap");
  const std::string f9 = header_only("f9.safetensors", R"({"x": {"dtype": "F9", "shape": [1], "data_offsets": [0, 4]}})", 4);
  expect_input_error([&] { SafetensorsFile(f9).read("x"); }, "tensor 'x' has dtype F9; forge reads F32, F16 and BF16");
  const std::string frac =
      header_only("frac.safetensors", R"({"x": {"dtype": "F32", "shape": [1.7], "data_offsets": [0, 4]}})", 4);
  expect_input_error([&] { SafetensorsFile f(frac); }, "arrays of integers, not [1.7]");
  // A tensor listed twice (the second entry once won silently, as in any
  // JSON object read here: config.json too).
  const std::string twice = header_only(
      "twice.safetensors",
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      8);
  expect_input_error([&] { SafetensorsFile f(twice); }, "names the key \"a\" twice in one object");
  const std::string nested = header_only(
      "nested.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "shape": [1], "data_offsets": [0, 4]}})", 4);
  expect_input_error([&] { SafetensorsFile f(nested); }, "names the key \"shape\" twice in one object");
  // What the reference reader refuses (found by review: read here): bytes
  // of no tensor, between tensors or after them; metadata that is not
  // strings; and data_offsets of another length, named as such.
  const std::string gap = header_only(
      "gap.safetensors", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})", 32);
  expect_input_error([&] { SafetensorsFile f(gap); }, "bytes [0, 16) of its data belong to no tensor (before 'a')");
  const std::string tail = header_only(
      "tail.safetensors", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8);
  expect_input_error([&] { SafetensorsFile f(tail); }, "its data holds 8 bytes, of which the tensors take 4");
  const std::string meta = header_only(
      "meta.safetensors",
      R"({"__metadata__": {"x": 1}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  expect_input_error([&] { SafetensorsFile f(meta); }, "__metadata__ must be an object of strings, not {\"x\":1}");
  const std::string three = header_only(
      "three.safetensors", R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}})", 32);
  expect_input_error([&] { SafetensorsFile f(three); }, "data_offsets must be [begin, end], not [0,16,32]");
  // Empty tensors take no bytes wherever they sit.
  const std::string empty = header_only(
      "empty.safetensors",
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
      4);
  EXPECT_EQ(SafetensorsFile(empty).entries().size(), 2u);
  const std::string no_meta = header_only(
      "no_meta.safetensors",
      R"({"__metadata__": null, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  EXPECT_EQ(SafetensorsFile(no_meta).entries().size(), 1u);  // null: no metadata
  // The writer refuses a name given twice (its header would keep one).
  const std::vector<float> one = {1};
  EXPECT_THROW(write_safetensors(dir + "/dup.safetensors", {{"a", {1}, one.data()}, {"a", {1}, one.data()}}), Error);
}

// weight_map names files of the folder: a value of another type once threw
// nlohmann's type_error, and "../x" read a file outside the folder.
TEST(Safetensors, ShardIndexEntriesMustNameFilesOfTheFolder) {
  const std::string dir = temp_dir("index");
  const std::vector<float> a = {1, 2};
  write_safetensors(dir + "/model-00001-of-00001.safetensors", {{"a", {2}, a.data()}});
  write_safetensors(temp_dir("outside") + "/model.safetensors", {{"a", {2}, a.data()}});
  const std::string index = dir + "/model.safetensors.index.json";
  const auto with = [&](const json& file) {
    std::ofstream(index) << json{{"weight_map", {{"a", file}}}}.dump();
  };
  with("model-00001-of-00001.safetensors");
  EXPECT_EQ(SafetensorsModel(dir).read("a"), a);
  with(5);
  expect_input_error([&] { SafetensorsModel m(dir); }, "'" + index + "': weight_map['a'] is 5, not a file name");
  for (const std::string& f : std::vector<std::string>{
           "../forge_pretrained_outside_" + std::to_string(getpid()) + "/model.safetensors", "/etc/passwd",
           "sub/model.safetensors", ".."}) {
    with(f);
    expect_input_error([&] { SafetensorsModel m(dir); },
                       "'" + index + "': weight_map['a'] is '" + f + "', not the name of a file in the model's folder");
  }
}

// ---- Hugging Face folders -----------------------------------------------------

// A round trip through forge's own exporter and loader: they share
// permute_rope_rows (in inverse directions), so a layout error made the
// same way in both passes here; the layout itself against transformers is
// checked by tests/reference/test_hf_oracle.py.
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
  // Every configuration value forge keeps, at values other than the
  // loader's defaults, survives the round trip.
  std::vector<float> w;
  HfExport e = tiny_export(w, false);
  ModelConfig& c = e.config;
  c.rope_base = 500000;
  c.norm_eps = 3e-6f;
  c.tied_embeddings = true;
  c.head_dim_override = 12;
  c.rope_scaling = {8, 1, 4, 64};
  w.assign(ParamLayout(c).total, 0.25f);
  e.max_positions = 4096;
  const std::string dir = temp_dir("roundtrip_config");
  export_hf_folder(e, dir);
  const PretrainedModel m = load_pretrained(dir);
  EXPECT_EQ(m.config.rope_base, 500000);
  EXPECT_EQ(m.config.norm_eps, 3e-6f);
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.config.head_dim_override, 12);
  EXPECT_EQ(m.config.rope_scaling, c.rope_scaling);
  EXPECT_EQ(m.max_positions, 4096);
}

// transformers 5 writes RoPE as rope_parameters (rope_theta inside, null at
// the top level); it was read as no scaling and base 10000, a model loaded
// wrongly without a word.
TEST(PretrainedModel, RopeAsTransformers5WritesItIsRead) {
  const std::string dir = tiny_hf_folder("rope_v5");
  const std::string config = dir + "/config.json";
  const json llama3 = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                       {"factor", 32.0},          {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  rewrite_json(config, [&](json& j) {
    j["rope_theta"] = nullptr;
    j.erase("rope_scaling");
    j["rope_parameters"] = llama3;
  });
  PretrainedModel m = load_pretrained(dir, false);
  EXPECT_EQ(m.config.rope_base, 500000);
  EXPECT_EQ(m.config.rope_scaling, (RopeScaling{32, 1, 4, 64}));
  // Both spellings, agreeing: read; disagreeing: refused.
  rewrite_json(config, [&](json& j) {
    j["rope_theta"] = 500000.0;
    j["rope_scaling"] = llama3;
  });
  EXPECT_EQ(load_pretrained(dir, false).config.rope_scaling, (RopeScaling{32, 1, 4, 64}));
  rewrite_json(config, [&](json& j) { j["rope_scaling"]["factor"] = 8.0; });
  expect_input_error([&] { load_pretrained(dir, false); }, "rope_scaling and rope_parameters describe different");
  rewrite_json(config, [&](json& j) {
    j["rope_scaling"] = nullptr;
    j["rope_theta"] = 10000.0;
  });
  expect_input_error([&] { load_pretrained(dir, false); }, "rope_theta 10000.000000 and rope_parameters.rope_theta");
  // Plain RoPE as v5 writes it.
  rewrite_json(config, [&](json& j) {
    j["rope_theta"] = nullptr;
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  });
  m = load_pretrained(dir, false);
  EXPECT_EQ(m.config.rope_base, 1000000);
  EXPECT_FALSE(m.config.rope_scaling.enabled());
  // What forge cannot represent, by name.
  rewrite_json(config, [&](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; });
  expect_input_error([&] { load_pretrained(dir, false); }, "rope_parameters type 'yarn' is not supported");
  rewrite_json(config, [&](json& j) {
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  });
  expect_input_error([&] { load_pretrained(dir, false); },
                     "'" + config + "': rope_parameters.partial_rotary_factor != 1");
  rewrite_json(config, [&](json& j) {
    j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  });
  expect_input_error([&] { load_pretrained(dir, false); }, "rope_parameters.full_attention (RoPE per layer type)");
}

// Qwen2's default context is 32768 (LlamaConfig's 2048); an explicit
// head_dim is honoured even where hidden / heads leaves a remainder.
TEST(PretrainedModel, DefaultsFollowTheArchitectureAndAnExplicitHeadDimIsKept) {
  const std::string dir = tiny_hf_folder("defaults_qwen2", true);
  rewrite_json(dir + "/config.json", [](json& j) { j.erase("max_position_embeddings"); });
  EXPECT_EQ(load_pretrained(dir, false).max_positions, 32768);
  const std::string llama = tiny_hf_folder("defaults_llama");
  rewrite_json(llama + "/config.json", [](json& j) {
    j.erase("max_position_embeddings");
    j["hidden_size"] = 18;  // 18 / 4 heads leaves 2; head_dim 4 = floor(18 / 4) is given
    j["num_attention_heads"] = 4;
    j["head_dim"] = 4;
  });
  const PretrainedModel m = load_pretrained(llama, false);  // was "model.n_heads must divide model.d_model"
  EXPECT_EQ(m.config.head_dim(), 4);
  EXPECT_EQ(m.max_positions, 2048);
}

// Tensors forge has no place for: llama.cpp would use a GGUF's (a bias on
// the output projection loaded as a bias-free llama), so they are refused;
// transformers ignores a folder's, so they are warned about; rotary
// inv_freq buffers are expected.
TEST(PretrainedModel, TensorsWithoutAPlaceAreRefusedFromGgufAndWarnedAboutFromHf) {
  TinyGguf t;
  t.extra = {"blk.0.attn_output.bias", "blk.0.attn_q.bias"};
  const std::string gguf = t.write("gguf_extra");
  expect_input_error([&] { load_pretrained(gguf); }, "'" + gguf +
                     "' holds 2 tensor(s) forge's llama has no place for: 'blk.0.attn_output.bias', "
                     "'blk.0.attn_q.bias' (a bias or layer");
  const std::string dir = tiny_hf_folder("hf_extra");
  const auto with_extra = [&](const std::string& name) {
    std::vector<std::vector<float>> values;
    std::vector<NamedTensor> tensors;
    {
      const SafetensorsFile f(dir + "/model.safetensors");
      for (const auto& [n, entry] : f.entries())
        if (n.find("extra") == std::string::npos && n.find("inv_freq") == std::string::npos) {
          values.push_back(f.read(n));
          tensors.push_back({n, entry.shape, nullptr});
        }
    }
    values.push_back(std::vector<float>(16, 1.0f));
    tensors.push_back({name, {16}, nullptr});
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = values[i].data();
    write_safetensors(dir + "/model.safetensors", tensors);
    ::testing::internal::CaptureStderr();
    const PretrainedModel m = load_pretrained(dir);
    EXPECT_EQ(m.weights.size(), ParamLayout(m.config).total);
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_NE(with_extra("model.layers.0.self_attn.o_proj.bias_extra").find(
                "holds 1 tensor(s) forge's llama has no place for: 'model.layers.0.self_attn.o_proj.bias_extra'; "
                "they are ignored"),
            std::string::npos);
  EXPECT_EQ(with_extra("model.layers.0.self_attn.rotary_emb.inv_freq"), "");
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

// config.json's keys by type and range, each named with the file: a division
// by num_attention_heads 0 once crashed (SIGFPE), [] and model_type 5 threw
// nlohmann's type_error, 2^32 + 16 was read as 16 and 1e39 as inf.
TEST(PretrainedModel, ConfigKeysOfTheWrongTypeOrRangeAreInputErrors) {
  const std::string dir = tiny_hf_folder("config_keys");
  const std::string config = dir + "/config.json";
  const json good = [&] {
    std::ifstream in(config);
    return json::parse(in);
  }();
  const auto expect = [&](const std::function<void(json&)>& edit, const std::string& part) {
    json j = good;
    edit(j);
    std::ofstream(config) << j.dump();
    expect_input_error([&] { load_pretrained(dir); }, "'" + config + "': " + part);
  };
  expect([](json& j) { j = json::array(); }, "the file is [], not a JSON object");
  expect([](json& j) { j["model_type"] = 5; }, "model_type is 5, not a string");
  expect([](json& j) { j["num_attention_heads"] = 0; }, "num_attention_heads is 0, outside [1, 2147483647]");
  expect([](json& j) { j["hidden_size"] = (uint64_t{1} << 32) + 16; },
         "hidden_size is 4294967312, outside [1, 2147483647]");
  expect([](json& j) { j["num_hidden_layers"] = 1.5; }, "num_hidden_layers is 1.5, not an integer");
  expect([](json& j) { j["rope_theta"] = 1e39; }, "rope_theta is 1e+39; it must be a finite number above 1");
  expect([](json& j) { j["rms_norm_eps"] = 0; }, "rms_norm_eps is 0; it must be a finite number above 0");
  expect([](json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", "8"}}; },
         "rope_scaling.factor is \"8\", not a number");
  expect([](json& j) { j["tie_word_embeddings"] = "yes"; }, "tie_word_embeddings is \"yes\", not true or false");
  expect([](json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads is 3; it must divide num_attention_heads (2)");
  // Llama 3 RoPE scaling needs its four keys (a guessed
  // original_max_position_embeddings of 8192 loaded silently) and its rules,
  // by the file's names.
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 64}};
  for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    expect([&](json& j) { (j["rope_scaling"] = llama3).erase(key); },
           std::string("rope_scaling of type llama3 without ") + key);
  expect([&](json& j) { (j["rope_scaling"] = llama3)["factor"] = 0.5; }, "rope_scaling.factor is 0.5; it must be >= 1");
  expect([&](json& j) { (j["rope_scaling"] = llama3)["high_freq_factor"] = 1.0; },
         "rope_scaling.high_freq_factor is 1; it must exceed low_freq_factor (1)");
  // Sizes beyond the [model] keys' ranges: 2^30 wide asked for the memory
  // of a model that size, and 1e9 heads overflowed int (n_heads + 2 n_kv).
  expect([](json& j) { j["hidden_size"] = 1 << 30; }, "model.d_model = 1073741824 is outside [1, 65536]");
  expect([](json& j) { j["num_attention_heads"] = j["num_key_value_heads"] = 1000000000; },
         "model.n_heads = 1000000000 is outside [1, 1024]");
  // Nested 200,000 deep under a key: once a stack overflow (SIGSEGV) when
  // the message printed the value.
  std::ofstream(config) << "{\"model_type\": " << std::string(200000, '[') << std::string(200000, ']') << "}";
  expect_input_error([&] { load_pretrained(dir); }, "'" + config + "' nests deeper than 64 levels");
}

// tokenizer.json's added token ids: -1 once wrote tokens[-1] (SIGSEGV) and
// 3e9 resized the vocabulary to 3e9 strings (bad_alloc).
TEST(PretrainedModel, AddedTokenIdsOutsideTheVocabularyAreInputErrors) {
  const std::string dir = tiny_hf_folder("added_ids");
  const std::string tokenizer = dir + "/tokenizer.json";
  for (const int64_t id : {int64_t{-1}, int64_t{3000000000}}) {
    rewrite_json(tokenizer, [&](json& j) {
      j["added_tokens"] = json::array({j["added_tokens"][0], {{"id", id}, {"content", "<x>"}, {"special", true}}});
    });
    expect_input_error([&] { load_pretrained(dir, false); },
                       "'" + tokenizer + "': added_tokens[1].id is " + std::to_string(id) + ", outside [0, ");
  }
  // tokenizer_config.json's errors name that file.
  rewrite_json(tokenizer, [&](json& j) { j["added_tokens"] = json::array({j["added_tokens"][0]}); });
  rewrite_json(dir + "/tokenizer_config.json", [](json& j) { j["chat_template"] = json::array({"x"}); });
  expect_input_error([&] { load_pretrained(dir, false); },
                     "'" + dir + "/tokenizer_config.json': chat_template[0] is \"x\", not a JSON object");
}

// Sequences past a pretrained model's context length (max_position_embeddings;
// 2048 when config.json names none) are warned about, naming the keys.
TEST(PretrainedModel, SequencesPastTheContextLengthAreWarnedAbout) {
  const std::string dir = tiny_hf_folder("context_length");
  rewrite_json(dir + "/config.json", [](json& j) { j["max_position_embeddings"] = 300; });
  ModelConfig m;
  m.pretrained = dir;
  const ModelSource source = resolve_model(m, false);
  EXPECT_EQ(source.max_positions, 300);
  const auto warning = [&](const ModelSource& s, int64_t longest) {
    ::testing::internal::CaptureStderr();
    warn_past_context(s, longest, "agent.max_context_tokens + agent.max_new_tokens");
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_EQ(warning(source, 300), "");
  EXPECT_NE(warning(source, 301).find("agent.max_context_tokens + agent.max_new_tokens = 301 tokens is past the "
                                      "model's context length, 300"),
            std::string::npos);
  EXPECT_EQ(warning(ModelSource{}, 1 << 20), "");  // the built-in policy: unbounded
}

// `forge generate` stops at a pretrained model's context length, below the
// engine's default 4096 tokens too (it once kept the default: a model of 40
// positions generated hundreds of tokens past them).
TEST(PretrainedModel, GenerateStopsAtTheContextLength) {
  const std::string dir = tiny_hf_folder("generate_context");
  rewrite_json(dir + "/config.json", [](json& j) { j["max_position_embeddings"] = 40; });
  const forge_e2e::Result r =
      forge_e2e::forge("generate " + dir + " --prompt=hi --sample.max_new_tokens=500 --sample.seed=3 --show_logprobs");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(forge_e2e::contains(r.err, "finish: context_limit")) << r.err;
  size_t generated = 0;
  for (size_t at = r.out.find(" logprob "); at != std::string::npos; at = r.out.find(" logprob ", at + 1)) ++generated;
  EXPECT_GT(generated, 0u);
  EXPECT_LT(generated, 40u) << r.out;  // prompt + generated <= 40
}

// export-model --out a link to an empty folder writes into that folder (it
// failed at the end, after all the work, as if the folder were not empty),
// and the folder keeps its mode.
TEST(PretrainedModel, ExportModelFollowsALinkToAnEmptyFolder) {
  const std::string dir = tiny_hf_folder("export_link_source");
  const std::string where = temp_dir("export_link");
  fs::create_directory(where + "/real");
  fs::permissions(where + "/real", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  fs::create_directory_symlink(where + "/real", where + "/link");
  const forge_e2e::Result r = forge_e2e::forge("export-model " + dir + " --out " + where + "/link");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(where + "/real/config.json")) << r.err;
  EXPECT_TRUE(fs::is_symlink(where + "/link"));
  // The folder given keeps its mode (0750; it became the umask's 0755).
  EXPECT_EQ(fs::status(where + "/real").permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  // A link to nothing is refused before the work (the move onto it failed
  // after it, saying the absent folder was not empty).
  fs::create_directory_symlink(where + "/nowhere/deeper", where + "/dangling");
  const forge_e2e::Result d = forge_e2e::forge("export-model " + dir + " --out " + where + "/dangling");
  EXPECT_EQ(d.rc, 2);
  EXPECT_TRUE(forge_e2e::contains(d.err, "is a link to '" + where + "/nowhere/deeper', which does not exist"))
      << d.err;
}

// What newer transformers write and what a reader must not misread: the
// template in chat_template.jinja (the config's key dropped, or a list of
// named templates without "default" left in it), named
// templates without "default", a bos/eos token the vocabulary lacks, a merge
// listed twice (Hugging Face ranks it last), and Qwen2's NFC normalizer
// (applied, and written back by the exporter with the post-processor).
TEST(PretrainedModel, HfTokenizerFilesAsNewerTransformersWriteThem) {
  const std::string dir = tiny_hf_folder("tokenizer_newer");
  const std::string config = dir + "/tokenizer_config.json", tokenizer = dir + "/tokenizer.json";
  rewrite_json(config, [](json& j) { j.erase("chat_template"); });
  std::ofstream(dir + "/chat_template.jinja") << kChatMl;
  EXPECT_EQ(load_pretrained(dir, false).tokenizer.chat_template, kChatMl);
  fs::remove(dir + "/chat_template.jinja");
  rewrite_json(config, [](json& j) { j["chat_template"] = json::array({{{"name", "tool_use"}, {"template", "x"}}}); });
  expect_input_error([&] { load_pretrained(dir, false); },
                     "'" + config + "': chat_template lists named templates (tool_use) but none named \"default\"");
  // ... unless chat_template.jinja is beside it: that one is used.
  std::ofstream(dir + "/chat_template.jinja") << kChatMl;
  EXPECT_EQ(load_pretrained(dir, false).tokenizer.chat_template, kChatMl);
  fs::remove(dir + "/chat_template.jinja");
  rewrite_json(config, [](json& j) {
    j["chat_template"] = kChatMl;
    j["bos_token"] = "<|nope|>";
  });
  expect_input_error([&] { load_pretrained(dir, false); },
                     "'" + config + "': bos_token '<|nope|>' is not a token of " + tokenizer);
  rewrite_json(config, [](json& j) { j.erase("bos_token"); });
  // "a b" listed again last: "ab" now ranks after "Ġa" and "ab c".
  rewrite_json(tokenizer, [](json& j) { j["model"]["merges"].push_back("a b"); });
  const BpeVocabulary v = load_pretrained(dir, false).tokenizer.tokenizer->vocabulary();
  ASSERT_EQ(v.merges.size(), 3u);
  EXPECT_EQ(v.merges.back(), (std::pair<std::string, std::string>{"a", "b"}));
  rewrite_json(tokenizer, [](json& j) {
    j["model"]["merges"].erase(j["model"]["merges"].size() - 1);
    j["normalizer"] = {{"type", "NFC"}};
    j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  });
  const PretrainedModel m = load_pretrained(dir, false);
  EXPECT_EQ(m.tokenizer.tokenizer->encode("e\u0301"), m.tokenizer.tokenizer->encode("\u00E9"));
  const std::string written = tokenizer_json(m.tokenizer.tokenizer->vocabulary(), m.tokenizer.post_processor);
  const json back = json::parse(written);
  EXPECT_EQ(back["normalizer"], (json{{"type", "NFC"}}));
  EXPECT_EQ(back["post_processor"], (json{{"type", "ByteLevel"}, {"trim_offsets", false}}));
  // An added token Hugging Face would match on the NFC text: refused.
  rewrite_json(tokenizer, [](json& j) { j["added_tokens"][0]["normalized"] = true; });
  expect_input_error([&] { load_pretrained(dir, false); }, "has normalized = true with an NFC normalizer");
}

// transformers' LlamaTokenizerFast (DeepSeek-R1-Distill's folders name it)
// rebuilds the post-processor from tokenizer_config.json's add_bos_token
// (default true) and add_eos_token: forge's text prefix and an export follow
// it. The config's clean_up_tokenization_spaces survives an export. Both
// were read from tokenizer.json alone and exported as false.
TEST(PretrainedModel, LlamaTokenizerFastTakesItsBosFromTokenizerConfig) {
  const std::string dir = tiny_hf_folder("llama_fast");
  const std::string config = dir + "/tokenizer_config.json";
  rewrite_json(config, [](json& j) {
    j["tokenizer_class"] = "LlamaTokenizerFast";
    j["bos_token"] = "<|im_start|>";
    j["clean_up_tokenization_spaces"] = true;
  });
  const PretrainedModel m = load_pretrained(dir, false);
  EXPECT_EQ(m.tokenizer.text_prefix, std::vector<int32_t>{259});
  EXPECT_TRUE(m.tokenizer.clean_up_spaces);
  // Exported (as PreTrainedTokenizerFast): the BOS is tokenizer.json's now.
  std::vector<float> w;
  HfExport e = tiny_export(w, false);
  e.tokenizer = m.tokenizer;
  const std::string out = temp_dir("llama_fast_export");
  export_hf_folder(e, out);
  const json exported = json::parse(std::ifstream(out + "/tokenizer_config.json"));
  EXPECT_EQ(exported["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(exported["clean_up_tokenization_spaces"], true);
  const PretrainedModel back = load_pretrained(out, false);
  EXPECT_EQ(back.tokenizer.text_prefix, std::vector<int32_t>{259});
  EXPECT_TRUE(back.tokenizer.clean_up_spaces);
  // add_bos_token = false outranks a post_processor that adds it.
  rewrite_json(dir + "/tokenizer.json",
               [&](json& j) { j["post_processor"] = json::parse(back.tokenizer.post_processor); });
  EXPECT_EQ(load_pretrained(dir, false).tokenizer.text_prefix, std::vector<int32_t>{259});
  rewrite_json(config, [](json& j) { j["add_bos_token"] = false; });
  EXPECT_TRUE(load_pretrained(dir, false).tokenizer.text_prefix.empty());
  EXPECT_EQ(load_pretrained(dir, false).tokenizer.post_processor, "");
  // PreTrainedTokenizerFast keeps the file's post-processor.
  rewrite_json(config, [](json& j) { j["tokenizer_class"] = "PreTrainedTokenizerFast"; });
  EXPECT_EQ(load_pretrained(dir, false).tokenizer.text_prefix, std::vector<int32_t>{259});
  // An EOS after every text forge's prompts would lack: refused.
  rewrite_json(config, [](json& j) {
    j["tokenizer_class"] = "LlamaTokenizerFast";
    j["add_eos_token"] = true;
  });
  expect_input_error([&] { load_pretrained(dir, false); },
                     "'" + config + "': tokenizer_class LlamaTokenizerFast with add_eos_token = true");
}

// A prompt given as text starts as Hugging Face's tokenizer(text) starts it:
// with what the post_processor writes before a text (Llama 3's BOS). The
// gateway's /completions encoded text without it.
TEST(PretrainedModel, TextPromptsStartWithWhatThePostProcessorAdds) {
  const std::string dir = tiny_hf_folder("text_prefix");
  const std::string tokenizer = dir + "/tokenizer.json";
  const json bos_template = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {259}}, {"tokens", {"<|im_start|>"}}}},
                          {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {260}}, {"tokens", {"<|im_end|>"}}}}}}};
  EXPECT_TRUE(load_pretrained(dir, false).tokenizer.text_prefix.empty());  // the exporter writes none
  // As Llama 3's tokenizer.json: ByteLevel, then the template (its text
  // suffix, <|im_end|> here, is not a prompt's).
  rewrite_json(tokenizer, [&](json& j) {
    j["post_processor"] = {{"type", "Sequence"},
                           {"processors", json::array({{{"type", "ByteLevel"}, {"trim_offsets", false}}, bos_template})}};
  });
  const PretrainedModel m = load_pretrained(dir, false);
  EXPECT_EQ(m.tokenizer.text_prefix, std::vector<int32_t>{259});
  const auto chat = std::make_shared<ChatFormat>(kChatMl, m.tokenizer.tokenizer, "", "t", std::vector<int32_t>{},
                                                 m.tokenizer.text_prefix);
  const ScaffoldVocabulary vocab(chat);
  std::vector<int32_t> expected = {259};
  for (const int32_t t : m.tokenizer.tokenizer->encode("abc a")) expected.push_back(t);
  EXPECT_EQ(vocab.encode_prompt("abc a"), expected);
  EXPECT_EQ(vocab.encode_prompt("<|im_start|>abc a"), expected);  // given already: not twice
  EXPECT_EQ(vocab.encode_prompt(""), std::vector<int32_t>{259});
  // Without a text prefix (and the built-in vocabulary) a text is its tokens.
  const ScaffoldVocabulary plain(std::make_shared<ChatFormat>(kChatMl, m.tokenizer.tokenizer, "", "t"));
  EXPECT_EQ(plain.encode_prompt("abc a"), m.tokenizer.tokenizer->encode("abc a"));
  EXPECT_EQ(ScaffoldVocabulary::builtin().encode_prompt("hi"), ScaffoldVocabulary::builtin().tokenizer().encode("hi"));
  // A GGUF's add_bos_token is that prefix.
  TinyGguf g;
  g.ints["tokenizer.ggml.bos_token_id"] = 259;
  EXPECT_TRUE(load_pretrained(g.write("text_prefix_gguf"), false).tokenizer.text_prefix.empty());
  g.bools["tokenizer.ggml.add_bos_token"] = true;
  EXPECT_EQ(load_pretrained(g.write("text_prefix_gguf"), false).tokenizer.text_prefix, std::vector<int32_t>{259});
  // A template that names an id outside the vocabulary, or a token its
  // special_tokens do not list, is refused by name.
  json bad = bos_template;
  bad["special_tokens"]["<|im_start|>"]["ids"] = {4000};
  rewrite_json(tokenizer, [&](json& j) { j["post_processor"] = bad; });
  expect_input_error([&] { load_pretrained(dir, false); }, "post_processor names token id 4000, outside the vocabulary of 261");
  bad = bos_template;
  bad["special_tokens"].erase("<|im_start|>");
  rewrite_json(tokenizer, [&](json& j) { j["post_processor"] = bad; });
  expect_input_error([&] { load_pretrained(dir, false); }, "special token \"<|im_start|>\" that its special_tokens do not list");
  // Members of another JSON type, and a Sequence entry that is no processor,
  // are named (they ended forge with exit 1 and a bare JSON library message).
  for (const json& malformed : {json{{"type", 5}}, json{{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", 5}}}}}}) {
    rewrite_json(tokenizer, [&](json& j) { j["post_processor"] = malformed; });
    expect_input_error([&] { load_pretrained(dir, false); }, "tokenizer.json': post_processor is malformed");
  }
  rewrite_json(tokenizer, [&](json& j) { j["post_processor"] = {{"type", "Sequence"}, {"processors", {5}}}; });
  expect_input_error([&] { load_pretrained(dir, false); }, "post_processor's Sequence holds 5, not a processor object");
}

// Added tokens as Hugging Face matches them. One that is not special
// becomes its id in text that is not the scaffold's too (encode_special_tokens
// leaves only special ones as text; encode_ordinary dropped every added
// token). A normalized = true token that can overlap a normalized = false one
// is refused: Hugging Face matches the two kinds in two passes ("qzxw" is
// q + zxw there, qzx + w in one pass).
TEST(PretrainedModel, AddedTokensMatchAsHuggingFaceMatchesThem) {
  const std::string dir = tiny_hf_folder("added_kinds");
  const std::string tokenizer = dir + "/tokenizer.json";
  const auto add = [&](const std::string& content, int id, bool special, bool normalized) {
    rewrite_json(tokenizer, [&](json& j) {
      j["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", normalized}, {"special", special}});
    });
  };
  add("qzx", 261, false, false);
  const auto tok = tokenizer_from_hf_folder(dir).tokenizer;
  const std::vector<int32_t> ordinary = tok->encode_ordinary("aqzx<|im_start|>");
  EXPECT_NE(std::find(ordinary.begin(), ordinary.end(), 261), ordinary.end());
  EXPECT_EQ(std::find(ordinary.begin(), ordinary.end(), 259), ordinary.end());  // a special one stays text
  EXPECT_EQ(ordinary.front(), tok->encode_ordinary("a").front());
  const std::vector<int32_t> all = tok->encode("aqzx<|im_start|>");
  EXPECT_EQ(all.back(), 259);
  EXPECT_EQ(all[all.size() - 2], 261);
  // Its text as the scaffold writes plain text (the gateway's user and tool
  // messages) keeps the token too.
  const ScaffoldVocabulary vocab(std::make_shared<ChatFormat>(kChatMl, tok, "", "t"));
  EXPECT_EQ(vocab.encode(std::vector<ScaffoldVocabulary::Part>{{"aqzx<|im_start|>", false}}), ordinary);
  add("zxw", 262, true, false);
  rewrite_json(tokenizer, [&](json& j) { j["added_tokens"][2]["normalized"] = true; });
  expect_input_error([&] { tokenizer_from_hf_folder(dir); },
                     "added tokens 'qzx' (normalized = true) and 'zxw' (normalized = false) can overlap");
  rewrite_json(tokenizer, [&](json& j) { j["added_tokens"][3]["content"] = "wxy"; });  // no overlap: read
  EXPECT_NO_THROW(tokenizer_from_hf_folder(dir));
  // Pairs that would take minutes to check (20,000 short ones of each kind
  // took 24 s; here 200 of 5,000 bytes each) are refused at once.
  rewrite_json(tokenizer, [&](json& j) {
    for (int k = 0; k < 400; ++k)
      j["added_tokens"].push_back({{"id", 263 + k}, {"content", std::to_string(k) + std::string(5000, 'q')},
                                   {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                   {"normalized", k % 2 == 0}, {"special", true}});
  });
  expect_input_error([&] { tokenizer_from_hf_folder(dir); },
                     "201 added tokens with normalized = true and 203 with normalized = false: too many");
}

// The chat templates forge renders, and templates that contain their lines
// but print more (Hermes 2 Pro's {{bos_token}}, a stray line break or text):
// refused, not rendered without it.
TEST(PretrainedModel, ChatTemplatesThatPrintMoreThanForgeRendersAreRefused) {
  const auto tok = std::make_shared<BpeTokenizer>(tiny_vocab(), "test");
  const std::string chatml = kChatMl;
  const std::string smollm =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}";
  // An accepted template renders a conversation as plain ChatML does (its
  // tags' white space and strips aside), and SmolLM2's with its default
  // system message when the conversation has none.
  const std::vector<ChatMessage> talk = {{"user", "hi"}, {"assistant", "yo"}};
  const std::string plain = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
                            "<|im_start|>assistant\n";
  const auto renders_plain = [&](const std::string& t) {
    std::string text;
    EXPECT_NO_THROW(text = ChatFormat(t, tok, "", "t").render_text(talk, true)) << t;
    EXPECT_EQ(text, plain) << t;
  };
  renders_plain(chatml);
  EXPECT_EQ(ChatFormat(smollm, tok, "", "t").render_text(talk, true),
            "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n" + plain);
  // A gateway request's empty system message is an empty system turn, as the
  // template renders it (the gateway printed the default one instead).
  for (const bool sent : {true, false}) {
    const auto format = std::make_shared<ChatFormat>(smollm, tok, "", "t");
    json request = json::array({{{"role", "user"}, {"content", "hi"}}});
    std::vector<ChatMessage> as_sent = {{"user", "hi"}};
    if (sent) {
      request.insert(request.begin(), json{{"role", "system"}, {"content", ""}});
      as_sent.insert(as_sent.begin(), {"system", ""});
    }
    const Tokens got =
        render_chat(request, TemplateStyle::kSpecial, CallFormat::kParen, EpisodeTexts{}, ScaffoldVocabulary(format));
    EXPECT_EQ(tok->decode(got), format->render_text(as_sent, true)) << "system message sent: " << sent;
  }
  // The default system message is the text of the literal that prints it,
  // decoded as Jinja decodes string literals (it was read from the first
  // "<|im_start|>system" of the source, a {# comment #} included, with only
  // \n decoded; checked against jinja2 by review).
  const auto system_text = [&](const std::string& text, const std::string& before = "") {
    std::string t = smollm;
    t.replace(t.find("You are a helpful AI assistant"), 30, text);
    return ChatFormat(before + t, tok, "", "t").render_text(talk, true);
  };
  EXPECT_EQ(system_text("You are\\ta \\\"bot\\\" a\\\\b caf\\u00e9 \\x41"),
            "<|im_start|>system\nYou are\ta \"bot\" a\\b caf\u00e9 A<|im_end|>\n" + plain);
  EXPECT_EQ(system_text("REAL", "{# <|im_start|>system\nIGNORED<|im_end|> #}"),
            "<|im_start|>system\nREAL<|im_end|>\n" + plain);
  expect_input_error([&] { system_text("a \\q b"); }, "a default system message forge cannot read");
  renders_plain("{%- for message in messages %}\n" + chatml.substr(29) + "\n");
  std::string broken = chatml;  // a line break after the message line prints
  broken.insert(broken.find("}}{% endfor %}") + 2, "\n");
  std::string stripped = chatml;  // ... unless the next tag strips it
  stripped.replace(stripped.find("}}{% endfor %}"), 14, "}}\n{%- endfor %}");
  renders_plain(stripped);
  std::string indented = chatml;  // spaces before a block tag at a line's start go (lstrip_blocks)
  indented.replace(indented.find("{% if add_generation_prompt"), 2, "\n    {%");
  renders_plain(indented);
  std::string spaced = chatml;  // a space after the message line prints
  spaced.insert(spaced.find("}}{% endfor %}") + 2, " ");
  std::string doubled = chatml;  // trim_blocks drops one newline after a block tag, not two
  doubled.insert(doubled.find("{% endfor %}") + 12, "\n\n");
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {"{{bos_token}}" + chatml, "it prints {{bos_token}}"},
           {"Hello " + chatml, "text outside its tags"},
           {broken, "a line break outside its tags"},
           {spaced, "white space outside its tags"},
           {doubled, "a line break outside its tags"},
           {chatml + "{{ '<|im_start|>user\n' }}", "it prints {{'<|im_start|>user\\n'}}"}})
    expect_input_error([&] { ChatFormat(bad, tok, "", "t"); }, "chat template of 't' is not one forge renders (" + why);
  // Templates that print only the known pieces under other logic (found by
  // review: both were rendered as plain ChatML): a default system message
  // in an {% else %} (Qwen2.5's shape), a role filter, and a system message
  // printed whatever the conversation.
  const std::string loop = chatml.substr(chatml.find("{% for message in messages %}"));
  const std::string in_else = "{% if messages[0]['role'] == 'system' %}{% else %}{{ '<|im_start|>system\nDEF<|im_end|>\n' }}"
                              "{% endif %}" + loop;
  std::string filtered = chatml;
  filtered.replace(filtered.find("{{'<|im_start|>'"), 0, "{% if message['role'] != 'tool' %}");
  filtered.replace(filtered.find("{% endfor %}"), 0, "{% endif %}");
  const std::string always = "{{ '<|im_start|>system\nDEF<|im_end|>\n' }}" + chatml;
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {in_else, "it runs {%ifmessages[0]['role']=='system'%}"},
           {filtered, "it runs {%ifmessage['role']!='tool'%}"},
           {always, "a system message forge cannot tell when it prints"}})
    expect_input_error([&] { ChatFormat(bad, tok, "", "t"); }, "chat template of 't' is not one forge renders (" + why);
  // White space inside a literal prints, and the known pieces in another
  // order render otherwise (found by review against jinja2: these were
  // rendered as the plain template): "' \n'" after the role, "<|im_start|>
  // assistant" as the generation prompt, the generation prompt inside the
  // loop (after every message), the default system message after the first
  // message.
  std::string space_in_literal = chatml;
  space_in_literal.replace(space_in_literal.find("'\\n' + message['content']"), 4, "' \\n'");
  std::string spaced_prompt = chatml;
  spaced_prompt.replace(spaced_prompt.find("'<|im_start|>assistant"), 13, "'<|im_start|> ");
  std::string prompt_in_loop = chatml;
  const std::string prompt = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  prompt_in_loop.erase(prompt_in_loop.find(prompt));
  prompt_in_loop.insert(prompt_in_loop.find("{% endfor %}"), prompt);
  std::string system_after = smollm;
  const size_t s0 = system_after.find("{% if loop.first"), s1 = system_after.find("{% endif %}") + 11;
  const std::string block = system_after.substr(s0, s1 - s0);
  system_after.erase(s0, s1 - s0);
  system_after.insert(system_after.find("{% endfor %}"), block);
  for (const auto& [bad, why] : std::vector<std::pair<std::string, std::string>>{
           {space_in_literal, "unrecognized"},
           {spaced_prompt, "an unknown generation prompt"},
           {prompt_in_loop, "its pieces in an order forge does not render"},
           {system_after, "its pieces in an order forge does not render"}})
    expect_input_error([&] { ChatFormat(bad, tok, "", "t"); }, "chat template of 't' is not one forge renders (" + why);
  // An escaped quote does not end a literal: its white space after it still
  // counts (shown in the refusal as written).
  expect_input_error([&] { ChatFormat("{{ 'it\\'s  here' }}" + chatml, tok, "", "t"); },
                     "it prints {{'it\\'s  here'}}");
  // White space around operators leaves the recognized pieces as they are.
  std::string spaced_ops = chatml;
  spaced_ops.replace(spaced_ops.find("'<|im_end|>' + '\\n'"), 19, "'<|im_end|>'   +   '\\n'  ");
  renders_plain(spaced_ops);
}

// The model's end-of-generation tokens beside its end of turn (Llama 3's
// <|end_of_text|>, Qwen2's <|endoftext|>: generation_config.json's
// eos_token_id list, a GGUF's eot/eom ids) stop a generation (found by
// review: only the end of turn did, and a policy's EOS ran on to
// max_new_tokens); a call ended by one parses; an export writes them back.
TEST(PretrainedModel, EveryEndOfGenerationTokenStopsAGeneration) {
  const std::string dir = tiny_hf_folder("end_ids");
  rewrite_json(dir + "/generation_config.json", [](json& j) { j["eos_token_id"] = {260, 257}; });
  const PretrainedModel m = load_pretrained(dir, false);
  EXPECT_EQ(m.tokenizer.end_ids, (std::vector<int32_t>{260, 260, 257}));  // eos_token, then the list
  ModelConfig mc;
  mc.pretrained = dir;
  const ModelSource source = resolve_model(mc, false);
  ASSERT_TRUE(source.chat);
  EXPECT_EQ(source.chat->end_of_turn(), 260);
  EXPECT_EQ(source.chat->stop_tokens(), (std::vector<int32_t>{260, 257}));
  const ScaffoldVocabulary vocab(source.chat);
  EXPECT_EQ(vocab.stop_token(), 260);
  EXPECT_TRUE(vocab.is_stop(257));
  std::vector<int32_t> generated = vocab.encode("calc(3+4)");
  generated.push_back(257);
  const ParsedAction a = parse_action(CallFormat::kParen, generated, vocab);
  ASSERT_EQ(a.kind, ParsedAction::Kind::kCall) << a.error;
  EXPECT_EQ(a.call.args, "3+4");
  // The special format written as text: one action per turn (found by
  // review: a second <tool_call> was taken as the first one's arguments).
  const auto special = [&](const std::string& text) { return parse_action(CallFormat::kSpecial, vocab.encode(text), vocab); };
  const ParsedAction one = special(" <tool_call>calc 3+4</tool_call>\n");
  ASSERT_EQ(one.kind, ParsedAction::Kind::kCall) << one.error;
  EXPECT_EQ(one.call.args, "3+4");
  for (const std::string twice : {"<tool_call>shell ls</tool_call>\n<tool_call>answer done</tool_call>",
                                  "<tool_call>answer 1</tool_call><tool_call>answer 2</tool_call>",
                                  "<tool_call>calc 1 <tool_call> 2</tool_call>"}) {
    const ParsedAction bad = special(twice);
    EXPECT_EQ(bad.kind, ParsedAction::Kind::kInvalid) << twice;
    EXPECT_NE(bad.error.find("more than one"), std::string::npos) << bad.error;
  }
  // The export keeps the list.
  const std::string out = temp_dir("end_ids_export");
  std::filesystem::remove_all(out);
  std::vector<float> w;
  HfExport e = tiny_export(w, false);
  e.tokenizer = m.tokenizer;
  export_hf_folder(e, out);
  std::ifstream in(out + "/generation_config.json");
  EXPECT_EQ(json::parse(in)["eos_token_id"], (json{260, 257}));
  // A value that is no token id names the file and key.
  rewrite_json(dir + "/generation_config.json", [](json& j) { j["eos_token_id"] = "</s>"; });
  expect_input_error([&] { load_pretrained(dir, false); }, "generation_config.json': eos_token_id");
  rewrite_json(dir + "/generation_config.json", [](json& j) { j["eos_token_id"] = {260, 9999}; });
  expect_input_error([&] { load_pretrained(dir, false); }, "generation_config.json': eos_token_id[1]");
  // A GGUF's end-of-turn id.
  TinyGguf g;
  g.ints["tokenizer.ggml.eot_token_id"] = 257;
  EXPECT_EQ(load_pretrained(g.write("end_ids.gguf"), false).tokenizer.end_ids.back(), 257);
}

// A value of the wrong type in tokenizer.json or tokenizer_config.json names
// the file and its key (it was nlohmann's "type must be string, but is
// number", naming neither).
TEST(PretrainedModel, TokenizerValuesOfTheWrongTypeNameTheirKey) {
  const std::string dir = tiny_hf_folder("tokenizer_keys");
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
  };
  const std::string tokenizer = dir + "/tokenizer.json", config = dir + "/tokenizer_config.json";
  const json good_tokenizer = read(tokenizer), good_config = read(config);
  const auto expect = [&](const std::string& file, const std::function<void(json&)>& edit, const std::string& part) {
    std::ofstream(tokenizer) << good_tokenizer.dump();
    std::ofstream(config) << good_config.dump();
    json j = read(file);
    edit(j);
    std::ofstream(file) << j.dump();
    expect_input_error([&] { load_pretrained(dir, false); }, part);
  };
  expect(tokenizer, [](json& j) { j["model"] = json::array(); }, "'" + tokenizer + "': model is [], not a JSON object");
  expect(tokenizer, [](json& j) { j["model"]["merges"][1] = 5; },
         "tokenizer '" + tokenizer + "': model.merges[1] is 5, not a merge");
  expect(tokenizer, [](json& j) { j["model"]["merges"][0] = json::array({"a", 1}); },
         "tokenizer '" + tokenizer + "': model.merges[0] is [\"a\",1], not a merge");
  expect(tokenizer, [](json& j) { j["model"]["dropout"] = "x"; },
         "'" + tokenizer + "': model.dropout is \"x\", not a number");
  expect(tokenizer, [](json& j) { j["added_tokens"][0]["content"] = 7; },
         "'" + tokenizer + "': added_tokens[0].content is 7, not a string");
  expect(tokenizer, [](json& j) { j["added_tokens"][0]["special"] = "yes"; },
         "'" + tokenizer + "': added_tokens[0].special is \"yes\", not true or false");
  expect(tokenizer, [](json& j) { j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {5, 6}}}; },
         "is not one forge reads (unexpected structure");
  // Options forge's tokenizer would not apply: refused, not ignored.
  expect(tokenizer, [](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
         "model.continuing_subword_prefix = '##'");
  expect(tokenizer, [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, "model.end_of_word_suffix = '</w>'");
  expect(tokenizer, [](json& j) { j["decoder"] = {{"type", "Metaspace"}}; }, "decoder {\"type\":\"Metaspace\"}");
  expect(tokenizer, [](json& j) { j["decoder"] = nullptr; }, "no decoder (Hugging Face then joins tokens with spaces");
  expect(tokenizer, [](json& j) { j.erase("decoder"); }, "no decoder");
  expect(tokenizer, [](json& j) { j["added_tokens"][0]["rstrip"] = true; }, "has rstrip = true");
  // An unknown token where a byte has no token (Hugging Face encodes that
  // byte as it; forge dropped it), and an added token that is a vocabulary
  // token at another id (Hugging Face encodes the vocabulary's id).
  expect(tokenizer,
         [](json& j) {
           j["model"]["unk_token"] = "<|im_end|>";
           j["model"]["vocab"].erase(to_byte_level("\x04"));
           j["model"]["vocab"]["zz"] = 4;
         },
         "model.unk_token = \"<|im_end|>\" with no token for byte 4");
  expect(tokenizer, [](json& j) { j["added_tokens"][0]["content"] = "ab"; },
         "added token 'ab' (id 259) is also the vocabulary's token 256 (one text, two ids)");
  // Two texts with one id (the second replaced the first, and the load
  // failed on "no token has id 261", an id the file never names).
  expect(tokenizer, [](json& j) { j["model"]["vocab"]["~zzz"] = 5; }, "model.vocab gives tokens '~zzz' and '" + to_byte_level("\x05") + "' one id, 5");
  // An added token at an id the vocabulary gives another text (it replaced
  // that token: ordinary text no longer encoded to it).
  expect(tokenizer,
         [](json& j) {
           j["added_tokens"][0]["content"] = "<new>";
           j["added_tokens"][0]["id"] = 256;
         },
         "added token '<new>' takes id 256, which is already the token 'ab' (two texts, one id)");
  expect(config, [](json& j) { j["bos_token"] = {{"content", 3}}; },
         "'" + config + "': bos_token.content is 3, not a string");
  expect(config, [](json& j) { j["chat_template"] = 12; }, "'" + config + "': chat_template is 12, not a string");
  // And the untouched files load, an unknown token with every byte's token too.
  std::ofstream(tokenizer) << good_tokenizer.dump();
  std::ofstream(config) << good_config.dump();
  EXPECT_NO_THROW(load_pretrained(dir, false));
  json with_unk = good_tokenizer;
  with_unk["model"]["unk_token"] = "<|im_end|>";
  std::ofstream(tokenizer) << with_unk.dump();
  EXPECT_NO_THROW(load_pretrained(dir, false));
}

// Shapes are checked from the headers before the weights' buffer is
// allocated: an intermediate_size of 2e9 once asked for 384 GB (bad_alloc;
// now beyond model.ffn_dim's range, so the largest in range here).
TEST(PretrainedModel, SizesTheFileDoesNotHoldAreRefusedBeforeAllocating) {
  const std::string dir = tiny_hf_folder("huge");
  rewrite_json(dir + "/config.json", [](json& j) { j["intermediate_size"] = 1048576; });
  expect_input_error([&] { load_pretrained(dir); },
                     "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [24, 16] but the model's configuration needs "
                     "[1048576, 16]");
  const std::string gguf = [] {
    TinyGguf t;
    t.ints["llama.feed_forward_length"] = 1048576;
    return t.write("gguf_huge");
  }();
  expect_input_error([&] { load_pretrained(gguf); },
                     "'" + gguf + "': tensor 'blk.0.ffn_gate.weight' has shape [24, 16] but the model's configuration "
                     "needs [1048576, 16]");
}

// A type forge does not read is named from the header, before the weights'
// buffer is allocated: an 8B-shaped Q6_K file once asked for all of its
// weights in FP32 and ended in "out of memory".
TEST(PretrainedModel, TensorTypesForgeDoesNotReadAreRefusedBeforeAllocating) {
  TinyGguf t;
  // 1024 layers of FFN width 2^20: 206 GB in FP32. Layer 0's FFN tensors
  // come first in the header pass (the other layers' are missing).
  t.ints["llama.block_count"] = 1024;
  t.ints["llama.feed_forward_length"] = t.ffn_rows = uint64_t{1} << 20;
  for (const char* name : {"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"})
    t.no_data[name] = 14;  // Q6_K
  const std::string gguf = t.write("gguf_q6k_huge");
  expect_input_error([&] { load_pretrained(gguf); }, "tensor 'blk.0.ffn_gate.weight' has type Q6_K");
}

// A weight that is NaN or infinite is named with its tensor when loaded;
// it once surfaced as non-finite logits naming neither file nor tensor.
TEST(PretrainedModel, NonFiniteWeightsNameTheirTensor) {
  TinyGguf t;
  t.ffn_value = std::numeric_limits<float>::infinity();
  const std::string gguf = t.write("gguf_inf");
  expect_input_error([&] { load_pretrained(gguf); }, "'" + gguf + "': tensor 'blk.0.ffn_gate.weight' holds inf at value 0");
}

// A GGUF without tokenizer.ggml.pre, or with llama.cpp's "default", does
// not say how text is split; both were read with GPT-2's split.
TEST(PretrainedModel, AGgufThatDoesNotNameItsPreTokenizerIsRefused) {
  TinyGguf t;
  t.pre = "";
  const std::string none = t.write("gguf_no_pre");
  expect_input_error([&] { load_pretrained(none); }, "'" + none + "' has no tokenizer.ggml.pre");
  t.pre = "default";
  const std::string def = t.write("gguf_default_pre");
  expect_input_error([&] { load_pretrained(def); }, "tokenizer.ggml.pre 'default' is not a pre-tokenizer forge knows");
}

TEST(PretrainedModel, LoadsATinyGgufFile) {
  const std::string path = TinyGguf().write("gguf_tiny");
  const PretrainedModel m = load_pretrained(path);
  EXPECT_EQ(m.architecture, "llama");
  EXPECT_EQ(m.config.d_model, 16);
  EXPECT_EQ(m.config.n_kv_heads, 1);
  EXPECT_EQ(m.config.vocab, 261);
  EXPECT_TRUE(m.config.tied_embeddings);
  ASSERT_EQ(m.weights.size(), ParamLayout(m.config).total);
  for (float w : m.weights) ASSERT_EQ(w, 0.5f);
  EXPECT_EQ(m.tokenizer.tokenizer->encode("abc ab<|im_end|>"), (std::vector<int32_t>{257, 32, 256, 260}));
  // Every tensor lands where forge's layout has it, in the file's order (a
  // GGUF's q and k rows are already in forge's interleaved RoPE order: no
  // permutation): tensors numbered as written, [out][in] row-major.
  TinyGguf coded;
  coded.coded = true;
  const PretrainedModel c = load_pretrained(coded.write("gguf_coded"));
  const ParamLayout layout(c.config);
  const auto expect_holds = [&](const std::string& entry, std::vector<std::pair<int, size_t>> parts) {
    size_t at = layout.find(entry).offset, total = 0;
    for (const auto& [k, n] : parts) {
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(c.weights[at + i], static_cast<float>(10000 * k + static_cast<int>(i))) << entry << " part " << k;
      at += n;
      total += n;
    }
    EXPECT_EQ(total, layout.find(entry).numel) << entry;
  };
  expect_holds("embed", {{1, 261 * 16}});
  expect_holds("layers.0.attn_norm", {{2, 16}});
  expect_holds("layers.0.wqkv", {{3, 16 * 16}, {4, 8 * 16}, {5, 8 * 16}});
  expect_holds("layers.0.wo", {{6, 16 * 16}});
  expect_holds("layers.0.mlp_norm", {{7, 16}});
  expect_holds("layers.0.w_gate_up", {{8, 24 * 16}, {9, 24 * 16}});
  expect_holds("layers.0.w_down", {{10, 16 * 24}});
  expect_holds("final_norm", {{11, 16}});
  // Heads that do not divide the width, with the head size stated: kept
  // when it equals the quotient rounded down too (6 heads of 2 in 16; it
  // was dropped, and the model refused as "n_heads must divide").
  TinyGguf uneven;
  uneven.ints["llama.attention.head_count"] = 6;
  uneven.ints["llama.attention.key_length"] = 2;
  uneven.ints["llama.attention.value_length"] = 2;
  uneven.q_rows = 12;
  uneven.kv_rows = 2;
  const PretrainedModel u = load_pretrained(uneven.write("gguf_uneven"));
  EXPECT_EQ(u.config.head_dim(), 2);
  EXPECT_EQ(u.config.n_heads, 6);
}

// GGUF metadata by range and the tokenizer's text, each named: 2^32 + 16 was
// read as 16, head_count 0 named forge's model.n_heads, an out-of-range bos
// id no file, inf passed as a RoPE base, a token 0xFF made export-model fail
// half way (nlohmann's type_error 316), and a tensor named twice was "missing".
TEST(PretrainedModel, GgufValuesOutOfRangeAndTextThatIsNotUtf8AreInputErrors) {
  const auto expect = [](const std::function<void(TinyGguf&)>& edit, const std::string& part) {
    TinyGguf t;
    edit(t);
    const std::string path = t.write("gguf_bad");
    expect_input_error([&] { load_pretrained(path); }, "GGUF file '" + path + "'" + part);
  };
  expect([](TinyGguf& t) { t.ints["llama.embedding_length"] = (uint64_t{1} << 32) + 16; },
         ": metadata 'llama.embedding_length' is 4294967312, outside [1, 2147483647]");
  expect([](TinyGguf& t) { t.ints["llama.attention.head_count"] = 0; },
         ": metadata 'llama.attention.head_count' is 0, outside [1, 2147483647]");
  expect([](TinyGguf& t) { t.ints["tokenizer.ggml.bos_token_id"] = 999999; },
         ": metadata 'tokenizer.ggml.bos_token_id' is 999999, outside [0, 260]");
  expect([](TinyGguf& t) { t.floats["llama.rope.freq_base"] = std::numeric_limits<float>::infinity(); },
         ": metadata 'llama.rope.freq_base' is inf; it must be a finite number above 1");
  expect([](TinyGguf& t) { t.tokens[0] = "\xff"; }, ": token 0 of tokenizer.ggml.tokens is not valid UTF-8");
  // A control token with an ordinary token's text: "Hello world" encoded
  // to the control token, and export-model's folder could not be read back.
  expect([](TinyGguf& t) { t.tokens[258] = t.tokens[7]; },
         ": tokenizer.ggml.tokens holds '" + TinyGguf().tokens[7] +
             "' twice, as token 7 and token 258 (one text, two ids)");
  expect([](TinyGguf& t) { t.renamed["blk.0.ffn_up.weight"] = "blk.0.ffn_gate.weight"; },
         ": two tensors are named 'blk.0.ffn_gate.weight'");
  // What llama.cpp reads and forge does not compute: linear RoPE scaling
  // without a type key (2023 converters), partial rotary, experts (these
  // loaded and ran with the wrong positions or failed on a missing tensor).
  expect([](TinyGguf& t) { t.floats["llama.rope.scale_linear"] = 4.0f; },
         ": metadata 'llama.rope.scale_linear' = 4.000000 (linear RoPE scaling) is not supported");
  expect([](TinyGguf& t) { t.floats["llama.rope.scaling.factor"] = 2.0f; },
         ": metadata 'llama.rope.scaling.factor' = 2.000000 (linear RoPE scaling) is not supported");
  expect([](TinyGguf& t) { t.ints["llama.rope.dimension_count"] = 4; },
         ": metadata 'llama.rope.dimension_count' = 4 (partial rotary embedding) differs from the head size 8");
  expect([](TinyGguf& t) { t.ints["llama.expert_count"] = 8; },
         ": metadata 'llama.expert_count' = 8 (a mixture of experts) is not supported");
  expect([](TinyGguf& t) { t.ints["llama.attention.head_count_kv"] = 3; },
         ": metadata 'llama.attention.head_count_kv' = 3 must divide 'llama.attention.head_count' = 2");
  // Factors of 1 (and 0, llama.cpp's none) and a full rotary dimension are
  // what the model computes.
  TinyGguf same;
  same.floats["llama.rope.scale_linear"] = 1.0f;
  same.floats["llama.rope.scaling.factor"] = 0.0f;
  same.ints["llama.rope.dimension_count"] = 8;
  same.ints["llama.expert_count"] = 0;
  EXPECT_EQ(load_pretrained(same.write("gguf_same")).config.d_model, 16);
}

// A model path that cannot be examined (a link loop) is bad input naming
// it, not std::filesystem_error (exit 1); a GGUF file by another name is
// known by its magic.
TEST(PretrainedModel, UnreadablePathsAndGgufByMagic) {
  const std::string dir = temp_dir("pretrained_paths");
  fs::create_symlink(dir + "/loop.gguf", dir + "/loop.gguf");
  expect_input_error([&] { load_pretrained(dir + "/loop.gguf"); }, "pretrained model '" + dir + "/loop.gguf': ");
  const std::string path = TinyGguf().write("gguf_by_magic");
  fs::copy_file(path, dir + "/model.bin");
  EXPECT_TRUE(is_pretrained_path(dir + "/model.bin"));
  std::ofstream(dir + "/other.bin") << "HDF5 or anything else";
  EXPECT_FALSE(is_pretrained_path(dir + "/other.bin"));
}

// A folder that cannot be created (a regular file on its path) once threw
// std::filesystem_error (exit 1).
TEST(HfExport, AFolderThatCannotBeCreatedIsAnInputError) {
  const std::string dir = temp_dir("export_blocked");
  std::ofstream(dir + "/afile") << "x";
  std::vector<float> w;
  expect_input_error([&] { export_hf_folder(tiny_export(w, false), dir + "/afile/sub"); },
                     "export: cannot create a folder beside '" + dir + "/afile/sub'");
}

// Two ordinary tokens of one text (a GGUF may list them) are refused before
// anything is written: the exported vocabulary kept the later id, and the
// folder did not load ("model.vocab['a'] is 258, outside [0, 257]").
TEST(HfExport, TwoOrdinaryTokensOfOneTextAreRefused) {
  const std::string dir = temp_dir("export_dup_token");
  std::vector<float> w;
  HfExport e = tiny_export(w, false);
  BpeVocabulary v = tiny_vocab();
  v.merges.pop_back();  // the merge of "Ġa", 258, which is now "a" (as 97 is)
  v.tokens[258] = "a";
  e.tokenizer.tokenizer = std::make_shared<BpeTokenizer>(v, "test");
  expect_input_error([&] { export_hf_folder(e, dir + "/out"); }, "export: tokens 97 and 258 are both 'a'");
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

// tokenizer.json's vocabulary lists every text once, in the id order of its
// first token, with an ordinary token's id where an added token has its text
// (an added token's text alone keeps the first added id).
TEST(HfExport, TheVocabularyListsEachTextOnceInIdOrder) {
  BpeVocabulary v = tiny_vocab();
  v.tokens.push_back("<|im_start|>");  // 261: added, a second id of 259's text
  v.tokens.push_back("zz");           // 262: added first, then ordinary at 263
  v.tokens.push_back("zz");
  v.added.push_back({261, false});
  v.added.push_back({262, false});
  const ordered_json vocab = ordered_json::parse(tokenizer_json(v))["model"]["vocab"];
  std::vector<std::pair<std::string, int64_t>> got;
  for (const auto& [text, id] : vocab.items()) got.emplace_back(text, id.get<int64_t>());
  ASSERT_EQ(got.size(), 262u);
  for (size_t id = 0; id < 261; ++id) EXPECT_EQ(got[id], (std::pair<std::string, int64_t>{v.tokens[id], id}));
  EXPECT_EQ(got[261], (std::pair<std::string, int64_t>{"zz", 263}));
}

// A tokenizer without bos/eos ids: config.json and generation_config.json
// write them as null (left out, transformers took bos 1 and eos 2, and its
// generate stopped at token 2), and forge loads the folder back.
TEST(HfExport, UnknownBosAndEosAreWrittenAsNull) {
  const std::string dir = temp_dir("export_no_eos");
  std::vector<float> w;
  HfExport e = tiny_export(w, false);
  e.tokenizer.eos_id = -1;
  e.tokenizer.bos_id = -1;
  export_hf_folder(e, dir + "/out");
  for (const char* name : {"config.json", "generation_config.json"}) {
    std::ifstream in(dir + "/out/" + name);
    const json j = json::parse(in);
    ASSERT_TRUE(j.contains("eos_token_id")) << name;
    EXPECT_TRUE(j["eos_token_id"].is_null()) << name;
    ASSERT_TRUE(j.contains("bos_token_id")) << name;
    EXPECT_TRUE(j["bos_token_id"].is_null()) << name;
  }
  EXPECT_EQ(load_pretrained(dir + "/out", false).tokenizer.eos_id, -1);
}

// A FIFO where a model file should be is refused by name: open() of one
// blocks until a writer comes (forge generate on one hung with no message).
TEST(PretrainedModel, AFifoIsRefusedNotOpened) {
  const std::string dir = temp_dir("fifo");
  ASSERT_EQ(::mkfifo((dir + "/m.gguf").c_str(), 0600), 0);
  expect_input_error([&] { load_pretrained(dir + "/m.gguf"); }, "is a FIFO (named pipe), not a regular file");
  ASSERT_EQ(::mkfifo((dir + "/model").c_str(), 0600), 0);
  EXPECT_FALSE(is_pretrained_path(dir + "/model"));  // not sniffed for GGUF's magic
  const std::string folder = tiny_hf_folder("fifo_folder");
  for (const char* name : {"config.json", "tokenizer.json", "model.safetensors"}) {
    fs::rename(folder + "/" + name, folder + "/" + name + ".kept");
    ASSERT_EQ(::mkfifo((folder + "/" + name).c_str(), 0600), 0);
    expect_input_error([&] { load_pretrained(folder); }, std::string(name) + "' is a FIFO");
    fs::remove(folder + "/" + name);
    fs::rename(folder + "/" + name + ".kept", folder + "/" + name);
  }
  EXPECT_NO_THROW(load_pretrained(folder));
}

// Folders beside `path` named as an export's partial one.
int partial_folders(const std::string& path) {
  int n = 0;
  const fs::path p(path);
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    n += e.path().filename().string().rfind(p.filename().string() + ".partial", 0) == 0;
  return n;
}

// An export is written beside its folder and moved into place whole: a
// write that fails (a full disk) once left config and tokenizer files beside
// a truncated model.safetensors, which a rerun then refused as not empty.

TEST(HfExport, AFailedExportLeavesNoFolder) {
  const std::string dir = temp_dir("export_fails");
  std::vector<float> w;
  const HfExport e = tiny_export(w, false);
  // Into a folder that is not empty: refused, its file kept, nothing beside it.
  const std::string full = dir + "/full";
  fs::create_directories(full);
  std::ofstream(full + "/keep") << "x";
  expect_input_error([&] { export_hf_folder(e, full); }, "(it must be empty or absent)");
  EXPECT_TRUE(fs::exists(full + "/keep"));
  EXPECT_EQ(partial_folders(full), 0);
  // Files limited to 1 KiB (in a child process): the write fails, and no
  // folder is left at all.
  const std::string out = dir + "/out";
  EXPECT_EQ(exit_code_under_file_limit(1024, [&] { export_hf_folder(e, out); }), 1)
      << "the export did not fail under a 1 KiB file limit";
  EXPECT_FALSE(fs::exists(out));
  EXPECT_EQ(partial_folders(out), 0);
  // Without the limit it is written whole, also when named with a trailing
  // slash (the partial folder once lay inside it, and the move failed). A
  // folder of the user's named like the partial one is not touched (it was
  // removed as a leftover), and the model folder gets the umask's mode, not
  // mkdtemp's 0700.
  fs::create_directories(out + ".partial");
  std::ofstream(out + ".partial/notes.txt") << "mine";
  export_hf_folder(e, out + "/");
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(out + ".partial/notes.txt"));
  EXPECT_EQ(partial_folders(out), 1);
  EXPECT_FALSE(fs::exists(out + "/.partial"));
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(static_cast<unsigned>(fs::status(out).permissions()), 0777u & ~mask);
}

// A checkpoint keeps its pretrained model's fingerprint: the model file its
// model.pretrained names, replaced or edited since (another tokenizer, chat
// template or RoPE base), is refused by name wherever the checkpoint's model
// is read (export-model, generate, eval, a resume's model check). It was
// paired with the checkpoint's weights without a word.
TEST(PretrainedModel, ACheckpointRefusesItsModelFileChangedSinceItWasTrained) {
  const std::string dir = tiny_hf_folder("fingerprint");
  ModelConfig asked;
  asked.pretrained = dir;
  const ModelSource source = resolve_model(asked, true);
  const std::string fingerprint = model_fingerprint(source);
  ASSERT_EQ(fingerprint.rfind("forge-model 1; tokenizer=", 0), 0u) << fingerprint;
  auto backend = make_backend("cpu");
  PolicyModel model(source.config, *backend);
  model.set_params(source.weights);
  CheckpointState st;
  st.config_ini = "[model]\npretrained = " + dir + "\n";
  st.model_fingerprint = fingerprint;
  const std::string with = save_checkpoint(temp_dir("fingerprint_ckpt"), model, nullptr, st, 0);
  st.model_fingerprint.clear();  // as a checkpoint written before fingerprints
  const std::string without = save_checkpoint(temp_dir("fingerprint_none"), model, nullptr, st, 0);
  EXPECT_EQ(checkpoint_model_fingerprint(with), fingerprint);
  EXPECT_EQ(checkpoint_model_fingerprint(without), "");
  EXPECT_EQ(model_fingerprint(model_source_of(with)), fingerprint);

  const auto read = [](const std::string& path) { return json::parse(std::ifstream(path)); };
  const auto edited = [&](const std::string& file, const std::function<void(json&)>& edit, const std::string& part) {
    const std::string path = dir + "/" + file;
    const json good = read(path);
    json j = good;
    edit(j);
    std::ofstream(path) << j.dump();
    expect_input_error([&] { model_source_of(with); },
                       "checkpoint '" + with + "' was trained with another model: model.pretrained = '" + dir +
                           "', read now, has another " + part + " than when the checkpoint was written");
    EXPECT_NO_THROW(model_source_of(without)) << "a checkpoint without a fingerprint is not compared";
    std::ofstream(path) << good.dump();
  };
  edited("tokenizer.json", [](json& j) { std::swap(j["model"]["vocab"]["a"], j["model"]["vocab"]["b"]); }, "tokenizer");
  edited("tokenizer_config.json",  // the same template forge renders, written otherwise
         [](json& j) {
           std::string t = j["chat_template"];
           t.replace(t.find("{{ '<|im_start|>assistant"), 3, "{{");
           j["chat_template"] = t;
         },
         "chat template");
  edited("config.json", [](json& j) { j["rope_theta"] = 500000.0; }, "configuration");
  EXPECT_EQ(model_fingerprint(model_source_of(with)), fingerprint) << "the restored files read as before";

  // Parts a newer forge may add are not compared; the built-in policy has none.
  EXPECT_EQ(fingerprint_differences(fingerprint + "; weights=1", fingerprint + "; weights=2"), "");
  EXPECT_EQ(fingerprint_differences("forge-model 1; tokenizer=1; chat_template=2; config=3",
                                    "forge-model 1; tokenizer=1; chat_template=9; config=8"),
            "chat template, configuration");
  EXPECT_EQ(model_fingerprint(resolve_model(ModelConfig{}, false)), "");
}

}  // namespace
}  // namespace forge
