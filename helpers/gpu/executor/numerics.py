"""Bit-exact arithmetic of PTX on numpy arrays: correctly rounded fp32 with every rounding mode (fused
multiply-add included, which numpy lacks), conversions with PTX's rounding and saturation rules, and the GPU's
canonical NaN.

Exactness: a product of two fp32 values is exact in fp64, and the exact sum of two fp64 values is ``s + e``
(TwoSum), so ``a*b + c`` is known exactly as ``s + e``. Rounding ``s`` to fp32 is then the correct rounding of
the exact value except when ``s`` sits exactly halfway between two fp32 numbers and ``e != 0``: the tie is broken
by the sign of ``e``. Directed roundings step one ulp using the sign of the exact remainder. Division and square
root rounded from fp64 are correctly rounded (53 >= 2*24 + 2), and their remainders give the directed modes.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "CANONICAL_NAN32", "canon_nan32", "round_f32", "fma_f32", "add_f32", "mul_f32", "div_f32", "sqrt_f32",
    "rcp_f32", "ftz32", "sat01", "minmax_f", "f32_to_bf16_bits", "bf16_bits_to_f32", "f_to_int", "round_integral",
    "f64_to_f32", "f32_to_f16_bits", "int_to_f32", "fma_f64", "round_f64", "count_nonzero",
]

try:  # np.count_nonzero's own C function, without the Python layer around it (a third of its cost on 32 lanes)
    from numpy._core.multiarray import count_nonzero
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import count_nonzero
    except ImportError:
        count_nonzero = np.count_nonzero

CANONICAL_NAN32 = np.uint32(0x7FFFFFFF)
_F32_OVER = 2.0 ** 128 - 2.0 ** 103  # values at or above this (in magnitude) round to inf under rn
_MAX32 = np.float32(np.finfo(np.float32).max)


def canon_nan32(x: np.ndarray) -> np.ndarray:
    """Replace every NaN by the GPU's fp32 NaN (0x7FFFFFFF); returns a float32 array."""
    x = np.asarray(x, np.float32)
    if np.count_nonzero(x != x):
        nan = np.isnan(x)
        x = np.array(x, np.float32, copy=True)
        x.view(np.uint32)[nan] = CANONICAL_NAN32
    return x


def ftz32(x: np.ndarray) -> np.ndarray:
    """Flush fp32 subnormals to a zero of the same sign (.ftz)."""
    x = np.asarray(x, np.float32)
    sub = (x != 0) & (np.abs(x) < np.float32(np.finfo(np.float32).tiny))
    if np.any(sub):
        x = np.where(sub, np.copysign(np.float32(0), x), x).astype(np.float32)
    return x


def sat01(x: np.ndarray) -> np.ndarray:
    """.sat: clamp to [0, 1]; NaN and -0 become +0 (measured on the H100: add.sat of a -0 sum gives +0)."""
    x = np.asarray(x)
    out = np.clip(x, 0, 1).astype(x.dtype) + x.dtype.type(0)  # -0 + 0 = +0
    return np.where(np.isnan(x), x.dtype.type(0), out).astype(x.dtype)


def _directed(r: np.ndarray, rem_sign: np.ndarray, mode: str) -> np.ndarray:
    """Move the nearest-rounded fp32 ``r`` one ulp as the rounding mode asks, given the sign of exact - r."""
    if mode == "rn":
        return r
    if mode == "rz":
        step = (rem_sign != 0) & (np.sign(r) != 0) & (np.sign(rem_sign) != np.sign(r))
        target = np.float32(0)
        rz = np.where(np.isinf(r) & (rem_sign != 0), np.copysign(_MAX32, r), r)
        return np.where(step & ~np.isinf(r), np.nextafter(r, target), rz).astype(r.dtype)
    if mode == "rm":
        return np.where(rem_sign < 0, np.nextafter(r, np.float32(-np.inf)), r).astype(r.dtype)
    if mode == "rp":
        return np.where(rem_sign > 0, np.nextafter(r, np.float32(np.inf)), r).astype(r.dtype)
    raise ValueError(mode)


