"""The work check (helpers.course.checks._work on the executor's work log): every tile of C stored once, by the block
the schedule gives it, every product computed once, by its owner. The right work passes; a duplicated tile, a tile
stored or computed by the wrong block, two clusters that swap their pairs and a tile never stored fail, naming it."""

from __future__ import annotations

import pytest

from helpers.course import grading
from helpers.course.checks._work import Launched, check_work
from helpers.gpu.executor.work import Block, Box, Mma, Store, WorkLog

A, B, C = 0x1000, 0x2000, 0x3000
M, N = 256, 128  # two clusters of two blocks (rows 128·rank) side by side: cluster c takes columns 64·c


def _owner(row: int, col: int, *_: int) -> tuple[int, int]:
    return (2 * (col // 64) + row // 128, 0)


def _piece(row: int, col: int) -> str:
    return f"pair {col // 64}"


def _right() -> WorkLog:
    log = WorkLog()
    for row in range(0, M, 64):
        for col in range(0, N, 64):
            blk = Block((_owner(row, col)[0], 0, 0), (row // 128))
            log.stores.append(Store(blk, Box(C, (N, M), (col, row), (64, 64))))
            for k in range(0, 32, 16):
                log.mmas.append(Mma(blk, 1 + (row % 128) // 64, A, row, B, col, k, 64))
    return log


def _grade(log: WorkLog) -> None:
    with grading.check("T") as c:
        check_work(c, Launched(log, A, B, C), m=M, n=N, label="M=256, N=128", tile=(64, 64), piece_of=_piece,
                   store_owner=_owner, mma_owner=_owner, cluster=2, hint="cluster c takes pair c")


def test_the_right_work_passes(capsys):
    _grade(_right())
    assert "each of the 8 tiles of C stored once and each of the 16 wgmma products computed once" in \
        capsys.readouterr().out


def _duplicated_tile(log: WorkLog) -> None:
    s = log.stores[0]
    log.stores.append(Store(Block((2, 0, 0), 0), s.box))


def _stored_by_the_wrong_block(log: WorkLog) -> None:
    s = log.stores[0]
    log.stores[0] = Store(Block((1, 0, 0), 1), s.box)


def _clusters_swap_their_pairs(log: WorkLog) -> None:
    def swap(b: Block) -> Block:
        x = b.ctaid[0]
        return Block(((x + 2) % 4, 0, 0), b.rank)

    log.stores[:] = [Store(swap(s.block), s.box) for s in log.stores]
    log.mmas[:] = [Mma(swap(x.block), x.warpgroup, x.a, x.a_row, x.b, x.b_row, x.k, x.n) for x in log.mmas]


def _product_computed_twice(log: WorkLog) -> None:
    x = log.mmas[3]
    log.mmas.append(Mma(Block((3, 0, 0), 1), x.warpgroup, x.a, x.a_row, x.b, x.b_row, x.k, x.n))


def _product_by_the_wrong_block(log: WorkLog) -> None:
    x = log.mmas[0]
    log.mmas[0] = Mma(Block((2, 0, 0), 0), x.warpgroup, x.a, x.a_row, x.b, x.b_row, x.k, x.n)


def _tile_never_stored(log: WorkLog) -> None:
    del log.stores[-1]


@pytest.mark.parametrize("mistake, needles", [
    (_duplicated_tile, ("rows 0–63, columns 0–63", "stored 2 times", "block (0,0) (cluster 0, rank 0), "
                        "block (2,0) (cluster 1, rank 0)", "done more than once")),
    (_stored_by_the_wrong_block, ("stored by block (1,0) (cluster 0, rank 1)", "gives it to block (0,0)")),
    (_clusters_swap_their_pairs, ("pair 0", "stored by block (2,0) (cluster 1, rank 0)",
                                  "gives it to block (0,0) (cluster 0, rank 0)")),
    (_product_computed_twice, ("computed 2 times", "over K 16–31", "done more than once")),
    (_product_by_the_wrong_block, ("A rows 0–63 and B rows 0–63", "computed by block (2,0)",
                                   "gives it to block (0,0)")),
    (_tile_never_stored, ("never stored", "rows 192–255, columns 64–127")),
])
def test_wrong_work_is_named(mistake, needles):
    log = _right()
    mistake(log)
    grading.assert_rejects(_grade, log, *needles, "cluster c takes pair c")


def test_operands_are_read_back_through_the_loads_that_filled_them():
    """The executor's log: a wgmma's descriptors point into shared memory a TMA load filled; the log gives the rows
    of A and B and the K slice (128B swizzle, 64-element rows: 128 bytes per row, 32 bytes per 16 of K)."""
    from helpers.hopper import tensormap as tm
    from helpers.hopper import wgmma
    from helpers.hopper.tensormap import DataType, Swizzle

    class Cta:
        slot, ctaid, rank = 0, (1, 0, 0), 1

    log = WorkLog()
    ta = tm.encode_tiled(DataType.BFLOAT16, 2, A, (512, 384), (1024,), (64, 128), (1, 1), swizzle=Swizzle.B128)
    tb = tm.encode_tiled(DataType.BFLOAT16, 2, B, (512, 256), (1024,), (64, 128), (1, 1), swizzle=Swizzle.B128)
    log.loaded([Cta()], 0, ta, [192, 128])
    log.loaded([Cta()], 16384, tb, [192, 64])
    log.mma(Cta(), 2, wgmma.make_descriptor(64 * 128 + 32 * 3, 16, 1024, Swizzle.B128),
            wgmma.make_descriptor(16384 + 32 * 3, 16, 1024, Swizzle.B128), 128)
    (x,) = log.mmas
    assert (x.a, x.a_row, x.b, x.b_row, x.k, x.n) == (A, 128 + 64, B, 64, 192 + 48, 128)
    assert x.block == Block((1, 0, 0), 1) and x.warpgroup == 2
    log.stored(Cta(), ta, [0, 64])
    assert log.store_counts(A) == {(0, 64): 1}
