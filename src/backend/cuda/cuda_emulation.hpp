// CPU emulation of the CUDA execution model, so that the kernel sources of
// this folder compile with the host compiler and run in the tests
// (tests/emulation; docs/cuda.md, "Emulation"). Header-only; selected by
// FORGE_CUDA_EMULATION through cuda_compat.cuh, never part of a library.
//
// Execution: a launch runs the grid's blocks (in parallel over OpenMP
// threads); a block runs one fiber per CUDA thread (ucontext, 128 KiB mmap'd
// stacks, pooled per OS thread), scheduled round-robin on its OS thread.
// A fiber runs until it reaches a barrier:
//   __syncthreads()            all live threads of the block
//   __syncwarp(), __shfl_*,    all live lanes of the warp (32 consecutive
//   __any_sync                 linear thread ids); a shuffle writes the value
//                              to the warp's exchange slots, meets the warp,
//                              reads the source lane, meets it again (a vote
//                              ORs the lanes' predicates)
//   mma, ldmatrix (mma.cuh)    all 32 lanes of the warp: the tensor-core
//                              m16n8k16 bf16 and m16n8k8 TF32 MMAs (the
//                              TF32 operands' low 13 bits ignored, as the
//                              hardware does) and the shared-memory
//                              fragment load; lanes post their fragments (or
//                              row addresses), meet, compute their part,
//                              meet again
//   wgmma (wgmma.cuh)          all 128 threads of the warpgroup (4 warps
//                              from a multiple of 128): each posts its A
//                              registers and where its accumulators are, the
//                              group meets; the product lands in a thread's
//                              accumulators only at its wgmma.wait_group,
//                              read from shared memory then (as the device
//                              reads it asynchronously, any time before),
//                              and an operand that changed since the last
//                              thread issued the op fails (written in flight)
// Threads that have exited count as arrived. A scheduler round in which no
// fiber arrives, leaves a barrier or exits is a deadlock (divergent barrier)
// and aborts with a message.
//
// Memory: dynamic shared memory is one buffer per block, filled with 0xff
// bytes (NaN as float) so that reads of unwritten shared memory show up;
// cudaMalloc'd memory is host memory filled the same way. Atomics are
// std::atomic_ref operations. Blocks run in parallel on the host's OpenMP
// threads, started in linear block order (x fastest), as the device starts
// them in practice: a block may wait on an earlier block's atomic (it has
// started), never on a later one's. The runtime API subset the backend uses runs
// synchronously on the host; cuBLAS SGEMM maps to CBLAS (column-major), and
// cublasGemmEx (bf16 inputs, FP32 or bf16 output, FP32 compute) widens its
// inputs to FP32 and does the same (a bf16 output rounded to nearest even).
// __nv_bfloat16 rounds to nearest even.
//
// Launches are refused (abort with a message) where a device refuses them:
// an empty grid, grid.y or grid.z over 65535, a block over 1024 threads,
// dynamic shared memory over 48 KiB without the kernel's opt-in through
// cudaFuncSetAttribute.
//
// Not emulated: memory coalescing, bank conflicts, occupancy, warp-divergent
// timing, races between threads that are not separated by a barrier (fibers
// run one at a time, so a racy kernel may pass here and fail on a GPU).
#pragma once
#include <cblas.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/bf16.hpp"

// ---- language ---------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)

// In a namespace of their own: the CUDA objects linked into the same test
// binary have inline members of the real ::dim3.
namespace forge_emu {
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
}  // namespace forge_emu
using forge_emu::dim3;
using forge_emu::uint3;
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
inline constexpr int warpSize = 32;

inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double sinpi(double x) { return std::sin(x * 3.14159265358979323846); }
inline double cospi(double x) { return std::cos(x * 3.14159265358979323846); }

namespace forge_emu {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "CUDA emulation: %s\n", what);
  std::abort();
}

constexpr size_t kStackBytes = 128 * 1024;
// The emulated device's shared memory: an H100's (sm_90: 227 KiB a block
// opted in, 228 KiB an SM) unless a test sets an A100's (sm_80: 163, 164),
// before it makes its backend (which reads them once) and for its launches.
struct SharedMemoryLimits {
  size_t per_block = 227 * 1024, per_sm = 228 * 1024;
};
inline constexpr SharedMemoryLimits kH100Shared{}, kA100Shared{163 * 1024, 164 * 1024};
inline SharedMemoryLimits& shared_limits() {
  static SharedMemoryLimits limits;
  return limits;
}
constexpr unsigned kFullMask = 0xffffffffu;

