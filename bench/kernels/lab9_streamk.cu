// Lab 9: Stream-K on the Lab 7 kernel.
//
// C[M][N] (bf16) = A[M][K] · B[N][K]ᵀ. Same blocks, clusters, multicast, ring and epilogue as Lab 7. With
// LAB9_HYBRID (the default) every cluster first takes the same number of whole pairs, round-robin as in Lab 7,
// leaving between one and two waves' worth of pairs (all of them when there are fewer than two waves); those
// are no longer handed out in whole tiles: the iteration space (pairs of tiles × K steps, pair-major) is cut
// into one contiguous, equal range per cluster, so every SM gets the same number of K steps whatever the number
// of tiles. A range may start or end inside a pair: that pair is then computed by several clusters (splits), each
// over its own K steps, and put back together in K order through a workspace in global memory:
//   first split (its K steps start at 0)     stores its partial accumulators and releases the pair's flag (1);
//   middle split                            waits until the flag says every earlier split is in, adds the
//                                           workspace to its own partial, stores the sum, releases (flag + 1);
//   final split (its K steps end at K)       waits likewise, adds the workspace, resets the flag for the next
//                                           launch, and runs the epilogue.
// The additions always happen in the same order, so the result is the same bits on every run (the order, not
// the instruction: a red.global.add after waiting for one's turn would give the same bits). A cluster walks its
// range from the END backwards: its first piece of work is the start of the last pair it touches and its last is
// the end of the first pair it touches (a final split), by which time the splits it waits for have usually long
// been stored. A range inside one pair is a single middle split that waits at once (at 1024x1024x16384, 49 of 66
// clusters). No wait can close a cycle because every wait is on a cluster with a lower index and all clusters are
// resident (grid = co-resident clusters).
// The workspace holds one slot per cluster (a split pair is keyed by the lowest cluster touching it) and per
// block of the cluster: BM × BN fp32, block-striped: register j of thread t of consumer warpgroup c is
// element c·64·BN + j·128 + t (c·16384 + j·128 + t with 128 × 256 tiles; each access coalesced, each element
// owned by exactly one thread).
// LAB9_BN sets the tile width: 256 (the default, 128 × 256 tiles, m64n256k16) or 128 (128 × 128 tiles,
// m64n128k16, 64 accumulators a thread, 6 stages instead of 4), which makes twice as many pairs for the shapes
// whose 128 × 256 pairs leave most clusters idle (helpers.gpu.gemm.choose picks it per shape), or 64, 32 or 16
// (m64n64k16 .. m64n16k16: the narrow tiles of a C with few columns, e.g. Cᵀ = B·Aᵀ of a GEMM with a small M,
// A and B swapped); below 64 columns the epilogue stages 64 × BN sub-tiles unswizzled (the C map's box is BN wide,
// without swizzle) instead of 64 × 64 ones with 128-byte swizzle, and with one sub-tile a tile its two store
// buffers take turns from tile to tile.
// LAB9_F16 = 1 multiplies f16 data (A, B and C __half, wgmma .f32.f16.f16); LAB9_OUT_F32 = 1 stores C in fp32,
// the accumulators unrounded (64 × 32 sub-tiles); gpu.matmul builds them for fp16 inputs and fp32 C.
#include "hopper.cuh"
#include <cuda_bf16.h>

#ifndef LAB9_F16
#define LAB9_F16 0  // 1: f16 data (A, B and C __half, wgmma .f32.f16.f16, fp32 accumulators) instead of bf16
#endif
#if LAB9_F16
#include <cuda_fp16.h>
#include "hopper_f16.cuh"
#define LAB9_WGMMA hopper::wgmma_f16
typedef __half2 lab9_out2;  // two C elements, as the epilogue stores them
#define LAB9_PACK2 __floats2half2_rn
#else
#define LAB9_WGMMA hopper::wgmma_bf16
typedef __nv_bfloat162 lab9_out2;
#define LAB9_PACK2 __floats2bfloat162_rn
#endif
#ifndef LAB9_OUT_F32
#define LAB9_OUT_F32 0  // 1: C in fp32 (the accumulators as they are) instead of the data's type
#endif

// two adjacent elements of C, from two accumulators
__device__ __forceinline__ void lab9_store2(unsigned char* p, float x, float y) {
#if LAB9_OUT_F32
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
#else
  *reinterpret_cast<lab9_out2*>(p) = LAB9_PACK2(x, y);
#endif
}

