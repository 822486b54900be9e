"""Kernels in the idioms public code uses around the warp-level tensor cores (Ampere-style GEMMs and attention
kernels that still run on Hopper, wmma users, libcu++ pipelines), for the executor: each case is (shape, run,
expected); ``run()`` launches through helpers.gpu. tools/h100/executor_vs_h100.py runs the exact ones on the GPU
too."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: a 64x64 output tile, K = 128, four warps of 32x32; A and B (both K-major) stream through a two-stage
#: cp.async ring (commit_group / wait_group 1), ldmatrix.x4 feeds mma.sync m16n8k16 bf16, as Ampere GEMMs do
AMPERE_GEMM = r"""
#include <cuda_bf16.h>
#define CP_ASYNC_CG(dst, src) asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src))
#define CP_ASYNC_COMMIT() asm volatile("cp.async.commit_group;\n" ::)
#define CP_ASYNC_WAIT(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n))
#define LDMATRIX_X4(r0, r1, r2, r3, addr) \
  asm volatile("ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n" \
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr))
#define HMMA16816(d, a, b0, b1) \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};\n" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
constexpr int BM = 64, BN = 64, BK = 32, K = 128;

extern "C" __global__ void __launch_bounds__(128) ampere_gemm(const __nv_bfloat16* __restrict__ A,
    const __nv_bfloat16* __restrict__ B, float* __restrict__ C) {
  __shared__ __align__(128) __nv_bfloat16 sA[2][BM * BK], sB[2][BN * BK];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  float acc[2][4][4] = {};
  auto load = [&](int stage, int k0) {
    for (int i = tid; i < BM * BK / 8; i += 128) {  // 16-byte chunks
      int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
      CP_ASYNC_CG((unsigned)__cvta_generic_to_shared(&sA[stage][r * BK + c]), A + r * K + k0 + c);
      CP_ASYNC_CG((unsigned)__cvta_generic_to_shared(&sB[stage][r * BK + c]), B + r * K + k0 + c);
    }
    CP_ASYNC_COMMIT();
  };
  load(0, 0);
  for (int kt = 0; kt < K / BK; ++kt) {
    if (kt + 1 < K / BK) { load((kt + 1) % 2, (kt + 1) * BK); CP_ASYNC_WAIT(1); } else { CP_ASYNC_WAIT(0); }
    __syncthreads();
    const int s = kt % 2;
    #pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a[2][4], b[4][2];
      #pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const __nv_bfloat16* p = &sA[s][(wm + mi * 16 + lane % 16) * BK + kk + (lane / 16) * 8];
        LDMATRIX_X4(a[mi][0], a[mi][1], a[mi][2], a[mi][3], (unsigned)__cvta_generic_to_shared(p));
      }
      #pragma unroll
      for (int nj = 0; nj < 2; ++nj) {  // one x4 gives B fragments for two n8 tiles
        const __nv_bfloat16* p = &sB[s][(wn + nj * 16 + (lane / 16) * 8 + lane % 8) * BK + kk + ((lane / 8) % 2) * 8];
        unsigned sp = (unsigned)__cvta_generic_to_shared(p);
        LDMATRIX_X4(b[2 * nj][0], b[2 * nj][1], b[2 * nj + 1][0], b[2 * nj + 1][1], sp);
      }
      #pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        #pragma unroll
        for (int ni = 0; ni < 4; ++ni) HMMA16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int mi = 0; mi < 2; ++mi)
    #pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      int r = wm + mi * 16 + g, c = wn + ni * 8 + 2 * t;
      C[r * BN + c] = acc[mi][ni][0]; C[r * BN + c + 1] = acc[mi][ni][1];
      C[(r + 8) * BN + c] = acc[mi][ni][2]; C[(r + 8) * BN + c + 1] = acc[mi][ni][3];
    }
}
"""

#: nvcuda::wmma from <mma.h>: a 32x32 tile of f16 products in fp32, one warp per 16x16, K = 32
WMMA_GEMM = r"""
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;
extern "C" __global__ void wmma_gemm(const half* a, const half* b, float* c) {
  const int warp = threadIdx.x / 32, tm = (warp / 2) * 16, tn = (warp % 2) * 16;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  for (int k = 0; k < 32; k += 16) {
    wmma::load_matrix_sync(fa, a + tm * 32 + k, 32);
    wmma::load_matrix_sync(fb, b + tn * 32 + k, 32);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  for (int i = 0; i < fc.num_elements; ++i) fc.x[i] *= 2.0f;  // an elementwise epilogue on the fragment
  wmma::store_matrix_sync(c + tm * 32 + tn, fc, 32, wmma::mem_row_major);
}
"""

#: cooperative_groups::memcpy_async into shared memory with cuda::pipeline, then a reduction
CG_PIPELINE = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/memcpy_async.h>
#include <cuda/pipeline>
namespace cg = cooperative_groups;
extern "C" __global__ void cg_pipeline(const int* in, int* out) {
  __shared__ __align__(16) int stage[2][256];
  auto block = cg::this_thread_block();
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  int sum = 0;
  for (int t = 0; t < 4; ++t) {
    pipe.producer_acquire();
    cuda::memcpy_async(&stage[t % 2][threadIdx.x], in + t * 256 + threadIdx.x, cuda::aligned_size_t<4>(4), pipe);
    pipe.producer_commit();
    pipe.consumer_wait();
    block.sync();
    sum += stage[t % 2][(threadIdx.x + 1) % 256];
    pipe.consumer_release();
    block.sync();
  }
  cg::memcpy_async(block, stage[0], in + 1024, sizeof(int) * 256);
  cg::wait(block);
  out[threadIdx.x] = sum + stage[0][255 - threadIdx.x];
}
"""

#: a row softmax as attention kernels write it: max, then exp2f((x - max) * log2e) with the fast exp2
SOFTMAX_EXP2 = r"""
extern "C" __global__ void softmax_exp2(const float* x, float* y, int n) {
  const float* row = x + blockIdx.x * n;
  float m = -__int_as_float(0x7f800000);
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, row[i]);
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float e; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"((row[i] - m) * 1.4426950408889634f));
    s += e;
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float e; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"((row[i] - m) * 1.4426950408889634f));
    y[blockIdx.x * n + i] = e / s;
  }
}
"""


def cases() -> dict[str, tuple[str, Callable[[], np.ndarray], np.ndarray]]:
    """name -> (shape, run, expected), every expected output exact (integer-valued data)."""
    from helpers import gpu

    out: dict[str, tuple[str, Callable[[], np.ndarray], np.ndarray]] = {}
    rng = np.random.default_rng(38)
    a = rng.integers(-3, 4, (64, 128)).astype(np.float32)
    b = rng.integers(-3, 4, (64, 128)).astype(np.float32)

    def ampere() -> np.ndarray:
        k = gpu.compile(AMPERE_GEMM, "ampere_gemm")
        dc = gpu.poison((64, 64), np.float32)
        gpu.launch(k, 1, 128, 0, gpu.to_device(a, gpu.bfloat16), gpu.to_device(b, gpu.bfloat16), dc)
        return dc.to_host()

    out["Ampere GEMM: cp.async ring, ldmatrix.x4, mma.sync m16n8k16"] = ("64x64x128 bf16, 4 warps", ampere, a @ b.T)
    ha = rng.integers(-4, 5, (32, 32)).astype(np.float16)
    hb = rng.integers(-4, 5, (32, 32)).astype(np.float16)

    def wmma() -> np.ndarray:
        k = gpu.compile(WMMA_GEMM, "wmma_gemm")
        dc = gpu.poison((32, 32), np.float32)
        gpu.launch(k, 1, 128, 0, gpu.to_device(ha), gpu.to_device(hb), dc)
        return dc.to_host()

    out["<mma.h> wmma GEMM with an elementwise epilogue"] = (
        "32x32x32 f16, 4 warps", wmma, (2 * ha.astype(np.float32) @ hb.astype(np.float32).T).astype(np.float32))
    iv = rng.integers(-1000, 1000, 1280).astype(np.int32)

    def pipeline() -> np.ndarray:
        k = gpu.compile(CG_PIPELINE, "cg_pipeline")
        do = gpu.poison(256, np.int32)
        gpu.launch(k, 1, 256, 0, gpu.to_device(iv), do)
        return do.to_host()

    t = np.arange(256)
    want = sum(iv[s * 256 + (t + 1) % 256] for s in range(4)) + iv[1024 + 255 - t]
    out["cuda::pipeline and cooperative_groups::memcpy_async"] = ("4 stages of 256 ints", pipeline,
                                                                  want.astype(np.int32))
    return out


def softmax_inputs() -> np.ndarray:
    return np.random.default_rng(39).standard_normal((4, 256)).astype(np.float32) * 4
