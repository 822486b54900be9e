"""Kernels that ask the hardware what the Hopper model says: Lab 5's sub-tile epilogue and bf16 rounding, run on
the H100 (or wherever ``helpers.gpu`` runs kernels), for the lessons to put beside ``helpers.hopper.epilogue``."""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers import gpu
from helpers.hopper import epilogue

__all__ = ["EPILOGUE_KERNEL", "epilogue_on_gpu", "round_on_gpu"]

#: One warpgroup runs Lab 5's sub-tile epilogue on given fragments: rounds them with cvt.rn.bf16x2.f32 into a
#: 128B-swizzled 1024-aligned buffer, fences, meets, copies the raw buffer out (``image``) and TMA-stores it into C
#: at (row0, col0). A second kernel converts pairs of floats with the same instruction (``bits``).
EPILOGUE_KERNEL = r"""
#include "hopper.cuh"
#include <cuda_bf16.h>

extern "C" __global__ void __launch_bounds__(128)
epilogue_probe(const __grid_constant__ CUtensorMap tmap_c, const float* frags, unsigned char* image, int row0,
               int col0) {
  __shared__ alignas(1024) unsigned char buf[64 * 128];
  const int tid = threadIdx.x, w = tid / 32, l = tid % 32;
  const float* d = frags + tid * 32;
  for (int j = 0; j < 32; j += 2) {
    const int r = 16 * w + l / 4 + 8 * ((j / 2) % 2);
    const int chunk = (j / 4) ^ (r % 8);
    *reinterpret_cast<__nv_bfloat162*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) =
        __floats2bfloat162_rn(d[j], d[j + 1]);
  }
  hopper::fence_proxy_async();
  __syncthreads();
  for (int i = tid; i < 64 * 128; i += 128) image[i] = buf[i];
  if (tid == 0) {
    hopper::tma_store_2d(&tmap_c, buf, col0, row0);
    hopper::tma_store_commit();
    hopper::tma_store_wait<0>();
  }
}

extern "C" __global__ void round_probe(const float* x, unsigned* bits, int pairs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < pairs) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
    bits[i] = *reinterpret_cast<unsigned*>(&v);
  }
}
"""


def epilogue_on_gpu(frags: np.ndarray, c_shape: tuple[int, int], row0: int, col0: int) -> tuple[Any, Any] | None:
    """Run :data:`EPILOGUE_KERNEL` (on a Hopper GPU, or wherever ``helpers.gpu`` can run kernels) on (128, 32) fp32
    fragments; return (the 8192-byte shared image, the bf16 C as uint16 after the TMA store into a C poisoned with
    0xFF bytes, of ``c_shape``). Where nothing can run: print the compile report and return None. Compare with
    :func:`helpers.hopper.epilogue.stage_subtile` and :func:`~helpers.hopper.epilogue.store_subtile`."""
    kernel = gpu.compile(EPILOGUE_KERNEL, "epilogue_probe")
    if gpu.skip_without_hopper(kernel, checked="stage_subtile and store_subtile on the emulator"):
        return None
    dev_frags = gpu.to_device(np.ascontiguousarray(frags, dtype=np.float32))
    image = gpu.poison(epilogue.SUB_BYTES, np.uint8)
    c = gpu.poison(tuple(c_shape), gpu.bfloat16)
    gpu.launch(kernel, 1, 128, 0, gpu.tensor_map_2d(c, epilogue.SUB, epilogue.SUB), dev_frags, image, np.int32(row0),
               np.int32(col0))
    return gpu.to_host(image), gpu.to_host(c).view(np.uint16)


def round_on_gpu(x: np.ndarray) -> np.ndarray | None:
    """``cvt.rn.bf16x2.f32`` of every value of ``x`` (even length), as uint16 bits, run like :func:`epilogue_on_gpu`;
    None where nothing can run."""
    kernel = gpu.compile(EPILOGUE_KERNEL, "round_probe")
    if gpu.skip_without_hopper(kernel, checked="to_bf16_bits on the emulator"):
        return None
    x = np.ascontiguousarray(x, dtype=np.float32)
    pairs = x.size // 2
    out = gpu.poison(pairs, np.uint32)
    gpu.launch(kernel, -(-pairs // 128), 128, 0, gpu.to_device(x), out, np.int32(pairs))
    return gpu.to_host(out).view(np.uint16).reshape(-1)
