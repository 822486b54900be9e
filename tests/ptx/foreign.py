"""Kernels written the way published Hopper code writes them, not with the course's header: inline-asm wait loops
with local labels inlined many times, libcu++'s ``cuda::barrier`` and ``cuda::device::experimental`` TMA calls,
``__cluster_dims__`` launches, named barriers with a register id, CuTe-style ``elect.sync``, ``stmatrix`` /
``ldmatrix``, a 3-D tensor map passed by pointer in global memory, a persistent loop over a schedule in global
memory, ``%globaltimer`` / ``clock64``, local-memory arrays indexed at run time and ``printf``.

:func:`cases` gives, per kernel, a function that runs it through ``helpers.gpu`` (on whichever backend is active)
and returns its outputs, and the outputs a correct run gives. Every device array behind a tensor map stays in a
variable until the launch is done: a map holds only the address (on the executor a copy through a map over a freed
array faults; on the H100 it reads whatever the next allocation put there). ``tests/ptx/test_foreign.py`` runs them
on the executor; ``tools/h100/executor_vs_h100.py`` runs them on the H100 and on the executor with the same inputs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

WAIT_LOOPS = r"""
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n .reg .pred P1;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               " @P1 bra.uni DONE;\n bra.uni WAIT;\n DONE:\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
extern "C" __global__ void wait_loops(int* out) {
  __shared__ alignas(8) unsigned long long full, empty;
  __shared__ int data[128];
  const int t = threadIdx.x;
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&full)), "r"(1));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(&empty)), "r"(128));
  }
  __syncthreads();
  int acc = 0;
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    if (t == 0) {
      bar_wait(smem_addr(&empty), (r & 1) ^ 1);
      for (int i = 0; i < 128; ++i) data[i] = r * 1000 + i;
      bar_arrive(smem_addr(&full));
    }
    bar_wait(smem_addr(&full), r & 1);
    acc += data[t];
    bar_arrive(smem_addr(&empty));
  }
  out[t] = acc;
}
"""

LIBCUDACXX_TMA = r"""
#include <cuda/barrier>
#include <cuda/ptx>
using barrier = cuda::barrier<cuda::thread_scope_block>;
namespace cde = cuda::device::experimental;
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };  // what <cuda.h> declares
using CUtensorMap = CUtensorMap_st;

extern "C" __global__ void libcudacxx_tma(const __grid_constant__ CUtensorMap in,
                                          const __grid_constant__ CUtensorMap out) {
  __shared__ alignas(128) unsigned short tile[64 * 64];
  #pragma nv_diag_suppress static_var_with_dynamic_init
  __shared__ barrier bar;
  const int x = blockIdx.x * 64, y = blockIdx.y * 64;
  if (threadIdx.x == 0) {
    init(&bar, blockDim.x);
    cde::fence_proxy_async_shared_cta();
  }
  __syncthreads();
  barrier::arrival_token token;
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_global_to_shared(tile, &in, x, y, bar);
    token = cuda::device::barrier_arrive_tx(bar, 1, sizeof(tile));
  } else {
    token = bar.arrive();
  }
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) tile[i] = static_cast<unsigned short>(tile[i] * 3u + 1u);
  cde::fence_proxy_async_shared_cta();
  __syncthreads();
  if (threadIdx.x == 0) {
    cde::cp_async_bulk_tensor_2d_shared_to_global(&out, x, y, tile);
    cde::cp_async_bulk_commit_group();
    cde::cp_async_bulk_wait_group_read<0>();
  }
}
"""

CLUSTER_DIMS = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_ranks(unsigned* out) {
  unsigned rank, size, explicit_;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
  asm volatile("{\n .reg .pred p;\n mov.pred p, %%is_explicit_cluster;\n selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(explicit_));
  __shared__ unsigned mine;
  if (threadIdx.x == 0) mine = 100 + blockIdx.x;
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  unsigned peer_addr, local = static_cast<unsigned>(__cvta_generic_to_shared(&mine)), peer_val;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer_addr) : "r"(local), "r"(rank ^ 1));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(peer_val) : "r"(peer_addr));
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x == 0) {
    out[4 * blockIdx.x] = rank;
    out[4 * blockIdx.x + 1] = size;
    out[4 * blockIdx.x + 2] = explicit_;
    out[4 * blockIdx.x + 3] = peer_val;
  }
}
"""

WARP_IDIOMS = r"""
__device__ __forceinline__ bool elect_one_sync() {
  unsigned pred = 0;
  asm volatile("{\n .reg .b32 rx;\n .reg .pred px;\n elect.sync rx|px, %1;\n @px mov.s32 %0, 1;\n}\n"
               : "+r"(pred) : "r"(0xffffffffu));
  return pred != 0;
}
extern "C" __global__ void warp_idioms(const int* in, int* out) {
  __shared__ int s[128];
  __shared__ int elected;
  __shared__ alignas(16) unsigned short m[4][8][8];
  const int t = threadIdx.x, half = t / 64;
  if (t == 0) elected = 0;
  s[t] = in[t];
  __syncthreads();
  const unsigned id = 1 + half;  // a named barrier per half, its id in a register
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(64) : "memory");
  int v = s[half * 64 + ((t % 64) ^ 5)];
  if (elect_one_sync()) atomicAdd(&elected, 1);
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(64) : "memory");
  if (t < 32) {
    unsigned r[4];
    for (int i = 0; i < 4; ++i) r[i] = (unsigned(in[(t + i) % 128]) & 0xffffu) | (unsigned(t * 4 + i) << 16);
    const unsigned p = static_cast<unsigned>(__cvta_generic_to_shared(&m[t / 8][t % 8][0]));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
    __syncwarp();
    unsigned q[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q[0]), "=r"(q[1]), "=r"(q[2]), "=r"(q[3]) : "r"(p));
    for (int i = 0; i < 4; ++i) out[256 + 4 * t + i] = static_cast<int>(q[i]);
  }
  __syncthreads();
  out[t] = v;
  out[128 + t] = elected;
}
"""

