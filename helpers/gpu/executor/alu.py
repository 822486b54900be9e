"""Arithmetic, logic, comparison, data movement and conversion instructions, bit-exact with PTX's semantics
(integers wrap; fp32/fp64 correctly rounded in every mode; the GPU's canonical NaN; saturation and NaN rules of
cvt). Approximate instructions (ex2.approx, rcp.approx, ...) return the exact function rounded to the type and
say once per run that the GPU's approximation may differ in the last bits (:data:`SPECIAL_FNS` gives the bounds)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import numerics as N
from .machine import CTA, DT, Binder, count
from .parser import Imm, Vec
from .registry import decoder

_RND = {"rn", "rz", "rm", "rp"}
_IRND = {"rni", "rzi", "rmi", "rpi"}
_APPROX = {"approx", "full"}


def _mode(b: Binder, default: str = "rn") -> str:
    r = [x for x in b.q if x in _RND]
    return r[0] if r else default


def _bits(dt: np.dtype) -> int:
    return dt.itemsize * 8


def _udt(dt: np.dtype) -> np.dtype:
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize])


def _sdt(dt: np.dtype) -> np.dtype:
    return np.dtype({1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize])


def _arr(x: Any, dt: np.dtype, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(x, dt), (n,))


def _float_post(b: Binder, ty: str) -> Any:
    """fp32 output handling: .ftz flushes subnormal results, .sat clamps; NaNs become canonical."""
    ftz = "ftz" in b.q
    sat = "sat" in b.q
    if ty != "f32":
        if sat:
            return lambda x: N.sat01(x)
        return lambda x: x

    def post(x: np.ndarray) -> np.ndarray:
        if ftz:
            x = N.ftz32(x)
        if sat:
            x = N.sat01(x)
        return N.canon_nan32(x)

    return post


def _fused_f32(b: Binder, fn: Any) -> Any:
    """``d = fn(a, b)`` rounded to nearest in fp32 (add, mul: numpy's float32 ufunc is the IEEE operation) as one
    closure over the register banks, NaNs made canonical, when d, a and b are plain f32 registers and there is no
    .ftz or .sat; None otherwise."""
    if len(b.ops) != 3 or _mode(b) != "rn" or "ftz" in b.q or "sat" in b.q:
        return None
    refs = [b.regref(op, "f32") for op in b.ops]
    if any(r is None for r in refs):
        return None
    (Vd, rd), (Va, ra), (Vb, rb) = refs
    nz = N.count_nonzero
    canon = N.canon_nan32

    def op(m: Any, c: CTA) -> None:
        r = fn(Va[ra, m], Vb[rb, m])
        if nz(r != r):
            r = canon(r)
        Vd[rd, m] = r

    return op


def _float_in(b: Binder, ty: str, f: Any) -> Any:
    if ty == "f32" and "ftz" in b.q:
        return lambda m: N.ftz32(f(m))
    return f


def _no_approx(b: Binder) -> None:
    for x in b.q:
        if x in _APPROX:
            raise b.fail(f".{x} results are implementation-defined approximations, not emulated bit-exactly "
                         "(the course's kernels use IEEE-rounded arithmetic; compile without fast-math)")


# ------------------------------------------------------------------------------------------- half precision
def _round_to(s: np.ndarray, e: np.ndarray, p: int, emin_q: int, maxval: float, mode: str) -> np.ndarray:
    """Round the exact value s + e (fp64 pair) to a binary format with p-bit significands, quantum at least
    2**emin_q and largest finite ``maxval``; returns fp64 values of that format (inf on overflow)."""
    s = np.asarray(s, np.float64)
    e = np.broadcast_to(np.asarray(e, np.float64), s.shape)
    with np.errstate(all="ignore"):
        _, ex = np.frexp(s)
        scale = np.ldexp(1.0, np.maximum(ex - p, emin_q))
        q = s / scale
        fl = np.floor(q)
        frac = q - fl
        lo = np.where((frac == 0) & (e < 0), fl - 1, fl)
        hi = np.where((frac == 0) & (e <= 0), fl, fl + 1)
        exact = (frac == 0) & (e == 0)
        if mode == "rn":
            gt = (frac > 0.5) | ((frac == 0.5) & (e > 0))
            tie = (frac == 0.5) & (e == 0)
            r = np.where(gt, fl + 1, fl)
            r = np.where(tie, np.where(np.mod(fl, 2) == 0, fl, fl + 1), r)
            r = np.where((frac == 0), fl, r)
        elif mode == "rz":
            r = np.where(s > 0, lo, hi)
        elif mode == "rm":
            r = lo
        elif mode == "rp":
            r = hi
        else:
            raise ValueError(mode)
        r = np.where(exact, fl, r)
        out = r * scale
        big = np.abs(out) > maxval
        if mode == "rn":
            out = np.where(big, np.copysign(np.inf, s), out)
        else:
            toward_inf = (mode == "rp") & (s > 0) | (mode == "rm") & (s < 0)
            out = np.where(big, np.where(toward_inf, np.copysign(np.inf, s), np.copysign(maxval, s)), out)
        out = np.where(np.isfinite(s), out, s)
        out = np.where(out == 0, np.copysign(0.0, s), out)
    return out


def _half_bits(x64: np.ndarray, ty: str, mode: str = "rn", e: Any = 0.0) -> np.ndarray:
    """fp64 exact value -> f16 / bf16 bit patterns (NaN -> 0x7FFF)."""
    if ty == "f16":
        r = _round_to(x64, e, 11, -24, 65504.0, mode)
        bits = r.astype(np.float16).view(np.uint16)
    else:
        r = _round_to(x64, e, 8, -133, float.fromhex("0x1.fep127"), mode)
        bits = (r.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x64), np.uint16(0x7FFF), bits).astype(np.uint16)


def _half_value(bits: np.ndarray, ty: str) -> np.ndarray:
    bits = np.asarray(bits, np.uint16)
    if ty == "f16":
        return bits.view(np.float16).astype(np.float64)
    return N.bf16_bits_to_f32(bits).astype(np.float64)


def _half_op(b: Binder, ty: str, nargs: int, fn: Any) -> Any:
    """add/sub/mul/fma/min/max/neg/abs on f16, bf16 and their x2 forms (exact in fp64, then rounded)."""
    base = ty.replace("x2", "")
    lanes = 2 if ty.endswith("x2") else 1
    rty = "b32" if lanes == 2 else "b16"
    d = b.dst(b.ops[0], rty)
    srcs = [b.val(op, rty) for op in b.ops[1:1 + nargs]]
    mode = _mode(b)
    relu = "relu" in b.q
    sat = "sat" in b.q

    def lanes_of(x: np.ndarray) -> list[np.ndarray]:
        x = np.asarray(x)
        if lanes == 1:
            return [x.astype(np.uint16)]
        x = x.astype(np.uint32)
        return [(x & np.uint32(0xFFFF)).astype(np.uint16), (x >> np.uint32(16)).astype(np.uint16)]

    def op(m: Any, c: CTA) -> None:
        n = count(m)
        args = [lanes_of(np.broadcast_to(np.asarray(f(m)), (n,))) for f in srcs]
        outs = []
        for k in range(lanes):
            vals = [_half_value(a[k], base) for a in args]
            s, e = fn(*vals)
            if relu:
                s = np.where(np.isnan(s), s, np.maximum(s, 0.0))
            if sat:
                s = np.where(np.isnan(s), 0.0, np.clip(s, 0.0, 1.0))
            outs.append(_half_bits(s, base, mode, e))
        if lanes == 1:
            d(m, outs[0])
        else:
            d(m, (outs[0].astype(np.uint32) | (outs[1].astype(np.uint32) << np.uint32(16))))

    return op


def _two_sum(p: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        s = p + c
        bb = s - p
        e = (p - (s - bb)) + (c - bb)
    return s, np.where(np.isfinite(e), e, 0.0)


_HALF_FNS = {
    "add": (2, lambda a, x: _two_sum(a, x)),
    "sub": (2, lambda a, x: _two_sum(a, -x)),
    "mul": (2, lambda a, x: (a * x, 0.0)),
    "fma": (3, lambda a, x, y: _two_sum(a * x, y)),
    "neg": (1, lambda a: (-a, 0.0)),
    "abs": (1, lambda a: (np.abs(a), 0.0)),
}


# ------------------------------------------------------------------------------------------- add sub mul mad fma
def _int_binary(b: Binder, ty: str, fn: Any) -> Any:
    if isinstance(fn, np.ufunc):
        fused = b.fused_binary(fn, ty)
        if fused is not None:
            return fused
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    dt = DT[ty]
    return lambda m, c: d(m, np.asarray(fn(x(m), y(m)), dt))


@decoder("add", "sub")
def _add_sub(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    sub = b.base == "sub"
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        b.only({"rn", "ftz", "sat"})
        n, fn = _HALF_FNS[b.base]
        return _half_op(b, ty, n, fn)
    if dt.kind == "f":
        b.only(_RND | {"ftz", "sat"})
        mode = _mode(b)
        post = _float_post(b, ty)
        x = _float_in(b, ty, b.val(b.ops[1], ty))
        y = _float_in(b, ty, b.val(b.ops[2], ty))
        d = b.dst(b.ops[0], ty)
        if ty == "f32":
            fused = None if sub else _fused_f32(b, np.add)
            if fused is not None:
                return fused
            if sub:
                return lambda m, c: d(m, post(N.add_f32(x(m), -np.asarray(y(m), np.float32), mode)))
            return lambda m, c: d(m, post(N.add_f32(x(m), y(m), mode)))
        if mode != "rn":
            return lambda m, c: d(m, N.fma_f64(np.float64(1), x(m), -y(m) if sub else y(m), mode))
        return lambda m, c: d(m, post(x(m) - y(m) if sub else x(m) + y(m)))
    b.only({"sat", "cc"})
    if "cc" in b.q:
        return _carry(b, ty, sub, False)
    if "sat" in b.q:
        if ty != "s32":
            raise b.fail(".sat on a type other than .s32")

        def satop(a: Any, c2: Any) -> Any:
            r = np.asarray(a, np.int64) + (-1 if sub else 1) * np.asarray(c2, np.int64)
            return np.clip(r, -(2 ** 31), 2 ** 31 - 1).astype(np.int32)

        return _int_binary(b, ty, satop)
    return _int_binary(b, ty, np.subtract if sub else np.add)


def _carry(b: Binder, ty: str, sub: bool, use_in: bool) -> Any:
    """add.cc / addc / sub.cc / subc: the carry flag lives in machine.CC."""
    mach = b.mach
    if not hasattr(mach, "CC"):
        mach.CC = np.zeros(mach.N, np.uint64)
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    bits = _bits(dt)
    mask = (1 << bits) - 1
    sets = "cc" in b.q

    def op(m: Any, c: CTA) -> None:
        n = count(m)
        a = _arr(x(m), _udt(dt), n).astype(object)
        bb = _arr(y(m), _udt(dt), n).astype(object)
        cin = mach.CC[m].astype(object) if use_in else 0
        if sub:
            r = a - bb - cin
            cout = np.array([1 if v < 0 else 0 for v in np.atleast_1d(r)], np.uint64)
        else:
            r = a + bb + cin
            cout = np.array([1 if v > mask else 0 for v in np.atleast_1d(r)], np.uint64)
        res = np.array([int(v) & mask for v in np.atleast_1d(r)], _udt(dt)).view(dt)
        d(m, res)
        if sets:
            mach.CC[m] = cout

    return op


@decoder("addc", "subc")
def _addc(b: Binder) -> Any:
    b.only({"cc"})
    return _carry(b, b.type(), b.base == "subc", True)


def _mul_hi(a: np.ndarray, c: np.ndarray, dt: np.dtype) -> np.ndarray:
    if dt.itemsize <= 4:
        w = np.int64 if dt.kind == "i" else np.uint64
        p = np.asarray(a, w) * np.asarray(c, w)
        return (p >> w(_bits(dt))).astype(dt)
    # 64 x 64 -> high 64 bits, through 32-bit limbs
    ua = np.asarray(a).astype(np.uint64)
    uc = np.asarray(c).astype(np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    a0, a1 = ua & m32, ua >> np.uint64(32)
    c0, c1 = uc & m32, uc >> np.uint64(32)
    p00 = a0 * c0
    p01 = a0 * c1
    p10 = a1 * c0
    p11 = a1 * c1
    mid = (p00 >> np.uint64(32)) + (p01 & m32) + (p10 & m32)
    hi = p11 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (mid >> np.uint64(32))
    if dt.kind == "i":  # signed correction
        sa = np.asarray(a).astype(np.int64) < 0
        sc = np.asarray(c).astype(np.int64) < 0
        hi = hi - np.where(sa, uc, np.uint64(0)) - np.where(sc, ua, np.uint64(0))
    return hi.view(dt) if hi.dtype.itemsize == dt.itemsize else hi.astype(dt)


def _wide(dt: np.dtype) -> np.dtype:
    return np.dtype({(2, "i"): np.int32, (2, "u"): np.uint32, (4, "i"): np.int64, (4, "u"): np.uint64}[
        (dt.itemsize, dt.kind)])


def _wide_ty(ty: str) -> str:
    return {"s16": "s32", "u16": "u32", "s32": "s64", "u32": "u64"}[ty]


@decoder("mul")
def _mul(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        b.only({"rn", "ftz", "sat"})
        return _half_op(b, ty, 2, _HALF_FNS["mul"][1])
    if dt.kind == "f":
        b.only(_RND | {"ftz", "sat"})
        mode = _mode(b)
        post = _float_post(b, ty)
        x = _float_in(b, ty, b.val(b.ops[1], ty))
        y = _float_in(b, ty, b.val(b.ops[2], ty))
        d = b.dst(b.ops[0], ty)
        if ty == "f32":
            fused = _fused_f32(b, np.multiply)
            if fused is not None:
                return fused
            return lambda m, c: d(m, post(N.mul_f32(x(m), y(m), mode)))
        if mode != "rn":
            return lambda m, c: d(m, N.fma_f64(x(m), y(m), np.float64(-0.0), mode))
        return lambda m, c: d(m, post(x(m) * y(m)))
    b.only({"lo", "hi", "wide"})
    if "wide" in b.q:
        wt = _wide_ty(ty)
        wd = DT[wt]
        d = b.dst(b.ops[0], wt)
        x = b.val(b.ops[1], ty)
        y = b.val(b.ops[2], ty)
        return lambda m, c: d(m, np.asarray(x(m)).astype(wd) * np.asarray(y(m)).astype(wd))
    if "hi" in b.q:
        return _int_binary(b, ty, lambda a, c2: _mul_hi(a, c2, dt))
    return _int_binary(b, ty, np.multiply)


@decoder("mul24", "mad24")
def _mul24(b: Binder) -> Any:
    raise b.fail("24-bit multiplies are not emulated")


@decoder("mad", "fma")
def _mad(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        b.only({"rn", "ftz", "sat", "relu"})
        return _half_op(b, ty, 3, _HALF_FNS["fma"][1])
    if dt.kind == "f":
        b.only(_RND | {"ftz", "sat"})
        if b.base == "mad" and not any(x in b.q for x in _RND) and ty == "f32":
            raise b.fail("mad.f32 without a rounding mode is the legacy unfused multiply-add")
        mode = _mode(b)
        post = _float_post(b, ty)
        x = _float_in(b, ty, b.val(b.ops[1], ty))
        y = _float_in(b, ty, b.val(b.ops[2], ty))
        z = _float_in(b, ty, b.val(b.ops[3], ty))
        d = b.dst(b.ops[0], ty)
        if ty == "f32" and mode == "rn" and not any(q in b.q for q in ("ftz", "sat")):
            refs = [b.regref(op, "f32") for op in b.ops]
            if all(r is not None for r in refs):
                (Vd, rd), (Va, ra), (Vb, rb), (Vc, rc) = refs
                fast = N.fma_rn_to_store  # Vd is a float32 view: the store rounds

                def fma(m: Any, c: CTA) -> None:
                    Vd[rd, m] = fast(Va[ra, m], Vb[rb, m], Vc[rc, m])

                return fma
            return lambda m, c: d(m, N.fma_rn_fast(np.asarray(x(m), np.float32), np.asarray(y(m), np.float32),
                                                   np.asarray(z(m), np.float32)))
        if ty == "f32":
            return lambda m, c: d(m, post(N.fma_f32(x(m), y(m), z(m), mode)))
        return lambda m, c: d(m, N.fma_f64(x(m), y(m), z(m), mode))
    b.only({"lo", "hi", "wide", "sat", "cc"})
    if "cc" in b.q or "sat" in b.q:
        raise b.fail("mad with carry or saturation is not emulated")
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    if "wide" in b.q:
        wt = _wide_ty(ty)
        wd = DT[wt]
        d = b.dst(b.ops[0], wt)
        z = b.val(b.ops[3], wt)
        return lambda m, c: d(m, (np.asarray(x(m)).astype(wd) * np.asarray(y(m)).astype(wd) + z(m)).astype(wd))
    d = b.dst(b.ops[0], ty)
    z = b.val(b.ops[3], ty)
    if "hi" in b.q:
        return lambda m, c: d(m, (_mul_hi(x(m), y(m), dt) + z(m)).astype(dt))
    return lambda m, c: d(m, np.asarray(x(m) * y(m) + z(m), dt))


# ------------------------------------------------------------------------------------------- div rem
def _int_div(a: np.ndarray, c: np.ndarray, dt: np.dtype, rem: bool) -> np.ndarray:
    a = np.asarray(a, dt)
    c = np.asarray(c, dt)
    a, c = np.broadcast_arrays(a, c)
    zero = c == 0
    if dt.kind == "u":
        safe = np.where(zero, dt.type(1), c)
        q = a // safe
        r = a % safe
        q = np.where(zero, np.iinfo(dt).max, q)
        r = np.where(zero, np.iinfo(dt).max, r)  # all ones by zero (measured on the H100)
        return np.asarray(r if rem else q, dt)
    ua = np.abs(a.astype(np.int64)) if dt.itemsize < 8 else np.abs(a).astype(np.uint64)
    uc = np.abs(c.astype(np.int64)) if dt.itemsize < 8 else np.abs(c).astype(np.uint64)
    ua = ua.astype(np.uint64)
    uc = uc.astype(np.uint64)
    safe = np.where(zero, np.uint64(1), uc)
    uq = ua // safe
    ur = ua % safe
    neg_q = (a < 0) != (c < 0)
    q = np.where(neg_q, (~uq + np.uint64(1)), uq).astype(_udt(dt)).view(dt)
    r = np.where(a < 0, (~ur + np.uint64(1)), ur).astype(_udt(dt)).view(dt)
    # by zero, the H100 gives all ones for the quotient and the remainder, whatever the sign (measured)
    q = np.where(zero, dt.type(-1), q)
    r = np.where(zero, dt.type(-1), r)
    return np.asarray(r if rem else q, dt)


@decoder("div")
def _div(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    if dt.kind == "f":
        _no_approx(b)
        b.only(_RND | {"ftz"})
        if not any(x in b.q for x in _RND):
            raise b.fail("div.f32 without a rounding mode")
        mode = _mode(b)
        post = _float_post(b, ty)
        x = _float_in(b, ty, b.val(b.ops[1], ty))
        y = _float_in(b, ty, b.val(b.ops[2], ty))
        if ty == "f32":
            return lambda m, c: d(m, post(N.div_f32(x(m), y(m), mode)))
        if mode != "rn":
            raise b.fail(f"div.{mode}.f64 is not emulated")
        return lambda m, c: d(m, np.asarray(x(m), np.float64) / np.asarray(y(m), np.float64))
    b.only(set())
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    return lambda m, c: d(m, _int_div(x(m), y(m), dt, False))


@decoder("rem")
def _rem(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    return lambda m, c: d(m, _int_div(x(m), y(m), dt, True))


@decoder("rcp", "sqrt")
def _rcp_sqrt(b: Binder) -> Any:
    if "approx" in b.q:
        return _special(b)
    _no_approx(b)
    b.only(_RND | {"ftz"})
    ty = b.type()
    if not any(x in b.q for x in _RND):
        raise b.fail("no rounding mode")
    mode = _mode(b)
    post = _float_post(b, ty)
    x = _float_in(b, ty, b.val(b.ops[1], ty))
    d = b.dst(b.ops[0], ty)
    if ty == "f32":
        f = N.rcp_f32 if b.base == "rcp" else N.sqrt_f32
        return lambda m, c: d(m, post(f(x(m), mode)))
    if ty == "f64" and mode == "rn":
        if b.base == "rcp":
            return lambda m, c: d(m, np.float64(1) / np.asarray(x(m), np.float64))
        return lambda m, c: d(m, np.sqrt(np.asarray(x(m), np.float64)))
    raise b.fail(f"{b.base}.{mode}.{ty}")


@decoder("tex", "tld4", "suld", "sust")
def _texture(b: Binder) -> Any:
    raise b.fail("texture and surface instructions are not emulated")


# ------------------------------------------------------------------------------------------- special functions
#: the exact function (fp64) behind each approximation, and the bound of the GPU's error that the PTX ISA states
#: (relative unless "absolute"): the executor returns the exact value rounded to the type, so it differs from the
#: GPU's answer by at most about that much
SPECIAL_FNS: dict[str, tuple[Any, str]] = {
    "ex2": (np.exp2, "about 2 ulp"),
    "lg2": (np.log2, "absolute 2^-22.6 (relative 2^-22 away from 1)"),
    "rcp": (lambda x: 1.0 / x, "1 ulp"),
    "sqrt": (np.sqrt, "relative 2^-23"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), "relative 2^-22.9"),
    "sin": (np.sin, "absolute 2^-21.5 for |x| <= pi, 2^-14.8 up to 100 pi, and no accuracy beyond about 10^4 "
                    "(measured on an H200)"),
    "cos": (np.cos, "absolute 2^-21.5 for |x| <= pi, 2^-14.8 up to 100 pi, and no accuracy beyond about 10^4 "
                    "(measured on an H200)"),
    "tanh": (np.tanh, "relative 2^-16.7 (f32, measured), about 1 ulp (f16/bf16)"),
}


def approximation_note(name: str) -> str:
    """What the executor says, once per run, about an approximate instruction it ran."""
    fn = name.split(".")[0]
    return (f"{name}: the GPU computes an approximation (error up to {SPECIAL_FNS[fn][1]}); the executor returns "
            "the exact value rounded to the type, so this instruction's results can differ from the GPU's in the "
            "last bits (its bit-exact algorithm is not yet established from a capture)")


@decoder("rsqrt", "ex2", "lg2", "sin", "cos", "tanh")
def _special(b: Binder) -> Any:
    """ex2 / lg2 / rcp / sqrt / rsqrt / sin / cos / tanh ``.approx``: the exact function rounded to the type, with
    .ftz on inputs and results, and the GPU's canonical NaN; the run says once that results may differ from the
    GPU's approximation (:func:`approximation_note`)."""
    b.only({"approx", "ftz"})
    ty = b.type()
    fn, _bound = SPECIAL_FNS[b.base]
    if ty not in ("f32", "f16", "bf16", "f16x2", "bf16x2") or (ty != "f32" and b.base not in ("ex2", "tanh")):
        raise b.fail(f"{b.base}.approx.{ty} is not emulated")
    name = b.ins.opcode
    note = approximation_note(name)
    mach = b.mach
    ftz = "ftz" in b.q
    if ty == "f32":
        x = b.val(b.ops[1], "f32")
        d = b.dst(b.ops[0], "f32")

        def op32(m: Any, c: CTA) -> None:
            mach.notes.setdefault(name, note)
            a = np.asarray(x(m), np.float32)
            if ftz:
                a = N.ftz32(a)
            with np.errstate(all="ignore"):
                r = N.round_f32(fn(a.astype(np.float64)))
            if ftz:
                r = N.ftz32(r)
            d(m, N.canon_nan32(r))

        return op32
    base = ty.replace("x2", "")
    lanes = 2 if ty.endswith("x2") else 1
    rty = "b32" if lanes == 2 else "b16"
    x = b.val(b.ops[1], rty)
    d = b.dst(b.ops[0], rty)

    def op16(m: Any, c: CTA) -> None:
        mach.notes.setdefault(name, note)
        v = np.broadcast_to(np.asarray(x(m)), (count(m),)).astype(np.uint32)
        out = np.zeros(count(m), np.uint32)
        for k in range(lanes):
            h = ((v >> np.uint32(16 * k)) & np.uint32(0xFFFF)).astype(np.uint16)
            v = _half_value(h, base)
            if ftz:  # .ftz (bf16): subnormal inputs and results are zeros of their sign
                v = np.where(np.abs(v) < 2.0 ** -126, np.copysign(0.0, v), v)
            with np.errstate(all="ignore"):
                r64 = fn(v)
                if ftz:
                    r64 = np.where(np.abs(r64) < 2.0 ** -126, np.copysign(0.0, r64), r64)
                r = _half_bits(r64, base)
            out |= r.astype(np.uint32) << np.uint32(16 * k)
        d(m, out if lanes == 2 else out.astype(np.uint16))

    return op16


# ------------------------------------------------------------------------------------------- abs neg min max
@decoder("abs", "neg")
def _abs_neg(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        b.only({"ftz"})
        d = b.dst(b.ops[0], "b32" if ty.endswith("x2") else "b16")
        x = b.val(b.ops[1], "b32" if ty.endswith("x2") else "b16")
        k = np.uint32(0x80008000) if ty.endswith("x2") else np.uint16(0x8000)
        if b.base == "neg":
            return lambda m, c: d(m, np.asarray(x(m)) ^ k)
        return lambda m, c: d(m, np.asarray(x(m)) & ~k)
    d = b.dst(b.ops[0], ty)
    if dt.kind == "f":
        b.only({"ftz"})
        x = _float_in(b, ty, b.val(b.ops[1], ty))
        ud = _udt(dt)
        sign = ud.type(1 << (_bits(dt) - 1))
        # fp32 abs/neg of a NaN give the canonical NaN on the H100 (measured); fp64 flips the sign bit only
        canon = N.canon_nan32 if ty == "f32" else (lambda v: v)
        if b.base == "neg":
            return lambda m, c: d(m, canon((np.asarray(x(m), dt).view(ud) ^ sign).view(dt)))
        return lambda m, c: d(m, canon((np.asarray(x(m), dt).view(ud) & ~sign).view(dt)))
    b.only(set())
    x = b.val(b.ops[1], ty)
    if b.base == "neg":
        return lambda m, c: d(m, np.asarray(-np.asarray(x(m), dt), dt))
    return lambda m, c: d(m, np.asarray(np.abs(np.asarray(x(m), dt)), dt))


@decoder("min", "max")
def _min_max(b: Binder) -> Any:
    ty = b.type()
    dt = DT[ty]
    want_max = b.base == "max"
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        b.only({"ftz", "NaN", "xorsign", "abs"})
        if "xorsign" in b.q:
            raise b.fail(".xorsign.abs")
        nan = "NaN" in b.q
        return _half_op(b, ty, 2, lambda a, x: (N.minmax_f(a, x, want_max, nan), 0.0))
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    if dt.kind == "f":
        b.only({"ftz", "NaN", "xorsign", "abs"})
        if "xorsign" in b.q:
            raise b.fail(".xorsign.abs")
        nan = "NaN" in b.q
        x = _float_in(b, ty, x)
        y = _float_in(b, ty, y)
        return lambda m, c: d(m, N.minmax_f(x(m), y(m), want_max, nan))
    b.only({"relu"})
    f = np.maximum if want_max else np.minimum
    if "relu" in b.q:
        return lambda m, c: d(m, np.maximum(f(x(m), y(m)), dt.type(0)).astype(dt))
    return lambda m, c: d(m, np.asarray(f(x(m), y(m)), dt))


@decoder("copysign")
def _copysign(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    ud = _udt(dt)
    sign = ud.type(1 << (_bits(dt) - 1))
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    return lambda m, c: d(m, ((np.asarray(y(m), dt).view(ud) & ~sign) | (np.asarray(x(m), dt).view(ud) & sign))
                          .view(dt))


@decoder("testp")
def _testp(b: Binder) -> Any:
    ty = b.type()
    kinds = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"}
    b.only(kinds)
    k = next(x for x in b.q if x in kinds)
    d = b.dst(b.ops[0], "pred")
    x = b.val(b.ops[1], ty)
    tiny = np.finfo(DT[ty]).tiny

    def f(m: Any, c: CTA) -> None:
        v = np.asarray(x(m))
        r = {"finite": np.isfinite(v), "infinite": np.isinf(v), "number": ~np.isnan(v), "notanumber": np.isnan(v),
             "normal": np.isfinite(v) & (np.abs(v) >= tiny),
             "subnormal": (v != 0) & (np.abs(v) < tiny)}[k]
        d(m, np.broadcast_to(r, (count(m),)))

    return f


# ------------------------------------------------------------------------------------------- logic and bits
@decoder("and", "or", "xor")
def _logic(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[b.base]
    if ty == "pred":
        d = b.dst(b.ops[0], "pred")
        x = b.pred(b.ops[1])
        y = b.pred(b.ops[2])
        return lambda m, c: d(m, f(x(m), y(m)))
    return _int_binary(b, ty, f)


@decoder("not", "cnot")
def _not(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    d = b.dst(b.ops[0], ty)
    if ty == "pred":
        x = b.pred(b.ops[1])
        return lambda m, c: d(m, ~x(m))
    x = b.val(b.ops[1], ty)
    dt = DT[ty]
    if b.base == "cnot":
        return lambda m, c: d(m, (np.asarray(x(m)) == 0).astype(dt))
    return lambda m, c: d(m, np.asarray(~np.asarray(x(m), dt), dt))


@decoder("shl", "shr")
def _shift(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    w = _bits(dt)
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    s = b.val(b.ops[2], "u32")
    left = b.base == "shl"
    arith = dt.kind == "i" and not left
    if isinstance(b.ops[2], Imm):
        k = b.ops[2].value & 0xFFFFFFFF
        if k >= w and not arith:
            zero = dt.type(0)
            return lambda m, c: d(m, np.full(count(m), zero))
        kk = dt.type(min(k, w - 1))
        fused = b.fused_binary(np.left_shift if left else np.right_shift, ty) if k < w else None
        if fused is not None:
            return fused
        if left:
            return lambda m, c: d(m, x(m) << kk)
        return lambda m, c: d(m, x(m) >> kk)

    def f(m: Any, c: CTA) -> None:
        a = np.asarray(x(m), dt)
        n = np.asarray(s(m), np.uint32)
        big = n >= w
        nn = np.minimum(n, w - 1).astype(dt)
        if left:
            r = np.where(big, dt.type(0), a << nn)
        elif arith:
            r = a >> nn
        else:
            r = np.where(big, dt.type(0), a >> nn)
        d(m, np.asarray(r, dt))

    return f


@decoder("shf")
def _shf(b: Binder) -> Any:
    b.only({"l", "r", "wrap", "clamp"})
    d = b.dst(b.ops[0], "b32")
    lo = b.val(b.ops[1], "b32")
    hi = b.val(b.ops[2], "b32")
    n = b.val(b.ops[3], "u32")
    left = "l" in b.q
    clamp = "clamp" in b.q

    def f(m: Any, c: CTA) -> None:
        k = np.asarray(n(m), np.uint64)
        k = np.minimum(k, np.uint64(32)) if clamp else (k & np.uint64(31))
        v = (np.asarray(hi(m), np.uint64) << np.uint64(32)) | np.asarray(lo(m), np.uint64)
        if left:
            r = ((v << k) >> np.uint64(32)) & np.uint64(0xFFFFFFFF)
        else:
            r = (v >> k) & np.uint64(0xFFFFFFFF)
        d(m, r.astype(np.uint32))

    return f


@decoder("popc", "clz", "brev")
def _bitcount(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    w = _bits(dt)
    d = b.dst(b.ops[0], "u32" if b.base != "brev" else ty)
    x = b.val(b.ops[1], ty)

    def bits(v: np.ndarray) -> np.ndarray:
        u = np.asarray(v).astype(np.uint64)
        return ((u[..., None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)

    if b.base == "popc":
        return lambda m, c: d(m, bits(x(m)).sum(axis=-1).astype(np.uint32))
    if b.base == "clz":
        def clz(m: Any, c: CTA) -> None:
            bb = bits(x(m))[..., ::-1]
            nz = bb.any(axis=-1)
            d(m, np.where(nz, bb.argmax(axis=-1), w).astype(np.uint32))

        return clz

    def brev(m: Any, c: CTA) -> None:
        bb = bits(x(m)).astype(np.uint64)
        r = (bb[..., ::-1] << np.arange(w, dtype=np.uint64)).sum(axis=-1).astype(np.uint64)
        d(m, r.astype(_udt(dt)).view(dt))

    return brev


@decoder("bfind")
def _bfind(b: Binder) -> Any:
    b.only({"shiftamt"})
    ty = b.type()
    dt = DT[ty]
    w = _bits(dt)
    d = b.dst(b.ops[0], "u32")
    x = b.val(b.ops[1], ty)
    shiftamt = "shiftamt" in b.q

    def f(m: Any, c: CTA) -> None:
        v = np.asarray(x(m), dt)
        if dt.kind == "i":
            v = np.where(v < 0, ~v, v)
        u = v.astype(_udt(dt)).astype(np.uint64)
        bits = (u[..., None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)
        nz = bits.any(axis=-1)
        pos = (w - 1) - bits[..., ::-1].argmax(axis=-1)
        r = np.where(nz, (w - 1 - pos) if shiftamt else pos, 0xFFFFFFFF)
        d(m, np.asarray(r).astype(np.uint32))

    return f


def _bit_field(pos: Any, ln: Any, n: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """bfe/bfi's field: position and length (each taken mod 256), the shift to apply and the mask of the bits that
    lie inside a w-bit word."""
    p = (_arr(pos, np.uint32, n) & np.uint32(0xFF)).astype(np.int64)
    length = (_arr(ln, np.uint32, n) & np.uint32(0xFF)).astype(np.int64)
    real = np.clip(np.minimum(length, w - p), 0, w)
    mask = np.where(real >= 64, np.uint64((1 << 64) - 1),
                    (np.uint64(1) << np.minimum(real, 63).astype(np.uint64)) - np.uint64(1))
    return p, length, np.minimum(p, w - 1).astype(np.uint64), mask


@decoder("bfe")
def _bfe(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    w = _bits(dt)
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    p = b.val(b.ops[2], "u32")
    ln = b.val(b.ops[3], "u32")
    signed = dt.kind == "i"

    def f(m: Any, c: CTA) -> None:
        n = count(m)
        a = _arr(x(m), dt, n).astype(_udt(dt)).astype(np.uint64)
        pos, length, sh, mask = _bit_field(p(m), ln(m), n, w)
        field = np.where(pos >= w, np.uint64(0), a >> sh) & mask
        if signed:
            spos = np.minimum(pos + length - 1, w - 1).astype(np.uint64)
            sbit = np.where(length > 0, (a >> spos) & np.uint64(1), np.uint64(0))
            allw = np.uint64((1 << w) - 1)
            field = np.where(sbit == 1, field | (~mask & allw), field)
        d(m, (field & np.uint64((1 << w) - 1)).astype(_udt(dt)).view(dt))

    return f


@decoder("bfi")
def _bfi(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    w = _bits(dt)
    d = b.dst(b.ops[0], ty)
    a = b.val(b.ops[1], ty)
    base = b.val(b.ops[2], ty)
    p = b.val(b.ops[3], "u32")
    ln = b.val(b.ops[4], "u32")

    def f(m: Any, c: CTA) -> None:
        n = count(m)
        ins = _arr(a(m), dt, n).astype(_udt(dt)).astype(np.uint64)
        bb = _arr(base(m), dt, n).astype(_udt(dt)).astype(np.uint64)
        pos, _length, sh, mask = _bit_field(p(m), ln(m), n, w)
        put = np.where(pos >= w, np.uint64(0), mask << sh)
        r = (bb & ~put) | ((ins << sh) & put)
        d(m, (r & np.uint64((1 << w) - 1)).astype(_udt(dt)).view(dt))

    return f


@decoder("prmt")
def _prmt(b: Binder) -> Any:
    modes = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"}
    b.only(modes)
    mode = next((x for x in b.q if x in modes), None)
    d = b.dst(b.ops[0], "b32")
    xa = b.val(b.ops[1], "b32")
    xb = b.val(b.ops[2], "b32")
    xc = b.val(b.ops[3], "b32")

    def f(m: Any, c: CTA) -> None:
        n = count(m)
        v = (_arr(xb(m), np.uint32, n).astype(np.uint64) << np.uint64(32)) | _arr(xa(m), np.uint32, n)
        byts = ((v[:, None] >> (np.arange(8, dtype=np.uint64) * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint32)
        cc = _arr(xc(m), np.uint32, n)
        if mode is None:
            sel = np.stack([(cc >> np.uint32(4 * k)) & np.uint32(0xF) for k in range(4)], axis=1)
            idx = (sel & np.uint32(7)).astype(np.int64)
            picked = np.take_along_axis(byts, idx, axis=1)
            sign = (picked >> np.uint32(7)) & np.uint32(1)
            picked = np.where((sel & np.uint32(8)) != 0, sign * np.uint32(0xFF), picked)
        else:
            s = (cc & np.uint32(3)).astype(np.int64)
            table = {"f4e": [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5], [3, 4, 5, 6]],
                     "b4e": [[0, 7, 6, 5], [1, 0, 7, 6], [2, 1, 0, 7], [3, 2, 1, 0]],
                     "rc8": [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]],
                     "ecl": [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]],
                     "ecr": [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]],
                     "rc16": [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]]}[mode]
            idx = np.array(table, np.int64)[s]
            picked = np.take_along_axis(byts, idx, axis=1)
        r = (picked.astype(np.uint64) << (np.arange(4, dtype=np.uint64) * np.uint64(8))).sum(axis=1)
        d(m, r.astype(np.uint32))

    return f


@decoder("lop3")
def _lop3(b: Binder) -> Any:
    b.only(set())
    d = b.dst(b.ops[0], "b32")
    xs = [b.val(op, "b32") for op in b.ops[1:4]]
    lut = b.ops[4]
    if not isinstance(lut, Imm):
        raise b.fail("lop3 with a non-immediate table")
    table = lut.value & 0xFF

    def f(m: Any, c: CTA) -> None:
        n = count(m)
        a, bb, cc = (_arr(g(m), np.uint32, n) for g in xs)
        r = np.zeros(n, np.uint32)
        for k in range(8):
            if table >> k & 1:
                r |= (a if k & 4 else ~a) & (bb if k & 2 else ~bb) & (cc if k & 1 else ~cc)
        d(m, r)

    return f


@decoder("sad")
def _sad(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    x, y, z = (b.val(op, ty) for op in b.ops[1:4])
    return lambda m, c: d(m, (np.where(x(m) > y(m), x(m) - y(m), y(m) - x(m)) + z(m)).astype(dt))


# ------------------------------------------------------------------------------------------- compare and select
_CMP_UFUNC = {"eq": np.equal, "ne": np.not_equal, "ne_ordered": np.not_equal, "lt": np.less, "le": np.less_equal,
              "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater,
              "hs": np.greater_equal}


def _cmp(op: str, a: np.ndarray, c: np.ndarray, is_float: bool) -> np.ndarray:
    if is_float:
        if op in ("equ", "neu", "ltu", "leu", "gtu", "geu"):
            nan = np.isnan(a) | np.isnan(c)
            return nan | _CMP_UFUNC[op[:-1] if op != "neu" else "ne_ordered"](a, c)
        if op == "num":
            return ~(np.isnan(a) | np.isnan(c))
        if op == "nan":
            return np.isnan(a) | np.isnan(c)
        if op == "ne":
            return ~(np.isnan(a) | np.isnan(c)) & (a != c)
    return _CMP_UFUNC[op](a, c)


_CMPS = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu", "geu", "num",
         "nan"}
_BOOLOPS = {"and", "or", "xor"}


@decoder("setp")
def _setp(b: Binder) -> Any:
    b.only(_CMPS | _BOOLOPS | {"ftz"})
    ty = b.type()
    dt = DT[ty]
    cmp = next(x for x in b.q if x in _CMPS)
    boolop = next((x for x in b.q if x in _BOOLOPS), None)
    dest = b.ops[0]
    from .parser import Pair

    dp = b.dst(dest.first if isinstance(dest, Pair) else dest, "pred")
    dq = b.dst(dest.second, "pred") if isinstance(dest, Pair) else None
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        raise b.fail("half-precision comparisons are not emulated")
    x = _float_in(b, ty, b.val(b.ops[1], ty))
    y = _float_in(b, ty, b.val(b.ops[2], ty))
    cpred = b.pred(b.ops[3]) if boolop else None
    is_float = dt.kind == "f"
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop or "")

    if comb is None and dq is None:
        ufunc = None if is_float and cmp not in ("eq", "lt", "le", "gt", "ge") else _CMP_UFUNC.get(cmp)
        if ufunc is not None:
            def fast(m: Any, c: CTA) -> None:
                r = ufunc(x(m), y(m))
                dp(m, r)

            return fast

    def f(m: Any, c: CTA) -> None:
        n = count(m)
        r = _cmp(cmp, x(m), y(m), is_float)
        if np.ndim(r) == 0:
            r = np.full(n, r)
        if comb is not None:
            cp = cpred(m)
            p = comb(r, cp)
            q = comb(~r, cp)
        else:
            p, q = r, ~r
        dp(m, p)
        if dq is not None:
            dq(m, q)

    return f


@decoder("set")
def _set(b: Binder) -> Any:
    b.only(_CMPS | _BOOLOPS | {"ftz"})
    dty, sty = b.type(-2), b.type(-1)
    cmp = next(x for x in b.q if x in _CMPS)
    if any(x in b.q for x in _BOOLOPS):
        raise b.fail("set with a boolean operator")
    d = b.dst(b.ops[0], dty)
    x = b.val(b.ops[1], sty)
    y = b.val(b.ops[2], sty)
    sdt = DT[sty]
    ddt = DT[dty]
    one = ddt.type(1.0) if ddt.kind == "f" else np.array(-1).astype(ddt)[()]
    return lambda m, c: d(m, np.where(_cmp(cmp, np.asarray(x(m), sdt), np.asarray(y(m), sdt), sdt.kind == "f"),
                                      one, ddt.type(0)).astype(ddt))


@decoder("selp")
def _selp(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    p = b.pred(b.ops[3])
    return lambda m, c: d(m, np.where(p(m), x(m), y(m)).astype(dt))


@decoder("slct")
def _slct(b: Binder) -> Any:
    b.only({"ftz"})
    ty, cty = b.type(-2), b.type(-1)
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    x = b.val(b.ops[1], ty)
    y = b.val(b.ops[2], ty)
    z = b.val(b.ops[3], cty)
    return lambda m, c: d(m, np.where(np.asarray(z(m)) >= 0, x(m), y(m)).astype(dt))


# ------------------------------------------------------------------------------------------- mov and cvt
@decoder("mov")
def _mov(b: Binder) -> Any:
    b.only(set())
    ty = b.type()
    dt = DT[ty]
    dst, src = b.ops[0], b.ops[1]
    if isinstance(src, Vec):  # pack: the first element is the least significant
        k = len(src.items)
        part = _udt(np.dtype(f"u{dt.itemsize // k}"))
        pty = {1: "b8", 2: "b16", 4: "b32"}[dt.itemsize // k]
        vals = [b.val(x, pty) for x in src.items]
        d = b.dst(dst, ty)
        ud = _udt(dt)
        w = part.itemsize * 8

        def pack(m: Any, c: CTA) -> None:
            n = count(m)
            r = np.zeros(n, ud)
            for i, f in enumerate(vals):
                r |= _arr(f(m), part, n).astype(ud) << ud.type(w * i)
            d(m, r.view(dt))

        return pack
    if isinstance(dst, Vec):  # unpack
        k = len(dst.items)
        pty = {1: "b8", 2: "b16", 4: "b32"}[dt.itemsize // k]
        part = DT[pty]
        outs = [b.dst(x, pty) for x in dst.items]
        x = b.val(src, ty)
        ud = _udt(dt)
        w = part.itemsize * 8
        mask = ud.type((1 << w) - 1)

        def unpack(m: Any, c: CTA) -> None:
            v = np.asarray(x(m), dt).view(ud)
            parts = [((v >> ud.type(w * i)) & mask).astype(part) for i in range(k)]
            for o, p in zip(outs, parts, strict=True):
                o(m, p)

        return unpack
    if ty == "pred":
        d = b.dst(dst, "pred")
        x = b.pred(src)
        return lambda m, c: d(m, x(m))
    dref, sref = b.regref(dst, ty), b.regref(src, ty)
    if dref is not None and sref is not None:
        (Vd, rd), (Vs, rs) = dref, sref

        def mov(m: Any, c: CTA) -> None:
            Vd[rd, m] = Vs[rs, m]

        return mov
    d = b.dst(dst, ty)
    x = b.val(src, ty)
    return lambda m, c: d(m, x(m))


def _int_cvt(x: np.ndarray, src: np.dtype, dst: np.dtype, sat: bool) -> np.ndarray:
    x = np.asarray(x, src)
    if sat:
        info = np.iinfo(dst)
        wide = x.astype(np.int64) if src != np.uint64 else x
        if src == np.uint64:
            wide = np.minimum(x, np.uint64(info.max)).astype(np.uint64)
            return wide.astype(dst)
        return np.clip(wide, info.min, info.max).astype(dst)
    return x.astype(dst)


@decoder("cvt")
def _cvt(b: Binder) -> Any:
    b.only(_RND | _IRND | {"ftz", "sat", "relu", "satfinite", "rna"})
    ts = b.types
    if len(ts) != 2:
        raise b.fail("cvt needs a destination and a source type")
    dty, sty = ts
    ddt, sdt = DT[dty], DT[sty]
    sat = "sat" in b.q
    relu = "relu" in b.q
    satfinite = "satfinite" in b.q
    irnd = next((x for x in b.q if x in _IRND), None)
    rnd = next((x for x in b.q if x in _RND), None)
    if "rna" in b.q or dty in ("tf32", "e4m3", "e5m2", "e4m3x2", "e5m2x2") or sty in ("e4m3x2", "e5m2x2"):
        raise b.fail("conversions to tf32 / fp8 are not emulated")
    ftz = "ftz" in b.q
    # packed pairs: cvt.rn.{f16x2,bf16x2}.f32 d, a, b  (a -> upper half)
    if dty in ("f16x2", "bf16x2"):
        if sty != "f32":
            raise b.fail()
        d = b.dst(b.ops[0], "b32")
        xa = b.val(b.ops[1], "f32")
        xb = b.val(b.ops[2], "f32")
        conv = N.f32_to_bf16_bits if dty == "bf16x2" else N.f32_to_f16_bits
        mode = rnd or "rn"

        def pack(m: Any, c: CTA) -> None:
            n = count(m)
            hi = conv(_arr(xa(m), np.float32, n), mode, relu, satfinite).astype(np.uint32)
            lo = conv(_arr(xb(m), np.float32, n), mode, relu, satfinite).astype(np.uint32)
            d(m, (hi << np.uint32(16)) | lo)

        refs = [b.regref(op, "u32") for op in b.ops[:3]]
        if dty != "bf16x2" or mode != "rn" or relu or satfinite or any(r is None for r in refs):
            return pack
        (Vd, rd), (Ua, ra), (Ub, rb) = refs
        Fa, Fb = Ua.view(np.float32), Ub.view(np.float32)
        nz = N.count_nonzero
        one, half, top = np.array(1, np.uint32), np.array(0x7FFF, np.uint32), np.array(0xFFFF0000, np.uint32)

        def pack_rn(m: Any, c: CTA) -> None:
            """Round to nearest even on the bits, as f32_to_bf16_bits does (NaNs: its own path)."""
            fa, fb = Fa[ra, m], Fb[rb, m]
            if nz(fa != fa) or nz(fb != fb):
                pack(m, c)
                return
            ua, ub = Ua[ra, m], Ub[rb, m]
            hi = ua + ((ua >> 16) & one)
            hi += half
            lo = ub + ((ub >> 16) & one)
            lo += half
            Vd[rd, m] = (hi & top) | (lo >> 16)

        return pack_rn
    d = b.dst(b.ops[0], dty)
    x = b.val(b.ops[1], sty)
    if ftz and sty == "f32":
        x = _float_in(b, "f32", x)
    # the source as a float64/value array
    if sty == "bf16":
        def src_val(m: Any) -> Any:
            return N.bf16_bits_to_f32(np.asarray(x(m), np.uint16))
    else:
        src_val = x
    s_is_float = sty in ("f16", "bf16", "f32", "f64")
    d_is_float = dty in ("f16", "bf16", "f32", "f64")

    def finish(v: np.ndarray) -> np.ndarray:
        if dty == "f32":
            if ftz:
                v = N.ftz32(v)
            if sat:
                v = N.sat01(v)
            return N.canon_nan32(v)
        if sat and d_is_float:
            return N.sat01(v)
        return v

    if d_is_float and s_is_float:
        if dty == sty and dty != "bf16":  # cvt.rni.f32.f32 etc: round to integral
            if irnd is None:
                return lambda m, c: d(m, finish(np.asarray(x(m), ddt)))
            return lambda m, c: d(m, finish(N.round_integral(np.asarray(x(m), ddt), irnd).astype(ddt)))
        if irnd is not None:
            raise b.fail("integer rounding into a different float type")
        if dty == "bf16":
            mode = rnd or "rn"
            if sty == "f32":
                return lambda m, c: d(m, N.f32_to_bf16_bits(src_val(m), mode, relu, satfinite))
            return lambda m, c: d(m, _half_bits(np.asarray(src_val(m), np.float64), "bf16", mode))
        if dty == "f16":
            mode = rnd or "rn"
            if sty == "f32":
                return lambda m, c: d(m, N.f32_to_f16_bits(src_val(m), mode, relu, satfinite).view(np.float16))
            return lambda m, c: d(m, _half_bits(np.asarray(src_val(m), np.float64), "f16", mode).view(np.float16))
        if dty == "f32":
            if sty == "f64":
                mode = rnd or "rn"
                return lambda m, c: d(m, finish(N.f64_to_f32(np.asarray(x(m), np.float64), mode)))
            # widening is exact. A bf16 NaN keeps its sign and payload and becomes quiet (the H100 widens bf16 by
            # moving bits); an f16 NaN becomes the canonical 0x7FFFFFFF (the H100's f16 -> f32 conversion; measured,
            # tests/data/ptx_vs_h100.json)
            canonical = sty == "f16"

            def widen(m: Any, c: CTA) -> None:
                v = np.asarray(src_val(m), np.float32)
                if np.isnan(v).any():
                    nan = N.canon_nan32(v) if canonical else (v.view(np.uint32) | np.uint32(0x400000)).view(np.float32)
                    v = np.where(np.isnan(v), nan, v)
                d(m, N.sat01(v) if sat else v)

            return widen
        if dty == "f64":
            return lambda m, c: d(m, finish(np.asarray(src_val(m), np.float64)))
    if s_is_float and not d_is_float:
        mode = irnd or ("rzi" if rnd is None else None)
        if mode is None:
            raise b.fail("float to integer needs .rni/.rzi/.rmi/.rpi")
        return lambda m, c: d(m, N.f_to_int(src_val(m), mode, ddt))
    if d_is_float and not s_is_float:
        mode = rnd or "rn"
        if dty == "f32":
            return lambda m, c: d(m, N.int_to_f32(np.asarray(x(m), sdt), mode))
        if dty == "f64":
            if mode != "rn" and sdt.itemsize == 8:
                raise b.fail("directed rounding of 64-bit integers to f64")
            return lambda m, c: d(m, np.asarray(x(m), sdt).astype(np.float64))
        if dty in ("f16", "bf16"):
            return lambda m, c: d(m, _half_bits(np.asarray(x(m), sdt).astype(np.float64), dty, mode)
                                  .view(np.float16 if dty == "f16" else np.uint16))
    if irnd is not None or rnd is not None:
        raise b.fail("a rounding mode on an integer conversion")
    return lambda m, c: d(m, _int_cvt(x(m), sdt, ddt, sat))


__all__ = ["_round_to", "_half_bits"]
