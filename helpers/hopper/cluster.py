"""Clusters: CTAs that run at the same time, address each other's shared memory, and share TMA loads by multicast.

Two parts.

**Who loads what** (:func:`multicast_plan`): in a cluster of ``cm × cn`` CTAs, CTA (i, j) computes the output tile
at block-row i, block-column j of the cluster's patch. The CTAs of a row need the same slice of A, those of a
column the same slice of B; each loads its share of the slice and multicasts it to all of them. The plan lists,
per CTA, the loads it issues, who receives each, and the bytes every CTA must expect on its FULL barrier.

**The Lab 7 mainloop on a cluster** (:class:`ClusterModel`): every CTA of the cluster has its own ring of stages
in its own shared memory, its own ``full[s]`` / ``empty[s]`` mbarriers (``helpers.hopper.mbarrier``), a producer and
``consumers`` consumer warpgroups. Your code runs in it through a context ``ctx`` (one per CTA), the way the
kernel runs on the GPU:

- ``init(ctx)`` — initialise the CTA's barriers: ``ctx.init(ctx.full[s], count)``, ``ctx.init(ctx.empty[s], count)``;
- ``produce(ctx, s, k, m0, n0)`` — fill stage ``s`` for K step ``k`` of the CTA's tile at rows ``m0``, columns
  ``n0``: ``ctx.arrive_expect_tx(ctx.full[s], nbytes)``, ``ctx.tma_load("A" | "B", dst, (col, row), ctx.full[s],
  mask=None)`` (``mask`` set: multicast to the CTAs whose bit is set; the bytes land at the same offset ``dst`` of
  each, and each one's barrier at the same offset as ``ctx.full[s]`` counts them);
- ``release(ctx, s)`` — a consumer warpgroup is done reading stage ``s``: ``ctx.arrive(bar)``, where ``bar`` is
  ``ctx.empty[s]`` (this CTA's) or ``ctx.mapa(ctx.empty[s], cta)`` (the same barrier in CTA ``cta``).

The model runs the roles in simulated time under several adversarial timings (:data:`SCHEDULES`: a slow CTA, late
or early multicast bytes) and checks every consumer read against the bytes TMA should have put there. It raises
:class:`ClusterError` with a rule (``read-before-full``, ``overwrite-before-empty``, ``wrong-data``,
``multicast-mask``, ``mapa-rank``, ``remote-barrier``, ``barrier-init``), :class:`~helpers.hopper.mbarrier.Deadlock`
naming
every waiter, or the barrier's own :class:`~helpers.hopper.mbarrier.MBarrierError`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import parts, tensormap, tma
from .mbarrier import Deadlock, MBarrier, MBarrierError
from .tensormap import RuleError

__all__ = [
    "CO_RESIDENT",
    "co_resident",
    "ClusterError",
    "Load",
    "CtaPlan",
    "multicast_plan",
    "BarrierRef",
    "Geometry",
    "LAB7",
    "Schedule",
    "SCHEDULES",
    "ClusterContext",
    "ClusterModel",
    "RecordingContext",
    "record",
    "rank_mask",
    "run_mainloop",
    "reference_init",
    "reference_produce",
    "reference_release",
]

def co_resident(part: parts.Part | None = None) -> dict[int, tuple[int, int]]:
    """Co-resident clusters of one-block-per-SM blocks (384 threads, 200–227 KB of shared memory) on ``part`` (the
    GPU here by default): cluster size → (clusters, SMs busy)."""
    part = part or parts.current()
    return {size: (n, n * size) for size, n in sorted(part.clusters.items())}


#: Co-resident clusters on the H100 SXM (cuOccupancyMaxActiveClusters, measured 2026-11-22): cluster size →
#: (clusters, SMs busy)
CO_RESIDENT = co_resident(parts.PROFILES["h100-sxm"])


class ClusterError(RuleError):
    """A cluster protocol broken (``rule`` names it, ``value`` the offending value)."""


# ------------------------------------------------------------------------------------------- who loads what
@dataclass(frozen=True)
class Load:
    """One TMA load of a K step: which operand, which rows of its slice, who issues it, who receives it."""

    operand: str  # "A" or "B"
    rows: tuple[int, int]  # [first, last) row of the operand's tile rows (A: rows of C; B: columns of C)
    issuer: tuple[int, int]
    receivers: tuple[tuple[int, int], ...]
    nbytes: int


@dataclass(frozen=True)
class CtaPlan:
    """What one CTA (i, j) of the cluster does per K step."""

    cta: tuple[int, int]
    rank: int
    issues: tuple[Load, ...]
    receives: tuple[Load, ...]
    expect_tx: int  # bytes its FULL barrier must expect: everything that lands in its shared memory
    l2_bytes: int  # bytes it reads from L2/HBM itself


def multicast_plan(cm: int, cn: int, BM: int = 128, BN: int = 256, BK: int = 64, in_bytes: int = 2,
                   share: str = "both") -> list[CtaPlan]:
    """Per CTA of a ``cm × cn`` cluster (cm along M, cn along N): the loads of one K step.

    ``share``: "B" (CTAs along M share their B slice, each loads 1/cm of it: Lab 7 with cm = 2), "A" (CTAs along N
    share A), "both", or "none". A slice that is shared is cut into equal parts along its rows, one per sharer.
    """
    if cm < 1 or cn < 1 or cm * cn > 16:
        raise ClusterError("cluster-size", (cm, cn), f"a cluster of {cm}×{cn} CTAs: 1 to 16 CTAs on an H100 "
                           "(more than 8 needs the non-portable attribute)")
    plans = []
    for j in range(cn):
        for i in range(cm):
            issues, receives = [], []
            # A: the BM rows of block-row i, needed by CTAs (i, 0..cn-1)
            a_parts = cn if share in ("A", "both") and cn > 1 else 1
            b_parts = cm if share in ("B", "both") and cm > 1 else 1
            for p in range(a_parts):
                rows = (p * BM // a_parts, (p + 1) * BM // a_parts)
                issuer = (i, p) if a_parts > 1 else (i, j)
                recv = tuple((i, jj) for jj in range(cn)) if a_parts > 1 else ((i, j),)
                load = Load("A", rows, issuer, recv, (rows[1] - rows[0]) * BK * in_bytes)
                if issuer == (i, j):
                    issues.append(load)
                if (i, j) in recv:
                    receives.append(load)
            for p in range(b_parts):
                rows = (p * BN // b_parts, (p + 1) * BN // b_parts)
                issuer = (p, j) if b_parts > 1 else (i, j)
                recv = tuple((ii, j) for ii in range(cm)) if b_parts > 1 else ((i, j),)
                load = Load("B", rows, issuer, recv, (rows[1] - rows[0]) * BK * in_bytes)
                if issuer == (i, j):
                    issues.append(load)
                if (i, j) in recv:
                    receives.append(load)
            plans.append(CtaPlan((i, j), i + cm * j, tuple(issues), tuple(receives),
                                 sum(ld.nbytes for ld in receives), sum(ld.nbytes for ld in issues)))
    return plans


def rank_mask(receivers: tuple[tuple[int, int], ...], cm: int) -> int:
    """The multicast mask (bit = %cluster_ctarank) of a set of receiving CTAs (i, j): rank = i + cm·j."""
    return sum(1 << (i + cm * j) for i, j in receivers)


# ------------------------------------------------------------------------------------------- the mainloop model
@dataclass(frozen=True)
class BarrierRef:
    """An mbarrier of one CTA: ``full[s]`` or ``empty[s]`` of CTA ``rank``."""

    rank: int
    kind: str
    index: int

    def __str__(self) -> str:
        return f"{self.kind}[{self.index}] of CTA {self.rank}"


@dataclass(frozen=True)
class Geometry:
    """The kernel's tile and ring: BM×BN per CTA, BK-wide K steps, ``stages`` stages, a cluster of ``size``
    CTAs along M sharing B (each loads BN/size rows of the B slice)."""

    BM: int = 128
    BN: int = 256
    BK: int = 64
    stages: int = 4
    consumers: int = 2
    size: int = 2

    @property
    def A_BYTES(self) -> int:
        return self.BM * self.BK * 2

    @property
    def B_BYTES(self) -> int:
        return self.BN * self.BK * 2

    @property
    def STAGE_BYTES(self) -> int:
        return self.A_BYTES + self.B_BYTES

    @property
    def B_HALF(self) -> int:
        """Bytes of B one CTA loads (its share of the slice)."""
        return self.B_BYTES // self.size

    @property
    def B_ROWS(self) -> int:
        """Rows of the B slice one CTA loads."""
        return self.BN // self.size


#: Lab 7's kernel: 128×256 per CTA, 64-wide K steps, 4 stages, 2 consumer warpgroups, 2 CTAs sharing B
LAB7 = Geometry()


@dataclass(frozen=True)
class Schedule:
    """Timing of one simulated run (abstract units): TMA latency into the issuing CTA and into the others, the
    time a consumer warpgroup of each CTA reads a stage, and when each producer starts."""

    name: str
    local_latency: float = 500.0
    remote_latency: float = 500.0
    read_time: tuple[float, ...] = (100.0, 100.0)
    producer_start: tuple[float, ...] = (0.0, 0.0)


#: The adversarial timings every protocol must survive
SCHEDULES = (
    Schedule("even"),
    Schedule("CTA 1 reads slowly", read_time=(100.0, 700.0)),
    Schedule("CTA 0 reads slowly", read_time=(700.0, 100.0)),
    Schedule("multicast bytes arrive late", remote_latency=1500.0),
    Schedule("multicast bytes arrive early", local_latency=300.0, remote_latency=20.0, producer_start=(0.0, 2500.0)),
)


class ClusterContext:
    """What ``init`` / ``produce`` / ``release`` see: this CTA's rank, the geometry, its barriers, and the
    operations. Sizes: ``A_BYTES``, ``B_BYTES``, ``STAGE_BYTES``, ``B_HALF`` (bytes of B one CTA loads),
    ``B_ROWS`` (rows of B one CTA loads), ``BM``, ``BN``, ``BK``, ``stages``, ``consumers``, ``size``."""

    def __init__(self, model: ClusterModel, rank: int):
        self._m = model
        self.rank = rank
        g = model.geometry
        self.size, self.stages, self.consumers = g.size, g.stages, g.consumers
        self.BM, self.BN, self.BK = g.BM, g.BN, g.BK
        self.A_BYTES, self.B_BYTES, self.STAGE_BYTES = g.A_BYTES, g.B_BYTES, g.STAGE_BYTES
        self.B_HALF, self.B_ROWS = g.B_HALF, g.B_ROWS
        self.full = [BarrierRef(rank, "full", s) for s in range(g.stages)]
        self.empty = [BarrierRef(rank, "empty", s) for s in range(g.stages)]
        self.role = ""

    def __repr__(self) -> str:
        return f"<cluster context: CTA {self.rank} of {self.size}{', ' + self.role if self.role else ''}>"

    # -- barriers
    def init(self, bar: BarrierRef, count: int) -> None:
        """mbarrier.init of one of this CTA's barriers with ``count`` arrivals per phase."""
        self._m._init(self, bar, count)

    def mapa(self, bar: BarrierRef, cta: int) -> BarrierRef:
        """``mapa.shared::cluster``: the same barrier in CTA ``cta`` of the cluster."""
        if not isinstance(bar, BarrierRef):
            raise ClusterError("mapa-rank", bar, f"mapa takes a barrier (ctx.full[s] / ctx.empty[s]), not {bar!r}")
        if isinstance(cta, bool) or not isinstance(cta, int | np.integer) or not 0 <= cta < self.size:
            raise ClusterError("mapa-rank", cta, f"mapa to CTA {cta!r}: the cluster has CTAs 0…{self.size - 1}")
        return BarrierRef(int(cta), bar.kind, bar.index)

    def arrive(self, bar: BarrierRef) -> None:
        """One arrival on ``bar`` (this CTA's, or another's through :meth:`mapa`)."""
        self._m._arrive(self, bar)

    def arrive_expect_tx(self, bar: BarrierRef, nbytes: int) -> None:
        """Arrive on this CTA's ``bar`` and add ``nbytes`` to the bytes its phase waits for."""
        self._m._arrive_expect_tx(self, bar, nbytes)

    # -- copies
    def tma_load(self, operand: str, dst: int, coords: tuple[int, int], bar: BarrierRef,
                 mask: int | None = None) -> None:
        """A TMA load of one box of ``operand`` ("A": 128 rows × 64 of A; "B": B_ROWS rows × 64 of B) at
        ``coords`` = (column, row) into shared offset ``dst``; with ``mask``, into every CTA whose bit is set."""
        self._m._tma_load(self, operand, dst, coords, bar, mask)