TMAP_BY_POINTER = r"""
extern "C" __global__ void tmap_by_pointer(const void* tmap, unsigned short* out) {
  __shared__ alignas(128) unsigned short box[4][8][16];
  __shared__ alignas(8) unsigned long long bar;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(tmap) : "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&box[0][0][0]));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(int(sizeof(box))));
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(tmap), "r"(16 * blockIdx.x), "r"(8), "r"(1), "r"(b) : "memory");
  }
  asm volatile("{\n .reg .pred p;\n LOOP:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra LOOP;\n}\n" :: "r"(b) : "memory");
  for (int i = threadIdx.x; i < 4 * 8 * 16; i += blockDim.x) out[blockIdx.x * 512 + i] = (&box[0][0][0])[i];
}
"""

PERSISTENT = r"""
extern "C" __global__ void persistent(const int* schedule, int tiles, const float* x, float* y, int* next) {
  __shared__ int tile;
  for (;;) {
    if (threadIdx.x == 0) tile = atomicAdd(next, 1);
    __syncthreads();
    const int k = tile;
    __syncthreads();
    if (k >= tiles) break;
    const int t = schedule[k];  // the schedule's order (e.g. along a Hilbert curve), precomputed on the host
    float acc = 0.f;
    for (int j = 0; j < 16; ++j) acc = fmaf(x[t * 16 + j], float(j + 1), acc);
    y[t * 64 + threadIdx.x] = acc + threadIdx.x;
  }
}
"""

MISC = r"""
extern "C" __global__ void misc(const int* idx, int* out) {
  unsigned long long g0, g1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
  const long long c0 = clock64();
  int local[24];  // indexed at run time: lives in local memory
  for (int i = 0; i < 24; ++i) local[i] = i * i + threadIdx.x;
  int s = 0;
  for (int i = 0; i < 24; ++i) s += local[(idx[threadIdx.x] + 5 * i) % 24];
  const long long c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
  if (threadIdx.x == 0) printf("misc: block %d says hello\n", blockIdx.x);
  out[threadIdx.x] = s;
  out[32 + threadIdx.x] = (c1 > c0) + 2 * (g1 >= g0);
}
"""

CUDA_PTX = r"""
#include <cuda/ptx>
#include <cuda/std/cstdint>
namespace ptx = cuda::ptx;
using cuda::std::uint64_t;
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };  // what <cuda.h> declares
using CUtensorMap = CUtensorMap_st;

// A two-stage ring through cuda::ptx: an elected producer lane streams 32x32 int tiles with TMA, four consumer
// warps sum their rows' columns; a token wait (mbarrier.try_wait with the arrive's state) joins them at the end.
extern "C" __global__ void cuda_ptx_ring(const __grid_constant__ CUtensorMap in, int* out, int tiles) {
  __shared__ alignas(128) int tile[2][32][32];
  __shared__ uint64_t full[2], empty[2], done;
  __shared__ unsigned partial[4][32];
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  if (t == 0) {
    for (int s = 0; s < 2; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 128);
    }
    ptx::mbarrier_init(&done, 128);
    ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
  }
  __syncthreads();
  if (warp == 4) {
    if (lane == 0) {
      for (int k = 0; k < tiles; ++k) {
        const int s = k % 2;
        while (!ptx::mbarrier_try_wait_parity(&empty[s], ((k / 2) & 1) ^ 1)) {
        }
        ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &full[s],
                                       sizeof(tile[0]));
        const cuda::std::int32_t coords[2] = {0, 32 * k};
        ptx::cp_async_bulk_tensor(ptx::space_cluster, ptx::space_global, &tile[s][0][0], &in, coords, &full[s]);
      }
    }
    return;
  }
  unsigned acc = 0;
  for (int k = 0; k < tiles; ++k) {
    const int s = k % 2;
    while (!ptx::mbarrier_try_wait_parity(ptx::sem_acquire, ptx::scope_cta, &full[s], (k / 2) & 1)) {
    }
    for (int r = 0; r < 8; ++r) acc = acc * 3u + unsigned(tile[s][8 * warp + r][lane]);
    ptx::mbarrier_arrive(&empty[s]);
  }
  partial[warp][lane] = acc;
  const uint64_t token = ptx::mbarrier_arrive(&done);
  while (!ptx::mbarrier_try_wait(&done, token)) {
  }
  out[t] = int(partial[warp][lane] - partial[(warp + 1) % 4][(lane + 7) % 32]);
}
"""

TMAP_5D = r"""
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
// One 5-D box per block, its coordinates read from global memory (innermost first, as the PTX takes them).
extern "C" __global__ void tmap_5d(const __grid_constant__ CUtensorMap map, const int* coords,
                                   unsigned short* out) {
  __shared__ alignas(128) unsigned short box[256];
  __shared__ alignas(8) unsigned long long bar;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n\tfence.proxy.async.shared::cta;" :: "r"(b) : "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int* c = coords + 5 * blockIdx.x;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(512) : "memory");
    asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];"
                 :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(box))), "l"(&map), "r"(c[0]), "r"(c[1]),
                    "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(b) : "memory");
  }
  asm volatile("{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra WAIT_%=;\n}\n" :: "r"(b) : "memory");
  for (int i = threadIdx.x; i < 256; i += blockDim.x) out[256 * blockIdx.x + i] = box[i];
}
"""

