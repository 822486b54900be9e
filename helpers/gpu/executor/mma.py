"""Warp-level tensor-core instructions: ``mma.sync`` (every shape and type sm_90 takes but m8n8k4 .f16 into fp32),
``wmma``
and ``movmatrix``, through helpers.hopper.tensorcore's fragments and sums.

A warp-collective instruction: the lanes gather (like shfl), their registers are assembled into the A, B and C
tiles by the fragment maps of the PTX ISA, D is computed and scattered back. Integer types sum exactly (s32
wrapping, or clamped with .satfinite), b1 counts bits (.xor/.and .popc), f64 chains fused multiply-adds in k order,
and floating inputs go through the tensor core's sum (tensorcore.dot); all bit-identical with an H200 capture but
fp8 mma.sync, which runs within a bound the run states once."""

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
    return (f"{name}: the executor sums the fp8 products as the tensor core sums bf16 ones (exact products, terms "
            "truncated 25 bits below the largest, rounded toward zero) and adds the accumulator rounding to nearest; "
            "on the H200 this gives the same bits for ordinary sums but for about 1 result in 500 (1 unit in the "
            "last place), while where large terms cancel the GPU keeps fewer bits (up to a few hundred units in the "
            "last place of the small result, measured)")


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
        if types.count("f32"):
            raise b.fail("mma.m8n8k4 .f16 with fp32 accumulators: captured on an H200, its sums are not yet modelled")
        return _mma_m8n8k4(b)
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
    # bf16 / f16 / tf32 / f64 sums are bit-identical with the H200 capture (tools/h100/tensor_types.py); fp8's not
    note = fp_note(name) if aty in ("e4m3", "e5m2") else None

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

            # measured: values chain fused multiply-adds in k order; a NaN of A or B (the first k's, A before B)
            # wins over any other NaN (C's, or one an infinity made), quieted
            D = np.where(np.isnan(C), (C.view(np.uint64) | np.uint64(1 << 51)).view(np.float64), C)
            sticky = np.zeros((m, n), bool)
            for kk in range(k):
                a_k = np.broadcast_to(A[:, kk][:, None], (m, n))
                b_k = np.broadcast_to(B[kk][None, :], (m, n))
                new = np.isnan(a_k) | np.isnan(b_k)
                take = new & ~sticky
                pick = np.where(np.isnan(a_k), a_k, b_k)
                quiet = (pick.view(np.uint64) | np.uint64(1 << 51)).view(np.float64)
                skip = new | np.isnan(D)
                fresh = N.fma_f64(np.where(skip, 0.0, a_k), np.where(skip, 0.0, b_k), np.where(skip, 0.0, D))
                D = np.where(take, quiet, np.where(skip, D, fresh))
                sticky |= take
            bits = np.asarray(D, np.float64).view(np.uint64)
        else:
            if note is not None:
                mach.notes.setdefault(name, note)
            if aty in ("e4m3", "e5m2"):  # closest model found: the products' sum, then a rounded fp32 add of C
                with np.errstate(all="ignore"):
                    s_ = tc.dot(A[:, None, :], B.T[None, :, :], np.zeros_like(C), aty, (25, 24), bty)
                    D = (s_.astype(np.float64) + np.where(np.abs(C) < 2.0 ** -126, 0.0, C)).astype(np.float32)
            else:
                D = tc.dot(A[:, None, :], B.T[None, :, :], C, aty, (25, 24), bty)
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


