"""helpers.hopper.scheduler: raster orders are permutations with the stated shapes, the grouped order is the Lab 6
kernel's arithmetic, persistent schedules cover every tile once, waves and footprints add up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.hopper import scheduler

ROOT = Path(__file__).resolve().parents[2]
rng = np.random.default_rng(5)
GRIDS = [(1, 1), (1, 9), (9, 1), (16, 16), (17, 5), (3, 40), (33, 31)]


@pytest.mark.parametrize("name", list(scheduler.ORDERS))
@pytest.mark.parametrize("grid", GRIDS)
def test_every_order_is_a_permutation(name, grid):
    for group in (1, 3, 8):
        visits = scheduler.order(name, *grid, group=group)
        assert visits.shape == (grid[0] * grid[1], 2)
        assert scheduler.permutation_problems(visits, *grid) == []


def test_row_and_column_major():
    assert scheduler.row_major(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert scheduler.column_major(2, 3).tolist() == [[0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]]


def test_grouped_by_hand():
    # 5 rows, 2 columns, groups of 2: rows 0-1 column by column, then 2-3, then the short group of row 4
    assert scheduler.grouped(5, 2, 2).tolist() == [[0, 0], [1, 0], [0, 1], [1, 1], [2, 0], [3, 0], [2, 1], [3, 1],
                                                   [4, 0], [4, 1]]
    assert scheduler.grouped(4, 4, 1).tolist() == scheduler.row_major(4, 4).tolist()
    assert scheduler.grouped(4, 4, 4).tolist() == scheduler.column_major(4, 4).tolist()


def test_grouped_coords_is_the_vectorised_order():
    for _ in range(300):
        pm, pn, g = int(rng.integers(1, 60)), int(rng.integers(1, 60)), int(rng.integers(1, 20))
        v = scheduler.grouped(pm, pn, g)
        p = int(rng.integers(0, pm * pn))
        assert tuple(int(x) for x in v[p]) == scheduler.grouped_coords(p, pm, pn, g)


def test_grouped_coords_is_the_kernels_pair_coords():
    """Lab 7's device function (pairs) computes the same arithmetic, line by line."""
    src = (ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text()
    for line in ("const int per_group = LAB7_GROUP * pairs_n;", "first = group * LAB7_GROUP;",
                 "const int rows = min(pairs_m - first, LAB7_GROUP);", "const int in_group = p % per_group;",
                 "pm = first + in_group % rows;", "pn = in_group / rows;"):
        assert line in src


def test_grouped_coords_is_the_kernels_tile_coords():
    """Lab 6's device function (tiles) computes the same arithmetic, line by line."""
    src = (ROOT / "bench" / "kernels" / "lab6_persistent.cu").read_text()
    for line in ("const int per_group = LAB6_GROUP * tiles_n;", "const int first = (t / per_group) * LAB6_GROUP;",
                 "const int rows = min(tiles_m - first, LAB6_GROUP);", "const int in_group = t % per_group;",
                 "tm = first + in_group % rows;", "tn = in_group / rows;"):
        assert line in src


def test_hilbert_steps_to_neighbours_on_a_power_of_two_square():
    for n in (2, 4, 8, 32):
        v = scheduler.hilbert(n, n)
        steps = np.abs(np.diff(v, axis=0)).sum(axis=1)
        assert (steps == 1).all()


def test_permutation_problems_name_the_mistake():
    v = scheduler.row_major(3, 3)
    assert "never visited" in scheduler.permutation_problems(v[1:], 3, 3)[0]
    dup = np.concatenate([v, v[:1]])
    assert any("more than once" in p for p in scheduler.permutation_problems(dup, 3, 3))
    out = v.copy()
    out[0] = (5, 0)
    assert any("outside" in p for p in scheduler.permutation_problems(out, 3, 3))
    assert "shape" in scheduler.permutation_problems(np.zeros(4), 2, 2)[0]


def test_persistent_schedule_covers_every_tile_once():
    for _ in range(100):
        tiles, workers = int(rng.integers(0, 500)), int(rng.integers(1, 140))
        taken = [t for w in scheduler.persistent_schedule(tiles, workers) for t in w]
        assert sorted(taken) == list(range(tiles))
    assert scheduler.persistent_schedule(5, 2) == [[0, 2, 4], [1, 3]]


def test_waves():
    w = scheduler.waves(512)
    assert (w.count, w.last) == (4, 116) and w.efficiency == pytest.approx(512 / 528)
    w = scheduler.waves(16, 66)
    assert (w.count, w.last) == (1, 16) and w.efficiency == pytest.approx(16 / 66)
    assert scheduler.waves(132).efficiency == 1.0
    with pytest.raises(ValueError):
        scheduler.waves(4, 0)


def test_footprint_counts_distinct_panels():
    v = scheduler.row_major(4, 4)
    fp = scheduler.wave_footprint(v, 6, 0, 256, 256, 1024)  # tiles (0,0..3), (1,0..1)
    assert (fp.a_panels, fp.b_panels) == (2, 4)
    assert fp.bytes_a == 2 * 256 * 1024 * 2 and fp.bytes == (2 + 4) * 256 * 1024 * 2
    last = scheduler.wave_footprint(v, 6, 2, 256, 256, 1024)  # tiles 12..15: row 3
    assert (last.a_panels, last.b_panels) == (1, 4)
    assert len(scheduler.footprints(v, 6, 256, 256, 1024)) == 3


def test_grouped_wave_reads_less_than_row_major_at_8192():
    pm = pn = 32
    row = scheduler.wave_footprint(scheduler.row_major(pm, pn), 66, 0, 256, 256, 8192)
    grp = scheduler.wave_footprint(scheduler.grouped(pm, pn, 8), 66, 0, 256, 256, 8192)
    assert (row.a_panels, row.b_panels) == (3, 32) and (grp.a_panels, grp.b_panels) == (8, 9)


def test_tile_counts_and_errors():
    assert scheduler.tile_counts(4096, 4096, 128, 256) == (32, 16)
    assert scheduler.tile_counts(1000, 130, 128, 256) == (8, 1)
    with pytest.raises(ValueError):
        scheduler.tile_counts(0, 1, 1, 1)
    with pytest.raises(ValueError):
        scheduler.order("zigzag", 2, 2)
    with pytest.raises(ValueError):
        scheduler.grouped(2, 2, 0)
