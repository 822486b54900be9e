"""Graders of Lab 9 (Stream-K on the Lab 7 kernel): the iteration space, the Stream-K ranges, the hybrid work list,
the block-striped workspace moves, the ordered fix-up protocol (all on the emulator), and the CUDA kernel (compiled
and checked in its PTX everywhere; run against fp64 and repeated bit for bit wherever kernels run: on the H100 on every
co-resident cluster, on the course's PTX executor on three clusters and small shapes that still have first, middle
and final splits and whole pairs; timed beside Lab 7 and cuBLAS on the H100 only).

Conventions: the work unit is a cluster's pair of 128×256 tiles (256×256 of C), K in 64-wide steps. The model's
"CTA" is a cluster; ``ctas`` is how many run at once (the resident pairs of blocks: ``helpers.hopper.parts``).

The kernel graded is the student's own: their Lab 7 kernel (read from lab7_clusters.ipynb beside this notebook, put
together with their Labs 6, 5 and 4 as Lab 7 graded it, and checked quickly with Lab 7's check; the course's Lab 7
kernel stands in where theirs is missing or does not pass) merged with this lab's change and their Lab 9 regions
(:mod:`helpers.course.carry`), after their wrappers of Labs 1 and 2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from helpers.course import carry, grading
from helpers.course.hints import answer, hint
from helpers.hopper import parts as _parts
from helpers.hopper import streamk as sk
from helpers.hopper import striped

from ._common import Opening

#: the parts the cases below are named after
_SXM, _PCIE, _H20 = (_parts.PROFILES[k] for k in ("h100-sxm", "h100-pcie", "h20"))

__all__ = [
    "check_iteration_space", "check_stream_k_pieces", "check_work_list", "check_striped", "check_fixup_plan",
    "check_streamk_kernel", "check_packed_reduction", "ptx_protocol", "lab7_source", "lab9_reference_source",
    "hint", "opening", "previous",
    "answer", "emulator_cases", "roles_of", "owner_slots", "KERNEL_NAME", "SMEM_BYTES", "QUANTIZED",
    "EMULATED_CLUSTERS", "ladder_rows", "show_ladder",
]

ROOT = Path(__file__).resolve().parents[3]
KERNEL_NAME = "lab9_gemm"
SMEM_BYTES = 4 * 48 * 1024 + 32 * 1024 + 1024  # 4 stages of A+B, two consumers' epilogue buffers, alignment slack
QUANTIZED = [(1024, 1024, 16384), (1024, 4352, 8192)]  # the wave-quantized shapes the targets are about
TARGET = 1.2  # the lab's target: at least this times Lab 7's speed on the quantized shapes



def _call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "") -> Any:
    """Call the student's function; an exception other than NotImplementedError fails the check in words."""
    try:
        return grading.call_student(fn, *args)
    except (grading.CheckFailed, NotImplementedError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported to the student
        c.fail(f"{what}: your function raised {type(exc).__name__}: {exc}", hint=hint)


def _rng(seed: int | None) -> grading.SeededRng:
    return grading.fresh_rng(seed)


def _ctas(n: int) -> str:
    return f"{n} CTA" + ("" if n == 1 else "s")


# =========================================================================================================
# 1 · the iteration space
# =========================================================================================================
_SPACE_EDGES = [(256, 256, 64), (257, 256, 64), (256, 257, 65), (8, 8, 8), (1, 1, 1), (255, 511, 63),
                (1024, 1024, 16384), (1024, 4352, 8192), (4096, 4096, 4104), (8192, 8, 8), (512, 768, 192),
                (300, 520, 6000), (65536, 256, 64)]


def _space_hint(got: Any, M: int, N: int, K: int) -> str:
    tiles, steps = sk.iteration_space(M, N, K)
    if got == ((M // 256) * (N // 256), K // 64):
        return "a shape that is not a multiple of 256 (or K of 64) still needs its last, partial tile (step): round up"
    if got == (math.ceil(M / 128) * math.ceil(N / 256), steps):
        return "the work unit is a cluster's PAIR of 128×256 tiles: 256×256 of C"
    if got == (math.ceil(M / 256), math.ceil(N / 256)) or got == (math.ceil(M / 256) * math.ceil(N / 256),):
        return "return (tiles, K steps): tiles = pairs along M × pairs along N, K steps = ceil(K / 64)"
    if isinstance(got, tuple) and len(got) == 2 and got[0] == tiles:
        return "the K steps are 64 wide: ceil(K / 64)"
    return "tiles = ceil(M / 256) · ceil(N / 256), K steps = ceil(K / 64)"


def check_iteration_space(iteration_space: Callable[[int, int, int], tuple[int, int]], *,
                          seed: int | None = None) -> None:
    """Grade ``iteration_space(M, N, K) -> (tiles, k_steps)`` on edge shapes and random ones."""
    rng = _rng(seed)
    with grading.check("Lab 9 · the iteration space", seed=rng.seed) as c:
        shapes = list(_SPACE_EDGES)
        shapes += [tuple(int(x) for x in 8 * rng.integers(1, 2500, size=3)) for _ in range(12)]
        shapes += [tuple(int(x) for x in rng.integers(1, 20000, size=3)) for _ in range(8)]
        for i, (M, N, K) in enumerate(shapes):
            what = f"iteration_space({M}, {N}, {K})"
            got = _call(c, what, iteration_space, M, N, K)
            want = sk.iteration_space(M, N, K)
            try:
                got_t = tuple(int(x) for x in got)
            except (TypeError, ValueError):
                c.fail(what, want, got, hint="return a pair of ints: (tiles, K steps)")
            if got_t != want:
                c.fail(what, want, got_t, hint=_space_hint(got_t, M, N, K))
            if i == len(_SPACE_EDGES) - 1:
                c.ok(f"{len(_SPACE_EDGES)} edge shapes (exact multiples, one past, below one tile, K not a multiple "
                     "of 64, the two quantized shapes)")
        c.ok(f"{len(shapes) - len(_SPACE_EDGES)} random shapes")


# =========================================================================================================
# 2 · the Stream-K ranges, 3 · the hybrid work list
# =========================================================================================================
#: (ctas, tiles, k_steps) the partition graders always try, with what each is about
PARTITION_EDGES = [
    (1, 3, 5, "one CTA: a single range, whole tiles only"),
    (16, 1, 16, "one iteration per CTA: 16 splits of one tile"),
    (4, 4, 6, "ranges ending exactly on tile boundaries"),
    (2, 4, 6, "two whole tiles per CTA"),
    (10, 2, 3, "more CTAs than iterations (the last four get nothing)"),
    (4, 3, 3, "rounding up leaves the last CTA nothing"),
    (5, 2, 8, "ranges starting inside tiles"),
    (3, 7, 4, "ranges crossing several tiles"),
    (_SXM.resident(2), 16, 256, "1024×1024×16384 on an H100 SXM"),
    (_SXM.resident(2), 68, 128, "1024×4352×8192 on an H100 SXM"),
    (_PCIE.resident(2), 68, 128, "1024×4352×8192 on an H100 PCIe"),
    (_H20.resident(2), 16, 256, "1024×1024×16384 on an H20"),
]


def _student_parts(c: grading.Check, fn: Callable[..., Any], ctas: int, tiles: int, k_steps: int, name: str
                   ) -> list[list[tuple[int, int, int]]]:
    parts = []
    for cta in range(ctas):
        what = f"{name}({cta}, {ctas}, {tiles}, {k_steps})"
        got = _call(c, what, fn, cta, ctas, tiles, k_steps)
        try:
            pieces = [tuple(int(x) for x in p) for p in got]
        except (TypeError, ValueError):
            c.fail(what, "a list of (tile, k_begin, k_end)", got, hint="return a list of 3-tuples")
        if any(len(p) != 3 for p in pieces):
            c.fail(what, "a list of (tile, k_begin, k_end)", got, hint="each piece is (tile, k_begin, k_end)")
        parts.append(pieces)
    return parts


def _coverage_problem(parts: list[list[tuple[int, int, int]]], tiles: int, k_steps: int) -> str | None:
    """Say which K steps nobody or several CTAs compute (None when every iteration is covered once)."""
    cov = np.zeros((tiles, k_steps), np.int64)
    for cta, work in enumerate(parts):
        for t, a, b in work:
            if not (0 <= t < tiles and 0 <= a < b <= k_steps):
                return (f"CTA {cta} has the piece (tile {t}, K steps [{a}, {b})), outside {tiles} tiles × {k_steps} K "
                        "steps (or empty)")
            cov[t, a:b] += 1
    if (cov == 1).all():
        return None
    t, k = (int(x) for x in np.argwhere(cov != 1)[0])
    n = int(cov[t, k])
    if n == 0:
        skipped = int((cov == 0).sum())
        return f"K step {k} of tile {t} is computed by no CTA ({skipped} iteration(s) skipped in all)"
    who = [cta for cta, work in enumerate(parts) for tt, a, b in work if tt == t and a <= k < b]
    return f"K step {k} of tile {t} is computed {n} times (by CTAs {who}): a K block repeated"


def _ranges(parts: list[list[tuple[int, int, int]]], k_steps: int) -> list[list[int]]:
    return [sorted({t * k_steps + k for t, a, b in work for k in range(a, b)}) for work in parts]


def _partition_hint(parts: list[list[tuple[int, int, int]]], want: list[list[sk.Piece]], ctas: int, tiles: int,
                    k_steps: int) -> str:
    total = tiles * k_steps
    if [list(reversed(w)) for w in parts] == [[tuple(p) for p in w] for w in want] and any(len(w) > 1 for w in want):
        return ("walk the range from its END backwards: the first piece is the last tile the range touches (a first "
                "split, which never waits), the last piece ends a tile (a split that waits)")
    floor = max(1, total // ctas)
    if _ranges(parts, k_steps) == [list(range(min(total, c * floor), min(total, c * floor + floor)))
                                   for c in range(ctas)] and floor * ctas != total:
        return f"per = total // ctas = {floor} leaves the last {total - floor * ctas} iterations to nobody: round up"
    got_r = _ranges(parts, k_steps)
    contiguous = all(r == list(range(r[0], r[-1] + 1)) for r in got_r if r)
    covers = sorted(x for r in got_r for x in r) == list(range(total))
    if contiguous and covers:
        return (f"every iteration is covered once, but not by the kernel's ranges: CTA c takes [c·per, c·per + per) "
                f"with per = ceil(total / ctas) = {-(-total // ctas)}, clipped to total (the kernel finds a tile's "
                "first CTA as its first iteration // per, so the ranges must be exactly these)")
    return ("cut [0, tiles·k_steps) into ranges of per = ceil(total / ctas) iterations, one per CTA, then split "
            "each range at tile boundaries (iteration g is K step g % k_steps of tile g // k_steps)")


def _check_parts(c: grading.Check, parts: list[list[tuple[int, int, int]]], want: list[list[sk.Piece]],
                 ctas: int, tiles: int, k_steps: int, what: str, hint_fn: Callable[..., str]) -> None:
    problem = _coverage_problem(parts, tiles, k_steps)
    if problem:
        c.fail(f"{what}: {problem}", hint=hint_fn(parts, want, ctas, tiles, k_steps))
    for cta, (got, exp) in enumerate(zip(parts, want, strict=True)):
        exp_t = [tuple(p) for p in exp]
        if got != exp_t:
            c.fail(f"{what}: CTA {cta}'s pieces", exp_t if len(exp_t) <= 8 else f"{exp_t[:8]} …",
                   got if len(got) <= 8 else f"{got[:8]} …", hint=hint_fn(parts, want, ctas, tiles, k_steps))


def _grade_partition(c: grading.Check, fn: Callable[..., list], name: str, cases: list[tuple[int, int, int]],
                     edges: list[tuple], schedule: str, hint_fn: Callable[..., str]) -> None:
    """Every CTA's list from ``fn`` against the kernel's (``schedule``), case by case; one ✓ per edge case."""
    for i, (ctas, tiles, k_steps) in enumerate(cases):
        parts = _student_parts(c, fn, ctas, tiles, k_steps, name)
        want = sk.partition(tiles, k_steps, ctas, schedule)
        _check_parts(c, parts, want, ctas, tiles, k_steps, f"{tiles} tiles × {k_steps} K steps on {_ctas(ctas)}",
                     hint_fn)
        if i < len(edges):
            extra = f", {sk.data_parallel_tiles(tiles, ctas)} whole" if schedule == "hybrid" else ""
            c.ok(f"{edges[i][3]} ({tiles} tiles × {k_steps} K steps, {_ctas(ctas)}{extra}): every iteration once, "
                 "the kernel's pieces in its order")
    c.ok(f"{len(cases) - len(edges)} random sizes: the same")


def check_stream_k_pieces(stream_k_pieces: Callable[[int, int, int, int], list], *, seed: int | None = None) -> None:
    """Grade ``stream_k_pieces(cta, ctas, tiles, k_steps)``: every CTA's pieces, exactly the kernel's, on the edge
    cases of :data:`PARTITION_EDGES` and random sizes; every iteration covered once."""
    rng = _rng(seed)
    with grading.check("Lab 9 · the Stream-K ranges", seed=rng.seed) as c:
        cases = [e[:3] for e in PARTITION_EDGES]
        cases += [(int(rng.integers(1, 20)), int(rng.integers(1, 12)), int(rng.integers(1, 20))) for _ in range(25)]
        _grade_partition(c, stream_k_pieces, "stream_k_pieces", cases, PARTITION_EDGES, "stream-k", _partition_hint)


#: (ctas, tiles, k_steps, what) for the hybrid work list
HYBRID_EDGES = [
    (5, 9, 4, "fewer than two waves: all Stream-K"),
    (5, 10, 4, "exactly two waves: one wave whole, one Stream-K"),
    (5, 16, 3, "three waves and one tile"),
    (4, 16, 2, "a multiple of the CTAs: the Stream-K wave is whole tiles too"),
    (1, 4, 3, "one CTA"),
    (_SXM.resident(2), 16, 256, "1024×1024×16384 on an H100 SXM"),
    (_SXM.resident(2), 68, 128, "1024×4352×8192 on an H100 SXM"),
    (_SXM.resident(2), 256, 64, "4096³ on an H100 SXM"),
    (_SXM.resident(2), 1024, 128, "8192³ on an H100 SXM"),
    (_PCIE.resident(2), 256, 64, "4096³ on an H100 PCIe"),
    (_H20.resident(2), 1024, 128, "8192³ on an H20"),
]


def _hybrid_variants(ctas: int, tiles: int, k_steps: int) -> list[tuple[list[list[sk.Piece]], str]]:
    """Plausible wrong hybrid work lists of every CTA, each with what is wrong with it."""
    dp = sk.data_parallel_tiles(tiles, ctas)
    alt = (tiles // ctas) * ctas
    each = dp // ctas

    def whole(c: int, first: int, stop: int, step: int) -> list[sk.Piece]:
        return [sk.Piece(t, 0, k_steps) for t in range(first, stop, step)]

    def sk_part(c: int, d: int, offset: int) -> list[sk.Piece]:
        return sk.stream_k_pieces(c, ctas, tiles - d, k_steps, offset)

    cs = range(ctas)
    return [
        ([sk_part(c, 0, 0) for c in cs],
         f"with {tiles} tiles on {ctas} CTAs the first {dp} tiles go out whole (all but the last one or two waves); "
         "only the rest is cut into Stream-K ranges"),
        ([whole(c, c, alt, ctas) + sk_part(c, alt, alt) for c in cs],
         "keep one to two waves for Stream-K: dp = (tiles // ctas - 1) · ctas (0 when tiles < 2·ctas); with less "
         "than a wave left, each CTA's range is short and the fix-ups dominate"),
        ([whole(c, c * each, c * each + each, 1) + sk_part(c, dp, dp) for c in cs],
         "hand out the whole tiles round-robin: CTA c takes tiles c, c + ctas, c + 2·ctas, … (as in Lab 7)"),
        ([whole(c, c, dp, ctas) + sk_part(c, dp, 0) for c in cs],
         f"the Stream-K tiles are numbered from dp = {dp}: add dp to the tiles of your stream_k_pieces"),
        ([sk_part(c, dp, dp) + whole(c, c, dp, ctas) for c in cs], "whole tiles first, then the Stream-K pieces"),
    ]


def _hybrid_hint(parts: list[list[tuple[int, int, int]]], want: list[list[sk.Piece]], ctas: int, tiles: int,
                 k_steps: int) -> str:
    for variant, why in _hybrid_variants(ctas, tiles, k_steps):
        if variant != want and parts == [[tuple(p) for p in w] for w in variant]:
            return why
    return _partition_hint(parts, want, ctas, tiles, k_steps)


def check_work_list(work_list: Callable[[int, int, int, int], list], *, seed: int | None = None) -> None:
    """Grade ``work_list(cta, ctas, tiles, k_steps)`` (the hybrid: whole tiles round-robin for all but the last one
    or two waves, then the Stream-K pieces of the rest), exactly the kernel's, edge cases and random sizes."""
    rng = _rng(seed)
    with grading.check("Lab 9 · the hybrid work list", seed=rng.seed) as c:
        cases = [e[:3] for e in HYBRID_EDGES]
        for _ in range(20):
            ctas = int(rng.integers(1, 12))
            cases.append((ctas, int(rng.integers(1, 5 * ctas + 3)), int(rng.integers(1, 10))))
        _grade_partition(c, work_list, "work_list", cases, HYBRID_EDGES, "hybrid", _hybrid_hint)


# =========================================================================================================
# 4 · block-striped moves
# =========================================================================================================
def _striped_hint(got: np.ndarray, regs: np.ndarray, T: int, R: int) -> str:
    if T * R and np.array_equal(got[:T * R], regs.reshape(-1)):
        return ("that is thread t's registers side by side (t·R + j): a warp's access then touches 32 different "
                "lines. Block-striped: register j of thread t goes to j·T + t")
    nan = np.isnan(got[:T * R])
    if nan.any():
        idx = np.flatnonzero(nan)
        t, j = idx[0] % T, idx[0] // T
        return (f"{int(nan.sum())} element(s) were never written, the first of thread {t}, register {j}: every "
                "thread stores every one of its R registers (j = 0 … R-1), at j·T + t")
    return "register j of thread t goes to ws[j·T + t], in fp32, bits unchanged"


def check_striped(striped_store: Callable[[np.ndarray, np.ndarray], Any],
                  striped_load_add: Callable[[np.ndarray, np.ndarray], np.ndarray], *, seed: int | None = None) -> None:
    """Grade ``striped_store(ws, regs)`` (in place) and ``striped_load_add(ws, regs) -> regs + stripes`` bit for
    bit: registers (T threads × R) against a NaN-poisoned workspace, nothing written past T·R, no stripe left out,
    the workspace unchanged by the load."""
    rng = _rng(seed)
    with grading.check("Lab 9 · block-striped store and load-add", seed=rng.seed) as c:
        shapes = [(128, 128), (32, 1), (1, 5), (256, 3), (96, 7)]
        shapes += [(32 * int(rng.integers(1, 9)), int(rng.integers(1, 40))) for _ in range(6)]
        for T, R in shapes:
            regs = (rng.standard_normal((T, R)) * np.exp2(rng.integers(-20, 20, size=(T, R)))).astype(np.float32)
            extra = int(rng.integers(1, 64))
            ws = np.full(T * R + extra, np.nan, np.float32)
            what = f"striped_store(ws of {ws.size}, registers {T}×{R})"
            given = regs.copy()
            _call(c, what, striped_store, ws, given, hint="write ws[j·T + t] = regs[t, j] in place")
            if not np.array_equal(given.view(np.uint32), regs.view(np.uint32)):
                c.fail(f"{what} changed the registers it was given", hint="a store only reads the registers")
            want = np.full_like(ws, np.nan)
            striped.store(want, regs)
            if not np.isnan(ws[T * R:]).all():
                c.fail(f"{what}: elements past T·R = {T * R} were written",
                       hint="the slot of these registers is exactly T·R elements: touch nothing else")
            if not np.array_equal(ws[:T * R].view(np.uint32), want[:T * R].view(np.uint32)):
                c.array(what, ws[:T * R], want[:T * R], hint=_striped_hint(ws, regs, T, R))
            acc = (rng.standard_normal((T, R)) * np.exp2(rng.integers(-20, 20, size=(T, R)))).astype(np.float32)
            ws_before = ws.copy()
            what = f"striped_load_add(ws, registers {T}×{R})"
            given = acc.copy()
            got = _call(c, what, striped_load_add, ws, given, hint="return regs[t, j] + ws[j·T + t]")
            if not isinstance(got, np.ndarray):
                c.fail(what, f"a float32 array of shape {(T, R)}", type(got).__name__, hint="return the new registers")
            if got.shape != (T, R):
                c.fail(what + " (shape)", (T, R), got.shape, hint="return the registers, (threads, registers)")
            if got.dtype != np.float32:
                c.fail(what + " (dtype)", "float32", str(got.dtype),
                       hint="the kernel's registers are fp32: add in float32 and return float32 (a float64 sum is not "
                            "what the kernel computes)")
            if not np.array_equal(given.view(np.uint32), acc.view(np.uint32)):
                c.fail(f"{what} changed the registers it was given (the caller's array)",
                       hint="return a new array: regs + the stripes, not an addition into regs in place")
            got_a = got
            if not np.array_equal(ws, ws_before, equal_nan=True):
                c.fail(f"{what} changed the workspace", hint="a load only reads the workspace")
            expect = striped.load_add(ws_before, acc)
            if not np.array_equal(got_a.view(np.uint32), expect.view(np.uint32)):
                hint = "regs[t, j] + ws[j·T + t], in fp32"
                blocked = (acc + ws_before[:T * R].reshape(T, R)).astype(np.float32)
                if np.array_equal(got_a, blocked):
                    hint = "you read thread t's stripes at t·R + j: they are at j·T + t"
                elif np.array_equal(got_a, acc):
                    hint = "the registers came back unchanged: add the workspace's stripes to them"
                c.array(what, got_a, expect, hint=hint)
            c.ok(f"{T} threads × {R} registers: store lands at j·T + t bit for bit, nothing past T·R; load-add "
                 "bit for bit, float32 of the registers' shape, workspace and the registers given untouched")


# =========================================================================================================
# 5 · the fix-up protocol
# =========================================================================================================
#: (tiles, k_steps, ctas, schedule, what) the fix-up grader always runs, each under several schedules
FIXUP_EDGES = [
    (3, 4, 1, "stream-k", "one CTA: no split at all"),
    (1, 16, 16, "stream-k", "16 splits of one tile (one K step each)"),
    (3, 4, 20, "stream-k", "more CTAs than iterations: 4 splits per tile, 8 CTAs without work"),
    (2, 9, 5, "stream-k", "ranges starting and ending inside tiles (first, middle, final splits)"),
    (4, 6, 4, "stream-k", "ranges ending exactly on tile boundaries: whole tiles only"),
    (7, 3, 4, "stream-k", "ranges crossing several tiles"),
    (13, 4, 5, "hybrid", "hybrid: two waves whole, Stream-K over the rest"),
    (2, 7, 3, "stream-k", "K steps not a multiple of the range"),
]
POLICIES = ["round-robin", "highest-first", "leader-last", "lowest-first"]


def _fixup_hint(res: sk.FixupResult) -> str:
    text = (res.deadlock or "") + " " + " ".join(res.problems)
    if res.deadlock:
        if "named barrier" in text:
            return ("both consumer warpgroups run the same plan apart from the flag: every bar_sync must be met by "
                    "the other warpgroup's bar_sync")
        return ("a split waits only for the splits before it (flag ≥ its order, set by order - 1), and the final "
                "split resets the flag only after its own wait")
    if "were never added" in text:
        return "a final split adds the running sum of the splits before it (load_add) before its epilogue"
    if "no split had stored" in text or "missing" in text:
        return ("a split may read the running sum only once every split before it has stored it and said so: the "
                "writer stores, bar_sync (both warpgroups' stores are in), then its leader's set_flag(order + 1) with "
                "release; the reader's leader waits until the flag reaches its order (acquire), bar_sync, then "
                "load_add. A relaxed flag, a flag written before the stores or a wait for less than your order lets "
                "it read a stale sum")
    if "out of K order" in text:
        return ("wait until the flag reaches your order (every earlier split is in), not just until it is set: the "
                "additions then always happen in K order")
    if "earlier launch" in text:
        return "the final split resets the tile's flag to 0, or the next launch's splits stop waiting too early"
    if "written to C" in text and "times" in text:
        return "only the final split (k_end == k_steps) and whole tiles run the epilogue"
    if "never written" in text:
        return "the final split (k_end == k_steps) and a whole tile run the epilogue"
    if "not all 0" in text:
        return "the final split's leader resets the flag: set_flag(0, 'relaxed') after its wait"
    if "other bits" in text:
        return "add the workspace to your own partial (load_add) once per split, like d[j] += __ldcg(...)"
    return "compare with the protocol in the text: wait + bar_sync + load_add; store + bar_sync + release; reset"


def _run_plan(c: grading.Check, plan: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> sk.FixupResult:
    try:
        return sk.simulate(*args, **kwargs, plan=plan)
    except NotImplementedError:
        raise
    except sk.PlanError as exc:
        c.fail(f"{what}: {exc}", hint="return a list of streamk ops, e.g. [streamk.epilogue()] for a whole tile")


def check_fixup_plan(fixup_plan: Callable[[int, int, int, int, bool], list], *, seed: int | None = None) -> None:
    """Grade ``fixup_plan(k_begin, k_end, k_steps, order, leader) -> list[Op]`` on the emulator: every CTA's two
    consumer warpgroups run their pieces and the plan over a shared workspace and flags, with reads returning the
    oldest value the memory model allows, under several schedules, twice in a row (the flags must come back to 0).
    Every tile must be written once, built from its splits in K order, bit for bit, with no deadlock."""
    rng = _rng(seed)
    with grading.check("Lab 9 · the ordered fix-up", seed=rng.seed) as c:
        _call(c, "fixup_plan(0, 4, 4, 0, True)", fixup_plan, 0, 4, 4, 0, True)
        for tiles, k_steps, ctas, schedule, about in FIXUP_EDGES:
            for policy in POLICIES:
                what = f"{tiles} tiles × {k_steps} K steps on {_ctas(ctas)} ({schedule}, {policy})"
                for values in ("integers", "floats"):
                    res = _run_plan(c, fixup_plan, what, tiles, k_steps, ctas, schedule=schedule, policy=policy,
                                    launches=2, values=values, seed=int(rng.integers(1 << 30)))
                    if not res.ok:
                        c.fail(what, detail="    " + res.summary().replace("\n", "\n    "), hint=_fixup_hint(res))
            c.ok(f"{about}: every tile once, in K order, bit for bit, flags back to 0, twice, under "
                 f"{len(POLICIES)} schedules")
        for _ in range(6):
            ctas = int(rng.integers(1, 12))
            tiles, k_steps = int(rng.integers(1, 3 * ctas + 2)), int(rng.integers(1, 10))
            schedule = str(rng.choice(["stream-k", "hybrid"]))
            what = f"{tiles} tiles × {k_steps} K steps on {_ctas(ctas)} ({schedule}, random order)"
            res = _run_plan(c, fixup_plan, what, tiles, k_steps, ctas, schedule=schedule, policy="random",
                            seed=int(rng.integers(1 << 30)), launches=2)
            if not res.ok:
                c.fail(what, detail="    " + res.summary().replace("\n", "\n    "), hint=_fixup_hint(res))
        c.ok("6 random shapes in random order: the same")
        res = _run_plan(c, fixup_plan, "one SM at a time", 2, 8, 6, schedule="stream-k", resident=1)
        c.true("with one CTA resident at a time, started in order: no deadlock, every tile right", res.ok,
               detail="    " + res.summary().replace("\n", "\n    "), hint=_fixup_hint(res))


# =========================================================================================================
# 6 · the kernel
# =========================================================================================================
def lab7_source() -> str:
    """The Lab 7 reference kernel (persistent, 2-block clusters, B multicast): the step this lab starts from."""
    return (ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text()


def lab9_reference_source() -> str:
    """The Lab 9 reference kernel as measured on the H100 (bench/kernels/lab9_streamk.cu)."""
    return (ROOT / "bench" / "kernels" / "lab9_streamk.cu").read_text()


def _course_lab7() -> str:
    """The course's Lab 7 kernel cell (its solution), as the course's data holds it."""
    from ._common import course_kernel

    return course_kernel("lab7")


def _lab7_check(wrappers: str) -> Callable[[str], None]:
    """Lab 7's check of its whole kernel, quick: the compile report and what it reads from the PTX, then a run on the
    course's PTX executor in hazard mode (on any machine; no timing)."""
    from . import lab7
    from ._common import emulated
    from .lab5 import HEADER

    def check(kernel: str) -> None:
        with emulated():
            lab7.check_cluster_kernel(HEADER + wrappers + kernel, benchmark=False, carried=False)

    return check


def previous(wrappers: str) -> carry.Previous:
    """What Lab 9 builds on: your Lab 7 kernel (``LAB7_SRC`` of lab7_clusters.ipynb, put together with your Labs 6,
    5 and 4 as Lab 7 graded it), checked with Lab 7's check on ``wrappers``; the course's Lab 7 kernel stands in
    where yours does not pass."""
    from . import lab7

    def whole(text: str, here: Any) -> str:
        return lab7._carried(text, wrappers, here, quiet=True)[0].kernel

    return carry.Previous("Lab 7", "lab7_clusters.ipynb", "LAB7_SRC", _course_lab7, _lab7_check(wrappers), wrappers,
                          whole=whole)


def _carried(source: str, wrappers: str | None, here: Any, quiet: bool) -> tuple[carry.Carried, str]:
    """(the merge, the whole source to compile): your Lab 7 kernel (or the course's), this lab's change and your
    regions, after your wrappers."""
    from . import lab5

    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=False)
    made = carry.carried(previous(wrappers), source, here=here, quiet=quiet)
    return made, lab5.HEADER + wrappers + made.kernel


def _lab7_speeds() -> str:
    """The course's Lab 7 kernel on the H100 at the quantized shapes and 4096³, as one line."""
    m = sk.measured()
    speeds = ", ".join(f"{m[('data-parallel', s)][0]:.0f} TFLOP/s at {s[0]}×{s[1]}×{s[2]}"
                       for s in QUANTIZED + [(4096, 4096, 4096)] if ("data-parallel", s) in m)
    return (f"the course's Lab 7 kernel on the H100 (same run as cuBLAS, {sk.MEASURED_RUN}): {speeds}" if speeds
            else "the course's Lab 7 kernel on the H100: not measured yet")


def opening(source: str, *, wrappers: str | None = None, here: Any = None) -> Opening:
    """The kernel this lab grades, as a diff from your Lab 7 kernel (read from lab7_clusters.ipynb beside this
    notebook, with your Labs 6, 5 and 4 under it, and checked with Lab 7's check; the course's stands in where yours
    is missing or does not pass): your Lab 7 code, this lab's change and your regions as the cell holds them. The
    first line says whose Lab 7 kernel it is; then any lines of yours this lab rewrote; then the course's Lab 7
    kernel's measured speed on the shapes this lab is about."""
    from . import lab5
    from ._common import source_diff

    if wrappers is None:
        wrappers = lab5.carry_wrappers(checked=True)
    made, _ = _carried(source, wrappers, here, quiet=True)
    lines = [made.previous.line] + [f"⚠ {line}" for line in made.merge.report()] + [_lab7_speeds()]
    old = "your Lab 7 kernel" if made.previous.yours else "the course's Lab 7 kernel"
    diff = source_diff(made.previous.text, made.kernel, f"{old} (Lab 7)",
                       f"Lab 9: the kernel graded ({old} + this lab's change + your regions)", indent=False)
    return Opening(f"What Lab 9 changes in {old}", lines, diff)


# ------------------------------------------------------------------------------------------- static PTX checks
_WS_STORE = re.compile(r"^\s*(?:@!?%\w+\s+)?st\.global(?:\.\w+)*\.f32\s")
_WS_LOAD = re.compile(r"^\s*(?:@!?%\w+\s+)?ld\.global(?:\.(?:cg|ca|cs|lu|cv|nc|L1::\w+|L2::\w+))*\.f32\s")
_ACQUIRE = re.compile(r"\bld\.acquire\.gpu(?:\.global)?\.(?:u32|b32|s32)\b")
_RELEASE = re.compile(r"\b(?:st\.release\.gpu(?:\.global)?\.(?:u32|b32|s32)|red\.release\.gpu(?:\.global)?\.add\.u32|"
                      r"atom\.(?:release|acq_rel)\.gpu(?:\.global)?\.(?:add|exch)\.(?:u32|b32))\b")
_WEAK_FLAG = re.compile(r"\b(?:ld|st)\.(?:relaxed|volatile)(?:\.gpu|\.sys)?(?:\.global)?\.(?:u32|b32|s32)\b")
_BAR = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:bar\.sync|barrier\.sync|bar\.red)\b")
#: the kernel's parameters in order: tmap_a, tmap_b, tmap_c, M, N, K, workspace, flags
_FLAGS_PARAM = 7
#: a fence at GPU scope or wider: __threadfence() (membar.gl), fence.sc / fence.acq_rel
_FENCE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:membar\.(?:gl|sys)|fence\.(?:sc|acq_rel)\.(?:gpu|sys))\b")
#: every 32-bit write of a flag: a store (any qualifiers), an atomic exchange / and / add, a reduction
_FLAG_WRITE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:st(?:\.[\w:]+)*\.global(?:\.[\w:]+)*\.(?:u32|b32|s32)\s+\[[^\]]+\],"
                         r"\s*([^;]+);|atom(?:\.[\w:]+)*\.global(?:\.[\w:]+)*\.(exch|and|add|or|inc)\.(?:u32|b32|s32)"
                         r"\s+%\w+,\s*\[[^\]]+\],\s*([^;,]+);|red(?:\.[\w:]+)*\.global(?:\.[\w:]+)*\.add\.u32\s+"
                         r"\[[^\]]+\],\s*([^;]+);)")
#: a strong (not weak) 32-bit flag write: relaxed, volatile or release stores, atomics, reductions
_STRONG_WRITE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:st\.(?:relaxed|volatile|release)|atom\.|red\.)")
#: a strong 32-bit flag read that a following fence makes acquiring: relaxed or volatile loads, atomics
_STRONG_READ = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:ld\.(?:relaxed|volatile)(?:\.gpu|\.sys)?(?:\.global)?\."
                          r"(?:u32|b32|s32)|atom(?:\.[\w:]+)*\.global(?:\.[\w:]+)*\.(?:add|or)\.(?:u32|b32))\b")


