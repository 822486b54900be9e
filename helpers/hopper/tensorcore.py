"""The tensor cores' element types, register fragments and sums, for ``mma.sync`` and every ``wgmma`` input type.

Element types and how a 32-bit register holds them (PTX ISA): f16/bf16 two to a register, tf32 one (its low 13
bits are not read), e4m3/e5m2/s8/u8 four, s4/u4 eight, b1 thirty-two, f64 one per 64-bit register.

Fragments (PTX ISA, "matrix fragments for mma.m16n8k*"): lane ``l`` of a warp is in group ``g = l // 4`` with
index ``t = l % 4`` in its group. For an m16 A operand, register ``r`` holds row ``g + 8 (r % 2)`` and the
columns ``E t + j + (K / 2) (r // 2)`` for its ``E`` elements ``j`` (K = 2 E ... for two-register rows), and the
B operand's register ``r`` holds column ``g`` of rows ``E t + j + (K / 2) r``; the accumulators: register ``i``
holds row ``g + 8 (i // 2)``, column ``2 t + i % 2``. tf32 and f64 hold one element a register with columns
``t + 4 (r // 2)``.

Sums (``dot``), fitted to an H200 capture (tools/h100/tensor_types.py -> tests/data/tensor_types_h200.*; bit-exact
on every non-transposed wgmma case and on mma.sync/wmma but fp8 mma.sync): exact products; every term, the
accumulator's too, truncated toward zero to a multiple of 2**(E - kept), E the largest exponent of the factors'
pairs and of the accumulator (subnormal inputs count at their format's smallest exponent); the terms added
exactly; the sum rounded toward zero to the significant bits (fp32's 24; 14 for fp8 wgmma into fp32), or, into
f16, once to nearest; 2**128 and beyond is infinity; NaN is canonical (0x7FFFFFFF, 0x7FFF in f16); subnormal fp32
accumulators count as zero.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["BITS", "FLOAT_TYPES", "INT_TYPES", "decode", "unpack", "pack", "dot", "fp8_table", "a_map", "b_map",
           "c_map", "round_accumulator", "WGMMA_PRECISION"]

BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8, "s4": 4, "u4": 4,
        "b1": 1, "f64": 64, "s32": 32}
FLOAT_TYPES = {"f16", "bf16", "tf32", "e4m3", "e5m2", "f32", "f64"}
INT_TYPES = {"s8", "u8", "s4", "u4", "b1", "s32"}


@functools.cache
def fp8_table(kind: str) -> np.ndarray:
    """The 256 values of e4m3 (no infinities; S.1111.111 is NaN) or e5m2 (IEEE-like) codes, as float64."""
    c = np.arange(256)
    s = np.where(c & 0x80, -1.0, 1.0)
    if kind == "e4m3":
        e, m = (c >> 3) & 15, c & 7
        v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * np.exp2(e - 7.0))
        v = np.where((e == 15) & (m == 7), np.nan, v)
    else:
        e, m = (c >> 2) & 31, c & 3
        v = np.where(e == 0, m / 4 * 2.0 ** -14, (1 + m / 4) * np.exp2(e - 15.0))
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    out = s * v
    out.setflags(write=False)
    return out


def decode(bits: np.ndarray, etype: str) -> np.ndarray:
    """Element bit patterns (unsigned integers) -> float64 values (floats) or int64 (integers)."""
    u = np.asarray(bits).astype(np.uint64)
    if etype == "f16":
        return u.astype(np.uint16).view(np.float16).astype(np.float64)
    if etype == "bf16":
        return (u.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if etype == "tf32":
        return (u.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if etype == "f32":
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    if etype == "f64":
        return u.view(np.float64).copy()
    if etype in ("e4m3", "e5m2"):
        return fp8_table(etype)[u.astype(np.int64)]
    w = BITS[etype]
    v = u.astype(np.int64)
    if etype in ("s8", "s4", "s32"):
        v = np.where(v >= 1 << (w - 1), v - (1 << w), v)
    return v


def unpack(words: np.ndarray, etype: str) -> np.ndarray:
    """(..., R) 32-bit registers -> (..., R, E) element bit patterns, E elements a register (low bits first);
    f64: (..., R) 64-bit registers -> (..., R, 1)."""
    w = np.asarray(words)
    bits = BITS[etype]
    if bits >= 32:
        return w[..., None].astype(np.uint64)
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint64) * np.uint64(bits))
    return (w.astype(np.uint64)[..., None] >> shifts) & np.uint64((1 << bits) - 1)


def pack(elems: np.ndarray, etype: str) -> np.ndarray:
    """Inverse of :func:`unpack` for 16-bit and 32-bit element types: (..., R, E) -> (..., R) uint32."""
    bits = BITS[etype]
    e = np.asarray(elems).astype(np.uint64)
    if bits >= 32:
        return e[..., 0].astype(np.uint32 if bits == 32 else np.uint64)
    shifts = (np.arange(e.shape[-1], dtype=np.uint64) * np.uint64(bits))
    return np.bitwise_or.reduce(e << shifts, axis=-1).astype(np.uint32)


def round_accumulator(d: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 (float32 array) sums -> accumulator bit patterns: f32 (NaN canonical) or f16 (nearest, NaN 0x7FFF)."""
    nan = np.isnan(d)
    if d.dtype != np.float64 or dtype != "f16":
        d = np.asarray(d, np.float32)
    if dtype == "f16":
        with np.errstate(all="ignore"):
            h = d.astype(np.float16).view(np.uint16).copy()
        h[nan] = 0x7FFF
        return h
    u = d.view(np.uint32).copy()
    u[nan] = 0x7FFFFFFF
    return u


