// hopper.cuh: the course's device-side toolbox for H100 (sm_90a) kernels.
//
// Short inline-PTX wrappers, one instruction (or one idiom) each, so that a kernel reads like the lesson that
// explains it. It compiles under NVRTC with no CUDA toolkit: it includes nothing, and uses only built-in types.
//
//   addresses   smem_u32                      generic -> 32-bit shared-memory address
//   mbarrier    mbar_init, mbar_fence_init, mbar_arrive (once or count), mbar_arrive_expect_tx, mbar_expect_tx,
//               mbar_try_wait, mbar_test_wait, mbar_wait (bounded), mbar_arrive_cluster(_release), mbar_inval
//   named bars  named_bar_sync, named_bar_arrive (bar.sync / bar.arrive with an id and a thread count)
//               HOPPER_WAIT(array, i, parity) / HOPPER_WAIT1(bar, parity): bounded waits that name the barrier
//   fences      fence_proxy_async (shared::cta), fence_proxy_async_global, fence_proxy_async_all
//   TMA         tma_load_1d..5d, tma_load_2d_multicast, tma_store_1d..5d, tma_store_commit,
//               tma_store_wait_read<N>, tma_store_wait<N>, tma_prefetch, bulk_load (non-tensor)
//   wgmma       wgmma_fence, wgmma_commit, wgmma_wait<N>, make_smem_desc,
//               wgmma_m64n{8,16,32,64,96,128,192,256}k16_bf16, wgmma_bf16<N>
//   registers   setmaxnreg_inc<R>, setmaxnreg_dec<R>
//   flags       flag_load_acquire, flag_store_release, flag_add_release, flag_wait_geq (GPU-scope handoff)
//   clusters    cluster_ctarank, cluster_nctarank, cluster_arrive(_relaxed), cluster_wait, cluster_sync,
//               cluster_sync_after_init<relaxed>, map_shared_rank
//
// Bounded waits. Every wait loop here gives up after HOPPER_WAIT_BUDGET clock cycles (default 2e9, about one
// second at H100 clocks): the first thread to give up writes which block, warp and lane, which barrier and which
// parity it waited on into a diagnostics record that the host mapped for it (hopper_diag_addr), then executes
// `trap`. helpers.gpu turns that record into a sentence such as
//   "deadlock: block (3,0,0) warp 4 (lane 0) waited on full[2] for parity 1 for 2.0e9 cycles".
// Define HOPPER_WAIT_BUDGET before including this file to change the budget.
#ifndef HOPPER_CUH
#define HOPPER_CUH

#ifndef HOPPER_WAIT_BUDGET
#define HOPPER_WAIT_BUDGET 2000000000LL
#endif

// The 128-byte TMA descriptor as the driver builds it (cuda.h cannot be included under NVRTC).
#if !defined(CUDA_VERSION) && !defined(HOPPER_NO_CUTENSORMAP)
struct alignas(64) CUtensorMap {
  unsigned long long opaque[16];
};
#endif

// Diagnostics: the host writes the device address of a host-mapped record here before launching.
extern "C" {
__device__ unsigned long long hopper_diag_addr = 0;
__device__ int hopper_diag_claim = 0;
__device__ int hopper_diag_done = 0;
}

