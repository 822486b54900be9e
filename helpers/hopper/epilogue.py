"""The epilogue: accumulator fragments → bf16 → 128B-swizzled shared sub-tiles → TMA store, and the ordering rules
that make it safe.

Data (bit for bit what the Lab 5 kernel does):

- :func:`to_bf16_bits` — fp32 → bf16 with round-to-nearest-even (``cvt.rn.bf16x2.f32``), NaN → 0x7FFF;
  :func:`truncate_bf16_bits` is the tempting shortcut (drop the low 16 bits) for comparison;
- :func:`subtile_offset` — where element (row, col) of a 64×64 bf16 sub-tile sits in a 1024-aligned buffer that a
  128B-swizzled TMA store reads: row·128 + ((col/8) XOR (row mod 8))·16 + (col mod 8)·2;
- :func:`stage_subtile` — the 8192-byte shared image a warpgroup writes from its 32 registers of one sub-tile
  (the wgmma fragment map ``wgmma.fragment_maps(64)``: registers 32·s … 32·s + 31 hold 64-column sub-tile s;
  two bf16 values per 4-byte store);
- :func:`store_subtile` — that image through an emulated TMA store into a bf16 C (clipped at the edges);
- :func:`warp_store_offsets` / :func:`stmatrix_offsets` — the shared addresses one warp's store instruction
  touches (plain ``st.shared.b32`` or ``stmatrix.x4``), for the bank-conflict picture.

Ordering (:func:`run`): a warpgroup's epilogue as a list of operations per sub-tile — ``("write", buf)``,
``("fence",)``, ``("bar",)``, ``("store", buf)``, ``("commit",)``, ``("wait_read", n)``, ``("wait", n)`` — run
against the rules of the hardware, with the TMA engine reading a buffer as *late* as the rules allow (so a race
always shows). Breaking a rule raises :class:`EpilogueError` (``rule`` names it) in strict mode; otherwise the
run goes on and the C it produces shows what the race does to the output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import wgmma
from .tensormap import RuleError

__all__ = [
    "SUB",
    "SUB_BYTES",
    "to_bf16_bits",
    "truncate_bf16_bits",
    "bf16_bits_to_f32",
    "subtile_offset",
    "stage_subtile",
    "subtile_from_image",
    "c_tensor_map",
    "store_subtile",
    "warp_store_offsets",
    "stmatrix_offsets",
    "EpilogueError",
    "OPS",
    "StoreRecord",
    "EpilogueRun",
    "run",
    "LAB5_OPS",
    "LAB6_OPS",
]

SUB = 64  # a sub-tile is 64×64
SUB_BYTES = SUB * SUB * 2  # bf16: 8 KiB


# ------------------------------------------------------------------------------------------- rounding
def to_bf16_bits(x: Any) -> np.ndarray:
    """fp32 → bf16 bits (uint16), rounding to the nearest, ties to even, as ``cvt.rn.bf16x2.f32`` does.

    Overflow rounds to ±inf (bf16 has fp32's exponent range, so only values within half a bf16 ulp of the fp32
    maximum do), subnormals round like normal numbers, and every NaN becomes the canonical 0x7FFF.
    """
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FFF), rounded).astype(np.uint16)


def truncate_bf16_bits(x: Any) -> np.ndarray:
    """fp32 → bf16 by dropping the low 16 bits (rounding toward zero): the shortcut, not what the kernel does."""
    return (np.asarray(x, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits: Any) -> np.ndarray:
    """bf16 bits (uint16) → the fp32 values they stand for (exact)."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------------------------------- layout