// mmap'd fiber stacks, reused across blocks and launches of one OS thread.
struct StackPool {
  std::vector<void*> stacks;
  ~StackPool() {
    for (void* s : stacks) munmap(s, kStackBytes);
  }
  void* get(size_t i) {
    while (stacks.size() <= i) {
      void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (s == MAP_FAILED) fail("mmap of a fiber stack failed");
      stacks.push_back(s);
    }
    return stacks[i];
  }
};

struct Barrier {
  unsigned alive = 0, count = 0, gen = 0;
};

struct Warp {
  Barrier bar;
  uint64_t slot[32];
  uint32_t frag[32][6];  // mma operands: a[4], b[2] per lane
};

// A cp.async issued and not yet waited for: its bytes, read at the issue.
struct PendingCopy {
  unsigned char* dst;
  int bytes, src_bytes;
  unsigned char data[16];
};

// One wgmma.mma_async of a warpgroup (wgmma.cuh): its operands as issued,
// computed into each thread's accumulators at that thread's wait.
struct WgmmaOp {
  int n = 0;                      // N of m64nNk16
  bool a_in_registers = false;    // A from the threads' registers, else desc_a
  uint64_t desc_a = 0, desc_b = 0;
  bool trans_a = false, trans_b = false, accumulate = false;
  uint32_t a[128][4] = {};        // per thread, where A is in registers (as issued)
  const uint32_t* a_at[128] = {}; // and the registers themselves (unchanged until the op lands)
  float* d[128] = {};             // per thread, its N / 2 accumulators
  // Per thread, its accumulators as the op will read them: as issued, or
  // as an earlier op on the same registers left them (chained MMAs). A
  // thread that writes them while the op is in flight fails at its wait.
  std::vector<float> d_in;
  int issuers = 0;                // threads that have issued it
  // The shared-memory operands as the last thread issued it (when the
  // device may start reading them): A [64][16] (A by desc_a) and B [N][16];
  // each thread's wait checks that what it reads is still this.
  std::vector<float> shared_a, shared_b;
};

// A warpgroup's wgmma state: the ops issued (in order; every thread issues
// the same sequence) since all landed last, and per thread how many it has
// issued and computed and the op counts at its commits not yet waited for.
struct Warpgroup {
  Barrier bar;
  std::vector<WgmmaOp> ops;
  size_t issued[128] = {}, computed[128] = {};
  std::vector<size_t> groups[128];
};

struct Block {
  ucontext_t sched;
  std::vector<std::vector<PendingCopy>> pending;  // per thread
  std::vector<ucontext_t> ctx;
  std::vector<uint8_t> done;
  std::vector<Warp> warps;
  std::vector<Warpgroup> warpgroups;
  Barrier bar;
  std::vector<unsigned char> smem;
  unsigned current = 0;
  uint64_t progress = 0;
  void (*invoke)(const void*) = nullptr;
  const void* body = nullptr;
};

inline thread_local Block* tls_block = nullptr;
inline thread_local StackPool tls_stacks;

inline void set_thread_index(unsigned linear) {
  threadIdx.x = linear % blockDim.x;
  threadIdx.y = linear / blockDim.x % blockDim.y;
  threadIdx.z = linear / (blockDim.x * blockDim.y);
}

// Arrive at a barrier; return when every live member has arrived.
inline void arrive(Barrier& bar) {
  Block& b = *tls_block;
  ++b.progress;
  const unsigned gen = bar.gen;
  if (++bar.count == bar.alive) {
    bar.count = 0;
    ++bar.gen;
    return;
  }
  const unsigned me = b.current;
  while (bar.gen == gen) swapcontext(&b.ctx[me], &b.sched);
}

// An exited thread counts as arrived at barriers still waiting for it.
inline void leave(Barrier& bar) {
  --bar.alive;
  if (bar.count > 0 && bar.count == bar.alive) {
    bar.count = 0;
    ++bar.gen;
  }
}

inline void fiber_main() {
  Block& b = *tls_block;
  b.invoke(b.body);
  Block& b2 = *tls_block;  // same block: fibers never migrate
  const unsigned me = b2.current;
  if (!b2.pending[me].empty()) fail("a thread exited with cp.async copies it never waited for");
  Warpgroup& wg = b2.warpgroups[me / 128];
  if (wg.computed[me % 128] != wg.issued[me % 128]) fail("a thread exited with wgmma results it never waited for");
  b2.done[me] = 1;
  ++b2.progress;
  leave(b2.bar);
  leave(b2.warps[me / 32].bar);
  leave(wg.bar);
}  // returns to b.sched through uc_link

