#include "pretrained/gguf_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "pretrained/ggml_quants.hpp"

namespace forge {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
enum ValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64
};
constexpr uint64_t kMaxCount = uint64_t{1} << 32;

// A read-only mapping of the whole file (the mapping outlives the
// descriptor, which is closed at once, on every path).
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw InputError("cannot open '" + path + "': " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw InputError("cannot stat '" + path + "': " + std::strerror(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    void* data = size_ > 0 ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    const int err = errno;
    ::close(fd);
    if (data == MAP_FAILED) throw InputError("cannot map '" + path + "': " + std::strerror(err));
    data_ = data;
  }
  ~Mapping() {
    if (data_) ::munmap(data_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Sequential reads with bounds checks.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : d_(data), n_(size), path_(path) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(d_ + pos_), len);
    pos_ += len;
    return s;
  }
  size_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("GGUF file '" + path_ + "' is truncated or corrupted: " + what + " at byte " + std::to_string(pos_));
  }

 private:
  void need(uint64_t bytes, const char* what) {
    if (bytes > n_ - pos_) fail(std::string("no room for ") + what);
  }
  const uint8_t* d_;
  size_t n_, pos_ = 0;
  std::string path_;
};

// The fewest bytes a value of the type takes in the file (a string: its
// length); 0 for an array or an unknown type.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;

uint64_t min_bytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
  }
  return 0;
}

GgufFile::Value read_value(Reader& r, uint32_t type, const std::string& key) {
  switch (type) {
    case kU8: return static_cast<uint64_t>(r.get<uint8_t>("a value"));
    case kI8: return static_cast<int64_t>(r.get<int8_t>("a value"));
    case kU16: return static_cast<uint64_t>(r.get<uint16_t>("a value"));
    case kI16: return static_cast<int64_t>(r.get<int16_t>("a value"));
    case kU32: return static_cast<uint64_t>(r.get<uint32_t>("a value"));
    case kI32: return static_cast<int64_t>(r.get<int32_t>("a value"));
    case kU64: return r.get<uint64_t>("a value");
    case kI64: return r.get<int64_t>("a value");
    case kF32: return static_cast<double>(r.get<float>("a value"));
    case kF64: return r.get<double>("a value");
    case kBool: return r.get<uint8_t>("a value") != 0;
    case kString: return r.str("a string");
    case kArray: {
      const uint32_t elem = r.get<uint32_t>("an array type");
      const uint64_t count = r.get<uint64_t>("an array length");
      if (elem == kArray) r.fail("nested array '" + key + "'");
      if (min_bytes(elem) == 0) r.fail("array '" + key + "' of unknown element type " + std::to_string(elem));
      // Before anything is read: the elements must fit in the rest of the file,
      // and in memory (an element takes up to 32 bytes there for 1 in the
      // file): metadata arrays are a tokenizer's, a few million at most.
      if (count > r.left() / min_bytes(elem) || count > kMaxArrayElements)
        r.fail("array '" + key + "' of " + std::to_string(count) + " elements");
      if (elem == kString) {
        std::vector<std::string> v;
        v.reserve(std::min<uint64_t>(count, 1 << 16));
        for (uint64_t i = 0; i < count; ++i) v.push_back(r.str("an array string"));
        return v;
      }
      if (elem == kF32 || elem == kF64) {
        std::vector<double> v;
        v.reserve(std::min<uint64_t>(count, 1 << 16));
        for (uint64_t i = 0; i < count; ++i) v.push_back(std::get<double>(read_value(r, elem, key)));
        return v;
      }
      std::vector<int64_t> v;
      v.reserve(std::min<uint64_t>(count, 1 << 16));
      for (uint64_t i = 0; i < count; ++i) {
        const GgufFile::Value x = read_value(r, elem, key);
        if (const auto* u = std::get_if<uint64_t>(&x)) {
          if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
            r.fail("metadata '" + key + "'[" + std::to_string(i) + "] = " + std::to_string(*u) +
                   " is past the integers forge reads (2^63 - 1)");
          v.push_back(static_cast<int64_t>(*u));
        }
        else if (const auto* s = std::get_if<int64_t>(&x)) v.push_back(*s);
        else v.push_back(std::get<bool>(x));
      }
      return v;
    }
  }
  r.fail("metadata '" + key + "' of unknown type " + std::to_string(type));
}

}  // namespace

