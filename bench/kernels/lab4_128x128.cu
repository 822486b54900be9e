// Lab 4, step 3: a 128×128 tile of C per block, fed through a ring of STAGES shared-memory stages.
//
// C[M][N] (fp32, row-major) = A[M][K] · B[N][K]ᵀ, A and B bf16 row-major (K-major), M % 128 == N % 128 == 0,
// K % 64 == 0. 384 threads = 3 warpgroups: warpgroup 0 is the producer (one thread issues every TMA load),
// warpgroups 1 and 2 are consumers, each owning 64 rows × 128 columns of the tile (wgmma m64n128k16, 64 fp32
// accumulators per thread).
//
// The ring: stage s holds a 128×64 tile of A and a 128×64 tile of B (32 KiB). full[s] (1 arrival: the producer's
// arrive.expect_tx; the TMA adds the bytes) says "stage s holds use k"; empty[s] (one arrival per consumer
// warpgroup) says "stage s may be refilled". Use k of the ring is stage k % STAGES, phase (k / STAGES) & 1.
// Consumers keep one wgmma group in flight (wait_group 1) and release a stage only once the group that read it
// has retired: the release of use k happens after the wait that follows the issue of use k + 1.
#include "hopper.cuh"

namespace lab4 {
constexpr int BM = 128, BN = 128, BK = 64, STAGES = 4, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
}  // namespace lab4

extern "C" __global__ void __launch_bounds__(384, 1)
lab4_gemm_128x128(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                  float* __restrict__ C, int M, int N, int K) {
  using namespace lab4;
  extern __shared__ unsigned char smem_raw[];
  // alignas on extern __shared__ is not a promise: align the ring to 1024 bytes by hand (128B swizzle atoms).
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int steps = K / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CONSUMERS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---------------------------------------------------------------- producer
    if (tid == 0) {
      for (int k = 0; k < steps; ++k) {
        const int s = k % STAGES;
        const unsigned phase = (k / STAGES) & 1;
        HOPPER_WAIT(empty, s, phase ^ 1);  // a fresh barrier counts its "previous" phase as complete
        unsigned char* a = smem + s * STAGE_BYTES;
        hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);
        hopper::tma_load_2d(a, &tmap_a, &full[s], k * BK, m0);
        hopper::tma_load_2d(a + A_BYTES, &tmap_b, &full[s], k * BK, n0);
      }
    }
    return;
  }

  // ------------------------------------------------------------------------------- consumers
  const int c = wg - 1;  // rows 64c .. 64c+63 of the tile
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
      hopper::wgmma_m64n128k16_bf16(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                                    hopper::make_smem_desc(b + 32 * kk, 16, 1024));
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();  // the group of use k-1 has retired: its stage can go back to the producer
    if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);
  }
  hopper::wgmma_wait<0>();
  hopper::wgmma_fence_operands(d);

  // Fragment layout of m64nNk16: register j of thread t (warp w, lane l) holds row 16w + l/4 + 8((j/2)%2),
  // column 8(j/4) + 2(l%4) + j%2 of this warpgroup's 64 × BN slice.
  const int w = tid / 32, l = tid % 32;
  const int row = m0 + 64 * c + 16 * w + l / 4;
#pragma unroll
  for (int j = 0; j < BN / 2; j += 4) {
    const int col = n0 + 8 * (j / 4) + 2 * (l % 4);
    *reinterpret_cast<float2*>(&C[(long long)row * N + col]) = make_float2(d[j], d[j + 1]);
    *reinterpret_cast<float2*>(&C[(long long)(row + 8) * N + col]) = make_float2(d[j + 2], d[j + 3]);
  }
}