inline void run_block(Block& b, unsigned nthreads) {
  tls_block = &b;
  b.ctx.assign(nthreads, ucontext_t{});
  b.done.assign(nthreads, 0);
  b.pending.assign(nthreads, {});
  b.bar = Barrier{nthreads, 0, 0};
  b.warps.assign((nthreads + 31) / 32, Warp{});
  for (unsigned w = 0; w < b.warps.size(); ++w)
    b.warps[w].bar.alive = std::min(32u, nthreads - 32 * w);
  b.warpgroups = std::vector<Warpgroup>((nthreads + 127) / 128);
  for (unsigned w = 0; w < b.warpgroups.size(); ++w)
    b.warpgroups[w].bar.alive = std::min(128u, nthreads - 128 * w);
  for (unsigned t = 0; t < nthreads; ++t) {
    getcontext(&b.ctx[t]);
    b.ctx[t].uc_stack.ss_sp = tls_stacks.get(t);
    b.ctx[t].uc_stack.ss_size = kStackBytes;
    b.ctx[t].uc_link = &b.sched;
    makecontext(&b.ctx[t], fiber_main, 0);
  }
  for (;;) {
    const uint64_t before = b.progress;
    bool any = false;
    for (unsigned t = 0; t < nthreads; ++t) {
      if (b.done[t]) continue;
      any = true;
      b.current = t;
      set_thread_index(t);
      swapcontext(&b.sched, &b.ctx[t]);
    }
    if (!any) break;
    if (b.progress == before)
      fail("deadlock: threads wait at different barriers (divergent __syncthreads/__syncwarp/shuffle)");
  }
  tls_block = nullptr;
}

// A kernel's dynamic shared memory above 48 KiB needs its opt-in
// (cudaFuncSetAttribute(MaxDynamicSharedMemorySize)) first, as on a device.
constexpr size_t kDefaultSharedBytes = 48 * 1024;
inline std::mutex& opt_in_mutex() {
  static std::mutex mu;
  return mu;
}
inline std::map<const void*, size_t>& opt_ins() {  // kernel -> bytes allowed
  static std::map<const void*, size_t> allowed;
  return allowed;
}
template <class K>
const void* kernel_address(K* kernel) {
  return reinterpret_cast<const void*>(kernel);
}

// What the device refuses at launch (cudaErrorInvalidConfiguration), which
// the emulation would otherwise run: an empty grid, grid.y or grid.z above
// 65535, grid.x above 2^31 - 1, a block of 0 or more than 1024 threads,
// shared memory past the maximum or past 48 KiB without the opt-in.
inline void check_launch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes) {
  const unsigned long long nthreads = 1ull * block.x * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024) fail("block size must be 1..1024 threads");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("empty grid (a launch of 0 blocks is an error on a device)");
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    fail("grid dimension above the device's limit (x 2^31 - 1, y and z 65535)");
  if (smem_bytes > shared_limits().per_block) fail("dynamic shared memory above the per-block maximum");
  if (smem_bytes > kDefaultSharedBytes) {
    std::lock_guard lock(opt_in_mutex());
    const auto it = opt_ins().find(kernel);
    if (it == opt_ins().end() || it->second < smem_bytes)
      fail("dynamic shared memory above 48 KiB without cudaFuncSetAttribute(MaxDynamicSharedMemorySize) for it");
  }
}

template <class F>
void launch(const void* kernel, dim3 grid, dim3 block, size_t smem_bytes, const F& body) {
  check_launch(kernel, grid, block, smem_bytes);
  const unsigned nthreads = block.x * block.y * block.z;
  const long nblocks = static_cast<long>(grid.x) * grid.y * grid.z;
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < nblocks; ++i) {
    Block b;
    b.smem.assign(smem_bytes, 0xff);
    b.invoke = [](const void* f) { (*static_cast<const F*>(f))(); };
    b.body = &body;
    gridDim = grid;
    blockDim = block;
    blockIdx.x = static_cast<unsigned>(i % grid.x);
    blockIdx.y = static_cast<unsigned>(i / grid.x % grid.y);
    blockIdx.z = static_cast<unsigned>(i / (static_cast<long>(grid.x) * grid.y));
    run_block(b, nthreads);
  }
}

inline unsigned char* shared_memory() { return tls_block->smem.data(); }

inline unsigned linear_thread() { return tls_block->current; }

// The calling thread's warp, for a collective (what: its name in the
// error) over `mask`: the whole warp or all its live lanes.
inline Warp& collective_warp(unsigned mask, const char* what) {
  Warp& w = tls_block->warps[linear_thread() / 32];
  const unsigned lanes = w.bar.alive == 32 ? kFullMask : (1u << w.bar.alive) - 1;
  if (mask != kFullMask && mask != lanes) {
    char message[96];
    std::snprintf(message, sizeof message, "%s masks other than the whole warp are not emulated", what);
    fail(message);
  }
  return w;
}

