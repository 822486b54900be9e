// Reference GEMM for the course's benchmarks, written with hopper.cuh.
//
// C[M][N] (fp32, row-major) = A[M][K] · B[N][K]ᵀ, A and B bf16 row-major (both K-major).
// One warpgroup (128 threads) per 64×64 tile of C. For each 64-wide step along K, thread 0 asks TMA for a
// 64×64 tile of A and one of B (128-byte swizzle), both completing on one mbarrier; then the warpgroup issues
// 4 × wgmma m64n64k16 (16 columns of K each) and waits for them. No pipelining: the simplest tensor-core GEMM.
// M, N, K must be multiples of 64.
#include "hopper.cuh"
#include <cuda_bf16.h>

using namespace hopper;

extern "C" __global__ void __launch_bounds__(128) gemm_64x64(const __grid_constant__ CUtensorMap tma_a,
                                                             const __grid_constant__ CUtensorMap tma_b,
                                                             float* C, int M, int N, int K) {
  __shared__ alignas(1024) __nv_bfloat16 sA[64 * 64];
  __shared__ alignas(1024) __nv_bfloat16 sB[64 * 64];
  __shared__ alignas(8) unsigned long long full;
  const int tile_m = blockIdx.y, tile_n = blockIdx.x;
  if (threadIdx.x == 0) {
    tma_prefetch(&tma_a);
    tma_prefetch(&tma_b);
    mbar_init(&full, 1);
    mbar_fence_init();
  }
  __syncthreads();

  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;

  const int steps = K / 64;
  for (int s = 0; s < steps; ++s) {
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(&full, 2 * 64 * 64 * sizeof(__nv_bfloat16));
      tma_load_2d(sA, &tma_a, &full, s * 64, tile_m * 64);
      tma_load_2d(sB, &tma_b, &full, s * 64, tile_n * 64);
    }
    HOPPER_WAIT1(full, s & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_m64n64k16_bf16(d, make_smem_desc(sA + kk * 16, 16, 1024), make_smem_desc(sB + kk * 16, 16, 1024));
    }
    wgmma_commit();
    wgmma_wait<0>();
    __syncthreads();  // everyone is done reading sA/sB before the next TMA overwrites them
  }

  // Accumulator layout of m64nNk16: thread t (warp w, lane l), register j holds
  // row 16w + l/4 + 8*((j/2)%2), column 8*(j/4) + 2*(l%4) + (j%2).
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int row = tile_m * 64 + 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int col = tile_n * 64 + 8 * (j / 4) + 2 * (l % 4);
    *reinterpret_cast<float2*>(&C[(long long)row * N + col]) = make_float2(d[j], d[j + 1]);
  }
}
