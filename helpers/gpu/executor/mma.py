"""Warp-level tensor-core instructions: ``mma.sync`` (every shape and type sm_90 takes but m8n8k4 .f16) and
``movmatrix``, through helpers.hopper.tensorcore's fragments and sums.

A warp-collective instruction: the lanes gather (like shfl), their registers are assembled into the A, B and C
tiles by the fragment maps of the PTX ISA, D is computed and scattered back. Integer types sum exactly (s32
wrapping, or clamped with .satfinite), b1 counts bits (.xor/.and .popc), f64 chains exact fused multiply-adds
in k order, and floating inputs go through the tensor core's sum (tensorcore.dot), which the run names once as
not yet compared with silicon for types other than bf16."""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers.hopper import tensorcore as tc

from .machine import CTA, SHARED_WINDOW, Binder, ExecFault, _indices, collective  # noqa: F401
from .parser import Reg, Vec
from .registry import decoder

_ELEM = set(tc.BITS)


def _shape(q: list[str]) -> tuple[int, int, int]:
    s = next((x for x in q if x.startswith("m") and "n" in x and "k" in x), None)
    if s is None:
        raise ValueError("no shape")
    m, rest = s[1:].split("n")
    n, k = rest.split("k")
    return int(m), int(n), int(k)


def _regs(b: Binder, op: object, what: str) -> list[Reg]:
    items = op.items if isinstance(op, Vec) else (op,)
    if not all(isinstance(r, Reg) for r in items):
        raise b.fail(f"the {what} operand must be registers")
    return list(items)


def fp_note(name: str) -> str:
    return (f"{name}: the tensor core's sum for these types follows the model fitted to the H100's bf16 wgmma "
            "(exact products, terms truncated 25 bits below the largest, one rounding toward zero); it is not yet "
            "compared with silicon, so results can differ from the GPU's in the last bits")


