#include "core/npy.hpp"

#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "core/error.hpp"

namespace forge::npy {

static_assert(std::endian::native == std::endian::little,
              "npy: forge reads and writes little-endian data on a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes
constexpr size_t kMagicLen = 6;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw InputError(path + ": not a valid .npy file for forge: " + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// A tiny reader for the header, a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  void parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool got_descr = false, got_order = false, got_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = quoted();
      skip_ws();
      expect(':');
      skip_ws();
      // A key given twice is refused (Python's literal reader would keep the
      // last one without a word).
      const auto once = [&](bool* got) {
        if (*got) bad(path_, "header key '" + key + "' appears twice");
        *got = true;
      };
      if (key == "descr") {
        once(&got_descr);
        *descr = quoted();
      } else if (key == "fortran_order") {
        once(&got_order);
        *fortran = boolean();
      } else if (key == "shape") {
        once(&got_shape);
        *shape = tuple();
      } else {
        bad(path_, "unexpected header key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() != '}') bad(path_, "expected ',' or '}' in the header at offset " + std::to_string(i_));
    }
    if (!got_descr || !got_order || !got_shape)
      bad(path_, "header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c)
      bad(path_, std::string("expected '") + c + "' in the header at offset " + std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') bad(path_, "expected a quoted string in the header");
    ++i_;
    const size_t end = s_.find(q, i_);
    if (end == std::string::npos) bad(path_, "unterminated string in the header");
    std::string out = s_.substr(i_, end - i_);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad(path_, "fortran_order is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> out;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        bad(path_, "shape holds something other than non-negative integers");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const int digit = peek() - '0';
        if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) bad(path_, "shape dimension overflows");
        v = v * 10 + digit;
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 longs
      out.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        bad(path_, "malformed shape tuple");
      }
    }
  }

  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;
};

}  // namespace

const char* descr(DType t) {
  switch (t) {
    case DType::kF32: return "<f4";
    case DType::kI32: return "<i4";
    case DType::kF64: return "<f8";
  }
  throw Error("npy: unknown dtype");
}

size_t item_size(DType t) { return t == DType::kF64 ? 8 : 4; }

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t s : shape) {
    if (s < 0) throw Error("npy: negative dimension in shape " + shape_text(shape));
    n *= static_cast<size_t>(s);
  }
  return n;
}

void save(const std::string& path, DType dtype, const void* data, const std::vector<int64_t>& shape) {
  const size_t n = numel(shape);
  std::string header = std::string("{'descr': '") + descr(dtype) +
                       "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Magic (6) + version (2) + header length (2) + header + '\n', padded with
  // spaces to a multiple of 64 bytes, as NumPy writes it.
  const size_t unpadded = kMagicLen + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) throw Error("npy: header too long for format 1.0 (" + path + ")");

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw InputError("cannot open '" + path + "' for writing");
  f.write(kMagic, kMagicLen);
  const unsigned char version[2] = {1, 0};
  f.write(reinterpret_cast<const char*>(version), 2);
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(len), 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  if (n) f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * item_size(dtype)));
  f.close();
  if (!f) throw InputError("failed writing '" + path + "'");
}

void save_checked(const std::string& path, DType dtype, const void* data, size_t count,
                  const std::vector<int64_t>& shape) {
  if (numel(shape) != count)
    throw Error("npy: shape " + shape_text(shape) + " does not hold " + std::to_string(count) +
                " values (" + path + ")");
  save(path, dtype, data, shape);
}

std::vector<double> Array::as_double() const {
  std::vector<double> out(size());
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      case DType::kI32: {
        int32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        out[i] = v;
        break;
      }
      case DType::kF64:
        std::memcpy(&out[i], bytes.data() + 8 * i, 8);
        break;
    }
  }
  return out;
}

void Array::check_dtype(DType want) const {
  if (want != dtype)
    throw InputError(source + ": holds '" + descr(dtype) + "' values, expected '" + descr(want) + "'");
}

Array load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError("cannot open '" + path + "' for reading");
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw InputError("failed reading '" + path + "'");

  if (file.size() < kMagicLen + 4 || file.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    bad(path, "missing the \\x93NUMPY magic");
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(file[i]); };
  const int major = byte(6);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = byte(8) | (static_cast<size_t>(byte(9)) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) bad(path, "truncated header");
    header_len = byte(8) | (static_cast<size_t>(byte(9)) << 8) |
                 (static_cast<size_t>(byte(10)) << 16) | (static_cast<size_t>(byte(11)) << 24);
    header_start = 12;
  } else {
    bad(path, "unsupported format version " + std::to_string(major) + "." + std::to_string(byte(7)));
  }
  if (file.size() < header_start + header_len) bad(path, "truncated header");
  const std::string header = file.substr(header_start, header_len);

  std::string d;
  bool fortran = false;
  Array a;
  a.source = path;
  HeaderParser(header, path).parse(&d, &fortran, &a.shape);
  if (d == "<f4") {
    a.dtype = DType::kF32;
  } else if (d == "<i4") {
    a.dtype = DType::kI32;
  } else if (d == "<f8") {
    a.dtype = DType::kF64;
  } else {
    bad(path, "unsupported dtype '" + d + "' (forge reads '<f4', '<i4', '<f8')");
  }
  if (fortran) bad(path, "Fortran order is not supported (save a C-contiguous array)");

  size_t n = 1;
  for (int64_t s : a.shape) {
    if (s != 0 && n > std::numeric_limits<size_t>::max() / 8 / static_cast<size_t>(s))
      bad(path, "shape " + shape_text(a.shape) + " is too large");
    n *= static_cast<size_t>(s);
  }
  const size_t data_start = header_start + header_len;
  const size_t want = n * item_size(a.dtype);
  const size_t have = file.size() - data_start;
  if (have != want)
    bad(path, "shape " + shape_text(a.shape) + " of '" + d + "' needs " + std::to_string(want) +
                  " data bytes, the file has " + std::to_string(have));
  a.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_start), file.end());
  return a;
}

}  // namespace forge::npy
