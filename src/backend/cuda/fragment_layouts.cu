// See fragment_layouts.hpp.
#include "backend/cuda/fragment_layouts.hpp"

#include <cstring>
#include <vector>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/wgmma.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {

// One m16n8k16 MMA: each lane gathers its fragments of A (16 x 16, row-major)
// and B (16 x 8, row-major here) by the ISA's row and column of element i of
// each fragment, D starts at C, and each lane writes back its four elements.
__global__ void mma_probe(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
  auto bits = [](__nv_bfloat16 x) { return uint32_t(__bfloat16_as_ushort(x)); };
  uint32_t a[4], b[2];
  for (int r = 0; r < 4; ++r) {
    a[r] = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e;
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      a[r] |= bits(A[row * 16 + col]) << (16 * e);
    }
  }
  for (int r = 0; r < 2; ++r) {
    b[r] = 0;
    for (int e = 0; e < 2; ++e) {
      const int i = 2 * r + e, row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      b[r] |= bits(B[row * 8 + g]) << (16 * e);
    }
  }
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)];
  mma_bf16_m16n8k16(d, a, b);
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)] = d[i];
}

// One m16n8k8 TF32 MMA the same way (A 16 x 8, B 8 x 8, both row-major),
// A's operands with low_bits set in the 13 bits TF32 has not; and to_tf32
// of n values into rounded.
__global__ void mma_tf32_probe(const float* A, const float* B, const float* C, float* D, const float* values,
                               uint32_t* rounded, int n, uint32_t low_bits) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
  const uint32_t a[4] = {to_tf32(A[g * 8 + t]) | low_bits, to_tf32(A[(g + 8) * 8 + t]) | low_bits,
                         to_tf32(A[g * 8 + t + 4]) | low_bits, to_tf32(A[(g + 8) * 8 + t + 4]) | low_bits};
  const uint32_t b[2] = {to_tf32(B[t * 8 + g]), to_tf32(B[(t + 4) * 8 + g])};
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)];
  mma_tf32_m16n8k8(d, a, b);
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + t * 2 + (i & 1)] = d[i];
  for (int i = lane; i < n; i += 32) rounded[i] = to_tf32(values[i]);
}

constexpr int kPitch = 24;  // the ldmatrix tile's row pitch (16-byte rows)

// ldmatrix.x4 on a 16 x 16 tile in shared memory: lane l gives row l % 16
// at column 8 (l / 16); out[l * 4 + i] is register i.
__global__ void ldmatrix_probe(const uint16_t* tile, uint32_t* out, int trans) {
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int lane = static_cast<int>(threadIdx.x);
  for (int e = lane; e < 16 * kPitch; e += 32) s[e] = tile[e];
  __syncwarp();
  uint32_t r[4];
  const uint16_t* row = s + (lane % 16) * kPitch + (lane / 16) * 8;
  if (trans)
    ldmatrix_x4_trans(r, row);
  else
    ldmatrix_x4(r, row);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
}

// A probe's device buffers, freed however it ends (a failed upload or
// launch threw past the frees and leaked them).
class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : held_) cudaFree(p);
  }
  template <class T>
  T* copy(const std::vector<T>& host) {
    void* p = nullptr;
    FORGE_CUDA_CHECK(cudaMalloc(&p, host.size() * sizeof(T)));
    held_.push_back(p);
    FORGE_CUDA_CHECK(cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, nullptr));
    return static_cast<T*>(p);
  }

 private:
  std::vector<void*> held_;
};

template <class T>
std::vector<T> host_copy(const T* dev, size_t n) {
  std::vector<T> host(n);
  FORGE_CUDA_CHECK(cudaMemcpyAsync(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr));
  FORGE_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return host;
}