template <class T>
T exchange(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffles exchange at most 8 bytes");
  const unsigned lane = linear_thread() % 32;
  Warp& w = collective_warp(mask, "shuffle");
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  arrive(w.bar);
  T r = v;
  if (src >= 0 && static_cast<unsigned>(src) < w.bar.alive) std::memcpy(&r, &w.slot[src], sizeof(T));
  arrive(w.bar);
  return r;
}

// __any_sync: each lane posts its predicate, the warp meets, each lane ORs
// the live lanes' predicates, the warp meets again.
inline bool vote_any(unsigned mask, bool pred) {
  const unsigned lane = linear_thread() % 32;
  Warp& w = collective_warp(mask, "vote");
  w.slot[lane] = pred ? 1 : 0;
  arrive(w.bar);
  bool any = false;
  for (unsigned l = 0; l < w.bar.alive; ++l) any = any || w.slot[l] != 0;
  arrive(w.bar);
  return any;
}

// mma.sync m16n8kK (mma.cuh): d += A B, warp-collective like a shuffle. Each
// lane posts its fragments, the warp meets, each lane computes its four
// elements of D from the posted A and B, read by A(frag, row, k) and
// B(frag, k, col) (the layouts of mma.cuh; products of bf16 or TF32 values
// are exact in FP32, summed in k order), and the warp meets again before the
// slots are reused.
template <int K, class ReadA, class ReadB>
inline void warp_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], ReadA A, ReadB B) {
  Block& blk = *tls_block;
  const unsigned lane = linear_thread() % 32;
  Warp& w = blk.warps[linear_thread() / 32];
  if (w.bar.alive != 32) fail("mma.sync needs all 32 lanes of the warp");
  for (int i = 0; i < 4; ++i) w.frag[lane][i] = a[i];
  for (int i = 0; i < 2; ++i) w.frag[lane][4 + i] = b[i];
  arrive(w.bar);
  const int g = static_cast<int>(lane / 4), t = static_cast<int>(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A(w.frag, row, k) * B(w.frag, k, col);
    d[i] += acc;
  }
  arrive(w.bar);
}

// m16n8k16 bf16: two bf16 a register, the lower k in the low half.
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto half = [](uint32_t reg, int hi) {
    return forge::bf16_to_float(static_cast<uint16_t>(hi ? reg >> 16 : reg));
  };
  // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8)
  auto A = [&](const auto& frag, int row, int k) {
    return half(frag[4 * (row % 8) + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1);
  };
  // B[k][col]: lane 4 col + (k % 8) / 2, register (k >= 8)
  auto B = [&](const auto& frag, int k, int col) { return half(frag[4 * col + (k % 8) / 2][4 + (k >= 8)], k & 1); };
  warp_mma<16>(d, a, b, A, B);
}

// m16n8k8 TF32: one FP32 operand a register, its low 13 bits dropped (TF32).
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto tf32 = [](uint32_t reg) { return std::bit_cast<float>(reg & 0xffffe000u); };
  // A[row][k]: lane 4 (row % 8) + k % 4, register (row >= 8) + 2 (k >= 4)
  auto A = [&](const auto& frag, int row, int k) { return tf32(frag[4 * (row % 8) + k % 4][(row >= 8) + 2 * (k >= 4)]); };
  // B[k][col]: lane 4 col + k % 4, register (k >= 4)
  auto B = [&](const auto& frag, int k, int col) { return tf32(frag[4 * col + k % 4][4 + (k >= 4)]); };
  warp_mma<8>(d, a, b, A, B);
}

// ---- wgmma (wgmma.cuh) ----------------------------------------------------------
// A shared-memory address as the device's shared window has it: the byte
// offset into the block's shared memory.
inline uint32_t shared_offset(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  const Block& blk = *tls_block;
  if (c < blk.smem.data() || c >= blk.smem.data() + blk.smem.size()) fail("address outside the block's shared memory");
  return static_cast<uint32_t>(c - blk.smem.data());
}

inline Warpgroup& calling_warpgroup(const char* what) {
  Warpgroup& wg = tls_block->warpgroups[linear_thread() / 128];
  if (wg.bar.alive != 128) {
    char message[96];
    std::snprintf(message, sizeof message, "%s needs all 128 threads of the warpgroup", what);
    fail(message);
  }
  return wg;
}

