"""CUDA sources the executor's tests run: the lineage's Lab 2 GEMM (two-stage A+B load loop, CUDA-core consume)
and the wrong answers the issue lists, as small edits of the right ones."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def lab_sources() -> dict[str, str]:
    """The solved kernels of Labs 1-3 as the graders compile them: the header, the student's wrappers so far, the
    kernel (keys LAB1, LAB2, LAB3; kernels lab1_copy, lab2_gemm, lab3_gemm)."""
    from helpers.course import labgen

    ns: dict = {}
    for nb in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma"):
        ns.update(labgen.solution_namespace(ROOT / "solutions" / f"{nb}.ipynb"))
    head = '#include "hopper.cuh"\n' + ns["TMA_LOAD"]
    wrappers = head + ns["MBAR_INIT_ARRIVE"] + ns["MBAR_TX_WAIT"]
    return {"LAB1": head + ns["LAB1_KERNEL"], "LAB2": wrappers + ns["LAB2_KERNEL"],
            "LAB3": wrappers + ns["WGMMA"] + ns["LAB3_KERNEL"]}

#: Lab 2's GEMM as the lineage describes it: grid N/64 x M/64, 128 threads, a 64x64 fp32 tile of C per block; two
#: stages of a 64x64 A tile and a 64x64 B tile (128B swizzle); full[2] (1 arrival), empty[2] (128 arrivals);
#: thread 0 produces, all 128 threads consume on CUDA cores from the swizzled tiles.
LAB2_GEMM = r"""
#include "hopper.cuh"
constexpr int BM = 64, BN = 64, BK = 64, STAGES = 2, THREADS = 128;

__device__ __forceinline__ float tile_at(const unsigned short* tile, int row, int col) {
  const unsigned short bits = tile[row * BK + 8 * ((col / 8) ^ (row % 8)) + col % 8];
  return __uint_as_float(unsigned(bits) << 16);
}

extern "C" __global__ void __launch_bounds__(THREADS)
lab2_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, float* C, int M,
          int N, int K) {
  __shared__ alignas(1024) unsigned short sA[STAGES][BM * BK];
  __shared__ alignas(1024) unsigned short sB[STAGES][BN * BK];
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  const int t = threadIdx.x, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  if (t == 0) {
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], THREADS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();
  const int r = t % BM, c0 = (t / BM) * 32;
  float acc[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) acc[j] = 0.0f;
  for (int k = 0; k < K / BK; ++k) {
    const int s = k % STAGES;
    const unsigned use = k / STAGES;
    if (t == 0) {
      HOPPER_WAIT(empty, s, (use & 1) ^ 1);
      hopper::mbar_arrive_expect_tx(&full[s], 2 * BM * BK * 2);
      hopper::tma_load_2d(sA[s], &tmap_a, &full[s], k * BK, m0);
      hopper::tma_load_2d(sB[s], &tmap_b, &full[s], k * BK, n0);
    }
    HOPPER_WAIT(full, s, use & 1);
    for (int kk = 0; kk < BK; ++kk) {
      const float a = tile_at(sA[s], r, kk);
#pragma unroll
      for (int j = 0; j < 32; ++j) acc[j] = fmaf(a, tile_at(sB[s], c0 + j, kk), acc[j]);
    }
    hopper::mbar_arrive(&empty[s]);
  }
#pragma unroll
  for (int j = 0; j < 32; ++j) C[(long long)(m0 + r) * N + n0 + c0 + j] = acc[j];
}
"""

#: The producer waits on EMPTY with the phase's own parity instead of the flipped one: it never starts.
LAB2_WRONG_PARITY = LAB2_GEMM.replace("HOPPER_WAIT(empty, s, (use & 1) ^ 1);", "HOPPER_WAIT(empty, s, use & 1);")

#: Consumers release the stage (arrive on EMPTY) before they read it: the producer may refill it under them.
LAB2_RELEASE_BEFORE_READ = LAB2_GEMM.replace(
    "    HOPPER_WAIT(full, s, use & 1);\n", "    HOPPER_WAIT(full, s, use & 1);\n    hopper::mbar_arrive(&empty[s]);\n"
).replace("    hopper::mbar_arrive(&empty[s]);\n  }\n#pragma unroll\n  for (int j = 0; j < 32; ++j) C[",
          "  }\n#pragma unroll\n  for (int j = 0; j < 32; ++j) C[")

#: The same kernel spinning on mbarrier.try_wait in a raw loop (no bounded wait, no report path).
LAB2_RAW_SPIN = LAB2_WRONG_PARITY.replace(
    "HOPPER_WAIT(empty, s, use & 1);", "while (!hopper::mbar_try_wait(&empty[s], use & 1)) {}")

#: A Lab 4-style warp-specialized GEMM: BM x BN tiles (BN = 128 or 256), 384 threads = one producer warpgroup (one
#: thread issues the TMA loads, the warpgroup gives registers back with setmaxnreg.dec) and two consumer
#: warpgroups (setmaxnreg.inc, wgmma m64nBNk16, one group in flight: wait_group 1, then release the PREVIOUS
#: stage). STAGES stages in dynamic shared memory aligned to 1024 by hand.
WS_GEMM = r"""
#include "hopper.cuh"
#ifndef BN
#define BN 128
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CONSUMER_REGS
#define CONSUMER_REGS 232
#endif
#ifndef PRODUCER_REGS
#define PRODUCER_REGS 40
#endif
constexpr int BM = 128, BK = 64, CONSUMERS = 2;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;

