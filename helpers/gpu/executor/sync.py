"""mbarrier instructions on the emulator's :class:`helpers.hopper.mbarrier.MBarrier` (H100-checked semantics): init,
inval, arrive (with a count, expect_tx, on a barrier of another CTA of the cluster), expect_tx, complete_tx,
test_wait / try_wait (parity or state token). A wait that cannot succeed parks its threads until the barrier's
phase completes; in stall mode it returns false (see machine.py).

In hazard mode a wait takes the adversarial choice the PTX allows: ``try_wait`` is only potentially blocking (its time
limit is the hardware's) and ``test_wait`` does not block at all, so a thread's first poll of a phase that has not
completed returns false, and only its next poll parks until the phase completes (the copies that complete it land
then, at the latest moment). A loop that ignores the predicate, or a ``test_wait`` used once, goes on before the data
is delivered, and the hazard checker reports the read as the race it is."""

from __future__ import annotations

from typing import Any

import numpy as np

from helpers.hopper.mbarrier import MBarrierError

from .barriers import barrier_label, demangle, get_barrier  # noqa: F401 - the names sync always had
from .machine import CTA, SHARED_WINDOW, Binder, ExecFault, Machine, _indices, count
from .memory import OFFSET_MASK, RANK_SHIFT
from .registry import ctl, decoder
from .work import log_of

_Q = {"shared", "shared::cta", "shared::cluster", "release", "acquire", "relaxed", "cta", "cluster", "b64",
      "parity", "expect_tx", "noComplete"}
TOKEN = 1 << 62


def _resolve(mach: Machine, c: CTA, addr: np.ndarray, generic: bool, cluster: bool) -> list[tuple[CTA, int, Any]]:
    """[(cta, offset, selection)] for each distinct barrier the threads name."""
    a = np.asarray(addr, np.uint64)
    if generic:
        if ((a < np.uint64(SHARED_WINDOW)) | (a >= np.uint64(SHARED_WINDOW + (1 << 32)))).any():
            raise ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", "an mbarrier operation on an address outside shared memory")
        a = a - np.uint64(SHARED_WINDOW)
        cluster = True
    if (a % np.uint64(8)).any():
        raise ExecFault("CUDA_ERROR_MISALIGNED_ADDRESS", f"an mbarrier at shared address {int(a[0]):#x}, which is "
                        "not 8-byte aligned")
    out = []
    for u in np.unique(a).tolist():
        off = u & OFFSET_MASK
        cta = c
        if cluster:
            r = u >> RANK_SHIFT
            if r >= len(c.cluster.ctas):
                raise ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"an mbarrier of block rank {r} in a cluster of "
                                f"{len(c.cluster.ctas)}")
            cta = c.cluster.ctas[r]
        if off + 8 > mach.smem_bytes:
            raise ExecFault("CUDA_ERROR_ILLEGAL_ADDRESS", f"an mbarrier at shared offset {off:#x}, past the "
                            f"block's {mach.smem_bytes} bytes of shared memory")
        sel = a == np.uint64(u)
        out.append((cta, off, sel))
    return out


def _fault(e: MBarrierError) -> ExecFault:
    return ExecFault("CUDA_ERROR_LAUNCH_FAILED", str(e))


def _addr_mode(b: Binder) -> tuple[bool, bool]:
    generic = not any(x in b.q for x in ("shared", "shared::cta", "shared::cluster"))
    return generic, "shared::cluster" in b.q


@decoder("mbarrier")
def _mbarrier(b: Binder) -> Any:
    kind = b.q[0] if b.q else ""
    q = set(b.q[1:])
    handlers = {"init": _init, "inval": _inval, "arrive": _arrive, "arrive_drop": _unsupported,
                "expect_tx": _expect_tx, "complete_tx": _expect_tx, "test_wait": _wait, "try_wait": _wait,
                "pending_count": _unsupported}
    if kind not in handlers:
        raise b.fail()
    bad = [x for x in q if x not in _Q]
    if bad:
        raise b.fail(f"qualifier .{bad[0]} is not emulated")
    return handlers[kind](b)