// Element (mn, k) of a 16-bit operand in shared memory by a no-swizzle
// matrix descriptor (wgmma.cuh): start, leading (LBO) and stride (SBO) byte
// offsets in 16-byte units, bits 0-13, 16-29 and 32-45. K-major: core
// matrices of 8 rows (mn) of 16 bytes (8 k), LBO apart along k, SBO along
// mn; MN-major (trans): 8 rows (k) of 16 bytes (8 mn), LBO along k, SBO
// along mn.
inline float wgmma_operand(uint64_t desc, bool trans, int mn, int k) {
  if (desc >> 62) fail("wgmma: swizzled shared-memory layouts are not emulated");
  const uint32_t start = uint32_t(desc & 0x3fff) << 4, lbo = uint32_t(desc >> 16 & 0x3fff) << 4,
                 sbo = uint32_t(desc >> 32 & 0x3fff) << 4;
  const uint32_t at = trans ? start + (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
                            : start + (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
  const Block& blk = *tls_block;
  if (at + 2 > blk.smem.size()) fail("wgmma: an operand element outside the block's shared memory");
  uint16_t bits;
  std::memcpy(&bits, blk.smem.data() + at, 2);
  return forge::bf16_to_float(bits);
}

// wgmma.mma_async m64nNk16 bf16 -> FP32 (wgmma.cuh): the calling thread
// posts its A registers (a, or null: A by desc_a) and its accumulators d,
// the warpgroup meets; the op is computed at the thread's wait, which fails
// if the thread wrote its A registers in between (the ISA leaves that
// undefined: the hardware may read them until the op lands).
inline void wgmma_issue(int n, float* d, const uint32_t* a, uint64_t desc_a, uint64_t desc_b, bool trans_a,
                        bool trans_b, bool accumulate) {
  Warpgroup& wg = calling_warpgroup("wgmma.mma_async");
  const unsigned r = linear_thread() % 128;
  const auto landed = [&](unsigned x) { return wg.computed[x] == wg.ops.size() && wg.groups[x].empty(); };
  bool all_landed = wg.issued[r] == wg.ops.size();
  for (unsigned x = 0; all_landed && x < 128; ++x) all_landed = landed(x);
  if (all_landed) {  // the first thread of a new op, every op before it landed everywhere: forget them
    wg.ops.clear();
    std::fill(wg.issued, wg.issued + 128, 0);
    std::fill(wg.computed, wg.computed + 128, 0);
  }
  const size_t i = wg.issued[r]++;
  if (i == wg.ops.size()) {
    WgmmaOp op;
    op.n = n;
    op.a_in_registers = a != nullptr;
    op.desc_a = desc_a;
    op.desc_b = desc_b;
    op.trans_a = trans_a;
    op.trans_b = trans_b;
    op.accumulate = accumulate;
    op.d_in.resize(size_t(128) * (n / 2));
    wg.ops.push_back(op);
  }
  WgmmaOp& op = wg.ops[i];
  if (op.n != n || op.a_in_registers != (a != nullptr) || op.desc_b != desc_b || op.trans_b != trans_b ||
      op.accumulate != accumulate || (!a && (op.desc_a != desc_a || op.trans_a != trans_a)))
    fail("wgmma.mma_async: the threads of the warpgroup issued different operations");
  if (a)
    for (int j = 0; j < 4; ++j) op.a[r][j] = a[j];
  op.a_at[r] = a;
  op.d[r] = d;
  std::copy(d, d + n / 2, op.d_in.begin() + size_t(r) * (n / 2));
  if (++op.issuers == 128) {  // the operands the device may read from now on
    if (!a) {
      op.shared_a.resize(64 * 16);
      for (int row = 0; row < 64; ++row)
        for (int k = 0; k < 16; ++k) op.shared_a[row * 16 + k] = wgmma_operand(desc_a, trans_a, row, k);
    }
    op.shared_b.resize(size_t(n) * 16);
    for (int col = 0; col < n; ++col)
      for (int k = 0; k < 16; ++k) op.shared_b[col * 16 + k] = wgmma_operand(desc_b, trans_b, col, k);
  }
  arrive(wg.bar);
}

inline void wgmma_commit() {
  Warpgroup& wg = calling_warpgroup("wgmma.commit_group");
  const unsigned r = linear_thread() % 128;
  wg.groups[r].push_back(wg.issued[r]);
  arrive(wg.bar);
}

// Thread r's accumulators of op: d[4 j + 2 v + u] = D[16 w + g + 8 v][8 j + 2 t + u]
// (w = r / 32, g = lane / 4, t = lane % 4); A in registers as mma.sync's
// m16n8k16 A per warp (its 16 rows); products exact, summed in k order.
// A shared-memory operand that is not what it was when the op was issued
// fails: something wrote it while the MMA was in flight (a store, or a
// cp.async that landed; with early_copies, copies land as they are issued).
inline void wgmma_compute(const WgmmaOp& op, unsigned r) {
  const auto same = [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); };
  const int w = static_cast<int>(r / 32), lane = static_cast<int>(r % 32), g = lane / 4, t = lane % 4;
  if (op.a_in_registers)
    for (int j = 0; j < 4; ++j)
      if (op.a_at[r][j] != op.a[r][j]) fail("wgmma: an A fragment register written while its MMA was in flight");
  for (int e = 0; e < op.n / 2; ++e)
    if (!same(op.d[r][e], op.d_in[size_t(r) * (op.n / 2) + e]))
      fail("wgmma: an accumulator register written while its MMA was in flight");
  float a[2][16];  // the thread's two rows of A
  for (int v = 0; v < 2; ++v) {
    const int row = 16 * w + g + 8 * v;
    for (int k = 0; k < 16; ++k) {
      if (op.a_in_registers) {
        const int rr = row % 16, reg = (rr >= 8) + 2 * (k >= 8);
        const uint32_t x = op.a[32 * w + 4 * (rr % 8) + (k % 8) / 2][reg];
        a[v][k] = forge::bf16_to_float(static_cast<uint16_t>(k & 1 ? x >> 16 : x));
      } else {
        a[v][k] = wgmma_operand(op.desc_a, op.trans_a, row, k);
        if (!same(a[v][k], op.shared_a[row * 16 + k]))
          fail("wgmma: a shared-memory A operand written while its MMA was in flight");
      }
    }
  }
  float* d = op.d[r];
  for (int j = 0; j < op.n / 8; ++j)
    for (int u = 0; u < 2; ++u) {
      const int col = 8 * j + 2 * t + u;
      float b[16];
      for (int k = 0; k < 16; ++k) {
        b[k] = wgmma_operand(op.desc_b, op.trans_b, col, k);
        if (!same(b[k], op.shared_b[col * 16 + k]))
          fail("wgmma: a shared-memory B operand written while its MMA was in flight");
      }
      for (int v = 0; v < 2; ++v) {
        float acc = 0.0f;
        for (int k = 0; k < 16; ++k) acc += a[v][k] * b[k];
        float& out = d[4 * j + 2 * v + u];
        out = op.accumulate ? out + acc : acc;
      }
    }
}

// wgmma.wait_group N: the calling thread's ops of all but its newest N
// committed groups land in its accumulators.
inline void wgmma_wait(int pending) {
  Warpgroup& wg = calling_warpgroup("wgmma.wait_group");
  const unsigned r = linear_thread() % 128;
  auto& groups = wg.groups[r];
  while (groups.size() > static_cast<size_t>(pending)) {
    const size_t end = groups.front();
    groups.erase(groups.begin());
    for (; wg.computed[r] < end; ++wg.computed[r]) {
      const WgmmaOp& op = wg.ops[wg.computed[r]];
      wgmma_compute(op, r);
      // A later op of this thread on overlapping registers reads what this one wrote.
      for (size_t k = wg.computed[r] + 1; k < wg.issued[r]; ++k) {
        WgmmaOp& later = wg.ops[k];
        const size_t m = size_t(later.n / 2);
        for (size_t e = 0; e < m; ++e)  // only the registers this op wrote
          if (later.d[r] + e >= op.d[r] && later.d[r] + e < op.d[r] + op.n / 2)
            later.d_in[size_t(r) * m + e] = later.d[r][e];
      }
    }
  }
  arrive(wg.bar);
}

// cvt.rna.tf32.f32: nearest, ties away from zero, to 10 mantissa bits (a
// NaN stays a NaN).
inline uint32_t cvt_rna_tf32(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? (u | 0x400000u) : u;
  return (u + 0x1000u) & 0xffffe000u;
}

// cp.async.{ca,cg}.shared.global (async_copy.cuh): reads src_bytes of the
// `bytes` now and writes them (the rest zero-filled) into shared memory
// only at the thread's cp_async_wait_all, so a kernel that reads a tile
// before waiting for it (or, for another thread's copies, before the barrier
// after the wait) sees the old contents. The device may land a copy any
// time between the two: with early_copies() set, copies land as they are
// issued instead, so that one into a tile an MMA still reads (a wgmma in
// flight, or another thread's reads before a barrier) shows up. The
// destination must lie in the block's shared memory and both addresses be
// aligned to `bytes`, as on the device; a thread may not exit with copies
// it never waited for.
inline std::atomic<bool>& early_copies() {
  static std::atomic<bool> early{false};
  return early;
}
inline void land(const PendingCopy& c) {
  std::memcpy(c.dst, c.data, static_cast<size_t>(c.src_bytes));
  std::memset(c.dst + c.src_bytes, 0, static_cast<size_t>(c.bytes - c.src_bytes));
}
inline void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  Block& blk = *tls_block;
  auto* d = static_cast<unsigned char*>(dst);
  if (d < blk.smem.data() || d + bytes > blk.smem.data() + blk.smem.size())
    fail("cp.async destination outside the block's shared memory");
  if (reinterpret_cast<uintptr_t>(dst) % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0)
    fail("cp.async address not aligned to its size");
  if (src_bytes < 0 || src_bytes > bytes || bytes > 16) fail("cp.async size out of range");
  PendingCopy c{d, bytes, src_bytes, {}};
  std::memcpy(c.data, src, static_cast<size_t>(src_bytes));
  if (early_copies()) land(c);
  blk.pending[linear_thread()].push_back(c);
}