#: (bits kept below the largest term, significant bits of the result) of a wgmma's sum, per (input type,
#: accumulator type), measured on an H200 (tools/h100/tensor_types.py): fp8 inputs keep 13 bits below the largest
#: term, and with fp32 accumulators the sum is rounded toward zero to 14 significant bits (with f16 accumulators to
#: fp32's 24, then to nearest f16); every other type keeps 25 and rounds toward zero to 24
WGMMA_PRECISION = {("e4m3", "f32"): (13, 14), ("e5m2", "f32"): (13, 14), ("e4m3", "f16"): (13, 24),
                   ("e5m2", "f16"): (13, 24), ("f16", "f16"): (25, 53)}


#: the smallest normal exponent of each input type: a subnormal input counts with this exponent when the sum is
#: aligned (its encoded exponent, as the hardware sees it)
EMIN = {"f16": -14, "bf16": -126, "tf32": -126, "f32": -126, "e4m3": -6, "e5m2": -14}


def _exponent16(x: np.ndarray) -> np.ndarray:
    """floor(log2|x|) per element as int16; -2**14 for zeros (below any real pair's sum)."""
    m = np.abs(x)
    _, e = np.frexp(m)
    return np.where(m > 0, e - 1, -(1 << 14)).astype(np.int16)


def _round_to_zero_f32(x: np.ndarray) -> np.ndarray:
    """fp64 -> fp32 rounded toward zero; 2**128 and beyond is infinity (as the tensor cores give)."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        over = (np.abs(f.astype(np.float64)) > np.abs(x)) & np.isfinite(f)
    return np.where(over, np.nextafter(f, np.float32(0)), f).astype(np.float32)


def _exponent_floor(x: np.ndarray, emin: int) -> np.ndarray:
    e = _exponent16(x)
    return np.where(x != 0, np.maximum(e, emin), e).astype(np.int16)


def dot(a: np.ndarray, b: np.ndarray, c: np.ndarray, atype: str, precision: tuple[int, int] = (25, 24),
        btype: str | None = None) -> np.ndarray:
    """``c + sum_k a[..., k] b[..., k]`` as the tensor core sums floating inputs (fp64 values in; float32 out):
    every product exact; each term (the accumulator's too) truncated toward zero to a multiple of
    2**(E - kept), E the largest exponent of the products' factors and of the accumulator; the terms added exactly
    and the sum rounded toward zero to ``significant`` bits; 2**128 and beyond is infinity; subnormal fp32
    accumulators count as zero; NaN is canonical (returned as a float32 NaN). ``precision`` = (kept,
    significant): (25, 24) is the H100's bf16 model (helpers.hopper.wgmma.dot_h100)."""
    kept, sig = precision
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    c = np.asarray(c, np.float64)
    c = np.where(np.abs(c) < 2.0 ** -126, 0.0, c)
    ak = np.ascontiguousarray(np.moveaxis(a, -1, 0))  # (K, ...): each k a contiguous block, not yet broadcast
    bk = np.ascontiguousarray(np.moveaxis(b, -1, 0))
    with np.errstate(all="ignore"):
        ea = _exponent_floor(ak, EMIN[atype])
        eb = _exponent_floor(bk, EMIN[btype or atype])
        pair = (ea + eb).max(axis=0).astype(np.int64)
        emax = np.maximum(pair, _exponent16(c).astype(np.int64))
        q = np.ldexp(1.0, np.clip(emax - kept, -1074, 1023).astype(np.int32))
        p = ak * bk
        p /= q
        np.trunc(p, out=p)
        p *= q
        s = p.sum(axis=0)
        s += np.trunc(c / q) * q
        s = np.where(emax <= -(1 << 13), 0.0, s)
        nan = np.isnan(s)
        if sig < 24:
            m, e = np.frexp(s)
            s = np.where(np.isfinite(s), np.ldexp(np.trunc(m * 2.0 ** sig) / 2.0 ** sig, e), s)
        if sig > 24:  # no rounding here: the caller rounds the exact sum (to f16)
            return s
        out = _round_to_zero_f32(s)
    if nan.any():
        out[nan] = np.float32(np.nan)
    return out


# --------------------------------------------------------------------------------------------- fragments
def _gt() -> tuple[np.ndarray, np.ndarray]:
    lane = np.arange(32)
    return lane // 4, lane % 4


def a_map(m: int, k: int, etype: str, regs: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (32, regs, E): where each element of each lane's A registers sits in the m x k tile."""
    g, t = _gt()
    bits = BITS[etype]
    per = max(1, 32 // bits) if bits <= 32 else 1
    r = np.arange(regs)[None, :, None]
    j = np.arange(per)[None, None, :]
    g, t = g[:, None, None], t[:, None, None]
    if per == 1:  # tf32 / f64: one element a register
        if m == 8:
            return np.broadcast_to(g, (32, regs, 1)).copy(), np.broadcast_to(t + 4 * r, (32, regs, 1)).copy()
        rows = g + 8 * (r % 2)
        cols = t + 4 * (r // 2)
        return np.broadcast_to(rows, (32, regs, 1)).copy(), np.broadcast_to(cols, (32, regs, 1)).copy()
    if m == 8:  # m8n8k*: one register a lane
        rows = np.broadcast_to(g, (32, regs, per))
        cols = per * t + j + (k // 2) * r
        return rows.copy(), np.broadcast_to(cols, (32, regs, per)).copy()
    rows = g + 8 * (r % 2)
    cols = per * t + j + (k // 2) * (r // 2)
    return np.broadcast_to(rows, (32, regs, per)).copy(), np.broadcast_to(cols, (32, regs, per)).copy()


def b_map(k: int, n: int, etype: str, regs: int) -> tuple[np.ndarray, np.ndarray]:
    """(krows, cols) of shape (32, regs, E): where each element of each lane's B registers sits in the k x n tile
    (the column is the lane's group)."""
    g, t = _gt()
    bits = BITS[etype]
    per = max(1, 32 // bits) if bits <= 32 else 1
    r = np.arange(regs)[None, :, None]
    j = np.arange(per)[None, None, :]
    g, t = g[:, None, None], t[:, None, None]
    if per == 1:
        krow = t + 4 * r
    else:
        krow = per * t + j + (k // 2 if regs > 1 else 0) * r
    return (np.broadcast_to(krow, (32, regs, per)).copy(), np.broadcast_to(g, (32, regs, per)).copy())


def c_map(m: int, regs: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of shape (32, regs) of the fp32/s32/f64 accumulators of an m x 8 tile."""
    g, t = _gt()
    i = np.arange(regs)[None, :]
    rows = g[:, None] + 8 * (i // 2) if m == 16 else np.broadcast_to(g[:, None], (32, regs))
    cols = 2 * t[:, None] + i % 2
    return np.broadcast_to(rows, (32, regs)).copy(), np.broadcast_to(cols, (32, regs)).copy()
