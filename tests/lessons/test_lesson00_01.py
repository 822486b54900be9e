"""Lessons 00 and 01: the widgets' computations, and the quick checks' answers against those computations.

The generic quiz test (tests/platform/test_quizzes.py) already feeds every quiz its right and wrong answers;
here each answer is re-derived from the course's own functions, so a quiz and its lesson cannot drift apart.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from helpers.course import grading
from helpers.course.quizzes import lesson00, lesson01
from helpers.course.widgets import swizzle, tensormap_builder, tiles
from helpers.hopper import tensormap

rng = np.random.default_rng()


# -----------------------------------------------------------------------------------------------------------
# Lesson 00 · tiles
# -----------------------------------------------------------------------------------------------------------
def test_the_running_example():
    p = tiles.TilePlan()
    assert (p.grid_m, p.grid_n, p.blocks, p.k_steps) == (128, 128, 16384, 128)
    assert p.wgmma_per_step == 4 and p.wgmma_shape == "m64n64k16"
    assert p.accumulators_per_thread == 32
    assert p.smem_per_stage == 16384


@pytest.mark.parametrize("bad", [dict(BM=32), dict(BK=40), dict(BN=264), dict(BN=60), dict(M=0), dict(K=-64)])
def test_plan_refuses_shapes_wgmma_cannot_do(bad):
    with pytest.raises(ValueError):
        tiles.TilePlan(**bad)


def _random_plan() -> tiles.TilePlan:
    return tiles.TilePlan(int(rng.integers(1, 700)), int(rng.integers(1, 700)), int(rng.integers(1, 700)),
                          int(rng.choice([64, 128])), int(rng.choice([16, 64, 128, 256])),
                          int(rng.choice([16, 32, 64])))


@pytest.mark.parametrize("trial", range(6))
def test_c_tiles_partition_c_and_k_steps_partition_k(trial):
    p = _random_plan()
    owners = np.zeros((p.M, p.N), dtype=int)
    for bm in range(p.grid_m):
        for bn in range(p.grid_n):
            a_cover = np.zeros((p.M, p.K), dtype=int)
            b_cover = np.zeros((p.K, p.N), dtype=int)
            for k in range(p.k_steps):
                s = tiles.block_step(p, bm, bn, k)
                assert s.c == tiles.block_step(p, bm, bn, 0).c, "the C tile must not move with K"
                assert s.tma_a == (k * p.BK, bm * p.BM) and s.tma_b == (k * p.BK, bn * p.BN)
                assert s.last == (k == p.k_steps - 1)
                assert s.a.full == (s.a.shape == (p.BM, p.BK))
                a_cover[s.a.r0:s.a.r1, s.a.c0:s.a.c1] += 1
                b_cover[s.b.r0:s.b.r1, s.b.c0:s.b.c1] += 1
            owners[s.c.r0:s.c.r1, s.c.c0:s.c.c1] += 1
            # over its K loop a block reads its rows of A and its columns of B exactly once, nothing else
            rows = np.zeros(p.M, bool)
            rows[s.c.r0:s.c.r1] = True
            cols = np.zeros(p.N, bool)
            cols[s.c.c0:s.c.c1] = True
            assert np.array_equal(a_cover, np.repeat(rows[:, None], p.K, axis=1).astype(int))
            assert np.array_equal(b_cover, np.repeat(cols[None, :], p.K, axis=0).astype(int))
    assert np.array_equal(owners, np.ones((p.M, p.N), int)), "every element of C belongs to exactly one block"


def test_block_step_refuses_blocks_outside_the_grid():
    p = tiles.TilePlan()
    for args in [(128, 0, 0), (0, -1, 0), (0, 0, 128)]:
        with pytest.raises(ValueError):
            tiles.block_step(p, *args)


@pytest.mark.parametrize("trial", range(4))
def test_tiled_matmul_equals_the_product(trial):
    m, n, k = (int(x) for x in rng.integers(1, 300, size=3))
    bm, bn, bk = int(rng.choice([64, 128])), int(rng.choice([32, 64, 128])), int(rng.choice([16, 64]))
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = tiles.tiled_matmul(a, b, bm, bn, bk)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    assert np.all(np.abs(c - ref) <= grading.gemm_tolerance(a, b))


def test_tiled_matmul_rejects_shapes_that_do_not_multiply():
    with pytest.raises(ValueError):
        tiles.tiled_matmul(np.zeros((4, 5)), np.zeros((6, 4)))


def test_grid_cells_mark_this_step_earlier_steps_and_the_store():
    p = tiles.TilePlan(1024, 640, 2048, 64, 64, 64)  # 16 × 10 tiles, 32 K steps: no folding
    bm, bn = int(rng.integers(16)), int(rng.integers(10))
    k = int(rng.integers(31))
    g = tiles.grid_cells(p, bm, bn, k)
    assert g.a.shape == (16, 32) and g.b.shape == (32, 10) and g.c.shape == (16, 10)
    assert g.fold_a == g.fold_b == g.fold_c == (1, 1)
    assert g.a[bm, k] == tiles.NOW and g.b[k, bn] == tiles.NOW
    assert (g.a == tiles.EARLIER).sum() == k and np.all(g.a[bm, :k] == tiles.EARLIER)
    assert (g.b == tiles.EARLIER).sum() == k and np.all(g.b[:k, bn] == tiles.EARLIER)
    assert (g.a != 0).sum() == k + 1 and (g.b != 0).sum() == k + 1
    assert g.c[bm, bn] == tiles.EARLIER and (g.c != 0).sum() == 1
    assert tiles.grid_cells(p, bm, bn, p.k_steps - 1).c[bm, bn] == tiles.NOW


def test_grid_cells_fold_big_grids_and_keep_the_highlight():
    p = tiles.TilePlan()  # 128 × 128 tiles
    g = tiles.grid_cells(p, 77, 3, 100)
    assert g.a.shape == g.b.shape == g.c.shape == (64, 64)
    assert g.fold_a == (2, 2)
    assert g.a[77 // 2, 100 // 2] == tiles.NOW and g.b[100 // 2, 3 // 2] == tiles.NOW
    assert g.c[77 // 2, 3 // 2] == tiles.EARLIER and (g.c != 0).sum() == 1


def test_costs_of_the_running_example():
    g = tiles.gemm_costs(8192, 8192, 8192)
    assert g.flops == 2 * 8192**3 and g.bytes == 2 * 2 * 8192**2 + 4 * 8192**2
    assert g.intensity == 2048
    assert tiles.ridge_point() == pytest.approx(989 / 3.35)
    t = tiles.tile_costs(tiles.TilePlan())
    assert t.intensity == pytest.approx(2 * 64 * 64 * 8192 / (2 * 2 * 64 * 8192 + 4 * 64 * 64))
    assert tiles.roofline(t.intensity) == pytest.approx(3.35e12 * t.intensity)
    assert tiles.roofline(g.intensity) == 989e12


def test_summary_names_the_block_and_the_numbers():
    text = tiles.summary_html(tiles.TilePlan(3000, 3000, 8192), 46, 46, 127)
    assert "2,209 blocks" in text and "C[2944:3000, 2944:3000]" in text and "partial" in text
    assert "then stores its C tile" in text and "295" in text


def test_tile_grid_widget_follows_its_sliders():
    import plotly.graph_objects as go

    box = tiles.tile_grid_widget()
    fig = box.children[1]
    assert isinstance(fig, go.FigureWidget) and len(fig.data) == 3
    (m_s, _, _), _, (row_s, col_s, step_s) = (c.children for c in box.children[0].children)
    m_s.value = 3000
    assert row_s.max == 46 and "2,209" not in box.children[3].value  # 47 × 128 blocks
    assert "6,016 blocks" in box.children[3].value
    row_s.value, col_s.value, step_s.value = 46, 5, 127
    assert "C[2944:3000, 320:384]" in box.children[3].value
    assert np.asarray(fig.data[2].z).max() == tiles.NOW


# -----------------------------------------------------------------------------------------------------------
# Lesson 01 · swizzle
# -----------------------------------------------------------------------------------------------------------
def test_128b_swizzle_is_chunk_xor_row_mod_8():
    rows = int(rng.integers(8, 257))
    got = swizzle.chunk_placement(rows, 128, "128B")
    r = np.arange(rows)[:, None]
    c = np.arange(8)[None, :]
    assert np.array_equal(got, 128 * r + 16 * (c ^ (r % 8)))


@pytest.mark.parametrize("mode,span,bits", [("32B", 32, 1), ("64B", 64, 2), ("128B", 128, 3)])
def test_swizzle_permutes_chunks_inside_each_line_and_repeats(mode, span, bits):
    offsets = np.arange(0, 4096, 16)
    moved = np.asarray(swizzle.swizzle_offset(offsets, mode))
    assert np.array_equal(moved // 128, offsets // 128), "a chunk never leaves its 128-byte line"
    assert sorted(moved) == sorted(offsets), "a permutation"
    assert np.array_equal(moved % 16, offsets % 16)
    period = 128 << bits
    assert np.array_equal(moved[period // 16:] - period, moved[: -period // 16])
    assert not np.array_equal(moved, offsets)
    # a box with rows as wide as the span: chunk c of row r lands at c XOR ((r·span / 128) mod 2**bits)
    rows = swizzle.chunk_placement(16, span, mode)
    r, c = np.arange(16)[:, None], np.arange(span // 16)[None, :]
    line_bits = ((r * span) >> 7) & ((1 << bits) - 1)
    expected = (r * span) // 128 * 128 + ((((r * span) % 128) // 16 + c) ^ line_bits) * 16
    assert np.array_equal(rows, expected)


def test_no_swizzle_is_the_identity_and_rows_must_fit_the_span():
    assert np.array_equal(swizzle.chunk_placement(4, 64, "none"), np.arange(16).reshape(4, 4) * 16)
    with pytest.raises(ValueError):
        swizzle.chunk_placement(4, 128, "64B")
    with pytest.raises(ValueError):
        swizzle.chunk_placement(4, 40, "none")
    with pytest.raises(ValueError):
        swizzle.swizzle_offset(0, "256B")


def _passes_brute_force(offsets: np.ndarray) -> int:
    """16-byte loads: quarter-warps of 8; per bank, the distinct 4-byte words asked for; passes = the max."""
    total = 0
    for q in range(4):
        words_of_bank: dict[int, set[int]] = {}
        for t in range(8 * q, 8 * q + 8):
            for word in range(int(offsets[t]) // 4, int(offsets[t]) // 4 + 4):
                words_of_bank.setdefault(word % 32, set()).add(word)
        total += max(len(v) for v in words_of_bank.values())
    return total


@pytest.mark.parametrize("trial", range(5))
def test_bank_conflicts_match_a_brute_force_count(trial):
    offsets = rng.integers(0, 256, size=32) * 16
    c = swizzle.bank_conflicts(offsets, 16)
    assert c.total == _passes_brute_force(offsets) and c.ideal == 4
    assert np.array_equal(c.banks[:, 0], (offsets // 4) % 32)


def test_bank_conflicts_of_the_lesson():
    column = {m: swizzle.explore(m, 32, "down a column", int(rng.integers(8 if m in ("none", "128B") else 2)))
              for m in swizzle.MODES}
    assert column["none"].conflicts.factor == 8
    assert all(column[m].conflicts.factor == 1 for m in ("32B", "64B", "128B"))
    assert swizzle.explore("none", 32, "down a column", 0, row_bytes=32).conflicts.factor == 2
    assert swizzle.explore("none", 32, "down a column", 0, row_bytes=64).conflicts.factor == 4
    assert swizzle.explore("none", 32, "ldmatrix.x4 (8×8 matrices)", 3).conflicts.factor == 8
    assert swizzle.explore("128B", 32, "ldmatrix.x4 (8×8 matrices)", 3).conflicts.factor == 1
    for m in swizzle.MODES:
        assert swizzle.explore(m, 32, "row by row (a copy loop)").conflicts.factor == 1
    # a broadcast (every thread the same address) is one pass per quarter, not a conflict
    assert swizzle.bank_conflicts(np.full(32, 48)).factor == 1
    # 4-byte loads: one phase of 32 threads; a stride of 128 bytes puts them all in bank 0
    assert swizzle.bank_conflicts(np.arange(32) * 128, 4).factor == 32
    assert swizzle.bank_conflicts(np.arange(32) * 4, 4).factor == 1


def test_misaligned_buffer_shifts_the_pattern():
    aligned = swizzle.chunk_placement(8, 128, "128B", base=0)
    shifted = swizzle.chunk_placement(8, 128, "128B", base=512)
    assert np.array_equal(shifted[0] // 16, np.arange(8) ^ 4)
    assert not np.array_equal(aligned, shifted)


def test_warp_access_patterns():
    col = swizzle.warp_access("down a column", 8, 5)
    assert np.array_equal(col[:, 0], np.arange(32)) and np.all(col[:, 1] == 5)
    ld = swizzle.warp_access("ldmatrix.x4 (8×8 matrices)", 8, 2)
    assert np.array_equal(ld[:, 0], np.arange(32) % 16) and np.array_equal(ld[:, 1], 2 + np.arange(32) // 16)
    with pytest.raises(ValueError):
        swizzle.warp_access("diagonal", 8)
    with pytest.raises(ValueError):
        swizzle.explore("128B", 16, "down a column")  # 32 threads need 32 rows


def test_swizzle_widget_reports_conflicts():
    box = swizzle.swizzle_widget(mode="none")
    mode_w = box.children[0].children[0]
    assert "8-way" in box.children[3].value
    mode_w.value = "128B"
    assert "conflict-free" in box.children[3].value
    mode_w.value = "32B"
    assert "rows of 32 B" in box.children[3].value and "conflict-free" in box.children[3].value


def test_swizzle_placement_agrees_with_the_emulators_tma():
    tma = pytest.importorskip("helpers.hopper.tma")
    for mode, sw in (("32B", tensormap.Swizzle.B32), ("64B", tensormap.Swizzle.B64),
                     ("128B", tensormap.Swizzle.B128)):
        span = swizzle.SPAN[mode]
        rows = 64
        cols = span // 2
        src = rng.permutation(rows * cols).astype(np.uint16).reshape(rows, cols)  # every chunk different
        tmap = tensormap.for_matrix((rows, cols), tensormap.DataType.UINT16, rows, cols, swizzle=sw)
        smem = np.asarray(tma.load_tile(tmap, src, (0, 0)), dtype=np.uint8).reshape(-1)
        where = swizzle.chunk_placement(rows, span, mode)
        chunks = src.view(np.uint8).reshape(rows, span // 16, 16)
        for r in range(rows):
            for c in range(span // 16):
                o = where[r, c]
                assert np.array_equal(smem[o:o + 16], chunks[r, c]), f"{mode}: row {r} chunk {c}"


# -----------------------------------------------------------------------------------------------------------
# Lesson 01 · tensor-map builder
# -----------------------------------------------------------------------------------------------------------
def test_parse_ints():
    assert tensormap_builder.parse_ints("64, 64", "box") == (64, 64)
    assert tensormap_builder.parse_ints("0x10 32;8", "x") == (16, 32, 8)
    with pytest.raises(ValueError, match="box"):
        tensormap_builder.parse_ints("64, sixty-four", "box")


def test_the_course_a_map_is_accepted():
    v = tensormap_builder.evaluate(tensormap_builder.TensorMapSpec())
    assert v.ok and v.rule == "" and v.tmap.box_bytes == 8192
    assert "8,192 bytes" in v.facts[0] and "16,384 boxes" in v.facts[1] and "1024-byte" in v.facts[2]


BREAKS = [
    (dict(global_strides=(16384, 16384)), "length"),
    (dict(global_strides=(16386,)), "stride-alignment"),
    (dict(box_dim=(300, 64)), "box-range"),
    (dict(box_dim=(100, 64)), "box-inner-multiple-of-16"),
    (dict(box_dim=(128, 64)), "box-inner-exceeds-swizzle"),
    (dict(address=0x7F3A_0000_0008), "address-alignment"),
    (dict(element_strides=(9, 1)), "element-stride-range"),
    (dict(dtype="UINT16", oob_fill="NAN_REQUEST_ZERO_FMA"), "oob-nan-needs-float"),
    (dict(swizzle="B128_ATOM_32B"), "swizzle-unsupported"),
    (dict(rank=3), "length"),
    (dict(interleave="B16"), "rank-interleave"),
    (dict(dtype="U4_16_ALIGN8B"), "dtype-unsupported"),
]


@pytest.mark.parametrize("change,rule", BREAKS, ids=[r for _, r in BREAKS])
def test_each_try_it_yourself_break_is_rejected_with_its_rule(change, rule):
    v = tensormap_builder.evaluate(tensormap_builder.with_changes(tensormap_builder.TensorMapSpec(), **change))
    assert not v.ok and v.rule == rule and v.message and not v.message.startswith("[")


def test_lenient_driver_cases_are_accepted_with_a_note():
    spec = tensormap_builder.TensorMapSpec()
    v = tensormap_builder.evaluate(tensormap_builder.with_changes(spec, element_strides=(2, 1)))
    assert v.ok and any("ignored" in f for f in v.facts)
    v = tensormap_builder.evaluate(tensormap_builder.with_changes(spec, element_strides=(1, 2)))
    assert v.ok and v.tmap.box_bytes == 64 * 32 * 2


@pytest.mark.parametrize("trial", range(5))
def test_footprint_counts_match_a_brute_force_mask(trial):
    d0, d1 = (int(x) for x in rng.integers(1, 300, size=2))
    b0, b1 = int(rng.choice([8, 16, 64])), int(rng.integers(1, 129))
    e1 = int(rng.integers(1, 9))
    spec = tensormap_builder.TensorMapSpec(dtype="BFLOAT16", global_dim=(d0, d1), global_strides=(16 * d0,),
                                           box_dim=(b0, b1), element_strides=(1, e1), swizzle="NONE")
    c = (int(rng.integers(-80, d0 + 20)), int(rng.integers(-80, d1 + 20)))
    f = tensormap_builder.footprint(spec, c)
    cols = c[0] + np.arange(b0)
    rows = c[1] + e1 * np.arange(-(-b1 // e1))
    inside = ((cols >= 0) & (cols < d0))[None, :] & ((rows >= 0) & (rows < d1))[:, None]
    assert (f.inside, f.outside) == (int(inside.sum()), int((~inside).sum()))
    assert f.inside + f.outside == math.prod(tensormap_builder.encode(spec).smem_box_dim)


def test_c_call_spells_the_driver_names():
    spec = tensormap_builder.with_changes(tensormap_builder.TensorMapSpec(), l2_promotion="L2_128B",
                                         interleave="B32", swizzle="B64")
    text = tensormap_builder.c_call(spec)
    for name in ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "CU_TENSOR_MAP_INTERLEAVE_32B", "CU_TENSOR_MAP_SWIZZLE_64B",
                 "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "{16384}"):
        assert name in text


def test_builder_widget_gives_the_verdict_in_words():
    box = tensormap_builder.tensormap_builder_widget()
    fields = box.children[0].children[0].children
    stride_w = next(f for f in fields if f.description == "globalStrides")
    coord_w = next(f for f in fields if f.description == "load at coords")
    verdict = box.children[1]
    assert "accept" in verdict.value
    coord_w.value = "8160, 8160"
    assert "1,024 elements from the tensor, 3,072 filled" in verdict.value
    stride_w.value = "16386"
    assert "reject" in verdict.value and "stride-alignment" in verdict.value
    stride_w.value = "sixteen"
    assert "Cannot read" in verdict.value


# -----------------------------------------------------------------------------------------------------------
# the quick checks' answers, re-derived
# -----------------------------------------------------------------------------------------------------------
def test_lesson00_answers_follow_from_the_plan():
    p = tiles.TilePlan()
    g = tiles.gemm_costs(8192, 8192, 8192)
    assert lesson00.blocks.right == p.blocks
    assert lesson00.k_steps.right == p.k_steps
    assert lesson00.wgmma_per_step.right == p.wgmma_per_step
    assert lesson00.accumulators.right == p.accumulators_per_thread
    assert lesson00.step_bytes.right == p.smem_per_stage
    assert lesson00.intensity.right == g.intensity
    assert round(tiles.ridge_point()) == lesson00.ridge.right
    assert lesson00.edge_blocks.right == tiles.TilePlan(3000, 3000, 8192).blocks
    assert tiles.tile_costs(p).intensity < tiles.ridge_point()  # "memory-bound"
    assert lesson00.lone_block.judge("memory-bound")[0]
    # the plausible wrong answers are what the common mistakes compute
    assert 4096 in lesson00.intensity.wrong  # forgot to write C
    assert tiles.gemm_costs(8192, 8192, 8192, out_bytes=0).intensity == 4096
    assert 2197 in lesson00.edge_blocks.wrong and (3000 / 64) ** 2 == pytest.approx(2197.27, abs=0.01)


def test_ridge_quiz_accepts_close_values_and_says_which_way():
    assert lesson00.ridge.judge("295.2")[0] and lesson00.ridge.judge("295")[0]
    ok, msg = lesson00.ridge.judge("0.0034")
    assert not ok and "too low" in msg
    ok, msg = lesson00.ridge.judge("ridge")
    assert not ok and "not a number" in msg


def test_lesson01_answers_follow_from_the_emulator():
    tmap = tensormap_builder.encode(tensormap_builder.TensorMapSpec())
    padded = tensormap_builder.encode(tensormap_builder.TensorMapSpec(global_dim=(3000, 8192),
                                                                       global_strides=(3008 * 2,)))
    assert lesson01.row_stride.right == padded.global_strides[0]
    assert 3000 * 2 in lesson01.row_stride.wrong  # forgot the padding
    assert lesson01.strides.right == len(tensormap_builder.encode(tensormap_builder.TensorMapSpec(
        rank=3, global_dim=(64, 64, 4), global_strides=(128, 8192), box_dim=(64, 64, 1),
        element_strides=(1, 1, 1))).global_strides)
    assert lesson01.oob_bytes.right == tmap.box_bytes
    s = tiles.block_step(tiles.TilePlan(), 3, 0, 5)
    assert lesson01.coords.judge(f"{s.tma_a[0]}, {s.tma_a[1]}")[0]
    assert swizzle.chunk_placement(12, 128, "128B")[11, 5] % 128 // 16 == lesson01.swizzle_chunk.right
    ok = tensormap_builder.evaluate(tensormap_builder.TensorMapSpec(box_dim=(32, 64), swizzle="B64"))
    too_big = tensormap_builder.evaluate(tensormap_builder.TensorMapSpec(box_dim=(40, 64), swizzle="B64"))
    assert ok.ok and not too_big.ok and lesson01.box_limit.right == 32
    c = swizzle.bank_conflicts(np.r_[np.arange(8) * 128, np.arange(24) * 16 % 128 + 1024])
    assert c.wavefronts[0] == lesson01.conflicts.right


def test_coordinate_quiz_explains_the_usual_mistakes():
    ok, msg = lesson01.coords.judge("5, 3")
    assert not ok and "element offsets" in msg
    ok, msg = lesson01.coords.judge("192, 320")
    assert not ok and "innermost" in msg
    ok, msg = lesson01.coords.judge("(320, 192)")
    assert ok


def test_choice_quizzes_explain_each_wrong_choice():
    for quiz in (lesson01.store_fence, lesson01.store_wait):
        assert quiz.right in quiz.choices
        for wrong in quiz.wrong:
            ok, msg = quiz.judge(wrong)
            assert not ok and "is not it" not in msg, f"no reason given for {wrong!r}"
