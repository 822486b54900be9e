"""Tensor maps: a pure-numpy model of ``cuTensorMapEncodeTiled`` as the H100's driver checks it.

``encode_tiled`` takes the driver's arguments (dims innermost first, the rank-1 byte strides of dims 1..) and
either returns a frozen :class:`TensorMap` or raises :class:`TensorMapError` naming the rule broken, the
offending value and what to do about it. Its verdicts were checked against driver 580 on an H100
(``tests/data/tensormap_verdicts.json.gz``), including where the driver is more lenient than its documentation
(strides of 0, strides shorter than a row, dims up to 2**32, any swizzle with 32-byte interleave) or stricter
(the newer swizzle modes and packed 4/6-bit types are refused on compute capability 9.0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

__all__ = [
    "DataType", "Interleave", "Swizzle", "L2Promotion", "OOBFill", "TensorMapError", "TensorMap",
    "encode_tiled", "for_matrix", "element_size", "numpy_dtype", "swizzle_span", "SMEM_LIMIT",
]


class DataType(IntEnum):
    """``CUtensorMapDataType`` (same names and values as the driver, without the prefix)."""

    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    INT32 = 3
    UINT64 = 4
    INT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FLOAT32_FTZ = 10
    TFLOAT32 = 11
    TFLOAT32_FTZ = 12
    U4_16_ALIGN8B = 13  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B (names cannot start with a digit)
    U4_16_ALIGN16B = 14  # CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B
    U6_16_ALIGN16B = 15  # CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B


class Interleave(IntEnum):
    """``CUtensorMapInterleave``."""

    NONE = 0
    B16 = 1
    B32 = 2


class Swizzle(IntEnum):
    """``CUtensorMapSwizzle``. The three ``B128_ATOM_*`` modes exist in the CUDA 13 headers but the driver
    refuses them on an H100 (they are for newer GPUs)."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3
    B128_ATOM_32B = 4
    B128_ATOM_32B_FLIP_8B = 5
    B128_ATOM_64B = 6


class L2Promotion(IntEnum):
    """``CUtensorMapL2promotion``."""

    NONE = 0
    L2_64B = 1
    L2_128B = 2
    L2_256B = 3


class OOBFill(IntEnum):
    """``CUtensorMapFloatOOBfill``: out-of-bounds elements read as zero, or as NaN (float types only)."""

    NONE = 0
    NAN_REQUEST_ZERO_FMA = 1


SMEM_LIMIT = 228 * 1024  # the driver refuses boxes larger than this (measured: 233472 accepted, 234496 refused)
_ESIZE = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
_FLOAT_TYPES = {6, 7, 8, 9, 10, 11, 12}
_SPAN = {0: 0, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}
_NUMPY = {0: np.uint8, 1: np.uint16, 2: np.uint32, 3: np.int32, 4: np.uint64, 5: np.int64, 6: np.float16,
          7: np.float32, 8: np.float64, 10: np.float32, 11: np.float32, 12: np.float32}


def element_size(dtype: DataType | int) -> int:
    """Bytes per element of a (non-packed) tensor-map data type."""
    return _ESIZE[int(dtype)]


def numpy_dtype(dtype: DataType | int) -> np.dtype:
    """The numpy dtype the emulator uses for elements of ``dtype`` (``ml_dtypes.bfloat16`` for BFLOAT16)."""
    if int(dtype) == DataType.BFLOAT16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_NUMPY[int(dtype)])


def swizzle_span(swizzle: Swizzle | int) -> int:
    """Bytes in one swizzled row: 0 (no swizzle), 32, 64 or 128."""
    return _SPAN[int(swizzle)]


class RuleError(ValueError):
    """Something the hardware or driver refuses: ``rule`` is a short id a grader can test, ``value`` the offending
    value, and the message says it in plain words. The emulator's errors (tensor maps, TMA, WGMMA) are these."""

    def __init__(self, rule: str, value: object, message: str):
        super().__init__(f"[{rule}] {message}")
        self.rule = rule
        self.value = value


class TensorMapError(RuleError):
    """An argument ``cuTensorMapEncodeTiled`` would refuse (the driver returns CUDA_ERROR_INVALID_VALUE).

    ``rule`` is a short id (e.g. ``"stride-multiple-of-16"``), ``value`` the offending value.
    """


