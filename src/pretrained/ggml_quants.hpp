// ggml's tensor types that forge reads, and their dequantization to FP32.
// Blocks of 32 values, the low nibbles holding the block's first 16 values
// and the high nibbles its last 16:
//
//   F32    4 bytes a value
//   F16    IEEE half;  BF16: the upper 16 bits of an FP32
//   Q8_0   f16 d, int8 q[32]          x = d q
//   Q4_0   f16 d, uint8 q[16]         x = d (nibble - 8)
//   Q4_1   f16 d, f16 m, uint8 q[16]  x = d nibble + m
//
// (ggml type ids: F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 8, BF16 30.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16.hpp"

namespace forge::ggml {

enum Type : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30 };

// The type's name as ggml spells it ("Q4_1", "Q6_K", ...; "unknown (N)" otherwise).
std::string type_name(uint32_t type);
bool supported(uint32_t type);
// Values per block: 32 for the Q types, 1 for F32, F16 and BF16; 0 when unsupported.
int64_t block_values(uint32_t type);
// Bytes of n values of the type; 0 when unsupported, n does not fill whole
// blocks, or the size does not fit in size_t.
size_t bytes_of(uint32_t type, int64_t n);
// The number of values of a tensor of these dimensions (of either file
// format); -1 when a dimension is negative or the product overflows int64.
int64_t element_count(const std::vector<int64_t>& dims);
// Dequantizes n values into out.
void dequantize(uint32_t type, const uint8_t* data, int64_t n, float* out);

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
using ::forge::bf16_to_float;  // core/bf16.hpp
using ::forge::float_to_bf16;

}  // namespace forge::ggml
