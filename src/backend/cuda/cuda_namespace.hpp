// The namespace of the CUDA backend. Its kernel sources are compiled twice:
// by nvcc into forge_cuda (namespace forge::cuda), and by the host compiler
// into the emulation tests (FORGE_CUDA_EMULATION, inline namespace
// forge::cuda::emulated), so that both can live in one test binary.
#pragma once

#ifdef FORGE_CUDA_EMULATION
#define FORGE_CUDA_NAMESPACE_BEGIN \
  namespace forge::cuda {          \
  inline namespace emulated {
#define FORGE_CUDA_NAMESPACE_END \
  }                              \
  }
#else
#define FORGE_CUDA_NAMESPACE_BEGIN namespace forge::cuda {
#define FORGE_CUDA_NAMESPACE_END }
#endif