MULTICAST_3D = r"""
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Each block of a 2-block cluster loads half of a 3-D box (2 of its 4 planes) and multicasts it to both blocks:
// every block ends up with the whole box, its barrier counting the bytes of both halves.
extern "C" __global__ void __cluster_dims__(2, 1, 1) multicast_3d(const __grid_constant__ CUtensorMap half,
                                                                   unsigned short* out) {
  __shared__ alignas(128) unsigned short box[4][8][32];
  __shared__ alignas(8) unsigned long long full;
  unsigned rank, cluster;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
  const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&full));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();  // both barriers exist before either block's copy can land on them
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(int(sizeof(box))));
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&box[2 * rank][0][0]));
    const unsigned short mask = 0x3;
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"
                 :: "r"(dst), "l"(&half), "r"(0), "r"(8 * int(cluster)), "r"(6 * int(cluster) + 2 * int(rank)),
                    "r"(bar), "h"(mask) : "memory");
  }
  asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra WAIT;\n}\n" :: "r"(bar) : "memory");
  const unsigned short* flat = &box[0][0][0];
  for (int i = threadIdx.x; i < 4 * 8 * 32; i += blockDim.x) out[blockIdx.x * 1024 + i] = flat[i];
  cluster_sync();  // no block leaves while its peer's copy may still be landing in it
}
"""

SPILLS = r"""
// __launch_bounds__(256, 8) leaves a thread 32 registers; 64 values live across a loop make ptxas spill them to
// local memory (the PTX keeps them in registers). A table swapped at indices read from memory lives in local memory
// in the PTX itself.
extern "C" __global__ void __launch_bounds__(256, 8) spills(const unsigned* in, const int* perm, int rounds,
                                                             unsigned* out) {
  const int t = threadIdx.x;
  unsigned v[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) v[i] = in[(t * 7 + i * 13) % 512];
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int i = 0; i < 64; ++i) v[i] = (v[i] * 2654435761u + v[(i + 1) % 64]) ^ (v[(i + 17) % 64] >> 7);
  }
  int table[48];
  for (int i = 0; i < 48; ++i) table[i] = i * 3 + t;
  for (int i = 0; i < 48; ++i) {
    const int j = perm[(t + i) % 48], keep = table[i];
    table[i] = table[j];
    table[j] = keep;
  }
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < 64; ++i) acc = acc * 31u + v[i];
  out[t] = acc;
  out[256 + t] = static_cast<unsigned>(table[t % 48] + 1000 * table[(t * 5 + 1) % 48]);
}
"""

WGMMA_LADDER = r"""
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
#define N @N@
@ATOM@// One 64xN tile of C = A.B^T (A 64x64, B Nx64 bf16, both K-major, 128B-swizzled by TMA). Thread 0 builds the
// eight descriptors once and leaves them in shared memory; every thread reads them back from there.
extern "C" __global__ void __launch_bounds__(128) wgmma_ladder(const __grid_constant__ CUtensorMap map_a,
                                                               const __grid_constant__ CUtensorMap map_b, float* C) {
  __shared__ alignas(1024) unsigned short sA[64 * 64];
  __shared__ alignas(1024) unsigned short sB[N * 64];
  __shared__ alignas(8) unsigned long long bar, desc[2][4];
  const int t = threadIdx.x;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  if (t == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
    for (int k = 0; k < 4; ++k) {  // start >> 4 | LBO 16 >> 4 << 16 | SBO 1024 >> 4 << 32 | 128B swizzle << 62
      const unsigned a0 = static_cast<unsigned>(__cvta_generic_to_shared(sA)) + 32 * k;
      const unsigned b0 = static_cast<unsigned>(__cvta_generic_to_shared(sB)) + 32 * k;
      desc[0][k] = ((a0 & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
      desc[1][k] = ((b0 & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
    }
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(int(sizeof(sA) + sizeof(sB))));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(sA))), "l"(&map_a), "r"(0), "r"(0), "r"(b)
                 : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(static_cast<unsigned>(__cvta_generic_to_shared(sB))), "l"(&map_b), "r"(0), "r"(0), "r"(b)
                 : "memory");
  }
  __syncthreads();
  asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra WAIT;\n}\n" :: "r"(b) : "memory");
  float d[N / 2];
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int k = 0; k < 4; ++k) mma_64x@N@x16(d, desc[0][k], desc[1][k], k);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  const int w = t / 32, l = t % 32;
#pragma unroll
  for (int j = 0; j < N / 2; ++j)
    C[(16 * w + l / 4 + 8 * ((j / 2) % 2)) * N + 8 * (j / 4) + 2 * (l % 4) + j % 2] = d[j];
}
"""


ATOM = r"""
// SM90_64xNx16_F32BF16BF16_SS, written out the way CUTLASS spells its atoms: every accumulator an operand.
__device__ __forceinline__ void mma_64x@N@x16(float (&d)[@HALF@], unsigned long long da, unsigned long long db,
                                             int scale_d) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %@SCALE@, 0;\n"
               " wgmma.mma_async.sync.aligned.m64n@N@k16.f32.bf16.bf16 {@REGS@}, %@DA@, %@DB@, p, 1, 1, 0, 0;\n}\n"
               : @OUTS@
               : "l"(da), "l"(db), "r"(scale_d));
}
"""


def wgmma_atom(n: int) -> str:
    """ATOM for m64n``n``k16: the operand list written out for ``n / 2`` accumulators."""
    half = n // 2
    regs = ", ".join(f"%{i}" for i in range(half))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(half))
    return (ATOM.replace("@N@", str(n)).replace("@HALF@", str(half)).replace("@REGS@", regs)
            .replace("@OUTS@", outs).replace("@DA@", str(half)).replace("@DB@", str(half + 1))
            .replace("@SCALE@", str(half + 2)))


def wgmma_ladder_source(n: int) -> str:
    """WGMMA_LADDER for m64n``n``k16."""
    return WGMMA_LADDER.replace("@ATOM@", wgmma_atom(n)).replace("@N@", str(n))