namespace hopper {

// ---------------------------------------------------------------------------------------------- addresses
/// 32-bit shared-memory address of a generic pointer into shared memory (what PTX's [addr] operands want).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------------- diagnostics
/// Layout shared with helpers/gpu/diagnostics.py (keep both in step).
struct StuckRecord {
  unsigned magic;          // 0x48505752 ("HPWR") once written
  unsigned parity;         // the parity the thread waited for
  int index;               // barrier index (HOPPER_WAIT), -1 if none
  unsigned bar_smem;       // shared-memory address of the barrier
  unsigned block[3];       // blockIdx
  unsigned thread;         // linear thread index in the block
  unsigned cluster_rank;   // %cluster_ctarank
  unsigned pad;
  long long cycles;        // how long it waited
  char label[64];          // the barrier's name in the source, NUL-terminated
};

// Inlined on purpose: a real call inside a consumer's K loop makes ptxas keep every live accumulator across the
// call, and a 128-accumulator warpgroup (m64n256k16) then fails register allocation even at setmaxnreg 240.
__device__ __forceinline__ void report_stuck(const void* bar, unsigned parity, const char* label, int index,
                                          long long cycles) {
  if (hopper_diag_addr != 0 && atomicCAS(&hopper_diag_claim, 0, 1) == 0) {
    StuckRecord* r = reinterpret_cast<StuckRecord*>(hopper_diag_addr);
    r->parity = parity;
    r->index = index;
    r->bar_smem = bar != nullptr ? smem_u32(bar) : 0xFFFFFFFFu;  // no barrier: a global flag
    r->block[0] = blockIdx.x;
    r->block[1] = blockIdx.y;
    r->block[2] = blockIdx.z;
    r->thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    r->cluster_rank = rank;
    r->cycles = cycles;
    int i = 0;
    if (label != nullptr)
      for (; i < 63 && label[i] != 0; ++i) r->label[i] = label[i];
    r->label[i] = 0;
    __threadfence_system();
    r->magic = 0x48505752u;
    __threadfence_system();
    atomicExch(&hopper_diag_done, 1);
  } else if (hopper_diag_addr != 0) {
    // Another thread is writing the record: a trap now would abort the grid before it is done.
    const long long start = clock64();
    while (atomicAdd(&hopper_diag_done, 0) == 0 && clock64() - start < 200000000LL) {
    }
  }
  asm volatile("trap;");
}

// ---------------------------------------------------------------------------------------------- mbarrier
/// Initialise an mbarrier (8 bytes of shared memory, 8-byte aligned) to expect `count` arrivals per phase.
__device__ __forceinline__ void mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

/// Make barrier initialisation visible to the async proxy (TMA) and to the cluster; follow with a block
/// (or cluster) barrier before anyone uses the mbarrier.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// Arrive once on the barrier; returns the opaque state token of the phase arrived on.
__device__ __forceinline__ unsigned long long mbar_arrive(void* bar) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(smem_u32(bar)) : "memory");
  return state;
}

/// Arrive `count` times at once (one instruction; count >= 1); returns the state token of the phase.
__device__ __forceinline__ unsigned long long mbar_arrive(void* bar, unsigned count) {
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(smem_u32(bar)), "r"(count)
               : "memory");
  return state;
}

/// Invalidate an mbarrier so its 8 bytes can be reused as ordinary shared memory (or re-initialised).
__device__ __forceinline__ void mbar_inval(void* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_u32(bar)) : "memory");
}

/// Add `bytes` to the phase's expected transaction count, then arrive once (one instruction, no race).
__device__ __forceinline__ void mbar_arrive_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

/// Add `bytes` to the phase's expected transaction count without arriving.
__device__ __forceinline__ void mbar_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

/// Arrive on the barrier at the same offset in the shared memory of block `cta` of this cluster (`cta` may be
/// this block's own rank). Default semantics (release at CTA scope): enough to say "my reads of that stage are
/// done" (the wgmma that read it has retired), which is all a consumer's EMPTY arrival reports. It compiles to a
/// bare remote arrive; the .release.cluster form below costs a GPU-wide memory barrier (MEMBAR.ALL.GPU) first.
__device__ __forceinline__ void mbar_arrive_cluster(void* bar, unsigned cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(smem_u32(bar)),
      "r"(cta)
      : "memory");
}

/// The same arrival with release semantics at cluster scope: this thread's earlier memory writes become visible
/// to the threads of block `cta` that wait on the barrier. Needed when the arrival hands over data written with
/// ordinary stores (e.g. a shared-memory buffer in the other block); not needed to hand back a stage.
__device__ __forceinline__ void mbar_arrive_cluster_release(void* bar, unsigned cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(smem_u32(bar)),
      "r"(cta)
      : "memory");
}

