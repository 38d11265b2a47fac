// 64-bit FNV-1a over bytes: h = (h xor b) * 0x100000001b3 from the offset
// basis 0xcbf29ce484222325. A content digest (checkpoints' model
// fingerprints, the trajectory codec's pinned layout), not a checksum
// against tampering.
#pragma once
#include <cstdint>
#include <vector>

namespace forge {

inline uint64_t fnv1a64(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

}  // namespace forge