std::string check_mma() {
  // Distinct small integers: every product and sum is exact, so any misplaced
  // element changes D.
  std::vector<__nv_bfloat16> A(16 * 16), B(16 * 8);
  std::vector<float> C(16 * 8);
  for (int i = 0; i < 16 * 16; ++i) A[i] = __float2bfloat16(float((i * 7) % 23 - 11));
  for (int i = 0; i < 16 * 8; ++i) B[i] = __float2bfloat16(float((i * 5) % 19 - 9));
  for (int i = 0; i < 16 * 8; ++i) C[i] = float(i % 13);
  DeviceBuffers buffers;
  __nv_bfloat16 *dA = buffers.copy(A), *dB = buffers.copy(B);
  float* dC = buffers.copy(C);
  float* dD = buffers.copy(std::vector<float>(16 * 8, -1.0f));
  FORGE_LAUNCH(mma_probe, 1u, 32u, 0, nullptr, dA, dB, dC, dD);
  const std::vector<float> D = host_copy(dD, 16 * 8);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double want = C[r * 8 + c];
      for (int k = 0; k < 16; ++k) want += double(__bfloat162float(A[r * 16 + k])) * __bfloat162float(B[k * 8 + c]);
      if (D[r * 8 + c] != float(want))
        return "mma.sync m16n8k16: D[" + std::to_string(r) + "][" + std::to_string(c) + "] = " +
               std::to_string(D[r * 8 + c]) + ", want " + std::to_string(want);
    }
  return "";
}

// Integer-valued A, B and C (exact in TF32 and in every FP32 sum); and
// cvt.rna.tf32.f32 on ties (away from zero) and non-ties. With low_bits
// (0x1800: three quarters of a TF32 ulp, past the half), A's operands are
// not TF32 values: the MMA must truncate them to A (the emulation's model,
// which split_tf32's unrounded small part relies on for its error bound;
// rounding would make them A + one ulp).
std::string check_mma_tf32(uint32_t low_bits) {
  std::vector<float> A(16 * 8), B(8 * 8), C(16 * 8);
  for (int i = 0; i < 16 * 8; ++i) A[i] = float((i * 7) % 23 - 11);
  for (int i = 0; i < 8 * 8; ++i) B[i] = float((i * 5) % 19 - 9);
  for (int i = 0; i < 16 * 8; ++i) C[i] = float(i % 13);
  // 1 + 2^-11 and 1 + 3 2^-11 are ties (to 1 + 2^-10 and 1 + 2^-9, away
  // from zero), 1 + 2^-12 rounds down; the TF32 values of the rest are exact.
  const std::vector<float> values = {1.0f + 0x1p-11f, -(1.0f + 0x1p-11f), 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-12f,
                                     1.5f, -0.0f};
  const std::vector<float> want_rounded = {1.0f + 0x1p-10f, -(1.0f + 0x1p-10f), 1.0f + 0x1p-9f, 1.0f, 1.5f, -0.0f};
  DeviceBuffers buffers;
  float *dA = buffers.copy(A), *dB = buffers.copy(B), *dC = buffers.copy(C), *dvalues = buffers.copy(values);
  float* dD = buffers.copy(std::vector<float>(16 * 8, -1.0f));
  uint32_t* drounded = buffers.copy(std::vector<uint32_t>(values.size()));
  FORGE_LAUNCH(mma_tf32_probe, 1u, 32u, 0, nullptr, dA, dB, dC, dD, dvalues, drounded, int(values.size()),
               low_bits);
  const std::vector<float> D = host_copy(dD, 16 * 8);
  const std::vector<uint32_t> rounded = host_copy(drounded, values.size());
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c) {
      double want = C[r * 8 + c];
      for (int k = 0; k < 8; ++k) want += double(A[r * 8 + k]) * B[k * 8 + c];
      if (D[r * 8 + c] != float(want))
        return std::string("mma.sync m16n8k8 tf32") + (low_bits ? " (A's low 13 bits set: not truncated)" : "") +
               ": D[" + std::to_string(r) + "][" + std::to_string(c) + "] = " + std::to_string(D[r * 8 + c]) +
               ", want " + std::to_string(want);
    }
  for (size_t i = 0; i < values.size(); ++i) {
    float got;
    std::memcpy(&got, &rounded[i], sizeof got);
    if (std::memcmp(&got, &want_rounded[i], sizeof got) != 0)
      return "cvt.rna.tf32.f32(" + std::to_string(values[i]) + ") = " + std::to_string(got) + ", want " +
             std::to_string(want_rounded[i]);
  }
  return "";
}