def _entry_lines(ptx: str) -> list[str]:
    m = re.search(r"\.entry\s+" + KERNEL_NAME + r"\b.*", ptx, re.S)
    return (m.group(0) if m else ptx).splitlines()


def _writes_zero(text: str, line: str) -> bool:
    """A flag write that leaves 0: a store or exchange of 0, an and with 0."""
    from ._common import resolve

    m = _FLAG_WRITE.match(line)
    if not m:
        return False
    value = next(g for g in (m.group(1), m.group(3), m.group(4)) if g is not None).strip()
    if m.group(2) in ("add", "or", "inc") or (m.group(4) is not None):
        return False
    return resolve(text, value) == "0"


def ptx_protocol(ptx: str) -> list[tuple[str, bool, str]]:
    """Static checks of the fix-up in the kernel's PTX: (what, passed, hint) in order. Text order in the PTX is
    the order of the source for this kernel's straight-line fix-up blocks.

    Every form the memory model gives the same guarantee is accepted: the release as ``st.release.gpu``, a release
    atomic or reduction, or a GPU-scope fence (``__threadfence()``) before a strong write (an atomic, a relaxed or
    volatile store); the acquire as ``ld.acquire.gpu``, or a strong read (relaxed, volatile, atomic) with a fence
    after it before the workspace loads; the reset as any write that leaves 0 (a store of any kind, an exchange, an
    and with 0)."""
    from ._ptxflow import Flow

    lines = _entry_lines(ptx)
    text = "\n".join(lines)
    flow = Flow(ptx, KERNEL_NAME)
    flags_param = f"{KERNEL_NAME}_param_{_FLAGS_PARAM}"

    def on_flags(line: str) -> bool:  # the address is computed from the flags parameter
        m = re.search(r"\[[^\]]+\]", line)
        return bool(m) and flags_param in flow.symbols(m.group(0))

    st = [i for i, x in enumerate(lines) if _WS_STORE.match(x)]
    ld = [i for i, x in enumerate(lines) if _WS_LOAD.match(x)]
    fences = [i for i, x in enumerate(lines) if _FENCE.match(x)]
    zero = {i for i, x in enumerate(lines) if _writes_zero(text, x) and on_flags(x)}
    # a strong write of a flag with a fence between the workspace stores before it and itself: a release
    fenced_rel = [i for i, x in enumerate(lines) if i not in zero and _FLAG_WRITE.match(x) and _STRONG_WRITE.match(x)
                  and on_flags(x) and any(max([s for s in st if s < i], default=-1) < f < i for f in fences)]
    # a strong read of a flag with a fence after it, before the next workspace load: an acquire
    fenced_acq = [i for i, x in enumerate(lines) if _STRONG_READ.match(x) and on_flags(x)
                  and any(i < f < min([d for d in ld if d > i], default=len(lines)) for f in fences)]
    idx = {"st": st, "ld": ld,
           "acq": sorted({i for i, x in enumerate(lines) if _ACQUIRE.search(x)} | set(fenced_acq)),
           "rel": sorted({i for i, x in enumerate(lines) if _RELEASE.search(x) and i not in zero} | set(fenced_rel)),
           "bar": [i for i, x in enumerate(lines) if _BAR.match(x)],
           "weak": [i for i, x in enumerate(lines) if _WEAK_FLAG.search(x) and i not in zero
                    and i not in fenced_rel and i not in fenced_acq]}
    out: list[tuple[str, bool, str]] = []
    out.append(("the partials go to the workspace as fp32 global stores and come back as fp32 global loads",
                bool(idx["st"]) and bool(idx["ld"]),
                "store every d[j] with __stcg(ws + j·128, d[j]) and add them back with __ldcg"))
    out.append(("the wait reads the flag with acquire semantics (ld.acquire.gpu, or a read with a fence after it)",
                bool(idx["acq"]),
                "wait with hopper::flag_wait_geq (ld.acquire.gpu in a loop): a relaxed or volatile read without a "
                "fence after it does not make the partials visible"))
    out.append(("the flag is released (st.release.gpu, a release atomic, or a fence before the write)",
                bool(idx["rel"]),
                "release with hopper::flag_store_release: a plain store, or a relaxed one without a fence before "
                "it, may become visible before the partials"))
    out.append(("no relaxed or volatile 32-bit flag read or write without a fence", not idx["weak"],
                "the flag handoff is release/acquire at GPU scope (hopper::flag_store_release / flag_wait_geq)"))
    if idx["st"] and idx["rel"]:
        rel = idx["rel"][-1]
        last_st = max((i for i in idx["st"] if i < rel), default=None)
        ok = last_st is not None and any(last_st < b < rel for b in idx["bar"])
        out.append(("a bar.sync lies between the workspace stores and the release", ok,
                    "every consumer thread stores, then named_bar_sync(3, 256), and only then thread 128 releases: "
                    "released before the barrier, the other threads' stores may not be in yet"))
    if idx["ld"] and idx["acq"]:
        first_ld = idx["ld"][0]
        acq = max((i for i in idx["acq"] if i < first_ld), default=None)
        ok = acq is not None and any(acq < b < first_ld for b in idx["bar"])
        out.append(("a bar.sync lies between the acquiring wait and the workspace loads", ok,
                    "thread 128 waits (acquire), then named_bar_sync(3, 256), then every thread loads: without the "
                    "barrier the other threads read before the partials are theirs to see"))
    if idx["acq"]:
        reset = any(i > idx["acq"][0] for i in zero)
        out.append(("the final split writes 0 to the flag (the reset for the next launch)", reset,
                    "thread 128 of the final split: *flag = 0 after its wait (a plain store is enough; a release "
                    "store or an exchange also resets it), or the next launch's splits stop waiting too early"))
    return out


