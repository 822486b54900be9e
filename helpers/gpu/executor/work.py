"""Work accounting: which block did which part of the work. For every wgmma, the block and warpgroup that issued it
and the rows of A and B and the K slice it multiplied (read back through the TMA loads that filled the shared memory
its descriptors point at); for every TMA store and every ordinary global store, the block that wrote it and where;
and, as each block exits, where each of its mbarriers stood (a stage released more or fewer times than it was used
leaves its barrier part-way through a phase).
A grader then checks that every output tile was computed once, by the block its schedule gives it, which no check of
C can see (a tile computed twice gives the right C).

The machine keeps one :class:`WorkLog` (``machine.work``, made on first use); ``RunResult.work`` exposes it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["WorkLog", "Block", "Box", "Mma", "Store", "BarrierEnd", "SyncOp", "log_of"]


@dataclass(frozen=True)
class Block:
    """A thread block: its index in the grid and its rank in its cluster (0 without clusters)."""

    ctaid: tuple[int, int, int]
    rank: int = 0

    def __str__(self) -> str:
        x, y, z = self.ctaid
        return f"block ({x},{y}{f',{z}' if z else ''})"


@dataclass(frozen=True)
class Box:
    """One box of a tensor a TMA copy moved: the tensor (its global address and dims, innermost first) and the box's
    coordinates and size (innermost first, like the PTX)."""

    address: int
    dims: tuple[int, ...]
    coords: tuple[int, ...]
    size: tuple[int, ...]


@dataclass(frozen=True)
class Mma:
    """One wgmma as a warpgroup issued it: 64 rows of A from ``a_row``, ``n`` rows of B from ``b_row`` (both K-major,
    so a row of B is a column of C), K from ``k`` to ``k + 16``. ``a`` / ``b``: the tensors (global addresses) the
    operands were loaded from; -1 where the shared memory was not filled by a TMA load."""

    block: Block
    warpgroup: int
    a: int
    a_row: int
    b: int
    b_row: int
    k: int
    n: int

    @property
    def key(self) -> tuple[int, int, int, int, int, int]:
        """What was computed, whoever computed it."""
        return (self.a, self.a_row, self.b, self.b_row, self.k, self.n)


@dataclass(frozen=True)
class Store:
    """A TMA store of one box of a tensor, by a block."""

    block: Block
    box: Box


@dataclass(frozen=True)
class BarrierEnd:
    """An mbarrier as its block exited: its name (``empty[2]``), arrival count, arrivals still pending in the current
    phase, and phases completed."""

    block: Block
    name: str
    expected: int
    pending: int
    phases: int

    @property
    def between_phases(self) -> bool:
        """No arrival of an unfinished phase: every phase begun was completed."""
        return self.pending == self.expected


@dataclass(frozen=True)
class SyncOp:
    """One warp's wait that got through, or its arrival, on an mbarrier, in the order they happened.

    ``block`` / ``warp``: the block and its warp that waited or arrived; ``owner``: the block the barrier lives in
    (another block of the cluster for a remote arrival); ``barrier``: its name (``full[2]``, ``order[3]``);
    ``parity``: the parity a wait named (-1: an arrival, or a wait on a state token); ``phase``: for a wait, the
    phase it got through on (the last one completed: -1 on a fresh barrier); for an arrival, the phase it arrived
    in; ``lanes``: the warp's arrivals (an arrival), or the lanes that got through (a wait)."""

    block: Block
    warp: int
    kind: str
    owner: Block
    barrier: str
    parity: int
    phase: int
    lanes: int


