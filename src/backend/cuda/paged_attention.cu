// See paged_attention.cuh.
#include "backend/cuda/paged_attention.cuh"

#include <algorithm>
#include <cmath>

#include "backend/cuda/bf16.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kLaneDims = kPagedMaxHeadDim / 32;  // head-dim registers per lane
constexpr int kMinSplit = 128;                    // positions per split, at least
constexpr int kTargetBlocks = 1024;               // enough blocks for a large GPU

template <class C>
__global__ void kv_cache_write_kernel(const KvCacheWriteArgs a) {
  C* k_cache = static_cast<C*>(a.k_cache);
  C* v_cache = static_cast<C*>(a.v_cache);
  const size_t n = size_t(a.T) * a.row_dim;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / a.row_dim, c = e - t * a.row_dim;
    const size_t dst = size_t(a.slot[t]) * a.row_dim + c;
    store_value(k_cache + dst, a.k[t * a.ld + c]);
    store_value(v_cache + dst, a.v[t * a.ld + c]);
  }
}

// Positions per split and the number of splits for a.
struct Splits {
  int len, count;
};
Splits choose_splits(const PagedAttentionArgs& a) {
  if (a.max_len <= kMinSplit) return {1 << 30, 1};  // short, or not known
  const int by_blocks = std::max(1, kTargetBlocks / std::max(1, a.T * a.n_heads));
  const int by_length = std::max(1, a.max_len / kMinSplit);  // splits of >= kMinSplit positions
  const int count = std::min(by_blocks, by_length);
  if (count <= 1) return {1 << 30, 1};
  return {(a.max_len + count - 1) / count, count};
}

// partial: [T][H][splits][D + 2] = (o[D], m, l), or null: write out.
template <class C>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(const PagedAttentionArgs a, float scale, int split_len, float* partial) {
  FORGE_SHARED_MEMORY(float, smem);
  const int D = a.head_dim, bs = a.block_size;
  float* wo = smem;                  // [warps][D]
  float* wm = wo + kWarps * D;       // [warps]
  float* wl = wm + kWarps;           // [warps]
  const int t = blockIdx.x, h = blockIdx.y, z = blockIdx.z, splits = gridDim.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int kvh = h / (a.n_heads / a.n_kv_heads);
  const size_t row = size_t(a.n_kv_heads) * D;
  const C* k_cache = static_cast<const C*>(a.k_cache);
  const C* v_cache = static_cast<const C*>(a.v_cache);
  const int32_t* table = a.block_table + a.table_begin[t];
  const int n = a.position[t] + 1;
  const int p0 = z * split_len, p1 = z == splits - 1 ? n : min(n, p0 + split_len);  // the last split to the end

  float q[kLaneDims], o[kLaneDims];
#pragma unroll
  for (int c = 0; c < kLaneDims; ++c) {
    const int d = lane + 32 * c;
    q[c] = d < D ? a.q[size_t(t) * a.ld_q + h * D + d] * scale : 0.0f;
    o[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int pos = p0 + warp; pos < p1; pos += kWarps) {
    const size_t base = (size_t(table[pos / bs]) * bs + pos % bs) * row + kvh * D;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < kLaneDims; ++c) {
      const int d = lane + 32 * c;
      if (d < D) s += q[c] * widen(k_cache[base + d]);
    }
    s = warp_sum(s);
    const float mx = fmaxf(m, s), corr = expf(m - mx), p = expf(s - mx);
    l = l * corr + p;
    m = mx;
#pragma unroll
    for (int c = 0; c < kLaneDims; ++c) {
      const int d = lane + 32 * c;
      if (d < D) o[c] = o[c] * corr + p * widen(v_cache[base + d]);
    }
  }
#pragma unroll
  for (int c = 0; c < kLaneDims; ++c) {
    const int d = lane + 32 * c;
    if (d < D) wo[warp * D + d] = o[c];
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  float L = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    if (wl[w] > 0.0f) L += wl[w] * expf(wm[w] - M);
  float* dst = partial ? partial + ((size_t(t) * a.n_heads + h) * splits + z) * (D + 2) : nullptr;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float O = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (wl[w] > 0.0f) O += wo[w * D + d] * expf(wm[w] - M);
    if (dst)
      dst[d] = O;
    else
      a.out[size_t(t) * a.n_heads * D + h * D + d] = O / L;
  }
  if (dst && threadIdx.x == 0) {
    dst[D] = M;
    dst[D + 1] = L;
  }
}

// out[t][h] from the splits' (o, m, l); block per (row, head).
__global__ void __launch_bounds__(kThreads) paged_attention_combine_kernel(const PagedAttentionArgs a, int splits,
                                                                           const float* partial) {
  const int t = blockIdx.x, h = blockIdx.y, D = a.head_dim;
  const float* src = partial + (size_t(t) * a.n_heads + h) * splits * (D + 2);
  float M = -INFINITY;
  for (int z = 0; z < splits; ++z) M = fmaxf(M, src[z * (D + 2) + D]);
  float L = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const float lz = src[z * (D + 2) + D + 1];
    if (lz > 0.0f) L += lz * expf(src[z * (D + 2) + D] - M);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float O = 0.0f;
    for (int z = 0; z < splits; ++z)
      if (src[z * (D + 2) + D + 1] > 0.0f) O += src[z * (D + 2) + d] * expf(src[z * (D + 2) + D] - M);
    a.out[size_t(t) * a.n_heads * D + h * D + d] = O / L;
  }
}

template <class C>
void launch_paged(const PagedAttentionArgs& a, float* scratch, cudaStream_t stream) {
  const Splits sp = choose_splits(a);
  const size_t smem = (size_t(kWarps) * a.head_dim + 2 * kWarps) * sizeof(float);
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  float* partial = sp.count > 1 ? scratch : nullptr;
  FORGE_LAUNCH(paged_attention_kernel<C>, dim3(a.T, a.n_heads, sp.count), kThreads, smem, stream, a, scale, sp.len,
               partial);
  if (partial)
    FORGE_LAUNCH(paged_attention_combine_kernel, dim3(a.T, a.n_heads), kThreads, 0, stream, a, sp.count,
                 static_cast<const float*>(partial));
}
}  // namespace

void launch_kv_cache_write(const KvCacheWriteArgs& a, size_t value_bytes, cudaStream_t stream) {
  const size_t n = size_t(a.T) * a.row_dim;
  if (!n) return;
  if (value_bytes == 2)
    FORGE_LAUNCH(kv_cache_write_kernel<__nv_bfloat16>, grid_for(n, 256), 256u, 0, stream, a);
  else
    FORGE_LAUNCH(kv_cache_write_kernel<float>, grid_for(n, 256), 256u, 0, stream, a);
}

size_t paged_attention_scratch_floats(const PagedAttentionArgs& a) {
  const Splits sp = choose_splits(a);
  return sp.count > 1 ? size_t(a.T) * a.n_heads * sp.count * (a.head_dim + 2) : 0;
}

void launch_paged_attention_fwd(const PagedAttentionArgs& a, size_t value_bytes, float* scratch,
                                cudaStream_t stream) {
  FORGE_CHECK(a.head_dim >= 1 && a.head_dim <= kPagedMaxHeadDim,
              "CUDA paged attention supports head_dim up to " + std::to_string(kPagedMaxHeadDim) + ", got " +
                  std::to_string(a.head_dim));
  if (a.T <= 0) return;
  if (value_bytes == 2)
    launch_paged<__nv_bfloat16>(a, scratch, stream);
  else
    launch_paged<float>(a, scratch, stream);
}

FORGE_CUDA_NAMESPACE_END
