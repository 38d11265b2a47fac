// Memory, GEMM and the elementwise layers of the CPU backend. Attention and
// the FP32 head have their own files.
#include "cpu/cpu_backend.hpp"

#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/error.hpp"
#include "cpu/vec_math.hpp"
#ifdef FORGE_WITH_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace forge {

void* CpuBackend::alloc(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
void CpuBackend::release(void* p) { std::free(p); }
void CpuBackend::to_device(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::to_host(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }

void CpuBackend::fill(float* x, float value, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                      const float* A, int lda, const float* B, int ldb, float beta, float* C,
                      int ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

void CpuBackend::add_inplace(float* y, const float* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

double CpuBackend::sum_squares(const float* x, size_t n) {
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}

void CpuBackend::embedding_fwd(const int32_t* tokens, const float* table, float* out, int T,
                               int d) {
#pragma omp parallel for schedule(static) if (T > 256)
  for (int t = 0; t < T; ++t)
    std::memcpy(out + static_cast<size_t>(t) * d, table + static_cast<size_t>(tokens[t]) * d,
                sizeof(float) * d);
}

void CpuBackend::embedding_bwd(const int32_t* tokens, const float* dout, float* dtable, int T,
                               int d) {
  // Columns split across threads: rows of repeated tokens never race.
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int c0 = d * id / nt, c1 = d * (id + 1) / nt;
    for (int t = 0; t < T; ++t) {
      float* dst = dtable + static_cast<size_t>(tokens[t]) * d;
      const float* src = dout + static_cast<size_t>(t) * d;
#pragma omp simd
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

void CpuBackend::rmsnorm_fwd(const float* x, const float* w, float* y, float* rstd, int T,
                             int d, float eps) {
#pragma omp parallel for schedule(static) if (T > 64)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<size_t>(t) * d;
    float* yr = y + static_cast<size_t>(t) * d;
    float ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; ++i) ss += xr[i] * xr[i];
    const float r = 1.0f / std::sqrt(ss / d + eps);
    rstd[t] = r;
#pragma omp simd
    for (int i = 0; i < d; ++i) yr[i] = xr[i] * r * w[i];
  }
}

void CpuBackend::rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy,
                             float* dx, float* dw, int T, int d) {
  // dx = rstd * (w*dy - x * rstd^2 * <w*dy, x> / d);  dw += sum_t dy * x * rstd
  const int nt = omp_get_max_threads();
  std::vector<float> dw_part(static_cast<size_t>(nt) * d, 0.0f);
#pragma omp parallel
  {
    float* dwp = dw_part.data() + static_cast<size_t>(omp_get_thread_num()) * d;
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      const float* xr = x + static_cast<size_t>(t) * d;
      const float* dyr = dy + static_cast<size_t>(t) * d;
      float* dxr = dx + static_cast<size_t>(t) * d;
      const float r = rstd[t];
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < d; ++i) dot += w[i] * dyr[i] * xr[i];
      const float c = r * r * r * dot / d;
#pragma omp simd
      for (int i = 0; i < d; ++i) {
        dxr[i] += r * w[i] * dyr[i] - c * xr[i];
        dwp[i] += dyr[i] * xr[i] * r;
      }
    }
  }
  for (int p = 0; p < nt; ++p)
    for (int i = 0; i < d; ++i) dw[i] += dw_part[static_cast<size_t>(p) * d + i];
}

void CpuBackend::rope(float* x, const int32_t* pos, int T, int n_heads, int head_dim, int ld,
                      float base, bool inverse) {
  const int half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(base), -2.0 * i / head_dim);
#pragma omp parallel
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) {
        const double ang = pos[t] * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(ang));
        sn[i] = static_cast<float>(inverse ? -std::sin(ang) : std::sin(ang));
      }
      float* row = x + static_cast<size_t>(t) * ld;
      for (int h = 0; h < n_heads; ++h) {
        float* v = row + h * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

void CpuBackend::swiglu_fwd(const float* gu, float* out, int T, int F) {
#pragma omp parallel for schedule(static) if (T > 64)
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<size_t>(t) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<size_t>(t) * F;
    int i = 0;
    for (; i + 8 <= F; i += 8) {
      const v8 gv = load8(g + i);
      store8(o + i, gv / (1.0f + exp8(-gv)) * load8(u + i));
    }
    for (; i < F; ++i) o[i] = g[i] / (1.0f + fast_exp(-g[i])) * u[i];
  }
}