WARP_SPECIALIZED = r"""
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
@ATOM@
template <unsigned R> __device__ __forceinline__ void warpgroup_reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R));
}
template <unsigned R> __device__ __forceinline__ void warpgroup_reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R));
}
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ bool elect_one() {
  unsigned pred = 0;
  asm volatile("{\n .reg .b32 rx;\n .reg .pred px;\n elect.sync rx|px, 0xffffffff;\n @px mov.s32 %0, 1;\n}\n"
               : "+r"(pred));
  return pred != 0;
}
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
  asm volatile("{\n .reg .pred p;\n LAB_WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @p bra.uni DONE;\n bra.uni LAB_WAIT;\n DONE:\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ unsigned long long desc(const void* p) {
  return ((smem(p) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
// C (128x128 fp32) = A (128xK) . B (128xK)^T: a producer warpgroup that gives registers back (one elected lane
// issues the copies into two stages), two consumer warpgroups that take them (64 rows each, m64n128k16).
extern "C" __global__ void __launch_bounds__(384, 1) ws_setmaxnreg(const __grid_constant__ CUtensorMap map_a,
    const __grid_constant__ CUtensorMap map_b, float* C, int k_tiles) {
  extern __shared__ unsigned char raw[];  // two stages of A and B tiles, 64 KB, aligned to 1024 by hand
  typedef unsigned short Tile[128 * 64];
  Tile* sA = reinterpret_cast<Tile*>(raw + ((1024 - (smem(raw) & 1023)) & 1023));
  Tile* sB = sA + 2;
  __shared__ alignas(8) unsigned long long full[2], empty[2];
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[s])));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" :: "r"(smem(&empty[s])));
    }
  }
  __syncthreads();
  if (wg == 0) {
    warpgroup_reg_dealloc<40>();
    if (t < 32 && elect_one()) {
      for (int k = 0; k < k_tiles; ++k) {
        const int s = k % 2;
        wait(smem(&empty[s]), ((k / 2) & 1) ^ 1);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(&full[s])), "r"(32768));
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(sA[s])), "l"(&map_a), "r"(64 * k), "r"(0), "r"(smem(&full[s])) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(sB[s])), "l"(&map_b), "r"(64 * k), "r"(0), "r"(smem(&full[s])) : "memory");
      }
    }
    return;
  }
  warpgroup_reg_alloc<232>();
  const int c = wg - 1;
  float d[64];
  for (int k = 0; k < k_tiles; ++k) {
    const int s = k % 2;
    wait(smem(&full[s]), (k / 2) & 1);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      mma_64x128x16(d, desc(&sA[s][c * 64 * 64 + 16 * kk]), desc(&sB[s][16 * kk]), k + kk);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (t == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem(&empty[s])) : "memory");
  }
  const int w = t / 32, l = t % 32;
#pragma unroll
  for (int j = 0; j < 64; j += 2) {
    const int row = 64 * c + 16 * w + l / 4 + 8 * ((j / 2) % 2), col = 8 * (j / 4) + 2 * (l % 4);
    *reinterpret_cast<float2*>(&C[row * 128 + col]) = make_float2(d[j], d[j + 1]);
  }
}
"""

TRANSPOSE = r"""
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ bool elect_one_sync() {  // the CuTe idiom: one lane of the warp, and its lane id
  unsigned pred = 0, lane = 0;
  asm volatile("{\n .reg .b32 %%rx;\n .reg .pred %%px;\n elect.sync %%rx|%%px, %2;\n @%%px mov.s32 %1, 1;\n"
               " mov.s32 %0, %%rx;\n}\n" : "+r"(lane), "+r"(pred) : "r"(0xFFFFFFFFu));
  return pred != 0;
}
__device__ __forceinline__ bool elect_lane() {  // the same, the lane id discarded into the sink
  unsigned pred;
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(pred));
  return pred != 0;
}
__device__ __forceinline__ void named_sync(unsigned id, unsigned count) {
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_arrive(unsigned id, unsigned count) {
  asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(count) : "memory");
}
// Transposes 32x32 tiles of X (u16) into Y = X^T, persistently: block b takes tiles schedule[b], schedule[b + grid],
// ... Warp 0 loads tiles into two stages (an elected lane issues the TMA); warps 1 and 2 transpose 8x8 blocks in
// registers (ldmatrix.trans then stmatrix for one half, ldmatrix then stmatrix.trans for the other) into a staging
// tile that an elected lane of warp 1 stores with TMA. A stage is handed back through named barrier 1 + stage.
extern "C" __global__ void transpose(const __grid_constant__ CUtensorMap map_x,
                                     const __grid_constant__ CUtensorMap map_y, const int* schedule, int tiles,
                                     int tiles_c) {
  __shared__ alignas(128) unsigned short in[2][32][32];
  __shared__ alignas(128) unsigned short staged[32][32];
  __shared__ alignas(8) unsigned long long full[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[0])));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&full[1])));
  }
  __syncthreads();
  const int mine = (tiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
  if (warp == 0) {
    for (int n = 0; n < mine; ++n) {
      const int s = n % 2, tile = schedule[blockIdx.x + n * gridDim.x];
      if (n >= 2) named_sync(1 + s, 96);  // both consumers are done with this stage
      if (elect_lane()) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 2048;" :: "r"(smem(&full[s])) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem(in[s])), "l"(&map_x), "r"(32 * (tile % tiles_c)), "r"(32 * (tile / tiles_c)),
                        "r"(smem(&full[s])) : "memory");
      }
      __syncwarp();
    }
    return;
  }
  const int c = warp - 1, m = lane / 8, r = lane % 8;  // lanes 8m..8m+7 give the rows of matrix m
  for (int n = 0; n < mine; ++n) {
    const int s = n % 2, tile = schedule[blockIdx.x + n * gridDim.x];
    asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra WAIT;\n}\n" :: "r"(smem(&full[s])), "r"((n / 2) & 1) : "memory");
    unsigned q[2][4];
    // block row bi = 2c (ldmatrix.trans) and 2c + 1 (plain ldmatrix); matrix m is block column m
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q[0][0]), "=r"(q[0][1]), "=r"(q[0][2]), "=r"(q[0][3]) : "r"(smem(&in[s][16 * c + r][8 * m])));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(q[1][0]), "=r"(q[1][1]), "=r"(q[1][2]), "=r"(q[1][3])
                 : "r"(smem(&in[s][16 * c + 8 + r][8 * m])));
    if (n + 2 < mine) named_arrive(1 + s, 96);
    named_sync(3, 64);  // the previous tile's store has read the staging tile
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem(&staged[8 * m + r][16 * c])), "r"(q[0][0]), "r"(q[0][1]), "r"(q[0][2]), "r"(q[0][3])
                 : "memory");
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem(&staged[8 * m + r][16 * c + 8])), "r"(q[1][0]), "r"(q[1][1]), "r"(q[1][2]),
                    "r"(q[1][3]) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_sync(3, 64);
    if (c == 0 && elect_one_sync()) {
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                   :: "l"(&map_y), "r"(32 * (tile / tiles_c)), "r"(32 * (tile % tiles_c)), "r"(smem(staged))
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group.read 0;" ::: "memory");
    }
    __syncwarp();
  }
  if (c == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
"""