// Matrix i of the x4 is rows 8 (i % 2) .. + 7 at columns 8 (i / 2) .. + 7 (the
// addresses lanes 8 i .. 8 i + 7 gave); lane l receives row l / 4, columns
// 2 (l % 4) and 2 (l % 4) + 1 of it (low half first), or with .trans rows
// 2 (l % 4), 2 (l % 4) + 1 at column l / 4.
std::string check_ldmatrix(bool trans) {
  std::vector<uint16_t> tile(16 * kPitch);
  for (size_t e = 0; e < tile.size(); ++e) tile[e] = static_cast<uint16_t>(1000 + e);  // distinct
  DeviceBuffers buffers;
  uint16_t* dtile = buffers.copy(tile);
  uint32_t* dout = buffers.copy(std::vector<uint32_t>(32 * 4));
  FORGE_LAUNCH(ldmatrix_probe, 1u, 32u, 16 * kPitch * sizeof(uint16_t), nullptr, dtile, dout, int(trans));
  const std::vector<uint32_t> out = host_copy(dout, 32 * 4);
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int r0 = 8 * (i % 2), c0 = 8 * (i / 2), g = l / 4, t = l % 4;
      auto at = [&](int r, int c) { return uint32_t(tile[(r0 + r) * kPitch + c0 + c]); };
      const uint32_t want = trans ? at(2 * t, g) | at(2 * t + 1, g) << 16 : at(g, 2 * t) | at(g, 2 * t + 1) << 16;
      if (out[l * 4 + i] != want)
        return std::string("ldmatrix.x4") + (trans ? ".trans" : "") + ": lane " + std::to_string(l) +
               " register " + std::to_string(i) + " = " + std::to_string(out[l * 4 + i]) + ", want " +
               std::to_string(want);
    }
  return "";
}

// ---- wgmma ----------------------------------------------------------------
// How the probe's operands lie in shared memory: A (64 x 16) at byte 0, B
// (16 x 16) at b_offset; each by its descriptor's major-ness and offsets.
struct WgmmaProbe {
  uint32_t a_lbo, a_sbo, b_lbo, b_sbo, b_offset;
  int accumulate;
};

