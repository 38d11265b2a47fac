#include "pretrained/safetensors_file.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "pretrained/ggml_quants.hpp"
#include "pretrained/json_file.hpp"

namespace forge {
namespace {

using nlohmann::json;

// Bytes per value of every dtype the format defines (0: not one of them).
size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> kBytes = {
      {"F64", 8}, {"I64", 8},  {"U64", 8},  {"F32", 4},     {"I32", 4},     {"U32", 4},   {"F16", 2},
      {"BF16", 2}, {"I16", 2}, {"U16", 2},  {"I8", 1},      {"U8", 1},      {"BOOL", 1},  {"F8_E4M3", 1},
      {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"C64", 8}};
  const auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

bool readable(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16"; }

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  if (ec) throw InputError("cannot read '" + path + "': " + ec.message());
  return n;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError("'" + path + "' " + (ec ? "cannot be read: " + ec.message() : std::string("does not exist")));
  refuse_unless_regular_file(path, "safetensors file");
  const uint64_t size = file_size(path);
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&n), 8)) throw InputError("'" + path + "' is not a safetensors file (too short)");
  if (n > size - 8 || n > (uint64_t{1} << 30))
    throw InputError("safetensors file '" + path + "' is truncated or corrupted: a header of " + std::to_string(n) +
                     " bytes in a file of " + std::to_string(size));
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  data_offset_ = 8 + n;
  const json h = parse_model_json(header, "the header of safetensors file '" + path + "'");
  if (!h.is_object()) throw InputError("safetensors file '" + path + "': the header is not a JSON object");
  const uint64_t data_size = size - data_offset_;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      // The format's metadata: strings by name, as the reference reader has it.
      // (null: none, as the reference reader takes it)
      const json& m = it.value();
      if (m.is_null()) continue;
      if (!m.is_object() || !std::all_of(m.begin(), m.end(), [](const json& v) { return v.is_string(); }))
        throw InputError("safetensors file '" + path + "': __metadata__ must be an object of strings, not " +
                         json_shown(m));
      continue;
    }
    const std::string where = "safetensors file '" + path + "', tensor '" + it.key() + "'";
    try {
      Entry e;
      e.dtype = it.value().at("dtype").get<std::string>();
      for (const json& v : {it.value().at("shape"), it.value().at("data_offsets")})
        if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); }))
          throw InputError(where + ": shape and data_offsets must be arrays of integers, not " + json_shown(v));
      e.shape = it.value().at("shape").get<std::vector<int64_t>>();
      const auto offs = it.value().at("data_offsets").get<std::vector<uint64_t>>();
      if (offs.size() != 2)
        throw InputError(where + ": data_offsets must be [begin, end], not " + it.value().at("data_offsets").dump());
      if (offs[0] > offs[1] || offs[1] > data_size)
        throw InputError(where + ": data offsets outside the file's " + std::to_string(data_size) +
                         " bytes of data (truncated?)");
      e.begin = offs[0];
      e.end = offs[1];
      const int64_t count = ggml::element_count(e.shape);
      if (count < 0)
        throw InputError(where + ": shape " + it.value().at("shape").dump() +
                         " (a negative dimension, or more values than an int64 counts)");
      // A dtype of no whole bytes a value (F4, F6), or newer than this table,
      // is not sized here; read() refuses it, and shape() before any buffer.
      const size_t b = dtype_bytes(e.dtype);
      size_t bytes = 0;
      if (b && (__builtin_mul_overflow(static_cast<size_t>(count), b, &bytes) || bytes != e.end - e.begin))
        throw InputError(where + ": " + std::to_string(e.end - e.begin) + " bytes for " + std::to_string(count) +
                         " values of " + e.dtype);
      entries_[it.key()] = std::move(e);
    } catch (const json::exception& ex) {
      throw InputError(where + ": malformed entry (" + ex.what() + ")");
    }
  }
  // The tensors tile the data, as the reference reader requires: no two
  // share bytes (each would be read, and sized, on its own), and no byte
  // belongs to none (a gap, or bytes after the last tensor).
  std::vector<std::pair<const std::string*, const Entry*>> placed;
  for (const auto& [name, e] : entries_) placed.push_back({&name, &e});
  std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  uint64_t covered = 0;
  const std::string* last = nullptr;
  for (const auto& [name, e] : placed) {
    if (e->begin < covered)
      throw InputError("safetensors file '" + path + "': tensors '" + *last + "' and '" + *name +
                       "' overlap in the file");
    if (e->begin > covered)
      throw InputError("safetensors file '" + path + "': bytes [" + std::to_string(covered) + ", " +
                       std::to_string(e->begin) + ") of its data belong to no tensor (before '" + *name + "')");
    covered = e->end;
    last = name;
  }
  if (covered != data_size)
    throw InputError("safetensors file '" + path + "': its data holds " + std::to_string(data_size) +
                     " bytes, of which the tensors take " + std::to_string(covered) + " (bytes after them belong to none)");
}

void SafetensorsFile::require_readable(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError("safetensors file '" + path_ + "' has no tensor '" + name + "'");
  if (!readable(it->second.dtype))
    throw InputError("safetensors file '" + path_ + "': tensor '" + name + "' has dtype " + it->second.dtype +
                     "; forge reads F32, F16 and BF16");
}