def round_f32(s: np.ndarray, e: np.ndarray | float = 0.0, mode: str = "rn") -> np.ndarray:
    """fp32 rounding of the exact value ``s + e`` (fp64 arrays, ``|e|`` below half an ulp of ``s``)."""
    s = np.asarray(s, np.float64)
    e = np.broadcast_to(np.asarray(e, np.float64), s.shape)
    with np.errstate(all="ignore"):
        r = s.astype(np.float32)
        fin = np.isfinite(s)
        r64 = r.astype(np.float64)
        d = np.where(fin & np.isfinite(r64), s - r64, 0.0)
        # a tie in s broken by e
        up = np.nextafter(r, np.where(d > 0, np.float32(np.inf), np.float32(-np.inf)))
        half = (up.astype(np.float64) - r64) / 2
        tie = fin & (d != 0) & (d == half) & (e != 0)
        if tie.any():
            r = np.where(tie & (np.sign(e) == np.sign(d)), up, r).astype(np.float32)
        # the overflow threshold itself (halfway between MAX and 2**128)
        edge = fin & (np.abs(s) == _F32_OVER) & (e != 0) & (np.sign(e) != np.sign(s))
        if edge.any():
            r = np.where(edge, np.copysign(_MAX32, s), r).astype(np.float32)
        if mode != "rn":
            r64 = r.astype(np.float64)
            rem = np.where(np.isinf(r64) & fin, -np.sign(s), np.where(fin, (s - r64) + e, 0.0))
            r = _directed(r, np.sign(rem), mode)
    return r


_EXP64 = np.uint64(0x7FF0000000000000)
_NORMAL_LO = np.uint64(897 << 52)  # fp64 exponent field of 2**-126, the smallest normal fp32
_NORMAL_SPAN = np.uint64(253 << 52)  # ... up to 2**127