MIXED_MAPS = r"""
#include <cuda/ptx>
struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; };
using CUtensorMap = CUtensorMap_st;
__device__ __forceinline__ unsigned smem(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// C = 2A + B over 16-row slabs: A's map comes by value (__grid_constant__), B's and C's from an array of maps in
// global memory (as grouped GEMMs keep them), each acquired for the tensor-map proxy before the TMA uses it.
extern "C" __global__ void mixed_maps(const __grid_constant__ CUtensorMap map_a, const CUtensorMap* maps) {
  __shared__ alignas(128) float a[16][32];
  __shared__ alignas(128) float b[16][32];
  __shared__ alignas(8) unsigned long long bar;
  const CUtensorMap* map_b = &maps[0];
  const CUtensorMap* map_c = &maps[1];
  const int row = 16 * blockIdx.x;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(&bar)));
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" :: "l"(map_b) : "memory");
    cuda::ptx::fence_proxy_tensormap_generic(cuda::ptx::sem_acquire, cuda::ptx::scope_gpu, map_c,
                                             cuda::ptx::n32_t<128>());
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(&bar)), "r"(4096));
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" :: "r"(smem(a)), "l"(&map_a), "r"(0), "r"(row), "r"(smem(&bar))
                 : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" :: "r"(smem(b)), "l"(map_b), "r"(0), "r"(row), "r"(smem(&bar))
                 : "memory");
  }
  __syncthreads();
  asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
               " @!p bra WAIT;\n}\n" :: "r"(smem(&bar)) : "memory");
  for (int i = threadIdx.x; i < 16 * 32; i += blockDim.x) (&a[0][0])[i] = 2.0f * (&a[0][0])[i] + (&b[0][0])[i];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map_c), "r"(0), "r"(row), "r"(smem(a)) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group 0;" ::: "memory");
  }
}
"""


def _map_bytes(tmap: Any) -> np.ndarray:
    """The 128 bytes of a tensor map, to copy into global memory (a driver CUtensorMap or the executor's map)."""
    if hasattr(tmap, "param_bytes"):
        return np.frombuffer(tmap.param_bytes(), np.uint8).copy()
    return np.frombuffer(ctypes.string_at(int(tmap.getPtr()), 128), np.uint8).copy()