@dataclass
class WorkLog:
    """Every wgmma and store of one launch, with the block that issued it."""

    mmas: list[Mma] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)
    global_stores: dict[Block, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))
    barriers: list[BarrierEnd] = field(default_factory=list)
    syncs: list[SyncOp] = field(default_factory=list)
    _boxes: dict[tuple, dict[int, tuple[Box, int, int, int]]] = field(default_factory=dict)

    # ------------------------------------------------------------------ recording (the executor's hooks)
    @staticmethod
    def block_of(c: Any) -> Block:
        return Block(tuple(int(v) for v in c.ctaid), int(getattr(c, "rank", 0)))

    def loaded(self, targets: list[Any], doff: int, tmap: Any, coords: list[int]) -> None:
        """A TMA load (or multicast) of ``tmap``'s box at ``coords`` into shared offset ``doff`` of each target."""
        from helpers.hopper import tma

        box = Box(int(tmap.global_address), tuple(int(v) for v in tmap.global_dim), tuple(int(v) for v in coords),
                  tuple(int(v) for v in tmap.box_dim))
        entry = (box, tma.smem_footprint(tmap), tma.row_pitch(tmap), int(tmap.element_size))
        for cta in targets:
            self._boxes.setdefault((cta.slot, tuple(cta.ctaid)), {})[int(doff)] = entry

    def _operand(self, c: Any, start: int) -> tuple[int, int, int]:
        """(tensor address, first row, first K element) of the operand at shared address ``start`` of ``c``."""
        for doff, (box, size, pitch, elem) in self._boxes.get((c.slot, tuple(c.ctaid)), {}).items():
            if doff <= start < doff + size:
                off = start - doff
                row = box.coords[1] if len(box.coords) > 1 else 0
                return box.address, row + off // pitch, box.coords[0] + (off % pitch) // elem
        return -1, -1, -1

    def mma(self, c: Any, warpgroup: int, desc_a: int, desc_b: int, n: int) -> None:
        """A wgmma issued by warpgroup ``warpgroup`` of ``c`` with these descriptors."""
        from helpers.hopper import wgmma

        sa = wgmma.decode_descriptor(desc_a).start_address
        sb = wgmma.decode_descriptor(desc_b).start_address
        a, a_row, k = self._operand(c, sa)
        b, b_row, _ = self._operand(c, sb)
        self.mmas.append(Mma(self.block_of(c), int(warpgroup), a, a_row, b, b_row, k, int(n)))

    def stored(self, c: Any, tmap: Any, coords: list[int]) -> None:
        """A TMA store of ``tmap``'s box at ``coords`` by ``c``."""
        box = Box(int(tmap.global_address), tuple(int(v) for v in tmap.global_dim), tuple(int(v) for v in coords),
                  tuple(int(v) for v in tmap.box_dim))
        self.stores.append(Store(self.block_of(c), box))

    def exited(self, c: Any) -> None:
        """Block ``c`` exits: where each of its initialised mbarriers stands."""
        for bar in c.barriers.values():
            if bar.initialized:
                self.barriers.append(BarrierEnd(self.block_of(c), bar.name, int(bar.expected),
                                                int(bar.pending_arrivals), int(bar.phase)))

    def waited(self, c: Any, warps: Any, bar: Any, parity: int) -> None:
        """Warps ``warps`` (warp in the block, one entry per lane that got through) of ``c`` got through a wait on
        ``bar`` naming ``parity``."""
        who, owner = self.block_of(c), self.block_of(bar.cta) if getattr(bar, "cta", None) is not None else None
        ws, lanes = np.unique(np.asarray(warps, np.int64), return_counts=True)
        for w, k in zip(ws.tolist(), lanes.tolist(), strict=True):
            self.syncs.append(SyncOp(who, int(w), "wait", owner or who, bar.name, int(parity), int(bar.phase) - 1,
                                     int(k)))

    def arrived(self, c: Any, warps: Any, bar: Any, counts: Any = None) -> None:
        """Warps ``warps`` (warp in the block, one entry per arriving lane) of ``c`` arrive on ``bar`` (``counts``:
        each lane's arrival count, else 1), before the arrival is counted."""
        who, owner = self.block_of(c), self.block_of(bar.cta) if getattr(bar, "cta", None) is not None else None
        warps = np.asarray(warps, np.int64)
        each = np.ones(len(warps), np.int64) if counts is None else np.asarray(counts, np.int64)
        for w in np.unique(warps).tolist():
            self.syncs.append(SyncOp(who, int(w), "arrive", owner or who, bar.name, -1, int(bar.phase),
                                     int(each[warps == w].sum())))

    def stored_global(self, c: Any, addr: np.ndarray) -> None:
        """Ordinary global stores by ``c`` at these byte addresses."""
        self.global_stores[self.block_of(c)].append(np.array(addr, np.uint64, copy=True).ravel())

    # ------------------------------------------------------------------ reading
    def repeated_mmas(self) -> list[tuple[tuple, list[Block]]]:
        """Products computed more than once (the same rows of A and B and K slice): (key, the blocks that issued
        each), in the order first seen."""
        by: dict[tuple, list[Block]] = {}
        for m in self.mmas:
            if m.a >= 0 and m.b >= 0:
                by.setdefault(m.key, []).append(m.block)
        return [(k, v) for k, v in by.items() if len(v) > 1]

    def stores_to(self, address: int) -> list[Store]:
        """The TMA stores into the tensor at ``address``."""
        return [s for s in self.stores if s.box.address == address]

    def store_counts(self, address: int) -> Counter:
        """How often each box (coords) of the tensor at ``address`` was stored."""
        return Counter(s.box.coords for s in self.stores_to(address))

    def global_written_by(self, lo: int, hi: int) -> dict[Block, np.ndarray]:
        """Per block, the byte addresses in [lo, hi) it wrote with ordinary stores."""
        out = {}
        for blk, parts in self.global_stores.items():
            a = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
            a = a[(a >= np.uint64(lo)) & (a < np.uint64(hi))]
            if a.size:
                out[blk] = np.unique(a)
        return out


def log_of(mach: Any) -> WorkLog:
    """The machine's work log (made on first use)."""
    log = getattr(mach, "work", None)
    if log is None:
        log = WorkLog()
        mach.work = log
    return log