// A 64 × W sub-tile of C from the thread's W / 2 accumulators of it, rows of W × OUT bytes: 128-byte swizzled when
// a row is 128 bytes, plain when it is shorter (a tile narrower than a sub-tile).
template <int W, int OUT>
__device__ __forceinline__ void lab9_stage(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < W / 2; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int byte = (8 * (j / 4) + 2 * (l % 4)) * OUT;
    const int at = W * OUT == 128 ? ((byte / 16) ^ (r % 8)) * 16 + byte % 16 : byte;
    lab9_store2(buf + r * (W * OUT) + at, d[j], d[j + 1]);
  }
}

#ifndef LAB9_SCALE_D
#define LAB9_SCALE_D 1  // start each tile with scale-d = 0 (D = A·B) instead of zeroing BN / 2 registers
#endif
#ifndef LAB9_GROUP
#define LAB9_GROUP 8   // pairs along M in one raster group
#endif
#ifndef LAB9_BN
#define LAB9_BN 256    // tile width: 256 (128 × 256 tiles), 128, 64, 32 or 16
#endif
#ifndef LAB9_PRODUCER_TAIL
#define LAB9_PRODUCER_TAIL 0  // 1: the cluster barriers without a GPU-wide memory barrier: the first arrives .relaxed,
#endif                        // the last gives way to the producer's tail (it waits for every stage's release)

namespace lab9 {
constexpr int BM = 128, BN = LAB9_BN, BK = 64, CONSUMERS = 2, CLUSTER = 2;
static_assert(BN == 256 || BN == 128 || BN == 64 || BN == 32 || BN == 16, "LAB9_BN is 256, 128, 64, 32 or 16");
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int B_HALF = B_BYTES / CLUSTER;  // a multiple of 1024 (the 128-byte swizzle's 8-row atom) from BN = 16
constexpr int OUT = LAB9_OUT_F32 ? 4 : 2;  // bytes of an element of C
// the epilogue's sub-tiles: 64 rows × SUB columns, 128-byte rows (64 bf16 or f16, 32 fp32) swizzled, or, for
// narrower tiles, the whole width BN unswizzled
constexpr int SUB = BN * OUT < 128 ? BN : 128 / OUT, SUB_BYTES = 64 * SUB * OUT;
constexpr int CBUF_BYTES = CONSUMERS * 2 * SUB_BYTES;
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK - CBUF_BYTES) / STAGE_BYTES;  // 4 (BN = 256), 6 (BN = 128)
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");

// Pair p of the grouped raster order → (row of pairs, column of pairs). Groups of GROUP pair-rows are walked
// column by column, so the clusters running at the same time share rows of A and columns of B in L2.
__device__ __forceinline__ void pair_coords(int p, int pairs_m, int pairs_n, int& pm, int& pn) {
  const int per_group = LAB9_GROUP * pairs_n;
  const int group = p / per_group, first = group * LAB9_GROUP;
  const int rows = min(pairs_m - first, LAB9_GROUP);
  const int in_group = p % per_group;
  pm = first + in_group % rows;
  pn = in_group / rows;
}
}  // namespace lab9

__device__ __forceinline__ void lab9_stage_subtile(unsigned char* buf, const float* d, int tid) {
  const int w = tid / 32, l = tid % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    *reinterpret_cast<lab9_out2*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) =
        LAB9_PACK2(d[j], d[j + 1]);
  }
}

#ifndef LAB9_PARALLEL_FIXUP
#define LAB9_PARALLEL_FIXUP 0  // 1: every split but the final one leaves its own partial in its cluster's slot at
#endif                         // once; the final split adds them all, in K order (the same bits, no chain of waits)

#ifndef LAB9_HYBRID
#define LAB9_HYBRID 1  // 1: whole pairs for all but the last one or two waves, Stream-K for those; 0: all Stream-K
#endif

// This cluster's work: first its whole pairs of the data-parallel part (round-robin, as in Lab 7), then its range
// of the Stream-K part walked from the end backwards. Work item w → pair p and its K steps [ka, kb).
struct Work {
  int dp_pairs, dp_mine, steps, p_first, p_last;  // Stream-K pairs p_first..p_last (global pair indices)
  long long per, g0, g1;                            // this cluster's range [g0, g1) of the Stream-K iterations
  __device__ __forceinline__ int items() const { return dp_mine + (p_last - p_first + 1); }
  __device__ __forceinline__ void item(int w, int cluster_id, int clusters, int& p, int& ka, int& kb) const {
    if (w < dp_mine) {
      p = cluster_id + w * clusters;
      ka = 0;
      kb = steps;
      return;
    }
    p = p_last - (w - dp_mine);
    const long long t0 = (long long)(p - dp_pairs) * steps;
    ka = (int)(max(g0, t0) - t0);
    kb = (int)(min(g1, t0 + steps) - t0);
  }
};

