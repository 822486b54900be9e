// Lab 7: persistent blocks, a tile scheduler, and 2-block clusters that multicast B.
//
// C[M][N] (bf16, row-major) = A[M][K] · B[N][K]ᵀ, bf16 in (K-major); M, N, K multiples of 8 (TMA zero-fills the
// loads past the edge and clips the stores). LAB7_F16 = 1 multiplies f16 data instead (A, B and C __half, wgmma
// .f32.f16.f16); LAB7_OUT_F32 = 1 stores C in fp32, the accumulators unrounded (64 × 32 sub-tiles).
// The grid is one cluster of CLUSTER blocks per CLUSTER SMs (all resident at once). A cluster owns a 256×256
// "pair" of output tiles: block r of the cluster computes the 128×256 tile at rows m0 + 128r. Both need the same
// 256×64 slice of B at every K step, so each block loads half of it (128 rows) and multicasts it to both blocks'
// shared memory; A is loaded by each block for itself. The two blocks walk the same list of pairs (a grouped
// raster order for L2 reuse), so their rings stay in step.
// Barriers, per stage s: full[s] (1 arrival, the local producer's arrive.expect_tx of the WHOLE stage: its own A,
// its own half of B and the half the other block multicasts); empty[s] (CONSUMERS × CLUSTER arrivals: a stage may
// be refilled only when the consumers of BOTH blocks are done with it, since the refill lands in both).
// The ring runs on across tiles: the producer fills stages of the next tile while the consumers run the epilogue
// (registers → swizzled shared buffers → TMA stores that overlap the next mainloop).
// LAB7_BN sets the tile width: 256 (the lab's 128×256 tiles, each consumer warpgroup computing 64 rows with
// m64n256k16) or 128 (128×128 tiles, pairs of 256×128, 6 stages): then ONE consumer warpgroup computes the whole
// tile as two 64-row halves (two accumulators, two m64n128k16 per 16 of K on the same B) and the second waits at the
// end; on the H100 that was 5–7 % faster than two warpgroups with one half each (gpu.matmul runs it where twice as
// many pairs as 128×256 tiles make still fit in one wave of clusters).
#include "hopper.cuh"
#include <cuda_bf16.h>

#ifndef LAB7_F16
#define LAB7_F16 0  // 1: f16 data (A, B and C __half, wgmma .f32.f16.f16, fp32 accumulators) instead of bf16
#endif
#if LAB7_F16
#include <cuda_fp16.h>
#include "hopper_f16.cuh"
#define LAB7_WGMMA hopper::wgmma_f16
typedef __half2 lab7_out2;  // two C elements, as the epilogue stores them
#define LAB7_PACK2 __floats2half2_rn
#else
#define LAB7_WGMMA hopper::wgmma_bf16
typedef __nv_bfloat162 lab7_out2;
#define LAB7_PACK2 __floats2bfloat162_rn
#endif
#ifndef LAB7_OUT_F32
#define LAB7_OUT_F32 0  // 1: C in fp32 (the accumulators as they are) instead of the data's type
#endif

// two adjacent elements of C, from two accumulators
__device__ __forceinline__ void lab7_store2(unsigned char* p, float x, float y) {
#if LAB7_OUT_F32
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
  *reinterpret_cast<lab7_out2*>(p) = LAB7_PACK2(x, y);
#endif
}

// A 64 × W sub-tile of C from the thread's W / 2 accumulators of it, rows of W × OUT bytes: 128-byte swizzled when
// a row is 128 bytes, plain when it is shorter (a tile narrower than a sub-tile).
template <int W, int OUT>
__device__ __forceinline__ void lab7_stage(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < W / 2; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int byte = (8 * (j / 4) + 2 * (l % 4)) * OUT;
    const int at = W * OUT == 128 ? ((byte / 16) ^ (r % 8)) * 16 + byte % 16 : byte;
    lab7_store2(buf + r * (W * OUT) + at, d[j], d[j + 1]);
  }
}

