// A GGUF file (version 2 or 3, as llama.cpp writes it): metadata and tensors.
//
//   header    magic "GGUF", uint32 version, uint64 tensor count, uint64 kv count
//   metadata  per entry: key (uint64 length + bytes), uint32 type, value;
//             types uint8..float64, bool, string (uint64 length + bytes),
//             array (uint32 element type, uint64 count, elements)
//   tensors   per tensor: name, uint32 n_dims, uint64 dims[n_dims] (fastest
//             first), uint32 ggml type, uint64 offset into the data section
//   data      from the header's end rounded up to general.alignment (32)
//
// A tensor with dims [ne0, ne1] is row-major [ne1][ne0]: a torch Linear
// weight [out, in] is stored as dims [in, out]. tensor() dequantizes
// F32, F16, BF16, Q8_0, Q4_0 and Q4_1 into FP32 (ggml_quants.hpp). Every
// length, offset and count is checked against the file (without overflow:
// an array count, a tensor's size or offset that the file cannot hold, an
// offset not a multiple of general.alignment, overlapping tensors), as are
// metadata keys and tensor names given twice: a truncated or corrupted file
// is an InputError naming the file and what was wrong.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace forge {

class GgufFile {
 public:
  using Value = std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
                             std::vector<std::string>>;

  struct TensorInfo {
    std::string name;
    std::vector<int64_t> dims;  // fastest first, as in the file
    uint32_t type = 0;          // ggml type
    uint64_t offset = 0;        // into the data section
    uint64_t bytes = 0;          // 0 for a type forge does not read
    int64_t elements() const;
  };

  // Reads the header, metadata and tensor table; tensor data is read on demand.
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  bool has(const std::string& key) const { return meta_.count(key) > 0; }
  // Typed metadata; InputError naming the key when it is absent or of another type.
  std::string get_string(const std::string& key) const;
  // Any integer type, within [lo, hi]: an InputError naming the key and the
  // value otherwise (never truncated: 2^32 + 576 is not 576).
  int64_t get_int(const std::string& key, int64_t lo, int64_t hi) const;
  double get_float(const std::string& key) const;  // float or integer types
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_strings(const std::string& key) const;
  std::vector<int64_t> get_ints(const std::string& key) const;
  // With a default when absent (still an InputError for the wrong type or range).
  int64_t get_int(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  // The tensor in FP32, row-major [dims[n-1]]...[dims[0]]. InputError for an
  // unsupported type (naming it), and where the data lies outside the file.
  std::vector<float> tensor(const TensorInfo& t) const;
  // InputError naming the tensor and its type when tensor() cannot read it.
  void require_supported(const TensorInfo& t) const;

 private:
  std::string path_;
  uint32_t version_ = 0;
  uint64_t data_offset_ = 0, file_size_ = 0;
  std::map<std::string, Value> meta_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;  // name -> tensors_ position
};

}  // namespace forge