def cases() -> dict[str, tuple[str, Callable[[], np.ndarray], np.ndarray]]:
    """name -> (shape, run, expected): ``run()`` launches through helpers.gpu and returns the outputs."""
    from helpers import gpu

    out: dict[str, tuple[str, Callable[[], np.ndarray], np.ndarray]] = {}

    def wait_loops() -> np.ndarray:
        k = gpu.compile(WAIT_LOOPS, "wait_loops")
        o = gpu.poison(128, np.int32)
        gpu.launch(k, 1, 128, 0, o)
        return o.to_host()

    out["inline-asm wait loops x16"] = ("8 phases, 128 threads", wait_loops,
                                        (28000 + 8 * np.arange(128)).astype(np.int32))

    src = np.random.default_rng(31).integers(0, 1 << 16, (128, 128)).astype(np.uint16)

    def libcudacxx() -> np.ndarray:
        k = gpu.compile(LIBCUDACXX_TMA, "libcudacxx_tma")
        din, dout = gpu.to_device(src), gpu.poison((128, 128), np.uint16)
        gpu.launch(k, (2, 2), 128, 0, gpu.tensor_map_2d(din, 64, 64, swizzle=0),
                   gpu.tensor_map_2d(dout, 64, 64, swizzle=0))
        return dout.to_host()

    out["cuda::barrier + cde TMA"] = ("128x128 u16, 4 blocks", libcudacxx, (src * 3 + 1).astype(np.uint16))

    def cluster() -> np.ndarray:
        k = gpu.compile(CLUSTER_DIMS, "cluster_ranks")
        o = gpu.poison(16, np.uint32)
        gpu.launch(k, 4, 64, 0, o)  # no cluster argument: the kernel's __cluster_dims__ decides
        return o.to_host()

    want = np.array([[r, 2, 1, 100 + (b ^ 1)] for b, r in zip(range(4), (0, 1, 0, 1), strict=True)], np.uint32)
    out["__cluster_dims__ launch"] = ("4 blocks, clusters of 2 from the kernel", cluster, want.ravel())

    ins = np.random.default_rng(32).integers(-1000, 1000, 128).astype(np.int32)

    def warp() -> np.ndarray:
        k = gpu.compile(WARP_IDIOMS, "warp_idioms")
        o = gpu.poison(384, np.int32)
        gpu.launch(k, 1, 128, 0, gpu.to_device(ins), o)
        return o.to_host()

    t = np.arange(128)
    first = ins[(t // 64) * 64 + ((t % 64) ^ 5)]
    regs = np.array([[(int(ins[(x + i) % 128]) & 0xFFFF) | ((x * 4 + i) << 16) for i in range(4)] for x in range(32)],
                    np.uint32)
    # stmatrix .trans of x4 then ldmatrix (plain) of the same rows: fragment of lane l, register i holds the
    # transposed 8x8 matrix i's elements (row l//4, columns 2*(l%4), +1)
    mats = np.zeros((4, 8, 8), np.uint16)
    for i in range(4):
        frag = regs[:, i]
        for x in range(32):
            r, c = x // 4, 2 * (x % 4)
            mats[i, c, r] = frag[x] & 0xFFFF
            mats[i, c + 1, r] = frag[x] >> 16
    q = np.zeros((32, 4), np.uint32)
    for i in range(4):
        for x in range(32):
            r, c = x // 4, 2 * (x % 4)
            q[x, i] = int(mats[i, r, c]) | (int(mats[i, r, c + 1]) << 16)
    want = np.concatenate([first, np.full(128, 4, np.int32), q.ravel().view(np.int32)])
    out["named barriers, elect.sync, stmatrix/ldmatrix"] = ("128 threads", warp, want)

    vol = np.random.default_rng(33).integers(0, 1 << 16, (3, 16, 64)).astype(np.uint16)  # dims (z, y, x)

    def by_pointer() -> np.ndarray:
        k = gpu.compile(TMAP_BY_POINTER, "tmap_by_pointer")
        dv = gpu.to_device(vol)
        tmap = gpu.encode_tiled(np.uint16, dv.ptr, [64, 16, 3], [128, 16 * 128], [16, 8, 4], swizzle=0)
        dmap = gpu.to_device(_map_bytes(tmap))
        o = gpu.poison(4 * 512, np.uint16)
        gpu.launch(k, 4, 64, 0, dmap, o)
        return o.to_host()

    boxes = []
    for b in range(4):
        box = np.zeros((4, 8, 16), np.uint16)  # z 1..4 (out of bounds at 3: zero), y 8..15, x 16b..16b+15
        box[:2] = vol[1:3, 8:16, 16 * b:16 * b + 16]
        boxes.append(box.ravel())
    out["3-D tensor map passed by pointer"] = ("box 16x8x4 with an out-of-bounds plane", by_pointer,
                                               np.concatenate(boxes))

    order = _hilbert_order(4)
    xs = np.random.default_rng(34).standard_normal(16 * 16).astype(np.float32)

    def persistent() -> np.ndarray:
        k = gpu.compile(PERSISTENT, "persistent")
        y = gpu.poison(16 * 64, np.float32)
        gpu.launch(k, 3, 64, 0, gpu.to_device(order), np.int32(16), gpu.to_device(xs), y, gpu.zeros(1, np.int32))
        return y.to_host()

    acc = np.zeros(16, np.float32)
    for j in range(16):
        acc = (xs.reshape(16, 16)[:, j].astype(np.float64) * (j + 1) + acc).astype(np.float32)  # fmaf: one rounding
    want = (acc[:, None] + np.arange(64, dtype=np.float32)[None, :]).astype(np.float32).ravel()
    out["persistent loop over a Hilbert schedule"] = ("16 tiles on 3 blocks", persistent, want)

    idx = np.random.default_rng(35).integers(0, 24, 32).astype(np.int32)

    def misc() -> np.ndarray:
        k = gpu.compile(MISC, "misc")
        o = gpu.poison(64, np.int32)
        gpu.launch(k, 1, 32, 0, gpu.to_device(idx), o)
        return o.to_host()

    sums = np.array([sum(((idx[x] + 5 * i) % 24) ** 2 + x for i in range(24)) for x in range(32)], np.int32)
    out["globaltimer, clock64, local arrays, printf"] = ("32 threads", misc,
                                                         np.concatenate([sums, np.full(32, 3, np.int32)]))
    ring = np.random.default_rng(36).integers(-50, 50, (8 * 32, 32)).astype(np.int32)

    def cuda_ptx() -> np.ndarray:
        k = gpu.compile(CUDA_PTX, "cuda_ptx_ring")
        o, dring = gpu.poison(128, np.int32), gpu.to_device(ring)
        gpu.launch(k, 1, 160, 0, gpu.tensor_map_2d(dring, 32, 32, swizzle=0), o, np.int32(8))
        return o.to_host()

    acc = np.zeros((4, 32), np.uint32)  # unsigned arithmetic wraps, in numpy too
    for k in range(8):
        for r in range(8):
            acc = acc * np.uint32(3) + ring[32 * k + 8 * np.arange(4)[:, None] + r, np.arange(32)].view(np.uint32)
    want = (acc - np.roll(acc, (-1, -7), axis=(0, 1))).view(np.int32).ravel()
    out["cuda::ptx mbarrier and TMA calls"] = ("8 tiles through 2 stages, 160 threads", cuda_ptx, want)
    big = np.random.default_rng(37).integers(1, 1 << 16, (3, 4, 5, 6, 40)).astype(np.uint16)  # 8 columns of padding
    corners = np.array([[0, 0, 0, 0, 0], [16, 3, 1, 2, 1], [16, 4, 4, 3, 2], [-8, -1, -2, 1, 0]], np.int32)

    def five_d() -> np.ndarray:
        k = gpu.compile(TMAP_5D, "tmap_5d")
        d = gpu.to_device(big)
        tmap = gpu.encode_tiled(np.uint16, d.ptr, [32, 6, 5, 4, 3], [80, 480, 2400, 9600], [16, 4, 3, 2, 2],
                                element_strides=[1, 2, 2, 1, 1], swizzle=0)
        o = gpu.poison(4 * 256, np.uint16)
        gpu.launch(k, 4, 64, 0, tmap, gpu.to_device(corners), o)
        return o.to_host()

    out["5-D tensor map with element strides"] = ("box 16x4x3x2x2, strides 1,2,2,1,1, 4 boxes partly outside",
                                                  five_d, np.concatenate([_box_5d(big, c) for c in corners]))

    vol3 = np.random.default_rng(38).integers(1, 1 << 16, (8, 16, 32)).astype(np.uint16)  # (z, y, x)

    def multicast() -> np.ndarray:
        k = gpu.compile(MULTICAST_3D, "multicast_3d")
        d = gpu.to_device(vol3)
        tmap = gpu.encode_tiled(np.uint16, d.ptr, [32, 16, 8], [64, 16 * 64], [32, 8, 2], swizzle=0)
        o = gpu.poison(4 * 1024, np.uint16)
        gpu.launch(k, 4, 64, 0, tmap, o)
        return o.to_host()

    boxes3 = []
    for c in range(2):  # cluster c: rows 8c.., planes 6c..6c+3 (planes 8 and 9 lie outside: zero)
        box = np.zeros((4, 8, 32), np.uint16)
        planes = vol3[6 * c:6 * c + 4, 8 * c:8 * c + 8]
        box[:len(planes)] = planes
        boxes3 += [box.ravel(), box.ravel()]
    out["3-D TMA multicast in a cluster of 2"] = ("2 clusters, each block loads half the box for both",
                                                  multicast, np.concatenate(boxes3))
    words = np.random.default_rng(39).integers(0, 1 << 32, 512, dtype=np.uint64).astype(np.uint32)
    perm = np.random.default_rng(40).permutation(48).astype(np.int32)

    def spills() -> np.ndarray:
        k = gpu.compile(SPILLS, "spills")
        o = gpu.poison(512, np.uint32)
        gpu.launch(k, 1, 256, 0, gpu.to_device(words), gpu.to_device(perm), np.int32(3), o)
        return o.to_host()

    out["register spills and a local table"] = ("256 threads, 64 live values in 32 registers", spills,
                                                _spills_reference(words, perm, 3))
    ops_a = gpu.random_host((64, 64), gpu.bfloat16, seed=41)
    ops_b = gpu.random_host((256, 64), gpu.bfloat16, seed=42)

    def ladder() -> np.ndarray:
        res = []
        for n in (64, 128, 192, 256):
            k = gpu.compile(wgmma_ladder_source(n), "wgmma_ladder")
            c = gpu.poison((64, n), np.float32)
            # every array in a variable until the launch is done: a tensor map holds the address, not the array,
            # and on the H100 the next allocation takes a freed array's memory (A's map then reads B)
            da, db = gpu.to_device(ops_a), gpu.to_device(np.ascontiguousarray(ops_b[:n]))
            gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(db, n, 64), c)
            res.append(c.to_host().ravel())
        return np.concatenate(res)

    out["wgmma m64nNk16 ladder, descriptors from shared memory"] = (
        "N = 64, 128, 192, 256; K = 64, 128B swizzle", ladder,
        np.concatenate([_h100_gemm(ops_a, ops_b[:n]).ravel() for n in (64, 128, 192, 256)]))
    ws_a = gpu.random_host((128, 256), gpu.bfloat16, seed=43)
    ws_b = gpu.random_host((128, 256), gpu.bfloat16, seed=44)

    def warp_specialized() -> np.ndarray:
        k = gpu.compile(WARP_SPECIALIZED.replace("@ATOM@", wgmma_atom(128)), "ws_setmaxnreg")
        c, da, db = gpu.poison((128, 128), np.float32), gpu.to_device(ws_a), gpu.to_device(ws_b)
        gpu.launch(k, 1, 384, 4 * 16384 + 1024, gpu.tensor_map_2d(da, 128, 64), gpu.tensor_map_2d(db, 128, 64), c,
                   np.int32(4))
        return c.to_host()

    out["warp-specialized, setmaxnreg dec/inc"] = ("128x128x256, 2 stages, 384 threads", warp_specialized,
                                                   _h100_gemm(ws_a, ws_b))
    xt = np.random.default_rng(45).integers(0, 1 << 16, (64, 128)).astype(np.uint16)  # 2 x 4 tiles of 32 x 32
    sched = np.random.default_rng(46).permutation(8).astype(np.int32)

    def transpose() -> np.ndarray:
        k = gpu.compile(TRANSPOSE, "transpose")
        y, dx = gpu.poison((128, 64), np.uint16), gpu.to_device(xt)
        gpu.launch(k, 2, 96, 0, gpu.tensor_map_2d(dx, 32, 32, swizzle=0), gpu.tensor_map_2d(y, 32, 32, swizzle=0),
                   gpu.to_device(sched), np.int32(8), np.int32(4))
        return y.to_host()

    out["persistent TMA transpose: elect.sync, named barriers, ldmatrix/stmatrix .trans"] = (
        "64x128 u16, 8 tiles on 2 blocks in a precomputed order", transpose, np.ascontiguousarray(xt.T))
    fa, fb = (np.random.default_rng(s).standard_normal((48, 32)).astype(np.float32) for s in (47, 48))

    def mixed_maps() -> np.ndarray:
        k = gpu.compile(MIXED_MAPS, "mixed_maps")
        dc = gpu.poison((48, 32), np.float32)
        da, db = gpu.to_device(fa), gpu.to_device(fb)
        maps = gpu.to_device(np.concatenate([_map_bytes(gpu.tensor_map_2d(db, 16, 32, swizzle=0)),
                                             _map_bytes(gpu.tensor_map_2d(dc, 16, 32, swizzle=0))]))
        gpu.launch(k, 3, 128, 0, gpu.tensor_map_2d(da, 16, 32, swizzle=0), maps)
        return dc.to_host()

    out["tensor maps by value and from an array in global memory"] = (
        "48x32 fp32 on 3 blocks; B's and C's maps acquired with fence.proxy.tensormap", mixed_maps,
        (np.float32(2) * fa + fb).astype(np.float32))
    return out


def idioms() -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """name -> (source, kernel, PTX the idiom must leave): what each case exists to exercise, so that an edit that
    drops it fails a test rather than quietly testing less."""
    return {
        "inline-asm wait loops x16": (WAIT_LOOPS, "wait_loops", ("mbarrier.try_wait.parity.shared::cta.b64",)),
        "cuda::barrier + cde TMA": (LIBCUDACXX_TMA, "libcudacxx_tma", (
            "cp.async.bulk.tensor.2d.shared::cluster.global", "cp.async.bulk.tensor.2d.global.shared::cta",
            "cp.async.bulk.wait_group.read 0")),
        "__cluster_dims__ launch": (CLUSTER_DIMS, "cluster_ranks", (".reqnctapercluster 2, 1, 1", "mapa.shared")),
        "named barriers, elect.sync, stmatrix/ldmatrix": (WARP_IDIOMS, "warp_idioms", (
            "bar.sync %r", "elect.sync", "stmatrix.sync.aligned.m8n8.x4.trans")),
        "3-D tensor map passed by pointer": (TMAP_BY_POINTER, "tmap_by_pointer", (
            "fence.proxy.tensormap::generic.acquire.gpu", "cp.async.bulk.tensor.3d")),
        "persistent loop over a Hilbert schedule": (PERSISTENT, "persistent", ("atom.global.add",)),
        "globaltimer, clock64, local arrays, printf": (MISC, "misc", ("%globaltimer", "ld.local", "vprintf")),
        "cuda::ptx mbarrier and TMA calls": (CUDA_PTX, "cuda_ptx_ring", (
            "mbarrier.try_wait.shared::cta.b64", "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64",
            "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64", "fence.mbarrier_init.release.cluster",
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")),
        "5-D tensor map with element strides": (TMAP_5D, "tmap_5d", ("cp.async.bulk.tensor.5d",)),
        "3-D TMA multicast in a cluster of 2": (MULTICAST_3D, "multicast_3d", (
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster",
            "fence.mbarrier_init.release.cluster")),
        "register spills and a local table": (SPILLS, "spills", (".maxntid 256", ".minnctapersm 8", "st.local",
                                                                 "ld.local")),
        "wgmma m64nNk16 ladder, descriptors from shared memory": (wgmma_ladder_source(192), "wgmma_ladder", (
            "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16", "ld.shared.u64")),
        "warp-specialized, setmaxnreg dec/inc": (WARP_SPECIALIZED.replace("@ATOM@", wgmma_atom(128)),
                                                 "ws_setmaxnreg", ("setmaxnreg.dec.sync.aligned.u32 40",
                                                                   "setmaxnreg.inc.sync.aligned.u32 232",
                                                                   "elect.sync")),
        "persistent TMA transpose: elect.sync, named barriers, ldmatrix/stmatrix .trans": (TRANSPOSE, "transpose", (
            "elect.sync %rx|%px", "elect.sync _|p", "bar.sync %r", "bar.arrive %r",
            "ldmatrix.sync.aligned.m8n8.x4.trans", "stmatrix.sync.aligned.m8n8.x4.trans",
            "cp.async.bulk.tensor.2d.global.shared::cta")),
        "tensor maps by value and from an array in global memory": (MIXED_MAPS, "mixed_maps", (
            "fence.proxy.tensormap::generic.acquire.gpu", "cvta.param.u64", "ld.param.u64")),
    }


def _box_5d(t: np.ndarray, corner: np.ndarray) -> np.ndarray:
    """The box tmap_5d's map copies at ``corner`` (innermost first): 16 x ceil(4/2) x ceil(3/2) x 2 x 2 elements,
    dims 1 and 2 every other element, zero outside the 32 x 6 x 5 x 4 x 3 tensor (t is (3, 4, 5, 6, 40))."""
    steps = [(16, 1), (2, 2), (2, 2), (2, 1), (2, 1)]  # (elements moved, element stride) per dim, innermost first
    idx = [int(c) + s * np.arange(n) for c, (n, s) in zip(corner, steps, strict=True)]
    dims = (32, 6, 5, 4, 3)
    box = np.zeros((2, 2, 2, 2, 16), np.uint16)
    for e in np.ndindex(2, 2, 2, 2, 16):
        i = [idx[4][e[0]], idx[3][e[1]], idx[2][e[2]], idx[1][e[3]], idx[0][e[4]]]
        if all(0 <= v < n for v, n in zip(i, reversed(dims), strict=True)):
            box[e] = t[tuple(i)]
    return box.ravel()


def _spills_reference(words: np.ndarray, perm: np.ndarray, rounds: int) -> np.ndarray:
    """What SPILLS writes, computed over all 256 threads at once in wrapping uint32 arithmetic."""
    t = np.arange(256)
    v = [words[(t * 7 + i * 13) % 512] for i in range(64)]
    for _ in range(rounds):
        for i in range(64):
            v[i] = (v[i] * np.uint32(2654435761) + v[(i + 1) % 64]) ^ (v[(i + 17) % 64] >> np.uint32(7))
    acc = np.zeros(256, np.uint32)
    for i in range(64):
        acc = acc * np.uint32(31) + v[i]
    table = np.arange(48)[None, :] * 3 + t[:, None]
    for i in range(48):
        j = perm[(t + i) % 48]
        keep = table[:, i].copy()
        table[:, i] = table[t, j]
        table[t, j] = keep
    mixed = table[t, t % 48] + 1000 * table[t, (t * 5 + 1) % 48]
    return np.concatenate([acc, mixed.astype(np.uint32)])


def _h100_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A·Bᵀ as wgmma m64nNk16 accumulates it from zero: k16 slices in order, each through the tensor core's
    rounding as measured on the H100 (helpers.hopper.wgmma.dot_h100)."""
    from helpers.hopper import wgmma as wg

    af, bf = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[0]), np.float64)
    for k0 in range(0, a.shape[1], 16):
        acc = wg.dot_h100(af[:, None, k0:k0 + 16], bf[None, :, k0:k0 + 16], acc).astype(np.float64)
    return acc.astype(np.float32)


def _hilbert_order(n: int) -> np.ndarray:
    """The tiles of an n x n grid (row-major index) in the order a Hilbert curve visits them."""
    def d2xy(d: int) -> tuple[int, int]:
        x = y = 0
        s, t = 1, d
        while s < n:
            rx = 1 & (t // 2)
            ry = 1 & (t ^ rx)
            if ry == 0:
                if rx == 1:
                    x, y = s - 1 - x, s - 1 - y
                x, y = y, x
            x += s * rx
            y += s * ry
            t //= 4
            s *= 2
        return x, y

    return np.array([y * n + x for x, y in (d2xy(d) for d in range(n * n))], np.int32)