def subtile_offset(row: Any, col: Any) -> Any:
    """Byte offset of element (row, col) of a 64×64 bf16 sub-tile in a 1024-aligned buffer with the 128B swizzle:
    row ``r`` is 128 bytes at ``r·128``; its 16-byte chunk ``c`` (columns 8c…8c+7) sits at chunk ``c XOR (r mod 8)``."""
    row = np.asarray(row)
    col = np.asarray(col)
    out = row * 128 + (((col // 8) ^ (row % 8)) * 16) + (col % 8) * 2
    return int(out) if out.ndim == 0 else out


def stage_subtile(frags: Any, *, swizzle: bool = True, rounding: str = "nearest") -> np.ndarray:
    """The 8192-byte shared image a warpgroup writes for one sub-tile: ``frags`` is (128, 32) fp32 (thread ×
    register), each value rounded to bf16 and placed at :func:`subtile_offset` of its (row, col).

    ``swizzle=False`` places rows plainly (the mistake); ``rounding="truncate"`` drops the low bits (the other)."""
    frags = np.asarray(frags, dtype=np.float32)
    if frags.shape != (128, 32):
        raise ValueError(f"one sub-tile's fragments are (128 threads, 32 registers), not {frags.shape}")
    r, c = wgmma.fragment_maps(SUB)
    bits = to_bf16_bits(frags) if rounding == "nearest" else truncate_bf16_bits(frags)
    off = subtile_offset(r, c) if swizzle else r * 128 + c * 2
    img = np.zeros(SUB_BYTES, np.uint8)
    img[off] = (bits & 0xFF).astype(np.uint8)
    img[off + 1] = (bits >> 8).astype(np.uint8)
    return img


def subtile_from_image(image: Any) -> np.ndarray:
    """The 64×64 bf16 bits (uint16) a 128B-swizzled sub-tile image holds (inverse of the placement)."""
    img = np.asarray(image, dtype=np.uint8).reshape(-1)
    r, c = np.meshgrid(np.arange(SUB), np.arange(SUB), indexing="ij")
    off = subtile_offset(r, c)
    return (img[off].astype(np.uint16) | (img[off + 1].astype(np.uint16) << 8)).astype(np.uint16)


def c_tensor_map(shape: tuple[int, int]) -> Any:
    """The tensor map the kernel stores C through: bf16, 64×64 box, 128B swizzle."""
    from . import tensormap

    return tensormap.for_matrix(tuple(shape), tensormap.DataType.BFLOAT16, SUB, SUB, tensormap.Swizzle.B128)


def store_subtile(image: Any, C: np.ndarray, row0: int, col0: int) -> None:
    """An emulated TMA store of a sub-tile image into the bf16 matrix ``C`` at (row0, col0), clipped at the edges."""
    from . import tma

    tma.store_tile(c_tensor_map(C.shape), np.asarray(image, dtype=np.uint8), C, (col0, row0))


def warp_store_offsets(warp: int, j: int, *, swizzle: bool = True) -> np.ndarray:
    """Byte offsets the 32 lanes of ``warp`` write with one ``st.shared.b32`` of registers ``j, j+1`` (j even):
    a bf16 pair per lane."""
    if j % 2:
        raise ValueError("a 4-byte store holds registers j and j+1: j is even")
    rows, cols = wgmma.fragment_maps(SUB)
    r, c = rows[32 * warp:32 * warp + 32, j], cols[32 * warp:32 * warp + 32, j]
    return subtile_offset(r, c) if swizzle else r * 128 + c * 2


def stmatrix_offsets(warp: int, i: int, *, swizzle: bool = True) -> np.ndarray:
    """Row addresses the 32 lanes of ``warp`` give one ``stmatrix.sync.aligned.m8n8.x4.shared.b16`` that stores
    columns 16i…16i+15 of the warp's 16 rows: lane l names row l mod 8 of 8×8 matrix l/8 (matrices: rows 0–7 and
    8–15 of the first 8 columns, then of the next 8); each address is a 16-byte row."""
    lane = np.arange(32)
    q = lane // 8
    row = 16 * warp + (q % 2) * 8 + lane % 8
    chunk = 2 * i + q // 2
    return row * 128 + ((chunk ^ (row % 8)) if swizzle else chunk) * 16


# ------------------------------------------------------------------------------------------- ordering
class EpilogueError(RuleError):
    """A rule of the epilogue broken (``rule``: unfenced-store, fence-after-barrier, unsynced-store,
    overwrite-in-flight, exit-in-flight, store-unwritten, bad-op)."""


#: the operations of :func:`run` and what each stands for
OPS = {
    "write": "every thread writes its registers of this sub-tile into buffer `buf` (st.shared)",
    "fence": "every thread: fence.proxy.async.shared::cta",
    "bar": "the warpgroup meets at its named barrier (bar.sync id, 128)",
    "store": "thread 0: cp.async.bulk.tensor store of buffer `buf` to this sub-tile's place in C",
    "commit": "thread 0: cp.async.bulk.commit_group",
    "wait_read": "thread 0: cp.async.bulk.wait_group.read n",
    "wait": "thread 0: cp.async.bulk.wait_group n",
    "mainloop": "the next tile's mainloop (touches no C buffer)",
}


@dataclass
class StoreRecord:
    """One TMA store: which buffer, which sub-tile it was meant to store, where in the op list."""

    tile: int
    sub: int
    buf: int
    op: int
    group: int | None = None
    retired_at: int | None = None  # op index of the wait that retired its read
    safe_at: int | None = None  # op index of the barrier after that wait (every thread may then write)
    data: np.ndarray | None = field(default=None, repr=False)  # the sub-tile content it read


@dataclass
class _Buffer:
    content: Any = None  # (tile, sub) written last by the generic proxy
    data: np.ndarray | None = None
    fenced: bool = True
    bar_before_fence: bool = False
    visible: Any = None  # (tile, sub) the async proxy sees
    visible_data: np.ndarray | None = None


@dataclass
class EpilogueRun:
    """What :func:`run` found: the ops run (with their tile and sub-tile), every store, every rule broken (in
    order), how many stores were in flight right after each store was issued, how many when each next mainloop
    started, and the C produced (when data was given)."""

    ops: list[tuple[int, int, tuple]]
    stores: list[StoreRecord]
    violations: list[EpilogueError]
    in_flight_after_store: list[int]
    in_flight_at_mainloop: list[int]
    C: np.ndarray | None = None

    @property
    def max_in_flight(self) -> int:
        return max(self.in_flight_after_store, default=0)

    @property
    def ok(self) -> bool:
        return not self.violations


def _norm(op: Any) -> tuple:
    if isinstance(op, str):
        op = (op,)
    if not isinstance(op, tuple | list) or not op or op[0] not in OPS:
        raise EpilogueError("bad-op", op, f"{op!r} is not an epilogue operation; use one of "
                            + ", ".join(f"({k!r}, …)" if k in ("write", "store", "wait_read", "wait") else f"({k!r},)"
                                        for k in OPS))
    name = op[0]
    if name in ("write", "store", "wait_read", "wait"):
        if len(op) != 2 or isinstance(op[1], bool) or not isinstance(op[1], int | np.integer):
            raise EpilogueError("bad-op", op, f"({name!r}, n) takes one integer: {op!r}")
        return (name, int(op[1]))
    if len(op) != 1:
        raise EpilogueError("bad-op", op, f"({name!r},) takes no argument: {op!r}")
    return (name,)


def run(ops_for: Callable[[int], Sequence[Any]] | Sequence[Sequence[Any]], subtiles: int, buffers: int, *,
        tiles: int = 1, final: Sequence[Any] = (("wait", 0),), data: Sequence[np.ndarray] | None = None,
        strict: bool = True) -> EpilogueRun:
    """Run a warpgroup's epilogue: ``ops_for(sub)`` gives the operations of sub-tile ``sub`` (0 … subtiles-1), run
    for each of ``tiles`` tiles in turn (a ``("mainloop",)`` between tiles), then ``final`` (the kernel's exit).

    ``data[sub]`` (optional, one 8192-byte image per sub-tile, the same for every tile) makes the run produce the
    64 × 64·subtiles bf16 tile of C that the stores write, reading each buffer as late as the rules allow.
    In strict mode the first broken rule raises :class:`EpilogueError`; otherwise all are listed in the result.
    """
    if buffers < 1:
        raise EpilogueError("bad-op", buffers, "the epilogue needs at least one shared buffer")
    seq: list[tuple[int, int, tuple]] = []
    for tile in range(tiles):
        if tile:
            seq.append((tile, -1, ("mainloop",)))
        for sub in range(subtiles):
            got = ops_for(sub) if callable(ops_for) else ops_for[sub]
            seq.extend((tile, sub, _norm(op)) for op in got)
    seq.extend((tiles - 1, -1, _norm(op)) for op in final)

    bufs = [_Buffer() for _ in range(buffers)]
    stores: list[StoreRecord] = []
    groups: list[list[StoreRecord]] = []
    uncommitted: list[StoreRecord] = []
    violations: list[EpilogueError] = []
    after_store: list[int] = []
    at_mainloop: list[int] = []
    C = np.full((SUB, SUB * subtiles), 0x7FFF, np.uint16) if data is not None else None  # NaN: never written

    def broke(rule: str, value: Any, msg: str) -> None:
        err = EpilogueError(rule, value, msg)
        if strict:
            raise err
        violations.append(err)

    def in_flight() -> list[StoreRecord]:
        return [s for s in stores if s.retired_at is None]

    def resolve(s: StoreRecord) -> None:
        """The async proxy reads the buffer now (as late as possible): whatever it sees."""
        if s.data is None:
            s.data = bufs[s.buf].visible_data
            if C is not None and s.data is not None:
                C[:, s.sub * SUB:(s.sub + 1) * SUB] = subtile_from_image(s.data)

    def check_buffer(b: int, what: str, i: int) -> None:
        if not 0 <= b < buffers:
            raise EpilogueError("bad-op", b, f"{what} names buffer {b}; there are buffers 0…{buffers - 1}")

    for i, (tile, sub, op) in enumerate(seq):
        name = op[0]
        where = f"tile {tile}, sub-tile {sub}" if sub >= 0 else ("the next tile's mainloop" if name == "mainloop"
                                                                 else "after the last sub-tile")
        if name == "write":
            b = op[1]
            check_buffer(b, f"({where}) write", i)
            for s in stores:
                if s.buf != b or (s.safe_at is not None):
                    continue
                if s.retired_at is None:
                    why = ("it was never committed to a bulk group, so no wait_group covers it"
                           if s.group is None else "no cp.async.bulk.wait_group.read has waited for its group")
                    broke("overwrite-in-flight", (tile, sub, b),
                          f"{where}: the threads write buffer {b} while the TMA store of tile {s.tile}, sub-tile "
                          f"{s.sub} may still be reading it ({why}): before reusing a buffer, thread 0 waits with "
                          f"cp.async.bulk.wait_group.read until at most {buffers - 1} group(s) are pending, then the "
                          "warpgroup meets at the barrier")
                else:
                    broke("overwrite-in-flight", (tile, sub, b),
                          f"{where}: the threads write buffer {b} after thread 0's wait_group.read retired the store "
                          f"of tile {s.tile}, sub-tile {s.sub}, but without meeting at a barrier after that wait: the "
                          "other threads do not know the wait is over; put the named barrier between the wait and "
                          "the writes")
                s.safe_at = i  # reported once; its late read will see the new bytes
            buf = bufs[b]
            buf.content = (tile, sub)
            buf.data = None if data is None else np.asarray(data[sub], np.uint8)
            buf.fenced = False
            buf.bar_before_fence = False
        elif name == "fence":
            for buf in bufs:
                buf.fenced = True
        elif name == "bar":
            for buf in bufs:
                if buf.fenced:
                    buf.visible, buf.visible_data = buf.content, buf.data
                elif buf.content is not None:
                    buf.bar_before_fence = True
            for s in stores:
                if s.retired_at is not None and s.safe_at is None:
                    s.safe_at = i
        elif name == "store":
            b = op[1]
            check_buffer(b, f"({where}) store", i)
            buf = bufs[b]
            if buf.content != (tile, sub):
                have = "nothing" if buf.content is None else f"tile {buf.content[0]}, sub-tile {buf.content[1]}"
                broke("store-unwritten", (tile, sub, b),
                      f"{where}: thread 0 stores buffer {b} but this sub-tile was not written there (it holds {have}): "
                      "store the buffer the sub-tile was written to")
            elif not buf.fenced:
                broke("unfenced-store", (tile, sub, b),
                      f"{where}: thread 0 hands buffer {b} to the TMA but the threads' st.shared writes were not "
                      "followed by fence.proxy.async.shared::cta: the TMA (async proxy) may read the old bytes; every "
                      "writing thread fences after its writes, then the warpgroup meets at the barrier, then the store")
            elif buf.visible != buf.content:
                if buf.bar_before_fence:
                    broke("fence-after-barrier", (tile, sub, b),
                          f"{where}: the fence comes after the barrier, so the other threads' fences are not ordered "
                          "before thread 0's store: write, fence.proxy.async, then the barrier, then the store")
                else:
                    broke("unsynced-store", (tile, sub, b),
                          f"{where}: thread 0 stores buffer {b} without a barrier after the other threads' writes and "
                          "fences: their bytes may not be there yet; the warpgroup meets at the named barrier before "
                          "the store")
            rec = StoreRecord(tile, sub, b, i)
            stores.append(rec)
            uncommitted.append(rec)
            after_store.append(len(in_flight()))
        elif name == "commit":
            if uncommitted:
                for s in uncommitted:
                    s.group = len(groups)
                groups.append(list(uncommitted))
                uncommitted.clear()
        elif name in ("wait_read", "wait"):
            n = op[1]
            if n < 0 or n > 63:
                raise EpilogueError("bad-op", n, f"cp.async.bulk.wait_group{'.read' if name == 'wait_read' else ''} "
                                    f"takes 0 … 63, not {n}")
            keep = groups[-n:] if n else []
            for g in groups:
                if g in keep:
                    continue
                for s in g:
                    if s.retired_at is None:
                        resolve(s)
                        s.retired_at = i
        elif name == "mainloop":
            at_mainloop.append(len(in_flight()))
    left = in_flight()
    if left:
        s = left[0]
        why = "it was never committed to a group" if s.group is None else "no final wait_group covers it"
        broke("exit-in-flight", (s.tile, s.sub),
              f"the warpgroup ends while the TMA store of tile {s.tile}, sub-tile {s.sub} may still read shared memory "
              f"({why}): the block's shared memory must outlive the stores' reads")
        for s in left:
            resolve(s)
    return EpilogueRun(seq, stores, violations, after_store, at_mainloop, C)


def LAB5_OPS(sub: int, buffers: int = 2) -> list[tuple]:
    """Lab 5's loop body: reuse a buffer only after its last store has read it; write, fence, meet, store, commit."""
    ops: list[tuple] = []
    if sub >= buffers:
        ops += [("wait_read", buffers - 1), ("bar",)]
    return ops + [("write", sub % buffers), ("fence",), ("bar",), ("store", sub % buffers), ("commit",)]


def LAB6_OPS(sub: int, buffers: int = 2) -> list[tuple]:
    """Lab 6's loop body: the stores of the previous tile may still be in flight, so every sub-tile waits."""
    return [("wait_read", buffers - 1), ("bar",), ("write", sub % buffers), ("fence",), ("bar",),
            ("store", sub % buffers), ("commit",)]
