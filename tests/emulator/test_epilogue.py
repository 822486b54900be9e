"""helpers.hopper.epilogue: bf16 rounding, the swizzled sub-tile (checked against the silicon-validated TMA model), the
store through an emulated TMA, bank offsets, and the ordering model's rules one by one. The H100 capture
(tests/data/lab56_h100.json, from tools/h100/epilogue.py) is replayed when present."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ml_dtypes import bfloat16

from helpers.course.widgets import swizzle
from helpers.hopper import epilogue, tensormap, tma, wgmma

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "lab56_h100.json"
rng = np.random.default_rng(9)


# ------------------------------------------------------------------------------------------- rounding
def test_rounding_matches_ml_dtypes_on_every_finite_pattern_class():
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[~np.isnan(x)]
    assert np.array_equal(epilogue.to_bf16_bits(x), x.astype(bfloat16).view(np.uint16))


def test_rounding_ties_and_nan():
    x = np.array([0x3F808000, 0x3F818000, 0x7F7F8000, 0x00008000, 0x7FC00000, 0xFFC00001], np.uint32).view(np.float32)
    assert epilogue.to_bf16_bits(x).tolist() == [0x3F80, 0x3F82, 0x7F80, 0x0000, 0x7FFF, 0x7FFF]
    assert epilogue.truncate_bf16_bits(x[:2]).tolist() == [0x3F80, 0x3F81]
    assert epilogue.bf16_bits_to_f32(np.array([0x3F80], np.uint16)).tolist() == [1.0]


# ------------------------------------------------------------------------------------------- layout
def test_subtile_offset_is_a_bijection_onto_the_buffer():
    r, c = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    off = epilogue.subtile_offset(r, c)
    assert sorted(off.ravel().tolist()) == list(range(0, 8192, 2))


def test_stage_subtile_is_what_a_swizzled_tma_load_of_the_rounded_tile_writes():
    """Independent of the formula: the TMA model (bit-exact against the H100) lays out the rounded tile the same."""
    frags = rng.standard_normal((128, 32)).astype(np.float32)
    tile = wgmma.fragments_to_tile(frags, 64)
    rounded = epilogue.to_bf16_bits(tile).view(bfloat16)
    tmap = tensormap.for_matrix((64, 64), tensormap.DataType.BFLOAT16, 64, 64, tensormap.Swizzle.B128)
    assert np.array_equal(epilogue.stage_subtile(frags), tma.load_tile(tmap, rounded, (0, 0)))
    assert np.array_equal(epilogue.subtile_from_image(epilogue.stage_subtile(frags)), rounded.view(np.uint16))


def test_store_subtile_writes_the_rounded_tile_and_clips():
    frags = rng.standard_normal((128, 32)).astype(np.float32)
    C = np.full((100, 120), np.nan, bfloat16)
    epilogue.store_subtile(epilogue.stage_subtile(frags), C, 64, 64)
    want = epilogue.to_bf16_bits(wgmma.fragments_to_tile(frags, 64))
    assert np.array_equal(C.view(np.uint16)[64:, 64:], want[:36, :56])
    untouched = np.ones(C.shape, bool)
    untouched[64:, 64:] = False
    assert np.isnan(C.astype(np.float32)[untouched]).all()


def test_variants_for_wrong_answers():
    frags = rng.standard_normal((128, 32)).astype(np.float32)
    plain = epilogue.stage_subtile(frags, swizzle=False)
    assert not np.array_equal(plain, epilogue.stage_subtile(frags))
    assert np.array_equal(plain.view(np.uint16).reshape(64, 64), epilogue.to_bf16_bits(wgmma.fragments_to_tile(frags,
                                                                                                               64)))
    with pytest.raises(ValueError):
        epilogue.stage_subtile(np.zeros((128, 16)))


def test_bank_offsets():
    for warp in range(4):
        for j in range(0, 32, 2):
            assert swizzle.bank_conflicts(epilogue.warp_store_offsets(warp, j), 4).total == 1
            assert swizzle.bank_conflicts(epilogue.warp_store_offsets(warp, j, swizzle=False), 4).total == 8
    with pytest.raises(ValueError):
        epilogue.warp_store_offsets(0, 1)


def test_stmatrix_rows_cover_the_warps_rows_once():
    for warp in range(4):
        rows = np.concatenate([epilogue.stmatrix_offsets(warp, i) for i in range(4)])
        assert len(set(rows.tolist())) == 128  # 16 rows × 8 chunks of 16 bytes
        r, c = np.meshgrid(np.arange(16 * warp, 16 * warp + 16), np.arange(0, 64, 8), indexing="ij")
        assert set(rows.tolist()) == set(epilogue.subtile_offset(r, c).ravel().tolist())
        assert swizzle.bank_conflicts(epilogue.stmatrix_offsets(warp, 0), 16).total == 4


# ------------------------------------------------------------------------------------------- the ordering model
def test_reference_programs():
    r = epilogue.run(lambda s: epilogue.LAB5_OPS(s, 2), 4, 2)
    assert r.ok and r.in_flight_after_store == [1, 2, 2, 2] and [s.sub for s in r.stores] == [0, 1, 2, 3]
    r = epilogue.run(lambda s: epilogue.LAB6_OPS(s, 2), 4, 2, tiles=3)
    assert r.ok and r.in_flight_at_mainloop == [2, 2]
    data = [rng.integers(0, 256, 8192).astype(np.uint8) for _ in range(4)]
    r = epilogue.run(lambda s: epilogue.LAB5_OPS(s, 3), 4, 3, data=data)
    assert np.array_equal(r.C, np.concatenate([epilogue.subtile_from_image(d) for d in data], axis=1))


def _first_rule(ops, subtiles=4, buffers=2, **kw):
    with pytest.raises(epilogue.EpilogueError) as info:
        epilogue.run(ops, subtiles, buffers, **kw)
    return info.value.rule


def test_each_rule():
    L5 = epilogue.LAB5_OPS
    assert _first_rule(lambda s: [o for o in L5(s, 2) if o != ("fence",)]) == "unfenced-store"
    assert _first_rule(lambda s: [("write", s % 2), ("bar",), ("fence",), ("store", s % 2), ("commit",)]) \
        == "fence-after-barrier"
    assert _first_rule(lambda s: [("write", s % 2), ("fence",), ("store", s % 2), ("commit",)]) == "unsynced-store"
    assert _first_rule(lambda s: [o for o in L5(s, 2) if o[0] != "wait_read"]) == "overwrite-in-flight"
    assert _first_rule(lambda s: [("wait_read", 1)] + [o for o in L5(s, 2) if o[0] != "wait_read"][1:]
                       if s >= 2 else L5(s, 2)) == "overwrite-in-flight"  # the barrier after the wait dropped
    assert _first_rule(lambda s: [o for o in L5(s, 2) if o != ("commit",)]) == "overwrite-in-flight"
    assert _first_rule(lambda s: [o for o in L5(s, 2) if o != ("commit",)], subtiles=1) == "exit-in-flight"
    assert _first_rule(lambda s: L5(s, 2), final=()) == "exit-in-flight"
    assert _first_rule(lambda s: [("store", s % 2)]) == "store-unwritten"
    assert _first_rule(lambda s: [("write", 2)]) == "bad-op"
    assert _first_rule(lambda s: [("jump",)]) == "bad-op"
    assert _first_rule(lambda s: [("wait_read", 99)]) == "bad-op"
    assert _first_rule(lambda s: [("fence", 1)]) == "bad-op"
    assert _first_rule(lambda s: L5(s, 2), tiles=2) == "overwrite-in-flight"  # Lab 5's body in a persistent loop


def test_not_strict_lists_every_broken_rule_and_shows_the_race_in_c():
    data = [np.full(8192, s + 1, np.uint8) for s in range(4)]
    r = epilogue.run(lambda s: [o for o in epilogue.LAB5_OPS(s, 2) if o[0] != "wait_read"], 4, 2, data=data,
                     strict=False)
    assert [v.rule for v in r.violations] == ["overwrite-in-flight"] * 2 and not r.ok
    assert [int(r.C[0, 64 * s]) & 0xFF for s in range(4)] == [3, 4, 3, 4]  # sub-tiles 0 and 1 got 2's and 3's


# ------------------------------------------------------------------------------------------- the H100 capture
def _fixture() -> dict:
    if not FIXTURE.exists():
        pytest.skip("tests/data/lab56_h100.json not captured yet (tools/h100/run.sh epilogue on an H100)")
    return json.loads(FIXTURE.read_text())


def test_h100_rounding_replayed():
    data = _fixture()["rounding"]
    x = np.array(data["inputs"], np.uint32).view(np.float32)
    assert np.array_equal(epilogue.to_bf16_bits(x), np.array(data["bits"], np.uint16))


def test_h100_epilogue_image_and_store_replayed():
    for case in _fixture()["epilogue"]["cases"]:
        frags = np.array(case["frags"], np.uint32).view(np.float32).reshape(128, 32)
        image = np.frombuffer(bytes.fromhex(case["image"]), np.uint8)
        assert np.array_equal(epilogue.stage_subtile(frags), image)
        C = np.full(tuple(case["shape"]), 0xFFFF, np.uint16).view(bfloat16)  # the GPU poison
        epilogue.store_subtile(image, C, case["row0"], case["col0"])
        assert np.array_equal(C.view(np.uint16).reshape(-1), np.frombuffer(bytes.fromhex(case["c_bits"]), np.uint16))
