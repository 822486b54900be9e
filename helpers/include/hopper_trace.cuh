// Timeline stamps for the course's kernels: when each warp waited, issued and arrived, on the H100 or on the
// course's emulator. Cheap: lane 0 of a warp reads %clock64 and %globaltimer and writes one 16-byte record into
// its own ring in global memory; with a null buffer a stamp is one predicated-off branch.
//
//   #include "hopper_trace.cuh"
//   __global__ void k(..., unsigned long long* trace) {   // trace: helpers.gpu.executor.trace.stamp_buffer(...) or nullptr
//     HOPPER_TRACE(trace);                                 // once, after which every warp stamps into its ring
//     HOPPER_STAMP(WAIT_FULL, s);  HOPPER_WAIT(full, s, parity);  HOPPER_STAMP(FULL_DONE, s);
//
// Record layout (helpers.gpu.executor.trace.STAMP_RECORD): u64 clock64; u32 globaltimer (low bits); u8 kind; u8 argument
// (a stage, or the SM for START); u16 sequence number. Ring: HOPPER_STAMP_CAP records per warp, warps of block b
// at records [(b * warps + w) * CAP, ...). Only lane 0 of a warp writes: stamp code that lane 0 executes.
#ifndef HOPPER_TRACE_CUH
#define HOPPER_TRACE_CUH

#ifndef HOPPER_STAMP_CAP
#define HOPPER_STAMP_CAP 512
#endif

namespace hopper {

enum StampKind : unsigned {
  STAMP_WAIT_FULL = 1, STAMP_FULL_DONE = 2, STAMP_WAIT_EMPTY = 3, STAMP_EMPTY_DONE = 4, STAMP_TMA = 5,
  STAMP_WGMMA = 6, STAMP_WAIT_GROUP = 7, STAMP_WAIT_GROUP_DONE = 8, STAMP_RELEASE = 9, STAMP_EPILOGUE = 10,
  STAMP_DONE = 11, STAMP_START = 12
};

struct StampRing {
  unsigned long long* ring;  // this warp's records (2 words each), or nullptr: no tracing
  unsigned n;                // records written by lane 0 so far

  __device__ __forceinline__ explicit StampRing(unsigned long long* buffer) : ring(nullptr), n(0) {
    if (buffer != nullptr && (threadIdx.x & 31) == 0) {
      const unsigned warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
      const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
      const unsigned warp = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32;
      ring = buffer + 2ull * HOPPER_STAMP_CAP * (block * warps + warp);
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      stamp(STAMP_START, sm);
    }
  }

  __device__ __forceinline__ void stamp(unsigned kind, unsigned arg) {
    if (ring == nullptr) return;
    unsigned long long clock, gtime;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(clock));
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gtime));
    const unsigned long long word = (gtime & 0xFFFFFFFFull) | (unsigned long long)(kind & 0xFF) << 32 |
                                    (unsigned long long)(arg & 0xFF) << 40 | (unsigned long long)(n & 0xFFFF) << 48;
    unsigned long long* slot = ring + 2 * (n % HOPPER_STAMP_CAP);
    asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(slot), "l"(clock), "l"(word) : "memory");
    ++n;
  }
};

}  // namespace hopper

/// Start stamping into `buffer` (an `unsigned long long*` kernel argument; nullptr turns stamping off).
#define HOPPER_TRACE(buffer) ::hopper::StampRing hopper_stamps(buffer)
/// Stamp `kind` (WAIT_FULL, FULL_DONE, WAIT_EMPTY, EMPTY_DONE, TMA, WGMMA, WAIT_GROUP, WAIT_GROUP_DONE, RELEASE,
/// EPILOGUE, DONE) with an argument (the stage), from lane 0 of the warp executing it.
#define HOPPER_STAMP(kind, arg) hopper_stamps.stamp(::hopper::STAMP_##kind, (unsigned)(arg))

#endif  // HOPPER_TRACE_CUH