#ifndef LAB7_SCALE_D
#define LAB7_SCALE_D 1  // start each tile with scale-d = 0 (D = A·B) instead of zeroing 128 registers
#endif
#ifndef LAB7_GROUP
#define LAB7_GROUP 8   // pairs along M in one raster group
#endif
#ifndef LAB7_BN
#define LAB7_BN 256    // tile width: 256 (128 × 256 tiles) or 128 (128 × 128 tiles, one consumer warpgroup)
#endif
#ifndef LAB7_PRODUCER_TAIL
#define LAB7_PRODUCER_TAIL 0  // 1: the cluster barriers without a GPU-wide memory barrier: the first arrives .relaxed,
#endif                        // the last gives way to the producer's tail (it waits for every stage's release)

namespace lab7 {
constexpr int BM = 128, BN = LAB7_BN, BK = 64, CLUSTER = 2;
static_assert(BN == 256 || BN == 128, "LAB7_BN is 256 or 128");
constexpr int HALVES = 256 / BN;             // 64-row halves of the tile per consumer warpgroup: 1 or 2
constexpr int CONSUMERS = 2 / HALVES;        // consumer warpgroups that compute (2, or 1 with 128 × 128 tiles)
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int B_HALF = B_BYTES / CLUSTER;
constexpr int OUT = LAB7_OUT_F32 ? 4 : 2;  // bytes of an element of C
// the epilogue's sub-tiles: 64 rows × SUB columns, 128-byte rows (64 bf16 or f16, 32 fp32), swizzled
constexpr int SUB = 128 / OUT, SUB_BYTES = 64 * SUB * OUT, CBUF_BYTES = 2 * 2 * SUB_BYTES;  // two per 64-row half
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 4 (BN = 256), 6 (BN = 128)
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");

// Pair p of the grouped raster order → (row of pairs, column of pairs). Groups of GROUP pair-rows are walked
// column by column, so the clusters running at the same time share rows of A and columns of B in L2.
__device__ __forceinline__ void pair_coords(int p, int pairs_m, int pairs_n, int& pm, int& pn) {
  const int per_group = LAB7_GROUP * pairs_n;
  const int group = p / per_group, first = group * LAB7_GROUP;
  const int rows = min(pairs_m - first, LAB7_GROUP);
  const int in_group = p % per_group;
  pm = first + in_group % rows;
  pn = in_group / rows;
}
}  // namespace lab7

__device__ __forceinline__ void lab7_stage_subtile(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    *reinterpret_cast<lab7_out2*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) =
        LAB7_PACK2(d[j], d[j + 1]);
  }
}