/// One non-blocking test: has the phase with this parity completed?
__device__ __forceinline__ bool mbar_test_wait(void* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

/// One potentially blocking test (the hardware may suspend the thread for a while): true once the phase with
/// this parity has completed, false if the time-out hint expired first. Call it in a loop, or use mbar_wait.
__device__ __forceinline__ bool mbar_try_wait(void* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
      : "=r"(done)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

/// Wait for the phase with this parity, bounded: past HOPPER_WAIT_BUDGET cycles it records the barrier and
/// traps. `label`/`index` name the barrier in the host's report (HOPPER_WAIT fills them in for you).
__device__ __forceinline__ void mbar_wait(void* bar, unsigned parity, const char* label = nullptr,
                                          int index = -1) {
  if (mbar_try_wait(bar, parity)) return;
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    const long long waited = clock64() - start;
    if (waited > HOPPER_WAIT_BUDGET) report_stuck(bar, parity, label, index, waited);
  }
}

}  // namespace hopper

/// Bounded wait on barrier `array[i]` for `parity`; a deadlock report names it "array[i]" with i's value.
#define HOPPER_WAIT(array, i, parity) ::hopper::mbar_wait(&(array)[(i)], (parity), #array, (int)(i))
/// Bounded wait on a single barrier `bar` (an lvalue, e.g. a __shared__ uint64_t) for `parity`.
#define HOPPER_WAIT1(bar, parity) ::hopper::mbar_wait(&(bar), (parity), #bar, -1)

namespace hopper {

// ---------------------------------------------------------------------------------------------- named barriers
// The 16 hardware barriers of a block (id 0 is the one __syncthreads() uses). bar.sync waits until `count`
// threads (a multiple of 32, counted by warps) have arrived at barrier `id`; bar.arrive adds this warp's
// arrival without waiting, so a producer group can signal a consumer group that waits with bar.sync.
/// Wait at named barrier `id` until `count` threads have arrived (this warp included).
__device__ __forceinline__ void named_bar_sync(unsigned id, unsigned count) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}
/// Arrive at named barrier `id` (of `count` threads) without waiting.
__device__ __forceinline__ void named_bar_arrive(unsigned id, unsigned count) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// ---------------------------------------------------------------------------------------------- fences
/// Order this thread's generic-proxy shared-memory writes (stores, mbarrier init) before later async-proxy
/// operations (TMA, wgmma) on shared memory of this block.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// The same for global memory (e.g. data written by st.global that a later TMA load in this kernel reads).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
/// The same for every state space.
__device__ __forceinline__ void fence_proxy_async_all() { asm volatile("fence.proxy.async;" ::: "memory"); }

// ---------------------------------------------------------------------------------------------- TMA loads
// Coordinates are in elements, innermost dimension first (c0 = column of a row-major matrix). The load
// completes on `bar`, adding the box's bytes to its transaction count: expect them (mbar_arrive_expect_tx)
// in the same phase. `tmap` is the address of a __grid_constant__ CUtensorMap kernel parameter (or a
// CUtensorMap in global/constant memory).

__device__ __forceinline__ void tma_load_1d(void* dst, const void* tmap, void* bar, int c0) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], "
      "[%2];" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, void* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const void* tmap, void* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%3, %4, %5}], [%2];" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d(void* dst, const void* tmap, void* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(void* dst, const void* tmap, void* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
/// 2D TMA load multicast to the blocks of this cluster whose bit is set in `cta_mask`: the tile lands at the
/// same shared-memory offset in each, and completes on the barrier at the same offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* tmap, void* bar, int c0, int c1,
                                                      unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_u32(dst)),
      "l"(tmap), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

/// Non-tensor bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared,
/// completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, void* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

/// Fetch a tensor map into the descriptor cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tmap) : "memory");
}