def _unsupported(b: Binder) -> Any:
    raise b.fail()


def _init(b: Binder) -> Any:
    mach = b.mach
    generic, cluster = _addr_mode(b)
    addr = b.addr(b.ops[0])
    cnt = b.val(b.ops[1], "u32")

    def init(m: Any, c: CTA) -> None:
        n = count(m)
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (n,))
        k = np.broadcast_to(np.asarray(cnt(m), np.uint32), (n,))
        for cta, off, sel in _resolve(mach, c, a, generic, cluster):
            bar = get_barrier(mach, cta, off, create=True)
            try:
                bar.init(int(k[sel][-1]))
            except MBarrierError as e:
                raise _fault(e) from None

    return init


def _inval(b: Binder) -> Any:
    mach = b.mach
    generic, cluster = _addr_mode(b)
    addr = b.addr(b.ops[0])

    def inval(m: Any, c: CTA) -> None:
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (count(m),))
        for cta, off, _ in _resolve(mach, c, a, generic, cluster):
            bar = cta.barriers.pop(off, None)
            cta.barmask[off:off + 8] = False
            if bar is not None:
                bar.invalidate()

    return inval


def _arrive(b: Binder) -> Any:
    mach = b.mach
    generic, cluster = _addr_mode(b)
    expect = "expect_tx" in b.q
    release = "relaxed" not in b.q  # mbarrier.arrive releases by default
    if "noComplete" in b.q:
        raise b.fail(".noComplete")
    ops = list(b.ops)
    dest = b.dst(ops[0], "b64") if len(ops) >= 2 and not _is_addr(ops[0]) else None
    if dest is not None or not _is_addr(ops[0]):
        ops.pop(0)
    addr = b.addr(ops[0])
    extra = b.val(ops[1], "u32") if len(ops) > 1 else None

    @ctl
    def arrive(m: Any, c: CTA) -> None:
        n = count(m)
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (n,))
        x = np.broadcast_to(np.asarray(extra(m), np.uint32), (n,)) if extra is not None else None
        tokens = np.zeros(n, np.uint64)
        for cta, off, sel in _resolve(mach, c, a, generic, cluster):
            bar = cta.barriers.get(off)
            if bar is None:
                bar = get_barrier(mach, cta, off)
            if mach.hz is not None and bar.initialized:
                mach.hz.arrive(c, bar, m, release)
                if expect:
                    mach.hz.expect(bar, int(x[sel].astype(np.int64).sum()))
            if bar.initialized:  # the lanes of one warp arrive together (measured on the H100)
                _one_warp_at_a_time(mach, c, m, sel, bar, x[sel] if x is not None and not expect else None, cta)
                log_of(mach).arrived(c, np.asarray(mach.WARPG[_indices(m)])[sel] - c.w0, bar,
                                     x[sel] if x is not None and not expect else None)
            try:
                if expect:
                    toks = [bar.arrive_expect_tx(int(v)) for v in x[sel]]
                elif x is not None:
                    toks = [bar.arrive(int(v)) for v in x[sel]]
                else:
                    k = int(sel.sum())
                    toks = []
                    while k:
                        step = min(k, max(bar.pending_arrivals, 1)) if bar.initialized else k
                        t = bar.arrive(step)
                        toks += [t] * step
                        k -= step
            except MBarrierError as e:
                raise _fault(e) from None
            tokens[sel] = np.array(toks, np.uint64) | np.uint64(TOKEN)
            if mach.opts.trace:
                mach.event(c, int(mach.WARPG[_indices(m)[0]]) - c.w0, "arrive_expect_tx" if expect else "arrive",
                           bar.name, bar.phase)
        mach.since_progress = 0
        if dest is not None:
            dest(m, tokens)
        return None

    return arrive