def fma_rn_fast(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fma.rn.f32 on float32 arrays: one fp64 rounding of a*b + c is the correctly rounded fp32 result whenever it is
    not an fp32 midpoint and lies in the normal fp32 range (no zero, subnormal, infinity or NaN); anything else goes
    to :func:`fma_f32`."""
    p = a.astype(np.float64) * b
    s = p + c
    bits = s.view(np.uint64)
    if np.count_nonzero(((bits & _EXP64) - _NORMAL_LO) > _NORMAL_SPAN):
        return fma_f32(a, b, c)
    mid = (bits & _LOW29) == _MID
    if np.count_nonzero(mid):  # fp32 midpoints: fine when the fp64 sum was exact (ties to even), else exactly
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
        if np.count_nonzero(mid & (e != 0)):
            return fma_f32(a, b, c)
    return s.astype(np.float32)


_MID = np.uint64(0x10000000)  # the low 29 bits of an fp64 that lies halfway between two normal fp32 values
_LOW29 = np.uint64(0x1FFFFFFF)


def fma_rn_to_store(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """:func:`fma_rn_fast` for float32 arrays, for a store into float32 registers: in the common case (the fp64 sum
    is neither an fp32 midpoint nor outside the normal fp32 range) the fp64 sum itself, which the store rounds to
    fp32 as ``astype`` would; else the fp32 result."""
    p = a.astype(np.float64)
    p *= b
    s = p + c
    bits = s.view(np.uint64)
    if _nz(((bits & _EXP64_0) - _NORMAL_LO_0) > _NORMAL_SPAN_0):
        return fma_f32(a, b, c)
    mid = (bits & _LOW29_0) == _MID_0
    if _nz(mid):  # fp32 midpoints: fine when the fp64 sum was exact (ties to even), else exactly
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
        if _nz(mid & (e != 0)):
            return fma_f32(a, b, c)
    return s


_nz = count_nonzero
# the same constants as 0-d arrays (numpy applies those to an array with less overhead than scalars)
_EXP64_0, _NORMAL_LO_0, _NORMAL_SPAN_0 = np.array(_EXP64), np.array(_NORMAL_LO), np.array(_NORMAL_SPAN)
_LOW29_0, _MID_0 = np.array(_LOW29), np.array(_MID)
_TINY32 = float(np.finfo(np.float32).tiny)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str = "rn") -> np.ndarray:
    """Correctly rounded a*b + c in fp32 (PTX fma.rn/rz/rm/rp.f32, mad.rn.f32)."""
    a64 = np.asarray(a, np.float32).astype(np.float64)
    b64 = np.asarray(b, np.float32).astype(np.float64)
    c64 = np.asarray(c, np.float32).astype(np.float64)
    if mode == "rn":
        # fast path: s = fl64(a*b + c) rounds correctly to fp32 unless it is an fp32 midpoint, subnormal or special
        p = a64 * b64
        s = np.asarray(p + c64)
        mid = (s.view(np.uint64) & _LOW29) == _MID
        av = np.abs(s)
        if not (((av < _TINY32) & (s != 0)).any() or not np.isfinite(av).all()):
            if not mid.any():
                return s.astype(np.float32)
            bb = s - p
            e = (p - (s - bb)) + (c64 - bb)
            if not (mid & (e != 0)).any():  # the midpoints are exact sums: ties to even is right
                return s.astype(np.float32)
    with np.errstate(all="ignore"):
        p = a64 * b64  # exact
        s = p + c64
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)  # TwoSum: p + c == s + e exactly
        e = np.where(np.isfinite(e), e, 0.0)
    r = round_f32(s, e, mode)
    if mode == "rm":  # an exact zero sum is -0 when rounding down, unless both addends are +0
        zero = (s == 0) & (e == 0)
        if np.any(zero):
            plus = ~np.signbit(p) & (p == 0) & ~np.signbit(c64) & (c64 == 0)
            r = np.where(zero, np.where(plus, np.float32(0), np.float32(-0.0)), r).astype(np.float32)
    return canon_nan32(r)


def add_f32(a: np.ndarray, b: np.ndarray, mode: str = "rn") -> np.ndarray:
    """a + b in fp32 with a rounding mode."""
    if mode == "rn":
        with np.errstate(all="ignore"):
            return canon_nan32(np.asarray(a, np.float32) + np.asarray(b, np.float32))
    return fma_f32(np.float32(1), a, b, mode)


def mul_f32(a: np.ndarray, b: np.ndarray, mode: str = "rn") -> np.ndarray:
    """a * b in fp32 with a rounding mode."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)
    if mode == "rn":
        with np.errstate(all="ignore"):
            return canon_nan32(a * b)
    r = fma_f32(a, b, np.float32(-0.0), mode)
    sign = np.signbit(a) ^ np.signbit(b)  # a zero product keeps the sign of the product, in every mode
    return np.where(r == 0, np.where(sign, np.float32(-0.0), np.float32(0)), r).astype(np.float32)


def div_f32(a: np.ndarray, b: np.ndarray, mode: str = "rn") -> np.ndarray:
    """Correctly rounded a / b (div.rn/rz/rm/rp.f32)."""
    a64 = np.asarray(a, np.float32).astype(np.float64)
    b64 = np.asarray(b, np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        q = a64 / b64
        r = q.astype(np.float32)
        if mode != "rn":
            r64 = r.astype(np.float64)
            rem = np.where(np.isfinite(r64) & np.isfinite(q), (a64 - r64 * b64) * np.sign(b64), 0.0)
            rem = np.where(np.isinf(r64) & np.isfinite(q), -np.sign(q), rem)
            r = _directed(r, np.sign(rem), mode)
    return canon_nan32(r)


def sqrt_f32(a: np.ndarray, mode: str = "rn") -> np.ndarray:
    """Correctly rounded square root (sqrt.rn/rz/rm/rp.f32)."""
    a64 = np.asarray(a, np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        q = np.sqrt(a64)
        r = q.astype(np.float32)
        if mode != "rn":
            r64 = r.astype(np.float64)
            rem = np.where(np.isfinite(r64) & (a64 > 0), a64 - r64 * r64, 0.0)
            r = _directed(r, np.sign(rem), mode)
    return canon_nan32(r)


def rcp_f32(a: np.ndarray, mode: str = "rn") -> np.ndarray:
    """Correctly rounded 1 / a (rcp.rn/rz/rm/rp.f32)."""
    return div_f32(np.float32(1), a, mode)


def minmax_f(a: np.ndarray, b: np.ndarray, want_max: bool, nan_propagates: bool = False) -> np.ndarray:
    """PTX min/max on floats: a NaN operand yields the other one (both NaN: canonical NaN); -0 < +0.
    With ``.NaN`` a NaN operand makes the result the canonical NaN."""
    a = np.asarray(a)
    b = np.asarray(b)
    dt = np.result_type(a, b)
    a = a.astype(dt)
    b = b.astype(dt)
    # compare with -0 below +0: use the sign bit for equal zeros
    with np.errstate(invalid="ignore"):
        a_less = (a < b) | ((a == b) & np.signbit(a) & ~np.signbit(b))
    pick_a = ~a_less if want_max else a_less
    out = np.where(pick_a, a, b)
    out = np.where(np.isnan(a), b, np.where(np.isnan(b), a, out))
    if nan_propagates:
        out = np.where(np.isnan(a) | np.isnan(b), dt.type(np.nan), out)
    out = np.asarray(out, dt)
    if dt == np.float32:
        return canon_nan32(out)
    return out


# ------------------------------------------------------------------------------------------- conversions
def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns to fp32 (exact)."""
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray, mode: str = "rn", relu: bool = False, sat: bool = False) -> np.ndarray:
    """cvt.{rn,rz}{.relu}{.satfinite}.bf16.f32 as uint16 bit patterns; NaN becomes 0x7FFF."""
    x = np.asarray(x, np.float32)
    if relu:
        x = np.where(np.isnan(x), x, np.maximum(x, np.float32(0))).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    if mode == "rn":
        u = u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))
    elif mode != "rz":
        raise ValueError(mode)
    out = (u >> np.uint64(16)).astype(np.uint16)
    if sat:
        big = np.isinf(bf16_bits_to_f32(out)) & ~np.isnan(x)
        out = np.where(big, np.where(np.signbit(x), np.uint16(0xFF7F), np.uint16(0x7F7F)), out).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), out).astype(np.uint16)


def f32_to_f16_bits(x: np.ndarray, mode: str = "rn", relu: bool = False, sat: bool = False) -> np.ndarray:
    """cvt.rn.f16.f32 (and rz) as uint16 bit patterns; NaN becomes 0x7FFF."""
    x = np.asarray(x, np.float32)
    if relu:
        x = np.where(np.isnan(x), x, np.maximum(x, np.float32(0))).astype(np.float32)
    with np.errstate(all="ignore"):
        h = x.astype(np.float16)
        if mode == "rz":
            over = np.abs(h.astype(np.float32)) > np.abs(x)
            h = np.where(over & np.isfinite(x), np.nextafter(h, np.float16(0)), h).astype(np.float16)
        elif mode != "rn":
            raise ValueError(mode)
        if sat:
            h = np.where(np.isinf(h) & ~np.isinf(x), np.copysign(np.float16(65504), x), h).astype(np.float16)
    bits = h.view(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FFF), bits).astype(np.uint16)


def round_integral(x: np.ndarray, mode: str) -> np.ndarray:
    """Round to an integral value in floating point: rni (half even), rzi, rmi, rpi."""
    f = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode]
    with np.errstate(all="ignore"):
        return f(x)


def f_to_int(x: np.ndarray, mode: str, dtype: np.dtype) -> np.ndarray:
    """cvt.{rni,rzi,rmi,rpi}.{s,u}{8..64}.f{16,32,64}: round, saturate to the integer range, NaN -> 0."""
    dtype = np.dtype(dtype)
    x = np.asarray(x).astype(np.float64)
    r = round_integral(x, mode)
    info = np.iinfo(dtype)
    lo, hi = float(info.min), float(info.max)
    out = np.zeros(r.shape, dtype)
    fin = ~np.isnan(r)
    big = fin & (r >= hi)
    small = fin & (r <= lo)
    mid = fin & ~big & ~small
    if dtype.itemsize == 8:
        # float64 cannot hold 2**63-1 / 2**64-1; values in range convert exactly
        out[mid] = r[mid].astype(dtype)
    else:
        out[mid] = r[mid].astype(dtype)
    out[big] = info.max
    out[small] = info.min
    return out


def int_to_f32(x: np.ndarray, mode: str = "rn") -> np.ndarray:
    """cvt.{rn,rz,rm,rp}.f32.{s,u}{8..64}: integer to fp32, correctly rounded."""
    x = np.asarray(x)
    r = x.astype(np.float32)
    if mode == "rn":
        return r
    # exact difference x - r as integers (fp32 values of 64-bit integers are integers)
    big = x.astype(object) if x.dtype.itemsize == 8 else None
    if big is not None:
        rem = np.array([int(a) - int(b) for a, b in zip(big.ravel(), r.astype(object).ravel(), strict=True)],
                       dtype=object).reshape(x.shape)
        sign = np.sign(rem.astype(np.float64))
    else:
        sign = np.sign(x.astype(np.float64) - r.astype(np.float64))
    return _directed(r, sign, mode)


def f64_to_f32(x: np.ndarray, mode: str = "rn") -> np.ndarray:
    """cvt.{rn,rz,rm,rp}.f32.f64."""
    x = np.asarray(x, np.float64)
    return canon_nan32(round_f32(x, 0.0, "rn") if mode == "rn" else _f64_directed(x, mode))


def _f64_directed(x: np.ndarray, mode: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = x.astype(np.float32)
        r64 = r.astype(np.float64)
        rem = np.where(np.isfinite(x) & np.isfinite(r64), x - r64, 0.0)
        rem = np.where(np.isinf(r64) & np.isfinite(x), -np.sign(x), rem)
    return _directed(r, np.sign(rem), mode)


# ------------------------------------------------------------------------------------------- fp64
def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray, mode: str = "rn") -> np.ndarray:
    """Correctly rounded fp64 a*b + c (exact rational arithmetic per element: slow, and rare in kernels)."""
    from fractions import Fraction

    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    out = np.empty(a.shape, np.float64)
    for i in np.ndindex(a.shape):
        x, y, z = float(a[i]), float(b[i]), float(c[i])
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out[i] = x * y + z
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        out[i] = round_f64(exact, mode, zero_sign=(np.signbit(x * y) and np.signbit(z)))
    return out


def round_f64(exact, mode: str = "rn", zero_sign: bool = False) -> float:
    """Round a Fraction to fp64 with a PTX rounding mode."""
    from fractions import Fraction

    if exact == 0:
        return -0.0 if zero_sign else 0.0
    r = float(exact)  # correctly rounded to nearest even
    if mode == "rn":
        return r
    if np.isinf(r):
        diff = 1 if exact > 0 else -1
        base = np.copysign(np.finfo(np.float64).max, r)
        rem_sign = -1 if r > 0 else 1
        r = base if (mode == "rz" or (mode == "rm" and r > 0) or (mode == "rp" and r < 0)) else r
        _ = diff, rem_sign
        return float(r)
    d = exact - Fraction(r)
    if d == 0:
        return r
    if mode == "rz":
        return float(np.nextafter(r, 0.0)) if (d > 0) != (r > 0) else r
    if mode == "rm":
        return float(np.nextafter(r, -np.inf)) if d < 0 else r
    if mode == "rp":
        return float(np.nextafter(r, np.inf)) if d > 0 else r
    raise ValueError(mode)
