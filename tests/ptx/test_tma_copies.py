"""TMA on the executor beyond the labs' 2-D loads: stores (and their bulk groups), the rank-3 wide box of Lab 1
(64 rows x 128 columns under the 128B swizzle in one instruction), plain bulk copies, expect_tx and inval."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu
from helpers.hopper import tma
from helpers.hopper.tensormap import DataType, Swizzle, encode_tiled

ROUND_TRIP = r"""
#include "hopper.cuh"
extern "C" __global__ void round_trip(const __grid_constant__ CUtensorMap src, const __grid_constant__ CUtensorMap dst,
                                      const unsigned char* raw, unsigned char* raw_out, int c0, int c1) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(16) unsigned char bytes[256];
  __shared__ alignas(8) unsigned long long full, bulk;
  if (threadIdx.x == 0) {
    hopper::mbar_init(&full, 1);
    hopper::mbar_init(&bulk, 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&full, sizeof(tile));
    hopper::tma_load_2d(tile, &src, &full, c0, c1);
    hopper::mbar_expect_tx(&bulk, sizeof(bytes));
    hopper::bulk_load(bytes, raw, sizeof(bytes), &bulk);
    hopper::mbar_arrive(&bulk);
  }
  HOPPER_WAIT1(full, 0);
  HOPPER_WAIT1(bulk, 0);
  for (int i = threadIdx.x; i < 256; i += blockDim.x) raw_out[i] = bytes[255 - i];
  hopper::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::tma_store_2d(&dst, tile, c1, c0);
    hopper::tma_store_commit();
    hopper::tma_store_wait_read<0>();
    hopper::tma_store_wait<0>();
    hopper::mbar_inval(&full);
  }
}
"""


def test_tma_load_store_and_bulk_copy() -> None:
    k = gpu.compile(ROUND_TRIP, "round_trip")
    a = gpu.random_host((128, 192), gpu.bfloat16, seed=1).view(np.uint16)
    da = gpu.to_device(a)
    out = gpu.poison((192, 192), np.uint16)
    raw = np.random.default_rng(2).integers(0, 256, 256).astype(np.uint8)
    raw_out = gpu.poison(256, np.uint8)
    gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(out, 64, 64), gpu.to_device(raw),
               raw_out, np.int32(128), np.int32(64))
    got = out.to_host()
    assert np.array_equal(got[128:192, 64:128], a[64:128, 128:192])  # stored at (c1, c0) = (64, 128)
    mask = np.ones_like(got, bool)
    mask[128:192, 64:128] = False
    assert (got[mask] == 0xFFFF).all()  # nothing else written
    assert np.array_equal(raw_out.to_host(), raw[::-1])


WIDE = r"""
#include "hopper.cuh"
// Lab 1's wide box: a rank-3 map (64, rows, cols / 64) with strides (row_bytes, 128) and box (64, 64, 2) loads a
// 64-row x 128-column bf16 tile under the 128B swizzle in one instruction: two 8 KiB halves, one after the other.
extern "C" __global__ void wide(const __grid_constant__ CUtensorMap map, unsigned short* out, int row0, int half0) {
  __shared__ alignas(1024) unsigned short tile[2 * 64 * 64];
  __shared__ alignas(8) unsigned long long full;
  if (threadIdx.x == 0) { hopper::mbar_init(&full, 1); hopper::mbar_fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&full, sizeof(tile));
    hopper::tma_load_3d(tile, &map, &full, 0, row0, half0);
  }
  HOPPER_WAIT1(full, 0);
  for (int i = threadIdx.x; i < 2 * 64 * 64; i += blockDim.x) out[i] = tile[i];
}
"""


def test_rank3_wide_box_matches_the_emulator() -> None:
    k = gpu.compile(WIDE, "wide")
    rows, cols = 128, 256
    a = gpu.random_host((rows, cols), gpu.bfloat16, seed=3).view(np.uint16)
    da = gpu.to_device(a)
    m = gpu.encode_tiled(gpu.bfloat16, da.ptr, [64, rows, cols // 64], [cols * 2, 128], [64, 64, 2], swizzle=128)
    out = gpu.poison(2 * 64 * 64, np.uint16)
    gpu.launch(k, 1, 128, 0, m, out, np.int32(64), np.int32(2))
    ref = encode_tiled(DataType.BFLOAT16, 3, 0, (64, rows, cols // 64), (cols * 2, 128), (64, 64, 2), (1, 1, 1),
                       swizzle=Swizzle.B128)
    want = tma.load_tile(ref, a, (0, 64, 2), smem_address=1024).view(np.uint16)
    assert np.array_equal(out.to_host(), want)


def test_refused_tma_copies_are_faults() -> None:
    k = gpu.compile(WIDE, "wide")
    a = gpu.to_device(np.zeros((128, 256), np.uint16))
    m = gpu.encode_tiled(np.uint16, a.ptr, [64, 128, 4], [512, 128], [64, 64, 2], swizzle=128)
    bad = WIDE.replace("tma_load_3d(tile, &map, &full, 0, row0, half0)", "tma_load_3d(tile, &map, &full, 4, row0, "
                       "half0)")
    with pytest.raises(gpu.KernelFault, match=r"illegal instruction .*coords\[0\] = 4 puts the box's first row at "
                                              r"byte 8"):
        gpu.launch(gpu.compile(bad, "wide"), 1, 128, 0, m, gpu.zeros(8192, np.uint16), np.int32(0), np.int32(0))
    assert k is not None


def test_a_store_still_in_flight_when_the_block_exits_completes() -> None:
    src = ROUND_TRIP.replace("    hopper::tma_store_wait_read<0>();\n    hopper::tma_store_wait<0>();\n", "")
    k = gpu.compile(src, "round_trip")
    a = gpu.random_host((128, 192), gpu.bfloat16, seed=4).view(np.uint16)
    out, da = gpu.poison((192, 192), np.uint16), gpu.to_device(a)
    gpu.launch(k, 1, 128, 0, gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(out, 64, 64),
               gpu.to_device(np.zeros(256, np.uint8)), gpu.poison(256, np.uint8), np.int32(0), np.int32(0))
    assert np.array_equal(out.to_host()[:64, :64], a[:64, :64])
