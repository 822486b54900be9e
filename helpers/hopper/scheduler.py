"""Tile schedulers: which output tile a persistent block (or cluster) takes, in which order, and what it costs.

A GEMM's C is cut into tiles (here: any unit of work, e.g. Lab 6's 128×256 tiles, or Lab 7's 256×256 "pairs" of a
2-block cluster). A *raster order* lists the tiles in the order workers take them; a *persistent* kernel launches
one worker per resident block or cluster and worker ``w`` takes tiles ``w, w + W, w + 2W, …`` of that list. Tiles
``i·W … (i+1)·W - 1`` run at about the same time: one *wave*. This module computes the orders, the schedule, the
waves and the L2 footprint of a wave (the bytes of A and B the tiles of a wave read), as the lessons and graders use
them.

Orders (``(T, 2)`` int arrays of ``(tile_m, tile_n)`` in visit order):

- :func:`row_major` — along N first (the order of a plain 2-D grid's block indices);
- :func:`column_major` — along M first;
- :func:`grouped` — groups of ``group`` tile-rows walked column by column (Lab 6's ``tile_coords``, Lab 7's
  ``pair_coords``; also known as "swizzled" rasterization in CUTLASS and Triton);
- :func:`hilbert` — a Hilbert curve over the grid (a space-filling curve: each step moves to a neighbour).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import parts

__all__ = [
    "H100_SMS",
    "tile_counts",
    "row_major",
    "column_major",
    "grouped",
    "grouped_coords",
    "hilbert",
    "ORDERS",
    "order",
    "permutation_problems",
    "persistent_schedule",
    "Waves",
    "waves",
    "Footprint",
    "wave_footprint",
    "footprints",
]

#: streaming multiprocessors of an H100 SXM (other parts: ``helpers.hopper.parts``)
H100_SMS = parts.PROFILES["h100-sxm"].sms


def tile_counts(M: int, N: int, BM: int, BN: int) -> tuple[int, int]:
    """Tiles of C along M and along N (a partial last tile still counts)."""
    for name, v in (("M", M), ("N", N), ("BM", BM), ("BN", BN)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return -(-M // BM), -(-N // BN)


def _check_grid(tiles_m: int, tiles_n: int) -> None:
    if tiles_m < 1 or tiles_n < 1:
        raise ValueError(f"a grid of {tiles_m}×{tiles_n} tiles has nothing to schedule")


def row_major(tiles_m: int, tiles_n: int) -> np.ndarray:
    """Tile ``p`` is ``(p // tiles_n, p % tiles_n)``: along a row of C first."""
    _check_grid(tiles_m, tiles_n)
    p = np.arange(tiles_m * tiles_n)
    return np.stack([p // tiles_n, p % tiles_n], axis=1)


def column_major(tiles_m: int, tiles_n: int) -> np.ndarray:
    """Tile ``p`` is ``(p % tiles_m, p // tiles_m)``: down a column of C first."""
    _check_grid(tiles_m, tiles_n)
    p = np.arange(tiles_m * tiles_n)
    return np.stack([p % tiles_m, p // tiles_m], axis=1)


def grouped_coords(p: int, tiles_m: int, tiles_n: int, group: int) -> tuple[int, int]:
    """Tile ``p`` of the grouped order, exactly as Lab 6's ``tile_coords`` (Lab 7's ``pair_coords``) computes it.

    The tile-rows are cut into groups of ``group`` rows (the last group may be shorter); each group is walked
    column by column, top to bottom inside a column, before the next group starts.
    """
    if group < 1:
        raise ValueError(f"group = {group}: a group holds at least one row of tiles")
    per_group = group * tiles_n
    first = (p // per_group) * group
    rows = min(tiles_m - first, group)
    in_group = p % per_group
    return first + in_group % rows, in_group // rows


def grouped(tiles_m: int, tiles_n: int, group: int = 8) -> np.ndarray:
    """The grouped order (see :func:`grouped_coords`) of every tile."""
    _check_grid(tiles_m, tiles_n)
    if group < 1:
        raise ValueError(f"group = {group}: a group holds at least one row of tiles")
    p = np.arange(tiles_m * tiles_n)
    per_group = group * tiles_n
    first = (p // per_group) * group
    rows = np.minimum(tiles_m - first, group)
    in_group = p % per_group
    return np.stack([first + in_group % rows, in_group // rows], axis=1)


def _hilbert_d2xy(order: int, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Point ``d`` of the Hilbert curve filling a 2**order square (the classic iterative construction)."""
    x = np.zeros_like(d)
    y = np.zeros_like(d)
    t = d.copy()
    s = 1
    while s < (1 << order):
        rx = 1 & (t // 2)
        ry = 1 & (t ^ rx)
        flip = (ry == 0) & (rx == 1)
        x = np.where(flip, s - 1 - x, x)
        y = np.where(flip, s - 1 - y, y)
        swap = ry == 0
        x, y = np.where(swap, y, x), np.where(swap, x, y)
        x = x + s * rx
        y = y + s * ry
        t = t // 4
        s *= 2
    return x, y


def hilbert(tiles_m: int, tiles_n: int) -> np.ndarray:
    """A Hilbert curve over the smallest power-of-two square holding the grid, keeping the tiles inside it.

    Consecutive tiles are neighbours wherever the square and the grid agree, so any run of tiles along the
    curve covers a compact patch of C: few rows of A and few columns of B per wave.
    """
    _check_grid(tiles_m, tiles_n)
    order_ = max(0, math.ceil(math.log2(max(tiles_m, tiles_n))))
    d = np.arange(1 << (2 * order_))
    x, y = _hilbert_d2xy(order_, d)
    keep = (x < tiles_m) & (y < tiles_n)
    return np.stack([x[keep], y[keep]], axis=1)


#: the raster orders by name; each takes (tiles_m, tiles_n) and, for "grouped", the group size
ORDERS: dict[str, Callable[..., np.ndarray]] = {
    "row-major": row_major,
    "column-major": column_major,
    "grouped": grouped,
    "hilbert": hilbert,
}


def order(name: str, tiles_m: int, tiles_n: int, group: int = 8) -> np.ndarray:
    """The raster order ``name`` (one of :data:`ORDERS`)."""
    if name not in ORDERS:
        raise ValueError(f"unknown raster order {name!r}; pick one of {list(ORDERS)}")
    if name == "grouped":
        return grouped(tiles_m, tiles_n, group)
    return ORDERS[name](tiles_m, tiles_n)


def permutation_problems(visits: np.ndarray, tiles_m: int, tiles_n: int) -> list[str]:
    """What keeps ``visits`` ((T, 2) tile coordinates) from visiting every tile exactly once, in words (empty: it
    is a permutation of the grid)."""
    visits = np.asarray(visits)
    problems: list[str] = []
    if visits.ndim != 2 or visits.shape[1] != 2:
        return [f"expected one (tile_m, tile_n) pair per visit, got an array of shape {visits.shape}"]
    outside = [(int(a), int(b)) for a, b in visits if not (0 <= a < tiles_m and 0 <= b < tiles_n)]
    if outside:
        problems.append(f"{len(outside)} visit(s) outside the {tiles_m}×{tiles_n} grid, the first {outside[0]}")
    inside = visits[[0 <= a < tiles_m and 0 <= b < tiles_n for a, b in visits]] if len(visits) else visits
    counts = np.zeros((tiles_m, tiles_n), np.int64)
    np.add.at(counts, (inside[:, 0].astype(int), inside[:, 1].astype(int)), 1)
    repeated = np.argwhere(counts > 1)
    missing = np.argwhere(counts == 0)
    if len(repeated):
        r = tuple(int(v) for v in repeated[0])
        problems.append(f"{len(repeated)} tile(s) visited more than once, the first {r} ({counts[r]} times)")
    if len(missing):
        problems.append(f"{len(missing)} tile(s) never visited, the first {tuple(int(v) for v in missing[0])}")
    return problems


def persistent_schedule(n_tiles: int, workers: int) -> list[list[int]]:
    """The tiles each persistent worker takes: worker ``w`` takes ``w, w + workers, w + 2·workers, …``."""
    if workers < 1:
        raise ValueError(f"workers = {workers}: a persistent grid has at least one worker")
    return [list(range(w, n_tiles, workers)) for w in range(workers)]


@dataclass(frozen=True)
class Waves:
    """How ``tiles`` tiles spread over ``workers`` workers running at once."""

    tiles: int
    workers: int

    @property
    def count(self) -> int:
        """Waves: rounds of ``workers`` tiles (the last may be partial)."""
        return -(-self.tiles // self.workers)

    @property
    def last(self) -> int:
        """Tiles in the last wave."""
        return self.tiles - (self.count - 1) * self.workers if self.tiles else 0

    @property
    def efficiency(self) -> float:
        """Busy fraction of the workers over all waves (1.0 = no quantization loss)."""
        return self.tiles / (self.count * self.workers) if self.tiles else 0.0

    def __str__(self) -> str:
        return (f"{self.tiles} tiles on {self.workers} workers: {self.count} wave(s), the last with {self.last} "
                f"tile(s); {self.efficiency:.0%} of the workers' time busy")


def waves(tiles: int, workers: int | None = None) -> Waves:
    """The waves of ``tiles`` tiles on ``workers`` (default: one per SM of the GPU here, ``parts.current()``)."""
    if workers is None:
        workers = parts.current().sms
    if workers < 1:
        raise ValueError(f"workers = {workers}: at least one worker")
    return Waves(int(tiles), int(workers))


@dataclass(frozen=True)
class Footprint:
    """The operand panels one wave of tiles reads: each tile row of C needs a BM×K panel of A, each tile column a
    BN×K panel of B."""

    a_panels: int
    b_panels: int
    bytes_a: int
    bytes_b: int

    @property
    def bytes(self) -> int:
        return self.bytes_a + self.bytes_b


def wave_footprint(visits: np.ndarray, workers: int, wave: int, BM: int, BN: int, K: int,
                   in_bytes: int = 2) -> Footprint:
    """The distinct panels of A and B that the tiles of wave ``wave`` (tiles ``wave·workers …``) read."""
    visits = np.asarray(visits)
    chunk = visits[wave * workers:(wave + 1) * workers]
    a = len({int(v) for v in chunk[:, 0]})
    b = len({int(v) for v in chunk[:, 1]})
    return Footprint(a, b, a * BM * K * in_bytes, b * BN * K * in_bytes)


def footprints(visits: np.ndarray, workers: int, BM: int, BN: int, K: int, in_bytes: int = 2) -> list[Footprint]:
    """:func:`wave_footprint` of every wave."""
    n = -(-len(visits) // workers)
    return [wave_footprint(visits, workers, w, BM, BN, K, in_bytes) for w in range(n)]