@dataclass(frozen=True)
class TensorMap:
    """Everything ``cuTensorMapEncodeTiled`` was given, plus derived facts. Sequences are innermost first."""

    dtype: DataType
    rank: int
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: Interleave = Interleave.NONE
    swizzle: Swizzle = Swizzle.NONE
    l2_promotion: L2Promotion = L2Promotion.NONE
    oob_fill: OOBFill = OOBFill.NONE

    @property
    def element_size(self) -> int:
        """Bytes per element."""
        return _ESIZE[int(self.dtype)]

    @property
    def byte_strides(self) -> tuple[int, ...]:
        """Byte stride of every dim, dim 0 included (= the element size)."""
        return (self.element_size, *self.global_strides)

    @property
    def smem_box_dim(self) -> tuple[int, ...]:
        """Elements a copy moves along each dim: ceil(box / element stride) for dims >= 1; dim 0 always moves
        ``box_dim[0]`` elements (the hardware ignores the element stride of dim 0)."""
        return (self.box_dim[0],) + tuple(-(-b // e) for b, e in zip(self.box_dim[1:], self.element_strides[1:],
                                                                          strict=True))

    @property
    def inner_box_bytes(self) -> int:
        """Bytes of one box row (dim 0) in shared memory."""
        return self.box_dim[0] * self.element_size

    @property
    def box_bytes(self) -> int:
        """Bytes one copy writes to shared memory, and adds to the mbarrier's transaction count
        (out-of-bounds elements included)."""
        return self.element_size * math.prod(self.smem_box_dim)

    @property
    def swizzle_span(self) -> int:
        """Bytes per swizzled row: 0, 32, 64 or 128."""
        return _SPAN[int(self.swizzle)]

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy dtype of one element."""
        return numpy_dtype(self.dtype)


def _enum(cls, value, rule, what):
    try:
        return cls(int(value))
    except ValueError:
        names = ", ".join(f"{m.name}={int(m)}" for m in cls)
        raise TensorMapError(rule, value, f"{what} = {value} is not a valid {cls.__name__}; use one of {names}.") \
            from None


def encode_tiled(dtype: DataType | int, rank: int, global_address: int, global_dim: Sequence[int],
                 global_strides: Sequence[int], box_dim: Sequence[int], element_strides: Sequence[int],
                 interleave: Interleave | int = Interleave.NONE, swizzle: Swizzle | int = Swizzle.NONE,
                 l2_promotion: L2Promotion | int = L2Promotion.NONE,
                 oob_fill: OOBFill | int = OOBFill.NONE) -> TensorMap:
    """Check the arguments of ``cuTensorMapEncodeTiled`` exactly as the H100's driver does; return the map.

    ``global_dim``, ``box_dim`` and ``element_strides`` have ``rank`` entries and ``global_strides`` ``rank - 1``
    (the byte strides of dims 1..rank-1), all innermost first. Raises :class:`TensorMapError` on the first rule
    broken.
    """
    E = TensorMapError
    d = int(dtype)
    if d not in range(16):
        raise E("dtype", dtype, f"tensor data type {dtype} is not a CUtensorMapDataType (0..15).")
    if d >= 13:
        raise E("dtype-unsupported", DataType(d),
                f"{DataType(d).name} (packed 4/6-bit values) is refused on an H100 (compute capability 9.0); "
                "these packed types need a newer GPU.")
    dtype = DataType(d)
    il = _enum(Interleave, interleave, "interleave", "interleave")
    if int(swizzle) in (4, 5, 6):
        raise E("swizzle-unsupported", Swizzle(int(swizzle)),
                f"swizzle {Swizzle(int(swizzle)).name} is refused on an H100 (compute capability 9.0); "
                "use NONE, B32, B64 or B128.")
    sw = _enum(Swizzle, swizzle, "swizzle", "swizzle")
    l2 = _enum(L2Promotion, l2_promotion, "l2-promotion", "L2 promotion")
    oob = _enum(OOBFill, oob_fill, "oob-fill", "out-of-bounds fill")
    rank = int(rank)
    if not 1 <= rank <= 5:
        raise E("rank", rank, f"rank = {rank}: a tensor map has 1 to 5 dimensions.")
    if il != Interleave.NONE and rank < 3:
        raise E("rank-interleave", rank,
                f"rank = {rank} with interleave {il.name}: interleaved layouts need rank 3 or more.")
    gd = tuple(int(x) for x in global_dim)
    gs = tuple(int(x) for x in global_strides)
    bd = tuple(int(x) for x in box_dim)
    es = tuple(int(x) for x in element_strides)
    for name, seq, n in (("global_dim", gd, rank), ("global_strides", gs, rank - 1), ("box_dim", bd, rank),
                         ("element_strides", es, rank)):
        if len(seq) != n:
            raise E("length", len(seq), f"{name} has {len(seq)} entries; with rank {rank} it needs {n} "
                    + ("(the byte strides of dims 1.., innermost first: dim 0's stride is the element size)."
                       if name == "global_strides" else "(innermost first)."))
    addr = int(global_address)
    align = 32 if il == Interleave.B32 else 16
    if addr % align:
        raise E("address-alignment", addr,
                f"global_address = {addr:#x} is not a multiple of {align} bytes"
                + (" (32-byte interleave needs 32)." if align == 32 else "; TMA needs 16-byte aligned tensors."))
    for i, v in enumerate(gd):
        if not 1 <= v <= 1 << 32:
            raise E("dim-range", v, f"global_dim[{i}] = {v}: every dimension must hold 1 to 2**32 elements.")
    salign = 32 if il == Interleave.B32 else 16
    for i, v in enumerate(gs):
        if v % salign:
            raise E("stride-alignment", v,
                    f"global_strides[{i}] = {v} bytes (the stride of dim {i + 1}) is not a multiple of {salign}: "
                    f"every row must start on a {salign}-byte boundary; pad it, e.g. to {(v // salign + 1) * salign}.")
        if not 0 <= v < 1 << 40:
            raise E("stride-range", v, f"global_strides[{i}] = {v} bytes: strides must be below 2**40 bytes.")
    esize = _ESIZE[d]
    for i, v in enumerate(bd):
        if not 1 <= v <= 256:
            raise E("box-range", v, f"box_dim[{i}] = {v}: a box has 1 to 256 elements along every dimension.")
    inner = bd[0] * esize
    if inner % 16:
        raise E("box-inner-multiple-of-16", inner,
                f"box_dim[0] = {bd[0]} elements of {esize} bytes = {inner} bytes: the inner box row must be a "
                "multiple of 16 bytes.")
    for i, v in enumerate(es):
        if not 1 <= v <= 8:
            raise E("element-stride-range", v, f"element_strides[{i}] = {v}: element strides are 1 to 8.")
    if il == Interleave.NONE and sw != Swizzle.NONE and inner > _SPAN[int(sw)]:
        raise E("box-inner-exceeds-swizzle", inner,
                f"the inner box row is {inner} bytes ({bd[0]} elements of {esize} bytes) but swizzle {sw.name} "
                f"spans {_SPAN[int(sw)]} bytes: make box_dim[0] at most {_SPAN[int(sw)] // esize} or use a wider "
                "swizzle.")
    driver_bytes = esize * math.prod(b // e for b, e in zip(bd, es, strict=True))
    if driver_bytes > SMEM_LIMIT:
        raise E("box-too-large", driver_bytes,
                f"the box holds {driver_bytes} bytes (box_dim {list(bd)} / element_strides {list(es)}, rounded "
                f"down, times {esize} bytes) but an H100 block has at most {SMEM_LIMIT} bytes (228 KiB) of shared "
                "memory: use a smaller box.")
    if oob == OOBFill.NAN_REQUEST_ZERO_FMA and d not in _FLOAT_TYPES:
        raise E("oob-nan-needs-float", dtype,
                f"NaN out-of-bounds fill needs a floating-point type, not {dtype.name}.")
    return TensorMap(dtype, rank, addr, gd, gs, bd, es, il, sw, l2, oob)


def for_matrix(shape: Sequence[int], dtype: DataType | int, box_rows: int, box_cols: int,
               swizzle: Swizzle | int = Swizzle.NONE, address: int = 0, row_stride_bytes: int | None = None,
               oob_fill: OOBFill | int = OOBFill.NONE) -> TensorMap:
    """A rank-2 map for a row-major ``(rows, cols)`` matrix, boxes of ``box_rows x box_cols``.

    Dims and boxes are passed innermost first (cols, rows), as the driver wants; ``row_stride_bytes`` defaults
    to ``cols * element size``.
    """
    rows, cols = (int(x) for x in shape)
    es = _ESIZE.get(int(dtype), 1)
    stride = cols * es if row_stride_bytes is None else int(row_stride_bytes)
    return encode_tiled(dtype, 2, address, (cols, rows), (stride,), (box_cols, box_rows), (1, 1),
                        Interleave.NONE, swizzle, L2Promotion.NONE, oob_fill)
