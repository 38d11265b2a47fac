// A self-check of the tensor-core fragment layouts the attention kernels
// rely on (mma.cuh): one mma.sync m16n8k16 on integer-valued bf16 tiles
// and one m16n8k8 on TF32 ones (every product and sum exact in FP32), again
// with the low 13 bits of A's operands set (the MMA truncates them: the 3xTF32
// split leaves its small part unrounded), the TF32 rounding
// (cvt.rna.tf32.f32) on ties, and ldmatrix.x4, plain and .trans,
// on a tile of distinct values; every register is compared with the PTX
// ISA's layout, computed on the host. Returns "" or the first mismatch.
// Under FORGE_CUDA_EMULATION it checks the emulated instructions
// (tests/emulation/test_emulation_harness.cpp); on a GPU the hardware's
// (tests/unit/test_cuda_device.cpp), which tells a layout error apart from
// any other failure of the attention kernels.
#pragma once
#include <string>

#include "backend/cuda/cuda_namespace.hpp"

FORGE_CUDA_NAMESPACE_BEGIN

std::string check_fragment_layouts();

// The same for the warpgroup MMA of sm_90a (wgmma.cuh): one
// wgmma.mma_async m64n16k16 on integer-valued bf16 operands for each way
// its operands come (A and B from shared memory, both K-major or A M-major
// and B N-major; A from registers with B K-major or N-major; with and
// without accumulating into C), the shared-memory operands placed by the
// no-swizzle canonical layouts with leading and stride byte offsets that
// differ from each other and from the dense ones, the bytes between them a
// sentinel that no correct read returns. Returns "" or the first mismatch.
// Only where wgmma_supported() (cuda_backend.hpp).
std::string check_wgmma_layouts();

FORGE_CUDA_NAMESPACE_END
