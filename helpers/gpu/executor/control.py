"""Control flow and the CTA's own synchronisation: bra, call/ret (with printf and assert as built-ins), exit,
trap, named barriers (bar / barrier), warp collectives (shfl, vote, match, redux, elect, activemask), setmaxnreg,
fences and other instructions that only order memory (no-ops under the executor's sequential memory)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .errors import EmulationLimit
from .machine import (
    CTA,
    DT,
    EXIT,
    PARK,
    Binder,
    ExecFault,
    Machine,
    Trap,
    _indices,
    collective,
    count,
    subset,
)
from .parser import Imm, Pair, Paren, Sym
from .registry import ctl, decoder
from .work import log_of

FULL = 0xFFFFFFFF


# ------------------------------------------------------------------------------------------- branches
@decoder("bra", "brx")
def _bra(b: Binder) -> Any:
    if b.base == "brx":
        raise b.fail("indirect branches (brx.idx) are not emulated")
    b.only({"uni"})
    op = b.ops[0]
    if not isinstance(op, Sym):
        raise b.fail("branch target")
    target = b.mach.prog.labels.get((b.func, op.name))
    if target is None:
        raise b.fail(f"label {op.name} not found")
    PC = b.mach.PC
    nxt = b.pc + 1

    def bra(m: Any, c: CTA, sel: Any = None) -> bool:
        if sel is None:
            PC[m] = target
        else:
            PC[m] = np.where(sel, target, nxt)
        return True

    bra.ctl = True  # type: ignore[attr-defined]
    bra.guard_aware = True  # type: ignore[attr-defined]
    return bra


def exit_threads(mach: Machine, m: Any, c: CTA) -> None:
    """Threads ``m`` of ``c`` are done: update barriers that counted them, retire the CTA when all are."""
    if mach.hz is not None:
        mach.hz.thread_exit(m, c)
    mach.set_state(m, EXIT)
    if mach.opts.trace:
        for g in np.unique(mach.WARPG[_indices(m)]).tolist():
            if (mach.STATE[mach.wlo[g]:mach.whi[g]] == EXIT).all():
                mach.event(c, g - c.w0, "done")
    for bid, bar in list(c.named.items()):
        _try_complete_named(mach, c, bid, bar)
    if c.cluster is not None:
        _try_complete_cluster(mach, c.cluster)
    if not (mach.STATE[c.lo:c.hi] != EXIT).any():
        for read in list(c.pending_reads):  # outstanding bulk stores read the block's shared memory first
            read()
        log_of(mach).exited(c)
        c.alive = False
        mach.parked = [p for p in mach.parked if p.cta is not c]
        if all(not x.alive for x in c.cluster.ctas):
            mach._fill_slots()


@decoder("exit")
def _exit(b: Binder) -> Any:
    b.only(set())
    mach = b.mach

    @ctl
    def ex(m: Any, c: CTA) -> bool:
        exit_threads(mach, m, c)
        return True

    return ex


@decoder("ret")
def _ret(b: Binder) -> Any:
    b.only({"uni"})
    mach = b.mach
    fn = mach.prog.module.functions[b.func]
    if fn.kind == "entry":
        return _exit(b)
    rets = [(mach.prog.symbol(b.func, p.name), p) for p in fn.rets]

    @ctl
    def ret(m: Any, c: CTA) -> bool:
        idx = _indices(m)
        d = mach.DEPTH[idx] - 1
        back = mach.RET[d, idx]
        mach.DEPTH[idx] = d
        mach.PC[idx] = back
        for site in np.unique(back).tolist():
            call = mach.call_sites.get(site - 1)
            if call is None:
                continue
            sel = idx[back == site]
            for (fsym, _p), actual in zip(rets, call["rets"], strict=False):
                mach.FPARAM[sel, actual.offset:actual.offset + actual.size] = \
                    mach.FPARAM[sel, fsym.offset:fsym.offset + actual.size]
        return True

    return ret


@decoder("call")
def _call(b: Binder) -> Any:
    b.only({"uni"})
    ops = list(b.ops)
    rets = []
    if ops and isinstance(ops[0], Paren):
        rets = list(ops.pop(0).items)
    target = ops.pop(0)
    args = list(ops.pop(0).items) if ops and isinstance(ops[0], Paren) else []
    if ops:
        raise b.fail("indirect calls through a prototype are not emulated")
    if not isinstance(target, Sym):
        raise b.fail("indirect calls are not emulated")
    mach = b.mach
    if not hasattr(mach, "call_sites"):
        mach.call_sites = {}
    name = target.name
    actual_args = [b.symbol(a.name) for a in args]
    actual_rets = [b.symbol(r.name) for r in rets]
    fn = mach.prog.module.functions.get(name)
    if name == "vprintf":
        return _vprintf(b, actual_args, actual_rets)
    if name == "__assertfail":
        return _assertfail(b, actual_args)
    if fn is None or not fn.defined:
        raise b.fail(f"a call to {name}, which the module does not define")
    start = mach.prog.start[name]
    formals = [mach.prog.symbol(name, p.name) for p in fn.params]
    mach.call_sites[b.pc] = {"rets": actual_rets}
    nxt = b.pc + 1

    @ctl
    def call(m: Any, c: CTA) -> bool:
        idx = _indices(m)
        for f, a in zip(formals, actual_args, strict=True):
            mach.FPARAM[idx, f.offset:f.offset + f.size] = mach.FPARAM[idx, a.offset:a.offset + f.size]
        d = mach.DEPTH[idx]
        if int(d.max()) >= mach.RET.shape[0]:
            raise EmulationLimit(f"the executor does not support calls nested deeper than {mach.RET.shape[0]} "
                                 "(recursion)")
        mach.RET[d, idx] = nxt
        mach.DEPTH[idx] = d + 1
        mach.PC[idx] = start
        return True

    return call


def _read_cstring(mach: Machine, addr: int) -> str:
    from .memops import load

    out = bytearray()
    while len(out) < 4096:
        chunk = load(mach, "generic", np.arange(1), mach.cur, np.array([addr + len(out)], np.uint64),
                     np.dtype(np.uint8), 1)
        if int(chunk[0]) == 0:
            break
        out.append(int(chunk[0]))
    return out.decode(errors="replace")


_FMT = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d+))?(hh|h|ll|l|z|j|t|L)?([diouxXcsfFeEgGaAp%])")


def _format(mach: Machine, fmt: str, buf: int, thread: int) -> str:
    from .memops import load

    pos = 0

    def arg(size: int, dt: np.dtype) -> Any:
        nonlocal pos
        pos = -(-pos // size) * size
        v = load(mach, "generic", np.array([thread]), mach.cur, np.array([buf + pos], np.uint64), dt, 1)[0]
        pos += size
        return v

    def rep(mt: re.Match) -> str:
        flags, width, prec, length, conv = mt.groups()
        if conv == "%":
            return "%"
        if conv in "fFeEgGaA":
            v = float(arg(8, np.dtype(np.float64)))
            spec = f"%{flags}{width or ''}{'.' + prec if prec else ''}{conv if conv not in 'aA' else 'e'}"
            return spec % v
        if conv == "s":
            return _read_cstring(mach, int(arg(8, np.dtype(np.uint64))))
        if conv == "p":
            return hex(int(arg(8, np.dtype(np.uint64))))
        big = length in ("ll", "l", "z", "j", "t")
        size = 8 if big else 4
        dt = np.dtype(np.int64 if big else np.int32) if conv in "di" else np.dtype(np.uint64 if big else np.uint32)
        v = int(arg(size, dt))
        if conv == "c":
            return chr(v & 0xFF)
        return f"%{flags}{width or ''}{'.' + prec if prec else ''}{'d' if conv in 'diu' else conv}" % v

    return _FMT.sub(rep, fmt)


def _vprintf(b: Binder, args: list, rets: list) -> Any:
    mach = b.mach
    fsym, asym = args[0], args[1]

    def printf(m: Any, c: CTA) -> None:
        for t in _indices(m).tolist():
            fa = int(mach.FPARAM[t, fsym.offset:fsym.offset + 8].view(np.uint64)[0])
            ba = int(mach.FPARAM[t, asym.offset:asym.offset + 8].view(np.uint64)[0])
            text = _format(mach, _read_cstring(mach, fa), ba, t)
            mach.printed.append(text)
            print(text, end="")
        for r in rets:
            mach.FPARAM[m, r.offset:r.offset + 4] = 0

    return printf


def _assertfail(b: Binder, args: list) -> Any:
    mach = b.mach

    @ctl
    def fail(m: Any, c: CTA) -> bool:
        t = int(_indices(m)[0])

        def ptr(k: int) -> int:
            s = args[k]
            return int(mach.FPARAM[t, s.offset:s.offset + 8].view(np.uint64)[0])

        msg, fil = _read_cstring(mach, ptr(0)), _read_cstring(mach, ptr(1))
        line = int(mach.FPARAM[t, args[2].offset:args[2].offset + 4].view(np.uint32)[0])
        raise ExecFault("CUDA_ERROR_ASSERT", f"assert({msg}) failed at {fil}:{line}")

    return fail


@decoder("trap", "brkpt")
def _trap(b: Binder) -> Any:
    b.only(set())

    @ctl
    def trap(m: Any, c: CTA) -> bool:
        raise Trap("CUDA_ERROR_ILLEGAL_INSTRUCTION", "the kernel executed `trap`")

    return trap


@decoder("nanosleep", "pmevent", "griddepcontrol")
def _sleep(b: Binder) -> Any:
    if b.base == "nanosleep":
        b.only({"u32"})
        t = b.val(b.ops[0], "u32")

        def sleep(m: Any, c: CTA) -> None:
            c.clock += int(np.max(t(m)))

        return sleep
    return lambda m, c: None


# ------------------------------------------------------------------------------------------- memory ordering
_FENCE_Q = {"sc", "acq_rel", "acquire", "release", "relaxed", "cta", "cluster", "gpu", "sys", "proxy", "async",
            "alias", "tensormap", "generic", "global", "shared", "shared::cta", "shared::cluster", "mbarrier_init",
            "async::generic", "tensormap::generic", "op_restrict", "sync_restrict", "gl"}


@decoder("fence", "membar")
def _fence(b: Binder) -> Any:
    b.only(_FENCE_Q)
    # The executor runs memory operations in one order for everyone (sequential consistency), so fences
    # order nothing further; the hazard checker counts them (proxy fences, GPU-scope fences for flags).
    mach = b.mach
    if mach.hz is None:
        return lambda m, c: None
    opcode = b.ins.opcode
    return lambda m, c: mach.hz.fence(c, m, opcode)


# ------------------------------------------------------------------------------------------- named barriers
def _live(mach: Machine, c: CTA) -> int:
    return int((mach.STATE[c.lo:c.hi] != EXIT).sum())


def _try_complete_named(mach: Machine, c: CTA, bid: int, bar: dict) -> bool:
    target = bar["expected"] if bar["expected"] is not None else _live(mach, c)
    if bar["arrived"] < target or bar["arrived"] == 0:
        return False
    red = bar.get("red")
    for fn in bar["done"]:
        fn(red)
    if mach.hz is not None:
        mach.hz.named_done(c, bar)
    del c.named[bid]
    mach.wake(bar)
    mach.note_progress()
    return True


def _named(b: Binder, wait: bool) -> Any:
    mach = b.mach
    ops = list(b.ops)
    dest = ops.pop(0) if "red" in b.q else None
    bid_r = b.val(ops[0], "u32")
    cnt_r = b.val(ops[1], "u32") if len(ops) > 1 and not ("red" in b.q and len(ops) == 2) else None
    redop = next((x for x in b.q if x in ("popc", "and", "or")), None)
    cpred = b.pred(ops[-1]) if redop else None
    if redop and dest is not None:
        write = b.dst(dest, "u32" if redop == "popc" else "pred")
    pc = b.pc

    @ctl
    def bar_op(m: Any, c: CTA) -> Any:
        bid = int(np.max(bid_r(m)))
        if bid > 15:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION", f"named barrier {bid} (there are 16: 0..15)")
        n = count(m)
        want = int(np.max(cnt_r(m))) if cnt_r is not None else None
        if want is not None and (want % 32 or want == 0):
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"bar with a thread count of {want}: it must be a non-zero multiple of 32")
        bar = c.named.get(bid)
        if bar is None:
            bar = {"expected": want, "arrived": 0, "done": [], "red": None}
            c.named[bid] = bar
        elif want is not None and bar["expected"] is not None and bar["expected"] != want:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"barrier {bid} used with {bar['expected']} and {want} threads at once")
        bar["arrived"] += n
        if mach.hz is not None:
            mach.hz.named_arrive(c, bar, m, wait)
        if redop:
            v = np.asarray(cpred(m))
            r = int(v.sum()) if redop == "popc" else (bool(v.all()) if redop == "and" else bool(v.any()))
            old = bar["red"]
            bar["red"] = r if old is None else (old + r if redop == "popc" else (old and r if redop == "and"
                                                                                   else old or r))
            idx = _indices(m)
            bar["done"].append(lambda red, _i=idx: write(_i, np.full(len(_i), red, DT["u32" if redop == "popc"
                                                                                       else "pred"])))
        if _try_complete_named(mach, c, bid, bar):
            return None
        if not wait:
            return None
        def what() -> str:  # worded when the deadlock is reported, with the final count
            target = bar["expected"] if bar["expected"] is not None else _live(mach, c)
            return (f"waits at named barrier {bid} (bar.sync) for {target} threads, but only {bar['arrived']} ever "
                    "arrive: every thread counted by the barrier must reach it (check the thread count and which "
                    "warps call it).")

        return mach.park(m, c, bar, "bar", pc, retry=False, what=what)

    return bar_op


@decoder("bar", "barrier")
def _bar(b: Binder) -> Any:
    q = set(b.q)
    if "cluster" in q:
        return _cluster_barrier(b)
    if "warp" in q:
        b.only({"warp", "sync"})
        return _warp_sync(b)
    b.only({"sync", "arrive", "red", "popc", "and", "or", "cta", "aligned", "u32", "pred"})
    if "arrive" in q:
        return _named(b, False)
    return _named(b, True)


# ------------------------------------------------------------------------------------------- cluster barrier
def _try_complete_cluster(mach: Machine, cl: Any) -> None:
    live = sum(_live(mach, c) for c in cl.ctas if c.alive)
    if cl.arrived and cl.arrived >= live:
        cl.phase += 1
        cl.arrived = 0
        if mach.hz is not None:
            mach.hz.cluster_done(cl)
        mach.wake(cl)
        mach.note_progress()


def _cluster_barrier(b: Binder) -> Any:
    b.only({"cluster", "arrive", "wait", "release", "relaxed", "acquire", "aligned"})
    mach = b.mach
    pc = b.pc
    if "arrive" in b.q:
        @ctl
        def arrive(m: Any, c: CTA) -> None:
            cl = c.cluster
            idx = _indices(m)
            if (mach.CLU_PHASE[idx] == cl.phase).any():
                raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                                "barrier.cluster.arrive twice without barrier.cluster.wait in between")
            mach.CLU_PHASE[idx] = cl.phase
            if mach.hz is not None:
                mach.hz.cluster_arrive(c, m, "relaxed" not in b.q)
            cl.arrived += len(idx)
            _try_complete_cluster(mach, cl)
            return None

        return arrive

    @ctl
    def wait(m: Any, c: CTA) -> Any:
        cl = c.cluster
        idx = _indices(m)
        ph = mach.CLU_PHASE[idx]
        ok = (ph >= 0) & (ph < cl.phase)
        if mach.hz is not None and ok.any():
            mach.hz.cluster_waited(c, idx[ok], True)
        if ok.all():
            mach.CLU_PHASE[idx] = -1
            return None
        if ok.any():
            mach.CLU_PHASE[idx[ok]] = -1
            mach.PC[idx[ok]] = pc + 1
        rest = idx[~ok]
        mach.park(rest, c, cl, "cluster", pc, retry=True,
                  what="waits at the cluster barrier (barrier.cluster.wait), but not every thread of every block "
                       "of the cluster arrives: each must call barrier.cluster.arrive (cluster_sync()).")
        return True

    return wait


# ------------------------------------------------------------------------------------------- warp collectives
def _mask_reader(b: Binder, op: object) -> Any:
    if isinstance(op, Imm):
        k = op.value & FULL
        return lambda m: k
    r = b.val(op, "b32")
    return lambda m: int(np.max(r(m)))


@decoder("shfl")
def _shfl(b: Binder) -> Any:
    modes = {"up", "down", "bfly", "idx"}
    b.only(modes | {"sync"})
    if "sync" not in b.q:
        raise b.fail("shfl without .sync (removed on sm_70+)")
    mode = next(x for x in b.q if x in modes)
    dest = b.ops[0]
    dd = b.dst(dest.first if isinstance(dest, Pair) else dest, "b32")
    dp = b.dst(dest.second, "pred") if isinstance(dest, Pair) else None
    a = b.val(b.ops[1], "b32")
    bb = b.val(b.ops[2], "u32")
    cc = b.val(b.ops[3], "u32")
    mk = _mask_reader(b, b.ops[4])
    mach = b.mach
    pc = b.pc

    @ctl
    def shfl(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m))
        if g is None:
            return True
        idx = _indices(g)
        lane = mach.LANE[idx].astype(np.int64)
        bval = np.broadcast_to(np.asarray(bb(g), np.int64), idx.shape) & 31
        cv = np.broadcast_to(np.asarray(cc(g), np.int64), idx.shape)
        cval, segmask = cv & 31, (cv >> 8) & 31
        max_lane = (lane & segmask) | (cval & ~segmask & 31)
        min_lane = lane & segmask
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = min_lane | (bval & ~segmask & 31)
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        w = int(mach.WARPG[idx[0]])
        src = mach.wlo[w] + j
        vals = np.broadcast_to(np.asarray(a(slice(mach.wlo[w], mach.whi[w])), np.uint32), (mach.whi[w] - mach.wlo[w],))
        out = vals[np.clip(j, 0, len(vals) - 1)]
        _ = src
        dd(g, out)
        if dp is not None:
            dp(g, ok)
        mach.PC[g] = pc + 1
        return True

    return shfl


@decoder("vote")
def _vote(b: Binder) -> Any:
    modes = {"all", "any", "uni", "ballot"}
    b.only(modes | {"sync"})
    mode = next(x for x in b.q if x in modes)
    d = b.dst(b.ops[0], "b32" if mode == "ballot" else "pred")
    p = b.pred(b.ops[1])
    mk = _mask_reader(b, b.ops[2]) if len(b.ops) > 2 else (lambda m: FULL)
    mach = b.mach
    pc = b.pc

    @ctl
    def vote(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m)) if "sync" in b.q else m
        if g is None:
            return True
        v = np.broadcast_to(np.asarray(p(g)), (count(g),))
        n = count(g)
        if mode == "ballot":
            lanes = mach.LANE[_indices(g)].astype(np.uint64)
            r = np.uint32(int(((v.astype(np.uint64)) << lanes).sum()) & FULL)
            d(g, np.full(n, r, np.uint32))
        elif mode == "all":
            d(g, np.full(n, bool(v.all())))
        elif mode == "any":
            d(g, np.full(n, bool(v.any())))
        else:
            d(g, np.full(n, bool(v.all() or not v.any())))
        mach.PC[g] = pc + 1
        return True

    return vote


@decoder("activemask")
def _activemask(b: Binder) -> Any:
    b.only({"b32"})
    d = b.dst(b.ops[0], "b32")
    mach = b.mach

    def am(m: Any, c: CTA) -> None:
        lanes = mach.LANE[_indices(m)].astype(np.uint64)
        r = np.uint32(int((np.uint64(1) << lanes).sum()) & FULL)
        d(m, np.full(count(m), r, np.uint32))

    return am


@decoder("elect")
def _elect(b: Binder) -> Any:
    b.only({"sync"})
    dest = b.ops[0]
    dd = b.dst(dest.first if isinstance(dest, Pair) else dest, "b32")
    dp = b.dst(dest.second, "pred") if isinstance(dest, Pair) else None
    mk = _mask_reader(b, b.ops[1])
    mach = b.mach
    pc = b.pc

    @ctl
    def elect(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m))
        if g is None:
            return True
        lanes = mach.LANE[_indices(g)]
        leader = int(lanes.min())
        dd(g, np.full(count(g), leader, np.uint32))
        if dp is not None:
            dp(g, lanes == leader)
        mach.PC[g] = pc + 1
        return True

    return elect


def _warp_sync(b: Binder) -> Any:
    mk = _mask_reader(b, b.ops[0])
    mach = b.mach
    pc = b.pc

    @ctl
    def sync(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m))
        if g is None:
            return True
        mach.PC[g] = pc + 1
        return True

    return sync


@decoder("redux")
def _redux(b: Binder) -> Any:
    ops = {"add", "min", "max", "and", "or", "xor"}
    b.only(ops | {"sync"})
    opn = next(x for x in b.q if x in ops)
    ty = b.type()
    dt = DT[ty]
    d = b.dst(b.ops[0], ty)
    a = b.val(b.ops[1], ty)
    mk = _mask_reader(b, b.ops[2])
    mach = b.mach
    pc = b.pc
    red = {"add": np.add.reduce, "min": np.min, "max": np.max, "and": np.bitwise_and.reduce,
           "or": np.bitwise_or.reduce, "xor": np.bitwise_xor.reduce}[opn]

    @ctl
    def redux(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m))
        if g is None:
            return True
        v = np.broadcast_to(np.asarray(a(g), dt), (count(g),))
        r = np.asarray(red(v)).astype(dt)
        d(g, np.full(count(g), r, dt))
        mach.PC[g] = pc + 1
        return True

    return redux


@decoder("match")
def _match(b: Binder) -> Any:
    b.only({"any", "all", "sync"})
    ty = b.type()
    dest = b.ops[0]
    dd = b.dst(dest.first if isinstance(dest, Pair) else dest, "b32")
    dp = b.dst(dest.second, "pred") if isinstance(dest, Pair) else None
    a = b.val(b.ops[1], ty)
    mk = _mask_reader(b, b.ops[2])
    mach = b.mach
    pc = b.pc
    is_all = "all" in b.q

    @ctl
    def match(m: Any, c: CTA) -> Any:
        g = collective(mach, m, c, pc, mk(m))
        if g is None:
            return True
        v = np.broadcast_to(np.asarray(a(g)), (count(g),))
        lanes = mach.LANE[_indices(g)].astype(np.uint64)
        same = v[:, None] == v[None, :]
        masks = (same.astype(np.uint64) << lanes[None, :]).sum(axis=1).astype(np.uint32)
        if is_all:
            full = bool(same.all())
            allmask = np.uint32(int((np.uint64(1) << lanes).sum()) & FULL)
            dd(g, np.full(count(g), allmask if full else 0, np.uint32))
            if dp is not None:
                dp(g, np.full(count(g), full))
        else:
            dd(g, masks)
        mach.PC[g] = pc + 1
        return True

    return match


# ------------------------------------------------------------------------------------------- setmaxnreg
@decoder("setmaxnreg")
def _setmaxnreg(b: Binder) -> Any:
    b.only({"inc", "dec", "sync", "aligned", "u32"})
    if not isinstance(b.ops[0], Imm):
        raise b.fail("setmaxnreg takes an immediate count")
    want = b.ops[0].value
    inc = "inc" in b.q
    mach = b.mach
    pc = b.pc
    line = b.ins.cell_line

    @ctl
    def setmaxnreg(m: Any, c: CTA) -> Any:
        if mach.setmaxnreg_ignored:
            return None  # ptxas dropped it (C7508): a no-op on the GPU too
        where = f" (line {line} of the CUDA source)" if line else ""
        if want < 24 or want > 256 or want % 8:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"setmaxnreg {want}{where}: the count must be a multiple of 8 from 24 to 256")
        idx = _indices(m)
        w = int(mach.WARPG[idx[0]])
        wl = w - c.w0
        wg = wl // 4
        rounds = c.regs_wg.setdefault(("round", wl), 0)
        prev = c.regs_wg.get(("want", wg, rounds))
        if prev is not None and prev != (inc, want):
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"the warps of warpgroup {wg} asked setmaxnreg for different budgets ({prev[1]} and "
                            f"{want}){where}: every warp of a warpgroup must issue the same setmaxnreg")
        cur = c.regs_wg.get(("regs", wl), mach.regs_per_thread or want)
        if inc and want < cur or not inc and want > cur:
            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                            f"setmaxnreg.{'inc' if inc else 'dec'} to {want} registers from {cur}{where}: .inc "
                            "cannot lower the budget and .dec cannot raise it")
        if mach.regs_per_thread:
            used = sum(v for k, v in c.regs_wg.items() if k[0] == "regs") + \
                mach.regs_per_thread * (mach.W - sum(1 for k in c.regs_wg if k[0] == "regs"))
            need = want - cur
            free = mach.regs_per_thread * mach.W - used
            if inc and need > free:
                return mach.park(m, c, ("regs", c.slot), "setmaxnreg", pc, retry=True,
                                 what=f"waits in setmaxnreg.inc to {want} registers per thread{where}, but the "
                                      f"block's register pool ({mach.regs_per_thread} × {mach.T} threads = "
                                      f"{mach.regs_per_thread * mach.T}) never has {need * 32} free: the "
                                      "budgets of the warpgroups must add up (e.g. 24 + 240 + 240 = 504 = 3 × 168 "
                                      "for 384 threads at 168 registers).")
        c.regs_wg[("want", wg, rounds)] = (inc, want)
        c.regs_wg[("round", wl)] = rounds + 1
        c.regs_wg[("regs", wl)] = want
        if not inc:
            mach.wake(("regs", c.slot))
        return None

    return setmaxnreg


__all__ = ["exit_threads", "PARK", "subset"]