// ---------------------------------------------------------------------------------------------- TMA stores
// Shared -> global through the tensor map. Write the tile with ordinary stores, fence_proxy_async() in each
// writing thread, sync, then one thread stores, commits, and waits before the tile is reused / the kernel ends.
__device__ __forceinline__ void tma_store_1d(const void* tmap, const void* src, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];" ::"l"(tmap),
               "r"(smem_u32(src)), "r"(c0)
               : "memory");
}
__device__ __forceinline__ void tma_store_2d(const void* tmap, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(tmap),
               "r"(smem_u32(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_store_3d(const void* tmap, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(
                   tmap),
               "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void tma_store_4d(const void* tmap, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(tmap),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void tma_store_5d(const void* tmap, const void* src, int c0, int c1, int c2, int c3,
                                             int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];" ::"l"(
          tmap),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}
/// Close the group of bulk stores issued so far by this thread.
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/// Wait until at most N groups still read their shared-memory source (the source may then be overwritten).
template <int N = 0>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/// Wait until at most N groups are still in flight (their writes to global memory are complete).
template <int N = 0>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

// ---------------------------------------------------------------------------------------------- wgmma
/// Order this warpgroup's earlier *register* accesses (the accumulators, and an A operand held in registers)
/// before the wgmma that follows: needed before the first wgmma, and whenever ordinary instructions touched the
/// accumulators since the last one. It does not order shared memory: a tile written by ordinary stores
/// (st.shared) must be made visible to the tensor core with fence_proxy_async() instead. Tiles written by TMA
/// need neither: the mbarrier wait that delivers them is the ordering.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
/// Close the group of wgmma operations issued so far by this warpgroup.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
/// Wait until at most N wgmma groups are still pending.
template <int N = 0>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/// Keep the compiler from moving accumulator accesses across an asynchronous wgmma.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// Shared-memory matrix descriptor for wgmma: start address, leading and stride byte offsets, and swizzle
/// (128, 64, 32 bytes, or 0 for none). For a 128B-swizzled K-major bf16 tile with 64-element rows:
/// lbo = 16, sbo = 1024, swizzle = 128, tile 1024-byte aligned; +32 bytes on the address steps K by 16.
__device__ __forceinline__ unsigned long long make_smem_desc(const void* smem, unsigned lbo_bytes,
                                                             unsigned sbo_bytes, int swizzle_bytes = 128) {
  const unsigned long long mode = swizzle_bytes == 128 ? 1ull : swizzle_bytes == 64 ? 2ull : swizzle_bytes == 32 ? 3ull : 0ull;
  unsigned long long desc = 0;
  desc |= (unsigned long long)((smem_u32(smem) & 0x3FFFF) >> 4);
  desc |= (unsigned long long)((lbo_bytes & 0x3FFFF) >> 4) << 16;
  desc |= (unsigned long long)((sbo_bytes & 0x3FFFF) >> 4) << 32;
  desc |= mode << 62;
  return desc;
}

// BEGIN GENERATED WGMMA
// Generated by gen_wgmma.py: do not edit by hand.
template <int N> struct wgmma_bf16_dispatch;

/// D[64x8] (+)= A[64x16] * B[16x8], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 4 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n8k16_bf16(float (&d)[4], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, %8;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<8> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[4], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n8k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x16] (+)= A[64x16] * B[16x16], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 8 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n16k16_bf16(float (&d)[8], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, %12;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<16> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[8], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n16k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x32] (+)= A[64x16] * B[16x32], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 16 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n32k16_bf16(float (&d)[16], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<32> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[16], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n32k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x64] (+)= A[64x16] * B[16x64], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 32 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[32], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<64> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[32], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n64k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x96] (+)= A[64x16] * B[16x96], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 48 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n96k16_bf16(float (&d)[48], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, %51, %52;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<96> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[48], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n96k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x128] (+)= A[64x16] * B[16x128], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 64 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<128> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[64], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n128k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x192] (+)= A[64x16] * B[16x192], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 96 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n192k16_bf16(float (&d)[96], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, %99, %100;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<192> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[96], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n192k16_bf16<TA, TB>(d, a, b, acc);
  }
};

/// D[64x256] (+)= A[64x16] * B[16x256], bf16 in, fp32 accumulate; A and B from shared-memory descriptors.
/// d: this thread's 128 accumulators. accumulate=false overwrites D (first K step). TA/TB: 1 = transposed.
template <int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], unsigned long long desc_a,
                                                     unsigned long long desc_b, bool accumulate = true) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(TA), "n"(TB));
}
template <> struct wgmma_bf16_dispatch<256> {
  template <int TA, int TB>
  __device__ __forceinline__ static void run(float (&d)[128], unsigned long long a, unsigned long long b, bool acc) {
    wgmma_m64n256k16_bf16<TA, TB>(d, a, b, acc);
  }
};
// END GENERATED WGMMA

