"""Descriptors, fragment layout and mma_async on random data, every element checked."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from helpers.hopper import wgmma as wg
from helpers.hopper.tensormap import Swizzle

rng = np.random.default_rng(99)


def test_descriptor_roundtrip_random():
    for _ in range(500):
        d = wg.Descriptor(int(rng.integers(0, 1 << 14)) * 16, int(rng.integers(0, 1 << 14)) * 16,
                          int(rng.integers(0, 1 << 14)) * 16,
                          [Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128][rng.integers(4)],
                          int(rng.integers(0, 8)))
        assert wg.decode_descriptor(d.encode()) == d


def test_descriptor_bits_match_measured_example():
    desc = wg.make_descriptor(0x400, 16, 1024, Swizzle.B128)
    assert desc & 0x3FFF == 0x40 and (desc >> 16) & 0x3FFF == 1 and (desc >> 32) & 0x3FFF == 64
    assert desc >> 62 == 1
    with pytest.raises(wg.WGMMAError) as e:
        wg.make_descriptor(8, 16, 1024, Swizzle.B128)
    assert e.value.rule == "start_address"


@pytest.mark.parametrize("n", list(range(8, 257, 8)))
def test_fragment_maps_are_bijections(n):
    rows, cols = wg.fragment_maps(n)
    seen = np.zeros((64, n), int)
    np.add.at(seen, (rows, cols), 1)
    assert (seen == 1).all()
    for t in range(0, 128, 7):
        for j in range(0, n // 2, 3):
            r, c = wg.element_of(t, j, n)
            assert (r, c) == (rows[t, j], cols[t, j]) and wg.thread_register_of(r, c, n) == (t, j)
    tile = rng.standard_normal((64, n)).astype(np.float32)
    assert np.array_equal(wg.fragments_to_tile(wg.tile_to_fragments(tile, n), n), tile)


def test_notes_layout_example():
    # thread 0: reg 0 -> (0,0), reg 2 -> (8,0), reg 4 -> (0,8); thread 32 starts at row 16
    assert wg.element_of(0, 2, 64) == (8, 0) and wg.element_of(0, 4, 64) == (0, 8)
    assert wg.element_of(5, 1, 64) == (1, 3) and wg.element_of(32, 0, 64) == (16, 0)


@pytest.mark.parametrize("n", [8, 24, 64, 136, 256])
@pytest.mark.parametrize("swizzle", [Swizzle.B128, Swizzle.B64, Swizzle.B32])
def test_mma_reads_tma_layout_every_k_step(n, swizzle):
    span = {Swizzle.B128: 128, Swizzle.B64: 64, Swizzle.B32: 32}[swizzle]
    kt = span // 2  # bf16 K elements per swizzled row
    a = rng.integers(-4, 5, (64, kt)).astype(np.float32)
    b = rng.integers(-4, 5, (n, kt)).astype(np.float32)
    smem = np.zeros(96 * 1024, np.uint8)
    off_b = 16384
    wg.write_kmajor_tile(smem, 0, a.astype(ml_dtypes.bfloat16), swizzle)
    wg.write_kmajor_tile(smem, off_b, b.astype(ml_dtypes.bfloat16), swizzle)
    acc = rng.integers(-50, 50, (128, n // 2)).astype(np.float32)
    for k in range(kt // 16):
        da = wg.make_descriptor(32 * k, 16, 8 * span, swizzle)
        db = wg.make_descriptor(off_b + 32 * k, 16, 8 * span, swizzle)
        want = a[:, 16 * k:16 * k + 16] @ b[:, 16 * k:16 * k + 16].T + wg.fragments_to_tile(acc, n)
        got = wg.mma_async(smem, da, db, n, accum=acc)
        assert np.array_equal(wg.fragments_to_tile(got, n), want)
        assert np.array_equal(wg.mma_async(smem, da, db, n, accum=acc, scale_d=0),
                              wg.tile_to_fragments(want - wg.fragments_to_tile(acc, n), n))


def test_wrong_k_step_reads_wrong_columns():
    a = rng.integers(-4, 5, (64, 64)).astype(np.float32)
    b = rng.integers(-4, 5, (64, 64)).astype(np.float32)
    smem = np.zeros(32768, np.uint8)
    wg.write_kmajor_tile(smem, 0, a, Swizzle.B128)
    wg.write_kmajor_tile(smem, 8192, b, Swizzle.B128)
    # stepping the start address by 16 elements (32 bytes) is right; by 16 bytes is a classic bug
    right = wg.mma_async(smem, wg.make_descriptor(32, 16, 1024, Swizzle.B128),
                         wg.make_descriptor(8192 + 32, 16, 1024, Swizzle.B128), 64)
    wrong = wg.mma_async(smem, wg.make_descriptor(16, 16, 1024, Swizzle.B128),
                         wg.make_descriptor(8192 + 16, 16, 1024, Swizzle.B128), 64)
    assert np.array_equal(wg.fragments_to_tile(right, 64), a[:, 16:32] @ b[:, 16:32].T)
    assert not np.array_equal(right, wrong)
    assert np.array_equal(wg.fragments_to_tile(wrong, 64), a[:, 8:24] @ b[:, 8:24].T)


def test_h100_rounding_differs_from_round_to_nearest():
    # 2**24 + 1 + 1 in fp32: exact sum 16777218 is representable; 2**24 + 1 alone rounds toward zero
    smem = np.zeros(16384, np.uint8)
    a = np.zeros((64, 16), np.float32)
    b = np.zeros((8, 16), np.float32)
    a[:, 0], b[:, 0] = 1.0, 1.0
    wg.write_kmajor_tile(smem, 0, a, Swizzle.B32)
    wg.write_kmajor_tile(smem, 4096, b, Swizzle.B32)
    acc = np.full((128, 4), 2.0**24, np.float32)
    da, db = wg.make_descriptor(0, 16, 256, Swizzle.B32), wg.make_descriptor(4096, 16, 256, Swizzle.B32)
    h = wg.mma_async(smem, da, db, 8, accum=acc)
    e = wg.mma_async(smem, da, db, 8, accum=acc, numerics="exact")
    assert (h == 2.0**24).all() and (e == 2.0**24).all()
    acc3 = np.full((128, 4), 2.0**24 + 2, np.float32)
    assert (wg.mma_async(smem, da, db, 8, accum=acc3) == 2.0**24 + 2).all()  # 2**24+3 truncates down
    assert (wg.mma_async(smem, da, db, 8, accum=acc3, numerics="exact") == 2.0**24 + 4).all()  # ties to even


def test_bad_n_and_range():
    with pytest.raises(wg.WGMMAError):
        wg.mma_async(np.zeros(1024, np.uint8), 0, 0, 12)
    with pytest.raises(wg.WGMMAError) as e:
        wg.mma_async(np.zeros(1024, np.uint8), wg.make_descriptor(0, 16, 1024, Swizzle.B128), 0, 8)
    assert e.value.rule == "smem-range"


def test_dot_h100_any_order_is_the_terms_order():
    """dot_h100 adds the 17 truncated terms in its own order (k first, the accumulator last): bit for bit what
    adding them side by side gives, for bf16 factors of any exponent, zeros, infinities and NaNs, fp32 accumulators
    from tiny to huge."""
    r = np.random.default_rng(7)

    def bf16(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)

    for trial in range(60):
        n = int(r.choice([8, 64, 256]))
        wide = trial % 3 == 0
        a = bf16(r.standard_normal((64, 16)) * (2.0 ** r.integers(-140, 128, (64, 16)) if wide else 1.0))
        b = bf16(r.standard_normal((n, 16)) * (2.0 ** r.integers(-140, 128, (n, 16)) if wide else 1.0))
        c = (r.standard_normal((64, n)) * 2.0 ** r.integers(-150, 120, (64, n))).astype(np.float32).astype(np.float64)
        if trial % 4 == 1:
            a.flat[r.integers(0, a.size, 30)] = 0.0
            b[r.integers(0, n)] = 0.0
            c.flat[r.integers(0, c.size, 40)] = 0.0
        if trial % 5 == 2:
            a.flat[r.integers(0, a.size, 3)] = np.inf
            b.flat[r.integers(0, b.size, 3)] = -np.inf
            a.flat[r.integers(0, a.size, 2)] = np.nan
            c.flat[r.integers(0, c.size, 3)] = np.nan
        with np.errstate(all="ignore"):
            got = wg.dot_h100(a[:, None, :], b[None, :, :], c)
            want = wg._dot_h100_terms(a[:, None, :], b[None, :, :], c)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), trial
