// Byte encoding of the messages that cross ranks (trajectory payloads of the
// data pool, generation requests and results): little-endian host layout of
// trivially copyable fields, vectors and strings as a uint32 length and then
// the elements. Every rank of one job runs the same binary on the same
// architecture, so no byte swapping.
//
// WireReader checks every length against the bytes left and against a cap,
// and throws InputError naming the message ("what") and the byte offset: a
// truncated or corrupted message is an error, never an out-of-bounds read.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

namespace forge {

class WireWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  template <class T>
  void put_vec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put(static_cast<uint32_t>(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    bytes_.insert(bytes_.end(), p, p + v.size() * sizeof(T));
  }
  void put_str(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& bytes() { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class WireReader {
 public:
  // `what` names the message in errors, e.g. "trajectory payload of slot 12".
  WireReader(const uint8_t* data, size_t size, std::string what)
      : data_(data), size_(size), what_(std::move(what)) {}

  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), "a field");
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <class T>
  std::vector<T> get_vec(uint32_t max_elements) {
    const uint32_t n = get<uint32_t>();
    if (n > max_elements) fail("a length of " + std::to_string(n) + " (at most " + std::to_string(max_elements) + ")");
    need(size_t{n} * sizeof(T), "an array");
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), data_ + pos_, size_t{n} * sizeof(T));
    pos_ += size_t{n} * sizeof(T);
    return v;
  }
  std::string get_str(uint32_t max_bytes = 1 << 20) {
    const uint32_t n = get<uint32_t>();
    if (n > max_bytes) fail("a string length of " + std::to_string(n));
    need(n, "a string");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == size_; }
  size_t remaining() const { return size_ - pos_; }
  // InputError unless `count` items of at least `min_bytes` each (taken as
  // 1 when 0: an item of no bytes is still an item to allocate) can still
  // follow (checked before allocating them).
  void expect_room(uint64_t count, size_t min_bytes, const char* what) const {
    if (count > remaining() / std::max<size_t>(min_bytes, 1)) fail(std::string("a count of ") + std::to_string(count) + " " + what);
  }
  // InputError unless every byte was read.
  void expect_end() const {
    if (!done()) fail(std::to_string(size_ - pos_) + " trailing bytes");
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw InputError(what_ + ": malformed message: " + problem + " at byte " + std::to_string(pos_) +
                     " of " + std::to_string(size_));
  }

 private:
  void need(size_t n, const char* kind) const {
    if (n > size_ - pos_) fail(std::string("truncated ") + kind);
  }
  const uint8_t* data_;
  size_t size_, pos_ = 0;
  std::string what_;
};

}  // namespace forge