def _one_warp_at_a_time(mach: Machine, c: CTA, m: Any, sel: np.ndarray, bar: Any,
                        counts: np.ndarray | None = None, owner: CTA | None = None) -> None:
    """The H100 counts a warp's mbarrier.arrive on one barrier (plain, with an arrival count or .expect_tx; of its
    own block or, through shared::cluster, of another in its cluster) as one update, the sum of its lanes'
    arrivals: when that outnumbers what the phase still awaits, it stops the kernel (a trap), where one lane arriving
    as many times in turn completes phase after phase (tests/data/mbarrier_warp_arrivals_h100.json). The warps are
    taken in order; a warp whose arrivals fit the phase completes it and the next warp meets the next phase.
    `counts`: each selected lane's arrival count (else 1); `owner`: the barrier's block."""
    warps = np.asarray(mach.WARPG[_indices(m)])[sel]
    each = np.ones(len(warps), np.int64) if counts is None else np.asarray(counts, np.int64)
    pending = int(bar.pending_arrivals)
    for w in np.unique(warps).tolist():
        mine = warps == w
        lanes, k = int(mine.sum()), int(each[mine].sum())
        if k > pending:
            arrivals = f"{lanes} lane{'s' * (lanes != 1)}" + (f" ({k} arrivals)" if k != lanes else "")
            raise ExecFault("CUDA_ERROR_LAUNCH_FAILED",
                            f"warp {int(w) - c.w0} of block {c.label} arrived on {bar.name}"
                            f"{f' of block {owner.label}' if owner is not None and owner is not c else ''} with "
                            f"{arrivals} in one "
                            f"mbarrier.arrive, but its phase {bar.phase} awaited only {pending} more arrival"
                            f"{'s' * (pending != 1)}: the H100 counts a warp's lanes as one arrival of {k} and stops "
                            f"the kernel (a trap). Let one lane arrive (e.g. if (threadIdx.x % 128 == 0)), or "
                            f"initialise the barrier with the number of arrivals that come")
        pending -= k
        if pending == 0:
            pending = int(bar.expected)


def _is_addr(op: object) -> bool:
    from .parser import Addr

    return isinstance(op, Addr)


def _expect_tx(b: Binder) -> Any:
    mach = b.mach
    generic, cluster = _addr_mode(b)
    complete = b.q[0] == "complete_tx"
    addr = b.addr(b.ops[0])
    tx = b.val(b.ops[1], "u32")

    def expect(m: Any, c: CTA) -> None:
        n = count(m)
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (n,))
        x = np.broadcast_to(np.asarray(tx(m), np.uint32), (n,))
        for cta, off, sel in _resolve(mach, c, a, generic, cluster):
            bar = cta.barriers.get(off) or get_barrier(mach, cta, off)
            if mach.hz is not None and not complete and bar.initialized:
                mach.hz.expect(bar, int(x[sel].astype(np.int64).sum()))
            try:
                for v in x[sel].tolist():
                    bar.complete_tx(v) if complete else bar.expect_tx(v)
            except MBarrierError as e:
                raise _fault(e) from None
        mach.since_progress = 0

    expect.ctl = complete  # type: ignore[attr-defined]
    return expect


def _refuse_first(mach: Machine, bar: Any, threads: np.ndarray, d: Any, pc: int) -> np.ndarray:
    """Hazard mode: threads polling ``bar``'s current phase for the first time get false and go on (the adversarial
    answer of a potentially blocking wait); returns the threads that polled it before, which park."""
    phase = int(bar.phase)
    seen = getattr(bar, "hz_refused", None)
    if seen is None or seen[0] != phase:
        seen = (phase, set())
        bar.hz_refused = seen
    first = np.array([t not in seen[1] for t in threads.tolist()], bool)
    if first.any():
        refuse = threads[first]
        seen[1].update(refuse.tolist())
        d(refuse, np.zeros(len(refuse), bool))
        mach.PC[refuse] = pc + 1
    return threads[~first]