// Byte offset of element (mn, k) of a no-swizzle operand (wgmma.cuh).
uint32_t operand_offset(bool trans, uint32_t lbo, uint32_t sbo, int mn, int k) {
  return trans ? (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
               : (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
}

// One m64n16k16 by the 128 threads of a warpgroup: the shared-memory image
// (halves) copied in, A from it (Mode 0: A K-major and B K-major; 1: A
// M-major and B N-major) or gathered into registers from the row-major A
// (Mode 2: B K-major; 3: B N-major); D starts at C (row-major 64 x 16) and
// is written back by its layout. Launched where wgmma_supported()
// (cuda_backend.hpp).
template <int Mode>
__global__ void wgmma_probe(const uint16_t* image, int halves, const uint16_t* A, const WgmmaProbe p,
                            const float* C, float* D) {
#ifdef FORGE_WGMMA
  FORGE_SHARED_MEMORY(uint16_t, s);
  const int r = static_cast<int>(threadIdx.x), w = r / 32, g = (r % 32) / 4, t = r % 4;
  for (int e = r; e < halves; e += 128) s[e] = image[e];
  fence_proxy_async();
  __syncthreads();
  float d[8];
  for (int i = 0; i < 8; ++i) d[i] = C[(16 * w + g + 8 * ((i / 2) % 2)) * 16 + 8 * (i / 4) + 2 * t + i % 2];
  const uint64_t desc_b = wgmma_desc(s + p.b_offset / 2, p.b_lbo, p.b_sbo);
  if constexpr (Mode < 2) {
    wgmma_fence_operands(d);
    wgmma_fence();
    wgmma_ss<16, Mode, Mode>(d, wgmma_desc(s, p.a_lbo, p.a_sbo), desc_b, p.accumulate != 0);
  } else {
    uint32_t a[4];  // A's fragment, made before the fence
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * w + g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
      a[i] = uint32_t(A[row * 16 + col]) | uint32_t(A[row * 16 + col + 1]) << 16;
    }
    wgmma_fence_operands(a);
    wgmma_fence_operands(d);
    wgmma_fence();
    wgmma_rs<16, Mode - 2>(d, a, desc_b, p.accumulate != 0);
  }
  wgmma_commit();
  wgmma_wait<0>(d);
  for (int i = 0; i < 8; ++i) D[(16 * w + g + 8 * ((i / 2) % 2)) * 16 + 8 * (i / 4) + 2 * t + i % 2] = d[i];
#else
  (void)image, (void)halves, (void)A, (void)p, (void)C, (void)D;
  __trap();
#endif
}

std::string check_wgmma(int mode, bool accumulate) {
  static const char* const kModes[] = {"A and B by descriptor, both K-major", "A M-major and B N-major by descriptor",
                                       "A in registers, B K-major", "A in registers, B N-major"};
  const bool trans = mode == 1 || mode == 3;  // B's (and in mode 1 A's) major-ness
  // Offsets unlike each other and the dense ones (a swapped LBO and SBO, or
  // a misread major-ness, reads a sentinel or another element).
  WgmmaProbe p{};
  p.a_lbo = mode == 1 ? 1280 : 128;
  p.a_sbo = mode == 1 ? 144 : 288;
  p.b_lbo = trans ? 352 : 128;
  p.b_sbo = trans ? 160 : 272;
  p.b_offset = 2560;
  p.accumulate = accumulate;
  const uint16_t sentinel = __bfloat16_as_ushort(__float2bfloat16(4096.0f));
  std::vector<uint16_t> image((p.b_offset + 1024) / 2, sentinel), A(64 * 16), B(16 * 16);
  std::vector<float> C(64 * 16);
  for (int i = 0; i < 64 * 16; ++i) A[i] = __bfloat16_as_ushort(__float2bfloat16(float((i * 7) % 23 - 11)));
  for (int i = 0; i < 16 * 16; ++i) B[i] = __bfloat16_as_ushort(__float2bfloat16(float((i * 5) % 19 - 9)));
  for (int i = 0; i < 64 * 16; ++i) C[i] = float(i % 13);
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k)
      if (mode < 2) image[operand_offset(mode == 1, p.a_lbo, p.a_sbo, m, k) / 2] = A[m * 16 + k];
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) image[(p.b_offset + operand_offset(trans, p.b_lbo, p.b_sbo, n, k)) / 2] = B[k * 16 + n];
  DeviceBuffers buffers;
  uint16_t *dimage = buffers.copy(image), *dA = buffers.copy(A);
  float *dC = buffers.copy(C), *dD = buffers.copy(std::vector<float>(64 * 16, -1.0f));
  const size_t bytes = image.size() * 2;
  const int halves = static_cast<int>(image.size());
  switch (mode) {
    case 0: FORGE_LAUNCH(wgmma_probe<0>, 1u, 128u, bytes, nullptr, dimage, halves, dA, p, dC, dD); break;
    case 1: FORGE_LAUNCH(wgmma_probe<1>, 1u, 128u, bytes, nullptr, dimage, halves, dA, p, dC, dD); break;
    case 2: FORGE_LAUNCH(wgmma_probe<2>, 1u, 128u, bytes, nullptr, dimage, halves, dA, p, dC, dD); break;
    default: FORGE_LAUNCH(wgmma_probe<3>, 1u, 128u, bytes, nullptr, dimage, halves, dA, p, dC, dD); break;
  }
  const std::vector<float> D = host_copy(dD, 64 * 16);
  auto value = [](uint16_t bits) { return double(__bfloat162float(__ushort_as_bfloat16(bits))); };
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 16; ++n) {
      double want = accumulate ? C[m * 16 + n] : 0.0;
      for (int k = 0; k < 16; ++k) want += value(A[m * 16 + k]) * value(B[k * 16 + n]);
      if (D[m * 16 + n] != float(want))
        return std::string("wgmma m64n16k16 (") + kModes[mode] + (accumulate ? ", D += A B" : ", D = A B") +
               "): D[" + std::to_string(m) + "][" + std::to_string(n) + "] = " + std::to_string(D[m * 16 + n]) +
               ", want " + std::to_string(want);
    }
  return "";
}

}  // namespace

std::string check_wgmma_layouts() {
  for (int mode = 0; mode < 4; ++mode)
    for (const bool accumulate : {true, false})
      if (std::string failure = check_wgmma(mode, accumulate); !failure.empty()) return failure;
  return "";
}

std::string check_fragment_layouts() {
  for (const std::string& failure :
       {check_mma(), check_mma_tf32(0), check_mma_tf32(0x1800u), check_ldmatrix(false), check_ldmatrix(true)})
    if (!failure.empty()) return failure;
  return "";
}

FORGE_CUDA_NAMESPACE_END