void CpuBackend::swiglu_bwd(const float* gu, const float* dout, float* dgu, int T, int F) {
#pragma omp parallel for schedule(static) if (T > 64)
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<size_t>(t) * 2 * F;
    const float* u = g + F;
    const float* d = dout + static_cast<size_t>(t) * F;
    float* dg = dgu + static_cast<size_t>(t) * 2 * F;
    float* du = dg + F;
    int i = 0;
    for (; i + 8 <= F; i += 8) {
      const v8 gv = load8(g + i), dv = load8(d + i);
      const v8 sig = 1.0f / (1.0f + exp8(-gv));
      store8(du + i, dv * gv * sig);
      store8(dg + i, dv * load8(u + i) * sig * (1.0f + gv * (1.0f - sig)));
    }
    for (; i < F; ++i) {
      const float sig = 1.0f / (1.0f + fast_exp(-g[i]));
      du[i] = d[i] * g[i] * sig;
      dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    }
  }
}

void CpuBackend::tree_attention_fwd(const TreeAttentionArgs& a) { cpu_tree_attention_fwd(a); }
void CpuBackend::tree_attention_bwd(const TreeAttentionArgs& a, const TreeAttentionGrads& g) {
  cpu_tree_attention_bwd(a, g);
}
void CpuBackend::head_fwd(const HeadArgs& a) { cpu_head_fwd(a); }
void CpuBackend::head_bwd(const HeadArgs& a, const HeadGrads& g) { cpu_head_bwd(a, g); }

void CpuBackend::gather_rows(const float* src, const int32_t* rows, float* dst, int R, int d) {
#pragma omp parallel for schedule(static) if (R > 256)
  for (int r = 0; r < R; ++r)
    std::memcpy(dst + static_cast<size_t>(r) * d, src + static_cast<size_t>(rows[r]) * d,
                sizeof(float) * d);
}

void CpuBackend::scatter_add_rows(const float* src, const int32_t* rows, float* dst, int R,
                                  int d) {
  // Rows are distinct (head rows are unique), so rows never race.
#pragma omp parallel for schedule(static) if (R > 256)
  for (int r = 0; r < R; ++r) {
    float* o = dst + static_cast<size_t>(rows[r]) * d;
    const float* s = src + static_cast<size_t>(r) * d;
#pragma omp simd
    for (int i = 0; i < d; ++i) o[i] += s[i];
  }
}

void CpuBackend::adamw(float* param, const float* grad, float* m, float* v, size_t n,
                       const AdamWParams& p) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(p.step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(p.step));
  const float step_size = p.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - p.lr * p.weight_decay;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i] * p.grad_scale;
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    param[i] = param[i] * decay - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + p.eps);
  }
}

int set_cpu_threads(int n) {
  if (n > 0) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
  }
  return omp_get_max_threads();
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw InputError("unknown precision '" + name + "' (allowed: fp32, bf16)");
}

std::unique_ptr<Backend> make_backend(const std::string& name, Precision precision) {
  if (name == "cpu") {
    if (precision != Precision::kFp32)
      throw InputError("backend 'cpu' computes in FP32 only; precision bf16 needs the cuda backend");
    return std::make_unique<CpuBackend>();
  }
  if (name == "cuda") {
#ifdef FORGE_WITH_CUDA
    return cuda::make_cuda_backend(precision);  // InputError when no device is present
#else
    throw InputError("backend 'cuda' is not available in this build (configured without CUDA: "
                     "FORGE_CUDA=OFF or no nvcc found); use the cpu backend");
#endif
  }
  throw InputError("unknown backend '" + name + "' (allowed: cpu, cuda)");
}

}  // namespace forge