@decoder("mma")
def _mma(b: Binder) -> Any:
    q = b.q
    try:
        m, n, k = _shape(q)
    except ValueError:
        raise b.fail("no m*n*k* shape") from None
    types = [x for x in q if x in _ELEM]
    if "row" not in q or "col" not in q:
        raise b.fail("only the .row.col layouts are emulated")
    if (m, n, k) == (8, 8, 4) and "f16" in types:
        raise b.fail("mma.m8n8k4 with .f16 (Volta's quad-pair fragments) is not emulated")
    if len(types) == 4:
        dty, aty, bty, cty = types
    elif len(types) == 2:  # .f64 forms and .s32.b1 forms name fewer
        dty, aty = types
        bty, cty = aty, dty
    elif len(types) == 1:
        dty = aty = bty = cty = types[0]
    else:
        raise b.fail("types")
    if "b1" in types:
        dty, aty, bty, cty = "s32", "b1", "b1", "s32"
        if not ({"xor", "and"} & set(q)) or "popc" not in q:
            raise b.fail("b1 mma needs .xor.popc or .and.popc")
    sat = "satfinite" in q
    wide = aty == "f64"
    d_ops = _regs(b, b.ops[0], "D")
    a_ops = _regs(b, b.ops[1], "A")
    b_ops = _regs(b, b.ops[2], "B")
    c_ops = _regs(b, b.ops[3], "C")
    rty = "b64" if wide else "b32"
    rd_a = [b.val(r, rty) for r in a_ops]
    rd_b = [b.val(r, rty) for r in b_ops]
    rd_c = [b.val(r, rty) for r in c_ops]
    wr_d = [b.dst(r, rty) for r in d_ops]
    half_c = cty == "f16"
    # accumulator element positions: f16 accumulators hold two of the fp32 layout's elements a register
    c_regs = len(c_ops) * (2 if half_c else 1)
    d_regs = len(d_ops) * (2 if dty == "f16" else 1)
    if c_regs != d_regs or c_regs != m * n // 32:
        raise b.fail(f"{len(c_ops)} C and {len(d_ops)} D registers for m{m}n{n}")
    ra, ca = tc.a_map(m, k, aty, len(a_ops))
    kb, nb = tc.b_map(k, n, bty, len(b_ops))
    rc, cc = tc.c_map(m, c_regs)
    if ra.max() >= m or ca.max() >= k or kb.max() >= k or nb.max() >= n:
        raise b.fail("fragment shape")
    mach = b.mach
    pc = b.pc
    name = b.ins.opcode
    note = fp_note(name) if not wide else (
        f"{name}: the executor chains exact fused multiply-adds in k order (each rounded to nearest); not yet "
        "compared with silicon, so results can differ from the GPU's in the last bits")

    def gather(readers: list, g: Any, dt: Any) -> np.ndarray:
        cols = []
        for f in readers:
            v = np.asarray(f(g))
            cols.append(np.broadcast_to(v, (32,)).astype(dt))
        return np.stack(cols, axis=1)  # (32 lanes, regs)

    def op(mm: Any, c: CTA) -> Any:
        g = collective(mach, mm, c, pc, 0xFFFFFFFF)
        if g is None:
            return True
        if len(_indices(g)) != 32:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION", "mma.sync needs all 32 lanes of the warp")
        udt = np.uint64 if wide else np.uint32
        A = np.zeros((m, k), np.float64 if aty in tc.FLOAT_TYPES else np.int64)
        B = np.zeros((k, n), A.dtype)
        A[ra, ca] = tc.decode(tc.unpack(gather(rd_a, g, udt), aty), aty)
        B[kb, nb] = tc.decode(tc.unpack(gather(rd_b, g, udt), bty), bty)
        cw = gather(rd_c, g, udt)
        cel = tc.unpack(cw, cty).reshape(32, -1) if half_c else cw
        C = np.zeros((m, n), np.float64 if cty in tc.FLOAT_TYPES else np.int64)
        C[rc, cc] = tc.decode(cel, "f16" if half_c else cty)
        if aty == "b1":
            if "xor" in q:
                D = C + (A[:, :, None] != B[None, :, :]).sum(axis=1)
            else:
                D = C + (A[:, :, None] & B[None, :, :]).sum(axis=1)
            bits = (D & 0xFFFFFFFF).astype(np.uint32)
        elif aty in tc.INT_TYPES:
            D = C + A @ B
            if sat:
                D = np.clip(D, -(1 << 31), (1 << 31) - 1)
            bits = (D & 0xFFFFFFFF).astype(np.uint32)
        elif wide:
            from . import numerics as N

            mach.notes.setdefault(name, note)
            D = C.copy()
            for kk in range(k):
                D = N.fma_f64(A[:, kk][:, None] * np.ones((1, n)), B[kk][None, :] * np.ones((m, 1)), D)
            bits = np.asarray(D, np.float64).view(np.uint64)
        else:
            mach.notes.setdefault(name, note)
            D = tc.dot(A[:, None, :], B.T[None, :, :], C, aty)
            bits = tc.round_accumulator(D, dty)
        out = bits[rc, cc]  # (32, d positions)
        if dty == "f16":
            out = tc.pack(out.reshape(32, -1, 2), "f16")
        for i, w in enumerate(wr_d):
            w(g, out[:, i])
        mach.PC[g] = pc + 1
        return True

    op.ctl = True  # type: ignore[attr-defined]
    return op


@decoder("movmatrix")
def _movmatrix(b: Binder) -> Any:
    """movmatrix.sync.aligned.m8n8.trans.b16: lane l holds row l/4, columns 2(l%4) and 2(l%4)+1 of an 8 x 8 b16
    matrix; afterwards it holds the same positions of the transpose."""
    b.only({"sync", "aligned", "m8n8", "trans", "b16"})
    if "trans" not in b.q:
        raise b.fail("movmatrix needs .trans")
    rd = b.val(b.ops[1], "b32")
    wr = b.dst(b.ops[0], "b32")
    mach = b.mach
    pc = b.pc
    lane = np.arange(32)
    row, col = lane // 4, 2 * (lane % 4)

    def op(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, 0xFFFFFFFF)
        if g is None:
            return True
        v = np.broadcast_to(np.asarray(rd(g), np.uint32), (32,))
        mat = np.zeros((8, 8), np.uint32)
        mat[row, col] = v & np.uint32(0xFFFF)
        mat[row, col + 1] = v >> np.uint32(16)
        t = mat.T
        wr(g, t[row, col] | (t[row, col + 1] << np.uint32(16)))
        mach.PC[g] = pc + 1
        return True

    op.ctl = True  # type: ignore[attr-defined]
    return op