def _wait(b: Binder) -> Any:
    mach = b.mach
    generic, cluster = _addr_mode(b)
    parity_form = "parity" in b.q
    acquire = "relaxed" not in b.q  # test_wait / try_wait acquire by default
    d = b.dst(b.ops[0], "pred")
    addr = b.addr(b.ops[1])
    arg = b.val(b.ops[2], "u32" if parity_form else "b64")
    pc = b.pc

    @ctl
    def wait(m: Any, c: CTA) -> bool:
        idx = _indices(m)
        n = len(idx)
        a = np.broadcast_to(np.asarray(addr(m), np.uint64), (n,))
        v = np.broadcast_to(np.asarray(arg(m)), (n,))
        res = np.zeros(n, bool)
        waits = []
        for cta, off, sel in _resolve(mach, c, a, generic, cluster):
            bar = cta.barriers.get(off)
            if bar is None or not bar.initialized:
                label, index = barrier_label(mach, off)
                name = f"{label}[{index}]" if label and index >= 0 else (label or f"shared offset {off:#x}")
                raise ExecFault("CUDA_ERROR_LAUNCH_FAILED",
                                f"a wait on the mbarrier {name}, which was never initialized (mbarrier.init it first, "
                                "then fence and __syncthreads before anyone waits on it)")
            try:
                if parity_form:
                    for p in np.unique(v[sel]).tolist():
                        if p not in (0, 1):
                            raise ExecFault("CUDA_ERROR_ILLEGAL_INSTRUCTION",
                                            f"an mbarrier parity wait on {bar.name} with parity {p} (0 or 1)")
                        res[sel & (v == p)] = bar.test_wait(int(p))
                else:
                    ph = (v[sel].astype(np.uint64) & ~np.uint64(TOKEN)).astype(np.int64)
                    res[sel] = bar.phase > ph
            except MBarrierError as e:
                raise _fault(e) from None
            waits.append((bar, sel))
        for bar, sel in waits:  # the protocol record: which phase each warp got through on, naming which parity
            got = res & sel
            if got.any():
                for p in np.unique(v[got]).tolist() if parity_form else [-1]:
                    lanes = got & (v == p) if parity_form else got
                    log_of(mach).waited(c, np.asarray(mach.WARPG[idx[lanes]]) - c.w0, bar, int(p))
        if mach.hz is not None:
            for bar, sel in waits:
                if (res & sel).any():
                    mach.hz.waited(c, bar, idx[res & sel], acquire)
        if mach.opts.trace and res.any() and mach.open_waits:
            mach.wait_ended(c, mach.WARPG[idx[res]], "wait")
        if res.all():
            d(m, res)
            mach.PC[m] = pc + 1
            return True
        if mach.stall_mode:
            d(m, res)
            mach.PC[m] = pc + 1
            return True
        ok = idx[res]
        if len(ok):
            d(ok, np.ones(len(ok), bool))
            mach.PC[ok] = pc + 1
        for bar, sel in waits:
            rest = idx[sel & ~res]
            if len(rest) and mach.hz is not None:
                rest = _refuse_first(mach, bar, rest, d, pc)
            if len(rest):
                parity = int(v[sel & ~res][0]) if parity_form else int(bar.parity)
                cta = bar.cta
                mach.park(rest, c, bar, "mbar", pc, retry=True, parity=parity,
                          addr=cta.rank_bits | bar.offset, label=bar.label, index=bar.index, name=bar.name)
                if mach.opts.trace:
                    mach.wait_began(c, int(mach.WARPG[rest[0]]), "wait", bar.name, bar.phase)
                if mach.hz is not None:
                    mach.hz.parked(bar)  # the latest moment for the copies that complete on it
        return True

    return wait
