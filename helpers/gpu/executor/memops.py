"""Memory instructions: ld, st, atom, red, cvta, isspacep, mapa, prefetch & friends, and the state-space windows
they go through (global, shared::cta, shared::cluster, local, param, const, generic)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .machine import (
    CTA,
    DT,
    LOCAL_WINDOW,
    OFFSET_MASK,
    SHARED_WINDOW,
    WINDOW_SIZE,
    Binder,
    ExecFault,
    Machine,
    _indices,
    count,
)
from .memory import RANK_SHIFT, MemoryFault, gather, scatter
from .numerics import count_nonzero as _count_nonzero
from .parser import Addr, Reg, Sink, Vec
from .registry import decoder
from .work import log_of

_SEM = {"weak", "volatile", "relaxed", "acquire", "release", "acq_rel", "mmio", "sc"}
_SCOPE = {"cta", "cluster", "gpu", "sys"}
_CACHE = {"ca", "cg", "cs", "lu", "cv", "wb", "wt", "nc", "L1::evict_normal", "L1::evict_unchanged",
          "L1::evict_first", "L1::evict_last", "L1::no_allocate", "L2::evict_normal", "L2::evict_first",
          "L2::evict_last", "L2::64B", "L2::128B", "L2::256B", "L2::cache_hint", "unified"}
_SPACES = {"global", "shared", "shared::cta", "shared::cluster", "local", "param", "param::entry", "param::func",
           "const"}
_VEC = {"v2": 2, "v4": 4, "v8": 8}


def _space(b: Binder) -> str:
    sp = [x for x in b.q if x in _SPACES]
    if len(sp) > 1:
        raise b.fail("two state spaces")
    s = sp[0] if sp else "generic"
    return {"shared": "shared::cta", "param::entry": "param", "param::func": "param"}.get(s, s)


def _misaligned(addr: Any, width: int) -> MemoryFault:
    a = np.atleast_1d(np.asarray(addr, np.uint64))
    bad = a[(a % np.uint64(width)) != 0]
    x = int(bad[0]) if bad.size else 0
    return MemoryFault("CUDA_ERROR_MISALIGNED_ADDRESS",
                       f"a {width}-byte access at address {x:#x}, which is not a multiple of {width}")


# ------------------------------------------------------------------------------------------- windows
def _smem_target(mach: Machine, c: CTA, addr: Any, width: int, cluster: bool) -> list[tuple[CTA, np.ndarray, Any]]:
    """[(cta, offsets, selection)] for shared addresses; with ``cluster`` the rank bits pick the CTA."""
    a = np.asarray(addr, np.uint64)
    if a.ndim == 0:
        a = a.reshape(1)
    if width > 1 and np.count_nonzero(a & np.uint64(width - 1)):
        raise _misaligned(a, width)
    off = (a & np.uint64(OFFSET_MASK)).astype(np.int64)
    if not cluster or not (a >> np.uint64(RANK_SHIFT)).any() and c.rank == 0:
        groups = [(c, off, None)]
    else:
        rank = (a >> np.uint64(RANK_SHIFT)).astype(np.int64)
        ranks = np.unique(rank)
        groups = []
        for r in ranks.tolist():
            if r >= len(c.cluster.ctas):
                raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS",
                                  f"a shared::cluster address names block rank {r} of a cluster of "
                                  f"{len(c.cluster.ctas)}")
            sel = None if len(ranks) == 1 else rank == r
            groups.append((c.cluster.ctas[r], off if sel is None else off[sel], sel))
    for cta, o, _ in groups:
        if o.size and int(o.max()) + width > mach.smem_bytes:
            x = int(o.max())
            raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS",
                              f"shared-memory offset {x:#x} is past the block's {mach.smem_bytes} bytes of shared "
                              "memory (static + dynamic + the reserved 1 KB)")
        if not cta.alive:
            raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", "shared memory of a block that has exited")
    return groups


def smem_load(mach: Machine, c: CTA, addr: Any, dt: np.dtype, nvec: int, cluster: bool = False) -> np.ndarray:
    width = dt.itemsize * nvec
    groups = _smem_target(mach, c, addr, width, cluster)
    if mach.hz is not None:
        for cta, off, _ in groups:
            mach.hz.smem_read(c, cta, off, width)
    if len(groups) == 1:
        cta, off, _ = groups[0]
        return gather(cta.smem, off, dt, nvec)
    n = np.size(addr)
    out = np.empty((n, nvec) if nvec > 1 else n, dt)
    for cta, off, sel in groups:
        out[sel] = gather(cta.smem, off, dt, nvec)
    return out


def smem_store(mach: Machine, c: CTA, addr: Any, value: Any, dt: np.dtype, nvec: int, cluster: bool = False) -> None:
    width = dt.itemsize * nvec
    for cta, off, sel in _smem_target(mach, c, addr, width, cluster):
        if cta.barriers:
            hit = cta.barmask[(off[:, None] + np.arange(width)).ravel()]
            if hit.any():
                o = int(off[np.flatnonzero(hit.reshape(len(off), width).any(axis=1))[0]])
                raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                                f"a store to shared offset {o:#x} overwrote a live mbarrier "
                                f"({_barrier_name(mach, cta, o)}): mbarrier.inval it before reusing its memory")
        v = value if sel is None or not np.ndim(value) else np.asarray(value)[sel]
        if mach.hz is not None:
            mach.hz.smem_write(c, cta, off, width)
        scatter(cta.smem, off, v, dt, nvec)


def _barrier_name(mach: Machine, cta: CTA, off: int) -> str:
    for boff, bar in cta.barriers.items():
        if boff <= off < boff + 8:
            return bar.name
    return f"offset {off:#x}"


def _local_index(mach: Machine, m: Any, off: np.ndarray, dt: np.dtype, nvec: int) -> np.ndarray:
    width = dt.itemsize * nvec
    off = np.broadcast_to(np.asarray(off, np.int64), (count(m),))
    if (off % width).any():
        raise _misaligned(off, width)
    if off.size and (int(off.min()) < 0 or int(off.max()) + width > mach.LOCAL.shape[1]):
        raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS",
                          f"local-memory offset {int(off.max())} is outside the thread's "
                          f"{mach.LOCAL.shape[1]}-byte stack frame")
    rows = _indices(m).astype(np.int64) * mach.LOCAL.shape[1]
    return (rows + off) // dt.itemsize


def local_load(mach: Machine, m: Any, off: Any, dt: np.dtype, nvec: int) -> np.ndarray:
    i = _local_index(mach, m, off, dt, nvec)
    v = mach.LOCAL.reshape(-1).view(dt)
    return v[i] if nvec == 1 else v[i[:, None] + np.arange(nvec)]


def local_store(mach: Machine, m: Any, off: Any, value: Any, dt: np.dtype, nvec: int) -> None:
    i = _local_index(mach, m, off, dt, nvec)
    v = mach.LOCAL.reshape(-1).view(dt)
    if nvec == 1:
        v[i] = value
    else:
        v[i[:, None] + np.arange(nvec)] = value


def global_load(mach: Machine, addr: Any, dt: np.dtype, nvec: int) -> np.ndarray:
    a = np.atleast_1d(np.asarray(addr, np.uint64))
    width = dt.itemsize * nvec
    if width > 1 and np.count_nonzero(a & np.uint64(width - 1)):
        raise _misaligned(a, width)
    hit = mach.memory.locate(a, width, False)  # one allocation (the usual case): found once for both
    out = mach.memory.load(a, dt, nvec) if hit is None else gather(hit[0].data, hit[1], dt, nvec)
    if mach.hz is not None:
        mach.hz.global_access(mach.cur, a, width, store=False, located=hit)
    return out


def global_store(mach: Machine, addr: Any, value: Any, dt: np.dtype, nvec: int) -> None:
    a = np.atleast_1d(np.asarray(addr, np.uint64))
    width = dt.itemsize * nvec
    if width > 1 and np.count_nonzero(a & np.uint64(width - 1)):
        raise _misaligned(a, width)
    hit = mach.memory.locate(a, width, True)  # one allocation (the usual case): found once for both
    if hit is None:
        mach.memory.store(a, value, dt, nvec)
    else:
        scatter(hit[0].data, hit[1], value, dt, nvec)
    log_of(mach).stored_global(mach.cur, a)
    if mach.hz is not None:
        mach.hz.global_access(mach.cur, a, width, store=True, located=hit)


def _windows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sh = (a >= np.uint64(SHARED_WINDOW)) & (a < np.uint64(SHARED_WINDOW + WINDOW_SIZE))
    lo = (a >= np.uint64(LOCAL_WINDOW)) & (a < np.uint64(LOCAL_WINDOW + WINDOW_SIZE))
    return sh, lo


def _full(addr: Any, m: Any) -> np.ndarray:
    a = np.asarray(addr, np.uint64)
    return a if a.ndim else np.full(count(m), a, np.uint64)


def load(mach: Machine, space: str, m: Any, c: CTA, addr: Any, dt: np.dtype, nvec: int) -> np.ndarray:
    """Load through a state space (generic addresses are split by window)."""
    if space == "shared::cta":
        return smem_load(mach, c, _full(addr, m), dt, nvec)
    if space in ("global", "const", "param"):
        return global_load(mach, _full(addr, m), dt, nvec)
    if space == "shared::cluster":
        return smem_load(mach, c, _full(addr, m), dt, nvec, cluster=True)
    if space == "local":
        return local_load(mach, m, addr, dt, nvec)
    a = _full(addr, m)
    sh, lo = _windows(a)
    if not sh.any() and not lo.any():
        return global_load(mach, a, dt, nvec)
    if sh.all():
        return smem_load(mach, c, a - np.uint64(SHARED_WINDOW), dt, nvec, cluster=True)
    if lo.all():
        return local_load(mach, m, (a - np.uint64(LOCAL_WINDOW)).astype(np.int64), dt, nvec)
    out = np.empty((len(a), nvec) if nvec > 1 else len(a), dt)
    idx = _indices(m)
    for sel, kind in ((sh, "s"), (lo, "l"), (~sh & ~lo, "g")):
        if not sel.any():
            continue
        if kind == "s":
            out[sel] = smem_load(mach, c, a[sel] - np.uint64(SHARED_WINDOW), dt, nvec, cluster=True)
        elif kind == "l":
            out[sel] = local_load(mach, idx[sel], (a[sel] - np.uint64(LOCAL_WINDOW)).astype(np.int64), dt, nvec)
        else:
            out[sel] = global_load(mach, a[sel], dt, nvec)
    return out


def store(mach: Machine, space: str, m: Any, c: CTA, addr: Any, value: Any, dt: np.dtype, nvec: int) -> None:
    """Store through a state space (generic addresses are split by window)."""
    n = count(m)
    if space == "shared::cta":
        smem_store(mach, c, _full(addr, m), value, dt, nvec)
        return
    if space == "global":
        global_store(mach, _full(addr, m), value, dt, nvec)
        return
    if space == "shared::cluster":
        smem_store(mach, c, _full(addr, m), value, dt, nvec, cluster=True)
        return
    if space == "local":
        local_store(mach, m, addr, value, dt, nvec)
        return
    if space in ("const", "param"):
        raise MemoryFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"a store to the {space} state space")
    a = _full(addr, m)
    sh, lo = _windows(a)
    if not sh.any() and not lo.any():
        global_store(mach, a, value, dt, nvec)
        return
    shape = (n, nvec) if nvec > 1 else (n,)
    v = np.broadcast_to(np.asarray(value, dt), shape)
    idx = _indices(m)
    for sel, kind in ((sh, "s"), (lo, "l"), (~sh & ~lo, "g")):
        if not sel.any():
            continue
        if kind == "s":
            smem_store(mach, c, a[sel] - np.uint64(SHARED_WINDOW), v[sel], dt, nvec, cluster=True)
        elif kind == "l":
            local_store(mach, idx[sel], (a[sel] - np.uint64(LOCAL_WINDOW)).astype(np.int64), v[sel], dt, nvec)
        else:
            global_store(mach, a[sel], v[sel], dt, nvec)


# ------------------------------------------------------------------------------------------- param space
def _fparam_rw(b: Binder, op: Addr, dt: np.dtype, nvec: int) -> tuple[Any, Any]:
    s = b.symbol(op.base.name)
    mach = b.mach
    off = s.offset + op.offset
    width = dt.itemsize * nvec

    def rd(m: Any) -> np.ndarray:
        raw = mach.FPARAM[m, off:off + width]
        v = np.ascontiguousarray(raw).view(dt)
        return v.reshape(-1) if nvec == 1 else v.reshape(-1, nvec)

    def wr(m: Any, value: Any) -> None:
        n = count(m)
        v = np.broadcast_to(np.asarray(value, dt), (n, nvec) if nvec > 1 else (n,))
        mach.FPARAM[m, off:off + width] = np.ascontiguousarray(v).view(np.uint8).reshape(n, width)

    return rd, wr


def _kparam_read(b: Binder, op: Addr, dt: np.dtype, nvec: int) -> Any:
    s = b.symbol(op.base.name)
    off = s.offset + op.offset
    raw = bytes(b.mach.params[off:off + dt.itemsize * nvec]).ljust(dt.itemsize * nvec, b"\0")
    val = np.frombuffer(raw, dt).copy()
    k = val[0] if nvec == 1 else val
    return lambda m: k if nvec == 1 else np.broadcast_to(k, (count(m), nvec))


# ------------------------------------------------------------------------------------------- ld / st
def _dest_list(b: Binder, op: object, ty: str) -> list:
    items = op.items if isinstance(op, Vec) else (op,)
    return [b.dst(x, ty) for x in items]


def _shared_fast(b: Binder, ty: str, store: bool) -> Any:
    """ld/st.shared of one element through a [register + offset] address, as one closure (the hot path of
    CUDA-core kernels); anything unusual (an exited peer, a fault) falls back to the general path."""
    dt = DT[ty]
    mem, val = (b.ops[0], b.ops[1]) if store else (b.ops[1], b.ops[0])
    from .parser import Addr as _Addr

    if not isinstance(mem, _Addr) or not isinstance(mem.base, Reg) or mem.coords is not None:
        return None
    base = b.regref(mem.base, "u32")
    reg = b.regref(val, ty, wider=True)
    if base is None or reg is None or dt.itemsize > 8:
        return None
    Va, ra = base
    Vv, rv = reg
    off = np.uint32(mem.offset & 0xFFFFFFFF)
    es = dt.itemsize
    shift = np.uint32(es.bit_length() - 1)
    odd = np.uint32(0xFF000000 | (es - 1))  # a misaligned address or rank bits: the general path says why
    mach = b.mach
    slow = _st if store else _ld
    general = slow(b, fast=False)
    nz = _count_nonzero

    def ld(m: Any, c: CTA) -> None:
        a = Va[ra, m] + off if off else Va[ra, m]
        if nz(a & odd) or c.rank:
            general(m, c)
            return
        try:
            Vv[rv, m] = c.smem.view(dt)[a >> shift]
        except IndexError:
            general(m, c)

    hz = mach.hz
    if hz is not None:  # hazard mode: the checker sees the access first (its fast path, or the general one)
        pc = b.pc
        # unguarded, the op tells the checker its pc and threads itself; guarded, the checker's wrapper does (with
        # every thread of the group, as for any other instruction)
        selfwrap = b.ins.guard is None
        last = np.uint32(es - 1)
        low = np.array(OFFSET_MASK, np.uint32)  # a .shared::cta address is an offset in the block's own memory

        def sth(m: Any, c: CTA) -> None:
            if selfwrap:  # what the checker's wrapper does (see HazardChecker.wrap)
                hz.pc, hz.m = pc, m
            a = (Va[ra, m] + off if off else Va[ra, m]) & low
            if es > 1 and nz(a & last) or not c.alive:
                general(m, c)
                return
            try:  # a live mbarrier in the bytes (its first or last byte is in any that overlaps), or past the end
                hit = nz(c.barmask.take(a)) or es > 1 and nz(c.barmask.take(a + last))
            except IndexError:
                hit = True
            if hit:
                general(m, c)
                return
            hz.smem_write_own(c, a, es)
            c.smem.view(dt)[a >> shift] = Vv[rv, m]
            mach.since_progress = 0

        def ldh(m: Any, c: CTA) -> None:
            if selfwrap:  # what the checker's wrapper does (see HazardChecker.wrap)
                hz.pc, hz.m = pc, m
            a = Va[ra, m] + off if off else Va[ra, m]
            if c.rank:  # (rank 0: an address with rank bits is past the end, and the general path masks it)
                a = a & low
            if es > 1 and nz(a & last):
                general(m, c)
                return
            try:
                got = c.smem.view(dt).take(a >> shift)
            except IndexError:  # past the block's shared memory (or an exited block's): the general path says so
                general(m, c)
                return
            hz.smem_read_own(c, a, es)
            Vv[rv, m] = got

        op = sth if store else ldh
        op.hz_self = selfwrap
        return op

    def st(m: Any, c: CTA) -> None:
        a = Va[ra, m] + off if off else Va[ra, m]
        if nz(a & odd) or c.rank or c.barriers:
            general(m, c)
            return
        i = a >> shift
        v = c.smem.view(dt)
        if i.size and int(i.max()) >= v.size:
            general(m, c)
            return
        v[i] = Vv[rv, m]
        mach.since_progress = 0

    return st if store else ld


def _access(b: Binder, store: bool, fast: bool) -> tuple[str, np.dtype, int, str, Any]:
    """What ld and st share: (type, dtype, vector width, state space, the fused shared-memory op or None)."""
    b.only(_SEM | _SCOPE | _CACHE | _SPACES | set(_VEC))
    ty = b.type()
    nvec = next((_VEC[x] for x in b.q if x in _VEC), 1)
    space = _space(b)
    op = _shared_fast(b, ty, store) if fast and space == "shared::cta" and nvec == 1 else None
    return ty, DT[ty], nvec, space, op


@decoder("ld", "ldu")
def _ld(b: Binder, fast: bool = True) -> Any:
    ty, dt, nvec, space, op = _access(b, False, fast)
    if op is not None:
        return op
    dst, src = b.ops[0], b.ops[1]
    outs = _dest_list(b, dst, ty)
    if len(outs) != nvec:
        raise b.fail(f"{len(outs)} destinations for a .v{nvec} load")
    sym_kind = b.space_of(src)
    mach = b.mach
    if space == "param" and sym_kind == "fparam":
        rd, _ = _fparam_rw(b, src, dt, nvec)
        get = rd
    elif space == "param" and sym_kind == "kparam":
        get = _kparam_read(b, src, dt, nvec)
    else:
        if space == "local" and sym_kind == "local":
            pass
        addr = b.addr(src)

        def get(m: Any, _a=addr) -> np.ndarray:
            return load(mach, space, m, mach.cur, _a(m), dt, nvec)

    if nvec == 1:
        w = outs[0]

        def ld1(m: Any, c: CTA) -> None:
            w(m, get(m))

        return ld1

    def ldv(m: Any, c: CTA) -> None:
        v = get(m)
        for k, w in enumerate(outs):
            w(m, v[:, k])

    return ldv


@decoder("st")
def _st(b: Binder, fast: bool = True) -> Any:
    ty, dt, nvec, space, op = _access(b, True, fast)
    if op is not None:
        return op
    dst, src = b.ops[0], b.ops[1]
    items = src.items if isinstance(src, Vec) else (src,)
    if len(items) != nvec:
        raise b.fail(f"{len(items)} values for a .v{nvec} store")
    vals = [b.val(x, ty) for x in items]
    mach = b.mach
    sym_kind = b.space_of(dst)
    if space == "param" and sym_kind == "fparam":
        _, wr = _fparam_rw(b, dst, dt, nvec)
        if nvec == 1:
            return lambda m, c: wr(m, vals[0](m))
        return lambda m, c: wr(m, np.stack([np.broadcast_to(v(m), (count(m),)) for v in vals], axis=1))
    addr = b.addr(dst)
    if nvec == 1:
        v0 = vals[0]

        def st1(m: Any, c: CTA) -> None:
            store(mach, space, m, c, addr(m), v0(m), dt, 1)
            mach.since_progress = 0

        return st1

    def stv(m: Any, c: CTA) -> None:
        n = count(m)
        v = np.stack([np.broadcast_to(np.asarray(f(m), dt), (n,)) for f in vals], axis=1)
        store(mach, space, m, c, addr(m), v, dt, nvec)
        mach.since_progress = 0

    return stv


# ------------------------------------------------------------------------------------------- atomics
def _bf16_add(old: Any, x: Any) -> Any:
    """One bf16 half: both to fp32 (exact), the fp32 sum, rounded to nearest even; subnormals kept (.noftz)."""
    from .numerics import add_f32, bf16_bits_to_f32, f32_to_bf16_bits

    return f32_to_bf16_bits(add_f32(bf16_bits_to_f32(old), bf16_bits_to_f32(x)))


def _atom_fn(b: Binder, op: str, ty: str) -> Any:
    dt = DT[ty]
    from .numerics import add_f32, minmax_f

    if op == "add" and ty == "bf16":
        return lambda old, x, y: _bf16_add(old, x)
    if op == "add" and ty == "bf16x2":  # two bf16 in one word, low half at the lower address
        def packed(old: Any, x: Any, y: Any) -> Any:
            old, x = np.asarray(old, np.uint32), np.asarray(x, np.uint32)
            lo = _bf16_add(old & 0xFFFF, x & 0xFFFF).astype(np.uint32)
            hi = _bf16_add(old >> 16, x >> 16).astype(np.uint32)
            return lo | (hi << np.uint32(16))

        return packed
    if op == "add":
        if ty == "f32":
            return lambda old, x, y: add_f32(old, x)
        if ty == "f64":
            return lambda old, x, y: old + x
        if dt.kind in "iu":
            return lambda old, x, y: (old + x).astype(dt)
    if op in ("min", "max"):
        if dt.kind == "f":
            return lambda old, x, y: minmax_f(old, x, op == "max")
        return (lambda old, x, y: np.minimum(old, x).astype(dt)) if op == "min" else \
            (lambda old, x, y: np.maximum(old, x).astype(dt))
    if op == "and":
        return lambda old, x, y: old & x
    if op == "or":
        return lambda old, x, y: old | x
    if op == "xor":
        return lambda old, x, y: old ^ x
    if op == "exch":
        return lambda old, x, y: np.broadcast_to(np.asarray(x, dt), np.shape(old)).copy()
    if op == "cas":
        return lambda old, x, y: np.where(old == x, y, old).astype(dt)
    if op == "inc" and ty == "u32":
        return lambda old, x, y: np.where(old >= x, dt.type(0), old + dt.type(1)).astype(dt)
    if op == "dec" and ty == "u32":
        return lambda old, x, y: np.where((old == 0) | (old > x), x, old - dt.type(1)).astype(dt)
    raise b.fail(f"atomic .{op} on .{ty}")


_ATOM_OPS = {"and", "or", "xor", "exch", "add", "inc", "dec", "min", "max", "cas"}


def _atomic(b: Binder, has_dest: bool) -> Any:
    b.only(_SEM | _SCOPE | _SPACES | _ATOM_OPS | {"noftz", "L2::cache_hint"})
    ops = [x for x in b.q if x in _ATOM_OPS]
    if len(ops) != 1:
        raise b.fail("one atomic operation expected")
    opn = ops[0]
    ty = b.type()
    if ty in ("f16", "f16x2") or (ty in ("bf16", "bf16x2") and opn != "add"):
        raise b.fail(f"atomic .{opn} on .{ty} is not emulated")
    if ty in ("bf16", "bf16x2") and "noftz" not in b.q:
        raise b.fail(f"atom/red .add.{ty} needs .noftz (the only form the PTX ISA gives)")
    dt = DT[ty]
    space = _space(b)
    if space in ("local", "param", "const"):
        raise b.fail(f"atomics on the {space} space")
    args = list(b.ops)
    write = b.dst(args.pop(0), ty) if has_dest else None
    addr = b.addr(args[0])
    x = b.val(args[1], ty)
    y = b.val(args[2], ty) if opn == "cas" else (lambda m: None)
    f = _atom_fn(b, opn, ty)
    mach = b.mach

    def atom(m: Any, c: CTA) -> None:
        if mach.hz is None:
            rmw(m, c)
            return
        mach.hz.atomic = True  # the hazard checker: atomics on one word do not race each other
        try:
            rmw(m, c)
        finally:
            mach.hz.atomic = False

    def rmw(m: Any, c: CTA) -> None:
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (count(m),))
        xs = np.broadcast_to(np.asarray(x(m), dt), a.shape)
        ys = y(m)
        ys = np.broadcast_to(np.asarray(ys, dt), a.shape) if ys is not None else None
        if np.unique(a).size == a.size:
            old = np.asarray(load(mach, space, m, c, a, dt, 1), dt)
            new = np.asarray(f(old, xs, ys), dt)
            store(mach, space, m, c, a, new, dt, 1)
            res = old
        else:  # several threads on one address: one after the other, in lane order
            idx = _indices(m)
            res = np.empty(a.shape, dt)
            new = np.empty(a.shape, dt)
            for k in range(a.size):
                mk = idx[k:k + 1]
                o = np.asarray(load(mach, space, mk, c, a[k:k + 1], dt, 1), dt)
                nv = np.asarray(f(o, xs[k:k + 1], None if ys is None else ys[k:k + 1]), dt)
                store(mach, space, mk, c, a[k:k + 1], nv, dt, 1)
                res[k] = o[0]
                new[k] = nv[0]
        if not np.array_equal(res.view(_U[dt.itemsize]), new.view(_U[dt.itemsize])):
            mach.since_progress = 0
        if write is not None:
            write(m, res)

    return atom


_U = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@decoder("atom")
def _atom(b: Binder) -> Any:
    return _atomic(b, True)


@decoder("red")
def _red(b: Binder) -> Any:
    if "async" in b.q:
        raise b.fail("red.async is not emulated")
    return _atomic(b, False)


# ------------------------------------------------------------------------------------------- addresses
@decoder("cvta")
def _cvta(b: Binder) -> Any:
    b.only({"to", "global", "shared", "shared::cta", "shared::cluster", "local", "param", "const", "u32", "u64"})
    ty = b.type()
    to = "to" in b.q
    sp = next((x for x in b.q if x in ("global", "shared", "shared::cta", "shared::cluster", "local", "param",
                                        "const")), None)
    if sp is None:
        raise b.fail("no state space")
    d = b.dst(b.ops[0], ty)
    a = b.val(b.ops[1], ty)
    dt = DT[ty]
    if sp in ("global", "param", "const"):
        return lambda m, c: d(m, a(m))
    win = SHARED_WINDOW if sp.startswith("shared") else LOCAL_WINDOW
    k = dt.type(win & (0xFFFFFFFF if dt.itemsize == 4 else (1 << 64) - 1))
    if to:
        return lambda m, c: d(m, (np.asarray(a(m), dt) - k).astype(dt))
    return lambda m, c: d(m, (np.asarray(a(m), dt) + k).astype(dt))


@decoder("isspacep")
def _isspacep(b: Binder) -> Any:
    b.only({"global", "shared", "shared::cta", "shared::cluster", "local", "param", "const", "param::entry"})
    sp = b.q[0]
    d = b.dst(b.ops[0], "pred")
    a = b.val(b.ops[1], "u64")

    def f(m: Any, c: CTA) -> None:
        x = np.broadcast_to(np.asarray(a(m), np.uint64), (count(m),))
        sh, lo = _windows(x)
        if sp.startswith("shared"):
            r = sh
        elif sp == "local":
            r = lo
        else:
            r = ~sh & ~lo
        d(m, r)

    return f


@decoder("mapa")
def _mapa(b: Binder) -> Any:
    b.only({"shared::cluster", "u32", "u64"})
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    a = b.val(b.ops[1], ty)
    r = b.val(b.ops[2], "u32")
    generic = "shared::cluster" not in b.q
    mach = b.mach

    def f(m: Any, c: CTA) -> None:
        rank = np.asarray(r(m), np.uint64)
        if (rank >= np.uint64(mach.csize)).any():
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"mapa to block rank {int(np.max(rank))} of a cluster of {mach.csize}")
        x = np.asarray(a(m), np.uint64)
        if generic:
            x = x - np.uint64(SHARED_WINDOW)
        y = (x & np.uint64(OFFSET_MASK)) | (rank << np.uint64(RANK_SHIFT))
        if generic:
            y = y + np.uint64(SHARED_WINDOW)
        d(m, y.astype(dt))

    return f


@decoder("prefetch", "prefetchu", "applypriority", "discard")
def _prefetch(b: Binder) -> Any:
    b.only({"global", "local", "L1", "L2", "tensormap", "const", "param", "L2::evict_last", "L2::evict_normal",
            "L2::128B", "uniform"})
    return lambda m, c: None


@decoder("createpolicy")
def _createpolicy(b: Binder) -> Any:
    d = b.dst(b.ops[0], "b64")
    k = np.uint64(0x1000_0000_0000_0000)
    return lambda m, c: d(m, k)


__all__ = ["load", "store", "smem_load", "smem_store", "global_load", "global_store", "Reg", "Sink"]


# ------------------------------------------------------------------------------------------- ldmatrix / stmatrix
@decoder("ldmatrix", "stmatrix")
def _matrix(b: Binder) -> Any:
    """ldmatrix / stmatrix m8n8 .b16 (x1, x2, x4, .trans): lane 8i + r gives the shared address of row r of matrix
    i; lane l holds, in its register i, the two b16 at row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (of its
    transpose with .trans)."""
    from .machine import collective

    b.only({"sync", "aligned", "m8n8", "x1", "x2", "x4", "trans", "shared", "shared::cta", "b16"})
    if "m8n8" not in b.q or "b16" not in b.q:
        raise b.fail("only the m8n8 .b16 shape is emulated")
    nmat = next(int(x[1]) for x in b.q if x in ("x1", "x2", "x4"))
    trans = "trans" in b.q
    load = b.base == "ldmatrix"
    regs_op, addr_op = (b.ops[0], b.ops[1]) if load else (b.ops[1], b.ops[0])
    items = regs_op.items if isinstance(regs_op, Vec) else (regs_op,)
    if len(items) != nmat:
        raise b.fail(f"{len(items)} registers for .x{nmat}")
    addr = b.addr(addr_op)
    generic = not any(x in b.q for x in ("shared", "shared::cta"))
    rd = [b.val(x, "b32") for x in items]
    wr = [b.dst(x, "b32") for x in items] if load else []
    mach = b.mach
    pc = b.pc
    lane = np.arange(32)
    row_of, col_of = lane // 4, 2 * (lane % 4)

    def op(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, 0xFFFFFFFF)
        if g is None:
            return True
        idx = _indices(g)
        if len(idx) != 32:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION", f"{b.base} needs all 32 lanes of the warp")
        a = np.asarray(addr(g), np.uint64)
        a = np.full(32, a, np.uint64) if a.ndim == 0 else a
        if generic:
            a = a - np.uint64(SHARED_WINDOW)
        for i in range(nmat):
            rows = a[8 * i:8 * i + 8]  # row r of matrix i at rows[r]; 16-byte aligned rows of 8 b16
            if (rows % np.uint64(16)).any():
                raise _misaligned(rows, 16)
            r, cc = (col_of, row_of) if trans else (row_of, col_of)
            # element (row, col) of the matrix as stored: address rows[row] + 2 col
            first = rows[r] + np.uint64(2) * cc.astype(np.uint64)
            second = rows[r + (1 if trans else 0)] + np.uint64(2) * (cc + (0 if trans else 1)).astype(np.uint64)
            if load:
                lo = smem_load(mach, c, first, np.dtype(np.uint16), 1).astype(np.uint32)
                hi = smem_load(mach, c, second, np.dtype(np.uint16), 1).astype(np.uint32)
                wr[i](g, lo | (hi << np.uint32(16)))
            else:
                v = np.asarray(rd[i](g), np.uint32)
                v = np.full(32, v, np.uint32) if v.ndim == 0 else v
                smem_store(mach, c, first, (v & np.uint32(0xFFFF)).astype(np.uint16), np.dtype(np.uint16), 1)
                smem_store(mach, c, second, (v >> np.uint32(16)).astype(np.uint16), np.dtype(np.uint16), 1)
                mach.since_progress = 0
        mach.PC[g] = pc + 1
        return True

    op.ctl = True  # type: ignore[attr-defined]
    return op