# ------------------------------------------------------------------------------------------- running it
def _tmap(a: Any, rows: int, cols: int) -> Any:
    from helpers import gpu

    return gpu.tensor_map_2d(a, rows, cols)


def _lab9_launcher(kernel: Any, a: Any, b: Any, c: Any, ws: Any, flags: Any, clusters: int) -> Any:
    from helpers import gpu

    (m, k), n = a.shape, b.shape[0]
    return gpu.prepare(kernel, (2 * clusters, 1, 1), 384, SMEM_BYTES, _tmap(a, 128, 64), _tmap(b, 128, 64),
                       _tmap(c, 64, 64), np.int32(m), np.int32(n), np.int32(k), ws, flags, cluster=(2, 1, 1))


def _workspace(kernel: Any, clusters: int | None = None) -> tuple[int, Any, Any]:
    """Clusters to launch (every co-resident one, unless given), a zeroed workspace (one slot of 128×256 fp32 per
    block) and zeroed flags (one per block)."""
    from helpers import gpu

    if clusters is None:
        clusters = gpu.max_active_clusters(kernel, 384, SMEM_BYTES, 2)
    return clusters, gpu.zeros((clusters * 2 * 128 * 256,), np.float32), gpu.zeros((clusters * 2,), np.uint32)


def gpu_trial(source: str, cases: list[tuple[np.ndarray, np.ndarray]], repeats: int = 3,
              clusters: int | None = None) -> dict:
    """(Runs in the isolated child.) ``clusters`` clusters (default: every co-resident one), C poisoned, a zeroed
    workspace and flags for each case; per case C, whether ``repeats`` more launches gave the same bits, how many
    flags were left non-zero, which workspace slots (cluster · 2 + block) hold anything but zeros, and the last
    launch's C; on the executor also each case's first launch's work (``"work"``: Launched)."""
    from helpers import gpu

    from ._work import Launched

    kernel = gpu.compile(source, KERNEL_NAME)
    results, work = [], []
    for a, b in cases:
        clusters, ws, flags = _workspace(kernel, clusters)  # a fresh workspace and flags for each case
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((a.shape[0], b.shape[0]), gpu.bfloat16)
        launch = _lab9_launcher(kernel, da, db, dc, ws, flags, clusters)
        launch()
        gpu.wait()
        first = dc.to_host()
        if gpu.executor_active():  # the first launch's work: who computed and stored what
            from helpers.gpu import executor

            last = executor.last_run()
            work.append(Launched(last.work if last is not None else None, int(da.ptr), int(db.ptr), int(dc.ptr)))
        same, again = True, first
        for _ in range(repeats):
            dc.poison()
            launch()
            gpu.wait()
            again = dc.to_host()
            same &= bool(np.array_equal(again.view(np.uint16), first.view(np.uint16)))
        slots = ws.to_host().reshape(clusters * 2, -1)
        written = [int(i) for i in np.flatnonzero((slots != 0).any(axis=1))]
        results.append((first, same, int(np.count_nonzero(flags.to_host())), written, again))
    return {"clusters": clusters, "results": results, "work": work}