extern "C" __global__ void __launch_bounds__(384, 1) __cluster_dims__(2, 1, 1)
lab7_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {
  using namespace lab7;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* cbuf = smem + STAGES * STAGE_BYTES;
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const unsigned rank = hopper::cluster_ctarank();
  const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
  const int pairs_m = (M + 2 * BM - 1) / (2 * BM), pairs_n = (N + BN - 1) / BN;
  const int pairs = pairs_m * pairs_n;
  const int steps = (K + BK - 1) / BK;
  if (threadIdx.x == 0) {
    hopper::tma_prefetch(&tmap_a);
    hopper::tma_prefetch(&tmap_b);
    hopper::tma_prefetch(&tmap_c);
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CONSUMERS * CLUSTER);
    }
    hopper::mbar_fence_init();
  }
  // both blocks' barriers exist before anyone multicasts or arrives remotely (with LAB7_PRODUCER_TAIL the arrive is
  // .relaxed: fence.mbarrier_init has published the barriers, so no GPU-wide memory barrier is needed)
  hopper::cluster_sync_after_init<LAB7_PRODUCER_TAIL>();

  if (wg == 0) {  // ---------------------------------------------------------------- producer
    hopper::setmaxnreg_dec<LAB7_PRODUCER_TAIL ? 40 : 24>();  // 40: room for the tail's loop
    if (tid == 0) {
      int it = 0;  // uses of the ring so far, across tiles
      for (int p = cluster_id; p < pairs; p += clusters) {
        int pm, pn;
        pair_coords(p, pairs_m, pairs_n, pm, pn);
        const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;
        for (int k = 0; k < steps; ++k, ++it) {
          const int s = it % STAGES;
          HOPPER_WAIT(empty, s, ((it / STAGES) & 1) ^ 1);
          unsigned char* a = smem + s * STAGE_BYTES;
          hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
          hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
          hopper::tma_load_2d_multicast(a + A_BYTES + rank * B_HALF, &tmap_b, &full[s], k * BK,
                                        n0 + rank * (BN / CLUSTER), (1u << CLUSTER) - 1);
        }
      }
#if LAB7_PRODUCER_TAIL
      // The tail: wait until the consumers of both blocks have released every stage. Their remote arrivals are
      // then in, and every multicast into this block has landed (its consumers waited for it), so this block may
      // leave without a last cluster barrier.
      for (int j = 0; j < STAGES; ++j, ++it) HOPPER_WAIT(empty, it % STAGES, ((it / STAGES) & 1) ^ 1);
#endif
    }
  } else if (wg <= CONSUMERS) {  // --------------------------------------------------------------- consumers
    hopper::setmaxnreg_inc<LAB7_PRODUCER_TAIL ? 232 : 240>();
    const int c = wg - 1;
    int it = 0;
    float d[HALVES][BN / 2];  // d[h]: rows 64 (c + h) .. of the tile
    for (int p = cluster_id; p < pairs; p += clusters) {
      int pm, pn;
      pair_coords(p, pairs_m, pairs_n, pm, pn);
      const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;
#if !LAB7_SCALE_D
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) d[h][j] = 0.0f;
#endif
      for (int k = 0; k < steps; ++k, ++it) {
        const int s = it % STAGES;
        HOPPER_WAIT(full, s, (it / STAGES) & 1);
        const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
        const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
        hopper::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            LAB7_WGMMA<BN>(d[h], hopper::make_smem_desc(a + h * (64 * BK * 2) + 32 * kk, 16, 1024),
                           hopper::make_smem_desc(b + 32 * kk, 16, 1024), !LAB7_SCALE_D || k > 0 || kk > 0);
        hopper::wgmma_commit();
        hopper::wgmma_wait<1>();
        if (k > 0 && tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);
      }
      hopper::wgmma_wait<0>();
#pragma unroll
      for (int h = 0; h < HALVES; ++h) hopper::wgmma_fence_operands(d[h]);
      if (tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);

      // epilogue: registers → 128B-swizzled 64×64 bf16 sub-tiles → TMA store, overlapping the next mainloop
#pragma unroll
      for (int h = 0; h < HALVES; ++h) {
        unsigned char* mine = cbuf + (c + h) * 2 * SUB_BYTES;
#pragma unroll
        for (int sub = 0; sub < BN / SUB; ++sub) {
          unsigned char* buf = mine + (sub % 2) * SUB_BYTES;
          if (tid == 0) hopper::tma_store_wait_read<1>();  // the last store from this buffer has read it
          hopper::named_bar_sync(1 + c, 128);
          if constexpr (OUT == 2) lab7_stage_subtile(buf, d[h] + 32 * sub, tid);
          else lab7_stage<SUB, OUT>(buf, d[h] + SUB / 2 * sub, tid);
          hopper::fence_proxy_async();
          hopper::named_bar_sync(1 + c, 128);
          if (tid == 0) {
            hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * (c + h));
            hopper::tma_store_commit();
          }
        }
      }
    }
    if (tid == 0) hopper::tma_store_wait<0>();
  }
  // No block may leave while the other can still multicast into its shared memory or arrive on its barriers: the
  // last cluster barrier sees to it (or, with LAB7_PRODUCER_TAIL, the producer's tail).
#if !LAB7_PRODUCER_TAIL
  hopper::cluster_sync();
#endif
}