@dataclass
class _Role:
    name: str
    rank: int
    gen: Generator
    ready_at: float = 0.0
    waiting: tuple[BarrierRef, int, float] | None = None
    finished: bool = False


@dataclass(order=True)
class _Landing:
    time: float
    seq: int
    dest: int = field(compare=False)
    dst: int = field(compare=False)
    image: np.ndarray = field(compare=False, repr=False)
    bar: BarrierRef = field(compare=False)
    fill: int = field(compare=False)
    what: str = field(compare=False)
    nbytes: int = field(compare=False)


class ClusterModel:
    """One cluster running the Lab 7 mainloop over the pair tiles ``pairs`` ((pm, pn) each) of C = A·Bᵀ."""

    def __init__(self, A: np.ndarray, B: np.ndarray, pairs: list[tuple[int, int]], geometry: Geometry = LAB7,
                 schedule: Schedule = SCHEDULES[0], cache: dict | None = None):
        self.geometry = g = geometry
        self.schedule = schedule
        self.A, self.B = A, B
        self.pairs = list(pairs)
        self.K = A.shape[1]
        self.steps = -(-self.K // g.BK)
        self.tmaps = {
            "A": tensormap.for_matrix(A.shape, tensormap.DataType.BFLOAT16, g.BM, g.BK, tensormap.Swizzle.B128),
            "B": tensormap.for_matrix(B.shape, tensormap.DataType.BFLOAT16, g.B_ROWS, g.BK, tensormap.Swizzle.B128),
        }
        self.smem = [np.zeros(g.stages * g.STAGE_BYTES, np.uint8) for _ in range(g.size)]
        self.bars = {BarrierRef(r, kind, s): MBarrier(f"{kind}[{s}] of CTA {r}", allow_negative_tx=kind == "full")
                     for r in range(g.size) for kind in ("full", "empty") for s in range(g.stages)}
        self.ctx = [ClusterContext(self, r) for r in range(g.size)]
        self.time = 0.0
        self.roles: list[_Role] = []
        self._landings: list[_Landing] = []
        self._seq = 0
        self._inflight: dict[tuple[int, int], list[_Landing]] = {}
        self._released: dict[tuple[int, int, int], int] = {}  # (rank, stage, consumer) -> last fill released
        self._fill_of: dict[int, int] = {}  # producer rank -> fill number of the stage it is filling now
        self._cache = {} if cache is None else cache  # TMA boxes and expected stages, shared between timings
        self.reads = 0
        self.remote_arrivals = 0
        self.multicasts = 0
        self.early_landings = 0  # bytes that landed before their CTA's producer announced them

    # -- operations called through the contexts
    def _bar(self, ctx: ClusterContext, bar: Any, what: str) -> MBarrier:
        if not isinstance(bar, BarrierRef) or bar not in self.bars:
            raise ClusterError("barrier", bar, f"CTA {ctx.rank} {what}: {bar!r} is not one of the cluster's "
                               "barriers (use ctx.full[s], ctx.empty[s] or ctx.mapa(...))")
        return self.bars[bar]

    def _init(self, ctx: ClusterContext, bar: BarrierRef, count: int) -> None:
        b = self._bar(ctx, bar, "init")
        if bar.rank != ctx.rank:
            raise ClusterError("barrier-init", bar, f"CTA {ctx.rank} initialises {bar}: each CTA initialises its "
                               "own barriers")
        b.init(int(count))

    def _arrive(self, ctx: ClusterContext, bar: BarrierRef) -> None:
        b = self._bar(ctx, bar, "arrive")
        if bar.rank != ctx.rank:
            self.remote_arrivals += 1
        b.arrive()

    def _arrive_expect_tx(self, ctx: ClusterContext, bar: BarrierRef, nbytes: int) -> None:
        b = self._bar(ctx, bar, "arrive.expect_tx")
        if bar.rank != ctx.rank:
            raise ClusterError("remote-barrier", bar, f"CTA {ctx.rank} arms {bar}: a producer arms its own FULL "
                               "barrier; the bytes another CTA multicasts are counted by this CTA's own expect-tx")
        b.arrive_expect_tx(int(nbytes))

    def _tma_load(self, ctx: ClusterContext, operand: str, dst: int, coords: tuple[int, int], bar: BarrierRef,
                  mask: int | None) -> None:
        g = self.geometry
        if operand not in self.tmaps:
            raise ClusterError("operand", operand, f"tma_load of {operand!r}: the operands are 'A' and 'B'")
        self._bar(ctx, bar, "tma_load")
        if bar.rank != ctx.rank:
            raise ClusterError("remote-barrier", bar, f"CTA {ctx.rank} names {bar} in a TMA load: the barrier operand "
                               "is this CTA's own (with multicast, each receiver's barrier at the same offset counts "
                               "the bytes)")
        if mask is None:
            dests = [ctx.rank]
        else:
            if isinstance(mask, bool) or not isinstance(mask, int | np.integer) or mask <= 0:
                raise ClusterError("multicast-mask", mask, f"CTA {ctx.rank}: multicast mask {mask!r} names no CTA")
            if mask >> g.size:
                raise ClusterError("multicast-mask", mask, f"CTA {ctx.rank}: multicast mask {int(mask):#b} names CTA "
                                   f"{int(mask).bit_length() - 1}; the cluster has CTAs 0…{g.size - 1}")
            dests = [r for r in range(g.size) if mask >> r & 1]
            self.multicasts += 1
        tmap = self.tmaps[operand]
        fill = self._fill_of.get(ctx.rank, 0)
        image = self._box(operand, coords, dst)
        if int(dst) < 0 or int(dst) + image.size > self.smem[0].size:
            raise ClusterError("smem-range", dst, f"CTA {ctx.rank}: a {image.size}-byte box at shared offset {dst} "
                               f"runs past the {self.smem[0].size}-byte ring")
        stage = int(dst) // g.STAGE_BYTES
        for d in dests:
            self._check_overwrite(ctx, d, stage, fill, operand)
            lat = self.schedule.local_latency if d == ctx.rank else self.schedule.remote_latency
            self._seq += 1
            what = f"{operand} box at ({coords[0]}, {coords[1]}) from CTA {ctx.rank}"
            land = _Landing(self.time + lat, self._seq, d, int(dst), image, BarrierRef(d, bar.kind, bar.index),
                            fill, what, tma.tx_bytes(tmap))
            heapq.heappush(self._landings, land)
            self._inflight.setdefault((d, stage), []).append(land)

    def _box(self, operand: str, coords: tuple[int, int], dst: int) -> np.ndarray:
        """The shared image of one TMA box (cached: the producers' loads and the expected stages share them)."""
        key = (operand, int(coords[0]), int(coords[1]), int(dst))
        if key not in self._cache:
            tensor = self.A if operand == "A" else self.B
            self._cache[key] = tma.load_tile(self.tmaps[operand], tensor, key[1:3], smem_address=key[3])
        return self._cache[key]

    # -- hazards
    def _check_overwrite(self, ctx: ClusterContext, dest: int, stage: int, fill: int, operand: str) -> None:
        if fill == 0:
            return
        for c in range(self.geometry.consumers):
            done = self._released.get((dest, stage, c), -1)
            if done < fill - 1:
                who = "this CTA's" if dest == ctx.rank else f"CTA {dest}'s"
                raise ClusterError(
                    "overwrite-before-empty", (dest, stage),
                    f"t={self.time:g}: CTA {ctx.rank}'s producer loads {operand} into stage {stage} of CTA {dest} "
                    f"(fill {fill}) while {who} consumer {c} has not finished reading fill {fill - 1}: the EMPTY "
                    f"barrier CTA {ctx.rank} waited on did not wait for every consumer whose shared memory the copy "
                    "lands in")

    def _expected(self, rank: int, it: int) -> np.ndarray:
        key = ("stage", rank, it)
        if key not in self._cache:
            g = self.geometry
            pm, pn = self.pairs[it // self.steps]
            k = it % self.steps
            s = it % g.stages
            img = np.zeros(g.STAGE_BYTES, np.uint8)
            base = s * g.STAGE_BYTES
            img[:g.A_BYTES] = self._box("A", (k * g.BK, pm * g.size * g.BM + rank * g.BM), base)
            for h in range(g.size):
                off = g.A_BYTES + h * g.B_HALF
                img[off:off + g.B_HALF] = self._box("B", (k * g.BK, pn * g.BN + h * g.B_ROWS), base + off)
            self._cache[key] = img
        return self._cache[key]

    def _check_read(self, rank: int, c: int, it: int, count: bool = True) -> None:
        g = self.geometry
        s = it % g.stages
        pending = self._inflight.get((rank, s), [])
        if pending:
            raise ClusterError(
                "read-before-full", (rank, s),
                f"t={self.time:g}: consumer {c} of CTA {rank} reads stage {s} (tile {it // self.steps}, K step "
                f"{it % self.steps}) while {len(pending)} load(s) into it are still in flight ({pending[0].what}): "
                f"full[{s}] of CTA {rank} completed its phase before every byte landed; it must expect every byte "
                "that lands in this CTA's stage, its own loads and those other CTAs multicast into it")
        got = self.smem[rank][s * g.STAGE_BYTES:(s + 1) * g.STAGE_BYTES]
        want = self._expected(rank, it)
        if not np.array_equal(got, want):
            bad = np.flatnonzero(got != want)
            first = int(bad[0])
            part = ("A" if first < g.A_BYTES else f"B (bytes {g.A_BYTES + ((first - g.A_BYTES) // g.B_HALF) * g.B_HALF}"
                    f"…{g.A_BYTES + ((first - g.A_BYTES) // g.B_HALF + 1) * g.B_HALF - 1} of the stage)")
            raise ClusterError(
                "wrong-data", (rank, s),
                f"t={self.time:g}: consumer {c} of CTA {rank} reads stage {s} (tile {it // self.steps}, K step "
                f"{it % self.steps}) and finds the wrong bytes in {part}: {bad.size} of {g.STAGE_BYTES} bytes differ; "
                f"the stage holds A rows m0…m0+{g.BM - 1} at offset 0, then B rows n0…n0+{g.BN - 1}, the share of "
                f"CTA r (rows n0 + {g.B_ROWS}·r …) at offset A_BYTES + r·B_HALF")
        self.reads += count

    # -- the roles
    def _producer(self, rank: int, produce: Callable) -> Generator:
        g = self.geometry
        ctx = self.ctx[rank]
        yield ("sleep", self.schedule.producer_start[rank])
        it = 0
        for pm, pn in self.pairs:
            m0, n0 = pm * g.size * g.BM + rank * g.BM, pn * g.BN
            for k in range(self.steps):
                s = it % g.stages
                yield ("wait", ctx.empty[s], ((it // g.stages) & 1) ^ 1)
                self._fill_of[rank] = it // g.stages
                ctx.role = "producer"
                produce(ctx, s, k, m0, n0)
                yield ("sleep", 1.0)
                it += 1

    def _consumer(self, rank: int, c: int, release: Callable) -> Generator:
        g = self.geometry
        ctx = self.ctx[rank]
        it = 0
        for _ in self.pairs:
            for _k in range(self.steps):
                s = it % g.stages
                yield ("wait", ctx.full[s], (it // g.stages) & 1)
                self._check_read(rank, c, it)
                yield ("sleep", self.schedule.read_time[rank])
                self._check_read(rank, c, it, count=False)  # nothing overwrote it while the tensor cores read it
                self._released[(rank, s, c)] = it // g.stages
                ctx.role = f"consumer {c}"
                release(ctx, s)
                it += 1

    # -- the event loop
    def run(self, init: Callable, produce: Callable, release: Callable, max_events: int = 1_000_000) -> ClusterModel:
        """Initialise every CTA's barriers with ``init`` (then a cluster-wide sync), run producers and consumers
        to the end. Returns the model (``reads``, ``remote_arrivals``, ``multicasts``, ``time``)."""
        g = self.geometry
        for ctx in self.ctx:
            ctx.role = "init"
            init(ctx)
        for ref, b in self.bars.items():
            if not b.initialized:
                raise ClusterError("barrier-init", ref, f"{ref} was never initialised: init every full[s] and "
                                   "empty[s] of every CTA before the cluster barrier")
            b.on_complete.append(self._wake)
        for r in range(g.size):
            self.roles.append(_Role(f"CTA {r} producer", r, self._producer(r, produce)))
            for c in range(g.consumers):
                self.roles.append(_Role(f"CTA {r} consumer {c}", r, self._consumer(r, c, release)))
        events = 0
        while True:
            events += 1
            if events > max_events:
                raise ClusterError("runaway", events, "the simulation did not finish")
            runnable = [r for r in self.roles if not r.finished and r.waiting is None]
            t_role = min((r.ready_at for r in runnable), default=None)
            t_land = self._landings[0].time if self._landings else None
            if t_role is None and t_land is None:
                blocked = [r for r in self.roles if not r.finished]
                if blocked:
                    raise Deadlock(self._deadlock_message(blocked))
                return self
            if t_land is not None and (t_role is None or t_land <= t_role):
                self._land(heapq.heappop(self._landings))
                continue
            self.time = max(self.time, t_role)
            role = min(runnable, key=lambda r: (r.ready_at, self.roles.index(r)))
            self._step(role)

    def _land(self, land: _Landing) -> None:
        self.time = max(self.time, land.time)
        g = self.geometry
        stage = land.dst // g.STAGE_BYTES
        self.smem[land.dest][land.dst:land.dst + land.image.size] = land.image
        self._inflight[(land.dest, stage)].remove(land)
        bar = self.bars[land.bar]
        self.early_landings += bar.tx_count < land.nbytes
        bar.complete_tx(land.nbytes)

    def _wake(self, bar: MBarrier, phase: int) -> None:
        for r in self.roles:
            if r.waiting is not None and self.bars[r.waiting[0]] is bar and bar.test_wait(r.waiting[1]):
                r.waiting = None
                r.ready_at = self.time

    def _step(self, role: _Role) -> None:
        try:
            cmd = next(role.gen)
        except StopIteration:
            role.finished = True
            return
        if cmd[0] == "sleep":
            role.ready_at = self.time + cmd[1]
        else:
            _, ref, parity = cmd
            if self.bars[ref].test_wait(parity):
                role.ready_at = self.time
            else:
                role.waiting = (ref, parity, self.time)

    def _deadlock_message(self, blocked: list[_Role]) -> str:
        lines = [f"t={self.time:g}: deadlock: every unfinished role waits and no copy is in flight."]
        for r in blocked:
            ref, parity, since = r.waiting
            b = self.bars[ref]
            lines.append(f"  {r.name} waits since t={since:g} on {ref} for parity {parity}: phase {b.phase} has "
                         f"{b.pending_arrivals} of {b.expected} arrivals and {b.tx_count} bytes still missing")
        return "\n".join(lines)


def run_mainloop(A: np.ndarray, B: np.ndarray, pairs: list[tuple[int, int]], init: Callable, produce: Callable,
                 release: Callable, geometry: Geometry = LAB7,
                 schedules: tuple[Schedule, ...] = SCHEDULES) -> list[ClusterModel]:
    """Run one cluster's mainloop over ``pairs`` under every schedule; the first hazard raises (the message says
    which schedule). Returns the finished models."""
    out: list[ClusterModel] = []
    cache: dict = {}
    for sched in schedules:
        model = ClusterModel(A, B, pairs, geometry, sched, cache)
        try:
            out.append(model.run(init, produce, release))
        except (ClusterError, MBarrierError) as exc:
            exc.args = (f"{exc.args[0]}\n  (timing: {sched.name})",) + exc.args[1:]
            raise
    return out


class RecordingContext(ClusterContext):
    """A context that runs nothing and records every call (``calls``: (name, args) tuples), to see what a
    function would do on CTA ``rank``: graders compare it with the reference, lessons print it."""

    def __init__(self, rank: int, geometry: Geometry = LAB7):
        class _Stub:
            pass

        stub = _Stub()
        stub.geometry = geometry  # type: ignore[attr-defined]
        super().__init__(stub, rank)  # type: ignore[arg-type]
        self.calls: list[tuple] = []

    def init(self, bar: BarrierRef, count: int) -> None:
        self.calls.append(("init", bar, count))

    def arrive(self, bar: BarrierRef) -> None:
        self.calls.append(("arrive", bar))

    def arrive_expect_tx(self, bar: BarrierRef, nbytes: int) -> None:
        self.calls.append(("arrive_expect_tx", bar, nbytes))

    def tma_load(self, operand: str, dst: int, coords: tuple[int, int], bar: BarrierRef,
                 mask: int | None = None) -> None:
        self.calls.append(("tma_load", operand, dst, tuple(coords), bar, mask))


def record(fn: Callable, rank: int, *args: Any, geometry: Geometry = LAB7) -> list[tuple]:
    """The calls ``fn(ctx, *args)`` makes on CTA ``rank`` (see :class:`RecordingContext`)."""
    ctx = RecordingContext(rank, geometry)
    fn(ctx, *args)
    return ctx.calls


# ------------------------------------------------------------------------------------------- the reference
def reference_init(ctx: ClusterContext) -> None:
    """FULL: one arrival (the local producer's arrive.expect_tx); EMPTY: every consumer of every CTA."""
    for s in range(ctx.stages):
        ctx.init(ctx.full[s], 1)
        ctx.init(ctx.empty[s], ctx.consumers * ctx.size)


def reference_produce(ctx: ClusterContext, s: int, k: int, m0: int, n0: int) -> None:
    """Expect the whole stage; load this CTA's A; load its share of B and multicast it to every CTA."""
    base = s * ctx.STAGE_BYTES
    ctx.arrive_expect_tx(ctx.full[s], ctx.STAGE_BYTES)
    ctx.tma_load("A", base, (k * ctx.BK, m0), ctx.full[s])
    ctx.tma_load("B", base + ctx.A_BYTES + ctx.rank * ctx.B_HALF, (k * ctx.BK, n0 + ctx.rank * ctx.B_ROWS), ctx.full[s],
                 mask=(1 << ctx.size) - 1)


def reference_release(ctx: ClusterContext, s: int) -> None:
    """A consumer warpgroup is done with stage s: arrive on empty[s] of every CTA (its data came from all)."""
    for cta in range(ctx.size):
        ctx.arrive(ctx.mapa(ctx.empty[s], cta))