__device__ __forceinline__ Work plan(int pairs, int steps, int cluster_id, int clusters) {
  Work W;
  W.steps = steps;
  W.dp_pairs = (LAB9_HYBRID && pairs >= 2 * clusters) ? (pairs / clusters - 1) * clusters : 0;
  W.dp_mine = W.dp_pairs / clusters;  // a multiple of clusters: every cluster gets the same number
  const long long total = (long long)(pairs - W.dp_pairs) * steps;
  W.per = (total + clusters - 1) / clusters;
  W.g0 = min(total, cluster_id * W.per);
  W.g1 = min(total, W.g0 + W.per);
  W.p_first = W.dp_pairs + (int)(W.g0 / steps);
  W.p_last = W.g1 > W.g0 ? W.dp_pairs + (int)((W.g1 - 1) / steps) : W.p_first - 1;
  return W;
}

extern "C" __global__ void __launch_bounds__(384, 1) __cluster_dims__(2, 1, 1)
lab9_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
          const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K, float* __restrict__ workspace,
          unsigned* __restrict__ flags) {
  using namespace lab9;
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
  const Work W = plan(pairs, steps, cluster_id, clusters);
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
  // both blocks' barriers exist before anyone multicasts or arrives remotely (with LAB9_PRODUCER_TAIL the arrive is
  // .relaxed: fence.mbarrier_init has published the barriers, so no GPU-wide memory barrier is needed)
  hopper::cluster_sync_after_init<LAB9_PRODUCER_TAIL>();

  if (wg == 0) {  // ---------------------------------------------------------------- producer
    hopper::setmaxnreg_dec<LAB9_PRODUCER_TAIL ? 40 : 24>();  // 40: room for the tail's loop
    if (tid == 0) {
      int it = 0;  // uses of the ring so far, across pieces
      for (int w = 0; w < W.items(); ++w) {
        int p, pm, pn, ka, kb;
        W.item(w, cluster_id, clusters, p, ka, kb);
        pair_coords(p, pairs_m, pairs_n, pm, pn);
        const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;
        for (int k = ka; k < kb; ++k, ++it) {
          const int s = it % STAGES;
          HOPPER_WAIT(empty, s, ((it / STAGES) & 1) ^ 1);
          unsigned char* a = smem + s * STAGE_BYTES;
          hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
          hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
          hopper::tma_load_2d_multicast(a + A_BYTES + rank * B_HALF, &tmap_b, &full[s], k * BK,
                                        n0 + rank * (BN / CLUSTER), (1u << CLUSTER) - 1);
        }
      }
#if LAB9_PRODUCER_TAIL
      // The tail: wait until the consumers of both blocks have released every stage. Their remote arrivals are
      // then in, and every multicast into this block has landed (its consumers waited for it), so this block may
      // leave without a last cluster barrier.
      for (int j = 0; j < STAGES; ++j, ++it) HOPPER_WAIT(empty, it % STAGES, ((it / STAGES) & 1) ^ 1);
#endif
    }
  } else {  // ---------------------------------------------------------------------- consumers
    hopper::setmaxnreg_inc<LAB9_PRODUCER_TAIL ? 232 : 240>();
    const int c = wg - 1;
    unsigned char* mine = cbuf + c * 2 * SUB_BYTES;
    int it = 0;
    int tiles_stored = 0;  // with one sub-tile a tile (BN <= SUB), the two buffers take turns from tile to tile
    float d[BN / 2];
    for (int w = 0; w < W.items(); ++w) {
      int p, pm, pn, ka, kb;
      W.item(w, cluster_id, clusters, p, ka, kb);
      pair_coords(p, pairs_m, pairs_n, pm, pn);
      const int m0 = pm * 2 * BM + rank * BM, n0 = pn * BN;
#if !LAB9_SCALE_D
#pragma unroll
      for (int j = 0; j < BN / 2; ++j) d[j] = 0.0f;
#endif
      for (int k = ka; k < kb; ++k, ++it) {
        const int s = it % STAGES;
        HOPPER_WAIT(full, s, (it / STAGES) & 1);
        const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
        const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
        hopper::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          LAB9_WGMMA<BN>(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                         hopper::make_smem_desc(b + 32 * kk, 16, 1024), !LAB9_SCALE_D || k > ka || kk > 0);
        hopper::wgmma_commit();
        hopper::wgmma_wait<1>();
        if (k > ka && tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);
      }
      hopper::wgmma_wait<0>();
      hopper::wgmma_fence_operands(d);
      if (tid < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], tid);

      // ---- Stream-K fix-up, when this piece is not the whole pair
      if (ka != 0 || kb != steps) {
        const long long first_g = (long long)(p - W.dp_pairs) * steps;
        const int owner = (int)(first_g / W.per);          // lowest cluster touching pair p: the slot
        const unsigned order = (unsigned)(cluster_id - owner);  // 0 for the first split, then 1, 2, ...
#if LAB9_PARALLEL_FIXUP
        // A cluster has at most one split that is not a pair's final one (the start of the last pair its range
        // touches, or a range inside one pair), so its own slot holds that partial. The final split waits until
        // the `order` earlier splits are in, then adds, element by element, ((p0 + p1) + ...) and then its own:
        // the additions the chain below makes, in the same order.
        {
          const long long block_slot = BM * BN, mine_off = c * (64 * BN) + tid;
          unsigned* flag = flags + owner * CLUSTER + rank;
          if (kb != steps) {
            float* ws = workspace + ((long long)cluster_id * CLUSTER + rank) * block_slot + mine_off;
#pragma unroll
            for (int j = 0; j < BN / 2; ++j) __stcg(ws + j * 128, d[j]);
            hopper::named_bar_sync(3, 256);  // every consumer thread has stored
            if (threadIdx.x == 128) hopper::flag_add_release(flag, 1);
            continue;  // no epilogue: the final split owns it
          }
          if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);
          hopper::named_bar_sync(3, 256);
          const float* first = workspace + ((long long)owner * CLUSTER + rank) * block_slot + mine_off;
          const long long next = CLUSTER * block_slot;  // the next cluster's slot, same block and element
          // registers in flight per load batch: all 64 of a 128 × 128 tile's (3 % faster at 512×1024×4096 than 16)
          // and all of a narrower one's, 8 of a 128 × 256 tile's (16 and 32 were no faster, and 32 spills)
          constexpr int CHUNK = BN == 256 ? 8 : BN / 2;
#pragma unroll
          for (int j0 = 0; j0 < BN / 2; j0 += CHUNK) {
            float t[CHUNK];
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) t[i] = __ldcg(first + (j0 + i) * 128);
            for (unsigned q = 1; q < order; ++q) {
#pragma unroll
              for (int i = 0; i < CHUNK; ++i) t[i] = __ldcg(first + q * next + (j0 + i) * 128) + t[i];
            }
#pragma unroll
            for (int i = 0; i < CHUNK; ++i) d[j0 + i] = d[j0 + i] + t[i];
          }
          if (threadIdx.x == 128) *flag = 0;  // the final split resets the flag for the next launch
        }
#else
        float* ws = workspace + ((long long)owner * CLUSTER + rank) * (BM * BN) + c * (64 * BN) + tid;
        unsigned* flag = flags + owner * CLUSTER + rank;
        if (order > 0) {  // wait for every earlier split, then add what they left
          if (threadIdx.x == 128) hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank);
          hopper::named_bar_sync(3, 256);
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) d[j] += __ldcg(ws + j * 128);
        }
        if (kb != steps) {  // not the final split: leave the sum for the next one
#pragma unroll
          for (int j = 0; j < BN / 2; ++j) __stcg(ws + j * 128, d[j]);
          hopper::named_bar_sync(3, 256);  // every consumer thread has stored
          if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);
          continue;  // no epilogue: the final split owns it
        }
        if (threadIdx.x == 128) *flag = 0;  // the final split resets the flag for the next launch
