// SwiGLU: out = silu(gate) * up over rows [gate | up], and its backward,
// the variant's wide vector at a time (vec_math.hpp's vw: 16 lanes with
// AVX-512, else 8), then 8, then one: the same arithmetic in every lane, so
// a value does not depend on where it falls.
#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/variant_begin.hpp"
#include "backend/cpu/vec_math.hpp"

namespace forge::FORGE_CPU_NS {

void CpuBackend::swiglu_fwd(const float* gu, float* out, int T, int F) {
#pragma omp parallel for schedule(static) if (T > 64)
  for (int t = 0; t < T; ++t) {
    const float* g = gu + static_cast<size_t>(t) * 2 * F;
    const float* u = g + F;
    float* o = out + static_cast<size_t>(t) * F;
    int i = 0;
    for (; i + kWideLanes <= F; i += kWideLanes) {
      const vw gv = loadw(g + i);
      storew(o + i, gv / (1.0f + expw(-gv)) * loadw(u + i));
    }
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
    for (; i + kWideLanes <= F; i += kWideLanes) {
      const vw gv = loadw(g + i), dv = loadw(d + i);
      const vw sig = 1.0f / (1.0f + expw(-gv));
      storew(du + i, dv * gv * sig);
      storew(dg + i, dv * loadw(u + i) * sig * (1.0f + gv * (1.0f - sig)));
    }
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

}  // namespace forge::FORGE_CPU_NS

#include "backend/cpu/variant_end.hpp"
