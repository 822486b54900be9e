"""Tensor-map encoding rules, derived facts and messages."""

from __future__ import annotations

import pytest

from helpers.hopper import tensormap as tm
from helpers.hopper.tensormap import DataType, Interleave, Swizzle


def course_map(**kw):
    args = dict(dtype=DataType.BFLOAT16, rank=2, global_address=1 << 20, global_dim=(8192, 8192),
                global_strides=(16384,), box_dim=(64, 64), element_strides=(1, 1), swizzle=Swizzle.B128)
    args.update(kw)
    return tm.encode_tiled(**args)


def test_enums_mirror_the_driver():
    from cuda.bindings import driver as d

    for ours, theirs in [(DataType, d.CUtensorMapDataType), (Interleave, d.CUtensorMapInterleave),
                         (Swizzle, d.CUtensorMapSwizzle), (tm.L2Promotion, d.CUtensorMapL2promotion),
                         (tm.OOBFill, d.CUtensorMapFloatOOBfill)]:
        assert sorted(int(m) for m in ours) == sorted(int(m) for m in theirs)
    assert DataType.BFLOAT16 == 9 and Swizzle.B128 == 3 and Interleave.B32 == 2


def test_course_map_derived_facts():
    m = course_map()
    assert m.element_size == 2 and m.inner_box_bytes == 128 and m.box_bytes == 8192 and m.swizzle_span == 128
    assert m.byte_strides == (2, 16384) and m.smem_box_dim == (64, 64)
    with pytest.raises(AttributeError):
        m.rank = 3  # frozen


@pytest.mark.parametrize("kw, rule, value", [
    (dict(global_address=(1 << 20) + 8), "address-alignment", (1 << 20) + 8),
    (dict(global_strides=(16392,)), "stride-alignment", 16392),
    (dict(global_strides=(1 << 40,)), "stride-range", 1 << 40),
    (dict(global_dim=(0, 8192)), "dim-range", 0),
    (dict(global_dim=((1 << 32) + 1, 8192)), "dim-range", (1 << 32) + 1),
    (dict(box_dim=(64, 257)), "box-range", 257),
    (dict(box_dim=(12, 64)), "box-inner-multiple-of-16", 24),
    (dict(box_dim=(128, 64)), "box-inner-exceeds-swizzle", 256),
    (dict(element_strides=(1, 9)), "element-stride-range", 9),
    (dict(rank=6, global_dim=(8,) * 6, global_strides=(16,) * 5, box_dim=(8,) * 6, element_strides=(1,) * 6),
     "rank", 6),
    (dict(interleave=Interleave.B16), "rank-interleave", 2),
    (dict(swizzle=Swizzle.B128_ATOM_64B), "swizzle-unsupported", Swizzle.B128_ATOM_64B),
    (dict(swizzle=9), "swizzle", 9),
    (dict(dtype=DataType.U4_16_ALIGN8B), "dtype-unsupported", DataType.U4_16_ALIGN8B),
    (dict(dtype=DataType.UINT16, oob_fill=tm.OOBFill.NAN_REQUEST_ZERO_FMA), "oob-nan-needs-float",
     DataType.UINT16),
    (dict(global_strides=(16384, 1)), "length", 2),
    (dict(rank=3, global_dim=(64, 256, 8), global_strides=(128, 32768), box_dim=(64, 256, 8),
          element_strides=(1, 1, 1)), "box-too-large", 262144),
])
def test_rejections_name_rule_and_value(kw, rule, value):
    with pytest.raises(tm.TensorMapError) as e:
        course_map(**kw)
    assert e.value.rule == rule and e.value.value == value
    assert isinstance(e.value, ValueError) and rule in str(e.value) and len(str(e.value)) > 40


def test_driver_leniencies_measured_on_h100():
    # strides of 0, strides shorter than a row, 2**32 elements, address 0: all accepted by driver 580
    course_map(global_strides=(0,))
    course_map(global_strides=(16,))
    course_map(global_dim=(1 << 32, 1))
    course_map(global_address=0)
    # 32-byte interleave accepts any swizzle (the documentation says 32B only)
    tm.encode_tiled(DataType.BFLOAT16, 3, 1 << 20, (16, 10, 10), (32, 320), (16, 4, 4), (1, 1, 1),
                    Interleave.B32, Swizzle.B128)
    # the size limit counts box / element stride rounded down, dim 0 included
    tm.encode_tiled(DataType.BFLOAT16, 3, 0, (4096,) * 3, (8192, 8192 * 4096), (64, 256, 8), (2, 1, 1))


def test_for_matrix_is_innermost_first():
    m = tm.for_matrix((300, 200), DataType.BFLOAT16, box_rows=64, box_cols=64, swizzle=Swizzle.B128,
                      row_stride_bytes=416)
    assert m.global_dim == (200, 300) and m.global_strides == (416,) and m.box_dim == (64, 64)
    with pytest.raises(tm.TensorMapError) as e:
        tm.for_matrix((300, 100), DataType.BFLOAT16, 64, 64, Swizzle.B128)  # 200-byte rows
    assert e.value.rule == "stride-alignment"
