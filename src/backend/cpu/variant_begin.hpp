// Opens the code of one CPU kernel variant (cpu_variants.hpp). The build
// compiles every kernel file of backend/cpu once per x86-64 level and defines
// FORGE_CPU_NS as that variant's namespace (cpu_x86_64, cpu_x86_64_v3,
// cpu_x86_64_v4, or cpu_native for FORGE_NATIVE builds). Include this after
// every other header and before the file's code; variant_end.hpp closes it.
//
// What is between the two is compiled for the variant's level (GCC target
// pragma); what comes from headers included before keeps the build's baseline
// (templates and inline functions of std:: and forge:: that every variant
// shares), so that no instruction of a higher level can leak into code another
// variant calls. The kernels' own code lives in forge::FORGE_CPU_NS, a
// namespace of its own per variant.
#ifndef FORGE_CPU_NS
#error "backend/cpu kernel files are compiled per variant: FORGE_CPU_NS is set by src/CMakeLists.txt"
#endif
#pragma GCC push_options
#if defined(FORGE_CPU_VARIANT_IS_x86_64_v4)
#pragma GCC target("arch=x86-64-v4")
#elif defined(FORGE_CPU_VARIANT_IS_x86_64_v3)
#pragma GCC target("arch=x86-64-v3")
#endif
