"""Stream-K: the GEMM's iteration space (tiles × K steps) cut among persistent CTAs, and split tiles put back together.

Pure Python/numpy, no GPU. It models what ``bench/kernels/lab9_streamk.cu`` does, piece by piece:

- **the partition**: :func:`iteration_space` (tiles and K steps of a shape), :func:`stream_k_range` (one
  contiguous range of ``ceil(total / ctas)`` iterations per CTA), :func:`stream_k_pieces` (a CTA's range as
  pieces of tiles, walked from the end backwards), :func:`data_parallel_tiles` and :func:`work_list` (the hybrid:
  whole tiles round-robin first, Stream-K over the last one or two waves), :func:`partition` (every CTA);
- **the roles**: :func:`role` (``whole``, ``first``, ``middle``, ``final``), :func:`owner` (the lowest CTA touching a
  tile, whose workspace slot and flag the tile's splits share) and :func:`split_order`;
- **the fix-up protocol**: a *plan* says what one consumer warpgroup does after computing a piece, as a list of
  :class:`Op` (:func:`wait_flag`, :func:`bar_sync`, :func:`load_add`, :func:`store`, :func:`reduce_add`,
  :func:`set_flag`, :func:`add_flag`, :func:`epilogue`); :func:`ordered_plan` is the kernel's. :func:`simulate`
  runs every CTA's warpgroups over a shared workspace and flags under a chosen schedule, with a memory model that
  lets a read return anything the PTX memory model allows (release/acquire at GPU scope, ``bar.sync`` within a
  CTA), residency limits and a dispatch order, and reports each tile's sum (bits and the order its splits were
  added in), deadlocks naming the flag, and every broken rule in words;
- **predicted times** (:func:`predict`): the same protocol in simulated time with costs calibrated on the H100
  (:data:`H100`), for data-parallel, Stream-K and hybrid schedules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import parts
from .mbarrier import Deadlock

__all__ = [
    "Piece", "iteration_space", "waves", "wave_efficiency", "stream_k_range", "stream_k_pieces",
    "data_parallel_tiles", "work_list", "partition", "coverage", "role", "owner", "split_order", "splits_of",
    "Op", "wait_flag", "bar_sync", "load_add", "store", "reduce_add", "set_flag", "add_flag", "epilogue",
    "ordered_plan", "atomic_plan", "PlanError", "StreamKDeadlock", "FixupResult", "simulate", "reference_sums",
    "Costs", "H100", "Prediction", "predict", "SCHEDULES", "measured", "MEASURED_RUN", "ptx_of",
]

SCHEDULES = ("data-parallel", "stream-k", "hybrid")
PAIR_M, PAIR_N, BK = 256, 256, 64  # the kernel's work unit: a cluster's pair of 128×256 tiles, 64-wide K steps


# =========================================================================================================
# the partition
# =========================================================================================================
class Piece(NamedTuple):
    """K steps ``[k_begin, k_end)`` of one tile. Compares equal to the plain tuple ``(tile, k_begin, k_end)``."""

    tile: int
    k_begin: int
    k_end: int


def iteration_space(M: int, N: int, K: int, tile_m: int = PAIR_M, tile_n: int = PAIR_N, bk: int = BK
                    ) -> tuple[int, int]:
    """(tiles, K steps) of an M×N×K GEMM: tiles of ``tile_m × tile_n`` (the last ones may hang over the edge: TMA
    zero-fills the loads and clips the stores) and ``bk``-wide K steps (the last one zero-filled past K)."""
    return math.ceil(M / tile_m) * math.ceil(N / tile_n), math.ceil(K / bk)


def waves(tiles: int, ctas: int) -> int:
    """How many rounds a data-parallel kernel needs: every CTA takes one whole tile per round."""
    return math.ceil(tiles / ctas)


def wave_efficiency(tiles: int, ctas: int) -> float:
    """Fraction of the CTAs' time spent on tiles in a data-parallel kernel (1.0: the last wave is full)."""
    return tiles / (waves(tiles, ctas) * ctas)