def _mma_m8n8k4(b: Binder) -> Any:
    """mma.sync.aligned.m8n8k4.row.col.f16.f16.f16.f16: each quad pair (lanes 4q..4q+3 and 4q+16..4q+19) computes its
    own 8x8 tile; lane l of a pair holds A row / B column ``l % 4 + 4 (l >= 16)`` (k 0..3) and that row of C and D
    (bit-identical with the H200 capture)."""
    d_ops, a_ops, b_ops, c_ops = (_regs(b, b.ops[i], w) for i, w in enumerate("DABC"))
    if (len(d_ops), len(a_ops), len(b_ops), len(c_ops)) != (4, 2, 2, 4):
        raise b.fail("m8n8k4 .f16 takes 4 D, 2 A, 2 B and 4 C registers")
    rd = [[b.val(r, "b32") for r in ops] for ops in (a_ops, b_ops, c_ops)]
    wr = [b.dst(r, "b32") for r in d_ops]
    mach = b.mach
    pc = b.pc
    lane = np.arange(32)
    quad = (lane % 16) // 4
    pos = lane % 4 + 4 * (lane >= 16)

    def op(mm: Any, c: CTA) -> Any:
        g = collective(mach, mm, c, pc, 0xFFFFFFFF)
        if g is None:
            return True
        if len(_indices(g)) != 32:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION", "mma.sync needs all 32 lanes of the warp")
        av, bv, cv = (tc.decode(tc.unpack(np.stack([np.broadcast_to(np.asarray(f(g), np.uint32), (32,))
                                                     for f in fs], 1), "f16").reshape(32, -1), "f16") for fs in rd)
        out = np.zeros((32, 8), np.uint16)
        for q in range(4):
            mem = np.flatnonzero(quad == q)
            A = np.zeros((8, 4))
            B = np.zeros((8, 4))
            C = np.zeros((8, 8))
            A[pos[mem]] = av[mem]
            B[pos[mem]] = bv[mem]
            C[pos[mem]] = cv[mem]
            with np.errstate(all="ignore"):
                D = tc.dot(A[:, None, :], B[None, :, :], C, "f16")
            out[mem] = tc.round_accumulator(D, "f16")[pos[mem]]
        words = tc.pack(out.reshape(32, 4, 2), "f16")
        for j, w in enumerate(wr):
            w(g, words[:, j])
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


# ------------------------------------------------------------------------------------------- wmma
def wmma_note(name: str) -> str:
    return (f"{name}: the PTX ISA leaves the order of elements in a wmma fragment unspecified; the executor keeps "
            "its own (loads, mma and stores agree with each other, so code that treats fragments whole is exact), "
            "and code that reads or writes single fragment elements by index may see other elements than on the "
            "GPU")


def _wmma_dims(q: list[str]) -> tuple[int, int, int]:
    return _shape(q)


