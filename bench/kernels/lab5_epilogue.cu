// Lab 5: the Lab 4 kernel with a TMA-store epilogue and a bf16 C.
//
// C[M][N] (bf16, row-major) = A[M][K] · B[N][K]ᵀ. The mainloop is Lab 4's (128×256 tiles, one producer and two
// consumer warpgroups, setmaxnreg 24/240, a ring of stages). The epilogue no longer stores fp32 straight from
// registers: each consumer warpgroup rounds its 64×256 accumulators to bf16 and writes them, one 64×64 sub-tile
// at a time, into a 128B-swizzled shared buffer (two buffers per warpgroup, used in turn); every writing thread
// fences the generic proxy against the async proxy (fence.proxy.async), the warpgroup meets at a named barrier,
// and one thread hands the sub-tile to the TMA (cp.async.bulk.tensor store) and commits it as a bulk group.
// Before a buffer is written again, that thread waits until at most one group still reads shared memory
// (cp.async.bulk.wait_group.read 1). The stores also clip at the matrix edge, so M and N need only be multiples
// of 64 here (K of 64).
// Shared memory: 4 stages × 48 KiB + 2 warpgroups × 2 buffers × 8 KiB = 224 KiB.
#include "hopper.cuh"
#include <cuda_bf16.h>

namespace lab5 {
constexpr int BM = 128, BN = 256, BK = 64, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SUB = 64, SUB_BYTES = 64 * SUB * 2, CBUF_BYTES = CONSUMERS * 2 * SUB_BYTES;  // 32 KiB
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 4
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");
}  // namespace lab5

// Write this thread's 32 accumulators of 64-column sub-tile `sub` as bf16 into a 128B-swizzled 64×64 buffer:
// element (r, col) sits in row r (128 bytes), 16-byte chunk (col / 8) ^ (r % 8), as the TMA store reads it.
__device__ __forceinline__ void stage_subtile(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    __nv_bfloat162 v = __floats2bfloat162_rn(d[j], d[j + 1]);
    *reinterpret_cast<__nv_bfloat162*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) = v;
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
lab5_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {
  using namespace lab5;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* cbuf = smem + STAGES * STAGE_BYTES;
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int steps = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    hopper::tma_prefetch(&tmap_a);
    hopper::tma_prefetch(&tmap_b);
    hopper::tma_prefetch(&tmap_c);
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CONSUMERS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (wg == 0) {  // ---------------------------------------------------------------- producer
    hopper::setmaxnreg_dec<24>();
    if (tid == 0) {
      for (int k = 0; k < steps; ++k) {
        const int s = k % STAGES;
        HOPPER_WAIT(empty, s, ((k / STAGES) & 1) ^ 1);
        unsigned char* a = smem + s * STAGE_BYTES;
        hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
        hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
        hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------- consumers
  hopper::setmaxnreg_inc<240>();
  const int c = wg - 1;
  float d[BN / 2];
#pragma unroll
  for (int j = 0; j < BN / 2; ++j) d[j] = 0.0f;
  for (int k = 0; k < steps; ++k) {
    const int s = k % STAGES;
    HOPPER_WAIT(full, s, (k / STAGES) & 1);
    const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
    const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      hopper::wgmma_m64n256k16_bf16(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                                    hopper::make_smem_desc(b + 32 * kk, 16, 1024));
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);
  }
  hopper::wgmma_wait<0>();
  if (steps > 0 && tid == 0) hopper::mbar_arrive(&empty[(steps - 1) % STAGES]);  // the last stage, released too
  hopper::wgmma_fence_operands(d);

  // ------------------------------------------------------------------ epilogue: registers → smem → TMA
  unsigned char* mine = cbuf + c * 2 * SUB_BYTES;
#pragma unroll
  for (int sub = 0; sub < BN / SUB; ++sub) {
    unsigned char* buf = mine + (sub % 2) * SUB_BYTES;
    if (sub >= 2) {  // the store issued from this buffer two sub-tiles ago must have read it
      if (tid == 0) hopper::tma_store_wait_read<1>();
      hopper::named_bar_sync(1 + c, 128);
    }
    stage_subtile(buf, d + 32 * sub, tid);
    hopper::fence_proxy_async();        // these generic stores, before the TMA (async proxy) reads them
    hopper::named_bar_sync(1 + c, 128);  // every thread of the warpgroup has written and fenced
    if (tid == 0) {
      hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * c);
      hopper::tma_store_commit();
    }
  }
  if (tid == 0) hopper::tma_store_wait<0>();  // shared memory must outlive the stores' reads
}
