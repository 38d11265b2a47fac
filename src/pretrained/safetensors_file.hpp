// safetensors files, read and written:
//
//   uint64 N (little endian) | N bytes of JSON header | data
//   header: {"<tensor>": {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...],
//            "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
//   offsets are into the data section; row-major, little endian.
//
// A model may be one model.safetensors or shards listed by
// model.safetensors.index.json ({"weight_map": {"<tensor>": "<file>"}});
// SafetensorsModel reads either. F32, F16 and BF16 tensors become FP32; any
// other dtype, a header that does not parse, an offset outside the file or a
// size that does not match its shape is an InputError naming the file and
// the tensor, as are two tensors that share bytes, and a weight_map entry that is not the name of a file in the
// folder ("../x", "/x", "sub/x").
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace forge {

class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // into the data section
  };
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<float> read(const std::string& name) const;  // as FP32
  // InputError naming the tensor when it is absent or of a dtype read()
  // does not convert.
  void require_readable(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_offset_ = 0;
  std::map<std::string, Entry> entries_;
};

// One file or the shards of a folder, by tensor name.
class SafetensorsModel {
 public:
  // folder holding model.safetensors or model.safetensors.index.json.
  explicit SafetensorsModel(const std::string& folder);
  bool has(const std::string& name) const { return file_of_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const;  // InputError if absent or unreadable
  std::vector<float> read(const std::string& name) const;     // InputError if absent
  std::vector<std::string> names() const;
  const std::string& description() const { return description_; }

 private:
  const SafetensorsFile& file(const std::string& name) const;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;
  // Tensors weight_map does not list that two shards hold: refused when read.
  std::map<std::string, std::string> ambiguous_;
  std::string description_;
};

// Writes tensors (FP32, or BF16 when bf16) as one safetensors file.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, bool bf16 = false,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace forge