int64_t GgufFile::TensorInfo::elements() const { return ggml::element_count(dims); }

GgufFile::GgufFile(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError("'" + path + "' " + (ec ? "cannot be read: " + ec.message() : std::string("does not exist")));
  refuse_unless_regular_file(path, "GGUF file");
  const Mapping map(path);
  file_size_ = map.size();
  Reader r(map.data(), map.size(), path);
  if (map.size() < 4 || r.get<uint32_t>("the magic") != kMagic)
    throw InputError("'" + path + "' is not a GGUF file (no \"GGUF\" magic)");
  version_ = r.get<uint32_t>("the version");
  if (version_ != 2 && version_ != 3)
    throw InputError("GGUF file '" + path + "' has version " + std::to_string(version_) + "; forge reads versions 2 and 3");
  const uint64_t n_tensors = r.get<uint64_t>("the tensor count");
  const uint64_t n_kv = r.get<uint64_t>("the metadata count");
  if (n_tensors > kMaxCount || n_kv > kMaxCount) r.fail("implausible counts");
  const auto corrupt = [&](const std::string& what) { return InputError("GGUF file '" + path + "': " + what); };
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.str("a metadata key");
    const uint32_t type = r.get<uint32_t>("a metadata type");
    Value v = read_value(r, type, key);
    if (!meta_.emplace(key, std::move(v)).second) throw corrupt("metadata key '" + key + "' appears twice");
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = r.str("a tensor name");
    const uint32_t n_dims = r.get<uint32_t>("a tensor's dimension count");
    if (n_dims == 0 || n_dims > 4) r.fail("tensor '" + t.name + "' with " + std::to_string(n_dims) + " dimensions");
    for (uint32_t k = 0; k < n_dims; ++k) {
      const uint64_t d = r.get<uint64_t>("a tensor dimension");
      // An empty tensor is valid GGUF, but none a model forge reads has one.
      if (d == 0)
        throw InputError("GGUF file '" + path + "': tensor '" + t.name +
                         "' has a dimension of 0 (an empty tensor, which forge does not read)");
      if (d > (uint64_t{1} << 40)) r.fail("tensor '" + t.name + "' with dimension " + std::to_string(d));
      t.dims.push_back(static_cast<int64_t>(d));
    }
    if (t.elements() < 0) r.fail("tensor '" + t.name + "' of more values than an int64 counts");
    t.type = r.get<uint32_t>("a tensor type");
    t.offset = r.get<uint64_t>("a tensor offset");
    // A block never spans two rows (ggml quantizes row by row).
    if (ggml::supported(t.type) && t.dims[0] % ggml::block_values(t.type) != 0)
      throw corrupt("tensor '" + t.name + "' has rows of " + std::to_string(t.dims[0]) + " values, not a multiple of " +
                    ggml::type_name(t.type) + "'s block of " + std::to_string(ggml::block_values(t.type)));
    t.bytes = ggml::bytes_of(t.type, t.elements());  // 0 also when the size overflows: refused below
    if (!index_.emplace(t.name, tensors_.size()).second) throw corrupt("two tensors are named '" + t.name + "'");
    tensors_.push_back(std::move(t));
  }
  const int64_t alignment = get_int("general.alignment", 1, std::numeric_limits<int32_t>::max(), 32);
  if ((alignment & (alignment - 1)) != 0)
    throw corrupt("general.alignment " + std::to_string(alignment) + " is not a power of two");
  data_offset_ = (r.pos() + alignment - 1) / alignment * alignment;
  // Every tensor within the data section, compared without a sum that could
  // wrap around 2^64 (an offset near 2^64 would otherwise point before it).
  const uint64_t data_size = file_size_ > data_offset_ ? file_size_ - data_offset_ : 0;
  std::vector<const TensorInfo*> placed;
  for (const TensorInfo& t : tensors_) {
    if (t.offset % alignment != 0)
      throw corrupt("tensor '" + t.name + "' has offset " + std::to_string(t.offset) +
                    ", not a multiple of general.alignment " + std::to_string(alignment));
    if (!ggml::supported(t.type)) continue;  // reported when read
    if (t.bytes == 0 || t.bytes > data_size || t.offset > data_size - t.bytes)
      throw InputError("GGUF file '" + path + "' is truncated or corrupted: tensor '" + t.name + "' (" +
                       ggml::type_name(t.type) + ", " + std::to_string(t.elements()) + " values at offset " +
                       std::to_string(t.offset) + ") lies outside the file's " + std::to_string(data_size) +
                       " bytes of data");
    placed.push_back(&t);
  }
  // No two tensors share bytes: in offset order, each ends where the next may begin.
  std::sort(placed.begin(), placed.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < placed.size(); ++i)
    if (placed[i - 1]->offset + placed[i - 1]->bytes > placed[i]->offset)
      throw corrupt("tensors '" + placed[i - 1]->name + "' and '" + placed[i]->name + "' overlap in the file");
}

