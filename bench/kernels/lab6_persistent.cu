// Lab 6: the Lab 5 kernel made persistent, with a tile scheduler.
//
// C[M][N] (bf16, row-major) = A[M][K] · B[N][K]ᵀ. The mainloop and the epilogue are Lab 5's (128×256 tiles, one
// producer and two consumer warpgroups, a ring of stages, TMA stores from 128B-swizzled shared buffers). What
// changes is who computes which tile: the grid is as many blocks as fit at once (one per SM), and block b takes
// tiles b, b + gridDim.x, b + 2·gridDim.x, … of a grouped raster order (GROUP tile-rows walked column by column,
// so the tiles that run at the same time share rows of A and columns of B in L2).
// The ring runs on across tiles: its position `it` counts the K steps of all this block's tiles, so the producer
// fills stages of the next tile while the consumers store this one, and the epilogue's TMA stores overlap the
// next tile's mainloop. A tile's first wgmma uses scale-d = 0 (D = A·B, the previous tile's accumulators are not
// added), and the epilogue waits before every sub-tile, since the previous tile's stores may still read the
// buffers. M, N, K multiples of 8 (the loads zero-fill past the edge, the stores clip).
// Shared memory: 4 stages × 48 KiB + 2 warpgroups × 2 buffers × 8 KiB = 224 KiB.
#include "hopper.cuh"
#include <cuda_bf16.h>

#ifndef LAB6_GROUP
#define LAB6_GROUP 8  // tile-rows in one raster group
#endif

namespace lab6 {
constexpr int BM = 128, BN = 256, BK = 64, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SUB = 64, SUB_BYTES = 64 * SUB * 2, CBUF_BYTES = CONSUMERS * 2 * SUB_BYTES;  // 32 KiB
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 4
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");

// The tile scheduler: tile t of the grouped raster order → (tile-row, tile-column). Groups of GROUP tile-rows
// are walked column by column, down a column first; the last group may hold fewer rows.
__device__ __forceinline__ void tile_coords(int t, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int per_group = LAB6_GROUP * tiles_n;
  const int first = (t / per_group) * LAB6_GROUP;
  const int rows = min(tiles_m - first, LAB6_GROUP);
  const int in_group = t % per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}
}  // namespace lab6

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
lab6_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {
  using namespace lab6;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* cbuf = smem + STAGES * STAGE_BYTES;
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
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
      int it = 0;  // uses of the ring so far, across tiles
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tm, tn;
        tile_coords(t, tiles_m, tiles_n, tm, tn);
        const int m0 = tm * BM, n0 = tn * BN;
        for (int k = 0; k < steps; ++k, ++it) {
          const int s = it % STAGES;
          HOPPER_WAIT(empty, s, ((it / STAGES) & 1) ^ 1);
          unsigned char* a = smem + s * STAGE_BYTES;
          hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
          hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
          hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);
        }
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------- consumers
  hopper::setmaxnreg_inc<240>();
  const int c = wg - 1;
  unsigned char* mine = cbuf + c * 2 * SUB_BYTES;
  float d[BN / 2];
  int it = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    tile_coords(t, tiles_m, tiles_n, tm, tn);
    const int m0 = tm * BM, n0 = tn * BN;
    for (int k = 0; k < steps; ++k, ++it) {
      const int s = it % STAGES;
      HOPPER_WAIT(full, s, (it / STAGES) & 1);
      const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
      const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
      hopper::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk)  // scale-d = 0 on the tile's first wgmma: D = A·B
        hopper::wgmma_m64n256k16_bf16(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                                      hopper::make_smem_desc(b + 32 * kk, 16, 1024), k > 0 || kk > 0);
      hopper::wgmma_commit();
      hopper::wgmma_wait<1>();
      if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(it - 1) % STAGES]);
    }
    hopper::wgmma_wait<0>();
    hopper::wgmma_fence_operands(d);
    if (tid == 0) hopper::mbar_arrive(&empty[(it - 1) % STAGES]);  // the tile's last stage

    // ---------------------------------------------------------------- epilogue: registers → smem → TMA
#pragma unroll
    for (int sub = 0; sub < BN / SUB; ++sub) {
      unsigned char* buf = mine + (sub % 2) * SUB_BYTES;
      // the last store from this buffer (two sub-tiles ago, or the previous tile's) must have read it
      if (tid == 0) hopper::tma_store_wait_read<1>();
      hopper::named_bar_sync(1 + c, 128);
      stage_subtile(buf, d + 32 * sub, tid);
      hopper::fence_proxy_async();        // these generic stores, before the TMA (async proxy) reads them
      hopper::named_bar_sync(1 + c, 128);  // every thread of the warpgroup has written and fenced
      if (tid == 0) {
        hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * c);
        hopper::tma_store_commit();
      }
    }
  }
  if (tid == 0) hopper::tma_store_wait<0>();  // shared memory must outlive the stores' reads
}