def _frag_slots(lanes_regs: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """The executor's wmma fragment order: slot i of lane l holds element f = (l * S + i) mod (rows * cols) of
    the tile in row-major order (S slots a lane; small fragments repeat the tile)."""
    lane = np.arange(32)[:, None]
    i = np.arange(lanes_regs)[None, :]
    f = (lane * lanes_regs + i) % (rows * cols)
    return f // cols, f % cols


@decoder("wmma")
def _wmma(b: Binder) -> Any:
    """wmma.load.{a,b,c} / wmma.mma / wmma.store.d (the PTX <mma.h> compiles to), with the executor's own fragment
    order (:func:`wmma_note`) and the sums of mma.sync."""
    from .memops import _space, load, store

    q = b.q
    mach = b.mach
    pc = b.pc
    name = b.ins.opcode
    note = wmma_note(name)
    try:
        mm, nn, kk = _wmma_dims(q)
    except ValueError:
        raise b.fail("no shape") from None
    kind = q[0]
    if kind in ("load", "store"):
        which = q[1]
        ety = next((x for x in q if x in tc.BITS), None)
        if ety is None:
            raise b.fail("no element type")
        lay = "row" if "row" in q else "col"
        rows, cols = {"a": (mm, kk), "b": (kk, nn), "c": (mm, nn), "d": (mm, nn)}[which]
        regs_op, addr_op = (b.ops[0], b.ops[1]) if kind == "load" else (b.ops[1], b.ops[0])
        regs = _regs(b, regs_op, "fragment")
        per = max(1, 32 // tc.BITS[ety])
        slots = len(regs) * per
        r_of, c_of = _frag_slots(slots, rows, cols)
        addr = b.addr(addr_op)
        stride = b.val(b.ops[2], "u32") if len(b.ops) > 2 else (lambda m: cols if lay == "row" else rows)
        space = _space(b)
        esize = max(1, tc.BITS[ety] // 8)
        edt = np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[esize])
        readers = [b.val(r, "b32") for r in regs]
        writers = [b.dst(r, "b32") for r in regs]
        if tc.BITS[ety] < 8:
            raise b.fail("sub-byte wmma types are not emulated")

        def ls(m: Any, c: CTA) -> Any:
            g = collective(mach, m, c, pc, 0xFFFFFFFF)
            if g is None:
                return True
            mach.notes.setdefault(name, note)
            base = np.broadcast_to(np.asarray(addr(g), np.uint64), (32,))
            ld = np.broadcast_to(np.asarray(stride(g), np.uint64), (32,))
            if kind == "load":
                vals = np.zeros((32, slots), np.uint32)
                for i in range(slots):
                    off = (r_of[:, i] * ld + c_of[:, i]) if lay == "row" else (c_of[:, i] * ld + r_of[:, i])
                    vals[:, i] = load(mach, space, g, c, base + off.astype(np.uint64) * np.uint64(esize), edt, 1)
                packed = tc.pack(vals.reshape(32, len(regs), per), ety) if per > 1 else vals
                for j, w in enumerate(writers):
                    w(g, packed[:, j].astype(np.uint32))
            else:
                words = np.stack([np.broadcast_to(np.asarray(f(g), np.uint32), (32,)) for f in readers], 1)
                el = tc.unpack(words, ety).reshape(32, slots) if per > 1 else words
                first = (np.arange(32)[:, None] * slots + np.arange(slots)[None, :]) < rows * cols
                for i in range(slots):
                    sel = first[:, i]
                    if not sel.any():
                        continue
                    off = (r_of[:, i] * ld + c_of[:, i]) if lay == "row" else (c_of[:, i] * ld + r_of[:, i])
                    lanes = np.asarray(_indices(g))[sel]
                    store(mach, space, lanes, c, (base + off.astype(np.uint64) * np.uint64(esize))[sel],
                          el[sel, i].astype(edt), edt, 1)
                mach.since_progress = 0
            mach.PC[g] = pc + 1
            return True

        ls.ctl = True  # type: ignore[attr-defined]
        return ls
    if kind != "mma":
        raise b.fail()
    types = [x for x in q if x in tc.BITS]
    if len(types) == 2:  # f16 forms: .dtype.ctype
        dty, cty = types
        aty = bty = "f16"
    elif len(types) == 4:
        dty, aty, bty, cty = types
    else:
        raise b.fail("types")
    sat = "satfinite" in q
    d_ops, a_ops, b_ops, c_ops = (_regs(b, b.ops[i], w) for i, w in enumerate("DABC"))
    rd = {w: [b.val(r, "b32") for r in ops] for w, ops in (("a", a_ops), ("b", b_ops), ("c", c_ops))}
    wr = [b.dst(r, "b32") for r in d_ops]

    def tile(words: np.ndarray, ety: str, rows: int, cols: int) -> np.ndarray:
        per = max(1, 32 // tc.BITS[ety])
        el = tc.unpack(words, ety).reshape(32, -1) if per > 1 else words
        r_of, c_of = _frag_slots(el.shape[1], rows, cols)
        t = np.zeros((rows, cols), np.float64 if ety in tc.FLOAT_TYPES else np.int64)
        t[r_of[::-1].ravel(), c_of[::-1].ravel()] = tc.decode(el[::-1].ravel(), ety)  # the first copy wins
        return t

    def op(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, 0xFFFFFFFF)
        if g is None:
            return True
        mach.notes.setdefault(name, note)

        def words(w: str) -> np.ndarray:
            return np.stack([np.broadcast_to(np.asarray(f(g), np.uint32), (32,)) for f in rd[w]], 1)

        A = tile(words("a"), aty, mm, kk)
        B = tile(words("b"), bty, kk, nn)
        C = tile(words("c"), cty, mm, nn)
        if aty in tc.INT_TYPES:
            D = C + A @ B
            if sat:
                D = np.clip(D, -(1 << 31), (1 << 31) - 1)
            bits = (D & 0xFFFFFFFF).astype(np.uint32)
        else:
            step = 4 if aty == "tf32" else kk  # measured: the tf32 wmma is two chained k4 products
            acc = C
            for k0 in range(0, kk, step):
                acc = tc.dot(A[:, None, k0:k0 + step], B.T[None, :, k0:k0 + step], acc, aty).astype(np.float64)
            bits = tc.round_accumulator(acc, dty)
        per = 2 if dty == "f16" else 1
        slots = len(d_ops) * per
        r_of, c_of = _frag_slots(slots, mm, nn)
        out = bits[r_of, c_of]
        if per == 2:
            out = tc.pack(out.reshape(32, len(d_ops), 2), "f16")
        for j, w in enumerate(wr):
            w(g, out[:, j].astype(np.uint32))
        mach.PC[g] = pc + 1
        return True

    op.ctl = True  # type: ignore[attr-defined]
    return op