def gpu_speed(source: str, lab7: str | None, shapes: list[tuple[int, int, int]], repeat: int = 20,
              reference: str | None = None) -> list[dict]:
    """(Runs in the isolated child.) Lab 9 (this source), Lab 7 (``lab7``, unless None) and the course's Lab 9
    kernel (``reference``, when given: the speed floor's) timed at each shape in that order, each beside cuBLAS:
    per shape ``lab9``, ``lab7``, ``course`` (TFLOP/s), ``cublas`` and the SM clock."""
    from helpers import gpu

    def lab9_launch(src: str) -> Any:
        kernel = gpu.compile(src, KERNEL_NAME)
        clusters, ws, flags = _workspace(kernel)
        return lambda a, b, c: _lab9_launcher(kernel, a, b, c, ws, flags, clusters)

    make9 = lab9_launch(source)
    make_ref = lab9_launch(reference) if reference else None
    k7 = gpu.compile(lab7, "lab7_gemm") if lab7 else None

    def make7(a: Any, b: Any, c: Any) -> Any:
        (m, k), n = a.shape, b.shape[0]
        grid = gpu.persistent_grid(k7, 384, SMEM_BYTES, cluster=2, work=math.ceil(m / 256) * math.ceil(n / 256))
        return gpu.prepare(k7, (grid, 1, 1), 384, SMEM_BYTES, _tmap(a, 128, 64), _tmap(b, 128, 64), _tmap(c, 64, 64),
                           np.int32(m), np.int32(n), np.int32(k), cluster=(2, 1, 1))

    out = []
    for m, n, k in shapes:
        try:
            with gpu.sm_clock() as clk:
                r9 = gpu.gemm_benchmark(make9, m, n, k, out_dtype=gpu.bfloat16, repeat=repeat)
                r7 = gpu.gemm_benchmark(make7, m, n, k, out_dtype=gpu.bfloat16, repeat=repeat) if k7 else None
                ref = gpu.gemm_benchmark(make_ref, m, n, k, out_dtype=gpu.bfloat16, repeat=repeat) if make_ref \
                    else None
        except AssertionError as exc:  # the benchmark checks every element against cuBLAS first
            out.append({"shape": (m, n, k), "error": str(exc)})
            continue
        out.append({"shape": (m, n, k), "lab9": r9.tflops, "lab7": r7.tflops if r7 else None,
                    "course": ref.tflops if ref else None, "cublas": r9.cublas_tflops, "clock": clk.summary()})
    return out


