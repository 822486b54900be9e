"""CUDA-event timing (warm-up, median of many runs, rotated inputs) and the GEMM benchmark against cuBLAS."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrays import DeviceArray, bfloat16, random
from .device import H100_PEAK_BF16_TFLOPS, check, current, device_info, executor_active, require_hopper
from .errors import NoHopperError


def _needs_the_gpu(what: str) -> None:
    """Timings need the H100: the emulator runs kernels but has no notion of their speed."""
    if executor_active():
        require_hopper(what)
        raise NoHopperError(f"{what} needs the H100: kernels run on the emulator here (HELPERS_EXECUTOR=force), "
                            "which does not time them.")
    require_hopper(what)


@dataclass
class Timing:
    """Milliseconds per run, from CUDA events around each run."""

    median_ms: float
    min_ms: float
    max_ms: float
    times_ms: list[float] = field(repr=False)

    def __str__(self) -> str:
        return f"{self.median_ms:.4f} ms median ({self.min_ms:.4f}–{self.max_ms:.4f}, {len(self.times_ms)} runs)"


def time_kernel(fn: Callable[[], Any] | Sequence[Callable[[], Any]], *, warmup: int = 3, repeat: int = 20) -> Timing:
    """Time `fn` (a zero-argument callable that enqueues GPU work, e.g. gpu.prepare(...)) with CUDA events:
    `warmup` untimed runs, then `repeat` timed runs. A list of callables is rotated through (one per run), so
    each run can use different input buffers and a problem that fits in L2 is not measured from cache."""
    _needs_the_gpu("timing a kernel")
    from cuda.bindings import driver

    from .launch import wait

    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    stream = current()["stream_handle"]
    for i in range(warmup):
        fns[i % len(fns)]()
    wait()
    events = [(check(driver.cuEventCreate(0), "cuEventCreate"), check(driver.cuEventCreate(0), "cuEventCreate"))
              for _ in range(repeat)]
    try:
        for i, (start, end) in enumerate(events):
            check(driver.cuEventRecord(start, stream), "cuEventRecord")
            fns[(warmup + i) % len(fns)]()
            check(driver.cuEventRecord(end, stream), "cuEventRecord")
        wait()
        times = [float(check(driver.cuEventElapsedTime(s, e), "cuEventElapsedTime")) for s, e in events]
    finally:
        for s, e in events:
            driver.cuEventDestroy(s)
            driver.cuEventDestroy(e)
    return Timing(statistics.median(times), min(times), max(times), times)


@dataclass
class GemmBenchmark:
    """One GEMM size: the kernel and cuBLAS timed in the same run on the same rotated inputs."""

    m: int
    n: int
    k: int
    kernel_ms: float
    cublas_ms: float | None
    input_sets: int
    max_abs_error: float | None
    peak_tflops: float = H100_PEAK_BF16_TFLOPS

    @property
    def tflops(self) -> float:
        return 2 * self.m * self.n * self.k / (self.kernel_ms * 1e-3) / 1e12

    @property
    def cublas_tflops(self) -> float | None:
        return None if self.cublas_ms is None else 2 * self.m * self.n * self.k / (self.cublas_ms * 1e-3) / 1e12

    @property
    def ratio(self) -> float | None:
        """Kernel speed as a fraction of cuBLAS's (1.0 = as fast)."""
        return None if self.cublas_ms is None else self.cublas_ms / self.kernel_ms

    @property
    def fraction_of_peak(self) -> float:
        return self.tflops / self.peak_tflops

    def summary(self) -> str:
        s = (f"{self.m}×{self.n}×{self.k}: {self.tflops:.0f} TFLOP/s "
             f"({self.fraction_of_peak:.0%} of {self.peak_tflops:.0f} peak)")
        if self.cublas_ms is not None:
            s += f"; cuBLAS {self.cublas_tflops:.0f} TFLOP/s in the same run; ratio {self.ratio:.2f}"
        return s

    def __str__(self) -> str:
        return self.summary()


def check_gemm(c: np.ndarray, ref: np.ndarray, k: int) -> float:
    """Every element of C against a reference (fp32 accumulation both sides); NaN never passes. Returns the
    largest absolute error; raises AssertionError with the first bad element."""
    c32, r32 = c.astype(np.float32), ref.astype(np.float32)
    tol = 1e-2 * np.abs(r32) + 2e-3 * math.sqrt(k) + (1e-2 * np.abs(r32) if c.dtype == bfloat16 else 0)
    err = np.abs(c32 - r32)
    ok = err <= tol  # NaN compares False
    if not ok.all():
        i = np.unravel_index(np.argmin(ok), ok.shape)
        bad = int((~ok).sum())
        raise AssertionError(f"{bad} of {ok.size} elements wrong; first at {tuple(int(x) for x in i)}: got {c32[i]}, "
                             f"expected {r32[i]}")
    return float(err.max())


def gemm_benchmark(make_launch: Callable[[DeviceArray, DeviceArray, DeviceArray], Callable[[], Any]], m: int,
                   n: int, k: int, *, out_dtype: Any = np.float32, warmup: int = 5, repeat: int = 30,
                   check_result: bool = True, with_cublas: bool = True, seed: int = 0) -> GemmBenchmark:
    """Time a GEMM kernel beside cuBLAS. ``make_launch(A, B, C)`` gets A (M×K bf16), B (N×K bf16, K-major) and
    C (M×N, out_dtype) and returns a zero-argument launcher (e.g. ``gpu.prepare(...)``). Several input sets are
    rotated so that about three L2s' worth of data is touched; the result is checked (every element) against
    cuBLAS before timing."""
    _needs_the_gpu("the GEMM benchmark")
    from .cublas import gemm_launcher
    from .launch import wait

    info = device_info()
    l2 = info.l2_bytes if info else 50 * 2**20
    set_bytes = (m * k + n * k) * 2 + m * n * np.dtype(out_dtype).itemsize
    sets = max(1, min(16, math.ceil(3 * l2 / set_bytes)))
    A = [random((m, k), bfloat16, seed=seed + 2 * i) for i in range(sets)]
    B = [random((n, k), bfloat16, seed=seed + 2 * i + 1) for i in range(sets)]
    C = [DeviceArray((m, n), out_dtype).poison() for _ in range(sets)]
    kern = [make_launch(a, b, c) for a, b, c in zip(A, B, C, strict=True)]
    max_err = None
    cub = None
    if with_cublas:
        Cref = [DeviceArray((m, n), out_dtype) for _ in range(sets)]
        cub = [gemm_launcher(a, b, c) for a, b, c in zip(A, B, Cref, strict=True)]
    if check_result:
        kern[0]()
        wait()
        got = C[0].to_host()
        if with_cublas:
            ref32 = DeviceArray((m, n), np.float32)
            gemm_launcher(A[0], B[0], ref32)()
            wait()
            ref = ref32.to_host()
        else:
            ref = A[0].to_host().astype(np.float32) @ B[0].to_host().astype(np.float32).T
        max_err = check_gemm(got, ref, k)
    t = time_kernel(kern, warmup=warmup, repeat=repeat)
    tc = time_kernel(cub, warmup=warmup, repeat=repeat) if cub else None
    return GemmBenchmark(m, n, k, t.median_ms, tc.median_ms if tc else None, sets, max_err)
