"""Fixtures of the executor's tests: every test here runs kernels on the emulator (HELPERS_EXECUTOR=force), with
or without a GPU on the machine."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="package", autouse=True)
def _emulator() -> Any:
    """HELPERS_EXECUTOR=force for the tests of this folder only (module-scoped fixtures included)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HELPERS_EXECUTOR", "force")
    yield
    mp.undo()


def gemm_operands(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    from helpers import gpu

    return gpu.random_host((m, k), gpu.bfloat16, seed=seed), gpu.random_host((n, k), gpu.bfloat16, seed=seed + 1)


def h100_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A·Bᵀ as an H100 accumulates it with wgmma m64nNk16: k16 slices in order, each through the tensor core's
    fitted numerics (helpers.hopper.wgmma.dot_h100), starting from zero."""
    from helpers.hopper import wgmma as wg

    af = a.astype(np.float32).astype(np.float64)
    bf = b.astype(np.float32).astype(np.float64)
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for k0 in range(0, a.shape[1], 16):
        acc = wg.dot_h100(af[:, None, k0:k0 + 16], bf[None, :, k0:k0 + 16], acc.astype(np.float64))
    return acc


def launch_gemm(kernel: Any, a: np.ndarray, b: np.ndarray, grid: Any, block: int, smem: int,
                box_a: tuple[int, int] = (64, 64), box_b: tuple[int, int] = (64, 64)) -> np.ndarray:
    """Run a course GEMM kernel (tensor maps over A and B, C poisoned) and return C."""
    from helpers import gpu

    (m, k), n = a.shape, b.shape[0]
    da, db = gpu.to_device(a), gpu.to_device(b)
    dc = gpu.poison((m, n), np.float32)
    ta, tb = gpu.tensor_map_2d(da, *box_a), gpu.tensor_map_2d(db, *box_b)
    gpu.launch(kernel, grid, block, smem, ta, tb, dc, np.int32(m), np.int32(n), np.int32(k))
    return dc.to_host()
