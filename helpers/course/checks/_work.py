"""The work a kernel did, checked against its schedule: every tile of C stored once, by the block the schedule gives
it, and every product of the mainloop (64 rows of A, a slice of B's rows, 16 of K) computed once, by the block that
owns it. A kernel that computes a tile twice, or hands two clusters each other's tiles, still leaves the right C: only
the work shows it. The executor records the work (``helpers.gpu.executor.work``: which block issued each wgmma and
each TMA store); these functions grade it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from helpers.course import grading

__all__ = ["Launched", "Owner", "check_work", "check_releases", "block_words"]

#: (ctaid x, ctaid y): the block a schedule gives a piece of work to
Owner = tuple[int, int]


@dataclass
class Launched:
    """One launch on the executor, as the grader needs it: its work log and where A, B and C lived."""

    log: Any
    a: int
    b: int
    c: int


def block_words(ctaid: Owner, cluster: int) -> str:
    """'block (3,0) (cluster 1, rank 1)', or 'block (2,1)' without clusters."""
    x, y = ctaid
    if cluster > 1:
        return f"block ({x},{y}) (cluster {x // cluster}, rank {x % cluster})"
    return f"block ({x},{y})"


def _blocks(blocks: list[Any], cluster: int) -> str:
    names = sorted({block_words((b.ctaid[0], b.ctaid[1]), cluster) for b in blocks})
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check_work(c: grading.Check, run: Launched, *, m: int, n: int, label: str, tile: tuple[int, int],
               piece_of: Callable[[int, int], str], store_owner: Callable[[int, int], Owner],
               mma_owner: Callable[[int, int, int], Owner], cluster: int = 1, hint: str = "",
               store_turn: Callable[[int, int], int] | None = None, order_hint: str = "") -> None:
    """Grade the work of one launch of an M×N GEMM: every ``tile`` (rows, cols) box of C stored exactly once, by
    ``store_owner(row0, col0)``; no product of the mainloop computed twice; each computed by
    ``mma_owner(a_row, c_col, k)``. ``piece_of(row, col)`` names the schedule's unit holding an element in words
    (e.g. 'pair 3'). ``hint`` says how the schedule hands out work. ``store_turn(row0, col0)``: the turn at which
    the schedule has the owner take that tile (its 0th, 1st, … tile): each block stores its tiles in the order of
    their turns, as the executor recorded the stores (a raster order walked otherwise gives a block the same tiles in
    another order); each consumer warpgroup of a block in turn (its 64-row slices of the tiles), as the two run on
    independently."""
    log = run.log
    th, tw = tile
    counts: dict[tuple[int, int], list[Any]] = {}
    for s in log.stores_to(run.c):
        col0, row0 = s.box.coords[0], s.box.coords[1]
        counts.setdefault((row0, col0), []).append(s.block)
    for (row0, col0), blocks in sorted(counts.items()):
        where = f"the {th}×{tw} tile of C at rows {row0}–{min(row0 + th, m) - 1}, columns {col0}–" \
                f"{min(col0 + tw, n) - 1} ({piece_of(row0, col0)})"
        if len(blocks) > 1:
            c.fail(f"{label}: {where} was computed and stored {len(blocks)} times, by {_blocks(blocks, cluster)}: "
                   "C is right, but the work is done more than once (every output tile is computed once, by its "
                   "owner)", hint=hint)
        want = store_owner(row0, col0)
        got = (blocks[0].ctaid[0], blocks[0].ctaid[1])
        if got != want:
            c.fail(f"{label}: {where} was stored by {block_words(got, cluster)}; the schedule gives it to "
                   f"{block_words(want, cluster)}", hint=hint)
    if store_turn is not None:  # per block and consumer (the 64-row slices of a tile alternate between the two)
        last: dict[Any, tuple[int, int, int]] = {}
        for st in log.stores_to(run.c):
            col0, row0 = st.box.coords[0], st.box.coords[1]
            turn = store_turn(row0, col0)
            key = (st.block, (row0 // 64) % 2)
            prev = last.get(key)
            if prev is not None and turn < prev[0]:
                who = block_words((st.block.ctaid[0], st.block.ctaid[1]), cluster)
                c.fail(f"{label}: {who} stored the tile of C at rows {row0}–{min(row0 + th, m) - 1}, columns {col0}–"
                       f"{min(col0 + tw, n) - 1} ({piece_of(row0, col0)}: its turn {turn}) after the one at rows "
                       f"{prev[1]}–{min(prev[1] + th, m) - 1}, columns {prev[2]}–{min(prev[2] + tw, n) - 1} (its turn "
                       f"{prev[0]}): the tiles are not taken in the order the schedule prescribes (C is right: the "
                       "order shows in each block's stores, as the kernel ran on the emulator)",
                       hint=order_hint or hint)
            last[key] = (turn, row0, col0)
    missing = [(r, q) for r in range(0, m, th) for q in range(0, n, tw) if (r, q) not in counts]
    if missing:
        r, q = missing[0]
        c.fail(f"{label}: {len(missing)} tile(s) of C were never stored by a TMA store, the first at rows {r}–"
               f"{min(r + th, m) - 1}, columns {q}–{min(q + tw, n) - 1} ({piece_of(r, q)})", hint=hint)
    products: dict[tuple, list[Any]] = {}
    for x in log.mmas:
        if x.a == run.a and x.b == run.b:
            products.setdefault(x.key, []).append(x)
    for xs in products.values():
        first = xs[0]
        row, col, k = first.a_row, first.b_row, first.k
        what = (f"the product of A rows {row}–{row + 63} and B rows {col}–{col + first.n - 1} (C's columns) over K "
                f"{k}–{k + 15} ({piece_of(row, col)})")
        if len(xs) > 1:
            c.fail(f"{label}: {what} was computed {len(xs)} times, by {_blocks([x.block for x in xs], cluster)}: C "
                   "is right, but the work is done more than once (every output tile is computed once, by its "
                   "owner)", hint=hint)
        want = mma_owner(row, col, k)
        got = (first.block.ctaid[0], first.block.ctaid[1])
        if got != want:
            c.fail(f"{label}: {what} was computed by {block_words(got, cluster)}; the schedule gives it to "
                   f"{block_words(want, cluster)}", hint=hint)
    stores = sum(len(v) for v in counts.values())
    c.ok(f"{label}: the work, as the emulator recorded it: each of the {stores} tiles of C stored once and each of the "
         f"{len(products)} wgmma products computed once, all by the block the schedule gives them"
         + (", each block's tiles in the schedule's order" if store_turn is not None else ""))


def check_releases(c: grading.Check, run: Launched, *, label: str, full: str = "full", empty: str = "empty",
                   cluster: int = 1, reused: bool = True, hint: str = "") -> None:
    """Grade the ring's releases of one launch from where each block's barriers stood as it exited: for every stage
    ``s``, ``empty[s]`` completed as many phases as ``full[s]`` (each fill of the stage released once, by all its
    consumers) and is not part-way through a phase. An extra release lets the producer refill a stage a consumer
    may still be reading; a missing one leaves a consumer's stage held. ``reused=False``: the block's ring serves
    one tile and no one waits on it after the K loop, so a release it never needs (a last stage left held) is not
    graded, only releases beyond the fills. (Stages whose barriers the kernel names otherwise are not graded here.)"""
    ends: dict[tuple[Any, str], Any] = {}
    for e in run.log.barriers:
        ends[(e.block, e.name)] = e
    for (block, name), e in sorted(ends.items(), key=lambda kv: (kv[0][0].ctaid, kv[0][1])):
        if not name.startswith(f"{empty}["):
            continue
        fill = ends.get((block, full + name[len(empty):]))
        if fill is None:
            continue
        who = block_words((block.ctaid[0], block.ctaid[1]), cluster)
        done = e.expected - e.pending
        if e.phases > fill.phases or (not reused and e.phases == fill.phases and done > 0):
            more = f" and {done} of {e.expected} arrivals of the next" if done else ""
            c.fail(f"{label}: {who}: {name} completed {e.phases} phases{more}, but its stage was filled "
                   f"{fill.phases} time{'s' * (fill.phases != 1)} ({fill.name}): a stage was released more times than "
                   "it was used (a release for a stage its consumer did not read, or more arrivals than one per "
                   "consumer), so the producer may refill a stage that is still being read", hint=hint)
        if reused and (e.phases < fill.phases or not e.between_phases):
            c.fail(f"{label}: {who}: {name} completed {e.phases} phases ({done} of {e.expected} arrivals of the "
                   f"next) for {fill.phases} fills of its stage ({fill.name}): each fill is released once by every "
                   "consumer that reads it, no more and no fewer", hint=hint)
    if reused:
        c.ok(f"{label}: every stage released once per fill, by all its consumers (each block's empty and full "
             "barriers, as it exited)")
    else:
        c.ok(f"{label}: no stage released more times than it was filled (each block's empty and full barriers, as it "
             "exited)")
