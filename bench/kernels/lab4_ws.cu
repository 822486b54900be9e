// Lab 4, step 4: 128×256 tiles, one producer warpgroup and two consumer warpgroups with setmaxnreg.
//
// C[M][N] (fp32, row-major) = A[M][K] · B[N][K]ᵀ, bf16 in (K-major), M % 128 == 0, N % 256 == 0, K % 64 == 0.
// 384 threads: warpgroup 0 produces (one thread issues the TMA loads) and gives registers back
// (setmaxnreg.dec 24); warpgroups 1 and 2 consume (setmaxnreg.inc 240), each owning 64 rows × 256 columns
// (wgmma m64n256k16, 128 fp32 accumulators per thread). 24 + 240 + 240 = 504 = 3 × 168, the registers per
// thread the block starts with under __launch_bounds__(384, 1): the budget adds up.
// A stage is a 128×64 A tile and a 256×64 B tile: 48 KiB. STAGES of them fill the 227 KiB a block may use.
#include "hopper.cuh"

namespace lab4ws {
constexpr int BM = 128, BN = 256, BK = 64, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SMEM_LIMIT = 227 * 1024, ALIGN_SLACK = 1024;
constexpr int STAGES = (SMEM_LIMIT - ALIGN_SLACK) / STAGE_BYTES;  // 4
static_assert(STAGES >= 3, "a pipeline needs at least three stages here");
}  // namespace lab4ws

extern "C" __global__ void __launch_bounds__(384, 1)
lab4_gemm_ws(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
             float* __restrict__ C, int M, int N, int K) {
  using namespace lab4ws;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];

  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int steps = K / BK;
  if (threadIdx.x == 0) {
    hopper::tma_prefetch(&tmap_a);
    hopper::tma_prefetch(&tmap_b);
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
  hopper::wgmma_fence_operands(d);

  const int w = tid / 32, l = tid % 32;
  const int row = m0 + 64 * c + 16 * w + l / 4;
#pragma unroll
  for (int j = 0; j < BN / 2; j += 4) {
    const int col = n0 + 8 * (j / 4) + 2 * (l % 4);
    *reinterpret_cast<float2*>(&C[(long long)row * N + col]) = make_float2(d[j], d[j + 1]);
    *reinterpret_cast<float2*>(&C[(long long)(row + 8) * N + col]) = make_float2(d[j + 2], d[j + 3]);
  }
}
