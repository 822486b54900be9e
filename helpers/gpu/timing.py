"""CUDA-event timing (warm-up, median of many runs, rotated inputs) and the GEMM benchmark against cuBLAS.

A ratio to cuBLAS is measured **interleaved**: the kernel and cuBLAS take turns, round after round, on the same
rotated inputs, and the ratio is the median of the per-round ratios with its min–max. The H100 is power-bound, so
its clock drifts within a run; a ratio built from two measurements taken at different moments moves with that
drift, while each round's ratio compares the two sides at nearly the same clock. The SM clock and power of each
side are sampled (NVML) and a comparison says when the two sides ran at different clocks.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .arrays import DeviceArray, bfloat16, random
from .clocks import SideTelemetry, Telemetry
from .device import check, current, device_info, executor_active, require_hopper
from .errors import NoHopperError
from .hardware import this_gpu


def _needs_the_gpu(what: str) -> None:
    """Timings need a Hopper GPU: the emulator runs kernels but has no notion of their speed."""
    if executor_active():
        require_hopper(what)
        raise NoHopperError(f"{what} needs a Hopper GPU: kernels run on the emulator here (HELPERS_EXECUTOR=force), "
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
    fns = list(fn) if isinstance(fn, Sequence) else [fn]
    times = time_runs(fns, repeat, warmup=warmup)
    return Timing(statistics.median(times), min(times), max(times), times)


#: the two sides of a comparison count as run at different clocks when their median SM clocks differ by more
#: than this fraction
CLOCK_TOLERANCE = 0.02


def time_runs(fns: Sequence[Callable[[], Any]], runs: int, *, start: int = 0, warmup: int = 0) -> list[float]:
    """Milliseconds of each of `runs` runs (CUDA events around each), rotating through `fns` from index `start`
    (after `warmup` untimed runs); waits for the GPU at the end."""
    _needs_the_gpu("timing a kernel")
    from cuda.bindings import driver

    from .launch import wait

    stream = current()["stream_handle"]
    for i in range(warmup):
        fns[(start + i) % len(fns)]()
    events = [(check(driver.cuEventCreate(0), "cuEventCreate"), check(driver.cuEventCreate(0), "cuEventCreate"))
              for _ in range(runs)]
    try:
        for i, (begin, end) in enumerate(events):
            check(driver.cuEventRecord(begin, stream), "cuEventRecord")
            fns[(start + warmup + i) % len(fns)]()
            check(driver.cuEventRecord(end, stream), "cuEventRecord")
        wait()
        return [float(check(driver.cuEventElapsedTime(b, e), "cuEventElapsedTime")) for b, e in events]
    finally:
        for b, e in events:
            driver.cuEventDestroy(b)
            driver.cuEventDestroy(e)


@dataclass
class Interleaved:
    """Two sides timed in turns: the median milliseconds of each side in each round, which side went first, and
    the clock and power each side ran at. ``ratios[i]`` is side B's time over side A's in round i, so a ratio
    above 1 means A (the kernel) was faster."""

    a_round_ms: list[float]
    b_round_ms: list[float]
    first: list[str]
    a_telemetry: SideTelemetry | None = None
    b_telemetry: SideTelemetry | None = None
    clock_tolerance: float = CLOCK_TOLERANCE

    @property
    def rounds(self) -> int:
        return len(self.a_round_ms)

    @property
    def ratios(self) -> list[float]:
        return [b / a for a, b in zip(self.a_round_ms, self.b_round_ms, strict=True)]

    @property
    def ratio(self) -> float:
        """The median of the per-round ratios."""
        return statistics.median(self.ratios)

    @property
    def ratio_range(self) -> tuple[float, float]:
        r = self.ratios
        return min(r), max(r)

    @property
    def a_ms(self) -> float:
        return statistics.median(self.a_round_ms)

    @property
    def b_ms(self) -> float:
        return statistics.median(self.b_round_ms)

    @property
    def clock_differs(self) -> bool | None:
        """True when the two sides' median SM clocks differ by more than ``clock_tolerance`` (None: no clock)."""
        ca = self.a_telemetry.mhz_median if self.a_telemetry else None
        cb = self.b_telemetry.mhz_median if self.b_telemetry else None
        if ca is None or cb is None:
            return None
        return abs(ca - cb) > self.clock_tolerance * max(ca, cb)

    def summary(self, a: str = "kernel", b: str = "cuBLAS") -> str:
        lo, hi = self.ratio_range
        s = f"{self.ratio:.3f}× {b} [{lo:.3f}–{hi:.3f}] over {self.rounds} interleaved rounds"
        if self.a_telemetry and self.b_telemetry:
            s += f"; {a}: {self.a_telemetry.summary()}; {b}: {self.b_telemetry.summary()}"
        if self.clock_differs:
            s += "; CLOCKS DIFFER between the sides"
        return s