def _run(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
    """The one run path (``_common.run``); an exception the child raised fails the check in words."""
    from . import _common

    try:
        return _common.run(fn, *args, what=what, timeout=timeout)
    except RuntimeError as exc:
        c.fail(f"{what} failed when it ran: {exc}")


def _gpu_cases(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Shapes for the run on the H100 (every co-resident cluster): many splits per pair, a hybrid one (whole pairs +
    Stream-K), random non-square ones."""
    shapes = [(296, 520, 6000), (3072, 3072, 256)]
    while len(shapes) < 5:
        m, n, k = (8 * int(x) for x in rng.integers(1, 320, size=3))
        if m != n and n != k:
            shapes.append((m, n, k))
    return shapes


#: clusters of the run on the course's PTX executor (a CPU runs every thread): enough for a middle split
EMULATED_CLUSTERS = 3


def emulator_cases(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Shapes for the run on the PTX executor (:data:`EMULATED_CLUSTERS` clusters), each with partial tiles: one pair
    in 6 K steps (the last one partial), cut into a first, a middle and a final split; 8 pairs in 3 K steps, of which
    3 go out whole round-robin and 5 are Stream-K (whole pieces, first and final splits, a cluster with three
    pieces); then a random shape of up to 4 pairs and 6 K steps."""
    shapes = [(136, 200, 376), (504, 984, 192)]
    while len(shapes) < 3:
        m, n = (8 * int(x) for x in rng.integers(9, 65, size=2))
        k = 8 * int(rng.integers(9, 49))
        if len({m, n, k}) == 3:
            shapes.append((m, n, k))
    return shapes


def roles_of(tiles: int, steps: int, clusters: int) -> str:
    """What a launch on ``clusters`` clusters exercises, in words: whole pairs handed out round-robin, and the
    Stream-K part's whole pieces and first / middle / final splits."""
    dp = sk.data_parallel_tiles(tiles, clusters)
    counts: dict[str, int] = {}
    for work in sk.partition(tiles, steps, clusters, "hybrid"):
        for t, a, b in work:
            if t >= dp:
                key = sk.role(a, b, steps)
                counts[key] = counts.get(key, 0) + 1
    parts = [f"{dp} whole pair{'s' * (dp != 1)} round-robin"] if dp else []
    names = {"whole": "unsplit Stream-K pair", "first": "first split", "middle": "middle split",
             "final": "final split"}
    parts += [f"{counts[r]} {names[r]}{'s' * (counts[r] != 1)}" for r in names if r in counts]
    return ", ".join(parts)


def _split_pairs(tiles: int, steps: int, clusters: int) -> set[int]:
    """The pairs computed in more than one piece."""
    return {t for work in sk.partition(tiles, steps, clusters, "hybrid") for t, a, b in work if (a, b) != (0, steps)}


def owner_slots(m: int, n: int, k: int, clusters: int) -> list[int]:
    """The workspace slots a run of an m×n×k GEMM on ``clusters`` clusters writes: each split pair's partial sums go
    to its owner's slots (owner · 2 + block), the owner being the lowest cluster touching the pair; a block whose 128
    rows lie wholly past M only ever adds zeros (the TMA fills them in), so its slot stays zero."""
    from helpers.hopper import scheduler

    tiles, steps = sk.iteration_space(m, n, k)
    slots = set()
    for t in _split_pairs(tiles, steps, clusters):
        pm, _ = scheduler.grouped_coords(t, -(-m // 256), -(-n // 256), 8)  # LAB9_GROUP
        owner = sk.owner(t, clusters, tiles, steps, "hybrid")
        slots |= {owner * 2 + r for r in range(2) if 256 * pm + 128 * r < m}
    return sorted(slots)


def _slots_hint(written: list[int], want: list[int]) -> str:
    if not written:
        return ("nothing reached the workspace: no pair was split, so the kernel ran as Lab 7 (whole pairs) — the "
                "Stream-K pieces come from plan and Work::item, and a split that is not final stores its sum")
    owners, got = sorted({s // 2 for s in want}), sorted({s // 2 for s in written})
    return (f"the partial sums went to the slots of clusters {got[:8]}, the split pairs' owners are {owners[:8]}: a "
            "split pair's slot and flag are its owner's (the cluster whose range holds the pair's first Stream-K "
            "iteration), block rank's slot of it")


def _run_hint(got: np.ndarray, ref: np.ndarray, k: int, clusters: int) -> str:
    """Which pairs came out wrong, and what that points at."""
    m, n = ref.shape
    tiles, steps = sk.iteration_space(m, n, k)
    bad_el = np.isnan(got) | (np.abs(got - ref) > _bf16_tolerance(ref, k))
    from helpers.hopper import scheduler

    bad = set()
    for p in range(tiles):
        pm, pn = scheduler.grouped_coords(p, -(-m // 256), -(-n // 256), 8)  # LAB9_GROUP
        if bad_el[256 * pm:256 * pm + 256, 256 * pn:256 * pn + 256].any():
            bad.add(p)
    split = _split_pairs(tiles, steps, clusters)
    nan = " (NaN: C never written there)" if np.isnan(got[bad_el]).any() else ""
    if bad and bad <= split:
        return (f"the pairs computed whole are right; pairs {sorted(bad)[:8]}, computed in splits, are wrong{nan}: "
                "the fix-up (the slot and order from the owner, the workspace offsets, the wait and the add) or the "
                "pieces' K ranges")
    if bad:
        return (f"pairs {sorted(bad)[:8]} are wrong{nan}, and not only split ones: the work list (Work::item, plan) "
                "hands out pairs or K ranges the kernel then computes wrongly or never")
    return "NaN: a tile no split ran the epilogue for; wrong values: a split added twice, missed or read stale partials"


def _bf16_tolerance(ref: np.ndarray, k: int) -> np.ndarray:
    return 2e-2 * np.abs(ref) + 2e-3 * math.sqrt(k)


def _same_bits_hint(again: np.ndarray, ref: np.ndarray, k: int, clusters: int) -> str:
    """Why a later launch gave other bits: it was wrong (a split added what the workspace held from the launch
    before), or right within rounding (the splits added in another order)."""
    got = again.astype(np.float64)
    bad = np.isnan(got) | (np.abs(got - ref) > _bf16_tolerance(ref, k))
    if bad.any():
        m, n = ref.shape
        tiles, steps = sk.iteration_space(m, n, k)
        return ("the first launch was right and a later one is wrong: a split added what the workspace held from the "
                "launch before. The first split of a pair (order 0) has nothing to add: it only stores its sum and "
                "raises the flag; only later splits (order > 0) wait for the flag and add the workspace "
                f"(split pairs here: {sorted(_split_pairs(tiles, steps, clusters))[:8]})")
    return "the splits must add in K order (wait until the flag reaches your order)"


def _work_owners(m: int, n: int, k: int, clusters: int) -> tuple[Any, Any, Any]:
    """The Stream-K schedule for the work check: (the pair holding an element, in words; the block that stores a
    64×64 tile of C: the final split's or the whole pair's; the block that computes a product: the piece holding
    its K step)."""
    from helpers.hopper import scheduler

    tiles, steps = sk.iteration_space(m, n, k)
    pm, pn = -(-m // 256), -(-n // 256)
    order = {(int(a), int(b)): p for p, (a, b) in enumerate(scheduler.grouped(pm, pn, 8))}  # LAB9_GROUP
    pieces: dict[int, list[tuple[int, int, int]]] = {}
    for cl, work in enumerate(sk.partition(tiles, steps, clusters, "hybrid")):
        for t, a, b in work:
            pieces.setdefault(t, []).append((a, b, cl))

    def pair(row: int, col: int) -> int:
        return order[(row // 256, col // 256)]

    def words(row: int, col: int) -> str:
        t = pair(row, col)
        split = ", ".join(f"K steps {a}–{b - 1} on cluster {cl}" for a, b, cl in sorted(pieces.get(t, [])))
        return f"pair {t}: {split}"

    def block(cl: int, row: int) -> tuple[int, int]:
        return (2 * cl + (row % 256) // 128, 0)

    def store_owner(row: int, col: int) -> tuple[int, int]:
        final = [cl for a, b, cl in pieces.get(pair(row, col), []) if b == steps]
        return block(final[0] if final else -1, row)

    def mma_owner(row: int, col: int, kk: int) -> tuple[int, int]:
        step = kk // 64
        own = [cl for a, b, cl in pieces.get(pair(row, col), []) if a <= step < b]
        return block(own[0] if own else -1, row)

    return words, store_owner, mma_owner


def _trial(c: grading.Check, source: str, rng: np.random.Generator, shapes: list[tuple[int, int, int]], repeats: int,
           clusters: int | None) -> None:
    """Run the kernel on ``shapes`` (C poisoned, ``repeats`` more launches) where the run path runs it, and grade C
    against fp64, the same bits again, the flags, the workspace slots and (on the executor) the work."""
    from ml_dtypes import bfloat16

    from . import _common
    from ._record import Protocol, Ring, check_protocol
    from ._work import check_releases, check_work

    cases = [(rng.standard_normal((m, k)).astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16))
             for m, n, k in shapes]
    out = _run(c, "your kernel", gpu_trial, source, cases, repeats, clusters, timeout=240)
    where = _common.where()
    clusters = out["clusters"]
    work = out.get("work") or [None] * len(shapes)
    for (m, n, k), (a, b), (got, same, left, written, again), run in zip(shapes, cases, out["results"], work,
                                                                       strict=True):
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        tiles, steps = sk.iteration_space(m, n, k)
        got64 = got.astype(np.float64)
        c.array(f"{where}: {m}×{n}×{k}, {tiles} pair{'s' * (tiles != 1)} × {steps} K steps on {clusters} clusters "
                f"({roles_of(tiles, steps, clusters)}), C poisoned first: every element against fp64", got64, ref,
                atol=_bf16_tolerance(ref, k), hint=_run_hint(got64, ref, k, clusters))
        more = "three more launches" if repeats == 3 else f"{repeats} more launch" + "es" * (repeats != 1)
        c.true(f"{where}: {m}×{n}×{k}: {more} gave the same bits", same, hint=_same_bits_hint(again, ref, k, clusters))
        c.true(f"{where}: {m}×{n}×{k}: every flag is 0 again after the launches", left == 0,
               hint="the final split resets its flag (*flag = 0)")
        want = owner_slots(m, n, k, clusters)
        c.true(f"{where}: {m}×{n}×{k}: the partial sums went through the workspace slots of the split pairs' owners "
               f"({len(want)} of {2 * clusters} slots, no other)", written == want, hint=_slots_hint(written, want))
        if run is not None and run.log is not None:
            check_releases(c, run, label=f"{where}: {m}×{n}×{k}", cluster=2,
                           hint="at a piece's first K step, stage it - 1 belongs to the piece before, which released "
                                "it after its own K loop: count the releases of one piece")
            words, store_owner, mma_owner = _work_owners(m, n, k, clusters)
            check_work(c, run, m=m, n=n, label=f"{m}×{n}×{k}", tile=(64, 64), piece_of=words, store_owner=store_owner,
                       mma_owner=mma_owner, cluster=2,
                       hint="a cluster computes only its own pieces (Work::item: whole pairs round-robin, then its "
                            "Stream-K range), and only the final split (or a whole pair) stores the pair's tiles")
            check_protocol(c, run, Protocol(ring=Ring(readers=2), cluster=2), label=f"{where}: {m}×{n}×{k}",
                           ring_hint="both consumers read every fill and each releases it once, on both CTAs; at a "
                                     "piece's first K step, stage it - 1 belongs to the piece before")


def _timing(c: grading.Check, source: str) -> None:
    """(On the H100.) Lab 9 timed on the quantized shapes beside Lab 7 (the lab's target, :data:`TARGET`), the
    course's Lab 9 kernel (the speed floor, ``_common.SPEED_FLOOR``) and cuBLAS, all in one run."""
    from . import _common
    from ._ladder import timed

    speeds = _run(c, "the timing run", gpu_speed, source, lab7_source(), QUANTIZED, 20, lab9_reference_source(),
                  timeout=400)
    for s in speeds:
        m, n, k = s["shape"]
        if "error" in s:
            c.fail(f"{m}×{n}×{k}: the timing run's result differs from cuBLAS: {s['error']}")
        ratio = s["lab9"] / s["lab7"]
        timed(KERNEL_NAME)[(m, n, k)] = (SimpleNamespace(tflops=s["lab9"], cublas_tflops=s["cublas"]),
                                         SimpleNamespace(tflops=s["course"]))
        c.ok(f"{m}×{n}×{k}: Lab 9 {s['lab9']:.0f} TFLOP/s, Lab 7 {s['lab7']:.0f} ({ratio:.2f}×), cuBLAS "
             f"{s['cublas']:.0f} (Lab 9 at {s['lab9'] / s['cublas']:.2f}× cuBLAS); {s['clock']}")
        c.true(f"{m}×{n}×{k}: at least {TARGET}× Lab 7", ratio >= TARGET,
               hint="every cluster gets the same number of K steps: check the ranges (per) and that whole pairs "
               "go first and the Stream-K range is walked from its end")
        _common.check_speed_floor(c, SimpleNamespace(tflops=s["lab9"]), SimpleNamespace(tflops=s["course"]),
                                  f"{m}×{n}×{k}", hint="compare your fix-up and your split of the K steps with the "
                                  "text (a partial sum written or read more than once, a wait held too long)")


def check_streamk_kernel(source: str, *, benchmark: bool = True, seed: int | None = None, wrappers: str | None = None,
                         here: Any = None, carried: bool = True) -> None:
    """Grade the Lab 9 kernel: your Lab 7 kernel (the course's where yours does not pass Lab 7's check) with this
    lab's change and your regions from ``source`` (the LAB9_SRC cell), after your wrappers (``wrappers``; by default
    carried from your Lab 1 and 2 notebooks beside this one). ``carried=False``: ``source`` is a whole kernel, graded
    as it is (the course's bench/kernels/lab9_streamk.cu).

    Compile the Stream-K kernel and check its fix-up in the PTX (acquire, release, barriers between them and the
    workspace accesses, the reset). Then, wherever kernels run, C poisoned, against fp64, more launches bit-identical
    and the flags back to 0: on the H100 on every co-resident cluster (random shapes, three more launches), on the
    course's PTX executor on :data:`EMULATED_CLUSTERS` clusters (:func:`emulator_cases`, one more launch). On the
    H100 Lab 9 is then timed beside Lab 7, the course's Lab 9 kernel (bench/kernels/lab9_streamk.cu: the speed
    floor, ``_common.SPEED_FLOOR``) and cuBLAS on the two quantized shapes."""
    from . import _common

    made = None
    if carried:
        made, source = _carried(source, wrappers, here, quiet=True)
    rng = _rng(seed)
    with grading.check("Lab 9 · the Stream-K kernel", seed=rng.seed) as c:
        if made is not None:
            c.ok(f"graded: {made.whose('Lab 9')}")
            for line in made.merge.report():
                print(f"   ⚠ {line}")
        kernel = _common.compile_student(source, KERNEL_NAME, what="your kernel")
        report = kernel.report
        c.ok(f"compiles: {report.summary()}")
        _common.check_no_accumulator_spills(c, report,
               hint="the 128 accumulators must stay in registers: index d[] only with compile-time constants "
               "(#pragma unroll on the workspace loops)")
        c.true("setmaxnreg kept (24 for the producer, 240 for the consumers)", report.uses_setmaxnreg,
               hint="keep __launch_bounds__(384, 1) from Lab 7")
        for what, ok, hint in ptx_protocol(kernel.ptx):
            c.true(f"PTX: {what}", ok, hint=hint)
        if not _common.runnable(kernel, checked="the fix-up's PTX (above), the partition, the striped moves and the "
                                "ordered protocol (on the emulator)"):
            return
        hardware = _common.on_h100()
        small = emulator_cases(rng)
        if hardware:
            _trial(c, source, rng, _gpu_cases(rng), 3, None)
            with _common.emulated():  # the same kernel on the executor, hazard mode: the same verdict as without a GPU
                _trial(c, source, rng, small[:1], 1, EMULATED_CLUSTERS)
        else:
            _trial(c, source, rng, small, 1, EMULATED_CLUSTERS)
        if not benchmark:
            return
        if not hardware:
            print("timing skipped: Lab 9 beside Lab 7 and cuBLAS needs the H100 (the emulator checked the results "
                  "above)")
            return
        _timing(c, source)


# ------------------------------------------------------------------------------------------- the ladder
def ladder_rows(size: Any = QUANTIZED[0]) -> list[dict[str, Any]]:
    """The ladder at ``size`` ((M, N, K), or size³): the course's Lab 7 and Lab 9 kernels as measured on an H100,
    then your own Lab 9 kernel as the kernel check timed it in this session, beside the course's Lab 9 kernel timed
    in the same run."""
    from ._ladder import lab_ladder_rows

    steps = {"lab7": "Lab 7 · the course's kernel (data-parallel)", "lab9": "Lab 9 · the course's kernel"}
    return lab_ladder_rows(size, "Lab 9", steps, KERNEL_NAME)


def show_ladder(size: Any = QUANTIZED[0]) -> None:
    """The ladder at ``size`` as a table: TFLOP/s beside cuBLAS in the same run, and the ratio."""
    from ._ladder import show_rows

    show_rows(ladder_rows(size), size)


# =========================================================================================================
# 7 · the packed bf16x2 reduction, and the access width
# =========================================================================================================
#: (elements, threads, element_bytes, max_bytes) the width check always asks, then random ones
_WIDTH_CASES = [(128 * 256, 256, 4, 16), (128 * 256, 256, 2, 16), (100, 32, 4, 16), (6, 32, 2, 16),
                (7, 32, 2, 16), (24, 32, 2, 16), (12, 4, 4, 16), (64, 32, 8, 16), (10, 2, 2, 8), (96, 64, 2, 16)]


def _width_hint(fn: Callable[..., Any]) -> str:
    """Name the mistake of a wrong ``vector_width`` from what it answers on a few runs."""
    probe = [(100, 32, 4, 16), (6, 32, 2, 16), (24, 32, 2, 16), (96, 64, 2, 16)]
    try:
        got = [grading.call_student(fn, e, t, b, max_bytes=m) for e, t, b, m in probe]
    except Exception:  # noqa: BLE001 - the first failure already said what it raised
        got = []
    if got == [m // b for _, _, b, m in probe]:
        return ("the widest access is only right when it divides the run: halve the width while the number of "
                "elements is not a multiple of it (100 fp32: 4; 6 bf16: 2)")
    if got == [striped.vector_width(e, t, b, m) * b for e, t, b, m in probe]:
        return "that is the access in bytes; return how many elements one access moves (bytes / element_bytes)"
    if got == [striped.vector_width(-(-e // t), 1, b, m) for e, t, b, m in probe]:
        return ("the width must divide the whole run (elements), not each thread's share: the threads stripe the run "
                "one access at a time, so only the run's length decides whether the last access is whole")
    return ("start from max_bytes / element_bytes elements and halve while `elements` is not a multiple of the width "
            "(down to 1)")


def _bf16_words(rng: np.random.Generator, shape: int | tuple[int, ...], spread: int = 12) -> np.ndarray:
    """Random words of two finite bf16 each (exponents within 2^±spread of 1, some subnormal halves, some zeros)."""
    exp = rng.integers(127 - spread, 128 + spread, size=(2, *np.atleast_1d(shape)))
    halves = (rng.integers(0, 2, exp.shape) << 15) | (exp << 7) | rng.integers(0, 128, exp.shape)
    tiny = rng.random(exp.shape) < 0.1
    halves = np.where(tiny, (rng.integers(0, 2, exp.shape) << 15) | rng.integers(1, 128, exp.shape), halves)
    halves = np.where(rng.random(exp.shape) < 0.05, 0, halves)
    return (halves[0].astype(np.uint32) | (halves[1].astype(np.uint32) << 16)).astype(np.uint32)


def _pack(lo: list[int], hi: list[int]) -> np.ndarray:
    return (np.array(lo, np.uint32) | (np.array(hi, np.uint32) << 16)).astype(np.uint32)


def _packed_cases(rng: np.random.Generator) -> list[tuple[str, np.ndarray, list[np.ndarray], list[int]]]:
    """(what, workspace, partials, order): the named cases (each shows one mistake whatever the seed), then random
    workspaces with random orders."""
    one, half_ulp, two = 0x3F80, 0x3B80, 0x4000  # 1.0, 2^-8 (half a bf16 step at 1.0), 2.0
    sub, sub2, neg_sub = 0x0001, 0x0040, 0x8001  # 2^-133, 2^-127 (both subnormal), -2^-133
    words = 16
    cases = [
        ("subnormal halves (.noftz keeps them)", np.zeros(words, np.uint32),
         [_pack([sub] * words, [sub2] * words)] * 3, [0, 1, 2]),
        ("subnormal sums of normal values", np.full(words, int(_pack([0x0080], [0x8080])[0]), np.uint32),
         [_pack([neg_sub] * words, [0x0001] * words)], [0]),
        ("ties, one add at a time", np.full(words, int(_pack([one], [two])[0]), np.uint32),
         [_pack([half_ulp] * words, [0x3C00] * words)] * 2, [0, 1]),
        ("different halves (low half = lower address)", _pack(list(range(0x3F80, 0x3F80 + words)),
                                                              [0xC100] * words),
         [_pack([0x4040] * words, [0x3F00] * words)], [0]),
    ]
    big, small = _pack([one] * words, [two] * words), _pack([half_ulp] * words, [0x3C00] * words)
    minus = _pack([0xBF80] * words, [0xC000] * words)
    cases.append(("the order given (rounding makes it matter)", np.zeros(words, np.uint32), [big, small, minus],
                  [0, 2, 1]))
    for i in range(4):
        n, parts = int(rng.integers(8, 65)), int(rng.integers(2, 9))
        partials = [_bf16_words(rng, n) for _ in range(parts)]
        order = [int(x) for x in rng.permutation(parts)]
        if i == 3:  # some blocks add twice, some never
            order = [int(x) for x in rng.integers(0, parts, parts + 2)]
        cases.append((f"random: {n} words, {parts} partials, order {order}", _bf16_words(rng, n), partials, order))
    return cases


def _packed_hint(ws: np.ndarray, partials: list[np.ndarray], order: list[int], got: np.ndarray) -> str:
    """Name the mistake of a wrong packed reduction from the words it left."""
    def model(**kw: Any) -> np.ndarray:
        out = ws.copy()
        striped.reduce_add_bf16x2(out, partials, order, **kw)
        return out

    want = model()
    if np.array_equal(got, model(flush=True)):
        return (".noftz keeps subnormals: a half whose exponent field is 0 (|x| < 2^-126) is a value, not zero. You "
                "flushed it (inputs or sum) to zero, as a flushing (.ftz) add would")
    if np.array_equal(got, ((want >> 16) | (want << 16)).astype(np.uint32)):
        return ("the halves came back swapped: bits 0–15 of a word are the bf16 at the lower address, bits 16–31 "
                "the other")
    halves = []
    for shift in (0, 16):
        total = (ws >> shift & 0xFFFF).astype(np.uint32) << 16
        total = total.view(np.float32).astype(np.float64)
        for i in order:
            total = total + ((partials[i] >> shift & 0xFFFF).astype(np.uint32) << 16).view(np.float32)
        halves.append(striped._round_bf16(total.astype(np.float32).astype(np.float64)))
    once = (halves[0].astype(np.uint32) | (halves[1].astype(np.uint32) << 16)).astype(np.uint32)
    if np.array_equal(got, once):
        return ("each atomic rounds its sum to bf16 before the next one adds: you summed every partial in a wider type "
                "and rounded once. Round after every add, in the order given")
    natural = ws.copy()
    striped.reduce_add_bf16x2(natural, partials, sorted(order))
    if list(order) != sorted(order) and np.array_equal(got, natural):
        return "apply the partials in `order` (block indices, as the adds reached the word), not 0, 1, 2, …"
    trunc = ws.copy()
    for i in order:
        lohi = []
        for shift in (0, 16):
            s = (((trunc >> shift & 0xFFFF).astype(np.uint32) << 16).view(np.float32)
                 + ((partials[i] >> shift & 0xFFFF).astype(np.uint32) << 16).view(np.float32))
            lohi.append((s.astype(np.float32).view(np.uint32) >> 16).astype(np.uint32))
        trunc = (lohi[0] | (lohi[1] << 16)).astype(np.uint32)
    if np.array_equal(got, trunc):
        return "the sums were truncated (low 16 bits dropped): round each to the nearest bf16, ties to even"
    return ("for every index in order: split each word into its two bf16 halves, add the partial's half to the "
            "workspace's (exactly, e.g. in fp32), round to the nearest bf16 (ties to even, subnormals kept), pack "
            "again")


def check_packed_reduction(reduce_add_bf16x2: Callable[..., Any], vector_width: Callable[..., Any], *,
                           seed: int | None = None) -> None:
    """Grade ``vector_width(elements, threads, element_bytes, max_bytes=16)`` against the model on named and random
    runs, and ``reduce_add_bf16x2(ws, partials, order)`` (in place on uint32 words of two bf16) bit for bit against
    the model on named cases (subnormals, ties, halves, order) and random ones, then against the H100's words where
    ``tests/data/packed_red_h100.json`` is there."""
    import json

    rng = _rng(seed)
    with grading.check("Lab 9 · the access width and the packed bf16x2 reduction", seed=rng.seed) as c:
        cases = list(_WIDTH_CASES)
        for _ in range(12):
            cases.append((int(rng.integers(1, 5000)), int(rng.choice([32, 64, 128, 256])),
                          int(rng.choice([2, 4, 8])), int(rng.choice([8, 16]))))
        for e, t, b, m in cases:
            what = f"vector_width({e}, {t}, {b}, max_bytes={m})"
            got = _call(c, what, lambda *a, fn=vector_width, m=m: fn(*a, max_bytes=m), e, t, b)
            want = striped.vector_width(e, t, b, m)
            if isinstance(got, bool) or not isinstance(got, int | np.integer) or int(got) != want:
                c.fail(what, want, got, hint=_width_hint(vector_width))
        c.ok(f"vector_width: {len(cases)} runs, each the widest access that divides the run")
        for what, ws0, partials, order in _packed_cases(rng):
            ws = ws0.copy()
            given = [p.copy() for p in partials]
            call = f"reduce_add_bf16x2 ({what})"
            out = _call(c, call, reduce_add_bf16x2, ws, given, list(order),
                        hint="change ws in place, one word at a time")
            if out is not None and out is not ws and not np.shares_memory(np.asarray(out), ws) and \
                    np.array_equal(ws, ws0):
                c.fail(f"{call}: the workspace is unchanged (you returned a new array)",
                       hint="a red.add changes the workspace in place: write the words back into ws (ws[...] = …)")
            if any(not np.array_equal(g, p) for g, p in zip(given, partials, strict=True)):
                c.fail(f"{call} changed a partial", hint="the partials are only read")
            want = ws0.copy()
            striped.reduce_add_bf16x2(want, partials, order)
            if ws.dtype != np.uint32 or not np.array_equal(ws, want):
                i = int(np.flatnonzero(ws != want)[0]) if ws.shape == want.shape else 0
                c.fail(f"{call}: word {i}", f"{int(want.flat[i]):#010x}", f"{int(ws.flat[i]):#010x}",
                       hint=_packed_hint(ws0, partials, order, ws))
            c.ok(f"{what}: every word bit for bit")
        fixture = ROOT / "tests" / "data" / "packed_red_h100.json"
        if fixture.exists():
            rec = json.loads(fixture.read_text())
            parts = np.array(rec["partials"], np.uint32).reshape(64, -1)
            ws = np.zeros(parts.shape[1], np.uint32)
            _call(c, "reduce_add_bf16x2 (the H100's run)", reduce_add_bf16x2, ws, list(parts), list(range(64)))
            want = np.array(rec["words"], np.uint32)
            if not np.array_equal(ws, want):
                c.fail(f"the H100's words ({rec['how']})", f"{int(want[0]):#010x}, …", f"{int(ws[0]):#010x}, …",
                       hint=_packed_hint(np.zeros_like(ws), list(parts), list(range(64)), ws))
            c.ok(f"the H100's words, every one ({rec['meta']['gpu']}, {rec['meta']['date']}: {rec['how']})")
        else:
            print("   the H100's words: not measured yet (tools/h100/packed_red.py writes "
                  "tests/data/packed_red_h100.json)")
