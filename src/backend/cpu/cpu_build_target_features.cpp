// The extensions the compiler was allowed for this build (cpu_build_target.hpp):
// compiled with the build's own flags, so that its predefined macros are the
// ones every other file saw. Data only: no code of this file runs.
#include "backend/cpu/cpu_build_target.hpp"

namespace forge {

#ifdef FORGE_NATIVE_ARCH_NAME
const char* const kBuildMarch = FORGE_NATIVE_ARCH_NAME;
#else
const char* const kBuildMarch = "x86-64";
#endif

const char* const kBuildCpuFeatures[] = {
#ifdef __SSE3__
    "sse3",
#endif
#ifdef __SSSE3__
    "ssse3",
#endif
#ifdef __SSE4_1__
    "sse4.1",
#endif
#ifdef __SSE4_2__
    "sse4.2",
#endif
#ifdef __POPCNT__
    "popcnt",
#endif
#ifdef __AVX__
    "avx",
#endif
#ifdef __AVX2__
    "avx2",
#endif
#ifdef __FMA__
    "fma",
#endif
#ifdef __F16C__
    "f16c",
#endif
#ifdef __BMI__
    "bmi",
#endif
#ifdef __BMI2__
    "bmi2",
#endif
#ifdef __LZCNT__
    "lzcnt",
#endif
#ifdef __MOVBE__
    "movbe",
#endif
#ifdef __AVX512F__
    "avx512f",
#endif
#ifdef __AVX512BW__
    "avx512bw",
#endif
#ifdef __AVX512CD__
    "avx512cd",
#endif
#ifdef __AVX512DQ__
    "avx512dq",
#endif
#ifdef __AVX512VL__
    "avx512vl",
#endif
#ifdef __AVX512VNNI__
    "avx512vnni",
#endif
#ifdef __AVX512BF16__
    "avx512bf16",
#endif
#ifdef __AVX512FP16__
    "avx512fp16",
#endif
#ifdef __AVX512VBMI__
    "avx512vbmi",
#endif
#ifdef __AVX512VBMI2__
    "avx512vbmi2",
#endif
#ifdef __AVX512BITALG__
    "avx512bitalg",
#endif
#ifdef __AVX512VPOPCNTDQ__
    "avx512vpopcntdq",
#endif
#ifdef __AVX512IFMA__
    "avx512ifma",
#endif
#ifdef __AVXVNNI__
    "avxvnni",
#endif
#ifdef __GFNI__
    "gfni",
#endif
#ifdef __VAES__
    "vaes",
#endif
#ifdef __VPCLMULQDQ__
    "vpclmulqdq",
#endif
#ifdef __AMX_TILE__
    "amx-tile",
#endif
#ifdef __AMX_BF16__
    "amx-bf16",
#endif
#ifdef __AMX_INT8__
    "amx-int8",
#endif
#ifdef __FMA4__
    "fma4",
#endif
#ifdef __XOP__
    "xop",
#endif
#ifdef __SSE4A__
    "sse4a",
#endif
#ifdef __TBM__
    "tbm",
#endif
#ifdef __AVX512ER__
    "avx512er",
#endif
#ifdef __AVX512PF__
    "avx512pf",
#endif
#ifdef __AVX5124VNNIW__
    "avx5124vnniw",
#endif
#ifdef __AVX5124FMAPS__
    "avx5124fmaps",
#endif
#ifdef __AVX512VP2INTERSECT__
    "avx512vp2intersect",
#endif
#ifdef __SHA__
    "sha",
#endif
#ifdef __AES__
    "aes",
#endif
#ifdef __PCLMUL__
    "pclmul",
#endif
#ifdef __ADX__
    "adx",
#endif
#ifdef __RDRND__
    "rdrnd",
#endif
#ifdef __RDSEED__
    "rdseed",
#endif
#ifdef __PRFCHW__
    "prfchw",
#endif
    nullptr,
};

}  // namespace forge