extern "C" __global__ void __launch_bounds__(384, 1)
ws_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b, float* C, int M,
        int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (hopper::smem_u32(smem_raw) & 1023)) & 1023);
  __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, steps = K / BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      hopper::mbar_init(&full[s], 1);
      hopper::mbar_init(&empty[s], CONSUMERS);
    }
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (wg == 0) {
    hopper::setmaxnreg_dec<PRODUCER_REGS>();
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
  hopper::setmaxnreg_inc<CONSUMER_REGS>();
  const int c = wg - 1;
  float d[BN / 2];
#pragma unroll
  for (int j = 0; j < BN / 2; ++j) d[j] = 0.0f;
  for (int k = 0; k < steps; ++k) {
    const int s = k % STAGES;
    // a raw wait: the header's bounded wait calls a function, which ptxas cannot fit after setmaxnreg (C7600)
    while (!hopper::mbar_try_wait(&full[s], (k / STAGES) & 1)) {
    }
    const unsigned char* a = smem + s * STAGE_BYTES + c * (64 * BK * 2);
    const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk)
      hopper::wgmma_bf16<BN>(d, hopper::make_smem_desc(a + 32 * kk, 16, 1024),
                             hopper::make_smem_desc(b + 32 * kk, 16, 1024));
    hopper::wgmma_commit();
    hopper::wgmma_wait<1>();
    if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);
  }
  hopper::wgmma_wait<0>();
  hopper::wgmma_fence_operands(d);
  const int w = tid / 32, l = tid % 32, row = m0 + 64 * c + 16 * w + l / 4;
#pragma unroll
  for (int j = 0; j < BN / 2; j += 4) {
    const int col = n0 + 8 * (j / 4) + 2 * (l % 4);
    *reinterpret_cast<float2*>(&C[(long long)row * N + col]) = make_float2(d[j], d[j + 1]);
    *reinterpret_cast<float2*>(&C[(long long)(row + 8) * N + col]) = make_float2(d[j + 2], d[j + 3]);
  }
}
"""

#: Consumers release the stage they just issued on (before its wgmma retired) instead of the previous one.
WS_RELEASE_CURRENT = WS_GEMM.replace(
    "if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);",
    "if (tid == 0) hopper::mbar_arrive(&empty[s]);")


def ws_smem(bn: int = 128, stages: int = 4) -> int:
    """Dynamic shared memory of WS_GEMM: the stages plus 1 KB to align them."""
    return stages * (128 * 64 * 2 + bn * 64 * 2) + 1024


#: One 64x64 tile of C = A·Bᵀ (64x64 bf16 each) on the tensor cores from tiles that ordinary stores (not the TMA)
#: put into shared memory in the 128B-swizzled layout: each thread fences its stores for the async proxy
#: (fence.proxy.async), then a barrier, then wgmma.
STORES_WGMMA = r"""
#include "hopper.cuh"
extern "C" __global__ void __launch_bounds__(128)
stores_wgmma(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, float* __restrict__ C) {
  __shared__ alignas(1024) unsigned short sA[64 * 64];
  __shared__ alignas(1024) unsigned short sB[64 * 64];
  const int t = threadIdx.x;
  for (int i = t; i < 64 * 8; i += 128) {  // 16-byte chunk c of row r goes to chunk c ^ (r % 8)
    const int r = i / 8, c = i % 8, to = r * 64 + 8 * (c ^ (r % 8));
    *reinterpret_cast<uint4*>(&sA[to]) = *reinterpret_cast<const uint4*>(&A[r * 64 + 8 * c]);
    *reinterpret_cast<uint4*>(&sB[to]) = *reinterpret_cast<const uint4*>(&B[r * 64 + 8 * c]);
  }
  hopper::fence_proxy_async();  // the stores above, before the tensor core (the async proxy) reads them
  __syncthreads();
  float d[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) d[j] = 0.0f;
  hopper::wgmma_fence_operands(d);  // the zeros are written here, before the fence (not moved after it)
  hopper::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    hopper::wgmma_m64n64k16_bf16(d, hopper::make_smem_desc(sA + 16 * kk, 16, 1024),
                                 hopper::make_smem_desc(sB + 16 * kk, 16, 1024));
  hopper::wgmma_commit();
  hopper::wgmma_wait<0>();
  const int w = t / 32, l = t % 32;
#pragma unroll
  for (int j = 0; j < 32; j += 2) {
    const int row = 16 * w + l / 4 + 8 * ((j / 2) % 2), col = 8 * (j / 4) + 2 * (l % 4);
    C[row * 64 + col] = d[j];
    C[row * 64 + col + 1] = d[j + 1];
  }
}
"""