// cp.async.wait_all: the thread's pending copies land (again, where they
// landed early: the same bytes).
inline void cp_async_wait_all() {
  auto& mine = tls_block->pending[linear_thread()];
  for (const PendingCopy& c : mine) land(c);
  mine.clear();
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 (mma.cuh): each lane
// posts its row address (which must be 16-byte aligned and inside the
// block's shared memory, as on the device),
// the warp meets, each lane gathers its four registers from the posted rows,
// and the warp meets again.
inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
  Block& blk = *tls_block;
  const unsigned lane = linear_thread() % 32;
  Warp& w = blk.warps[linear_thread() / 32];
  if (w.bar.alive != 32) fail("ldmatrix needs all 32 lanes of the warp");
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) fail("ldmatrix row address not 16-byte aligned");
  const auto* base = reinterpret_cast<const uint16_t*>(blk.smem.data());
  if (row < base || row + 8 > base + blk.smem.size() / 2) fail("ldmatrix row outside the block's shared memory");
  w.slot[lane] = reinterpret_cast<uintptr_t>(row);
  arrive(w.bar);
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = 0;
    for (unsigned e = 0; e < 2; ++e) {
      // not transposed: row g, column 2t + e; transposed: row 2t + e, column g
      const auto* src = reinterpret_cast<const uint16_t*>(w.slot[8 * i + (trans ? 2 * t + e : g)]);
      v |= uint32_t(src[trans ? g : 2 * t + e]) << (16 * e);
    }
    r[i] = v;
  }
  arrive(w.bar);
}

}  // namespace forge_emu

