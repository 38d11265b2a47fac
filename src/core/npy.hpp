// NumPy .npy files (format 1.0 written; 1.0, 2.0 and 3.0 read), for exchanging
// tensors with Python (the PyTorch oracle in tests/reference, analysis
// notebooks). Only what forge needs: little-endian float32 ('<f4'), int32
// ('<i4') and float64 ('<f8') in C order, any rank (rank 0 is a scalar).
//
// Writing is exact (raw bytes). Reading checks the magic, the header, the
// dtype, the order and that the file holds exactly shape-many values; a
// malformed or unsupported file is an InputError naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace forge::npy {

enum class DType { kF32, kI32, kF64 };

const char* descr(DType t);     // "<f4", "<i4", "<f8"
size_t item_size(DType t);      // 4, 4, 8

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::kF32; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <>
constexpr DType dtype_of<double>() { return DType::kF64; }

// Number of elements of a shape (1 for rank 0).
size_t numel(const std::vector<int64_t>& shape);

// Writes numel(shape) values from data. Throws InputError if the file cannot be
// written, Error on a negative dimension.
void save(const std::string& path, DType dtype, const void* data,
          const std::vector<int64_t>& shape);
// Same, and throws Error unless shape holds exactly `count` values.
void save_checked(const std::string& path, DType dtype, const void* data, size_t count,
                  const std::vector<int64_t>& shape);

template <typename T>
void save(const std::string& path, const T* data, const std::vector<int64_t>& shape) {
  save(path, dtype_of<T>(), data, shape);
}
// A vector; an empty shape means 1-D of its length (use save_scalar for rank
// 0). Throws Error when the shape
// does not hold exactly v.size() values.
template <typename T>
void save(const std::string& path, const std::vector<T>& v, std::vector<int64_t> shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  save_checked(path, dtype_of<T>(), v.data(), v.size(), shape);
}
// A rank-0 array (a scalar).
template <typename T>
void save_scalar(const std::string& path, T value) {
  save(path, dtype_of<T>(), &value, {});
}

struct Array {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;  // numel * item_size, little-endian

  size_t size() const { return numel(shape); }
  // The values, checked against T: throws InputError naming `source` when the
  // stored dtype is not T's.
  template <typename T>
  std::vector<T> values() const {
    check_dtype(dtype_of<T>());
    std::vector<T> out(size());
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
  // Any stored dtype converted to double.
  std::vector<double> as_double() const;

  std::string source;  // the file it was read from (for messages)

 private:
  void check_dtype(DType want) const;
};

// Reads a whole file. InputError naming the file when it cannot be read, is not
// a .npy file, has a dtype other than '<f4', '<i4', '<f8', is in Fortran order,
// or holds more or fewer data bytes than its shape needs.
Array load(const std::string& path);

}  // namespace forge::npy