std::vector<float> SafetensorsFile::read(const std::string& name) const {
  require_readable(name);
  const Entry& e = entries_.at(name);
  const size_t b = dtype_bytes(e.dtype);
  const size_t n = (e.end - e.begin) / b;
  std::vector<uint8_t> raw(e.end - e.begin);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_offset_ + e.begin));
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
    throw InputError("safetensors file '" + path_ + "': cannot read tensor '" + name + "' (truncated?)");
  std::vector<float> out(n);
  if (e.dtype == "F32") std::memcpy(out.data(), raw.data(), raw.size());
  else ggml::dequantize(e.dtype == "F16" ? ggml::kF16 : ggml::kBF16, raw.data(), static_cast<int64_t>(n), out.data());
  return out;
}

SafetensorsModel::SafetensorsModel(const std::string& folder) {
  const std::string single = folder + "/model.safetensors", index = folder + "/model.safetensors.index.json";
  std::error_code ec;  // an unreadable entry counts as absent
  if (std::filesystem::exists(single, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& [name, e] : files_[0]->entries()) file_of_[name] = 0;
    description_ = single;
    return;
  }
  if (!std::filesystem::exists(index, ec))
    throw InputError("'" + folder + "' has neither model.safetensors nor model.safetensors.index.json");
  const json idx = read_json_file(index);
  if (!idx.contains("weight_map") || !idx["weight_map"].is_object())
    throw InputError("'" + index + "' has no weight_map object");
  std::map<std::string, size_t> shard;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    const std::string where = "'" + index + "': weight_map['" + it.key() + "']";
    if (!it.value().is_string()) throw InputError(where + " is " + json_shown(it.value()) + ", not a file name");
    const std::string f = it.value().get<std::string>();
    // A shard is a file of this folder: never "../x", "/etc/x" or "sub/x".
    if (f.empty() || f == "." || f == ".." || f.find_first_of(std::string("/\0", 2)) != std::string::npos)
      throw InputError(where + " is '" + f + "', not the name of a file in the model's folder");
    if (!shard.count(f)) {
      shard[f] = files_.size();
      files_.push_back(std::make_unique<SafetensorsFile>(folder + "/" + f));
    }
    const size_t k = shard[f];
    if (!files_[k]->has(it.key()))
      throw InputError("'" + index + "' puts tensor '" + it.key() + "' in '" + f + "', which lacks it");
    file_of_[it.key()] = k;
  }
  // A tensor a shard holds that weight_map does not list is read from its
  // shard, as transformers reads each listed shard whole (it was "has no
  // tensor", though the shard held it); one in two shards is ambiguous,
  // refused only if it is read (a model may not use it).
  std::map<std::string, size_t> unlisted;
  for (size_t k = 0; k < files_.size(); ++k)
    for (const auto& [name, e] : files_[k]->entries()) {
      if (const auto first = unlisted.find(name); first != unlisted.end())
        ambiguous_[name] = "'" + index + "' lists no shard for tensor '" + name + "', which two shards hold ('" +
                           files_[first->second]->path() + "' and '" + files_[k]->path() + "')";
      else if (!file_of_.count(name))  // listed ones are the index's
        unlisted[name] = file_of_[name] = k;
    }
  if (!unlisted.empty())
    log_warn("'" + index + "' lists " + std::to_string(unlisted.size()) + " tensor(s) its shards hold in no weight_map entry ('" +
             unlisted.begin()->first + "' in '" + files_[unlisted.begin()->second]->path() + "'" +
             (unlisted.size() > 1 ? ", ..." : "") + "): read from their shards");
  description_ = index + " (" + std::to_string(files_.size()) + " shards)";
}

const SafetensorsFile& SafetensorsModel::file(const std::string& name) const {
  if (const auto a = ambiguous_.find(name); a != ambiguous_.end()) throw InputError(a->second);
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) throw InputError("'" + description_ + "' has no tensor '" + name + "'");
  return *files_[it->second];
}

std::vector<int64_t> SafetensorsModel::shape(const std::string& name) const {
  const SafetensorsFile& f = file(name);
  f.require_readable(name);  // before the caller allocates for it
  return f.entries().at(name).shape;
}
std::vector<float> SafetensorsModel::read(const std::string& name) const { return file(name).read(name); }

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, k] : file_of_) out.push_back(name);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, bool bf16,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  const size_t b = bf16 ? 2 : 4;
  for (const NamedTensor& t : tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    FORGE_CHECK(t.name != "__metadata__" && !h.contains(t.name),
                "write_safetensors: tensor name '" + t.name + "' given twice (or reserved)");
    h[t.name] = {{"dtype", bf16 ? "BF16" : "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n * b}}};
    offset += n * b;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data aligned to 8 bytes
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write '" + path + "'");
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const NamedTensor& t : tensors) {
    uint64_t count = 1;
    for (int64_t d : t.shape) count *= static_cast<uint64_t>(d);
    if (!bf16) {
      out.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(count * 4));
      continue;
    }
    std::vector<uint16_t> h16(count);
    for (uint64_t i = 0; i < count; ++i) h16[i] = ggml::float_to_bf16(t.data[i]);
    out.write(reinterpret_cast<const char*>(h16.data()), static_cast<std::streamsize>(count * 2));
  }
  out.close();  // its final flush can fail too
  if (!out) throw Error("cannot write '" + path + "' (disk full?)");
}

}  // namespace forge