inline void __syncthreads() { forge_emu::arrive(forge_emu::tls_block->bar); }
inline void __syncwarp(unsigned = forge_emu::kFullMask) {
  forge_emu::arrive(forge_emu::tls_block->warps[forge_emu::linear_thread() / 32].bar);
}

template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = static_cast<int>(forge_emu::linear_thread() % 32);
  return forge_emu::exchange(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
inline int __any_sync(unsigned mask, int pred) { return forge_emu::vote_any(mask, pred != 0) ? 1 : 0; }
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = static_cast<int>(forge_emu::linear_thread() % 32);
  const int src = lane ^ lane_mask;
  return forge_emu::exchange(mask, v, src / width == lane / width ? src : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = static_cast<int>(forge_emu::linear_thread() % 32);
  const int src = lane + static_cast<int>(delta);
  return forge_emu::exchange(mask, v, src / width == lane / width ? src : lane);
}

template <class T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v, std::memory_order_relaxed);
}
template <class T>
T atomicExch(T* address, T v) {
  return std::atomic_ref<T>(*address).exchange(v, std::memory_order_relaxed);
}
// Blocks run on several host threads: a fence orders a block's global
// writes before its atomics (and another's reads after them), as on the device.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
[[noreturn]] inline void __trap() {
  std::fprintf(stderr, "emulation: __trap\n");
  std::abort();
}

