#include "pretrained/ggml_quants.hpp"

#include <cmath>
#include <cstring>

namespace forge::ggml {
namespace {

constexpr int kBlock = 32;

uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

std::string type_name(uint32_t type) {
  static const char* const kNames[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                       "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                       "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
                                       "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return "unknown (" + std::to_string(type) + ")";
}

bool supported(uint32_t type) { return block_values(type) > 0; }

int64_t block_values(uint32_t type) {
  switch (type) {
    case kF32:
    case kF16:
    case kBF16: return 1;
    case kQ8_0:
    case kQ4_0:
    case kQ4_1: return kBlock;
  }
  return 0;
}

size_t bytes_of(uint32_t type, int64_t n) {
  size_t block_bytes = 0;
  switch (type) {
    case kF32: block_bytes = 4; break;
    case kF16:
    case kBF16: block_bytes = 2; break;
    case kQ8_0: block_bytes = 2 + kBlock; break;
    case kQ4_0: block_bytes = 2 + kBlock / 2; break;
    case kQ4_1: block_bytes = 4 + kBlock / 2; break;
    default: return 0;
  }
  const int64_t block = block_values(type);
  size_t bytes = 0;
  if (n < 0 || n % block || __builtin_mul_overflow(static_cast<size_t>(n / block), block_bytes, &bytes)) return 0;
  return bytes;
}

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | (abs > 0x7F800000u ? 0x7E00 : 0x7C00);  // NaN, inf
  if (abs >= 0x477FF000u) return sign | 0x7C00;                                  // overflow to inf
  if (abs < 0x38800000u) {                                                       // subnormal or zero
    const float a = std::fabs(f);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));        // 2^24, ties to even
  }
  const uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);  // round to nearest even at bit 13
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

void dequantize(uint32_t type, const uint8_t* p, int64_t n, float* out) {
  switch (type) {
    case kF32: std::memcpy(out, p, static_cast<size_t>(n) * 4); return;
    case kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(load16(p + 2 * i));
      return;
    case kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(load16(p + 2 * i));
      return;
    case kQ8_0:
      for (int64_t b = 0; b < n / kBlock; ++b, p += 2 + kBlock) {
        const float d = half_to_float(load16(p));
        const auto* q = reinterpret_cast<const int8_t*>(p + 2);
        for (int i = 0; i < kBlock; ++i) out[b * kBlock + i] = d * q[i];
      }
      return;
    case kQ4_0:
      for (int64_t b = 0; b < n / kBlock; ++b, p += 2 + kBlock / 2) {
        const float d = half_to_float(load16(p));
        const uint8_t* q = p + 2;
        for (int i = 0; i < kBlock / 2; ++i) {
          out[b * kBlock + i] = d * ((q[i] & 0x0F) - 8);
          out[b * kBlock + i + kBlock / 2] = d * ((q[i] >> 4) - 8);
        }
      }
      return;
    case kQ4_1:
      for (int64_t b = 0; b < n / kBlock; ++b, p += 4 + kBlock / 2) {
        const float d = half_to_float(load16(p)), m = half_to_float(load16(p + 2));
        const uint8_t* q = p + 4;
        for (int i = 0; i < kBlock / 2; ++i) {
          out[b * kBlock + i] = d * (q[i] & 0x0F) + m;
          out[b * kBlock + i + kBlock / 2] = d * (q[i] >> 4) + m;
        }
      }
      return;
  }
}

}  // namespace forge::ggml
