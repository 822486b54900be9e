"""Block-striped moves: the layout, coalescing, exact fp32 adds, and why atomic reductions are not deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.course.widgets import striped as view
from helpers.hopper import striped


@pytest.mark.parametrize("T, R", [(128, 128), (32, 1), (1, 7), (96, 5)])
def test_offsets_are_a_bijection_and_striped(T, R):
    offs = striped.offsets(T, R)
    assert sorted(offs.ravel().tolist()) == list(range(T * R))
    assert offs[5 % T, R - 1] == (R - 1) * T + 5 % T
    for t in range(T):
        assert striped.indices(t, T, T * R).tolist() == offs[t].tolist()
    owner = striped.owner_map(T, T * R)
    assert (np.bincount(owner, minlength=T) == R).all()


def test_coalescing_four_sectors_per_warp_access_versus_thirty_two():
    assert (striped.warp_sectors(striped.offsets(128, 128)) == 4).all()
    assert (striped.warp_sectors(striped.blocked_offsets(128, 128)) == 32).all()


def test_kernel_layout():
    """bench/kernels/lab9_streamk.cu: register j of thread t of consumer warpgroup c is c·16384 + j·128 + t."""
    k = striped.kernel_offsets()
    for c, t, j in [(0, 0, 0), (1, 5, 3), (1, 127, 127), (0, 64, 77)]:
        assert k[128 * c + t, j] == c * 16384 + j * 128 + t
    assert np.unique(k).size == 2 * 128 * 128


def test_store_load_and_exact_load_add():
    rng = np.random.default_rng(1)
    regs = rng.standard_normal((64, 9)).astype(np.float32)
    ws = np.full(64 * 9 + 3, np.nan, np.float32)
    striped.store(ws, regs)
    assert striped.untouched(ws).tolist() == [576, 577, 578]
    assert np.array_equal(striped.load(ws, 64, 9), regs)
    acc = rng.standard_normal((64, 9)).astype(np.float32)
    got = striped.load_add(ws, acc)
    assert got.dtype == np.float32 and np.array_equal(got, acc + regs)
    with pytest.raises(striped.StripeError, match="at least"):
        striped.store(np.zeros(10, np.float32), regs)


def test_atomic_reduction_order_changes_the_bits():
    rng = np.random.default_rng(2)
    parts = [(rng.standard_normal((32, 4)) * np.exp2(rng.integers(-20, 20, (32, 4)))).astype(np.float32)
             for _ in range(4)]
    results = set()
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        ws = np.zeros(128, np.float32)
        striped.reduce_add(ws, parts, order)
        results.add(ws.tobytes())
    assert len(results) > 1


def test_widget_computations():
    grid = view.owner_grid(8, 40, 16)
    assert grid.shape == (3, 16) and grid[0, :8].tolist() == list(range(8)) and grid[2, 8] == -1
    cells, sectors = view.access_cells(64, 1024, 64, register=2)
    assert sectors == 4 and cells[0] == (2, 0) and len(cells) == 32
    _, blocked = view.access_cells(64, 1024, 64, register=2, layout="blocked")
    assert blocked == 32
