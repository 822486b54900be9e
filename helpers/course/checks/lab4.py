"""Graders of Lab 4 (pipelines and warp specialization): ring arithmetic, barrier counts, the producer/consumer
protocol on the emulator (with and without a wgmma group in flight), the stage count from the shared-memory budget,
the setmaxnreg register budget, and the two CUDA kernels, grown from the student's Lab 3 kernel and built on their
own wrappers (run on a small non-square shape on the course's PTX executor in hazard mode, with or without a GPU, with
the work checked: each element of C stored once, by the block of its tile, each wgmma product computed once; on the
H100 also on random large shapes there, and timed beside cuBLAS; their compile report and the protocol read from
their PTX as the explanation).

The protocol steps run the student's role programs on :mod:`helpers.hopper.pipeline` under several stage counts,
latencies and consumer counts; the pipeline's errors (Deadlock, ReadBeforeFull, OverwriteBeforeEmpty,
ReleaseBeforeRetire) fail the check, and the hint comes from comparing the student's command stream with the
reference one, so it names the mistake that was made.

Conventions (the lineage): A is M×K bf16 row-major, B is N×K bf16 row-major (K-major), C = A·Bᵀ is M×N fp32
row-major. A stage holds one BM×64 tile of A and one BN×64 tile of B, both 128B-swizzled by TMA.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.course import carry, grading
from helpers.course.checks import _common as C
from helpers.course.checks._record import Protocol, Ring
from helpers.course.hints import answer, hint
from helpers.course.widgets import registers
from helpers.gpu.hardware import this_gpu
from helpers.hopper import pipeline as pl

__all__ = [
    "BM", "BN", "BK", "A_BYTES", "B_BYTES", "STAGE_BYTES", "WGMMAS_PER_STAGE", "SMEM_LIMIT", "REGISTER_FILE",
    "VERDICTS", "hint", "answer", "kernel_changes", "carry_wrappers", "reference_ring_slot", "reference_init_counts",
    "reference_producer", "reference_consumer", "reference_overlapped_consumer", "reference_stages",
    "dynamic_smem_bytes", "smem_bytes", "reference_setmaxnreg_verdict", "entry_registers", "Config", "FIXED_CONFIGS",
    "run_protocol", "record", "check_ring_slot", "check_init_counts", "check_protocol", "check_overlapped_consumer",
    "check_stages_for_budget", "check_setmaxnreg_budget", "PC", "WS", "KernelSpec", "check_pc_kernel",
    "check_ws_kernel", "check_step8_kernel", "step8_kernel", "saved_step8_kernel", "check_kernel_work",
    "executor_runs", "source_stages", "gpu_benchmark", "MEASURED",
    "step_changes", "lab3_speed_note", "ladder_rows", "ladder_table", "show_ladder", "show_timeline",
]

BM, BN, BK = 128, 256, 64  # the lab's final tile: 128 rows of A, 256 rows of B, 64 along K per stage
A_BYTES = BM * BK * 2  # 16384
B_BYTES = BN * BK * 2  # 32768
STAGE_BYTES = A_BYTES + B_BYTES  # 49152
WGMMAS_PER_STAGE = BK // 16  # one m64n256k16 per 16-wide K slice, per consumer warpgroup
SMEM_LIMIT = 227 * 1024  # dynamic shared memory one block may opt in to on an H100 (232448 bytes)
ALIGN = 1024  # the 128B swizzle wants 1024-byte aligned tiles; the dynamic base is aligned by hand
BARRIER_BYTES = 16  # full[s] and empty[s]: 8 bytes each, per stage
REGISTER_FILE = registers.REGISTER_FILE  # 32-bit registers per SM
VERDICTS = registers.VERDICTS


# ------------------------------------------------------------------------------------------- references
def reference_ring_slot(k: int, stages: int) -> tuple[int, int]:
    """Use ``k`` of a ring of ``stages`` slots: (slot, parity of the slot's barrier phase)."""
    return pl.stage_and_phase(k, stages)


def reference_init_counts(consumers: int) -> tuple[int, int]:
    """(full count, empty count): the producer's arrive.expect_tx is full's only arrival (the TMA adds bytes,
    not arrivals); one elected thread of each consumer warpgroup arrives on empty."""
    return 1, consumers


def reference_producer(ctx: pl.Role, k_tiles: int) -> Generator:
    """One thread of the producer warpgroup: wait until the stage is free, announce its bytes, issue the copies."""
    yield from pl.producer_program(k_tiles, ctx.stages, A_BYTES, B_BYTES)(ctx)


def reference_consumer(ctx: pl.Role, k_tiles: int) -> Generator:
    """A consumer warpgroup that waits for its wgmmas before releasing the stage (wait_group 0)."""
    yield from pl.async_consumer_program(k_tiles, ctx.stages, WGMMAS_PER_STAGE, in_flight=0)(ctx)


def reference_overlapped_consumer(ctx: pl.Role, k_tiles: int) -> Generator:
    """A consumer warpgroup that keeps one wgmma group in flight and releases the previous stage."""
    yield from pl.async_consumer_program(k_tiles, ctx.stages, WGMMAS_PER_STAGE, in_flight=1)(ctx)


def smem_bytes(stages: int, bm: int = BM, bn: int = BN, bk: int = BK) -> int:
    """Shared memory a kernel with ``stages`` stages takes in all: 1024 bytes of slack to align the tiles by hand,
    then per stage its two tiles and its full and empty barriers (8 bytes each)."""
    return ALIGN + stages * ((bm + bn) * bk * 2 + BARRIER_BYTES)


def dynamic_smem_bytes(stages: int, bm: int = BM, bn: int = BN, bk: int = BK) -> int:
    """What the host passes at launch as dynamic shared memory: the slack and the tiles (the barriers are the
    kernel's static shared memory)."""
    return ALIGN + stages * (bm + bn) * bk * 2


def reference_stages(bm: int, bn: int, bk: int, smem_limit: int = SMEM_LIMIT) -> int:
    """The most stages whose :func:`smem_bytes` fit in ``smem_limit``."""
    return max(0, (smem_limit - ALIGN) // ((bm + bn) * bk * 2 + BARRIER_BYTES))


def entry_registers(threads: int) -> int:
    """Registers per thread ptxas gives a kernel with ``__launch_bounds__(threads, 1)`` (384 threads → 168)."""
    return registers.entry_registers(threads, 1)


#: the first broken setmaxnreg rule, or "ok" (multiples of 8, then 24..256, then the block's pool)
reference_setmaxnreg_verdict = registers.setmaxnreg_verdict


# ------------------------------------------------------------------------------------------- plumbing
def _ints(value: Any, n: int) -> tuple[int, ...] | None:
    """``value`` as a tuple of ``n`` Python ints, or None (bools and floats are not ints)."""
    try:
        items = tuple(value)
    except TypeError:
        return None
    if len(items) != n or not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
        if len(items) == n and all(hasattr(x, "__index__") and not isinstance(x, bool) for x in items):
            return tuple(int(x) for x in items)
        return None
    return items


# ------------------------------------------------------------------------------------------- 1 · ring slots
def _ring_hint(answers: dict[int, tuple[int, int]], stages: int) -> str:
    """Name the mistake from the student's answers for uses k of a ring of ``stages`` (all k asked so far)."""
    ks = sorted(answers)
    slots = [answers[k][0] for k in ks]
    phases = [answers[k][1] for k in ks]
    if slots != [k % stages for k in ks]:
        if stages != 2 and slots == [k % 2 for k in ks]:
            return f"k % 2 only works for a ring of 2 stages; this ring has {stages}: the slot is k % S"
        if stages & (stages - 1) and slots == [k & (stages - 1) for k in ks]:
            return f"k & (S - 1) equals k % S only when S is a power of two; S = {stages} is not: use k % S"
        if slots == ks:
            return "the slot wraps around: k % S"
        return "the slot of use k is k % S"
    want = [(k // stages) & 1 for k in ks]
    if phases == [p ^ 1 for p in want]:
        return ("that is the producer's parity for EMPTY (flipped); the phase of use k of its slot is (k // S) & 1, "
                "starting at 0")
    if len(set(phases)) == 1 and max(ks) >= stages:
        return "the parity never flips in your answer: it must flip each time the ring wraps, (k // S) & 1"
    if phases == [k & 1 for k in ks]:
        return "the parity flips each time the ring wraps around (every S uses), not at every use: (k // S) & 1"
    if phases == [k // stages for k in ks]:
        return "a parity is 0 or 1: keep only the lowest bit of k // S"
    return "the phase of use k is the number of times the ring wrapped, k // S, modulo 2"


def check_ring_slot(ring_slot: Callable[[int, int], tuple[int, int]], *, seed: int | None = None) -> None:
    """Grade ``ring_slot(k, S) -> (stage, phase)`` for every S in 1..9 and 12 over several wraps, and random large
    k and S."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · ring slots: stage and phase of use k", seed=rng.seed) as c:
        groups = [(s, list(range(3 * s + 2))) for s in (3, 1, 2, 4, 5, 6, 7, 8, 9, 12)]
        groups += [(int(s), sorted(int(x) for x in rng.integers(10**3, 10**7, size=4)))
                   for s in rng.integers(2, 17, size=10)]
        for stages, ks in groups:
            answers: dict[int, tuple[int, int]] = {}
            for k in ks:
                what = f"ring_slot(k={k}, S={stages})"
                raw = C.call(c, what, ring_slot, k, stages)
                got = _ints(raw, 2)
                expected = reference_ring_slot(k, stages)
                if got is None:
                    c.fail(what, expected, raw, hint="return a pair of ints (stage, phase)")
                answers[k] = got
                if got != expected:
                    more = {j: _ints(C.call(c, f"ring_slot(k={j}, S={stages})", ring_slot, j, stages), 2)
                            for j in range(3 * stages + 2)}
                    if any(v is None for v in more.values()):
                        more = {}
                    c.fail(what, expected, got, hint=_ring_hint({**more, **answers}, stages))
            if ks[0] == 0:
                c.ok(f"S = {stages}: uses 0..{ks[-1]} (the ring wraps 3 times), stage and phase exact")
        c.ok("40 random (k, S) with k up to 10⁷ and S up to 16: exact")


# ------------------------------------------------------------------------------------------- 2 · init counts
def _counts_hint(consumers: int, got: tuple[int, int]) -> str:
    full, empty = got
    if full != 1:
        if full == 2:
            return ("full needs one arrival per phase: the producer's arrive.expect_tx. The TMA copies add bytes "
                    "(complete_tx), they never arrive")
        if full == consumers * 128 + 1 or full == consumers + 1:
            return ("that count is for a barrier every consumer arrives on before waiting (cuda::barrier's "
                    "arrive-and-wait); here consumers only wait on full, and the producer's arrive.expect_tx is "
                    "its one arrival")
        return "full: the only thread that arrives is the producer, once per phase, with arrive.expect_tx"
    if empty == consumers * 128:
        return ("one elected thread per consumer warpgroup arrives on empty (not all 128 threads): the count is the "
                "number of consumer warpgroups")
    if empty == consumers + 1:
        return "the producer only waits on empty, it does not arrive: count only the consumer warpgroups"
    if empty == 1 and consumers > 1:
        return (f"with {consumers} consumer warpgroups reading each stage, empty must wait for all of them: with "
                "count 1 the first release lets the producer overwrite a tile the others still read")
    return "empty: one arrival from each consumer warpgroup per phase"


def check_init_counts(init_counts: Callable[[int], tuple[int, int]], *, seed: int | None = None) -> None:
    """Grade ``init_counts(consumers) -> (full count, empty count)`` for 1..4 consumer warpgroups."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · barrier arrival counts", seed=rng.seed) as c:
        for consumers in [2, 1, 3, 4][: 2 + int(rng.integers(1, 3))]:
            what = f"init_counts(consumers={consumers})"
            raw = C.call(c, what, init_counts, consumers)
            got = _ints(raw, 2)
            expected = reference_init_counts(consumers)
            if got is None:
                c.fail(what, expected, raw, hint="return a pair of ints (full count, empty count)")
            if got != expected:
                c.fail(what, expected, got, hint=_counts_hint(consumers, got))
            c.ok(f"{consumers} consumer warpgroup(s): full expects 1 arrival + the bytes, empty {consumers}")


# ------------------------------------------------------------------------------------------- 3 · the protocol
@dataclass(frozen=True)
class Config:
    """One run of the protocol on the emulator."""

    stages: int
    consumers: int
    k_tiles: int
    tma_latency: float
    wgmma_latency: float
    drain: float

    def __str__(self) -> str:
        return (f"S={self.stages}, {self.consumers} consumer{'s' if self.consumers > 1 else ''}, "
                f"{self.k_tiles} K tiles, TMA {self.tma_latency:g}, wgmma {self.wgmma_latency:g}")


#: fixed runs that tell every named mistake apart (memory-bound and compute-bound, S not a power of two, wraps)
FIXED_CONFIGS = (
    Config(3, 1, 10, 400, 30, 40),
    Config(3, 2, 11, 400, 30, 40),
    Config(4, 2, 13, 60, 80, 20),
    Config(2, 1, 7, 50, 50, 10),
    Config(5, 2, 12, 800, 20, 60),
    Config(6, 3, 20, 300, 40, 30),
)


def _random_configs(rng: Any, n: int) -> list[Config]:
    out = []
    for _ in range(n):
        stages = int(rng.integers(2, 8))
        out.append(Config(stages, int(rng.integers(1, 4)), int(rng.integers(stages + 1, 4 * stages + 2)),
                          float(rng.integers(40, 1000)), float(rng.integers(10, 120)), float(rng.integers(0, 80))))
    return out


def _as_program(fn: Callable[..., Any], k_tiles: int, who: str) -> Callable[[pl.Role], Generator]:
    def program(ctx: pl.Role) -> Generator:
        gen = fn(ctx, k_tiles)
        if not inspect.isgenerator(gen):
            raise _NotAGenerator(f"your {who} returned {gen!r} instead of yielding commands: write `yield ctx.wait("
                                 "...)`, `yield ctx.tma_load(...)`, … (a function with yield is a generator)")
        return (yield from gen)

    return program


class _NotAGenerator(pl.PipelineError):
    pass


def run_protocol(producer: Callable, consumer: Callable, counts: tuple[int, int], cfg: Config) -> pl.Pipeline:
    """Run a producer and ``cfg.consumers`` copies of a consumer on the emulator; returns the finished pipeline."""
    p = pl.Pipeline(cfg.stages, cfg.tma_latency, cfg.wgmma_latency, full_count=counts[0], empty_count=counts[1],
                    wgmma_drain=cfg.drain)
    p.add_role("producer", _as_program(producer, cfg.k_tiles, "producer"))
    for i in range(cfg.consumers):
        p.add_role(f"consumer{i}", _as_program(consumer, cfg.k_tiles, "consumer"), consumer=True)
    p.run(max_time=1e9)
    return p


class _Recorder:
    """A stand-in ctx that records the commands a role program yields, as if every wait passed at once."""

    def __init__(self, stages: int):
        self.stages = stages
        self.full = [f"full[{i}]" for i in range(stages)]
        self.empty = [f"empty[{i}]" for i in range(stages)]
        self.now = 0.0

    def wait(self, bar: str, parity: int) -> tuple:
        return ("wait", bar, parity)

    def arrive(self, bar: str, count: int = 1) -> tuple:
        return ("arrive", bar, count)

    def expect_tx(self, bar: str, nbytes: int) -> tuple:
        return ("expect_tx", bar, nbytes)

    def arrive_expect_tx(self, bar: str, nbytes: int) -> tuple:
        return ("arrive_expect_tx", bar, nbytes)

    def tma_load(self, stage: int, bar: str, nbytes: int, label: str = "") -> tuple:
        return ("tma", stage, bar, nbytes)

    def wgmma(self, stage: int, duration: float | None = None) -> tuple:
        return ("wgmma", stage)

    def wgmma_async(self, stage: int, duration: float | None = None) -> tuple:
        return ("wgmma_async", stage)

    def commit_group(self) -> tuple:
        return ("commit",)

    def wait_group(self, n: int) -> tuple:
        return ("wait_group", n)

    def work(self, duration: float, label: str = "") -> tuple:
        return ("work", duration)


def record(program: Callable, stages: int, k_tiles: int, limit: int = 20000) -> list[tuple]:
    """The commands ``program(ctx, k_tiles)`` yields when every wait passes at once (for diagnosis)."""
    out: list[tuple] = []
    try:
        gen = program(_Recorder(stages), k_tiles)
        if not inspect.isgenerator(gen):
            return out
        for cmd in gen:
            out.append(cmd)
            if len(out) >= limit:
                break
    except Exception:  # noqa: BLE001 - a program that breaks on the recorder is diagnosed by the real run
        pass
    return out


def _steps(cmds: list[tuple], starts: tuple[str, ...]) -> list[list[tuple]]:
    """Split a command stream into steps, each starting at a command whose kind is in ``starts``."""
    steps: list[list[tuple]] = []
    for cmd in cmds:
        if cmd[0] in starts or not steps:
            steps.append([])
        steps[-1].append(cmd)
    return steps


def _producer_hint(student: Callable, stages: int, k_tiles: int) -> str:
    """Name the first difference between the student's producer and the reference one, or ''."""
    got = record(student, stages, k_tiles)
    want = record(reference_producer, stages, k_tiles)
    if not got:
        return ""
    if not any(c[0] == "wait" and str(c[1]).startswith("empty") for c in got):
        return ("your producer never waits on empty[s]: it refills a stage while the consumers may still be reading "
                "it. Before refilling stage s, wait on empty[s]")
    if any(c[0] == "wait" and str(c[1]).startswith("full") for c in got):
        return "the producer waits on empty[s] (stage free?); only the consumers wait on full[s]"
    for k, (g, w) in enumerate(zip(_steps(got, ("wait",)), _steps(want, ("wait",)), strict=False)):
        s, phase = reference_ring_slot(k, stages)
        gw = g[0]
        if gw[0] == "wait" and gw[1] != w[0][1]:
            bad = int(str(gw[1])[6:-1]) if str(gw[1]).startswith("empty[") else gw[1]
            return (f"use k = {k} goes to stage k % S = {s} with S = {stages}; your producer used stage {bad}"
                    + (" (k % 2 only works for two stages)" if bad == k % 2 and stages != 2 else ""))
        if gw[0] == "wait" and gw[2] != w[0][2]:
            if k < stages:
                return (f"the first wait on a fresh empty[{s}] must pass at once: wait with the flipped parity, "
                        f"(phase ^ 1) = {phase ^ 1}; a fresh barrier counts the phase before phase 0 as complete")
            return (f"at use k = {k} (the ring wrapped {k // stages} time(s)) the producer must wait on empty[{s}] "
                    f"with parity {phase ^ 1}: the parity flips on each wrap ((k // S) & 1, then flipped)")
        expects = [x for x in g if x[0] in ("arrive_expect_tx", "expect_tx")]
        copies = [x for x in g if x[0] == "tma"]
        if sum(x[2] for x in expects) != A_BYTES + B_BYTES and expects:
            return (f"the stage's full barrier must expect the bytes of both copies: A_BYTES + B_BYTES = "
                    f"{A_BYTES + B_BYTES}; your producer announced {sum(x[2] for x in expects)}")
        if not any(x[0] == "arrive_expect_tx" for x in g) and not any(x[0] == "arrive" for x in g):
            return "full[s] expects one arrival: announce the bytes with arrive_expect_tx (it also arrives)"
        if sorted(x[3] for x in copies) != [A_BYTES, B_BYTES]:
            return f"each stage gets two copies: the A tile (A_BYTES = {A_BYTES}) and the B tile (B_BYTES = {B_BYTES})"
        if any(x[1] != s or x[2] != f"full[{s}]" for x in copies):
            return f"use k = {k}: both copies go into stage {s} and complete on full[{s}]"
    if len(got) < len(want):
        return f"your producer stopped early: it must fill one stage per K tile ({k_tiles} of them)"
    return ""


def _consumer_hint(student: Callable, stages: int, k_tiles: int, overlapped: bool) -> str:
    """Name the first difference between the student's consumer and what a correct one does, or ''."""
    got = record(student, stages, k_tiles)
    if not got:
        return ""
    waits = [c for c in got if c[0] == "wait"]
    if any(str(c[1]).startswith("empty") for c in waits):
        return "consumers wait on full[s] (data landed?); only the producer waits on empty[s]"
    for k, w in enumerate(waits[:k_tiles]):
        s, phase = reference_ring_slot(k, stages)
        if w[1] != f"full[{s}]":
            return f"use k = {k} reads stage k % S = {s} (S = {stages}); your consumer waited on {w[1]}"
        if w[2] != phase:
            if k < stages:
                return f"the first fill of stage {s} completes phase 0 of full[{s}]: wait with parity 0"
            return (f"at use k = {k} the ring has wrapped {k // stages} time(s): wait on full[{s}] with parity "
                    f"(k // S) & 1 = {phase}; the parity flips on each wrap")
    arrives = [c for c in got if c[0] == "arrive"]
    group_waits = [c[1] for c in got if c[0] == "wait_group"]
    if overlapped and group_waits and group_waits[-1] != 0:
        return "the drain: after the loop, wait_group(0) retires the last group; then release its stage"
    if any(str(c[1]).startswith("full") for c in arrives):
        return "consumers do not arrive on full[s]: the producer's arrive.expect_tx is its only arrival"
    if any(c[2] != 1 for c in arrives):
        return "one elected thread per consumer warpgroup arrives on empty[s]: arrive once, with count 1"
    if len(arrives) < k_tiles:
        return (f"your consumer releases {len(arrives)} stage(s) for {k_tiles} K tiles: release every stage it "
                "read (after the loop, release the ones still held)")
    kinds = [c[0] for c in got]
    if overlapped and ("wait_group", 1) not in got:
        return ("keep one wgmma group in flight: after committing step k's group, wait_group(1) retires step k-1's "
                "group, then release step k-1's stage")
    if "wgmma_async" in kinds and "commit" not in kinds:
        return "commit the step's wgmmas as a group (commit_group) before waiting for it with wait_group"
    # where does each release sit relative to the wait that retires its wgmmas?
    pending = 0
    for cmd in got:
        if cmd[0] == "wgmma_async":
            pending += 1
        elif cmd[0] == "wait_group":
            pending = min(pending, 1) if cmd[1] else 0
        elif cmd[0] == "arrive" and str(cmd[1]).startswith("empty") and pending and not overlapped:
            return ("the stage is released while the wgmmas that read it may still run: wait_group(0) first, then "
                    "arrive on empty[s]")
    steps = _steps(got, ("wait",))
    for k, step in enumerate(steps[:k_tiles]):
        s = reference_ring_slot(k, stages)[0]
        rel = [c for c in step if c[0] == "arrive"]
        if overlapped and rel and rel[0][1] == f"empty[{s}]":
            return ("with one group in flight, the group of step k may still run after wait_group(1): release the "
                    "PREVIOUS step's stage (k - 1), and after the loop wait_group(0) and release the last one")
    return ""


def _protocol(c: grading.Check, producer: Callable, consumer: Callable, init_counts: Callable, configs: list[Config],
              overlapped: bool) -> list[tuple[Config, pl.Pipeline]]:
    runs = []
    for cfg in configs:
        raw = C.call(c, f"init_counts({cfg.consumers})", init_counts, cfg.consumers)
        counts = _ints(raw, 2)
        if counts is None:
            c.fail(f"init_counts({cfg.consumers})", reference_init_counts(cfg.consumers), raw,
                   hint="return a pair of ints (full count, empty count)")
        try:
            p = run_protocol(producer, consumer, counts, cfg)
        except (NotImplementedError, grading.CheckFailed):
            raise
        except Exception as exc:  # noqa: BLE001 - every error of the run is reported in words
            name = type(exc).__name__
            what = {"Deadlock": "deadlock", "ReadBeforeFull": "a stage read before its tile landed",
                    "OverwriteBeforeEmpty": "a stage refilled while a consumer still needed it",
                    "ReleaseBeforeRetire": "a stage released while its wgmma was still running",
                    "MBarrierError": "a barrier used wrongly"}.get(name, name)
            if not isinstance(exc, pl.MBarrierError):
                c.fail(f"{cfg}: your code raised {name}: {exc}", hint="fix the error in your producer or consumer "
                       "(the roles run with ctx.stages, ctx.full, ctx.empty; A_BYTES, B_BYTES, WGMMAS and ring_slot "
                       "from the cells above)")
            hint = (_counts_hint(cfg.consumers, counts) if counts != reference_init_counts(cfg.consumers) else "")
            hint = hint or _producer_hint(producer, cfg.stages, cfg.k_tiles)
            hint = hint or _consumer_hint(consumer, cfg.stages, cfg.k_tiles, overlapped)
            c.fail(f"{cfg}: {what}", detail="    " + str(exc).replace("\n", "\n    "), hint=hint or
                   "compare each command with the protocol in the text above")
        _streamed(c, p, cfg, producer, consumer, overlapped)
        runs.append((cfg, p))
    return runs


def _streamed(c: grading.Check, p: pl.Pipeline, cfg: Config, producer: Callable, consumer: Callable,
              overlapped: bool) -> None:
    """Every consumer read every K tile in order, four wgmmas each, and released every stage once."""
    for i in range(cfg.consumers):
        name = f"consumer{i}"
        reads = [(e.stage, e.phase) for e in p.events("read", role=name)]
        want = [reference_ring_slot(k, cfg.stages)[0:1] + (k // cfg.stages,) for k in range(cfg.k_tiles)
                for _ in range(WGMMAS_PER_STAGE)]
        if reads != want:
            c.fail(f"{cfg}: {name} read (stage, fill) {reads[:12]}…", detail=f"    expected {want[:12]}…",
                   hint=_consumer_hint(consumer, cfg.stages, cfg.k_tiles, overlapped)
                   or f"each K tile k is read by {WGMMAS_PER_STAGE} wgmmas on stage k % S, fill k // S")
        releases = p.events("release", role=name)
        if len(releases) != cfg.k_tiles:
            c.fail(f"{cfg}: {name} released {len(releases)} stages for {cfg.k_tiles} K tiles",
                   hint=_consumer_hint(consumer, cfg.stages, cfg.k_tiles, overlapped)
                   or "release every stage once, after its wgmmas retired")
    loads = p.events("tma_issue")
    if len(loads) != 2 * cfg.k_tiles:
        c.fail(f"{cfg}: the producer issued {len(loads)} copies for {cfg.k_tiles} K tiles",
               hint=_producer_hint(producer, cfg.stages, cfg.k_tiles) or "two copies (A and B) per K tile")


def check_protocol(producer: Callable, consumer: Callable, init_counts: Callable, *, seed: int | None = None) -> None:
    """Grade the producer and consumer role programs (consumer waits for its wgmmas) and the barrier counts on the
    emulator: fixed runs that tell the classic mistakes apart, then random stage counts, latencies and consumer
    counts."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · the full/empty protocol on the emulator", seed=rng.seed) as c:
        configs = list(FIXED_CONFIGS) + _random_configs(rng, 3)
        for cfg, p in _protocol(c, producer, consumer, init_counts, configs, overlapped=False):
            c.ok(f"{cfg}: all {cfg.k_tiles} tiles streamed to every consumer, no deadlock, no early read, no "
                 f"overwrite (tensor cores busy {p.tensor_utilization:.0%})")


def check_overlapped_consumer(producer: Callable, consumer: Callable, init_counts: Callable, *,
                              seed: int | None = None) -> None:
    """Grade the consumer that keeps one wgmma group in flight (wait_group 1) and releases the previous stage:
    the protocol runs as in :func:`check_protocol`, and in every run each stage is released only after the group
    that read it retired and after the next group was issued. Each line also shows how busy the tensor cores were,
    beside the reference consumer that waits for every group."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · one wgmma group in flight, delayed release", seed=rng.seed) as c:
        configs = list(FIXED_CONFIGS) + _random_configs(rng, 3)
        for cfg, p in _protocol(c, producer, consumer, init_counts, configs, overlapped=True):
            for i in range(cfg.consumers):
                name = f"consumer{i}"
                commits = [e.time for e in p.events("commit", role=name)]
                releases = p.events("release", role=name)
                early = [n for n, r in enumerate(releases[:-1]) if n + 1 < len(commits) and r.time < commits[n + 1]]
                if early:
                    n = early[0]
                    c.fail(f"{cfg}: {name} released step {n}'s stage before issuing step {n + 1}'s wgmmas",
                           hint="keep step k-1's group in flight while step k's is issued: release step k-1's "
                           "stage only after committing step k's group and wait_group(1)")
            base = run_protocol(reference_producer, reference_consumer, reference_init_counts(cfg.consumers), cfg)
            c.ok(f"{cfg}: every stage released after its group retired and the next was issued; tensor cores busy "
                 f"{p.tensor_utilization:.0%} (waiting for every group: {base.tensor_utilization:.0%})")


# ------------------------------------------------------------------------------------------- 4 · stages
def _stages_hint(got: int, bm: int, bn: int, bk: int, limit: int) -> str:
    stage = (bm + bn) * bk * 2
    if got == limit // stage or got == (limit - ALIGN) // stage:
        return ("count everything the kernel asks for: 1024 bytes of alignment slack once, and per stage the two "
                "tiles plus the 16 bytes of its full and empty barriers")
    if got == (limit - ALIGN) // (bm * bk * 2 + BARRIER_BYTES) or got == (limit - ALIGN) // (bn * bk * 2 +
                                                                                              BARRIER_BYTES):
        return "a stage holds both tiles: BM×BK of A and BN×BK of B"
    if got == (limit - ALIGN) // ((bm + bn) * bk * 4 + BARRIER_BYTES):
        return "the tiles are bf16: 2 bytes per element"
    if got == (limit - ALIGN) // ((bm + bn) * bk + BARRIER_BYTES):
        return "count bytes, not elements: a bf16 is 2 bytes"
    if got == -(-(limit - ALIGN) // (stage + BARRIER_BYTES)):
        return "round down: a stage that does not fit whole cannot be used"
    return "stages = (limit - 1024) // ((BM + BN) · BK · 2 + 16)"


def check_stages_for_budget(stages_for_budget: Callable[[int, int, int, int], int], *,
                            seed: int | None = None) -> None:
    """Grade ``stages_for_budget(BM, BN, BK, smem_limit) -> S``: the lab's tiles, limits just above and below each
    boundary (so the slack and the barriers count), and random tiles."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · stages from the shared-memory budget", seed=rng.seed) as c:
        cases = [(128, 256, 64, SMEM_LIMIT), (128, 128, 64, SMEM_LIMIT), (64, 64, 64, SMEM_LIMIT)]
        for bm, bn, bk in [(128, 256, 64), (128, 128, 64), (64, 128, 64), (256, 128, 64)]:
            stage = (bm + bn) * bk * 2
            s = int(rng.integers(1, 6))
            exact = ALIGN + s * (stage + BARRIER_BYTES)
            cases += [(bm, bn, bk, exact), (bm, bn, bk, exact - 1), (bm, bn, bk, exact - BARRIER_BYTES),
                      (bm, bn, bk, exact - ALIGN)]
        cases += [(stage_m, 64 * int(rng.integers(1, 5)), 64, int(rng.integers(40_000, SMEM_LIMIT + 1)))
                  for stage_m in (64 * int(x) for x in rng.integers(1, 5, size=5))]
        cases.append((256, 256, 64, 60_000))  # not even one stage fits
        for bm, bn, bk, limit in cases:
            what = f"stages_for_budget(BM={bm}, BN={bn}, BK={bk}, smem_limit={limit})"
            raw = C.call(c, what, stages_for_budget, bm, bn, bk, limit)
            expected = reference_stages(bm, bn, bk, limit)
            got = _ints((raw,), 1)
            if got is None:
                c.fail(what, expected, raw, hint="return an int")
            if got[0] != expected:
                c.fail(what, expected, got[0], hint=_stages_hint(got[0], bm, bn, bk, limit))
        c.ok(f"the lab's 128×256 tile: {reference_stages(BM, BN, BK)} stages in {SMEM_LIMIT} bytes "
             f"({smem_bytes(reference_stages(BM, BN, BK))} bytes of shared memory in all)")
        c.ok(f"{len(cases) - 1} more budgets, at and around the boundaries (slack and barriers counted), exact")


# ------------------------------------------------------------------------------------------- 5 · setmaxnreg
def _verdict_hint(entry: int, counts: list[int], got: str, expected: str) -> str:
    if got not in VERDICTS:
        return f"answer with one of {VERDICTS}"
    pool = entry * len(counts)
    if expected == VERDICTS[3]:
        return (f"the block starts with {entry} registers per thread, a pool of {entry} × {len(counts)} warpgroups "
                f"= {pool} per thread-slot; the counts ask for {sum(counts)}: setmaxnreg.inc would wait forever")
    if got == VERDICTS[3] and expected == VERDICTS[0]:
        return (f"{' + '.join(map(str, counts))} = {sum(counts)} ≤ {entry} × {len(counts)} = {pool}: the registers "
                "the producer gives back are what the consumers take")
    if expected == VERDICTS[1]:
        return "setmaxnreg counts are multiples of 8 (ptxas refuses the others; it checks this first)"
    if expected == VERDICTS[2]:
        return "setmaxnreg counts go from 24 to 256"
    return "check the rules in order: multiples of 8, then 24..256, then the pool"


def check_setmaxnreg_budget(setmaxnreg_verdict: Callable[[int, list[int]], str], *, seed: int | None = None) -> None:
    """Grade ``setmaxnreg_verdict(entry, counts) -> str``: every rule alone, at its boundaries, several at once,
    and random budgets."""
    rng = grading.fresh_rng(seed)
    with grading.check("Lab 4 · does the register budget add up?", seed=rng.seed) as c:
        cases = [
            (168, [24, 240, 240]), (168, [24, 248, 240]), (168, [32, 240, 240]), (168, [24, 232, 240]),
            (168, [24, 240, 244]), (168, [16, 240, 240]), (168, [24, 240, 264]), (168, [20, 240, 240]),
            (168, [24, 256, 224]), (128, [24, 160, 160, 168]), (128, [24, 168, 168, 168]),
            (168, [24, 256, 256]), (168, [12, 300, 240]), (168, [256, 256, 256]), (96, [24, 24, 24, 24, 256]),
            (168, [28, 240, 240]), (168, [24, 236, 248]), (255, [256]), (255, [248]),
        ]
        for _ in range(25):
            wgs = int(rng.integers(2, 6))
            threads = 128 * wgs
            entry = entry_registers(threads)
            counts = [int(x) for x in 8 * rng.integers(3, 33, size=wgs)]
            if rng.random() < 0.25:
                counts[int(rng.integers(0, wgs))] += int(rng.choice([-4, 4, 2, 264]))
            cases.append((entry, counts))
        passed = {v: 0 for v in VERDICTS}
        for entry, counts in cases:
            what = f"setmaxnreg_verdict(entry={entry}, counts={counts})"
            got = C.call(c, what, setmaxnreg_verdict, entry, list(counts))
            expected = reference_setmaxnreg_verdict(entry, counts)
            if got != expected:
                c.fail(what, expected, got, hint=_verdict_hint(entry, counts, got, expected))
            passed[expected] += 1
        c.ok("24 + 240 + 240 = 504 = 3 × 168 adds up; 24 + 248 + 240 does not (setmaxnreg.inc would hang)")
        c.ok(f"{len(cases)} budgets: " + ", ".join(f"{n} × {v!r}" for v, n in passed.items()))


# ------------------------------------------------------------------------------------------- 7, 8 · the kernels
HEADER = "#include <hopper.cuh>\n"


@dataclass(frozen=True)
class KernelSpec:
    """What one CUDA step of the lab must be."""

    step: str  # short name in the ladder
    ladder_key: str  # its rung in bench/results/ladder.json (helpers.course.ladder)
    name: str  # the kernel's name
    bm: int
    bn: int
    threads: int
    consumers: int  # consumer warpgroups (one elected thread each arrives on empty)
    mma: str  # the wgmma shape, e.g. "m64n128k16"
    mmas_per_step: int  # wgmma instructions per K step per consumer warpgroup
    setmaxnreg: tuple[int, int] | None  # (producer count, consumer count)
    stages_from_budget: bool  # STAGES must be what the shared-memory budget allows


PC = KernelSpec("128×128 · producer + 2 consumers over a ring", "lab4a", "lab4_pc_gemm", 128, 128, 384, 2,
                "m64n128k16", 4, None, False)
WS = KernelSpec("128×256 · m64n256k16 + setmaxnreg", "lab4b", "lab4_ws_gemm", 128, 256, 384, 2, "m64n256k16", 4,
                (24, 240), True)

#: the ring the lab teaches: the producer (warpgroup 0) fills each stage, both consumer warpgroups read every fill
#: and each releases it once, in the order it read them (checked on the executor's record of the run)
PROTOCOL = Protocol(ring=Ring(readers=2))

#: the student's measured results of this session, by step name (filled by the kernel checks on an H100)
MEASURED: dict[str, Any] = {}


def carry_wrappers() -> str:
    """Your wrappers, as your Lab 3 kernel used them: my_tma_load_2d (Lab 1), the mbarrier wrappers and the wait
    loop (Lab 2), read from your saved notebooks beside this one (each line says whether it still passes its
    lab's check)."""
    from helpers.course.checks import lab3

    return lab3.carry_wrappers()


_NO_STAGES = ("name the ring's depth STAGES, a compile-time constant in any spelling the compiler accepts "
              "(constexpr int STAGES = 4; constexpr int STAGES{4}; #define STAGES 4): the launch sizes the shared "
              "memory from it")


def source_stages(source: str) -> int | None:
    """The ``STAGES`` constant of a kernel source as the compiler sees it (any spelling: ``constexpr int STAGES =
    4;``, ``constexpr int STAGES{4};``, ``#define STAGES 4``, an expression of other constants), or None. ``source``
    is best the whole compiled source (header, wrappers, kernel); a kernel alone is read from its declarations."""
    from ._constants import constant

    return constant(source, "STAGES")


def _init_counts(c: grading.Check, spec: KernelSpec, proto: Any) -> None:
    """The arrival counts of full[s] and empty[s], each read from its own mbarrier.init."""
    found: dict[str, list] = {"full": [], "empty": []}
    for ins in proto.flow.ins:
        if ins.opcode.startswith("mbarrier.init") and len(ins.ops()) > 1:
            on = proto.bars(ins)
            for which, bars in (("full", proto.full), ("empty", proto.empty)):
                if on & bars:
                    found[which].append(proto.flow.value(ins.ops()[1]))
    for which in ("full", "empty"):
        c.true(f"{which}[s] is initialised (mbarrier.init)", bool(found[which]),
               hint=f"thread 0 runs your my_mbar_init on every {which}[s] before the __syncthreads()")
        c.true(f"{which}[s]'s arrival count is a number the compiler can see", None not in found[which],
               hint="pass the count as a constant (1, CONSUMERS), not computed at run time")
    want = reference_init_counts(spec.consumers)
    full, empty = sorted(set(found["full"])), sorted(set(found["empty"]))
    got = (full[0], empty[0]) if len(full) == len(empty) == 1 else None
    c.true(f"arrival counts: full[s] {want[0]} (the producer's arrival), empty[s] {want[1]} (one per consumer "
           "warpgroup)", got == want, detail=f"    your counts: full {full}, empty {empty}",
           hint=_counts_hint(spec.consumers, got) if got else "one count per barrier: every full[s] the same, "
           "every empty[s] the same")


def _static_checks(c: grading.Check, spec: KernelSpec, kernel: Any, compiled: str, text: str | None) -> int:
    """The compile report, and the protocol read off every control-flow path of the PTX (which barrier is full and
    which is empty is read from the code: the TMA loads complete on full). Returns the stage count."""
    from helpers.course.checks._protocol import read as read_protocol

    report = kernel.report
    c.ok(f"compiles: {report.summary()}")
    C.check_no_accumulator_spills(c, report,
           hint="index the accumulators only with compile-time constants (#pragma unroll every loop over them)")
    c.true("the compiler kept wgmma asynchronous (not serialized)", not report.wgmma_serialized,
           detail="\n".join(f"    {ln.strip()}" for ln in report.log.splitlines() if "serialized" in ln),
           hint="wgmma_fence() before the first wgmma of each step, commit, then wait; no accumulator access while a "
           "group may run (wgmma_fence_operands(d) before the store)")
    proto = read_protocol(kernel.ptx, spec.name, compiled, text)
    flow = proto.flow

    # ---- the producer: loads, bytes, the wait on empty
    per_use = len({i.line for i in proto.loads})
    c.true("two TMA loads per stage (the A tile and the B tile)", per_use >= 2,
           detail=f"    found {per_use} load statement{'s' if per_use != 1 else ''}",
           hint="your my_tma_load_2d for the A tile and for the B tile, both completing on full[s]")
    if proto.ambiguous:
        c.fail("full and empty barriers share one variable: which is which cannot be read from the code",
               hint="declare them as two arrays, __shared__ unsigned long long full[STAGES], empty[STAGES]")
    _init_counts(c, spec, proto)
    early = proto.arrive_before_bytes()
    if early is not None:
        c.fail("an arrival on full[s] before the stage's bytes are announced", detail=f"    at {proto.where(early)}",
               hint="full[s] expects one arrival: once it is in, with no bytes announced yet, the phase completes "
                    "and the consumers read a stage still in flight. my_mbar_expect_tx first, then my_mbar_arrive")
    stage_bytes = (spec.bm + spec.bn) * BK * 2
    announced = proto.bytes_announced()
    c.true(f"the producer announces {stage_bytes} bytes per stage (both tiles)", announced == stage_bytes,
           detail=f"    announced: {announced if announced is not None else 'not a constant'}",
           hint=f"the A tile ({spec.bm}×64 bf16) and the B tile ({spec.bn}×64 bf16): STAGE_BYTES = {stage_bytes}")
    c.true("the producer waits on empty[s] before refilling stage s", proto.producer_waits(),
           hint="before the copies of use j: your my_mbar_wait on empty[s] with the flipped parity; without it the "
           "producer overwrites tiles the consumers still read")
    first = proto.first_wait_deadlocks()
    if first is not None:
        c.fail("the producer's first wait on empty is for parity 0", detail=f"    at {proto.where(first)}",
               hint="a fresh empty barrier completes phase 0 only when the consumers release the stage, which needs "
               "this very load: wait with the flipped parity, ((j / STAGES) & 1) ^ 1")
    waits = [i for i in flow.ins if i.opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait"))]
    constant = [i for i in waits if len(i.ops()) > 2 and flow.value(i.ops()[2]) is not None]
    c.true("threads wait with mbarrier.try_wait.parity", bool(waits), hint="your my_mbar_wait, in the loop")
    c.true("every wait's parity is computed (it must flip each time the ring wraps)", not constant,
           detail="    " + "\n    ".join(proto.where(i) for i in constant),
           hint="parity of use k: (k / STAGES) & 1 (the producer waits on empty with that flipped: ^ 1)")

    # ---- the consumers: wgmma shape, groups, the delayed release, the drain
    unwaited = flow.reach([None], proto.is_read, lambda i: proto.is_wait(i, "full"))
    if unwaited is not None:
        c.fail("a consumer can issue a wgmma on a stage before waiting on its full barrier",
               detail=f"    at {proto.where(unwaited)}", hint="my_mbar_wait(&full[s], …) before the step's wgmmas")
    mmas = [i for i in flow.ins if i.opcode.startswith("wgmma.mma_async")]
    shape = [i for i in mmas if i.opcode == f"wgmma.mma_async.sync.aligned.{spec.mma}.f32.bf16.bf16"]
    c.true(f"{spec.mmas_per_step} × wgmma.mma_async {spec.mma} (bf16 in, fp32 accumulate) per K step",
           len(shape) == len(mmas) and len(shape) >= spec.mmas_per_step,
           detail=f"    found: {sorted({i.opcode for i in mmas})} × {len(mmas)}",
           hint=f"the header's wgmma_{spec.mma}_bf16 for each 16-wide slice of K")
    bad = proto.mma_before_fence()
    if bad is not None:
        c.fail("a wgmma can run before any wgmma.fence", detail=f"    at {proto.where(bad)}",
               hint="hopper::wgmma_fence() before the step's first wgmma: the accumulators were written by ordinary "
               "instructions")
    bad = proto.wait_before_commit()
    if bad is not None:
        c.fail("a wgmma.wait_group follows wgmmas that were never committed", detail=f"    at {proto.where(bad)}",
               hint="hopper::wgmma_commit() closes the step's group; the wait_group then counts it")
    group_waits = [flow.value(i.ops()[0]) for i in flow.ins if i.opcode.startswith("wgmma.wait_group")]
    c.true("one group stays in flight: wgmma.wait_group 1 in the loop", 1 in group_waits,
           detail=f"    wait_group operands: {group_waits}",
           hint="after committing step k's group, wait_group 1 retires step k-1's; then release its stage")
    c.true("the drain: wgmma.wait_group 0 after the loop", 0 in group_waits,
           hint="after the loop, wait_group 0 retires the last group before its stage is released and the "
           "accumulators are stored")
    c.true("the consumers release stages (an arrive on empty[s] in the K loop)", proto.release_in_loop(),
           hint="one elected thread per consumer warpgroup arrives on the empty barrier of the stage it is done with")
    bad = proto.release_before_retire()
    if bad is not None:
        c.fail("a stage is released while the wgmma group that read it may still run",
               detail=f"    at {proto.where(bad)}: no wgmma.wait_group between the wgmmas and this arrive",
               hint="wait_group 1 first: it retires the previous step's group; then arrive on that step's empty "
               "barrier (the classic silent corruption: the producer overwrites a tile being read)")
    c.ok("every release comes after a wgmma.wait_group")

    # ---- setmaxnreg and the register budget
    if spec.setmaxnreg:
        decs = [int(i.operands) for i in flow.ins if i.opcode == "setmaxnreg.dec.sync.aligned.u32"]
        incs = [int(i.operands) for i in flow.ins if i.opcode == "setmaxnreg.inc.sync.aligned.u32"]
        c.true("the producer warpgroup lowers its registers (setmaxnreg.dec) and the consumers raise theirs "
               "(setmaxnreg.inc)", bool(decs) and bool(incs),
               hint="setmaxnreg_dec at the top of the producer's branch, setmaxnreg_inc at the top of the consumers' "
               "(the header's, with your counts of step 6)")
        ignored = [ln.strip() for ln in report.log.splitlines() if "C7508" in ln or "setmaxnreg" in ln.lower()]
        c.true("ptxas kept the setmaxnreg instructions (no C7508 warning)", not report.setmaxnreg_ignored,
               detail="    " + "\n    ".join(ignored),
               hint="ptxas must know the register count every thread starts with: __launch_bounds__(384, 1) "
               "(the threads AND one block per SM) pins it to 168")
        entry = report.registers
        counts = [decs[0]] + [incs[0]] * spec.consumers
        verdict = reference_setmaxnreg_verdict(entry, counts)
        c.true(f"the budget adds up: {decs[0]} + {spec.consumers} × {incs[0]} = {sum(counts)} ≤ "
               f"{1 + spec.consumers} × {entry} (registers at entry)", verdict == "ok",
               hint=_verdict_hint(entry, counts, "ok", verdict) + " (with 384 threads: 24 + 2 × 240 = 504 = 3 × 168)")
    stages = source_stages(compiled)
    if stages is None:
        c.fail("STAGES is a compile-time constant of the kernel's source",
               detail="    neither the compiler nor the kernel's declarations give a constant named STAGES",
               hint=_NO_STAGES)
    if spec.stages_from_budget:
        best = reference_stages(spec.bm, spec.bn, BK)
        c.true(f"STAGES = {best}: as many as the shared-memory budget allows", stages == best,
               detail=f"    your STAGES, as the compiler evaluates it: {stages}",
               hint=f"stages_for_budget({spec.bm}, {spec.bn}, {BK}, {SMEM_LIMIT}) from step 5, as a compile-time "
               "constant")
    c.true(f"the stages fit: {smem_bytes(stages, spec.bm, spec.bn)} bytes of shared memory ≤ {SMEM_LIMIT}",
           1 <= stages <= reference_stages(spec.bm, spec.bn, BK),
           hint=f"at most {reference_stages(spec.bm, spec.bn, BK)} stages of {spec.bm}×{BK} A and {spec.bn}×{BK} B "
           "tiles fit, and at least one")
    return stages


def _emulator_shape(spec: KernelSpec, stages: int) -> tuple[int, int, int]:
    """The shape of the run on the course's PTX executor: several blocks, a partial tile in M and in N, M ≠ N ≠ K,
    and 2·STAGES + 1 K steps, so the ring wraps twice."""
    m, n = spec.bm + 64, spec.bn + 64
    if n == m:
        n += spec.bn
    return (m, n, BK * (2 * stages + 1))


def _gpu_shapes(rng: Any, spec: KernelSpec, stages: int) -> list[tuple[int, int, int]]:
    """On an H100: non-square shapes, multiples of 64 (partial tiles at the edges), M ≠ N, K ≠ N, more blocks than
    two waves. Emulated (the PTX executor): :func:`_emulator_shape`."""
    if not C.on_h100():
        return [_emulator_shape(spec, stages)]
    shapes: list[tuple[int, int, int]] = []
    while len(shapes) < 3:
        m = 64 * int(rng.integers(12, 40))
        n = 64 * int(rng.integers(20, 70))
        k = 64 * int(rng.integers(2, 12))
        blocks = -(-m // spec.bm) * -(-n // spec.bn)
        if m != n and k != n and blocks > 2 * this_gpu().sms:
            shapes.append((m, n, k))
    return shapes


def gpu_benchmark(source: str, spec_name: str, size: int = 4096) -> Any:
    """(Runs in the isolated child.) The step's kernel (whole source) at size³ beside cuBLAS in the same run."""
    from helpers import gpu

    spec = {PC.name: PC, WS.name: WS}[spec_name]
    kernel = gpu.compile(source, spec.name)
    smem = dynamic_smem_bytes(source_stages(source), spec.bm, spec.bn)
    return gpu.gemm_benchmark(lambda a, b, c: _prepare(kernel, spec, smem, a, b, c), size, size, size)


def _prepare(kernel: Any, spec: KernelSpec, smem: int, a: Any, b: Any, c: Any) -> Any:
    """A packed launch of a Lab 4 kernel on device arrays A (M×K), B (N×K) and C (M×N fp32): one block per
    BM×BN tile of C, block (x, y) at rows BM·y, columns BN·x."""
    import numpy as np

    from helpers import gpu

    (m, k), n = a.shape, b.shape[0]
    ta, tb = gpu.tensor_map_2d(a, spec.bm, 64), gpu.tensor_map_2d(b, spec.bn, 64)
    return gpu.prepare(kernel, (-(-n // spec.bn), -(-m // spec.bm)), spec.threads, smem, ta, tb, c,
                       np.int32(m), np.int32(n), np.int32(k))


def executor_runs(source: str, spec_name: str, stages: int, cases: list[tuple[Any, Any]]) -> dict:
    """(Runs on the course's PTX executor, in this process.) The kernel on each (A, B) case, C poisoned with NaN
    first, with each launch's work log: ``{"c": [C, …], "work": [Launched, …]}``."""
    import numpy as np

    from helpers import gpu
    from helpers.gpu import executor

    from ._work import Launched

    spec = {PC.name: PC, WS.name: WS}[spec_name]
    kernel = gpu.compile(source, spec.name)
    smem = dynamic_smem_bytes(stages, spec.bm, spec.bn)
    out, work = [], []
    for a, b in cases:
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((a.shape[0], b.shape[0]), np.float32)
        before = executor.last_run()
        _prepare(kernel, spec, smem, da, db, dc)()
        gpu.wait()
        last = executor.last_run()
        fresh = last is not None and (before is None or last.machine is not before.machine)
        work.append(Launched(last.work if fresh else None, int(da.ptr), int(db.ptr), int(dc.ptr)))
        out.append(dc.to_host())
    return {"c": out, "work": work}


def _check_kernel(spec: KernelSpec, source: str, kernel: str | None, benchmark: bool, size: int,
                  seed: int | None) -> None:
    rng = grading.fresh_rng(seed)
    with grading.check(f"Lab 4 · {spec.step} kernel", seed=rng.seed) as c:
        compiled = HEADER + source
        kern = C.compile_student(compiled, spec.name, what="your kernel")
        ex = C.Explanation(c)
        with ex:
            _static_checks(c, spec, kern, compiled, kernel)
        if not ex.runnable(kern, checked="the compile report and the protocol on every path of the PTX; the roles "
                                        "were graded on the emulator"):
            return
        stages = source_stages(compiled)
        if stages is None or not 1 <= stages <= reference_stages(spec.bm, spec.bn, BK):
            ex.settle()  # the run's shared memory comes from STAGES: the check above says what is wrong with it
            c.fail("STAGES: a compile-time constant that fits the shared memory", detail=f"    found: {stages}",
                   hint=_NO_STAGES)
        with ex.run():
            _run_kernel(c, spec, kern, compiled, stages, rng, timed=benchmark)
        ex.settle()
        if spec is PC:
            _PC_PASSED.add(_digest(source))
        if not (benchmark and C.on_h100()):
            return
        bench = C.run(gpu_benchmark, compiled, spec.name, size, what=f"the {size}³ benchmark", timeout=300)
        MEASURED[spec.step] = bench
        c.ok(f"timed {C.where().removeprefix('ran ')} at {size}³ beside cuBLAS in the same run: {bench.summary()}")


_RUN_HINT = ("the sentence names the barrier, its phase and your line: check that wait's or arrival's stage "
             "(k % STAGES), its parity ((k / STAGES) & 1, flipped for the producer's wait on empty) and the barrier "
             "counts")
_C_HINT = ("NaN left: an edge tile not stored, or a stage read before it landed; wrong values: a stage overwritten too "
           "early (release after wgmma_wait), or the wrong rows of A for a consumer")
_WORK_HINT = ("block (x, y) computes and stores the tile at rows BM·y, columns BN·x (m0 = blockIdx.y * BM, n0 = "
              "blockIdx.x * BN), each consumer warpgroup its own 64 rows of it: every tile once, by its block")


def _run_kernel(c: grading.Check, spec: KernelSpec, kern: Any, source: str, stages: int, rng: Any, *,
                timed: bool) -> None:
    """Without an H100: the kernel on the course's PTX executor in hazard mode (:func:`_emulated_run`). On the H100:
    each shape of :func:`_gpu_shapes` there, then the emulator's shape on the executor in hazard mode too (races
    and the work: the same verdict as without a GPU). C poisoned with NaN, every element against fp64."""
    import numpy as np

    from helpers.gpu import TensorMapArg

    if not C.on_h100():
        _emulated_run(c, spec, source, stages, rng, timed=timed)
        return
    smem = dynamic_smem_bytes(stages, spec.bm, spec.bn)
    for m, n, k in _gpu_shapes(rng, spec, stages):
        a, b = C.make_operands(rng, m, n, k)
        grid = (-(-n // spec.bn), -(-m // spec.bm))
        (got,) = C.run(kern, grid, spec.threads, smem, TensorMapArg(a, (spec.bm, 64)), TensorMapArg(b, (spec.bn, 64)),
                       np.full((m, n), np.nan, np.float32), np.int32(m), np.int32(n), np.int32(k),
                       what=f"your kernel on M={m}, N={n}, K={k}", timeout=60, hint=_RUN_HINT)
        _check_c(c, spec, stages, C.where(), m, n, k, a, b, got)
    with C.emulated():
        _emulated_run(c, spec, source, stages, rng, timed=False)


def _check_c(c: grading.Check, spec: KernelSpec, stages: int, where: str, m: int, n: int, k: int, a: Any, b: Any,
             got: Any) -> None:
    import numpy as np

    ref = a.astype(np.float64) @ b.astype(np.float64).T
    edges = ", partial tiles at the edges" if m % spec.bm or n % spec.bn else ""
    blocks = f"{-(-m // spec.bm)}×{-(-n // spec.bn)} blocks"
    c.array(f"{where}: M={m}, N={n}, K={k} ({blocks}{edges}, {k // BK} K steps through {stages} stages), C poisoned "
            "with NaN first: every element against fp64", got, ref,
            atol=grading.gemm_tolerance(a, b.astype(np.float64).T), hint=_C_HINT)


#: what to look at when a stage is released more times than it was filled
_RELEASE_HINT = ("EMPTY counts one arrival per consumer warpgroup (CONSUMERS): who arrives, and how often? A consumer "
                 "releases each stage it read once, the last one after its K loop: count one consumer's releases")


def _emulated_run(c: grading.Check, spec: KernelSpec, source: str, stages: int, rng: Any, *, timed: bool) -> None:
    """The kernel on the course's PTX executor in hazard mode, on :func:`_emulator_shape`: C against fp64, then the
    ring's releases (no stage released more times than it was filled) and the work (:func:`check_kernel_work`)."""
    from ._record import check_protocol
    from ._work import check_releases

    m, n, k = _emulator_shape(spec, stages)
    a, b = C.make_operands(rng, m, n, k)
    res = C.run(executor_runs, source, spec.name, stages, [(a, b)], what=f"your kernel on M={m}, N={n}, K={k}",
                timeout=120, hint=_RUN_HINT)
    _check_c(c, spec, stages, C.where(timing=timed), m, n, k, a, b, res["c"][0])
    run = res["work"][0]
    if run.log is not None:
        check_protocol(c, run, PROTOCOL, label=f"{C.where()}: M={m}, N={n}, K={k}", ring_hint=_RELEASE_HINT)
        check_releases(c, run, label=f"{C.where()}: M={m}, N={n}, K={k}", reused=False, hint=_RELEASE_HINT)
        check_kernel_work(c, spec, run, m=m, n=n, label=f"{C.where()}: M={m}, N={n}, K={k}")


def _tile_words(spec: KernelSpec, m: int, n: int, x: int, y: int) -> str:
    r0, c0 = spec.bm * y, spec.bn * x
    return (f"the {spec.bm}×{spec.bn} tile of C at rows {r0}–{min(r0 + spec.bm, m) - 1}, columns {c0}–"
            f"{min(c0 + spec.bn, n) - 1} (block ({x},{y})'s)")


def _blocks_words(blocks: Any) -> str:
    from ._work import block_words

    names = [block_words(b, 1) for b in sorted(blocks)]
    if len(names) > 4:
        return ", ".join(names[:4]) + f" and {len(names) - 4} more"
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + f" and {names[-1]}"


def check_kernel_work(c: grading.Check, spec: KernelSpec, run: Any, *, m: int, n: int, label: str) -> None:
    """The work of one launch of a Lab 4 kernel, as the executor recorded it (``run``: a ``_work.Launched``): every
    element of C written by one ordinary store, by the block whose tile holds it (block (x, y): rows BM·y, columns
    BN·x); every wgmma product (64 rows of A, the B tile's rows, 16 of K) computed once, by the block of its
    tile. A tile computed twice leaves C right: only the work shows it."""
    import numpy as np

    log = run.log
    size = 4 * m * n
    elements, owners, blocks = [], [], []
    for blk, parts in log.global_stores.items():
        addr = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        addr = addr[(addr >= np.uint64(run.c)) & (addr < np.uint64(run.c + size))]
        if addr.size:
            elements.append(((addr - np.uint64(run.c)) // np.uint64(4)).astype(np.int64))
            owners.append(np.full(addr.size, len(blocks), np.int64))
            blocks.append((blk.ctaid[0], blk.ctaid[1]))
    idx = np.concatenate(elements) if elements else np.zeros(0, np.int64)
    who = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    rows, cols = idx // n, idx % n
    tx, ty = cols // spec.bn, rows // spec.bm
    counts = np.bincount(idx, minlength=m * n)
    if (counts > 1).any():
        first = int(np.flatnonzero(counts > 1)[0])
        x, y = (first % n) // spec.bn, (first // n) // spec.bm
        in_tile = (tx == x) & (ty == y)
        twice = np.isin(idx, np.flatnonzero(counts > 1)) & in_tile
        by = {blocks[i] for i in np.unique(who[twice])}
        r = np.unique(rows[twice])
        c.fail(f"{label}: {_tile_words(spec, m, n, x, y)} was computed and stored more than once: its rows "
               f"{r.min()}–{r.max()} were stored {int(counts[first])} times, by {_blocks_words(by)}: C is right, "
               "but the work is done more than once (every output tile is computed once, by its block)",
               hint=_WORK_HINT)
    wrong = (np.array([blocks[i][0] for i in who], np.int64) != tx) | \
        (np.array([blocks[i][1] for i in who], np.int64) != ty) if idx.size else np.zeros(0, bool)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        x, y = int(tx[i]), int(ty[i])
        by = {blocks[j] for j in np.unique(who[wrong & (tx == x) & (ty == y)])}
        c.fail(f"{label}: {_tile_words(spec, m, n, x, y)} was stored (in part) by {_blocks_words(by)}; the grid "
               f"gives it to block ({x},{y})", hint=_WORK_HINT)
    products: dict[tuple, list[Any]] = {}
    for mm in log.mmas:
        if mm.a == run.a and mm.b == run.b:
            products.setdefault(mm.key, []).append(mm)
    for xs in products.values():
        first = xs[0]
        row, col, k = first.a_row, first.b_row, first.k
        x, y = col // spec.bn, row // spec.bm
        what = (f"the product of A rows {row}–{row + 63} and B rows {col}–{col + first.n - 1} (C's columns) over K "
                f"{k}–{k + 15} (in {_tile_words(spec, m, n, x, y)})")
        if len(xs) > 1:
            by = {(mm.block.ctaid[0], mm.block.ctaid[1]) for mm in xs}
            c.fail(f"{label}: {what} was computed {len(xs)} times, by {_blocks_words(by)}: C is right, but the work "
                   "is done more than once (every output tile is computed once, by its block)", hint=_WORK_HINT)
        got = (first.block.ctaid[0], first.block.ctaid[1])
        if got != (x, y):
            c.fail(f"{label}: {what} was computed by block ({got[0]},{got[1]}); the grid gives it to block ({x},{y})",
                   hint=_WORK_HINT)
    tiles = len(set(zip(tx.tolist(), ty.tolist(), strict=True)))
    c.ok(f"{label}: the work, as the emulator recorded it: each of the {tiles} tiles of C stored by its own block, "
         f"every element once, and each of the {len(products)} wgmma products computed once, by the block of its "
         "tile")


def show_timeline(source: str, kernel_name: str = PC.name, m: int = 256, n: int = 256, k: int = 512) -> Any:
    """Your kernel's own pipeline: run it once on the course's PTX executor (on any machine, with the pipeline
    model's latencies: a copy lands 500 cycles after it is issued, a wgmma takes 100) with every warp's waits,
    copies, wgmmas and arrivals recorded, and draw one block at a time as the Lesson 04 timeline. ``source``: your
    wrappers and the kernel, as the check takes them."""
    import numpy as np

    from helpers import gpu
    from helpers.course.widgets import trace as trace_view
    from helpers.gpu import TensorMapArg

    spec = {PC.name: PC, WS.name: WS}[kernel_name]
    stages = source_stages(HEADER + source)
    if stages is None:
        raise ValueError(f"STAGES: {_NO_STAGES}")
    kern = C.compile_student(HEADER + source, spec.name, what="your kernel")
    a, b = gpu.random_host((m, k), gpu.bfloat16, seed=1), gpu.random_host((n, k), gpu.bfloat16, seed=2)
    grid, smem = (-(-n // spec.bn), -(-m // spec.bm)), dynamic_smem_bytes(stages, spec.bm, spec.bn)
    res = gpu.run_on_executor(kern, grid, spec.threads, smem,
                  TensorMapArg(a, (spec.bm, 64)), TensorMapArg(b, (spec.bn, 64)), np.full((m, n), np.nan, np.float32),
                  np.int32(m), np.int32(n), np.int32(k), hazards=False, trace=True)
    wrong = ~np.isclose(res.arrays[2], a.astype(np.float64) @ b.astype(np.float64).T, rtol=2e-2, atol=5e-2)
    print(f"{kernel_name} at M={m}, N={n}, K={k} on the emulator: {res.trace.meta.get('tma_latency')} cycles per "
          f"copy, {res.trace.meta.get('wgmma_latency')} per wgmma; C " + (
              "right" if not wrong.any() else f"wrong in {int(wrong.sum())} elements (the check says why)"))
    return trace_view.trace_widget(res.trace)


def check_pc_kernel(source: str, kernel: str | None = None, *, benchmark: bool = True, size: int = 4096,
                    seed: int | None = None) -> None:
    """The 128×128 producer/consumer kernel ``lab4_pc_gemm`` (``source``: your wrappers and the kernel; ``kernel``:
    the kernel alone, for line numbers). The compile report and the protocol on every path of the PTX everywhere;
    where it can run, a small non-square shape on the course's PTX executor in hazard mode with its work checked
    (:func:`check_kernel_work`), on an H100 after random large shapes there, all against fp64 (C poisoned); on an
    H100 then the 4096³ time beside cuBLAS."""
    _check_kernel(PC, source, kernel, benchmark, size, seed)


def check_ws_kernel(source: str, kernel: str | None = None, *, benchmark: bool = True, size: int = 4096,
                    seed: int | None = None) -> None:
    """The 128×256 warp-specialized kernel ``lab4_ws_gemm`` (one producer, two consumer warpgroups, setmaxnreg,
    stages from the budget): as :func:`check_pc_kernel`."""
    _check_kernel(WS, source, kernel, benchmark, size, seed)


# ------------------------------------------------------------------------------------------- 8 · step 7 carried
#: the step 7 kernels (your wrappers and PC_KERNEL) that passed step 7's check in this session
_PC_PASSED: set[str] = set()


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _step7_skeleton() -> str:
    """The course's step 7 kernel with each region one ``// ✎`` line (from the course's data; ``make labs``)."""
    return C._kernels().get("lab4", {}).get("carries", {}).get("skeleton", "")


def step8_kernel(pc_kernel: str, lab4_kernel: str) -> str:
    """Step 8's whole kernel (code only): your step 7 kernel ``pc_kernel`` with step 8's change. Each
    ``// carried:`` line of the step 8 cell ``lab4_kernel`` gets your code of that region of step 7, and your
    other edits of step 7 are kept where step 8 leaves that code alone. A ``lab4_kernel`` with no carried line is
    whole already and comes back as it is (code only). Raises ``carry.NotCarried`` where a carried region is still
    a stub in ``pc_kernel`` or cannot be found there."""
    return _assembled(pc_kernel, lab4_kernel).text


def _assembled(pc_kernel: str, lab4_kernel: str) -> carry.Assembled:
    if not any(line.strip().startswith(carry.CARRIED) for line in lab4_kernel.split("\n")):
        return carry.Assembled(carry.code_lines(lab4_kernel))
    return carry.assemble(_step7_skeleton(), pc_kernel, lab4_kernel, step="step 7")


def saved_step8_kernel(cell: str, here: Path | None = None) -> str:
    """Step 8's whole kernel from a saved notebook: the step 8 cell's text ``cell`` with your step 7 kernel
    (``PC_KERNEL`` of the lab4_pipeline.ipynb beside ``here``) carried into it, as :func:`step8_kernel`."""
    if not any(line.strip().startswith(carry.CARRIED) for line in cell.split("\n")):
        return carry.code_lines(cell)
    _, pc, problem = C.saved_variable("lab4_pipeline.ipynb", "PC_KERNEL", Path.cwd() if here is None else here)
    if pc is None:
        raise carry.NotCarried(f"step 7's kernel (PC_KERNEL) could not be read: {problem}")
    return step8_kernel(pc, cell)


def _step7_passes(wrappers: str, pc_kernel: str) -> str:
    """"" when your step 7 kernel passes step 7's check (as it did in this session, or now, quietly, on the course's
    PTX executor); else the first line of why not."""
    if _digest(wrappers + pc_kernel) in _PC_PASSED:
        return ""
    with contextlib.redirect_stdout(io.StringIO()), C.emulated():
        try:
            check_pc_kernel(wrappers + pc_kernel, kernel=pc_kernel, benchmark=False)
        except grading.CheckFailed as exc:
            return (str(exc).strip().splitlines() or ["failed"])[0].strip().lstrip("✗❌ ")
    return ""


def check_step8_kernel(wrappers: str, pc_kernel: str, lab4_kernel: str, *, benchmark: bool = True,
                       size: int = 4096, seed: int | None = None) -> None:
    """Step 8: your step 7 kernel (``pc_kernel``, which must pass step 7's check first) with step 8's change and
    your step 8 regions (``lab4_kernel``, the cell: each ``// carried:`` line gets your code of that region of step
    7), put together by :func:`step8_kernel` and checked as a whole by :func:`check_ws_kernel` on ``wrappers``."""
    with grading.check("Lab 4 · step 8: your step 7 kernel carried") as c:
        try:
            made = _assembled(pc_kernel, lab4_kernel)
            whole = made.text
        except carry.NotCarried as exc:
            c.fail(f"step 8 is built on your step 7 kernel (PC_KERNEL): {exc}",
                   hint="run step 7's check (the cell under PC_KERNEL) until it passes, then this one")
        if whole == carry.code_lines(lab4_kernel):
            c.ok("the cell holds a whole kernel (no carried line): it is checked as it is")
        elif "#error" in whole:  # step 8's own regions still stubs: the kernel's check says which first
            c.ok("your step 7 regions are carried into step 8's kernel; step 8's own regions are not all written yet")
        else:
            why = _step7_passes(wrappers, pc_kernel)
            if why:
                c.fail(f"step 7 must pass its check first: step 8 is your step 7 kernel with step 8's change ({why})",
                       hint="run step 7's check (the cell under PC_KERNEL) and fix what it says, then this one")
            c.ok("your step 7 kernel passes step 7's check: its regions are carried into step 8's kernel")
        for line in made.report:
            print(f"⚠ {line}")
    check_ws_kernel(wrappers + whole, kernel=whole, benchmark=benchmark, size=size, seed=seed)


# ------------------------------------------------------------------------------------------- the lineage
def _code(source: str) -> str:
    """A kernel as code: the solution markers and hint lines of an instructor's copy left out."""
    from helpers.course.hints import parse_hint

    return "\n".join(ln for ln in source.split("\n") if "### BEGIN SOLUTION" not in ln
                     and "### END SOLUTION" not in ln and parse_hint(ln) is None).strip("\n") + "\n"


def lab3_speed_note(size: int = 4096) -> str:
    """Lab 3's speed at size³ on the H100, as the course's ladder measured it (helpers.course.ladder), or "not measured
    yet"; names the kernel the figure was measured on."""
    from helpers.course import ladder

    data = ladder.load()
    rung = next(r for r in ladder.rungs((size, size, size), data) if r.key == "lab3")
    if rung.tflops is None:
        return f"Lab 3's kernel on the H100 at {size}³: not measured yet"
    entry = data.get("rungs", {}).get("lab3", {})
    what = entry.get("title") or rung.kernel
    return (f"Lab 3 on the H100 at {size}³: {rung.tflops:.0f} TFLOP/s, {rung.ratio:.2f}× cuBLAS in the same run "
            f"(measured for: {what}; {data.get('gpu', 'H100')}, {data.get('date', 'date unknown')})")


def _student_lab3_kernel() -> tuple[str | None, str]:
    """Your Lab 3 kernel from lab3_wgmma.ipynb beside this notebook, and the diff's label for it; (None, label of
    the course's) when it is not there or not written yet."""
    mine = C.carry("lab3_wgmma.ipynb", "LAB3_KERNEL", "Lab 3")
    if "#error" in mine:
        return None, "Lab 3's kernel (the course's: yours is not beside this notebook, or not written yet)"
    return _code(mine), "your Lab 3 kernel"


def kernel_changes() -> Any:
    """The diff this lab makes to your Lab 3 kernel (the course's where yours is not there yet): step 8's kernel as
    you will see it, each part you write one ``✎`` line, with Lab 3's measured speed."""
    old, label = _student_lab3_kernel()
    return C.lab_diff("lab3", "lab4", prev_source=old, prev_label=label, note=lab3_speed_note())


def step_changes(old: str, new: str, old_label: str, new_label: str) -> Any:
    """What one step changed in the kernel (your two kernels, or Lab 3's and yours), as a compact coloured diff. A
    ``new`` with ``// carried:`` lines (step 8's cell) is first put together with ``old`` (:func:`step8_kernel`):
    the diff is between your step 7 kernel and the whole step 8 kernel that is checked."""
    note = ""
    if any(line.strip().startswith(carry.CARRIED) for line in new.split("\n")):
        try:
            new = step8_kernel(old, new)
        except carry.NotCarried as exc:
            note = f"your step 7 kernel is not carried yet ({exc}): the cell is shown as it is"
    return C.kernel_diff(_code(old), _code(new), old_label, new_label, note=note)


# ------------------------------------------------------------------------------------------- the ladder
def ladder_rows(size: int = 4096) -> list[dict[str, Any]]:
    """The ladder so far at size³: Lab 3 and this lab's two steps as measured on an H100 (helpers.course.ladder, from
    bench/results/ladder.json, with the kernel each figure was measured on; "not measured yet" where there is
    none), then this session's own runs from MEASURED."""
    from helpers.course import ladder

    data = ladder.load()
    keys = {"lab3": "Lab 3 · 64×64 tile, one warpgroup"} | {s.ladder_key: f"Lab 4 · {s.step}" for s in (PC, WS)}
    rows = []
    for r in ladder.rungs((size, size, size), data):
        if r.key not in keys:
            continue
        title = data.get("rungs", {}).get(r.key, {}).get("title")
        where = "not measured yet"
        if r.tflops:
            where = f"{data.get('gpu', 'H100')}, {r.source or ladder.LADDER_FILE.name}" + (f"; kernel: {title}"
                                                                                             if title else "")
        rows.append({"step": keys[r.key], "tflops": r.tflops, "cublas_tflops": r.cublas_tflops, "where": where})
    for step, bench in MEASURED.items():
        rows.append({"step": f"Lab 4 · {step} (yours)", "tflops": bench.tflops, "cublas_tflops": bench.cublas_tflops,
                     "where": "this notebook, just now"})
    return rows


def ladder_table(size: int = 4096) -> str:
    """The ladder as a Markdown table: TFLOP/s at size³ beside cuBLAS in the same run, and the ratio."""
    lines = [f"| step ({size}³) | TFLOP/s | cuBLAS TFLOP/s (same run) | ratio | measured |", "|---|---:|---:|---:|---|"]
    for r in ladder_rows(size):
        t, cb = r["tflops"], r["cublas_tflops"]
        ratio = f"{t / cb:.2f}" if t and cb else "–"
        lines.append(f"| {r['step']} | {f'{t:.0f}' if t else '–'} | {f'{cb:.0f}' if cb else '–'} | {ratio} | "
                     f"{r['where']} |")
    return "\n".join(lines)


def show_ladder(size: int = 4096) -> None:
    """Display the ladder table (Markdown in a notebook, text elsewhere)."""
    table = ladder_table(size)
    try:
        from IPython.display import Markdown, display

        display(Markdown(table))
    except ImportError:  # pragma: no cover - IPython is always there in the course's environment
        print(table)