/// wgmma_m64nNk16_bf16 picked by N at compile time: wgmma_bf16<128>(acc, da, db, k > 0).
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_bf16(float (&d)[N / 2], unsigned long long desc_a,
                                           unsigned long long desc_b, bool accumulate = true) {
  wgmma_bf16_dispatch<N>::template run<TA, TB>(d, desc_a, desc_b, accumulate);
}

// ---------------------------------------------------------------------------------------------- registers
/// Raise this warpgroup's per-thread register budget to R (24..256, multiple of 8). Needs a register cap at
/// entry (__launch_bounds__(threads, 1)); each warpgroup role in one branch of an if/else.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
/// Lower this warpgroup's per-thread register budget to R, handing registers back to the SM.
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}

// ---------------------------------------------------------------------------------------------- clusters
/// This block's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/// Number of blocks in this cluster.
__device__ __forceinline__ unsigned cluster_nctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
/// Cluster barrier, split: arrive (release) ...
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
/// The same arrival without release semantics (no GPU-wide memory barrier): enough where nothing written before it
/// needs publishing, e.g. after fence.mbarrier_init has published the cluster's barriers.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
/// ... and wait (acquire). Every thread of every block of the cluster must arrive.
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
/// The cluster barrier that follows the mbarriers' init: both blocks' barriers exist before anyone multicasts into
/// them or arrives on them. Relaxed: the arrive has no release semantics (no GPU-wide memory barrier), enough once
/// fence.mbarrier_init has published the barriers.
template <bool Relaxed>
__device__ __forceinline__ void cluster_sync_after_init() {
  if constexpr (Relaxed) {
    cluster_arrive_relaxed();
  } else {
    cluster_arrive();
  }
  cluster_wait();
}
/// Full cluster barrier: arrive then wait.
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
/// Shared-memory address (shared::cluster window) of the same variable in block `cta` of this cluster.
__device__ __forceinline__ unsigned map_shared_rank(const void* smem, unsigned cta) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_u32(smem)), "r"(cta));
  return r;
}

// ---------------------------------------------------------------------------------------------- flags
// Flags in global memory that blocks of one grid use to hand work to each other (split-K / Stream-K fix-up).
// The writer stores its data, meets its block's other writers at a barrier, then one thread releases the flag;
// the reader acquires the flag, then meets its block at a barrier before reading. Release/acquire at GPU scope
// makes the data written before the release visible to every read after the acquire.
/// Load a 32-bit flag with acquire semantics at GPU scope.
__device__ __forceinline__ unsigned flag_load_acquire(const unsigned* flag) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}
/// Store a 32-bit flag with release semantics at GPU scope.
__device__ __forceinline__ void flag_store_release(unsigned* flag, unsigned value) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}
/// Add to a 32-bit flag with release semantics at GPU scope (no result).
__device__ __forceinline__ void flag_add_release(unsigned* flag, unsigned value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(flag), "r"(value) : "memory");
}
/// Spin (bounded, like mbar_wait) until *flag >= value, acquiring it. A deadlock report names `label`[index].
__device__ __forceinline__ void flag_wait_geq(const unsigned* flag, unsigned value, const char* label = nullptr,
                                              int index = -1) {
  if (flag_load_acquire(flag) >= value) return;
  const long long start = clock64();
  while (flag_load_acquire(flag) < value) {
    const long long waited = clock64() - start;
    if (waited > HOPPER_WAIT_BUDGET) report_stuck(nullptr, value, label, index, waited);
  }
}

// ---------------------------------------------------------------------------------------------- misc
/// Index of this thread's warpgroup (4 consecutive warps) in a 1-D block.
__device__ __forceinline__ int warpgroup_id() { return threadIdx.x / 128; }

}  // namespace hopper

#endif  // HOPPER_CUH