const GgufFile::TensorInfo* GgufFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::require_supported(const TensorInfo& t) const {
  if (!ggml::supported(t.type))
    throw InputError("GGUF file '" + path_ + "': tensor '" + t.name + "' has type " + ggml::type_name(t.type) +
                     "; forge reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1 (requantize the model, e.g. to Q8_0)");
}

std::vector<float> GgufFile::tensor(const TensorInfo& t) const {
  require_supported(t);
  const Mapping map(path_);
  if (map.size() != file_size_) throw InputError("GGUF file '" + path_ + "' changed while it was read");
  std::vector<float> out(static_cast<size_t>(t.elements()));
  ggml::dequantize(t.type, map.data() + data_offset_ + t.offset, t.elements(), out.data());
  return out;
}

namespace {
template <class T>
const T* typed(const std::map<std::string, GgufFile::Value>& meta, const std::string& key, const std::string& path,
               const char* kind) {
  const auto it = meta.find(key);
  if (it == meta.end()) throw InputError("GGUF file '" + path + "' has no metadata '" + key + "'");
  const T* v = std::get_if<T>(&it->second);
  if (!v) throw InputError("GGUF file '" + path + "': metadata '" + key + "' is not " + kind);
  return v;
}
}  // namespace

std::string GgufFile::get_string(const std::string& key) const { return *typed<std::string>(meta_, key, path_, "a string"); }

int64_t GgufFile::get_int(const std::string& key, int64_t lo, int64_t hi) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) throw InputError("GGUF file '" + path_ + "' has no metadata '" + key + "'");
  const auto outside = [&](const std::string& value) {
    return InputError("GGUF file '" + path_ + "': metadata '" + key + "' is " + value + ", outside [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  if (const auto* u = std::get_if<uint64_t>(&it->second)) {
    if (hi < 0 || *u > static_cast<uint64_t>(hi) || static_cast<int64_t>(*u) < lo) throw outside(std::to_string(*u));
    return static_cast<int64_t>(*u);
  }
  if (const auto* s = std::get_if<int64_t>(&it->second)) {
    if (*s < lo || *s > hi) throw outside(std::to_string(*s));
    return *s;
  }
  throw InputError("GGUF file '" + path_ + "': metadata '" + key + "' is not an integer");
}

double GgufFile::get_float(const std::string& key) const {
  const auto it = meta_.find(key);
  if (it == meta_.end()) throw InputError("GGUF file '" + path_ + "' has no metadata '" + key + "'");
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&it->second)) return static_cast<double>(*u);
  if (const auto* s = std::get_if<int64_t>(&it->second)) return static_cast<double>(*s);
  throw InputError("GGUF file '" + path_ + "': metadata '" + key + "' is not a number");
}

bool GgufFile::get_bool(const std::string& key) const { return *typed<bool>(meta_, key, path_, "a bool"); }

std::vector<std::string> GgufFile::get_strings(const std::string& key) const {
  return *typed<std::vector<std::string>>(meta_, key, path_, "an array of strings");
}

std::vector<int64_t> GgufFile::get_ints(const std::string& key) const {
  return *typed<std::vector<int64_t>>(meta_, key, path_, "an array of integers");
}

int64_t GgufFile::get_int(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const {
  return has(key) ? get_int(key, lo, hi) : fallback;
}
double GgufFile::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
std::string GgufFile::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

}  // namespace forge
