"""Clusters on the executor: %cluster_ctarank, distributed shared memory (mapa + ld.shared::cluster), the cluster
barrier, an mbarrier arrive on another block, and a TMA load multicast to every block of the cluster."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu

CLUSTER = r"""
#include "hopper.cuh"
extern "C" __global__ void cluster_demo(const __grid_constant__ CUtensorMap tmap, int* ids, unsigned short* tiles) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long full, remote;
  __shared__ int mine;
  const unsigned rank = hopper::cluster_ctarank(), size = hopper::cluster_nctarank();
  if (threadIdx.x == 0) {
    mine = 100 * blockIdx.x + (int)rank;
    hopper::mbar_init(&full, 1);
    hopper::mbar_init(&remote, size - 1);
    hopper::mbar_fence_init();
  }
  hopper::cluster_sync();
  // every block but rank 0 arrives on rank 0's `remote` barrier
  if (threadIdx.x == 0 && rank != 0) hopper::mbar_arrive_cluster(&remote, 0);
  if (rank == 0) HOPPER_WAIT1(remote, 0);
  // read the next block's `mine` through distributed shared memory
  if (threadIdx.x == 0) {
    const unsigned peer = (rank + 1) % size;
    int v;
    asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(hopper::map_shared_rank(&mine, peer)));
    ids[blockIdx.x] = v;
  }
  // rank 0 multicasts one tile to every block of the cluster; each block expects the bytes on its own barrier
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&full, sizeof(tile));
  }
  hopper::cluster_sync();
  if (threadIdx.x == 0 && rank == 0)
    hopper::tma_load_2d_multicast(tile, &tmap, &full, 0, 64 * (blockIdx.x / size), (1u << size) - 1);
  HOPPER_WAIT1(full, 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) tiles[blockIdx.x * 64 * 64 + i] = tile[i];
  hopper::cluster_sync();  // nobody exits while a peer may still read its shared memory
}
"""


@pytest.mark.parametrize("size", [2, 4])
def test_cluster_dsmem_remote_arrive_and_multicast(size: int) -> None:
    k = gpu.compile(CLUSTER, "cluster_demo")
    blocks = 2 * size
    src = gpu.random_host((64 * 2, 64), gpu.bfloat16, seed=size).view(np.uint16)
    ids = gpu.poison(blocks, np.int32)
    tiles, dsrc = gpu.poison((blocks, 64, 64), np.uint16), gpu.to_device(src)
    gpu.launch(k, blocks, 128, 0, gpu.tensor_map_2d(dsrc, 64, 64, swizzle=0), ids, tiles, cluster=(size, 1, 1))
    got = ids.to_host().tolist()
    want = [100 * ((b // size) * size + (b % size + 1) % size) + (b % size + 1) % size for b in range(blocks)]
    assert got == want
    t = tiles.to_host()
    for b in range(blocks):
        assert np.array_equal(t[b], src[64 * (b // size):64 * (b // size) + 64])


def test_mapa_outside_the_cluster_is_a_fault() -> None:
    src = CLUSTER.replace("(rank + 1) % size", "size + 1")
    k = gpu.compile(src, "cluster_demo")
    dsrc = gpu.to_device(np.zeros((128, 64), np.uint16))
    tmap = gpu.tensor_map_2d(dsrc, 64, 64, swizzle=0)
    with pytest.raises(gpu.KernelFault, match="mapa to block rank 3 of a cluster of 2"):
        gpu.launch(k, 2, 128, 0, tmap, gpu.zeros(2, np.int32), gpu.zeros((2, 64, 64), np.uint16), cluster=(2, 1, 1))


def test_cluster_launch_rules() -> None:
    k = gpu.compile(CLUSTER, "cluster_demo")
    with pytest.raises(gpu.LaunchError, match="must be a multiple of the cluster"):
        gpu.launch(k, 3, 128, 0, None, None, None, cluster=(2, 1, 1))
