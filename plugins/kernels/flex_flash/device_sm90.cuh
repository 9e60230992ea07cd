// Hopper (sm_90a) building blocks of flex_flash: mbarriers, TMA tile loads (cp.async.bulk.tensor),
// warpgroup MMAs with A in registers (wgmma.mma_async ... RS) and their shared-memory
// descriptors, register reallocation, TMA reduce-add. Used by forward_sm90.cuh and backward_sm90.cuh.
// Rule: every shared tile read by wgmma is written by TMA with the 128-byte swizzle, 1024-byte
// aligned: 64-element (128-byte) rows, the 16-byte chunk c of row r stored at chunk c ^ (r % 8).
// The wgmma wrappers are compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace lca_flex_flash::dev::sm90 {

// ---- mbarriers (shared::cta) --------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives and announces `bytes` of TMA transactions that complete this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- TMA ------------------------------------------------------------------------------------------

// Loads the box at (c0, c1, c2) of a 3-D tensor map into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int32_t c0, int32_t c1, int32_t c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// Adds the shared-memory box at src into the 3-D tensor map's box at (c0, c1, c2), elementwise
// in the map's type (fp32 here), as one bulk async-group operation of this thread; elements past
// the tensor's end are skipped.
__device__ __forceinline__ void tma_reduce_add_3d(const void* map, uint32_t src, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void st_shared_u32(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(value) : "memory");
}
// Stores the shared-memory box at src into the 3-D tensor map's box at (c0, c1, c2), as one bulk
// async-group operation of this thread; elements past the tensor's end are not written.
__device__ __forceinline__ void tma_store_3d(const void* map, uint32_t src, int32_t c0, int32_t c1, int32_t c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's bulk groups still read their shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Waits until at most N of this thread's bulk groups are still in flight (writes done).
template <int N>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Flags between blocks for the async proxy's global writes (the backward's first writers of dQ):
// set_flag after this thread's bulk stores are done (bulk_wait<0>) publishes them with a release at
// GPU scope; wait_flag spins with an acquire until the flag reads `value`, then orders the async
// proxy's later reads and reduce-adds after it. A wait of over 2^25 reads (each an L2 round trip,
// ~0.5 us: ~15 s) traps (a bug, not a slow block: the writer is running or done, and reaches any tile
// within its walk), so the run fails with an error instead of hanging.
__device__ __forceinline__ void set_flag(uint32_t* flag, uint32_t value) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(flag), "r"(value) : "memory");
}
__device__ __forceinline__ void wait_flag(const uint32_t* flag, uint32_t value) {
  uint32_t seen;
  for (uint32_t spins = 0;; ++spins) {
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
    if (seen == value) break;
    if (spins > (1u << 25)) __trap();
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- register reallocation ------------------------------------------------------------------------

// Orders this thread's ordinary shared-memory stores before later reads by the async proxy
// (wgmma operands written with st.shared).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Named barrier `id` over `threads` threads (a multiple of 32); id 0 is __syncthreads.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// The same without .aligned (barrier.sync): the threads may reach the barrier from different
// instructions (bar.sync is barrier.sync.aligned, which needs every thread at the same one).
__device__ __forceinline__ void named_sync_any(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at named barrier `id` without waiting (the other `threads` minus these wait there).
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int N>
__device__ __forceinline__ void regs_dec() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void regs_inc() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

// ---- wgmma ----------------------------------------------------------------------------------------

// Shared-memory matrix descriptor, 128-byte swizzle. lbo / sbo in bytes: for a K-major operand
// sbo is the step between 8-row groups (1024) and lbo is unused; for an MN-major operand lbo is
// the step between 64-element column blocks and sbo the step between 8-row groups along K.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t{(addr & 0x3FFFFu) >> 4} | (uint64_t{lbo >> 4} << 16) | (uint64_t{sbo >> 4} << 32) |
         (uint64_t{1} << 62);
}

// The descriptor of the operand `bytes` further on in shared memory: only the start-address field
// (bits 0-13, address >> 4) moves, and shared addresses stay below 256 KiB, so nothing carries
// into the next field. One add where smem_desc would mask, shift and or again.
__device__ __forceinline__ uint64_t desc_plus(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Ends the basic block here, so that ptxas does not hoist the next wgmma_wait above the code before
// it: within a block, ptxas 13.0 places a wait as early as it may, which put the P V wait of the
// overlapped forwards ahead of the softmax it was meant to run beside (commit 4bf0f72). A branch on a
// value that code computes, never taken with finite inputs, and harmless where it is.
__device__ __forceinline__ void wait_below(float computed) {
  if (computed > 3.0e38f) __nanosleep(0);
}
// Pins registers written by in-flight wgmmas: reads of them cannot move above this point, which
// follows the wgmma_wait that retires them.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// D[64 x N] (+)= A[64 x 16] * B[16 x N]; A from registers (per warp, the m16n8k16 A fragment of
// its 16 rows), B through a descriptor (TransB 0: K-major, 1: N-major), fp32 accumulators in the
// m16n8 C layout per 8 columns: d[4 j + e] is column block j. scale_d 0 overwrites D.
template <class T, int N>
struct WgmmaRS;
// D[64 x N] (+)= A[64 x 16] * B[16 x N], both through descriptors (TransA 0: K-major, 1: M-major).
template <class T, int N>
struct WgmmaSS;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
// The accumulator operands of an m64nNk16 wgmma, N / 2 fp32 registers a thread: their place
// list in the instruction and their read-write constraints (d is the accumulator array).
#define LCA_FLEX_WGMMA_D4_REGS "{%0,%1,%2,%3}"
#define LCA_FLEX_WGMMA_D4_OUT "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define LCA_FLEX_WGMMA_D32_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define LCA_FLEX_WGMMA_D64_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define LCA_FLEX_WGMMA_D32_OUT \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define LCA_FLEX_WGMMA_D64_OUT \
  LCA_FLEX_WGMMA_D32_OUT, \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// The RS form for one element type and width: TYPE the C++ type, PTX its name in the
// instruction, N the width, NR = N / 2 accumulators; A_, DESC, SCALE, TRANS the operand places
// after the accumulators (the four A registers, the B descriptor, scale-d, trans-b).
#define LCA_FLEX_WGMMA_RS(TYPE, PTX, N, NR, A_, DESC, SCALE, TRANS)                                  \
  template <>                                                                                      \
  struct WgmmaRS<TYPE, N> {                                                                        \
    template <int TransB>                                                                          \
    static __device__ __forceinline__ void run(float (&d)[NR], const uint32_t (&a)[4], uint64_t desc, \
                                               int scale_d) {                                      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                               \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " "                 \
                   LCA_FLEX_WGMMA_D##NR##_REGS ", {" A_ "}, " DESC ", p, 1, 1, " TRANS ";\n}\n"      \
                   : LCA_FLEX_WGMMA_D##NR##_OUT                                                    \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TransB)); \
    }                                                                                              \
  };
// The SS form: DESC_A, DESC_B, SCALE, TRANS_A, TRANS_B the operand places after the accumulators.
#define LCA_FLEX_WGMMA_SS(TYPE, PTX, N, NR, DESC_A, DESC_B, SCALE, TRANS_A, TRANS_B)                 \
  template <>                                                                                      \
  struct WgmmaSS<TYPE, N> {                                                                        \
    template <int TransA, int TransB>                                                              \
    static __device__ __forceinline__ void run(float (&d)[NR], uint64_t desc_a, uint64_t desc_b,   \
                                               int scale_d) {                                      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\n"                               \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " "                 \
                   LCA_FLEX_WGMMA_D##NR##_REGS ", " DESC_A ", " DESC_B ", p, 1, 1, " TRANS_A ", " TRANS_B ";\n}\n" \
                   : LCA_FLEX_WGMMA_D##NR##_OUT                                                    \
                   : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TransA), "n"(TransB));            \
    }                                                                                              \
  };

// m64n8: the forward's row sums, P times a column block of ones (fwd_sum).
LCA_FLEX_WGMMA_RS(__nv_bfloat16, "bf16", 8, 4, "%4,%5,%6,%7", "%8", "%9", "%10")
LCA_FLEX_WGMMA_RS(__half, "f16", 8, 4, "%4,%5,%6,%7", "%8", "%9", "%10")
LCA_FLEX_WGMMA_RS(__nv_bfloat16, "bf16", 64, 32, "%32,%33,%34,%35", "%36", "%37", "%38")
LCA_FLEX_WGMMA_RS(__half, "f16", 64, 32, "%32,%33,%34,%35", "%36", "%37", "%38")
LCA_FLEX_WGMMA_RS(__nv_bfloat16, "bf16", 128, 64, "%64,%65,%66,%67", "%68", "%69", "%70")
LCA_FLEX_WGMMA_RS(__half, "f16", 128, 64, "%64,%65,%66,%67", "%68", "%69", "%70")
LCA_FLEX_WGMMA_SS(__nv_bfloat16, "bf16", 64, 32, "%32", "%33", "%34", "%35", "%36")
LCA_FLEX_WGMMA_SS(__half, "f16", 64, 32, "%32", "%33", "%34", "%35", "%36")
LCA_FLEX_WGMMA_SS(__nv_bfloat16, "bf16", 128, 64, "%64", "%65", "%66", "%67", "%68")
LCA_FLEX_WGMMA_SS(__half, "f16", 128, 64, "%64", "%65", "%66", "%67", "%68")
#undef LCA_FLEX_WGMMA_RS
#undef LCA_FLEX_WGMMA_SS
#undef LCA_FLEX_WGMMA_D4_REGS
#undef LCA_FLEX_WGMMA_D4_OUT
#undef LCA_FLEX_WGMMA_D32_REGS
#undef LCA_FLEX_WGMMA_D64_REGS
#undef LCA_FLEX_WGMMA_D32_OUT
#undef LCA_FLEX_WGMMA_D64_OUT
#endif

}  // namespace lca_flex_flash::dev::sm90