// ---- bf16 (cuda_bf16.h) -------------------------------------------------------------
// The FP32 bit pattern's upper half (core/bf16.hpp); __float2bfloat16 rounds
// numbers to nearest even as the device conversion does (a NaN stays a quiet
// NaN with its payload; the device gives the canonical NaN).
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float x) { return {forge::float_to_bf16(x)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }
inline float __bfloat162float(__nv_bfloat16 x) { return forge::bf16_to_float(x.bits); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }

// ---- runtime API ------------------------------------------------------------------
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorInvalidValue = 1;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "error";
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin, cudaDevAttrMaxSharedMemoryPerMultiprocessor };
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
  *v = static_cast<int>(attr == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? forge_emu::shared_limits().per_sm
                                                                            : forge_emu::shared_limits().per_block);
  return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, bytes);  // garbage, as cudaMalloc'd memory is
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
// Page-locking: a registry of the ranges, with the runtime's refusals (a
// range overlapping a registered one; unregistering what is not registered).
constexpr cudaError_t cudaErrorHostMemoryAlreadyRegistered = 712;
constexpr cudaError_t cudaErrorHostMemoryNotRegistered = 713;
constexpr unsigned cudaHostRegisterDefault = 0;
struct forge_emu_host_range {
  const char* begin;
  size_t bytes;
};
inline std::vector<forge_emu_host_range>& forge_emu_host_registered() {
  static std::vector<forge_emu_host_range> ranges;
  return ranges;
}
inline cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  const char* b = static_cast<const char*>(p);
  if (!p || bytes == 0) return cudaErrorInvalidValue;
  for (const forge_emu_host_range& r : forge_emu_host_registered())
    if (b < r.begin + r.bytes && r.begin < b + bytes) return cudaErrorHostMemoryAlreadyRegistered;
  forge_emu_host_registered().push_back({b, bytes});
  return cudaSuccess;
}
inline cudaError_t cudaHostUnregister(void* p) {
  auto& ranges = forge_emu_host_registered();
  for (size_t i = 0; i < ranges.size(); ++i)
    if (ranges[i].begin == p) {
      ranges.erase(ranges.begin() + static_cast<std::ptrdiff_t>(i));
      return cudaSuccess;
    }
  return cudaErrorHostMemoryNotRegistered;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t = nullptr) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = nullptr;
  return cudaSuccess;
}
constexpr unsigned cudaStreamNonBlocking = 1;
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > forge_emu::shared_limits().per_block) return 1;
  std::lock_guard lock(forge_emu::opt_in_mutex());
  forge_emu::opt_ins()[forge_emu::kernel_address(kernel)] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

// ---- cuBLAS on CBLAS ------------------------------------------------------------------
using cublasStatus_t = int;
constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;
struct cublasContext;
using cublasHandle_t = cublasContext*;
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cublasMath_t { CUBLAS_DEFAULT_MATH, CUBLAS_PEDANTIC_MATH };
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = nullptr;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char* cublasGetStatusString(cublasStatus_t) { return "error"; }
// cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE) a negative size or a leading
// dimension below max(1, the stored rows), k = 0 included: so does this.
constexpr cublasStatus_t CUBLAS_STATUS_INVALID_VALUE = 7;
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float* alpha, const float* A, int lda,
                                  const float* B, int ldb, const float* beta, float* C, int ldc) {
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
              tb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, m, n, k, *alpha, A, lda, B, ldb,
              *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx for what the backend issues: bf16 A and B, FP32 or bf16 C,
// FP32 compute. The inputs are widened to FP32 (exactly) and go through
// SGEMM; a bf16 C is widened for beta C and the FP32 result rounded to
// nearest even.
enum cudaDataType_t { CUDA_R_32F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
constexpr cublasStatus_t CUBLAS_STATUS_NOT_SUPPORTED = 15;
inline std::vector<float> forge_emu_widen_bf16(const void* p, cublasOperation_t op, int m, int k,
                                               int ld) {
  const int rows = op == CUBLAS_OP_N ? m : k, cols = op == CUBLAS_OP_N ? k : m;
  const size_t n = cols == 0 ? 0 : size_t(ld) * (cols - 1) + rows;
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return out;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                   int m, int n, int k, const void* alpha, const void* A,
                                   cudaDataType_t a_type, int lda, const void* B,
                                   cudaDataType_t b_type, int ldb, const void* beta, void* C,
                                   cudaDataType_t c_type, int ldc, cublasComputeType_t,
                                   cublasGemmAlgo_t) {
  if (a_type != CUDA_R_16BF || b_type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
  const std::vector<float> a = forge_emu_widen_bf16(A, ta, m, k, lda);
  const std::vector<float> b = forge_emu_widen_bf16(B, tb, k, n, ldb);
  if (c_type == CUDA_R_32F)
    return cublasSgemm(nullptr, ta, tb, m, n, k, static_cast<const float*>(alpha), a.data(), lda,
                       b.data(), ldb, static_cast<const float*>(beta), static_cast<float*>(C), ldc);
  // bf16 C [n columns of ldc], column-major: beta C widened, SGEMM, rounded.
  __nv_bfloat16* c16 = static_cast<__nv_bfloat16*>(C);
  std::vector<float> c(n == 0 ? 0 : size_t(ldc) * (n - 1) + m, 0.0f);
  if (*static_cast<const float*>(beta) != 0.0f)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) c[size_t(j) * ldc + i] = __bfloat162float(c16[size_t(j) * ldc + i]);
  const cublasStatus_t st = cublasSgemm(nullptr, ta, tb, m, n, k, static_cast<const float*>(alpha), a.data(), lda,
                                        b.data(), ldb, static_cast<const float*>(beta), c.data(), ldc);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) c16[size_t(j) * ldc + i] = __float2bfloat16(c[size_t(j) * ldc + i]);
  return st;
}

// Device-side integer min/max.
using std::max;
using std::min;
