// See rmsnorm.cuh.
#include "backend/cuda/rmsnorm.cuh"

#include "backend/cuda/bf16.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kRowThreads = 128;
constexpr int kColTile = 32, kRowLanes = 8;
constexpr int kDwChunkRows = 256;  // rows per dw partial

// x16 (optional, with FP32 x): x rounded to bf16, the layer's kept copy;
// y as Out (FP32, or bf16 for a GEMM that rounds its operands).
template <class In, class Out>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_fwd_kernel(const In* __restrict__ x, const float* __restrict__ w, Out* __restrict__ y,
                       float* __restrict__ rstd, __nv_bfloat16* __restrict__ x16, int d, float eps) {
  FORGE_SHARED_MEMORY(float, scratch);
  const size_t row = size_t(blockIdx.x) * d;
  float ss = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = widen(x[row + i]);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / d + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = widen(x[row + i]);
    store_value(y + row + i, v * r * w[i]);
    if (x16) x16[row + i] = __float2bfloat16(v);
  }
}

// x as In and dy as G: each FP32 or bf16.
template <class In, class G>
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_dx_kernel(const In* __restrict__ x, const float* __restrict__ w, const float* __restrict__ rstd,
                      const G* __restrict__ dy, float* __restrict__ dx, int d) {
  FORGE_SHARED_MEMORY(float, scratch);
  const size_t row = size_t(blockIdx.x) * d;
  float dot = 0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) dot += w[i] * widen(dy[row + i]) * widen(x[row + i]);
  dot = block_sum(dot, scratch);
  const float r = rstd[blockIdx.x];
  const float c = r * r * r * dot / d;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    dx[row + i] += r * w[i] * widen(dy[row + i]) - c * widen(x[row + i]);
}

// blockDim (kColTile, kRowLanes), grid (column tiles, row chunks): column
// blockIdx.x * kColTile + threadIdx.x over the rows of chunk blockIdx.y, the
// kRowLanes lanes folded in shared memory in lane order, into
// partials[chunk][col].
template <class In, class G>
__global__ void __launch_bounds__(kColTile* kRowLanes)
    rmsnorm_dw_partial_kernel(const In* __restrict__ x, const float* __restrict__ rstd, const G* __restrict__ dy,
                              float* __restrict__ partials, int T, int d) {
  FORGE_SHARED_MEMORY(float, part);  // [kRowLanes][kColTile]
  const int col = blockIdx.x * kColTile + threadIdx.x;
  const int t0 = blockIdx.y * kDwChunkRows, t1 = min(T, t0 + kDwChunkRows);
  float acc = 0;
  if (col < d)
    for (int t = t0 + threadIdx.y; t < t1; t += kRowLanes)
      acc += widen(dy[size_t(t) * d + col]) * widen(x[size_t(t) * d + col]) * rstd[t];
  part[threadIdx.y * kColTile + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float s = 0;
    for (int l = 0; l < kRowLanes; ++l) s += part[l * kColTile + threadIdx.x];
    partials[size_t(blockIdx.y) * d + col] = s;
  }
}

// dw[col] += the chunks' partial sums, in chunk order.
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_dw_sum_kernel(const float* __restrict__ partials, float* __restrict__ dw, int chunks, int d) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= d) return;
  float s = 0;
  for (int c = 0; c < chunks; ++c) s += partials[size_t(c) * d + col];
  dw[col] += s;
}

int dw_chunks(int T) { return (T + kDwChunkRows - 1) / kDwChunkRows; }

template <class In, class Out>
void fwd(const In* x, const float* w, Out* y, float* rstd, __nv_bfloat16* x16, int T, int d, float eps,
         cudaStream_t stream) {
  if (T > 0)
    FORGE_LAUNCH((rmsnorm_fwd_kernel<In, Out>), unsigned(T), kRowThreads, 32 * sizeof(float), stream, x, w, y, rstd,
                 x16, d, eps);
}
template <class In>
void fwd(const In* x, const float* w, float* y, __nv_bfloat16* y16, float* rstd, __nv_bfloat16* x16, int T, int d,
         float eps, cudaStream_t stream) {
  if (y)
    fwd(x, w, y, rstd, x16, T, d, eps, stream);
  else
    fwd(x, w, y16, rstd, x16, T, d, eps, stream);
}

template <class In, class G>
void bwd(const In* x, const float* w, const float* rstd, const G* dy, float* dx, float* dw, float* partials, int T,
         int d, cudaStream_t stream) {
  if (T <= 0) return;
  FORGE_LAUNCH((rmsnorm_dx_kernel<In, G>), unsigned(T), kRowThreads, 32 * sizeof(float), stream, x, w, rstd, dy, dx,
               d);
  const int chunks = dw_chunks(T);
  FORGE_LAUNCH((rmsnorm_dw_partial_kernel<In, G>), dim3((d + kColTile - 1) / kColTile, chunks),
               dim3(kColTile, kRowLanes),
               kColTile * kRowLanes * sizeof(float), stream, x, rstd, dy, partials, T, d);
  FORGE_LAUNCH(rmsnorm_dw_sum_kernel, unsigned((d + kRowThreads - 1) / kRowThreads), kRowThreads, 0, stream,
               partials, dw, chunks, d);
}
}  // namespace

void launch_rmsnorm_fwd(const float* x, const float* w, float* y, __nv_bfloat16* y16, float* rstd,
                        __nv_bfloat16* x16, int T, int d, float eps, cudaStream_t stream) {
  fwd(x, w, y, y16, rstd, x16, T, d, eps, stream);
}
void launch_rmsnorm_fwd(const __nv_bfloat16* x, const float* w, float* y, __nv_bfloat16* y16, float* rstd, int T,
                        int d, float eps, cudaStream_t stream) {
  fwd(x, w, y, y16, rstd, nullptr, T, d, eps, stream);
}

size_t rmsnorm_dw_partials(int T, int d) { return T > 0 ? size_t(dw_chunks(T)) * d : 0; }

void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                        float* partials, int T, int d, cudaStream_t stream) {
  bwd(x, w, rstd, dy, dx, dw, partials, T, d, stream);
}
void launch_rmsnorm_bwd(const __nv_bfloat16* x, const float* w, const float* rstd, const float* dy,
                        const __nv_bfloat16* dy16, float* dx, float* dw, float* partials, int T, int d,
                        cudaStream_t stream) {
  if (dy)
    bwd(x, w, rstd, dy, dx, dw, partials, T, d, stream);
  else
    bwd(x, w, rstd, dy16, dx, dw, partials, T, d, stream);
}

FORGE_CUDA_NAMESPACE_END