#endif
      }

      // epilogue: registers → 64×64 bf16 sub-tiles, 128B-swizzled (narrow tiles: 64 × BN, plain) → TMA store,
      // overlapping the next mainloop
#pragma unroll
      for (int sub = 0; sub < BN / SUB; ++sub) {
        unsigned char* buf = mine + ((BN / SUB == 1 ? tiles_stored : sub) % 2) * SUB_BYTES;
        if (tid == 0) hopper::tma_store_wait_read<1>();  // the last store from this buffer has read it
        hopper::named_bar_sync(1 + c, 128);
        if constexpr (OUT == 2 && SUB == 64) lab9_stage_subtile(buf, d + 32 * sub, tid);
        else lab9_stage<SUB, OUT>(buf, d + SUB / 2 * sub, tid);
        hopper::fence_proxy_async();
        hopper::named_bar_sync(1 + c, 128);
        if (tid == 0) {
          hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * c);
          hopper::tma_store_commit();
        }
      }
      ++tiles_stored;
    }
    if (tid == 0) hopper::tma_store_wait<0>();
  }
  // No block may leave while the other can still multicast into its shared memory or arrive on its barriers: the
  // last cluster barrier sees to it (or, with LAB9_PRODUCER_TAIL, the producer's tail).
#if !LAB9_PRODUCER_TAIL
  hopper::cluster_sync();
#endif
}
