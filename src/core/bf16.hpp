// bf16 bit patterns on the host: the upper 16 bits of an FP32 value.
// float_to_bf16 rounds to nearest even (bf16(x) = x (1 + e), |e| <= 2^-9);
// a NaN stays a quiet NaN (its payload kept; the device conversion returns the
// canonical NaN instead). Numbers round as the CUDA __float2bfloat16 does.
#pragma once
#include <cstdint>
#include <cstring>

namespace forge {

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace forge
