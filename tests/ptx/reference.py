"""Brute-force references for the ALU probe (helpers.gpu.executor.probes): each op on one element at a time, in plain
Python
with exact rationals, written from the PTX ISA's definitions and independent of the executor's numpy code."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

NAN32 = 0x7FFFFFFF
M32 = 0xFFFFFFFF


def f(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & M32))[0]


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def is_nan(b: int) -> bool:
    return (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF) != 0


def round_fmt(q: Fraction, mode: str, p: int, emin: int, emax: int) -> Fraction | None:
    """Round an exact nonzero rational to a binary format with p-bit significands, smallest quantum 2**emin,
    largest exponent emax; None means overflow to infinity."""
    sign = -1 if q < 0 else 1
    a = abs(q)
    e = math.floor(math.log2(a.numerator) - math.log2(a.denominator))
    while Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    quantum = Fraction(2) ** max(e - p + 1, emin)
    lo = math.floor(a / quantum)
    rem = a / quantum - lo
    if mode == "rn":
        k = lo + (1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and lo % 2) else 0)
    elif mode == "rz" or (mode == "rm" and sign > 0) or (mode == "rp" and sign < 0):
        k = lo
    else:
        k = lo + (1 if rem else 0)
    r = k * quantum
    maxval = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if r > maxval:
        if mode == "rn" or (mode == "rp" and sign > 0) or (mode == "rm" and sign < 0):
            return None
        r = maxval
    return sign * r


def to_f32(q: Fraction, mode: str = "rn", zero_negative: bool = False) -> int:
    if q == 0:
        return 0x80000000 if zero_negative else 0
    r = round_fmt(q, mode, 24, -149, 127)
    if r is None:
        return 0xFF800000 if q < 0 else 0x7F800000
    if r == 0:
        return 0x80000000 if q < 0 else 0
    return bits(float(r))


def fval(b: int) -> Fraction:
    return Fraction(f(b))


def special(*xs: int) -> bool:
    return any((x & 0x7F800000) == 0x7F800000 for x in xs)


def float_op(fn, *xs: int) -> int:
    """For inputs with an infinity or NaN: IEEE behaviour through Python floats, NaN canonical."""
    with_nan = any(is_nan(x) for x in xs)
    if with_nan:
        return NAN32
    r = fn(*[f(x) for x in xs])
    return NAN32 if r != r else bits(r)


def _zero_sign(neg_a: bool, neg_b: bool, both_zero: bool, mode: str) -> int:
    """Sign of an exact zero sum x + y (IEEE): -0 + -0 = -0; otherwise +0, except -0 when rounding down."""
    if both_zero:
        neg = (neg_a and neg_b) or (mode == "rm" and (neg_a or neg_b))
    else:
        neg = mode == "rm"
    return 0x80000000 if neg else 0


def ref_fma(a: int, b: int, c: int, mode: str) -> int:
    if special(a, b, c):
        def g(x, y, z):
            try:
                return x * y + z
            except (OverflowError, ValueError):
                return math.nan
        return float_op(g, a, b, c)
    p = fval(a) * fval(b)
    q = p + fval(c)
    if q == 0:
        p_neg = bool((a ^ b) >> 31)
        return _zero_sign(p_neg, bool(c >> 31), p == 0 and fval(c) == 0, mode)
    return to_f32(q, mode)


def ref_add(a: int, b: int, mode: str, sub: bool = False) -> int:
    if sub:
        b ^= 0x80000000
    if special(a, b):
        return float_op(lambda x, y: x + y, a, b)
    q = fval(a) + fval(b)
    if q == 0:
        return _zero_sign(bool(a >> 31), bool(b >> 31), fval(a) == 0 and fval(b) == 0, mode)
    return to_f32(q, mode)


def ref_mul(a: int, b: int, mode: str) -> int:
    if special(a, b):
        def g(x, y):
            return x * y
        return float_op(g, a, b)
    q = fval(a) * fval(b)
    neg = bool((a ^ b) >> 31)
    return to_f32(q, mode) if q != 0 else (0x80000000 if neg else 0)


def ref_div(a: int, b: int, mode: str) -> int:
    x, y = f(a), f(b)
    if is_nan(a) or is_nan(b):
        return NAN32
    if y == 0:
        if x == 0:
            return NAN32
        neg = (math.copysign(1, x) * math.copysign(1, y)) < 0
        return 0xFF800000 if neg else 0x7F800000
    if math.isinf(x) or math.isinf(y):
        r = x / y if not (math.isinf(x) and math.isinf(y)) else math.nan
        return NAN32 if r != r else bits(r)
    q = fval(a) / fval(b)
    neg = (math.copysign(1, x) * math.copysign(1, y)) < 0
    return to_f32(q, mode, neg) if q != 0 else (0x80000000 if neg else 0)


def ref_sqrt(a: int) -> int:
    x = f(a)
    if is_nan(a) or x < 0:
        return NAN32
    if x == 0 or math.isinf(x):
        return a
    exact = _sqrt_frac(fval(a))
    cand = bits(float(math.sqrt(x)))
    return min((cand - 1, cand, cand + 1), key=lambda c: abs(fval(c) - exact))


def _sqrt_frac(q: Fraction) -> Fraction:
    """sqrt of a rational to 200 bits (enough to pick the nearest fp32)."""
    num, den = q.numerator, q.denominator
    scale = 1 << 400
    return Fraction(math.isqrt(num * scale * scale // den), scale)


def ref_minmax(a: int, b: int, want_max: bool, nan_prop: bool = False) -> int:
    if is_nan(a) and is_nan(b):
        return NAN32
    if is_nan(a) or is_nan(b):
        if nan_prop:
            return NAN32
        return b if is_nan(a) else a
    x, y = f(a), f(b)
    if x == y:  # -0 < +0
        na, nb = a >> 31, b >> 31
        if want_max:
            return a if na <= nb else b
        return a if na >= nb else b
    return a if (x > y) == want_max else b


def ftz(b: int) -> int:
    if (b & 0x7F800000) == 0 and (b & 0x7FFFFF):
        return b & 0x80000000
    return b


def sat(b: int) -> int:
    if is_nan(b):
        return 0
    x = f(b)
    if x <= 0:
        return 0 if (b >> 31 == 0 or x < 0) else 0
    return bits(1.0) if x >= 1 else b


def f2i(b: int, how: str, signed: bool) -> int:
    if is_nan(b):
        return 0
    x = fval(b) if not math.isinf(f(b)) else None
    lo, hi = (-(1 << 31), (1 << 31) - 1) if signed else (0, M32)
    if x is None:
        v = hi if f(b) > 0 else lo
    else:
        if how == "rz":
            v = math.trunc(x)
        elif how == "rm":
            v = math.floor(x)
        elif how == "rp":
            v = math.ceil(x)
        else:
            v = round(x)  # Python rounds half to even
        v = min(max(v, lo), hi)
    return v & M32


def half_bits(b: int, fmt: str) -> int:
    """fp32 -> bf16 / f16 bits, round to nearest even, NaN -> 0x7FFF."""
    if is_nan(b):
        return 0x7FFF
    x = f(b)
    sign = 0x8000 if b >> 31 else 0
    if math.isinf(x):
        return sign | (0x7F80 if fmt == "bf16" else 0x7C00)
    if x == 0:
        return sign
    p, emin, emax = (8, -133, 127) if fmt == "bf16" else (11, -24, 15)
    r = round_fmt(fval(b), "rn", p, emin, emax)
    if r is None:
        return sign | (0x7F80 if fmt == "bf16" else 0x7C00)
    if r == 0:
        return sign
    if fmt == "bf16":
        return bits(float(r)) >> 16
    return struct.unpack("<H", struct.pack("<e", float(r)))[0]


def half_value(h: int, fmt: str) -> int:
    if fmt == "bf16":
        v = (h & 0xFFFF) << 16
        return v | 0x400000 if is_nan(v) else v  # IEEE widening quiets a signalling NaN
    x = struct.unpack("<e", struct.pack("<H", h & 0xFFFF))[0]
    if x != x:  # IEEE widening keeps the sign and payload and sets the quiet bit
        return ((h & 0x8000) << 16) | 0x7FC00000 | ((h & 0x1FF) << 13)
    return bits(x)


def bfe(a: int, pos: int, ln: int, signed: bool) -> int:
    pos &= 0xFF
    ln &= 0xFF
    msb = 31
    sbit = 0
    if signed and ln:
        sbit = (a >> min(pos + ln - 1, msb)) & 1
    d = 0
    for i in range(32):
        bit = (a >> (pos + i)) & 1 if (i < ln and pos + i <= msb) else sbit
        d |= bit << i
    return d


def bfi(a: int, base: int, pos: int, ln: int) -> int:
    pos &= 0xFF
    ln &= 0xFF
    d = base
    for i in range(ln):
        if pos + i > 31:
            break
        d = (d & ~(1 << (pos + i))) | (((a >> i) & 1) << (pos + i))
    return d & M32


def prmt(a: int, b: int, c: int) -> int:
    tmp = (b << 32) | a
    out = 0
    for k in range(4):
        sel = (c >> (4 * k)) & 0xF
        byte = (tmp >> (8 * (sel & 7))) & 0xFF
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


def bfind(a: int, signed: bool, shiftamt: bool) -> int:
    v = a
    if signed and (a >> 31):
        v = (~a) & M32
    if v == 0:
        return M32
    pos = v.bit_length() - 1
    return 31 - pos if shiftamt else pos


def idiv(a: int, b: int, signed: bool, rem: bool) -> int:
    if signed:
        x, y = s32(a), s32(b)
        if y == 0:
            return M32  # by zero: all ones, quotient and remainder alike (measured on the H100)
        q = abs(x) // abs(y)
        q = -q if (x < 0) != (y < 0) else q
        r = x - q * y
        return (r if rem else q) & M32
    if b == 0:
        return M32  # by zero: all ones (measured on the H100)
    return (a % b) if rem else (a // b)


def reference(name: str, a: int, b: int, c: int) -> int:
    """What the PTX ISA says op ``name`` gives for operands a, b, c (raw 32-bit patterns)."""
    base = name
    if base == "add.rn.f32":
        return ref_add(a, b, "rn")
    if base == "sub.rn.f32":
        return ref_add(a, b, "rn", sub=True)
    if base == "mul.rn.f32":
        return ref_mul(a, b, "rn")
    if base == "add.rz.f32":
        return ref_add(a, b, "rz")
    if base == "mul.rm.f32":
        return ref_mul(a, b, "rm")
    if base == "mul.rp.f32":
        return ref_mul(a, b, "rp")
    if base.startswith("fma.") and base.endswith(".f32") and "sat" not in base:
        return ref_fma(a, b, c, base.split(".")[1])
    if base == "div.rn.f32":
        return ref_div(a, b, "rn")
    if base == "div.rz.f32":
        return ref_div(a, b, "rz")
    if base == "sqrt.rn.f32":
        return ref_sqrt(a)
    if base == "rcp.rn.f32":
        return ref_div(bits(1.0), a, "rn")
    if base == "min.f32":
        return ref_minmax(a, b, False)
    if base == "max.f32":
        return ref_minmax(a, b, True)
    if base == "min.NaN.f32":
        return ref_minmax(a, b, False, True)
    if base == "abs.f32":  # a NaN comes out canonical (measured on the H100)
        return NAN32 if is_nan(a) else a & 0x7FFFFFFF
    if base == "neg.f32":
        return NAN32 if is_nan(a) else a ^ 0x80000000
    if base == "add.ftz.f32":
        return ftz(ref_add(ftz(a), ftz(b), "rn"))
    if base == "add.sat.f32":
        return sat(ref_add(a, b, "rn"))
    if base == "fma.rn.sat.f32":
        return sat(ref_fma(a, b, c, "rn"))
    if base == "copysign.f32":
        return (b & 0x7FFFFFFF) | (a & 0x80000000)
    if base == "cvt.rzi.s32.f32":
        return f2i(a, "rz", True)
    if base == "cvt.rni.s32.f32":
        return f2i(a, "rn", True)
    if base == "cvt.rmi.u32.f32":
        return f2i(a, "rm", False)
    if base == "cvt.rpi.s32.f32":
        return f2i(a, "rp", True)
    if base == "cvt.rni.f32.f32":
        if is_nan(a):
            return NAN32
        x = f(a)
        if math.isinf(x) or x == 0:
            return a
        r = round(fval(a))
        return bits(float(r)) if r != 0 else (a & 0x80000000)
    if base == "cvt.rn.f32.s32":
        v = s32(a)
        return to_f32(Fraction(v), "rn") if v else 0
    if base == "cvt.rz.f32.u32":
        return to_f32(Fraction(a), "rz") if a else 0
    if base == "cvt.rn.bf16x2.f32":
        return (half_bits(a, "bf16") << 16) | half_bits(b, "bf16")
    if base == "cvt.rn.f16x2.f32":
        return (half_bits(a, "f16") << 16) | half_bits(b, "f16")
    if base == "cvt.f32.bf16":
        return half_value(a & 0xFFFF, "bf16")
    if base == "cvt.f32.f16":  # an f16 NaN widens to the canonical NaN (measured on the H100)
        v = half_value(a & 0xFFFF, "f16")
        return NAN32 if is_nan(v) else v
    if base == "add.s32":
        return (a + b) & M32
    if base == "sub.s32":
        return (a - b) & M32
    if base == "mul.lo.s32":
        return (a * b) & M32
    if base == "mul.hi.s32":
        return ((s32(a) * s32(b)) >> 32) & M32
    if base == "mul.hi.u32":
        return (a * b) >> 32
    if base == "mad.lo.s32":
        return (a * b + c) & M32
    if base == "div.s32":
        return idiv(a, b, True, False)
    if base == "div.u32":
        return idiv(a, b, False, False)
    if base == "rem.s32":
        return idiv(a, b, True, True)
    if base == "rem.u32":
        return idiv(a, b, False, True)
    if base == "min.s32":
        return a if s32(a) <= s32(b) else b
    if base == "max.u32":
        return max(a, b)
    if base == "shl.b32":
        return (a << b) & M32 if b < 32 else 0
    if base == "shr.u32":
        return a >> b if b < 32 else 0
    if base == "shr.s32":
        return (s32(a) >> min(b, 31)) & M32
    if base == "bfe.u32":
        return bfe(a, b, c, False)
    if base == "bfe.s32":
        return bfe(a, b, c, True)
    if base == "bfi.b32":
        return bfi(a, b, c, 5)
    if base == "prmt.b32":
        return prmt(a, b, c)
    if base == "popc.b32":
        return bin(a).count("1")
    if base == "clz.b32":
        return 32 - a.bit_length()
    if base == "brev.b32":
        return int(f"{a:032b}"[::-1], 2)
    if base == "bfind.u32":
        return bfind(a, False, False)
    if base == "bfind.s32":
        return bfind(a, True, False)
    if base == "bfind.shiftamt.u32":
        return bfind(a, False, True)
    if base == "lop3.b32":
        return (a ^ b ^ c) & M32  # 0x96 is the three-way XOR
    if base == "shf.l.wrap.b32":
        n = c & 31
        return (((b << 32 | a) << n) >> 32) & M32
    if base == "shf.r.clamp.b32":
        n = min(c, 32)
        return ((b << 32 | a) >> n) & M32
    if base == "sad.u32":
        return (abs(a - b) + c) & M32
    if base == "abs.s32":
        return abs(s32(a)) & M32
    if base == "neg.s32":
        return (-a) & M32
    if base == "cnot.b32":
        return 1 if a == 0 else 0
    if base == "mul.wide.s32.lo":
        return (s32(a) * s32(b)) & M32
    if base == "mul.wide.s32.hi":
        return ((s32(a) * s32(b)) >> 32) & M32
    if base == "setp.lt.f32":
        return int(not (is_nan(a) or is_nan(b)) and f(a) < f(b))
    if base == "setp.equ.f32":
        return int(is_nan(a) or is_nan(b) or f(a) == f(b))
    if base == "setp.neu.f32":
        return int(is_nan(a) or is_nan(b) or f(a) != f(b))
    if base == "setp.nan.f32":
        return int(is_nan(a) or is_nan(b))
    if base == "setp.lo.u32":
        return int(a < b)
    if base == "setp.gt.s32.and":
        return int(s32(a) > s32(b) and c != 0)
    raise KeyError(name)
