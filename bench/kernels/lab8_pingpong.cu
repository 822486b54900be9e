// Lab 8: ping-pong. Two consumer warpgroups, each with a tile of its own, take turns at the tensor cores.
//
// C[M][N] (bf16, row-major) = A[M][K] · B[N][K]ᵀ, bf16 in (K-major); M, N, K multiples of 8 (TMA zero-fills the
// loads past the edge and clips the stores). The same parameters, grid and clusters as Lab 7: one cluster of
// CLUSTER blocks per CLUSTER SMs, persistent, walking "pairs" of output tiles in a grouped raster order; block r
// of a cluster computes the 128×BN tile at rows m0 + 128r, both blocks share the BN×64 slice of B at every K step
// (each loads half of it and multicasts it to both).
//
// What is new. In Lab 7 both consumer warpgroups split ONE 128×256 tile (64 rows each) and finish it together, so
// the tensor cores idle while both run the epilogue. Here each consumer warpgroup owns a whole 128×BN tile: the
// block's tiles go alternately to consumer 0 and consumer 1. A consumer holds its whole tile's accumulators:
// 128×BN fp32 over 128 threads is BN registers a thread, so BN = 128 (128 accumulators, as Lab 7's 64×256 half)
// is the widest that fits beside the addresses under setmaxnreg 240; 128×256 would need 256 (more than a thread
// has). An ordered sequence barrier (Lesson 07) makes the two take turns: consumer 0's mainloop, then consumer
// 1's mainloop while consumer 0 runs its epilogue, then consumer 0's next mainloop while consumer 1 runs its
// epilogue, ... Mainloops never overlap each other (each has the tensor cores to itself), nor do epilogues.
//
// The ring of stages is the producer's, as in Lab 7, but each stage is read by ONE consumer (the one whose tile it
// belongs to): tile j of the block uses ring positions j·steps … j·steps + steps - 1, and since the mainloops run
// in tile order, the consumers wait on the stages in the order the producer fills them.
#include "hopper.cuh"
#include <cuda_bf16.h>

#ifndef LAB8_BN
#define LAB8_BN 128  // columns of a consumer's tile: 64 or 128 (its accumulators: LAB8_BN a thread)
#endif
#ifndef LAB8_GROUP
#define LAB8_GROUP 8  // pairs along M in one raster group
#endif
#ifndef LAB8_CLUSTER
#define LAB8_CLUSTER 2  // 2: two-block clusters multicasting B; 1: every block loads its own B
#endif
#ifndef LAB8_SCALE_D
#define LAB8_SCALE_D 1  // start each tile with scale-d = 0 (D = A·B) instead of zeroing the accumulators
#endif

namespace lab8 {
constexpr int BM = 128, BN = LAB8_BN, BK = 64, CONSUMERS = 2, CLUSTER = LAB8_CLUSTER;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int B_HALF = B_BYTES / CLUSTER;
constexpr int SUB = 64, SUB_BYTES = 64 * SUB * 2, CBUF_BYTES = CONSUMERS * 2 * SUB_BYTES;
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
#ifdef LAB8_STAGES
constexpr int STAGES = LAB8_STAGES;
#else
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 6 with BN = 128
#endif
constexpr int ORDER_DEPTH = 2;  // sections of the sequence barrier: 0 the mainloop, 1 the epilogue
static_assert(BN == 64 || BN == 128, "a consumer's tile is 128×64 or 128×128");
static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of one or two blocks");
static_assert(STAGES >= 2 && STAGES * STAGE_BYTES + CBUF_BYTES + ALIGN_SLACK <= SMEM_LIMIT, "the stages must fit");

// Pair p of the grouped raster order → (row of pairs, column of pairs), as in Lab 7.
__device__ __forceinline__ void pair_coords(int p, int pairs_m, int pairs_n, int& pm, int& pn) {
  const int per_group = LAB8_GROUP * pairs_n;
  const int group = p / per_group, first = group * LAB8_GROUP;
  const int rows = min(pairs_m - first, LAB8_GROUP);
  const int in_group = p % per_group;
  pm = first + in_group % rows;
  pn = in_group / rows;
}

// A consumer warpgroup's place in the ordered sequence barrier: the slots are order[section * CONSUMERS + group];
// a group waits on its own slot of a section and, leaving the section, arrives on the next group's slot of it.
struct OrderCursor {
  unsigned long long* order;
  int group, index;
  unsigned phase;

  __device__ __forceinline__ void wait() const { HOPPER_WAIT(order, index * CONSUMERS + group, phase); }

  __device__ __forceinline__ void arrive() {
    hopper::mbar_arrive(&order[index * CONSUMERS + (group + 1) % CONSUMERS]);
    if (++index == ORDER_DEPTH) {
      index = 0;
      phase ^= 1;
    }
  }
};
}  // namespace lab8

__device__ __forceinline__ void lab8_stage_subtile(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    *reinterpret_cast<__nv_bfloat162*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) =
        __floats2bfloat162_rn(d[j], d[j + 1]);
  }
}