def interleave(side_a: Callable[[], Sequence[float]], side_b: Callable[[], Sequence[float]], *, rounds: int = 9,
               telemetry: Telemetry | None = None, labels: tuple[str, str] = ("a", "b"),
               clock_tolerance: float = CLOCK_TOLERANCE) -> Interleaved:
    """Run ``side_a`` and ``side_b`` in turns for `rounds` rounds; each call runs one batch of its side, waits for
    it and returns the milliseconds of each run. The side that goes first alternates (A then B, B then A, ...), so
    neither always follows the other. With a :class:`~helpers.gpu.clocks.Telemetry` (entered), each side's
    batches are labelled so its clock and power are known."""
    if rounds < 1 or labels[0] == labels[1]:
        raise ValueError("interleave needs at least one round and two different labels")
    sides = {labels[0]: side_a, labels[1]: side_b}
    per_round: dict[str, list[float]] = {labels[0]: [], labels[1]: []}
    first = []
    for i in range(rounds):
        order = labels if i % 2 == 0 else labels[::-1]
        first.append(order[0])
        for name in order:
            if telemetry is not None:
                with telemetry.side(name):
                    times = list(sides[name]())
            else:
                times = list(sides[name]())
            if not times:
                raise ValueError(f"side {name!r} returned no times")
            per_round[name].append(statistics.median(times))
    tel = telemetry.sides if telemetry is not None else {}
    return Interleaved(per_round[labels[0]], per_round[labels[1]], first, tel.get(labels[0]), tel.get(labels[1]),
                       clock_tolerance)


@dataclass
class GemmBenchmark:
    """One GEMM size: the kernel and cuBLAS timed in turns (interleaved rounds) on the same rotated inputs.
    ``kernel_ms`` and ``cublas_ms`` are medians of the per-round medians; ``ratio`` is the median of the per-round
    ratios (``ratio_range`` their min–max); ``interleaved`` holds the rounds, clocks and power."""

    m: int
    n: int
    k: int
    kernel_ms: float
    cublas_ms: float | None
    input_sets: int
    max_abs_error: float | None
    peak_tflops: float = field(default_factory=lambda: this_gpu().peak_bf16_tflops)
    interleaved: Interleaved | None = None

    @property
    def tflops(self) -> float:
        return 2 * self.m * self.n * self.k / (self.kernel_ms * 1e-3) / 1e12

    @property
    def cublas_tflops(self) -> float | None:
        return None if self.cublas_ms is None else 2 * self.m * self.n * self.k / (self.cublas_ms * 1e-3) / 1e12

    @property
    def ratio(self) -> float | None:
        """Kernel speed as a fraction of cuBLAS's (1.0 = as fast): the median of the per-round ratios."""
        if self.interleaved is not None:
            return self.interleaved.ratio
        return None if self.cublas_ms is None else self.cublas_ms / self.kernel_ms

    @property
    def ratio_range(self) -> tuple[float, float] | None:
        return self.interleaved.ratio_range if self.interleaved is not None else None

    @property
    def clock_differs(self) -> bool | None:
        return self.interleaved.clock_differs if self.interleaved is not None else None

    @property
    def fraction_of_peak(self) -> float:
        return self.tflops / self.peak_tflops

    def summary(self) -> str:
        s = (f"{self.m}×{self.n}×{self.k}: {self.tflops:.0f} TFLOP/s "
             f"({self.fraction_of_peak:.0%} of {self.peak_tflops:.0f} peak)")
        if self.cublas_ms is not None:
            s += f"; cuBLAS {self.cublas_tflops:.0f} TFLOP/s"
            if self.interleaved is not None:
                s += f"; {self.interleaved.summary()}"
            else:
                s += f" in the same run; ratio {self.ratio:.2f}"
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


#: The least GPU time (ms) of one side's batch in an interleaved comparison: several NVML samples fall inside it.
MIN_BATCH_MS = 40.0


def rounds_for(repeat: int, rounds: int) -> int:
    """Runs per side in each round so that the rounds together time about `repeat` runs (at least 3 a round)."""
    return max(3, math.ceil(repeat / rounds))


def gemm_inputs(m: int, n: int, k: int, out_dtype: Any = np.float32, seed: int = 0, sides: int = 2,
                ) -> tuple[list[DeviceArray], list[DeviceArray], list[list[DeviceArray]]]:
    """Random bf16 inputs A (M×K) and B (N×K), enough sets that one pass over them touches about three L2s, and
    `sides` sets of poisoned outputs C (M×N, out_dtype): ``(A, B, [C of side 0, C of side 1, ...])``."""
    info = device_info()
    l2 = info.l2_bytes if info else 50 * 2**20
    set_bytes = (m * k + n * k) * 2 + m * n * np.dtype(out_dtype).itemsize
    sets = max(1, min(16, math.ceil(3 * l2 / set_bytes)))
    A = [random((m, k), bfloat16, seed=seed + 2 * i) for i in range(sets)]
    B = [random((n, k), bfloat16, seed=seed + 2 * i + 1) for i in range(sets)]
    C = [[DeviceArray((m, n), out_dtype).poison() for _ in range(sets)] for _ in range(sides)]
    return A, B, C


