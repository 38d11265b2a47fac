// FORGE_HOST_DEVICE: marks an inline function that the CPU backend and the
// CUDA kernels (nvcc, or the CPU emulation that compiles them as C++) share,
// so that one statement of a piece of math serves both.
#pragma once

#ifdef __CUDACC__
#define FORGE_HOST_DEVICE __host__ __device__
#else
#define FORGE_HOST_DEVICE
#endif