extern "C" __global__ void __launch_bounds__(384, 1)
#if LAB8_CLUSTER == 2
__cluster_dims__(2, 1, 1)
#endif
lab8_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {
  using namespace lab8;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  unsigned char* cbuf = smem + STAGES * STAGE_BYTES;
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  __shared__ alignas(8) unsigned long long order[ORDER_DEPTH * CONSUMERS];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const unsigned rank = CLUSTER == 2 ? hopper::cluster_ctarank() : 0;
  const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
  const int pairs_m = (M + CLUSTER * BM - 1) / (CLUSTER * BM), pairs_n = (N + BN - 1) / BN;
  const int pairs = pairs_m * pairs_n;
  const int steps = (K + BK - 1) / BK;
  // this cluster's pairs: cluster_id, cluster_id + clusters, ...; its j-th goes to consumer j % CONSUMERS
  const int mine = pairs > cluster_id ? (pairs - cluster_id + clusters - 1) / clusters : 0;
  if (threadIdx.x == 0) {
    hopper::tma_prefetch(&tmap_a);
    hopper::tma_prefetch(&tmap_b);
    hopper::tma_prefetch(&tmap_c);
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CLUSTER);  // the one consumer that reads the stage, in every block
    }
    for (int i = 0; i < ORDER_DEPTH * CONSUMERS; ++i) hopper::mbar_init(&order[i], 128);
    hopper::mbar_fence_init();
  }
  if (CLUSTER == 2) {
    hopper::cluster_sync();  // both blocks' barriers exist before anyone multicasts or arrives remotely
  } else {
    __syncthreads();
  }

  if (wg == 0) {  // ---------------------------------------------------------------- producer
    hopper::setmaxnreg_dec<24>();
    if (tid == 0) {
      int it = 0;  // uses of the ring so far, across tiles (tile j starts at j·steps)
      for (int j = 0; j < mine; ++j) {
        int pm, pn;
        pair_coords(cluster_id + j * clusters, pairs_m, pairs_n, pm, pn);
        const int m0 = pm * CLUSTER * BM + rank * BM, n0 = pn * BN;
        for (int k = 0; k < steps; ++k, ++it) {
          const int s = it % STAGES;
          HOPPER_WAIT(empty, s, ((it / STAGES) & 1) ^ 1);
          unsigned char* a = smem + s * STAGE_BYTES;
          hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
          hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
#if LAB8_CLUSTER == 2
          hopper::tma_load_2d_multicast(a + A_BYTES + rank * B_HALF, &tmap_b, &full[s], k * BK,
                                        n0 + rank * (BN / CLUSTER), (1u << CLUSTER) - 1);
#else
          hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);
#endif
        }
      }
    }
  } else {  // ---------------------------------------------------------------------- consumers
    hopper::setmaxnreg_inc<240>();
    const int c = wg - 1;
    unsigned char* bufs = cbuf + c * 2 * SUB_BYTES;
    OrderCursor seq{order, c, 0, c == 0 ? 1u : 0u};
    float d[2][BN / 2];  // the whole 128×BN tile: rows 0-63 and 64-127 of it, one m64 wgmma each
    for (int j = c; j < mine; j += CONSUMERS) {
      int it = j * steps;
      int pm, pn;
      pair_coords(cluster_id + j * clusters, pairs_m, pairs_n, pm, pn);
      const int m0 = pm * CLUSTER * BM + rank * BM, n0 = pn * BN;
#if !LAB8_SCALE_D
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int x = 0; x < BN / 2; ++x) d[h][x] = 0.0f;
#endif
      seq.wait();
      for (int k = 0; k < steps; ++k, ++it) {
        const int s = it % STAGES;
        HOPPER_WAIT(full, s, (it / STAGES) & 1);
        const unsigned char* a = smem + s * STAGE_BYTES;
        const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
        hopper::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          const unsigned long long db = hopper::make_smem_desc(b + 32 * kk, 16, 1024);
          const bool acc = !LAB8_SCALE_D || k > 0 || kk > 0;
          hopper::wgmma_bf16<BN>(d[0], hopper::make_smem_desc(a + 32 * kk, 16, 1024), db, acc);
          hopper::wgmma_bf16<BN>(d[1], hopper::make_smem_desc(a + 64 * 128 + 32 * kk, 16, 1024), db, acc);
        }
        hopper::wgmma_commit();
        hopper::wgmma_wait<1>();
        if (k > 0 && tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);
      }
      seq.arrive();
      hopper::wgmma_wait<0>();
      hopper::wgmma_fence_operands(d[0]);
      hopper::wgmma_fence_operands(d[1]);
      if (tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);

      seq.wait();
      // epilogue: registers → 128B-swizzled 64×64 bf16 sub-tiles → TMA stores
#pragma unroll
      for (int sub = 0; sub < 2 * (BN / SUB); ++sub) {
        const int h = sub / (BN / SUB), q = sub % (BN / SUB);
        unsigned char* buf = bufs + (sub % 2) * SUB_BYTES;
        if (tid == 0) hopper::tma_store_wait_read<1>();  // the last store from this buffer has read it
        hopper::named_bar_sync(1 + c, 128);
        lab8_stage_subtile(buf, d[h] + 32 * q, tid);
        hopper::fence_proxy_async();
        hopper::named_bar_sync(1 + c, 128);
        if (tid == 0) {
          hopper::tma_store_2d(&tmap_c, buf, n0 + q * SUB, m0 + 64 * h);
          hopper::tma_store_commit();
        }
      }
      seq.arrive();
    }
    if (tid == 0) hopper::tma_store_wait<0>();
  }
  // No block may leave while the other can still multicast into its shared memory or arrive on its barriers.
  if (CLUSTER == 2) hopper::cluster_sync();
}