def stream_k_range(cta: int, ctas: int, total: int) -> tuple[int, int]:
    """CTA ``cta``'s iterations ``[begin, end)`` of ``total``: ``per = ceil(total / ctas)`` each, the last CTAs
    may get fewer or none."""
    per = -(-total // ctas)
    begin = min(total, cta * per)
    return begin, min(total, begin + per)


def stream_k_pieces(cta: int, ctas: int, tiles: int, k_steps: int, first_tile: int = 0) -> list[Piece]:
    """CTA ``cta``'s Stream-K range over ``tiles`` tiles (numbered from ``first_tile``), as pieces of tiles, walked
    from the end of the range backwards (its first piece starts a tile, its last one ends a tile)."""
    g0, g1 = stream_k_range(cta, ctas, tiles * k_steps)
    if g1 <= g0:
        return []
    out = []
    for t in range((g1 - 1) // k_steps, g0 // k_steps - 1, -1):
        t0 = t * k_steps
        out.append(Piece(first_tile + t, max(g0, t0) - t0, min(g1, t0 + k_steps) - t0))
    return out


def data_parallel_tiles(tiles: int, ctas: int) -> int:
    """Tiles the hybrid schedule hands out whole: all but the last one or two waves' worth (0 when there are fewer
    than two waves), a multiple of ``ctas`` so every CTA gets the same number."""
    return (tiles // ctas - 1) * ctas if tiles >= 2 * ctas else 0


def work_list(cta: int, ctas: int, tiles: int, k_steps: int, schedule: str = "hybrid") -> list[Piece]:
    """What CTA ``cta`` computes, in order: whole tiles round-robin (data-parallel part), then its Stream-K range."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r}: one of {SCHEDULES}")
    if schedule == "data-parallel":
        return [Piece(t, 0, k_steps) for t in range(cta, tiles, ctas)]
    dp = data_parallel_tiles(tiles, ctas) if schedule == "hybrid" else 0
    whole = [Piece(t, 0, k_steps) for t in range(cta, dp, ctas)]
    return whole + stream_k_pieces(cta, ctas, tiles - dp, k_steps, first_tile=dp)


def partition(tiles: int, k_steps: int, ctas: int, schedule: str = "hybrid") -> list[list[Piece]]:
    """Every CTA's work list."""
    return [work_list(c, ctas, tiles, k_steps, schedule) for c in range(ctas)]


def coverage(parts: Sequence[Sequence[Sequence[int]]], tiles: int, k_steps: int) -> np.ndarray:
    """(tiles, k_steps) counts: how many pieces of all CTAs cover each K step of each tile (1 everywhere when the
    partition is right). Pieces outside the iteration space raise ValueError."""
    cov = np.zeros((tiles, k_steps), np.int64)
    for work in parts:
        for piece in work:
            t, a, b = (int(x) for x in piece)
            if not (0 <= t < tiles and 0 <= a < b <= k_steps):
                raise ValueError(f"piece {tuple(piece)} is outside {tiles} tiles × {k_steps} K steps")
            cov[t, a:b] += 1
    return cov


def role(k_begin: int, k_end: int, k_steps: int) -> str:
    """``whole`` (no fix-up), ``first`` (K steps start at 0), ``final`` (they end at the last step) or ``middle``."""
    if k_begin == 0:
        return "whole" if k_end == k_steps else "first"
    return "final" if k_end == k_steps else "middle"


def owner(tile: int, ctas: int, tiles: int, k_steps: int, schedule: str = "hybrid") -> int:
    """The lowest CTA touching ``tile``: its workspace slot and flag serve every split of the tile."""
    if schedule == "data-parallel":
        return tile % ctas
    dp = data_parallel_tiles(tiles, ctas) if schedule == "hybrid" else 0
    if tile < dp:
        return tile % ctas
    per = -(-((tiles - dp) * k_steps) // ctas)
    return (tile - dp) * k_steps // per


def split_order(cta: int, tile: int, ctas: int, tiles: int, k_steps: int, schedule: str = "hybrid") -> int:
    """0 for a tile's first split, then 1, 2, …: how many splits come before this CTA's in K order."""
    return cta - owner(tile, ctas, tiles, k_steps, schedule)


def splits_of(parts: Sequence[Sequence[Piece]], tile: int) -> list[tuple[int, Piece]]:
    """(cta, piece) of every piece of ``tile``, in K order."""
    found = [(c, Piece(*p)) for c, work in enumerate(parts) for p in work if p[0] == tile]
    return sorted(found, key=lambda cp: cp[1].k_begin)


# =========================================================================================================
# the fix-up protocol: what one consumer warpgroup does after computing a piece
# =========================================================================================================
@dataclass(frozen=True)
class Op:
    """One step of a fix-up plan (what a consumer warpgroup of a CTA does after its piece's K loop)."""

    kind: str
    value: int = 0
    sem: str = ""

    def __str__(self) -> str:
        if self.kind == "wait_flag":
            return f"wait_flag(≥ {self.value}, {self.sem})"
        if self.kind in ("set_flag", "add_flag"):
            return f"{self.kind}({self.value}, {self.sem})"
        return f"{self.kind}()"


_PTX = {
    ("wait_flag", "acquire"): "ld.acquire.gpu.global.u32 in a loop (hopper::flag_wait_geq)",
    ("wait_flag", "relaxed"): "ld.relaxed.gpu.global.u32 in a loop (a plain volatile read)",
    ("set_flag", "release"): "st.release.gpu.global.u32 (hopper::flag_store_release)",
    ("set_flag", "relaxed"): "st.relaxed.gpu.global.u32 (a plain store)",
    ("add_flag", "release"): "red.release.gpu.global.add.u32 (hopper::flag_add_release)",
    ("add_flag", "relaxed"): "red.relaxed.gpu.global.add.u32 (atomicAdd)",
    ("bar_sync", ""): "bar.sync 3, 256 among the consumer threads (hopper::named_bar_sync)",
    ("load_add", ""): "d[j] += __ldcg(ws + j·128): ld.global.cg.f32, block-striped",
    ("store", ""): "__stcg(ws + j·128, d[j]): st.global.cg.f32, block-striped",
    ("reduce_add", ""): "atomicAdd(ws + j·128, d[j]): red.global.add.f32, block-striped",
    ("epilogue", ""): "registers → shared memory → TMA store of the tile of C",
}


def wait_flag(value: int, sem: str = "acquire") -> Op:
    """Spin until the tile's flag is ≥ ``value``; ``sem`` ``"acquire"`` (ld.acquire.gpu) or ``"relaxed"``."""
    if sem not in ("acquire", "relaxed"):
        raise ValueError(f"wait_flag sem={sem!r}: 'acquire' or 'relaxed'")
    return Op("wait_flag", int(value), sem)


def bar_sync() -> Op:
    """The named barrier among the CTA's consumer warpgroups (``bar.sync 3, 256``)."""
    return Op("bar_sync")


def load_add() -> Op:
    """Add the workspace slot to the accumulators (this warpgroup's stripes)."""
    return Op("load_add")


def store() -> Op:
    """Store the accumulators into the workspace slot (this warpgroup's stripes)."""
    return Op("store")


def reduce_add() -> Op:
    """Atomically add the accumulators into the workspace slot (``red.global.add.f32``): order not fixed."""
    return Op("reduce_add")


def set_flag(value: int, sem: str = "release") -> Op:
    """Write the tile's flag; ``sem`` ``"release"`` (st.release.gpu) or ``"relaxed"``."""
    if sem not in ("release", "relaxed"):
        raise ValueError(f"set_flag sem={sem!r}: 'release' or 'relaxed'")
    return Op("set_flag", int(value), sem)


def add_flag(value: int = 1, sem: str = "release") -> Op:
    """Add to the tile's flag atomically; ``sem`` ``"release"`` or ``"relaxed"``."""
    if sem not in ("release", "relaxed"):
        raise ValueError(f"add_flag sem={sem!r}: 'release' or 'relaxed'")
    return Op("add_flag", int(value), sem)


def epilogue() -> Op:
    """Write this warpgroup's half of the tile of C (the tile is done)."""
    return Op("epilogue")


def ptx_of(op: Op) -> str:
    """What an op is in the kernel."""
    return _PTX.get((op.kind, op.sem), op.kind)


def ordered_plan(k_begin: int, k_end: int, k_steps: int, order: int, leader: bool) -> list[Op]:
    """The kernel's deterministic fix-up (``leader``: the warpgroup of thread 128, which handles the flag)."""
    if k_begin == 0 and k_end == k_steps:
        return [epilogue()]
    ops: list[Op] = []
    if order > 0:  # every earlier split is in once the flag reaches our order
        ops += ([wait_flag(order)] if leader else []) + [bar_sync(), load_add()]
    if k_end != k_steps:  # not the final split: leave the running sum for the next one
        ops += [store(), bar_sync()] + ([set_flag(order + 1)] if leader else [])
        return ops
    return ops + ([set_flag(0, "relaxed")] if leader else []) + [epilogue()]


def atomic_plan(k_begin: int, k_end: int, k_steps: int, order: int, leader: bool) -> list[Op]:
    """A nondeterministic fix-up: the first split stores, middle splits add atomically in whatever order they get
    there, the final split waits until all are in. Correct sums, but the bits depend on the order of arrival."""
    if k_begin == 0 and k_end == k_steps:
        return [epilogue()]
    lead = leader
    if k_begin == 0:
        return [store(), bar_sync()] + ([add_flag(1)] if lead else [])
    if k_end != k_steps:
        return (([wait_flag(1)] if lead else []) + [bar_sync(), reduce_add(), bar_sync()]
                + ([add_flag(1)] if lead else []))
    return (([wait_flag(order)] if lead else []) + [bar_sync(), load_add()]
            + ([set_flag(0, "relaxed")] if lead else []) + [epilogue()])


class PlanError(ValueError):
    """A plan function returned something that is not a list of ops (the message says what came back)."""


class StreamKDeadlock(Deadlock):
    """Every CTA still running waits and nothing can change: the message names the flags and barriers."""


# =========================================================================================================
# the simulator
# =========================================================================================================
@dataclass
class _Write:
    ts: int
    value: Any  # int for flags; (data, provenance) for workspace
    view: dict  # what a reader that acquires this write gets to see
    time: float = 0.0
    who: str = ""


@dataclass
class _Instr:
    kind: str  # "compute" or an Op kind
    piece: Piece
    op: Op | None = None
    slot: int = -1
    order: int = 0


@dataclass
class _Actor:
    cta: int
    wg: int
    program: list[_Instr]
    pc: int = 0
    acc: Any = None  # (data, provenance)
    view: dict = field(default_factory=dict)
    time: float = 0.0
    at_bar: bool = False
    bar_since: float = 0.0

    @property
    def name(self) -> str:
        return f"CTA {self.cta} warpgroup {self.wg}"

    @property
    def done(self) -> bool:
        return self.pc >= len(self.program)

    @property
    def instr(self) -> _Instr:
        return self.program[self.pc]


@dataclass
class FixupResult:
    """What :func:`simulate` found. ``ok`` when no problem was found; ``problems`` says each one in words."""

    tiles: int
    k_steps: int
    ctas: int
    schedule: str
    parts: list[list[Piece]]
    c: dict  # (launch, tile, half) -> list of (data, provenance, cta) written by epilogues
    problems: list[str]
    deadlock: str | None
    flags: list[int]  # the flags after the last launch
    trace: list[tuple]  # (launch, time, actor name, what)
    timeline: list[tuple]  # (cta, start, end, kind, tile)
    time: float  # simulated time of the last launch (time policy)
    reference: dict  # (launch, tile, half) -> (data, provenance) the deterministic protocol gives

    @property
    def ok(self) -> bool:
        return not self.problems and self.deadlock is None

    def summary(self) -> str:
        if self.ok:
            return (f"{self.tiles} tiles × {self.k_steps} K steps on {self.ctas} CTAs ({self.schedule}): every tile "
                    "reduced once, in K order")
        lines = ([self.deadlock] if self.deadlock else []) + self.problems[:4]
        if len(self.problems) > 4:
            lines.append(f"… and {len(self.problems) - 4} more problem(s) of the same kind")
        return "\n".join(lines)


@dataclass(frozen=True)
class Costs:
    """Durations in microseconds for :func:`predict` and the ``time`` policy (one cluster = one CTA of the model)."""

    step: float = 0.68  # one 256×256×64 K step of a cluster while every SM is busy (Lab 7: 0.697 at 4096³,
    #                     0.676 at 8192³)
    workspace: float = 3.8  # one load or store of a block's 128×256 fp32 workspace slot (fitted to Lab 9 at
    #                         1024×1024×16384)
    epilogue: float = 1.0  # the bf16 TMA-store epilogue of a 256×256 pair (mostly hidden behind the next tile)
    flag: float = 1.0  # from a flag's release to a spinning reader seeing it
    tile_m: int = PAIR_M
    tile_n: int = PAIR_N
    bk: int = BK
    cluster: int = 2  # SMs per CTA of the model


#: calibrated on the H100 (bench/results/2026-11-22-tune-run2.md): the K step on Lab 7 at 4096³ and 8192³, the
#: workspace traffic on Lab 9 at 1024×1024×16384
H100 = Costs()


def _products(rng: np.random.Generator, tiles: int, k_steps: int, halves: int, width: int, kind: str) -> np.ndarray:
    if kind == "integers":  # exact sums: a skipped or repeated K step shows in the value
        return rng.integers(-8, 9, size=(tiles, k_steps, halves, width)).astype(np.float32)
    # wide exponents: a different order of additions gives different bits
    mant = rng.standard_normal((tiles, k_steps, halves, width))
    return (mant * np.exp2(rng.integers(-12, 13, size=mant.shape))).astype(np.float32)


def _partial(products: np.ndarray, tile: int, a: int, b: int, half: int) -> np.ndarray:
    acc = products[tile, a, half].copy()
    for k in range(a + 1, b):
        acc = acc + products[tile, k, half]
    return acc


def reference_sums(parts: Sequence[Sequence[Piece]], products: np.ndarray, launch: int = 1) -> dict:
    """(launch, tile, half) → (fp32 data, provenance) of the deterministic fix-up: the splits of a tile added in
    K order, each to the running sum of the ones before (``d += workspace``)."""
    tiles, _, halves, _ = products.shape
    out = {}
    for t in range(tiles):
        splits = splits_of(parts, t)
        for h in range(halves):
            data, prov = None, ()
            for _c, p in splits:
                part = _partial(products, t, p.k_begin, p.k_end, h)
                data = part if data is None else part + data
                prov = prov + ((launch, t, p.k_begin, p.k_end),)
            out[(launch, t, h)] = (data, prov)
    return out


def _join(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, -1) < v:
            out[k] = v
    return out


class _Sim:
    def __init__(self, tiles: int, k_steps: int, ctas: int, plan: Callable[..., Any], schedule: str,
                 warpgroups: int, policy: str, seed: int, resident: int | None, dispatch: Any, memory: str,
                 products: list[np.ndarray] | None, costs: Costs, launches: int, max_instructions: int):
        self.tiles, self.k_steps, self.ctas = tiles, k_steps, ctas
        self.plan, self.schedule, self.wgs = plan, schedule, warpgroups
        self.policy, self.rng = policy, np.random.default_rng(seed)
        self.resident = ctas if resident is None else max(1, int(resident))
        self.dispatch_order = self._dispatch(dispatch)
        self.memory, self.products, self.costs = memory, products, costs
        self.launches, self.max_instructions = launches, max_instructions
        self.parts = partition(tiles, k_steps, ctas, schedule)
        self.mem: dict[tuple, list[_Write]] = {}
        self.clock = 0
        self.problems: list[str] = []
        self.trace: list[tuple] = []
        self.timeline: list[tuple] = []
        self.c: dict = {}
        self.time = 0.0

    def _dispatch(self, dispatch: Any) -> list[int]:
        if dispatch in (None, "in-order"):
            return list(range(self.ctas))
        if dispatch == "reverse":
            return list(range(self.ctas - 1, -1, -1))
        order = [int(x) for x in dispatch]
        if sorted(order) != list(range(self.ctas)):
            raise ValueError(f"dispatch {dispatch!r}: a permutation of the {self.ctas} CTAs")
        return order

    # ---------------------------------------------------------------- memory
    def _loc_init(self, loc: tuple) -> None:
        if loc in self.mem:
            return
        if loc[0] == "flag":
            self.mem[loc] = [_Write(0, 0, {})]
        else:
            width = self.products[0].shape[-1] if self.products else 0
            self.mem[loc] = [_Write(0, (np.full(width, np.nan, np.float32), (("poison",),)), {})]

    def _latest(self, loc: tuple) -> _Write:
        self._loc_init(loc)
        return self.mem[loc][-1]

    def _read(self, actor: _Actor, loc: tuple) -> _Write:
        """The write a plain read returns: the oldest one the reader may still see (``memory="weak"``) or the newest."""
        self._loc_init(loc)
        hist = self.mem[loc]
        if self.memory == "fresh":
            w = hist[-1]
        else:
            seen = actor.view.get(loc, 0)
            w = next(x for x in hist if x.ts >= seen)
        actor.view[loc] = max(actor.view.get(loc, 0), w.ts)
        return w

    def _write(self, actor: _Actor, loc: tuple, value: Any, sem: str, rmw_of: _Write | None = None) -> _Write:
        self._loc_init(loc)
        self.clock += 1
        actor.view[loc] = self.clock
        if sem == "release":
            view = dict(actor.view)
        else:
            view = {loc: self.clock}
        if rmw_of is not None:  # an RMW continues the release sequence of the write it read
            view = _join(view, rmw_of.view)
        w = _Write(self.clock, value, view, actor.time, actor.name)
        self.mem[loc].append(w)
        return w

    # ---------------------------------------------------------------- programs
    def _program(self, cta: int, wg: int, launch: int) -> list[_Instr]:
        prog = []
        for piece in self.parts[cta]:
            t, a, b = piece
            slot = owner(t, self.ctas, self.tiles, self.k_steps, self.schedule)
            order = cta - slot
            prog.append(_Instr("compute", piece, None, slot, order))
            try:
                ops = self.plan(a, b, self.k_steps, order, wg == 0)
            except PlanError:
                raise
            except NotImplementedError:
                raise
            except Exception as exc:
                raise PlanError(f"the plan raised {type(exc).__name__}: {exc} (for a piece [{a}, {b}) of "
                                f"{self.k_steps} K steps, order {order}, leader={wg == 0})") from exc
            if not isinstance(ops, list | tuple):
                raise PlanError(f"the plan returned {ops!r} for a piece [{a}, {b}) of {self.k_steps} K steps: "
                                "return a list of ops (e.g. [streamk.epilogue()])")
            for op in ops:
                if not isinstance(op, Op):
                    raise PlanError(f"the plan returned {op!r} among its ops for a piece [{a}, {b}): use the "
                                    "streamk functions (wait_flag, bar_sync, load_add, store, set_flag, epilogue…)")
                prog.append(_Instr(op.kind, piece, op, slot, order))
        return prog

    # ---------------------------------------------------------------- running
    def run(self) -> FixupResult:
        deadlock = None
        reference: dict = {}
        for launch in range(1, self.launches + 1):
            if self.products is not None:
                reference.update(reference_sums(self.parts, self.products[launch - 1], launch))
            deadlock = self._launch(launch)
            if deadlock:
                break
            self._check_launch(launch, reference)
        flags = [self._latest(("flag", s)).value for s in range(self.ctas)]
        if deadlock is None and any(flags):
            nonzero = {s: v for s, v in enumerate(flags) if v}
            self.problems.append(f"after the launch the flags are not all 0 again: {nonzero} (the final split "
                                 "resets its tile's flag, or the next launch's splits stop waiting too early)")
        return FixupResult(self.tiles, self.k_steps, self.ctas, self.schedule, self.parts, self.c, self.problems,
                           deadlock, flags, self.trace, self.timeline, self.time, reference)

    def _launch(self, launch: int) -> str | None:
        actors_of = {c: [_Actor(c, wg, self._program(c, wg, launch)) for wg in range(self.wgs)]
                     for c in range(self.ctas)}
        # a new launch sees everything the previous one wrote (the kernel boundary orders memory)
        fresh_view = {loc: hist[-1].ts for loc, hist in self.mem.items()}
        for acts in actors_of.values():
            for a in acts:
                a.view = dict(fresh_view)
        pending = list(self.dispatch_order)
        running: list[int] = []
        bar_count = dict.fromkeys(range(self.ctas), 0)
        free_at = 0.0  # when the last SM was freed (a CTA started later begins then)
        steps = 0
        while True:
            for c in list(running):  # a CTA whose warpgroups are all done leaves its SM to the next one
                if all(a.done for a in actors_of[c]):
                    running.remove(c)
                    free_at = max([free_at] + [a.time for a in actors_of[c]])
            while pending and len(running) < self.resident:
                c = pending.pop(0)
                running.append(c)
                for a in actors_of[c]:
                    a.time = max(a.time, free_at if len(self.dispatch_order) > self.resident else 0.0)
            if not running:
                self.time = max([a.time for acts in actors_of.values() for a in acts] + [0.0])
                return None
            ready = [a for c in running for a in actors_of[c] if not a.done and self._can_run(a)]
            if not ready:
                return self._deadlock_message(launch, actors_of, running, pending)
            actor = self._pick(ready)
            self._step(launch, actor, actors_of[actor.cta], bar_count)
            steps += 1
            if steps > self.max_instructions:
                return f"the simulation ran more than {self.max_instructions} steps (an endless loop?)"

    def _flag_ready(self, a: _Actor, value: int) -> bool:
        return self._latest(("flag", a.instr.slot)).value >= value

    def _can_run(self, a: _Actor) -> bool:
        ins = a.instr
        if ins.kind == "wait_flag":
            return self._flag_ready(a, ins.op.value)
        if ins.kind == "bar_sync":
            return not a.at_bar
        return True

    def _ready_time(self, a: _Actor) -> float:
        ins = a.instr
        if ins.kind == "wait_flag" and self.policy == "time":
            hist = self.mem[("flag", ins.slot)]
            i = len(hist)
            while i > 0 and hist[i - 1].value >= ins.op.value:
                i -= 1
            if i < len(hist) and hist[i].ts > 0:  # the write that raised the flag far enough, seen a bit later
                return max(a.time, hist[i].time + self.costs.flag)
        return a.time

    def _pick(self, ready: list[_Actor]) -> _Actor:
        if self.policy == "time":
            return min(ready, key=lambda a: (self._ready_time(a), a.cta, a.wg))
        if self.policy == "round-robin":
            self._rr = getattr(self, "_rr", -1) + 1
            keyed = sorted(ready, key=lambda a: (a.cta, a.wg))
            return keyed[self._rr % len(keyed)]
        if self.policy == "random":
            return ready[int(self.rng.integers(len(ready)))]
        if self.policy == "lowest-first":
            return min(ready, key=lambda a: (a.cta, a.wg))
        if self.policy == "highest-first":
            return min(ready, key=lambda a: (-a.cta, a.wg))
        if self.policy == "leader-last":  # the flag's warpgroup runs only when no other can
            return min(ready, key=lambda a: (a.wg == 0, -a.cta))
        raise ValueError(f"policy {self.policy!r}: time, round-robin, random, lowest-first, highest-first, "
                         "leader-last")

    def _log(self, launch: int, a: _Actor, what: str) -> None:
        self.trace.append((launch, a.time, a.name, what))

    def _step(self, launch: int, a: _Actor, mates: list[_Actor], bar_count: dict) -> None:
        ins = a.instr
        t, ka, kb = ins.piece
        c = self.costs
        if self.policy == "time":
            a.time = self._ready_time(a)
        t0 = a.time
        kind = ins.kind
        if kind == "compute":
            if self.products is not None:
                a.acc = (_partial(self.products[launch - 1], t, ka, kb, a.wg), ((launch, t, ka, kb),))
            else:
                a.acc = (None, ((launch, t, ka, kb),))
            a.time += (kb - ka) * c.step
            self._log(launch, a, f"computes tile {t}, K steps [{ka}, {kb}) ({role(ka, kb, self.k_steps)})")
            if a.wg == 0:
                self.timeline.append((a.cta, t0, a.time, "compute", t))
            a.pc += 1
            return
        if kind == "wait_flag":
            loc = ("flag", ins.slot)
            w = self._latest(loc)  # a spinning read ends on the newest value
            if ins.op.sem == "acquire":
                a.view = _join(a.view, w.view)
            a.view[loc] = max(a.view.get(loc, 0), w.ts)
            self._log(launch, a, f"sees flags[{ins.slot}] = {w.value} ≥ {ins.op.value} ({ins.op.sem})")
            if a.wg == 0 and a.time > t0:
                self.timeline.append((a.cta, t0, a.time, "wait", t))
            a.pc += 1
            return
        if kind == "bar_sync":
            a.at_bar = True
            a.bar_since = a.time
            bar_count[a.cta] += 1
            self._log(launch, a, "arrives at the named barrier")
            if bar_count[a.cta] == len(mates):
                bar_count[a.cta] = 0
                joined: dict = {}
                for m in mates:
                    joined = _join(joined, m.view)
                end = max(m.time for m in mates if m.at_bar)
                for m in mates:
                    if m.at_bar:
                        if m.wg == 0 and end > m.bar_since:
                            self.timeline.append((m.cta, m.bar_since, end, "wait", t))
                        m.at_bar = False
                        m.view = dict(joined)
                        m.time = end
                        m.pc += 1
            return
        loc_ws = ("ws", ins.slot, a.wg)
        if kind == "load_add":
            w = self._read(a, loc_ws)
            data, prov = w.value
            mine, mprov = a.acc
            a.acc = (None if mine is None else mine + data, prov + mprov)
            a.time += c.workspace
            self._log(launch, a, f"adds workspace slot {ins.slot} ({_prov_text(prov)}) to tile {t}'s partial")
        elif kind == "store":
            self._write(a, loc_ws, a.acc, "relaxed")
            a.time += c.workspace
            self._log(launch, a, f"stores tile {t}'s sum ({_prov_text(a.acc[1])}) in slot {ins.slot}")
        elif kind == "reduce_add":
            old = self._latest(loc_ws)
            data, prov = old.value
            mine, mprov = a.acc
            new = (None if mine is None else data + mine, prov + mprov)
            self._write(a, loc_ws, new, "relaxed", rmw_of=old)
            a.time += c.workspace
            self._log(launch, a, f"adds tile {t}'s partial atomically into slot {ins.slot}")
        elif kind in ("set_flag", "add_flag"):
            loc = ("flag", ins.slot)
            if kind == "set_flag":
                self._write(a, loc, ins.op.value, ins.op.sem)
            else:
                old = self._latest(loc)
                self._write(a, loc, old.value + ins.op.value, ins.op.sem, rmw_of=old)
            self._log(launch, a, f"{kind} flags[{ins.slot}] → {self._latest(loc).value} ({ins.op.sem})")
        elif kind == "epilogue":
            key = (launch, t, a.wg)
            self.c.setdefault(key, []).append((a.acc[0], a.acc[1], a.cta))
            a.time += c.epilogue
            self._log(launch, a, f"writes its half of tile {t} of C")
        else:  # pragma: no cover - Op kinds are fixed
            raise PlanError(f"unknown op {kind!r}")
        if a.wg == 0 and kind in ("load_add", "store", "reduce_add", "epilogue"):
            self.timeline.append((a.cta, t0, a.time, "epilogue" if kind == "epilogue" else "fixup", t))
        a.pc += 1

    # ---------------------------------------------------------------- verdicts
    def _check_launch(self, launch: int, reference: dict) -> None:
        for t in range(self.tiles):
            splits = splits_of(self.parts, t)
            want = tuple((launch, t, p.k_begin, p.k_end) for _c, p in splits)
            for h in range(self.wgs):
                writes = self.c.get((launch, t, h), [])
                where = f"tile {t}" + (f" (warpgroup {h}'s half)" if self.wgs > 1 else "")
                if launch > 1:
                    where += f" in launch {launch}"
                if not writes:
                    self.problems.append(f"{where} was never written to C: no split ran the epilogue")
                    continue
                if len(writes) > 1:
                    who = ", ".join(f"CTA {w[2]}" for w in writes)
                    self.problems.append(f"{where} was written to C {len(writes)} times (by {who}): only the "
                                         "final split runs the epilogue")
                    continue
                data, prov, cta = writes[0]
                problem = _judge_provenance(prov, want, launch, t)
                if problem:
                    self.problems.append(f"{where}, written by CTA {cta}: {problem}")
                    continue
                if self.products is not None:
                    ref = reference[(launch, t, h)][0]
                    if data is None or not np.array_equal(data.view(np.uint32), ref.view(np.uint32)):
                        self.problems.append(f"{where}: the sum has the right pieces in K order but other bits "
                                             "than the ordered fix-up (d += workspace, one split after another)")

    def _deadlock_message(self, launch: int, actors_of: dict, running: list[int], pending: list[int]) -> str:
        lines = [f"deadlock{' in launch ' + str(launch) if launch > 1 else ''}: every running CTA waits and "
                 "nothing can change."]
        for c in running:
            for a in actors_of[c]:
                if a.done:
                    continue
                ins = a.instr
                if ins.kind == "wait_flag":
                    cur = self._latest(("flag", ins.slot)).value
                    lines.append(f"  {a.name} waits until flags[{ins.slot}] ≥ {ins.op.value} (tile {ins.piece.tile}, "
                                 f"split of order {ins.order}); the flag holds {cur}. "
                                 + self._who_would_raise(ins, cur, actors_of, running, pending))
                elif ins.kind == "bar_sync":
                    others = [m for m in actors_of[c] if m is not a and not m.at_bar]
                    why = "; ".join(f"warpgroup {m.wg} " + ("has finished" if m.done else
                                                            f"is at {m.instr.kind} of tile {m.instr.piece.tile}")
                                    for m in others)
                    lines.append(f"  {a.name} waits at the named barrier (tile {ins.piece.tile}) for the CTA's "
                                 f"other warpgroups: {why}")
        if len(lines) > 9:
            lines = lines[:9] + [f"  … and {len(lines) - 9} more waiting"]
        return "\n".join(lines)

    def _who_would_raise(self, ins: _Instr, cur: int, actors_of: dict, running: list[int],
                         pending: list[int]) -> str:
        splits = splits_of(self.parts, ins.piece.tile)
        if cur >= len(splits) or cur < 0:
            return "No split of this tile will ever raise it that far."
        cta, piece = splits[cur]
        who = f"CTA {cta} (the split [{piece.k_begin}, {piece.k_end}) next in K order)"
        if cta in pending:
            return (f"{who} would raise it next, but it is not resident: only {self.resident} CTAs fit at once and "
                    "every resident one is waiting.")
        if cta not in running:
            return f"{who} would raise it next, but it has finished without doing so."
        states = [m for m in actors_of[cta] if not m.done]
        if not states:
            return f"{who} would raise it next, but it has finished without doing so."
        m = states[0]
        return f"{who} would raise it next, but it is itself waiting ({m.instr.kind} of tile {m.instr.piece.tile})."


def _prov_text(prov: tuple, limit: int = 6) -> str:
    """``tile 3 [0, 4) + [4, 9) + …``: the pieces a sum was built from, in the order they were added."""
    parts, last_tile = [], None
    for p in prov:
        if p == ("poison",):
            parts.append("never-written memory")
            last_tile = None
            continue
        launch, t, a, b = p
        text = f"[{a}, {b})" + (f" of launch {launch}" if launch > 1 else "")
        parts.append(text if t == last_tile else f"tile {t} {text}")
        last_tile = t
    if len(parts) > limit:
        parts = parts[:limit - 2] + [f"… ({len(parts) - limit + 1} more)"] + parts[-1:]
    return " + ".join(parts) if parts else "nothing"


def _judge_provenance(prov: tuple, want: tuple, launch: int, tile: int) -> str | None:
    """What is wrong with the pieces a tile's sum was built from (None if it is exactly ``want``, in order)."""
    if prov == want:
        return None
    if ("poison",) in prov:
        return ("it includes workspace memory no split had stored (a stale read: the partials were not visible "
                "yet when they were added, or they were never stored)")
    stale = [p for p in prov if p[0] != launch]
    if stale:
        return (f"it includes partials of an earlier launch ({_prov_text(tuple(stale))}): a flag that was not "
                "reset let a split go ahead before this launch's partials were in")
    other = [p for p in prov if p[1] != tile]
    if other:
        return f"it includes partials of another tile ({_prov_text(tuple(other))}): the workspace slot is shared"
    got_set, want_set = sorted(prov), sorted(want)
    if got_set == want_set:
        return (f"its splits were added out of K order ({_prov_text(prov)}; K order is {_prov_text(want)}): the "
                "bits then depend on which CTA got there first — not deterministic")
    missing = [p for p in want if p not in prov]
    extra = [p for p in prov if prov.count(p) > 1]
    if len(prov) == 1 and len(want) > 1 and prov[0] == want[-1]:
        return ("it holds only the final split's own K steps: the splits before it were never added (load_add the "
                "workspace before the epilogue)")
    bits = []
    if missing:
        bits.append(f"the split(s) {_prov_text(tuple(missing))} are missing (read before they were visible, or "
                    "never added)")
    if extra:
        bits.append(f"{_prov_text(tuple(sorted(set(extra))))} was added more than once")
    return "; ".join(bits) or f"it was built from {_prov_text(prov)} instead of {_prov_text(want)}"


def simulate(tiles: int, k_steps: int, ctas: int, plan: Callable[..., Any] = ordered_plan, *,
             schedule: str = "hybrid", warpgroups: int = 2, policy: str = "round-robin", seed: int = 0,
             resident: int | None = None, dispatch: Any = "in-order", memory: str = "weak", width: int = 4,
             values: str = "floats", launches: int = 1, costs: Costs = H100,
             products: Sequence[np.ndarray] | None = None, max_instructions: int = 200_000) -> FixupResult:
    """Run every CTA of a Stream-K launch with the fix-up ``plan`` and report what happened.

    ``plan(k_begin, k_end, k_steps, order, leader) -> list[Op]`` says what one consumer warpgroup does after its
    piece (``leader``: the warpgroup of thread 128, which handles the flag). ``policy`` picks which warpgroup
    moves next (``round-robin``, ``random`` with ``seed``, ``lowest-first``, ``highest-first``, ``leader-last``,
    or ``time``: simulated time with ``costs``). ``memory="weak"`` lets every plain read return the oldest value
    the PTX memory model allows (what release/acquire and bar.sync guarantee, nothing more); ``"fresh"`` always
    the newest. ``resident`` CTAs run at once, started in ``dispatch`` order (``in-order``, ``reverse`` or a
    permutation). ``launches`` > 1 runs the kernel again on the same workspace and flags (new data).
    """
    rng = np.random.default_rng(seed)
    if products is None and values != "none":
        products = [_products(rng, tiles, k_steps, warpgroups, width, values) for _ in range(launches)]
    sim = _Sim(tiles, k_steps, ctas, plan, schedule, warpgroups, policy, seed, resident, dispatch, memory,
               list(products) if products is not None else None, costs, launches, max_instructions)
    return sim.run()


# =========================================================================================================
# predicted times
# =========================================================================================================
@dataclass(frozen=True)
class Prediction:
    """Predicted time of one schedule of one shape (``timeline``: (cta, start µs, end µs, kind, tile))."""

    schedule: str
    M: int
    N: int
    K: int
    ctas: int
    tiles: int
    k_steps: int
    microseconds: float
    timeline: list

    @property
    def tflops(self) -> float:
        return 2.0 * self.M * self.N * self.K / (self.microseconds * 1e-6) / 1e12

    @property
    def busy(self) -> float:
        """Fraction of CTA time spent computing K steps."""
        work = sum(e - s for _c, s, e, kind, _t in self.timeline if kind == "compute")
        return work / (self.ctas * self.microseconds) if self.microseconds else 0.0


def predict(M: int, N: int, K: int, schedule: str = "hybrid", sms: int | None = None,
            costs: Costs = H100) -> Prediction:
    """Predicted run time of the Lab 7 (``data-parallel``) or Lab 9 (``stream-k``, ``hybrid``) kernel: every CTA
    (a 2-SM cluster) runs its work list with the ordered fix-up in simulated time, on ``sms`` SMs (the GPU here by
    default, ``parts.current()``; the K step's cost is the H100's). A model: it knows wave quantization and the
    fix-up's waits and workspace traffic, not caches (see the lesson for where it misses)."""
    ctas = (sms or parts.current().sms) // costs.cluster
    tiles, k_steps = iteration_space(M, N, K, costs.tile_m, costs.tile_n, costs.bk)
    res = simulate(tiles, k_steps, ctas, ordered_plan, schedule=schedule, warpgroups=1, policy="time",
                   values="none", costs=costs)
    if res.deadlock:  # pragma: no cover - the ordered plan never deadlocks with every CTA resident
        raise StreamKDeadlock(res.deadlock)
    return Prediction(schedule, M, N, K, ctas, tiles, k_steps, res.time, res.timeline)


# =========================================================================================================
# measured on the H100
# =========================================================================================================
#: the tuning run the costs were calibrated on (bench/results): which kernel variant is which schedule
MEASURED_RUN = "bench/results/2026-11-22-tune-run2.json"
#: the keys of those variants in 2026-11-22-tune-run2.json, recorded before the labs were renumbered (its "lab6" is
#: today's Lab 7 kernel, its "lab7" today's Lab 9)
_RUNG_OF = {"data-parallel": ("lab6-g8", "lab6-g8-zero"), "hybrid": ("lab7-hybrid",), "stream-k": ("lab7-pure",)}


def measured(path: str | None = None) -> dict[tuple[str, tuple[int, int, int]], tuple[float, float]]:
    """(schedule, (M, N, K)) → (TFLOP/s, cuBLAS TFLOP/s in the same run) measured on the H100 (empty when the
    results file is not there). Data-parallel is the Lab 7 kernel."""
    import json
    from pathlib import Path

    file = Path(path) if path else Path(__file__).resolve().parents[2] / MEASURED_RUN
    if not file.exists():
        return {}
    rungs = json.loads(file.read_text())["rungs"]
    out: dict = {}
    for schedule, keys in _RUNG_OF.items():
        for key in keys:
            for s in rungs.get(key, {}).get("speed", []):
                out.setdefault((schedule, tuple(s["shape"])), (s["tflops"], s["cublas_tflops"]))
    return out