def gemm_benchmark(make_launch: Callable[[DeviceArray, DeviceArray, DeviceArray], Callable[[], Any]] | None, m: int,
                   n: int, k: int, *, out_dtype: Any = np.float32, warmup: int = 5, repeat: int = 30,
                   rounds: int = 7, check_result: bool = True, with_cublas: bool = True, seed: int = 0,
                   telemetry: bool = True) -> GemmBenchmark:
    """Time a GEMM kernel beside cuBLAS, interleaved. ``make_launch(A, B, C)`` gets A (M×K bf16), B (N×K bf16,
    K-major) and C (M×N, out_dtype) and returns a zero-argument launcher (e.g. ``gpu.prepare(...)``); None times
    cuBLAS against itself (the noise floor: what a ratio of 1.01 is worth). Several input sets are rotated so that
    about three L2s' worth of data is touched; the result is checked (every element) against cuBLAS first. Then
    `rounds` rounds (at least 7 with cuBLAS) of the kernel and cuBLAS in turns, each a batch of about
    ``repeat / rounds`` runs (more where that is under :data:`MIN_BATCH_MS` of GPU time) after one untimed run, both
    sides on the same input sets; the SM clock and power of each side are sampled."""
    _needs_the_gpu("the GEMM benchmark")
    from .cublas import gemm_launcher
    from .launch import wait

    if make_launch is None and not with_cublas:
        raise ValueError("the noise floor (make_launch=None) is cuBLAS against itself: with_cublas must stay True")
    A, B, (C, Cref) = gemm_inputs(m, n, k, out_dtype, seed)
    sets = len(A)
    if make_launch is None:
        kern = [gemm_launcher(a, b, c) for a, b, c in zip(A, B, C, strict=True)]
    else:
        kern = [make_launch(a, b, c) for a, b, c in zip(A, B, C, strict=True)]
    cub = [gemm_launcher(a, b, c) for a, b, c in zip(A, B, Cref, strict=True)] if with_cublas else None
    max_err = None
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
    time_runs(kern, warmup, warmup=0)
    if cub is None:
        t = time_kernel(kern, warmup=0, repeat=repeat)
        return GemmBenchmark(m, n, k, t.median_ms, None, sets, max_err)
    time_runs(cub, warmup, warmup=0)
    rounds = max(rounds, 7)
    # each side's batch lasts at least MIN_BATCH_MS of GPU time, so the GPU works in a steady state (not in short
    # bursts between Python calls) and the clock and power sampled during a batch are that side's
    run_ms = statistics.median(time_runs(cub, 3, warmup=0))
    per_round = max(rounds_for(repeat, rounds), math.ceil(MIN_BATCH_MS / max(run_ms, 1e-3)))
    labels = ("kernel", "cuBLAS") if make_launch is not None else ("cuBLAS", "cuBLAS again")
    with Telemetry() if telemetry else contextlib.nullcontext() as tel:
        inter = interleave(batches(kern, per_round), batches(cub, per_round), rounds=rounds, telemetry=tel,
                           labels=labels)
    return GemmBenchmark(m, n, k, inter.a_ms, inter.b_ms, sets, max_err, interleaved=inter)


def interleave_kernels(make_a: Callable[[DeviceArray, DeviceArray, DeviceArray], Callable[[], Any]],
                       make_b: Callable[[DeviceArray, DeviceArray, DeviceArray], Callable[[], Any]], m: int, n: int,
                       k: int, *, out_dtype: Any = np.float32, rounds: int = 9, seed: int = 0,
                       labels: tuple[str, str] = ("a", "b")) -> Interleaved:
    """Two GEMM kernels against each other, as :func:`gemm_benchmark` times a kernel against cuBLAS: the same
    rotated input sets, batches of at least :data:`MIN_BATCH_MS`, ``rounds`` rounds in turns, each side's SM clock
    and power sampled. The ratio is b's time over a's (above 1: a is faster)."""
    _needs_the_gpu("timing two kernels")
    A, B, (Ca, Cb) = gemm_inputs(m, n, k, out_dtype, seed)
    fa = [make_a(a, b, c) for a, b, c in zip(A, B, Ca, strict=True)]
    fb = [make_b(a, b, c) for a, b, c in zip(A, B, Cb, strict=True)]
    time_runs(fa, 3, warmup=0)
    time_runs(fb, 3, warmup=0)
    run_ms = max(statistics.median(time_runs(fa, 3)), statistics.median(time_runs(fb, 3)))
    per_round = max(5, math.ceil(MIN_BATCH_MS / max(run_ms, 1e-3)))
    with Telemetry() as tel:
        return interleave(batches(fa, per_round), batches(fb, per_round), rounds=rounds, telemetry=tel,
                          labels=labels)


def batches(fns: Sequence[Callable[[], Any]], per_round: int) -> Callable[[], list[float]]:
    """One side of an interleaved comparison: each call times ``per_round`` runs of the launchers ``fns`` in turn
    (after one untimed run), going on through the input sets from where the last batch stopped."""
    cursor = [0]

    def run() -> list[float]:
        times = time_runs(fns, per_round, start=cursor[0], warmup=1)
        cursor[0] += per_round + 1
        return times

    return run
