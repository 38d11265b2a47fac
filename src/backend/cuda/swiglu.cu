// See swiglu.cuh.
#include "backend/cuda/swiglu.cuh"

#include "backend/cuda/bf16.cuh"

FORGE_CUDA_NAMESPACE_BEGIN
namespace {
constexpr unsigned kThreads = 256;

// gu16 (optional, with FP32 gu): g|u rounded to bf16, the layer's kept copy.
// out and dgu as Out: FP32, or bf16 for a GEMM that rounds its operands.
template <class In, class Out>
__global__ void swiglu_fwd_kernel(const In* __restrict__ gu, Out* __restrict__ out, __nv_bfloat16* __restrict__ gu16,
                                  int T, int F) {
  const size_t n = size_t(T) * F;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / F, i = e - t * F, gi = 2 * t * F + i;
    const float g = widen(gu[gi]), u = widen(gu[gi + F]);
    store_value(out + e, g / (1.0f + expf(-g)) * u);
    if (gu16) {
      gu16[gi] = __float2bfloat16(g);
      gu16[gi + F] = __float2bfloat16(u);
    }
  }
}

// dout as G: FP32, or bf16 (a GEMM's bf16 output).
template <class In, class G, class Out>
__global__ void swiglu_bwd_kernel(const In* __restrict__ gu, const G* __restrict__ dout, Out* __restrict__ dgu, int T,
                                  int F) {
  const size_t n = size_t(T) * F;
  for (size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x; e < n; e += size_t(gridDim.x) * blockDim.x) {
    const size_t t = e / F, i = e - t * F, gi = 2 * t * F + i;
    const float g = widen(gu[gi]), u = widen(gu[gi + F]), d = widen(dout[e]);
    const float sig = 1.0f / (1.0f + expf(-g));
    store_value(dgu + gi + F, d * g * sig);
    store_value(dgu + gi, d * u * sig * (1.0f + g * (1.0f - sig)));
  }
}

template <class In, class Out>
void fwd(const In* gu, Out* out, __nv_bfloat16* gu16, int T, int F, cudaStream_t stream) {
  const size_t n = size_t(T) * F;
  if (n) FORGE_LAUNCH((swiglu_fwd_kernel<In, Out>), grid_for(n, kThreads), kThreads, 0, stream, gu, out, gu16, T, F);
}
template <class In, class G, class Out>
void bwd(const In* gu, const G* dout, Out* dgu, int T, int F, cudaStream_t stream) {
  const size_t n = size_t(T) * F;
  if (n)
    FORGE_LAUNCH((swiglu_bwd_kernel<In, G, Out>), grid_for(n, kThreads), kThreads, 0, stream, gu, dout, dgu, T, F);
}
template <class G>
void bwd(const __nv_bfloat16* gu, const G* dout, float* dgu, __nv_bfloat16* dgu16, int T, int F,
         cudaStream_t stream) {
  if (dgu)
    bwd(gu, dout, dgu, T, F, stream);
  else
    bwd(gu, dout, dgu16, T, F, stream);
}
}  // namespace

void launch_swiglu_fwd(const float* gu, float* out, __nv_bfloat16* out16, __nv_bfloat16* gu16, int T, int F,
                       cudaStream_t stream) {
  if (out)
    fwd(gu, out, gu16, T, F, stream);
  else
    fwd(gu, out16, gu16, T, F, stream);
}
void launch_swiglu_fwd(const __nv_bfloat16* gu, float* out, __nv_bfloat16* out16, int T, int F, cudaStream_t stream) {
  if (out)
    fwd(gu, out, static_cast<__nv_bfloat16*>(nullptr), T, F, stream);
  else
    fwd(gu, out16, static_cast<__nv_bfloat16*>(nullptr), T, F, stream);
}
void launch_swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F, cudaStream_t stream) {
  bwd(gu, dout, dgu, T, F, stream);
}
void launch_swiglu_bwd(const __nv_bfloat16* gu, const float* dout, const __nv_bfloat16* dout16, float* dgu,
                       __nv_bfloat16* dgu16, int T, int F, cudaStream_t stream) {
  if (dout)
    bwd(gu, dout, dgu, dgu16, T, F, stream);
  else
    bwd(gu, dout16, dgu, dgu16, T, F, stream);
}

FORGE_CUDA_NAMESPACE_END
