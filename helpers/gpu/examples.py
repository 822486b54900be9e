"""Small kernels that show the runtime's behaviour: a deliberate deadlock, an out-of-bounds write, a misaligned
access, a working vector add. Used by the tests, by docs/gpu.md and by lessons that demonstrate failures.
The ``*_demo`` functions are module-level so that ``gpu.run_isolated`` can run them in a child process."""

from __future__ import annotations

from typing import Any

import numpy as np

#: Block (3,0) never arrives on full[2]; every other block does. Its threads wait on full[2] for parity 0.
DEADLOCK = r"""
#include "hopper.cuh"
extern "C" __global__ void stuck(float* out) {
  __shared__ alignas(8) unsigned long long full[4];
  if (threadIdx.x == 0) {
    for (int i = 0; i < 4; ++i) hopper::mbar_init(&full[i], 1);
    hopper::mbar_fence_init();
  }
  __syncthreads();
  const int stage = 2;
  if (threadIdx.x == 0 && blockIdx.x != 3) hopper::mbar_arrive(&full[stage]);
  HOPPER_WAIT(full, stage, 0);
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}
"""

#: Writes far past the end of its array: an illegal address.
OUT_OF_BOUNDS = r"""
extern "C" __global__ void oob(float* x, long long offset) {
  x[offset + threadIdx.x] = 1.0f;
}
"""

#: A 16-byte store to an address that is 4 bytes off: a misaligned address.
MISALIGNED = r"""
extern "C" __global__ void misaligned(float* x) {
  float4* p = reinterpret_cast<float4*>(x + 1);
  p[threadIdx.x] = make_float4(1.f, 2.f, 3.f, 4.f);
}
"""

VECTOR_ADD = r"""
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + alpha * b[i];
}
"""


def deadlock_demo() -> None:
    """Launch DEADLOCK on 8 blocks of 256 threads (raises KernelDeadlock naming block (3,0) and full[2])."""
    from helpers import gpu

    k = gpu.compile(DEADLOCK, "stuck")
    out = gpu.empty(8 * 256, np.float32)
    gpu.launch(k, 8, 256, 0, out)


def out_of_bounds_demo() -> None:
    """Launch OUT_OF_BOUNDS with an offset of 2**40 floats (raises KernelFault: illegal address)."""
    from helpers import gpu

    k = gpu.compile(OUT_OF_BOUNDS, "oob")
    x = gpu.empty(1024, np.float32)
    gpu.launch(k, 1, 32, 0, x, np.int64(1 << 40))


def misaligned_demo() -> None:
    """Launch MISALIGNED (raises KernelFault: misaligned address)."""
    from helpers import gpu

    k = gpu.compile(MISALIGNED, "misaligned")
    x = gpu.empty(1024, np.float32)
    gpu.launch(k, 1, 32, 0, x)


def vector_add_demo(n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Run VECTOR_ADD and return the inputs and output (for checking in the parent process)."""
    from helpers import gpu

    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    k = gpu.compile(VECTOR_ADD, "vadd")
    da, db, dc = gpu.to_device(a), gpu.to_device(b), gpu.poison(n, np.float32)
    gpu.launch(k, (n + 127) // 128, 128, 0, da, db, dc, np.int32(n), np.float32(2.0))
    return {"a": a, "b": b, "c": dc.to_host()}
