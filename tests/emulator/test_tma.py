"""TMA loads/stores and swizzle on random data, every element checked."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from helpers.hopper import tensormap as tm
from helpers.hopper import tma
from helpers.hopper.tensormap import DataType, Swizzle

rng = np.random.default_rng(1234)


@pytest.mark.parametrize("mode, span", [(Swizzle.B32, 32), (Swizzle.B64, 64), (Swizzle.B128, 128)])
def test_swizzle_is_a_permutation_within_rows(mode, span):
    off = np.arange(0, 4096, 16)
    sw = tma.swizzled_offset(off, mode)
    assert sorted(sw.tolist()) == off.tolist()
    assert np.array_equal(sw // span, off // span)  # chunks stay in their span-wide row
    assert np.array_equal(tma.swizzled_offset(sw, mode), off)  # involution


def test_128b_swizzle_matches_measured_rule():
    for r in range(64):
        for c in range(8):
            assert tma.swizzle_chunk(r, c, Swizzle.B128) == c ^ (r % 8)
            assert tma.swizzle_chunk(r, c % 4, Swizzle.B64) == (c % 4) ^ ((r // 2) % 4)
            assert tma.swizzle_chunk(r, c % 2, Swizzle.B32) == (c % 2) ^ ((r // 4) % 2)


@pytest.mark.parametrize("swizzle", [Swizzle.NONE, Swizzle.B32, Swizzle.B64, Swizzle.B128])
def test_load_random_tile_every_element(swizzle):
    rows, cols = 96, 80
    a = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)
    bc = {Swizzle.NONE: 64, Swizzle.B32: 16, Swizzle.B64: 32, Swizzle.B128: 64}[swizzle]
    m = tm.for_matrix((rows, cols), DataType.BFLOAT16, 24, bc, swizzle, row_stride_bytes=160)
    g = np.zeros((rows, 80), ml_dtypes.bfloat16)
    g[:, :cols] = a
    for coords in [(0, 0), (16, 8), (-8, -5), (72, 90), (200, 0)]:
        img = tma.load_tile(m, g, coords)
        dense = tma.unswizzle_image(img, swizzle)
        box = dense.view(ml_dtypes.bfloat16).reshape(24, -1)[:, :bc] if swizzle == Swizzle.NONE else \
            dense.view(np.uint8).reshape(24, m.swizzle_span)[:, :bc * 2].copy().view(ml_dtypes.bfloat16)
        x0, y0 = coords
        for r in range(24):
            for c in range(bc):
                y, x = y0 + r, x0 + c
                want = a[y, x] if 0 <= y < rows and 0 <= x < cols else 0
                assert box[r, c] == want or (np.isnan(want) and np.isnan(box[r, c]))
        assert tma.tx_bytes(m) == 24 * bc * 2


def test_store_roundtrip_and_oob_not_written():
    rows, cols = 40, 72
    m = tm.for_matrix((rows, cols), DataType.FLOAT32, 16, 32, Swizzle.B128, row_stride_bytes=288)
    src = rng.standard_normal((rows, cols)).astype(np.float32)
    img = tma.load_tile(m, src, (32, 16))
    out = np.full((rows, cols), -1.0, np.float32)
    tma.store_tile(m, img, out, (32, 16))
    written = np.zeros_like(out, bool)
    written[16:32, 32:64] = True
    assert np.array_equal(out[written], src[written]) and (out[~written] == -1).all()
    out2 = np.full((rows, cols), -1.0, np.float32)
    tma.store_tile(m, img, out2, (64, 32))  # partly out of bounds: only the in-bounds part is written
    assert np.array_equal(out2[32:40, 64:72], src[16:24, 32:40])
    assert (out2[:32] == -1).all() and (out2[:, :64] == -1).all()


def test_oob_nan_fill_and_zero_fill():
    m = tm.for_matrix((8, 64), DataType.BFLOAT16, 8, 64, Swizzle.B128, oob_fill=tm.OOBFill.NAN_REQUEST_ZERO_FMA)
    img = tma.load_tile(m, np.ones((8, 64), ml_dtypes.bfloat16), (0, 4))
    vals = tma.unswizzle_image(img, Swizzle.B128).view(np.uint16).reshape(8, 64)
    assert (vals[:4] == 0x3F80).all() and (vals[4:] == 0x7FF7).all()
    m0 = tm.for_matrix((8, 64), DataType.BFLOAT16, 8, 64, Swizzle.B128)
    assert not tma.load_tile(m0, np.ones((8, 64), ml_dtypes.bfloat16), (64, 0)).any()


def test_hardware_faults_are_errors():
    m = tm.for_matrix((64, 64), DataType.BFLOAT16, 8, 64, Swizzle.B128)
    g = np.zeros((64, 64), ml_dtypes.bfloat16)
    with pytest.raises(tma.TMAError) as e:
        tma.load_tile(m, g, (3, 0))
    assert e.value.rule == "coord0-alignment" and e.value.value == 3
    with pytest.raises(tma.TMAError) as e:
        tma.load_tile(m, g, (0, 0), smem_address=48)
    assert e.value.rule == "smem-alignment"
    with pytest.raises(tma.TMAError) as e:
        tma.store_tile(m, np.zeros(1024, np.uint8), g, (0, -1))
    assert e.value.rule == "store-negative-coord"


def test_narrow_rows_take_a_whole_swizzle_span():
    m = tm.for_matrix((64, 64), DataType.BFLOAT16, 5, 8, Swizzle.B128)  # 16-byte rows, 128B swizzle
    assert tma.row_pitch(m) == 128 and tma.smem_footprint(m) == 5 * 128 and tma.tx_bytes(m) == 80
    cm = tma.chunk_map(m)
    assert [c.smem_offset for c in cm] == [r * 128 + 16 * (r % 8) for r in range(5)]
    assert cm[1].banks == (4, 5, 6, 7)  # byte 144
