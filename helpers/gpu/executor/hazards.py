"""The hazard checker: what no GPU tool shows. With ``Options(hazards=True)`` the executor

* runs every asynchronous operation at the latest moment the PTX memory model allows: a TMA load (or bulk copy)
  lands only when a thread waits on its barrier and cannot go on otherwise, a wgmma reads shared memory and computes
  only at the ``wgmma.wait_group`` that covers it, a TMA store reads shared memory only at the
  ``cp.async.bulk.wait_group`` that covers it; until then the copy's destination holds poison (0xFF: NaN);
* decides every conflict by *happens-before*, not by the order this run happened to take: each warp of a cluster
  carries a vector clock whose components are the warps' epochs, each mbarrier's completed phases, each
  warpgroup's retired wgmmas and each warp's TMA stores known to have read their source; releases (mbarrier
  arrive, bar.sync / bar.arrive, cluster arrive) and acquires (a successful mbarrier wait, the end of a bar.sync,
  a cluster wait, wgmma / bulk wait_group) move knowledge between them. Shared memory keeps, per 16-byte chunk,
  the last asynchronous write (TMA), the wgmmas and TMA stores that read it, and the last generic read (per warp)
  and write, so a conflict is found whichever order the run took.

Hazards found (kind ids in :data:`KINDS`): shared memory read before the barrier phase that delivers it
completed; a stage overwritten (TMA or generic store) while a wgmma, a TMA store or another warp may still read it;
wgmma issued without ``wgmma.fence`` after ordinary instructions touched its accumulators; accumulators used while
their wgmma is in flight (no commit, or a wait_group that leaves its group pending); expect-tx different from the
bytes the copies deliver; generic writes read by wgmma or a TMA store without ``fence.proxy.async``; a flag another
block polls stored without release or loaded without acquire. Each report names both accesses (instruction, line of
the CUDA source, block, warp, thread, barrier and phase) in plain words.

Granularity: conflicts between threads of the same warp are not reported (a warp's lanes count as one thread of
the vector clocks), and shared memory is tracked in 16-byte chunks for asynchronous accesses (the width of the
128B swizzle's unit) and in 4-byte words for ordinary loads and stores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .numerics import count_nonzero as _count_nonzero

__all__ = ["HazardChecker", "Hazard", "HazardsFound", "KINDS"]

#: hazard kind id -> what it is, in the words of the report
KINDS = {
    "read-before-delivered": "shared memory read before the barrier phase that delivers it completed",
    "overwrite-while-read": "a stage overwritten while a wgmma, a TMA store or a reader may still read it",
    "missing-wgmma-fence": "wgmma issued without wgmma.fence after its accumulators were written",
    "wgmma-in-flight": "accumulators used while the wgmma that writes them is still in flight",
    "expect-tx": "expect-tx different from the bytes the copies deliver",
    "missing-proxy-fence": "generic writes read by wgmma or a TMA store without fence.proxy.async",
    "unsynchronised": "shared memory written and read by different warps with nothing ordering them",
    "flag-ordering": "a release or acquire missing on a flag another block polls",
    "store-before-exit": "a block exits while its TMA store may still read its shared memory",
    "exit-before-peers": "a block exits while another block of its cluster may still arrive on its barriers or "
                         "access its shared memory",
}

INF = np.int64(1) << 62
_PROXY_SHARED = ("fence.proxy.async", "fence.proxy.async.shared::cta", "fence.proxy.async.shared::cluster")
_STRONG = {"relaxed", "acquire", "release", "acq_rel", "volatile", "sc", "mmio"}


class HazardsFound(Exception):
    """Raised at the end of a run (or when the run cannot go on) when hazards were found."""

    def __init__(self, hazards: list[Hazard], then: str = "") -> None:
        self.hazards = hazards
        self.then = then
        super().__init__(report(hazards, then))


@dataclass
class Hazard:
    """One hazard: its kind id, the sentence, the source lines of both accesses, how often it happened."""

    kind: str
    sentence: str
    lines: tuple[int, ...] = ()
    key: tuple = ()
    count: int = 1

    def __str__(self) -> str:
        more = f" (seen {self.count} times)" if self.count > 1 else ""
        return f"hazard ({KINDS[self.kind]}): {self.sentence}{more}"


def short(text: str, width: int = 110) -> str:
    """An instruction's text for a sentence: long register lists shortened (``{%f1, %f2, …, %f64}``)."""
    import re

    def brace(mt: re.Match) -> str:
        items = [x.strip() for x in mt.group(1).split(",")]
        return "{" + (", ".join(items) if len(items) <= 4 else f"{items[0]}, {items[1]}, …, {items[-1]}") + "}"

    t = re.sub(r"\{([^{}]*)\}", brace, " ".join(text.split()))
    return t if len(t) <= width else t[:width - 1] + "…"


def report(hazards: list[Hazard], then: str = "") -> str:
    """The sentence of a run with hazards: the first one (the root cause) first."""
    if not hazards:
        return then
    head = str(hazards[0])
    rest = [f"  also: {h}" for h in hazards[1:6]]
    if len(hazards) > 6:
        rest.append(f"  … and {len(hazards) - 6} more")
    tail = [f"  then: {then}"] if then else []
    return "\n".join([head, *rest, *tail])


# ------------------------------------------------------------------------------------------- records
@dataclass(eq=False)
class _Copy:
    """An asynchronous write into shared memory (TMA load, multicast, bulk copy)."""

    id: int
    what: str
    pc: int
    cta: Any
    warp: int  # cluster warp index of the issuer
    thread: int
    targets: list  # [(cta, shared offset, barrier offset)]
    nbytes: int  # shared-memory footprint per target
    tx: int  # bytes the copy completes on each target's barrier
    land: Callable[[], None]
    vc: np.ndarray
    after_wait: str = ""  # the barrier the issuer waited on last (the producer's empty[s])
    phases: dict = field(default_factory=dict)  # target slot -> the barrier's phase when issued
    need: dict = field(default_factory=dict)  # target slot -> (component, value) once landed
    landed: bool = False
    bars: list = field(default_factory=list)  # the target barriers (MBarrier), when known at issue


@dataclass(eq=False)
class _Wgmma:
    id: int
    cta: Any
    g: int
    seq: int
    pc: int
    warp: int  # cluster warp index of the first warp that issued it
    committed: bool = False


@dataclass(eq=False)
class _Store:
    """A TMA store (or bulk store) reading shared memory asynchronously."""

    id: int
    pc: int
    cta: Any
    warp: int  # cluster warp index of the issuer
    thread: int
    seq: int  # 1-based, per issuing warp
    op: dict
    waited: bool = False


class _ClusterState:
    """Vector clocks of the warps of one cluster."""

    def __init__(self, hz: HazardChecker, cl: Any) -> None:
        m = hz.mach
        self.cl = cl
        self.W = m.W
        self.G = max(m.W // 4, 1)
        n = len(cl.ctas)
        self.nw = n * m.W
        self.wg0 = self.nw  # wgmma components: rank * G + g
        self.bulk0 = self.wg0 + n * self.G  # bulk-read components: cluster warp index
        self.next = self.bulk0 + self.nw  # barrier components from here
        self.vc = np.zeros((self.nw, self.next + 16), np.int64)
        self.vc[np.arange(self.nw), np.arange(self.nw)] = 1  # epochs start at 1: a fresh view knows none
        self.bulk_seq = np.zeros(self.nw, np.int64)
        self.stores: list[list[_Store]] = [[] for _ in range(self.nw)]
        self.cbar = np.zeros(0, np.int64)  # cluster barrier: arrivals of the phase in progress
        self.cbar_done = np.zeros(0, np.int64)

    def new_component(self) -> int:
        k = self.next
        self.next += 1
        if self.next > self.vc.shape[1]:
            self.vc = np.pad(self.vc, ((0, 0), (0, 32)))
        return k


def _join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) < len(b):
        a = np.pad(a, (0, len(b) - len(a)))
    elif len(b) < len(a):
        b = np.pad(b, (0, len(a) - len(b)))
    return np.maximum(a, b)


class _CtaState:
    """One block's shared memory: per 16-byte chunk, the asynchronous accesses (copies, wgmmas, TMA stores); per
    4-byte word, the ordinary ones (so two warps writing neighbouring words of one chunk do not conflict)."""

    def __init__(self, hz: HazardChecker, c: Any) -> None:
        m = hz.mach
        n = -(-m.smem_bytes // 16) + 1
        nw = 4 * n  # words: 4 per chunk
        G = max(m.W // 4, 1)
        self.aw = np.zeros(n, np.int32)  # last async write (copy id)
        self.ar_wg = np.zeros((n, G), np.int32)  # last wgmma (id) per warpgroup reading the chunk
        self.ar_st = np.zeros(n, np.int32)  # last TMA store (id) reading the chunk
        # per warp, per word: its last generic read, epoch << 32 | pc (epoch 0: none)
        self.gr = np.zeros((m.W, nw), np.int64)
        self.gw = np.full(nw, -1, np.int32)  # per word: warp (cluster index) of the last generic write
        self.gw_epoch = np.zeros(nw, np.int32)
        self.gw_pf = np.zeros(nw, np.int32)  # the writer's proxy-fence count at the write
        self.gw_pc = np.zeros(nw, np.int32)
        self.gw_atomic = np.zeros(nw, bool)  # the last generic write was an atomic
        self.any_async = False
        self.any_generic = False  # some word has a generic write (gw >= 0)
        self.remote: dict[int, tuple] = {}  # cluster warp of another block -> (epoch, pc, what, its block) of its
        # latest access to this block's shared memory or barriers


# ------------------------------------------------------------------------------------------- the checker
class HazardChecker:
    """Attached to a :class:`~helpers.gpu.executor.machine.Machine` as ``mach.hz`` when ``Options.hazards`` is set."""

    def __init__(self, mach: Any) -> None:
        self.mach = mach
        self.found: list[Hazard] = []
        self._keys: dict[tuple, Hazard] = {}
        self.pc = 0
        self.m: Any = slice(0, 1)
        self.copies: list[_Copy | None] = [None]
        self.wgmmas: list[_Wgmma | None] = [None]
        self.stores: list[_Store | None] = [None]
        self.pending: list[_Copy] = []  # copies not landed yet, in issue order
        self.unwritten: list[dict] = []  # stores (TMA, bulk) not yet written to global memory, in issue order
        self.atomic = False  # the current shared-memory access is an atomic's (atomics do not race each other)
        self.proxy_fences = np.zeros(mach.S * mach.W, np.int64)  # per machine warp
        nthreads = mach.N
        self.gpu_fence = np.zeros(nthreads, np.int64)  # per thread: gpu-scope fences so far
        self.sync_seq = np.zeros(nthreads, np.int64)  # per thread: the fence count at its last barrier
        self.pending_acquire: dict[int, tuple] = {}  # thread -> (pc, addr, writer) of a relaxed flag load
        self.serial = 0
        self.cta_serial: dict[int, tuple] = {}  # serial -> block label
        self.gshadow: dict[int, np.ndarray] = {}  # allocation base -> per 4-byte word: who wrote it last
        self.desc_cache: dict[tuple[int, int], np.ndarray] = {}
        self._sem: dict[int, tuple[str, str]] = {}
        self._where_text: dict[int, str] = {}  # pc -> where the instruction is, in words
        self._wgmma_acc: dict[int, np.ndarray] = {}  # pc of a wgmma -> the accumulator indices of its registers
        self._known: set[tuple[int, int, int]] = set()  # (warp, copy, block slot) known to have landed
        self._committed: dict = {}  # (block slot, warpgroup, warp) -> wgmmas marked committed so far
        self.last_arrive: dict[int, tuple] = {}  # machine warp -> (pc, barrier name, block) of its last arrival
        self.last_wait: dict[int, tuple] = {}  # machine warp -> (pc, barrier name, phase) of its last wait
        self.last_wgwait: dict[int, tuple] = {}  # machine warp -> (pc, N) of its last wgmma.wait_group
        self.releases: dict[int, dict[int, tuple]] = {}  # machine warp -> {epoch it ended: (pc, what)}
        self._acc_rows(mach)

    # ------------------------------------------------------------------ setup
    def _acc_rows(self, mach: Any) -> None:
        """The 32-bit registers any wgmma uses as accumulators, and per instruction the ones it touches."""
        from .parser import Vec

        prog = mach.prog
        rows: dict[int, int] = {}
        for pc, ins in enumerate(prog.instrs):
            if ins.opcode.startswith("wgmma.mma_async") and ins.operands and isinstance(ins.operands[0], Vec):
                for r in ins.operands[0].items:
                    reg = prog.regs.get((prog.func_at[pc], getattr(r, "name", "")))
                    if reg is not None and reg[0] == "W":
                        rows.setdefault(reg[1], len(rows))
        self.acc_index = rows
        self.dirty = np.ones((mach.S * mach.W, max(len(rows), 1)), bool)  # no wgmma.fence yet: all dirty
        self.fences = np.zeros(mach.S * mach.W, np.int64)  # wgmma.fence executed, per machine warp
        self.dirty_pc: dict[int, int] = {}  # machine warp -> the last ordinary instruction touching accumulators

    def wrap(self, pc: int, ins: Any, op: Callable) -> Callable:
        """The op of instruction ``pc`` as hazard mode runs it: the checker learns the pc and the threads, and
        an instruction that touches wgmma accumulators is checked first."""
        base = ins.opcode.split(".")[0]
        touched = []
        if self.acc_index and not ins.opcode.startswith("wgmma"):
            touched = sorted({self.acc_index[r] for r in self._reg_rows(pc, ins) if r in self.acc_index})
        hooked = base in ("ld", "ldu", "st", "atom", "red", "ldmatrix", "stmatrix", "cp", "wgmma", "mbarrier",
                          "bar", "barrier", "fence", "membar", "exit", "ret")
        if not touched and (not hooked or getattr(op, "hz_self", False)):  # hz_self: the op tells the checker itself
            return op
        hz = self
        acc = np.array(touched, np.int64)
        mine = set(touched)
        rows = frozenset(r for r, i in self.acc_index.items() if i in mine)

        if touched:
            def wrapped(m: Any, c: Any, *rest: Any) -> Any:
                hz.pc, hz.m = pc, m
                hz.touch_accumulators(m, c, acc, rows)
                return op(m, c, *rest)
        else:
            def wrapped(m: Any, c: Any, *rest: Any) -> Any:
                hz.pc, hz.m = pc, m
                return op(m, c, *rest)

        for attr in ("ctl", "guard_aware", "unsupported"):
            if hasattr(op, attr):
                setattr(wrapped, attr, getattr(op, attr))
        return wrapped

    def _reg_rows(self, pc: int, ins: Any) -> list[int]:
        from .parser import Addr, Neg, Pair, Paren, Reg, Vec

        prog = self.mach.prog
        func = prog.func_at[pc]
        out = []

        def walk(x: Any) -> None:
            if isinstance(x, Reg):
                r = prog.regs.get((func, x.name))
                if r is not None and r[0] == "W":
                    out.append(r[1])
            elif isinstance(x, Vec | Paren):
                for y in x.items:
                    walk(y)
            elif isinstance(x, Addr):
                walk(x.base)
            elif isinstance(x, Neg):
                walk(x.reg)
            elif isinstance(x, Pair):
                walk(x.first)
                walk(x.second)

        for o in ins.operands:
            walk(o)
        return out

    def start_cluster(self, cl: Any) -> None:
        cl.hz = _ClusterState(self, cl)
        for c in cl.ctas:
            self.serial += 1
            c.hz_serial = self.serial
            self.cta_serial[self.serial] = c.label
            c.hz = _CtaState(self, c)
        for c in cl.ctas:
            warps = range(c.w0, c.w0 + self.mach.W)
            self.dirty[c.w0:c.w0 + self.mach.W] = True
            self.fences[c.w0:c.w0 + self.mach.W] = 0
            self.proxy_fences[c.w0:c.w0 + self.mach.W] = 0
            for memory in (self.last_arrive, self.last_wait, self.last_wgwait, self.releases, self.dirty_pc):
                for g in warps:
                    memory.pop(g, None)
        lo, hi = cl.ctas[0].lo, cl.ctas[-1].hi
        self.gpu_fence[lo:hi] = 0
        self.sync_seq[lo:hi] = 0

    # ------------------------------------------------------------------ who
    def _first(self, m: Any) -> int:
        return m.start if isinstance(m, slice) else int(np.asarray(m)[0])

    def actor(self, c: Any, m: Any = None) -> tuple[int, int]:
        """(cluster warp index, machine warp index) of the threads ``m`` (default: the current instruction's)."""
        g = int(self.mach.WARPG[self._first(self.m if m is None else m)])
        return c.rank * self.mach.W + (g - c.w0), g

    def where(self, pc: int, c: Any, warp: int | None = None, thread: int | None = None) -> str:
        """'at line 12 of the CUDA source (PTX line 80: `ld.shared.u16 %r3, [%r2];`), block (0,0) warp 1, thread
        32'."""
        who = f"block {c.label}"
        if warp is not None:
            who += f" warp {warp}"
        if thread is not None:
            who += f", thread {thread}"
        return f"{self._where_pc(pc)}, {who}"

    def _where_pc(self, pc: int) -> str:
        got = self._where_text.get(pc)
        if got is None:
            ins = self.mach.prog.instrs[pc]
            if ins.cell_line:
                got = f"at line {ins.cell_line} of the CUDA source (PTX line {ins.line}: `{short(ins.text)}`)"
            else:
                got = f"at PTX line {ins.line} (`{short(ins.text)}`)"
            self._where_text[pc] = got
        return got

    def _thread(self, m: Any = None) -> int:
        return int(self.mach.TLIN[self._first(self.m if m is None else m)])

    def _line(self, pc: int) -> int:
        return self.mach.prog.instrs[pc].cell_line

    def add(self, kind: str, sentence: str, pcs: tuple[int, ...]) -> None:
        """Record a hazard (the same kind at the same pair of instructions is counted, not repeated)."""
        ins = self.mach.prog.instrs
        key = (kind, *(ins[p].cell_line or -ins[p].line for p in pcs))  # unrolled copies of a line count as one
        h = self._keys.get(key)
        if h is not None:
            h.count += 1
            return
        h = Hazard(kind, sentence, tuple(self._line(p) for p in pcs), key)
        self._keys[key] = h
        if len(self.found) < 64:
            self.found.append(h)

    # ------------------------------------------------------------------ vector clocks
    def release(self, c: Any, w: int, what: str = "") -> np.ndarray:
        """Warp ``w`` (cluster index) releases (``what``: e.g. 'arrived on empty[0]'): a copy of its clock, then
        its epoch moves on."""
        cs = c.cluster.hz
        snap = cs.vc[w].copy()
        epoch = int(cs.vc[w, w])
        cs.vc[w, w] += 1
        g = c.cluster.ctas[w // self.mach.W].w0 + w % self.mach.W
        hist = self.releases.setdefault(g, {})
        hist[epoch] = (self.pc, what)
        if len(hist) > 64:
            del hist[min(hist)]
        return snap

    def acquire(self, c: Any, w: int, knowledge: np.ndarray) -> None:
        cs = c.cluster.hz
        if len(knowledge) > cs.vc.shape[1]:
            cs.vc = np.pad(cs.vc, ((0, 0), (0, len(knowledge) - cs.vc.shape[1])))
        cs.vc[w, :len(knowledge)] = np.maximum(cs.vc[w, :len(knowledge)], knowledge)

    # ------------------------------------------------------------------ mbarriers
    def bar_comp(self, bar: Any) -> int:
        k = getattr(bar, "hz_comp", None)
        if k is None:
            k = bar.cta.cluster.hz.new_component()
            bar.hz_comp = k
            bar.hz_pend = np.zeros(0, np.int64)
            bar.hz_done = np.zeros(0, np.int64)
            bar.hz_from: dict = {}  # (block, warpgroup) -> its last wgmma.wait_group when it arrived
            bar.hz_expect = 0
            bar.hz_copies: list[_Copy] = []
            bar.hz_last_from: dict = {}
        return k

    def arrive(self, c: Any, bar: Any, m: Any, release: bool = True) -> None:
        """Threads ``m`` of ``c`` arrive on ``bar`` (maybe a barrier of another block of the cluster)."""
        self.bar_comp(bar)
        w, g = self.actor(c, m)
        if bar.cta is not c:
            self.remote_access(c, bar.cta, w, g, f"arrival on {bar.name}", m)
        self._flag_sync_point(m)
        if release:
            bar.hz_pend = _join(bar.hz_pend, self.release(c, w, bar.name))
        bar.hz_from[(c.label, (g - c.w0) // 4)] = self.last_wgwait.get(g)
        self.last_arrive[g] = (self.pc, bar.name, c.label)

    def expect(self, bar: Any, nbytes: int) -> None:
        self.bar_comp(bar)
        bar.hz_expect += int(nbytes)

    def phase_completed(self, bar: Any, phase: int) -> None:
        k = self.bar_comp(bar)
        done = _join(bar.hz_pend, bar.hz_done)
        if len(done) <= k:
            done = np.pad(done, (0, k + 1 - len(done)))
        done[k] = phase + 1
        bar.hz_done = done
        bar.hz_pend = np.zeros(0, np.int64)
        copies = [x for x in bar.hz_copies if x.phases.get(bar.cta.slot) == phase]
        bar.hz_copies = [x for x in bar.hz_copies if x.phases.get(bar.cta.slot) != phase]
        late = [x for x in copies if not x.landed]
        issued = sum(x.tx for x in copies)
        if late:
            x = late[0]
            self.add("expect-tx", f"{bar.name} of block {bar.cta.label} completed phase {phase} with "
                     f"{bar.hz_expect} bytes announced by expect-tx, but its copies bring {issued} bytes: the "
                     f"{x.what} {self.where(x.pc, x.cta, x.warp % self.mach.W, x.thread)} was still in flight "
                     "when the waiters went on, so they read its bytes before they land. Announce the copies' "
                     "full size (every box of the stage) with arrive.expect_tx.", (x.pc,))
        bar.hz_expect = 0
        bar.hz_last_from = bar.hz_from
        bar.hz_from = {}

    def waited(self, c: Any, bar: Any, m: Any, acquire: bool = True) -> None:
        """Threads ``m`` of ``c`` saw ``bar``'s phase complete (a successful test_wait / try_wait)."""
        self.bar_comp(bar)
        w, g = self.actor(c, m)
        if acquire:
            self.acquire(c, w, bar.hz_done)
        self.last_wait[g] = (self.pc, bar.name, bar.phase - 1, bar)
        self.sync_seq[np.asarray(m) if not isinstance(m, slice) else m] = \
            self.gpu_fence[np.asarray(m) if not isinstance(m, slice) else m]

    def parked(self, bar: Any) -> None:
        """A thread waits on ``bar`` and cannot go on: land the copies that complete on it, oldest first, until
        its phase completes."""
        phase = bar.phase
        for x in list(self.pending):
            if bar.phase != phase:
                break
            if any(cta is bar.cta and boff == bar.offset for cta, _, boff in x.targets):
                self.land(x)

    # ------------------------------------------------------------------ named and cluster barriers
    def named_arrive(self, c: Any, bar: dict, m: Any, wait: bool) -> None:
        w, _ = self.actor(c, m)
        self._flag_sync_point(m)
        bar["hz_vc"] = _join(bar.get("hz_vc", np.zeros(0, np.int64)), self.release(c, w, "a named barrier"))
        if wait:
            bar.setdefault("hz_waiters", []).append((w, m))

    def named_done(self, c: Any, bar: dict) -> None:
        vc = bar.get("hz_vc", np.zeros(0, np.int64))
        for w, m in bar.get("hz_waiters", []):
            self.acquire(c, w, vc)
            idx = np.asarray(m) if not isinstance(m, slice) else m
            self.sync_seq[idx] = self.gpu_fence[idx]

    def cluster_arrive(self, c: Any, m: Any, release: bool) -> None:
        cs = c.cluster.hz
        w, _ = self.actor(c, m)
        if release:
            cs.cbar = _join(cs.cbar, self.release(c, w, "the cluster barrier"))

    def cluster_done(self, cl: Any) -> None:
        cs = cl.hz
        cs.cbar_done = _join(cs.cbar_done, cs.cbar)
        cs.cbar = np.zeros(0, np.int64)

    def cluster_waited(self, c: Any, m: Any, acquire: bool) -> None:
        if acquire:
            w, _ = self.actor(c, m)
            self.acquire(c, w, c.cluster.hz.cbar_done)

    # ------------------------------------------------------------------ fences
    def fence(self, c: Any, m: Any, opcode: str) -> None:
        q = opcode.split(".")
        _, g = self.actor(c, m)
        if opcode.startswith("fence.proxy.async") and (opcode in _PROXY_SHARED or "shared::cta" in q
                                                       or "async::generic" in q):
            self.proxy_fences[g] += 1
        if opcode.startswith("membar") and ("gl" in q or "sys" in q) or \
                opcode.startswith("fence") and ("gpu" in q or "sys" in q) and ("sc" in q or "acq_rel" in q):
            idx = np.atleast_1d(np.asarray(m) if not isinstance(m, slice) else np.arange(m.start, m.stop))
            self.gpu_fence[idx] += 1
            for t in idx.tolist():
                self.pending_acquire.pop(int(t), None)

    def wgmma_fence(self, c: Any, m: Any) -> None:
        _, g = self.actor(c, m)
        self.dirty[g] = False
        self.fences[g] += 1

    # ------------------------------------------------------------------ accumulators
    def touch_accumulators(self, m: Any, c: Any, acc: np.ndarray, rows: frozenset) -> None:
        """An ordinary instruction reads or writes wgmma accumulator registers (indices ``acc``, register rows
        ``rows``)."""
        _, g = self.actor(c, m)
        lw = g - c.w0
        st = c.wg.get(lw // 4)
        if st is not None:
            w4 = lw % 4
            for op in st.ops[st.written[w4]:st.issued[w4]]:
                if not rows.isdisjoint(op.rows.tolist()):
                    rec = self.wgmmas[op.hz_id]
                    why = ("it was never committed (no wgmma.commit_group after it), so no wait_group waits for it"
                           if not rec.committed else
                           f"its group was committed but the last wgmma.wait_group of warp {lw} leaves it pending")
                    self.add("wgmma-in-flight", f"{self.where(self.pc, c, lw, self._thread(m))} uses accumulator "
                             f"registers that the wgmma {self.where(op.pc, c)} is still computing: {why}. Wait with "
                             "wgmma.wait_group 0 (after a commit) before touching the accumulators.",
                             (self.pc, op.pc))
                    break
        self.dirty[g, acc] = True
        self.dirty_pc[g] = self.pc

    # ------------------------------------------------------------------ shared memory: generic accesses
    @staticmethod
    def _units(off: np.ndarray, width: int, shift: int) -> np.ndarray:
        """The units of ``1 << shift`` bytes an access of ``width`` bytes at each offset touches (a unit-aligned
        access no wider than a unit touches one)."""
        first = off >> shift
        if width <= 1 << shift:
            return first
        last = (off + width - 1) >> shift
        return np.unique(np.concatenate([np.arange(a, b + 1) for a, b in zip(first.tolist(), last.tolist(),
                                                                           strict=True)]))

    def _chunks(self, off: np.ndarray, width: int) -> np.ndarray:
        """The 16-byte chunks (the asynchronous accesses' unit) an access touches."""
        return self._units(off, width, 4)

    def _smem_words(self, off: np.ndarray, width: int) -> np.ndarray:
        """The 4-byte words (the ordinary accesses' unit) an access touches."""
        return self._units(off, width, 2)

    @staticmethod
    def _chunk_words(ch: np.ndarray) -> np.ndarray:
        """The words of 16-byte chunks ``ch``."""
        return (np.asarray(ch)[:, None] * 4 + np.arange(4)).ravel()

    def _copy_known(self, c: Any, w: int, ids: np.ndarray, target: Any) -> np.ndarray:
        """For each copy id: does warp ``w`` (cluster index) know it landed in ``target``'s shared memory?"""
        first = int(ids[0])
        if not _count_nonzero(ids != first):  # the usual case: one copy wrote all the bytes read
            return np.full(len(ids), self._copy_known1(c, w, first, target))
        seen = np.bincount(ids)  # copy ids are small integers: a table of the few distinct ones
        known = np.zeros(len(seen), bool)
        for cid in np.flatnonzero(seen).tolist():
            known[cid] = self._copy_known1(c, w, cid, target)
        return known[ids]

    def _unknown_copy(self, c: Any, w: int, target: Any, ch: np.ndarray) -> tuple[int, _Copy] | None:
        """(chunk, copy) of the first copy into chunks ``ch`` of ``target`` that warp ``w`` does not know landed."""
        if not target.hz.any_async:
            return None
        aw = target.hz.aw[ch]
        hit = np.flatnonzero(aw)
        if not hit.size:
            return None
        ids = aw[hit]
        ok = self._copy_known(c, w, ids, target)
        if ok.all():
            return None
        return int(ch[hit[~ok][0]]), self.copies[int(ids[~ok][0])]

    def _copy_known1(self, c: Any, w: int, cid: int, target: Any) -> bool:
        key = (w, cid, target.slot)
        if key in self._known:  # knowledge only grows
            return True
        x = self.copies[cid]
        cs = c.cluster.hz
        nd = x.need.get(target.slot) if x is not None and x.landed else None
        ok = nd is not None and nd[0] < cs.vc.shape[1] and bool(cs.vc[w, nd[0]] >= nd[1])
        if ok:
            self._known.add(key)
        return ok

    def smem_read(self, c: Any, target: Any, off: np.ndarray, width: int) -> None:
        """Generic read by the current instruction of ``c`` of shared memory of block ``target``."""
        ts = target.hz
        w, g = self.actor(c)
        if target is not c:
            self.remote_access(c, target, w, g, "load from its shared memory")
        ch = self._chunks(np.atleast_1d(off), width)
        late = self._unknown_copy(c, w, target, ch)
        if late is not None:
            self._read_before_delivered(c, w, g, target, *late)
        wd = self._smem_words(np.atleast_1d(off), width)
        gw = ts.gw[wd]
        other = (gw >= 0) & (gw != w)
        if self.atomic:  # an atomic's read is part of its read-modify-write: it races plain writes only
            other &= ~ts.gw_atomic[wd]
        if other.any():
            k = np.flatnonzero(other)
            writers = gw[k]
            known = c.cluster.hz.vc[w, writers] >= ts.gw_epoch[wd[k]]
            if not known.all():
                j = int(wd[k[~known][0]])
                self.add("unsynchronised", f"the load {self.where(self.pc, c, g - c.w0, self._thread())} reads "
                         f"{self._region(target, 0, lo=4 * j)}, which the store {self._wrote(target, j)} wrote, "
                         "and nothing orders that write before the read (a barrier both warps take part in, or an "
                         "mbarrier the writer arrives on and the reader waits for).", (self.pc, int(ts.gw_pc[j])))
        lw = w - target.rank * self.mach.W if target is c else None
        col = (w % self.mach.W) if lw is None else lw
        if target is c and not self.atomic:
            ts.gr[col].put(wd, int(c.cluster.hz.vc[w, w]) << 32 | self.pc)

    def smem_read_own(self, c: Any, off: np.ndarray, width: int) -> None:
        """:meth:`smem_read` of a plain load (not an atomic) of at most 4 bytes from the block's own shared memory,
        at aligned offsets ``off``: the usual case (every byte delivered by one copy the warp knows landed, or by no
        copy; no other warp's write unordered) costs a few array operations; anything else takes
        :meth:`smem_read`, which finds and words the hazard."""
        ts = c.hz
        if self.atomic or width > 4:
            self.smem_read(c, c, off.astype(np.int64), width)
            return
        m = self.m
        g = int(self.mach.WARPG[m.start if m.__class__ is slice else m[0]])
        lw = g - c.w0
        w = c.rank * self.mach.W + lw
        nz = _count_nonzero
        if ts.any_async:
            ids = ts.aw.take(off >> 4)
            first = int(ids[0])
            if nz(ids != first) or first and (w, first, c.slot) not in self._known \
                    and not self._copy_known1(c, w, first, c):
                self.smem_read(c, c, off.astype(np.int64), width)
                return
        wd = off >> 2
        if ts.any_generic:
            gw = ts.gw.take(wd)
            if nz((gw != w) & (gw >= 0)):
                self.smem_read(c, c, off.astype(np.int64), width)
                return
        ts.gr[lw].put(wd, int(c.cluster.hz.vc[w, w]) << 32 | self.pc)

    def smem_write_own(self, c: Any, off: np.ndarray, width: int) -> None:
        """:meth:`smem_write` of a plain store (not an atomic) of at most 4 bytes into the block's own shared
        memory, at aligned offsets ``off``: where no copy, wgmma or other warp's access could conflict (or the one
        copy and the one TMA store there are known to be done), the records are written after a few array
        operations; anything else takes :meth:`smem_write`, which finds and words the hazard."""
        ts = c.hz
        if self.atomic or width > 4:
            self.smem_write(c, c, off.astype(np.int64), width)
            return
        nz = _count_nonzero
        m = self.m
        g = int(self.mach.WARPG[m.start if m.__class__ is slice else m[0]])
        lw = g - c.w0
        w = c.rank * self.mach.W + lw
        cs = c.cluster.hz
        ch = off >> 4
        wd = off >> 2
        if ts.any_async:
            ids = ts.aw.take(ch)
            first = int(ids[0])
            if nz(ids != first) or first and (w, first, c.slot) not in self._known \
                    and not self._copy_known1(c, w, first, c):
                self.smem_write(c, c, off.astype(np.int64), width)
                return
            sids = ts.ar_st.take(ch)
            first = int(sids[0])
            if nz(ts.ar_wg.take(ch, axis=0)) or nz(sids != first) or first and \
                    cs.vc[w, cs.bulk0 + self.stores[first].warp] < self.stores[first].seq:
                self.smem_write(c, c, off.astype(np.int64), width)
                return
        gr = ts.gr.take(wd, axis=1)
        if nz(gr) and nz(gr) != nz(gr[lw]):  # another warp of this block read the words
            self.smem_write(c, c, off.astype(np.int64), width)
            return
        if ts.any_generic:
            gw = ts.gw.take(wd)
            if nz((gw != w) & (gw >= 0)):
                self.smem_write(c, c, off.astype(np.int64), width)
                return
        ts.gw.put(wd, w)
        ts.gw_epoch.put(wd, cs.vc[w, w])
        ts.gw_pf.put(wd, self.proxy_fences[g])
        ts.gw_pc.put(wd, self.pc)
        ts.gw_atomic.put(wd, False)
        ts.any_generic = True
        if ts.any_async:
            ts.aw.put(ch, 0)

    def smem_write(self, c: Any, target: Any, off: np.ndarray, width: int) -> None:
        """Generic write by the current instruction of ``c`` into shared memory of block ``target``."""
        ts = target.hz
        cs = c.cluster.hz
        w, g = self.actor(c)
        if target is not c:
            self.remote_access(c, target, w, g, "store into its shared memory")
        ch = self._chunks(np.atleast_1d(off), width)
        here = f"the store {self.where(self.pc, c, g - c.w0, self._thread())}"
        late = self._unknown_copy(c, w, target, ch)
        if late is not None:
            j, x = late
            self.add("overwrite-while-read", f"{here} writes {self._region(target, j)} while the {x.what} "
                     f"{self.where(x.pc, x.cta, x.warp % self.mach.W, x.thread)} may still be writing it (nobody has "
                     "waited for the barrier phase it completes): the two writes race.", (self.pc, x.pc))
        if ts.any_async:
            self._check_async_readers(c, w, target, ch, here)
        wd = self._smem_words(np.atleast_1d(off), width)
        self._check_generic_readers(c, w, target, wd, here)
        ts.gw[wd] = w
        ts.any_generic = True
        ts.gw_epoch[wd] = cs.vc[w, w]
        ts.gw_pf[wd] = self.proxy_fences[g]
        ts.gw_pc[wd] = self.pc
        ts.gw_atomic[wd] = self.atomic
        ts.aw[ch] = 0

    def _check_async_readers(self, c: Any, w: int, target: Any, ch: np.ndarray, here: str,
                             region: str | None = None, extra: str = "") -> bool:
        """Wgmmas and TMA stores that may still read chunks ``ch`` of ``target`` when warp ``w`` writes them."""
        ts = target.hz
        cs = c.cluster.hz
        bad = False
        ids = ts.ar_wg[ch]
        if ids.any():
            for g in range(ids.shape[1]):
                col = ids[:, g]
                nz = np.flatnonzero(col)
                if not nz.size:
                    continue
                last = int(col[nz].max())
                rec = self.wgmmas[last]
                comp = cs.wg0 + rec.cta.rank * cs.G + rec.g
                if cs.vc[w, comp] < rec.seq + 1:
                    j = int(ch[nz[np.argmax(col[nz])]])
                    self.add("overwrite-while-read", f"{here} overwrites {region or self._region(target, j)} while "
                             f"the wgmma {self.where(rec.pc, rec.cta)} (warpgroup {rec.g}) may still read it: "
                             f"{self._behind(c, w, rec) or self._wgmma_status(rec, self._last_barrier(c, w))}."
                             f"{extra}", (self.pc, rec.pc))
                    bad = True
        sids = ts.ar_st[ch]
        if sids.any():
            nz = np.flatnonzero(sids)
            last = int(sids[nz].max())
            rec = self.stores[last]
            if cs.vc[w, cs.bulk0 + rec.warp] < rec.seq:
                j = int(ch[nz[np.argmax(sids[nz])]])
                self.add("overwrite-while-read", f"{here} overwrites {region or self._region(target, j)} while the "
                         f"TMA store {self.where(rec.pc, rec.cta, rec.warp % self.mach.W, rec.thread)} may still "
                         "read it: no cp.async.bulk.wait_group.read covering that store comes before this write "
                         "(the issuing thread waits until at most N stores still read, N being the stores issued "
                         "since this buffer's, then a barrier lets the writers go on).", (self.pc, rec.pc))
                bad = True
        return bad

    def _check_generic_readers(self, c: Any, w: int, target: Any, ch: np.ndarray, here: str,
                               region: str | None = None) -> None:
        """Ordinary reads and writes by other warps of words ``ch`` of ``target`` not ordered before warp ``w``'s
        write of them."""
        ts = target.hz
        cs = c.cluster.hz
        W = self.mach.W
        gr = (ts.gr[:, ch] >> 32).T  # (k, W) epochs of the readers of target's warps
        if gr.any():
            base = target.rank * W
            mine = w - base if 0 <= w - base < W else -1
            readers = np.arange(W)
            known = cs.vc[w, base + readers][None, :] >= gr
            known |= gr == 0
            if mine >= 0:
                known[:, mine] = True
            if not known.all():
                i, r = (int(x[0]) for x in np.nonzero(~known))
                j = int(ch[i])
                rpc = int(ts.gr[r, j]) & 0xFFFFFFFF
                why = self._released_before(target, r, int(gr[i, r]), self._waited_before(c, w))
                where = region or self._region(target, 0, lo=4 * j)
                self.add("overwrite-while-read", f"{here} overwrites {where}, which the load "
                         f"{self.where(rpc, target, r)} read, and nothing orders that read before this write{why}.",
                         (self.pc, rpc))
        gw = ts.gw[ch]
        other = (gw >= 0) & (gw != w)
        if self.atomic:  # two atomics on one word do not race
            other &= ~ts.gw_atomic[ch]
        if other.any():
            k = np.flatnonzero(other)
            known = cs.vc[w, gw[k]] >= ts.gw_epoch[ch[k]]
            if not known.all():
                j = int(ch[k[~known][0]])
                self.add("unsynchronised", f"{here} overwrites {region or self._region(target, 0, lo=4 * j)}, which "
                         f"the store {self._wrote(target, j)} wrote, and nothing orders the two writes.",
                         (self.pc, int(ts.gw_pc[j])))

    def _machine_warps(self, c: Any, warps: np.ndarray) -> np.ndarray:
        """Machine warp indices of cluster warp indices of ``c``'s cluster."""
        W = self.mach.W
        return np.array([c.cluster.ctas[x // W].w0 + x % W for x in np.asarray(warps).tolist()], np.int64)

    def _wrote(self, target: Any, word: int) -> str:
        """Where the last generic write of a word happened (instruction, block, warp)."""
        ts = target.hz
        w = int(ts.gw[word])
        return self.where(int(ts.gw_pc[word]), target.cluster.ctas[w // self.mach.W], w % self.mach.W)

    def _waited_before(self, c: Any, w: int) -> str | None:
        """The barrier warp ``w`` (cluster index) of ``c``'s cluster last waited on (the producer's empty[s])."""
        g = c.cluster.ctas[w // self.mach.W].w0 + w % self.mach.W
        last = self.last_wait.get(g)
        return last[1] if last else None

    def _released_before(self, target: Any, warp: int, epoch: int, released_on: str | None) -> str:
        """', but that warp had released the stage on empty[0] at line …' when the read came right after an arrival
        on the barrier the writer waited for (a stage released before it is read)."""
        rel = self.releases.get(target.w0 + warp, {}).get(epoch - 1)
        if rel is None or not released_on or rel[1] != released_on:
            return ""
        return (f": that warp arrived on {rel[1]} {self._where_pc(rel[0])} before this read, which let the "
                "producer refill the stage under it (release a stage only after reading it)")

    def _read_before_delivered(self, c: Any, w: int, g: int, target: Any, chunk: int, x: _Copy,
                               what: str = "") -> None:
        bar = x.bars[0] if x.bars else None
        bname = bar.name if bar is not None else "its barrier"
        phase = x.phases.get(target.slot, -1)
        last = self.last_wait.get(g)
        seen = f" (warp {g - c.w0} last waited for {last[1]} phase {last[2]})" if last else ""
        if last and last[2] < 0:  # the wait passed on the parity of the phase before the barrier's first
            seen = (f" (warp {g - c.w0} last waited on {last[1]} with the parity of the phase before its first: "
                    "on a barrier none of whose phases has completed that wait returns at once, so the warp waited "
                    "for nothing; the first wait on a barrier uses parity 0)")
        rel = self.last_arrive.get(g)
        early = ""
        if rel is not None and x.after_wait and rel[1] == x.after_wait and (last is None or rel[0] != last[0]):
            early = (f"; after that wait the warp arrived on {rel[1]} {self._where_pc(rel[0])}, which let the "
                     "producer refill the stage before it read it (release a stage only after reading it)")
        reader = what or self.where(self.pc, c, g - c.w0, self._thread())
        self.add("read-before-delivered", f"{reader} reads {self._region(target, chunk)}, which the {x.what} "
                 f"{self.where(x.pc, x.cta, x.warp % self.mach.W, x.thread)} delivers on {bname} phase {phase}, "
                 f"before that phase completed{seen}{early}.", (self.pc, x.pc))

    def _region(self, target: Any, chunk: int, end: int | None = None, lo: int | None = None) -> str:
        """'sA byte 2048 (shared offset 0xc00)' for a chunk (or the byte offset ``lo``), or with ``end`` (a byte
        offset) the range of a copy."""
        lo = chunk * 16 if lo is None else lo
        hi = end if end is not None else None
        hit = self.mach.prog.shared_name(lo)
        if hit is not None:
            from .barriers import demangle

            name, inner = hit
            var = demangle(name)
            what = f"{var} byte {inner}" if hi is None else f"{var} bytes {inner}–{inner + hi - lo - 1}"
        elif lo >= self.mach.dyn_base:
            d = lo - self.mach.dyn_base
            what = f"dynamic shared memory byte {d}" if hi is None else \
                f"dynamic shared memory bytes {d}–{d + hi - lo - 1}"
        else:
            what = "shared memory"
        where = f"shared offset {lo:#x}" if hi is None else f"shared offsets {lo:#x}–{hi - 1:#x}"
        block = "" if target is self.mach.cur else f" of block {target.label}"
        return f"{what} ({where}){block}"

    def _behind(self, c: Any, w: int, rec: _Wgmma) -> str:
        """When the writer is a warp of the wgmma's own warpgroup that has not issued it yet: the others issued it
        while this warp was still writing the tile (a barrier is missing between the stores and the wgmma)."""
        W = self.mach.W
        if rec.cta is not c.cluster.ctas[w // W] or (w % W) // 4 != rec.g:
            return ""
        st = rec.cta.wg.get(rec.g)
        if st is None or st.issued[(w % W) % 4] > rec.seq:
            return ""
        return ("this warp has not reached that wgmma yet: other warps of its warpgroup issued it while this one "
                "was still writing the tile. A barrier between the stores and the wgmma (after each writer's "
                "fence.proxy.async) orders them")

    def _last_barrier(self, c: Any, w: int) -> Any:
        """The mbarrier warp ``w`` (cluster index) last waited on, or None."""
        last = self.last_wait.get(c.cluster.ctas[w // self.mach.W].w0 + w % self.mach.W)
        return last[3] if last else None

    def _wgmma_status(self, rec: _Wgmma, released_on: Any = None) -> str:
        """Why a wgmma may still be reading: never committed, released before a wait retired it (``released_on``:
        the barrier the writer waited on), or never released to the writer at all."""
        if not rec.committed:
            return ("it was never committed (no wgmma.commit_group after it), so no wgmma.wait_group waits for it: "
                    "commit each K step's wgmmas as a group")
        c = rec.cta
        fix = ("release a stage only once the group that reads it has retired (wait_group 0 before the release, or "
               "release the previous stage after wait_group 1)")
        if released_on is not None:
            key = (c.label, rec.g)
            if key not in released_on.hz_last_from:
                return (f"no warp of its warpgroup (block {c.label}) arrived on {released_on.name} of block "
                        f"{released_on.cta.label}, the barrier the writer waited on")
            last = released_on.hz_last_from[key]
            if last is None:
                return (f"its warpgroup released the stage on {released_on.name} before any wgmma.wait_group retired "
                        f"it: {fix}")
            pc, keep = last
            return (f"its warpgroup released the stage on {released_on.name} after `wgmma.wait_group {keep}` "
                    f"{self._where_pc(pc)}, which lets {keep} group{'s' if keep != 1 else ''} stay in flight, this "
                    f"one among them: {fix}")
        last = self.last_wgwait.get(c.w0 + 4 * rec.g)
        if last is not None:
            pc, keep = last
            return (f"the last wgmma.wait_group of its warpgroup, `wgmma.wait_group {keep}` {self._where_pc(pc)}, "
                    f"lets {keep} group{'s' if keep != 1 else ''} stay in flight: wait until it has retired")
        return "no wgmma.wait_group has retired its group yet"

    # ------------------------------------------------------------------ copies into shared memory
    def copy_issued(self, c: Any, what: str, targets: list, nbytes: int, tx: int, land: Callable[[], None]) -> None:
        """A TMA load / multicast / bulk copy issued by the current instruction of ``c``: check the destination
        is free in every target block, poison it, and keep the landing for later."""
        from .barriers import get_barrier

        w, g = self.actor(c)
        x = _Copy(len(self.copies), what, self.pc, c, w, self._thread(), targets, nbytes, tx, land,
                  c.cluster.hz.vc[w].copy(), self._waited_before(c, w) or "")
        self.copies.append(x)
        here = f"the {what} {self.where(self.pc, c, g - c.w0, self._thread())}"
        for cta, doff, boff in targets:
            ts = cta.hz
            ch = np.arange(doff >> 4, (doff + nbytes + 15) >> 4)
            region = self._region(cta, doff >> 4, doff + nbytes)
            hint = self._remote_hint(c, w, cta)
            if ts.any_async:  # readers first: a reader still busy is the cause, a fill not consumed the symptom
                self._check_async_readers(c, w, cta, ch, here, region, hint)
            self._check_generic_readers(c, w, cta, self._chunk_words(ch), here, region)
            late = self._unknown_copy(c, w, cta, ch)
            if late is not None:
                y = late[1]
                self.add("overwrite-while-read", f"{here} refills {region} while the {y.what} "
                         f"{self.where(y.pc, y.cta, y.warp % self.mach.W, y.thread)} may still be writing it (nobody "
                         "has waited for the phase it completes): a stage refilled before its previous fill was "
                         f"consumed.{hint}", (self.pc, y.pc))
            ts.aw[ch] = x.id
            ts.gr[:, self._chunk_words(ch)] = 0
            ts.gw[self._chunk_words(ch)] = -1
            ts.any_async = True
            cta.smem[doff:doff + nbytes] = 0xFF  # poison: what the copy has not written yet
            bar = cta.barriers.get(boff) or get_barrier(self.mach, cta, boff)
            self.bar_comp(bar)
            x.bars.append(bar)
            x.phases[cta.slot] = bar.phase
            bar.hz_copies.append(x)
        self.pending.append(x)

    def _remote_hint(self, c: Any, w: int, cta: Any) -> str:
        """For a copy into another block of the cluster: which blocks' arrivals completed the barrier the producer
        waited on (a release sent to the wrong block's barrier shows here)."""
        if cta is c:
            return ""
        name = self._waited_before(c, w)
        bar = next((b for b in c.barriers.values() if b.name == name), None)
        came = sorted({label for label, _ in getattr(bar, "hz_last_from", {}) or {}})
        if bar is None or not came or cta.label in came:
            return ""
        return (f" The producer waited on {name} of block {c.label}, whose last phase completed with arrivals from "
                f"block {', '.join(came)} only: the consumers of block {cta.label} never arrived on it (a release "
                "meant for another block's barrier must name that block: mapa + mbarrier.arrive.shared::cluster, "
                "hopper::mbar_arrive_cluster).")

    def land(self, x: _Copy) -> None:
        """Land a pending copy now: join the issuer's clock into each target barrier's phase, write, complete."""
        if x.landed:
            return
        self.pending.remove(x)
        phases = {}
        for cta, _doff, boff in x.targets:
            bar = cta.barriers.get(boff)
            if bar is not None:
                self.bar_comp(bar)
                bar.hz_pend = _join(bar.hz_pend, x.vc)
                phases[cta.slot] = (bar.hz_comp, bar.phase + 1)
        x.landed = True
        x.need = phases
        x.land()

    def flush(self) -> bool:
        """Nothing can run: land the oldest pending copy, else write the oldest store that has read its source
        (waited for with ``.read`` only, or read at its block's exit): True if there was one."""
        if self.pending:
            self.land(self.pending[0])
            return True
        self.unwritten = [op for op in self.unwritten if not op["done"]]
        for i, op in enumerate(self.unwritten):
            if op["read"]:
                del self.unwritten[i]
                op["write_fn"]()
                return True
        return False

    # ------------------------------------------------------------------ wgmma
    def _operand_chunks(self, desc: int, rows: int, transposed: bool = False) -> np.ndarray:
        key = (desc, rows, transposed)
        ch = self.desc_cache.get(key)
        if ch is None:
            from helpers.hopper import wgmma as wg

            try:
                where = wg.mn_major_addresses if transposed else wg.operand_addresses
                addr = np.asarray(where(desc, rows), np.int64)
                ch = np.unique(np.concatenate([addr.ravel() >> 4, (addr.ravel() + 1) >> 4]))
            except Exception:  # noqa: BLE001  (a bad descriptor: the wgmma itself reports it)
                ch = np.zeros(0, np.int64)
            if len(self.desc_cache) > 4096:
                self.desc_cache.clear()
            self.desc_cache[key] = ch
        return ch

    def wgmma_issue(self, c: Any, st: Any, gidx: int, w4: int, op: Any, n: int) -> None:
        """Warp ``w4`` of warpgroup ``gidx`` issued wgmma ``op`` (descriptors in ``op.desc``)."""
        w, g = self.actor(c)
        ts = c.hz
        here = self.where(self.pc, c, g - c.w0, self._thread())
        if op.count == 1:
            rec = _Wgmma(len(self.wgmmas), c, gidx, op.seq, self.pc, w)
            self.wgmmas.append(rec)
            op.hz_id = rec.id
        rec = self.wgmmas[op.hz_id]
        acc = self._wgmma_acc.get(self.pc)
        if acc is None:  # the accumulator rows of this instruction's registers (the same for every warp, every time)
            acc = np.array([self.acc_index[r] for r in op.rows.tolist() if r in self.acc_index], np.int64)
            self._wgmma_acc[self.pc] = acc
        if acc.size and self.dirty[g, acc].any():
            if not self.fences[g]:
                self.add("missing-wgmma-fence", f"the wgmma {here} was issued without wgmma.fence: no wgmma.fence "
                         "came before it in this warp. Issue wgmma.fence (hopper::wgmma_fence()) in every warp of "
                         "the warpgroup before the first wgmma, and again after any ordinary instruction touches the "
                         "accumulators.", (self.pc,))
            else:
                tpc = self.dirty_pc.get(g, self.pc)
                self.add("missing-wgmma-fence", f"the wgmma {here} was issued without wgmma.fence after its "
                         f"accumulator registers were touched by an ordinary instruction {self._where_pc(tpc)}, "
                         "which comes after the warp's last wgmma.fence. Fence after the accumulators are written "
                         "(if your source writes them before the fence, the compiler moved the writes: pin them "
                         "with hopper::wgmma_fence_operands(d) just before hopper::wgmma_fence()).", (self.pc, tpc))
        kind = getattr(op, "kind", ())
        tr_a, tr_b = (bool(kind[6]), bool(kind[7])) if len(kind) > 7 else (False, False)
        a_ch = self._operand_chunks(op.desc[0], 64, tr_a) if not getattr(op, "a_regs", None) else \
            np.zeros(0, np.int64)
        ch = np.concatenate([a_ch, self._operand_chunks(op.desc[1], n, tr_b)])
        ch = ch[(ch >= 0) & (ch < len(ts.aw))]
        self._async_read(c, w, g, ch, f"the wgmma {here}", "the wgmma",
                         "the tensor core (the async proxy) may not see them. Each writing thread fences "
                         "(hopper::fence_proxy_async()) after its stores, then a barrier.")
        if op.count == 1:
            ts.ar_wg[ch, gidx] = rec.id
            ts.any_async = True

    def _async_read(self, c: Any, w: int, g: int, ch: np.ndarray, reader: str, short: str, fence_why: str) -> None:
        """An asynchronous read (a wgmma, a TMA store) of chunks ``ch`` of ``c``'s shared memory by warp ``w``
        (machine warp ``g``): every copy into them delivered to this warp, every ordinary store into them ordered
        before it and fenced for the async proxy by its writer."""
        ts = c.hz
        late = self._unknown_copy(c, w, c, ch)
        if late is not None:
            self._read_before_delivered(c, w, g, c, *late, what=reader)
        words = self._chunk_words(ch)
        gw = ts.gw[words]
        wrote = np.flatnonzero(gw >= 0)
        if not wrote.size:
            return
        j = words[wrote]
        writers = gw[wrote]
        known = (writers == w) | (c.cluster.hz.vc[w, writers] >= ts.gw_epoch[j])
        if not known.all():
            k = int(j[~known][0])
            self.add("unsynchronised", f"{reader} reads {self._region(c, 0, lo=4 * k)}, which the store "
                     f"{self._wrote(c, k)} "
                     f"wrote, with nothing ordering that write before {short} (every writer meets the issuing "
                     "thread at a barrier after its stores).", (self.pc, int(ts.gw_pc[k])))
        fenced = self.proxy_fences[self._machine_warps(c, writers)] > ts.gw_pf[j]
        if not fenced.all():
            k = int(j[~fenced][0])
            self.add("missing-proxy-fence", f"{reader} reads {self._region(c, 0, lo=4 * k)}, written by the ordinary "
                     "store "
                     f"{self._wrote(c, k)}, and that warp did not execute fence.proxy.async between its stores and "
                     f"{short}: {fence_why}", (self.pc, int(ts.gw_pc[k])))

    def wgmma_commit(self, c: Any, st: Any, gidx: int, w4: int) -> None:
        key = (c.slot, gidx, w4)
        start = self._committed.get(key, 0) if self._committed.get(("st", key)) is st else 0
        for op in st.ops[start:st.issued[w4]]:
            if op.hz_id is not None:
                self.wgmmas[op.hz_id].committed = True
        self._committed[key] = st.issued[w4]
        self._committed[("st", key)] = st

    def wgmma_waited(self, c: Any, gidx: int, w4: int, upto: int, keep: int) -> None:
        """Warp ``w4`` of warpgroup ``gidx`` returned from wait_group ``keep``: wgmmas before ``upto`` retired."""
        w, g = self.actor(c)
        cs = c.cluster.hz
        comp = cs.wg0 + c.rank * cs.G + gidx
        cs.vc[w, comp] = max(cs.vc[w, comp], upto)
        self.last_wgwait[g] = (self.pc, keep)

    # ------------------------------------------------------------------ TMA stores
    def store_issued(self, c: Any, t: int, soff: int, nbytes: int, op: dict) -> None:
        w, g = self.actor(c)
        cs = c.cluster.hz
        cs.bulk_seq[w] += 1
        rec = _Store(len(self.stores), self.pc, c, w, int(self.mach.TLIN[t]), int(cs.bulk_seq[w]), op)
        self.stores.append(rec)
        self.unwritten.append(op)
        cs.stores[w].append(rec)
        op["hz"] = rec
        ts = c.hz
        here = self.where(self.pc, c, g - c.w0, rec.thread)
        ch = np.arange(soff >> 4, (soff + nbytes + 15) >> 4)
        ch = ch[ch < len(ts.aw)]
        self._async_read(c, w, g, ch, f"the TMA store {here}", "the TMA store",
                         "the TMA (the async proxy) may read the old bytes. Each writing thread fences "
                         "(hopper::fence_proxy_async()) after its stores, then the barrier, then the store.")
        ts.ar_st[ch] = rec.id
        ts.any_async = True

    def bulk_waited(self, c: Any, t: int, ops: list[dict], read_only: bool) -> None:
        """Thread ``t`` returned from cp.async.bulk.wait_group(.read): ``ops`` have read (and written)."""
        w, _ = self.actor(c, np.array([t]))
        cs = c.cluster.hz
        for op in ops:
            rec = op.get("hz")
            if rec is not None:
                rec.waited = True
        n = 0
        for rec in cs.stores[w]:
            if not rec.waited:
                break
            n = rec.seq
        comp = cs.bulk0 + w
        cs.vc[w, comp] = max(cs.vc[w, comp], n)

    # ------------------------------------------------------------------ blocks of a cluster and their exits
    _CLUSTER_SYNC = ("end the kernel with a cluster barrier every thread of every block takes part in "
                     "(barrier.cluster.arrive + barrier.cluster.wait; cute::cluster_sync(), "
                     "cooperative_groups::this_cluster().sync())")

    def remote_access(self, c: Any, target: Any, w: int, g: int, what: str, m: Any = None) -> None:
        """Warp ``w`` (cluster index; machine warp ``g``) of ``c`` reaches into block ``target``'s shared memory
        (``what``): remembered, so that ``target``'s exit can check the access is ordered before it."""
        here = self.where(self.pc, c, g - c.w0, self._thread(m))
        if not target.alive:
            self.add("exit-before-peers", f"block {c.label} makes an {what} of block {target.label} {here} after "
                     f"block {target.label} exited: its shared memory and barriers are gone (on the GPU another "
                     f"block may already own them). Keep every block of the cluster alive until its peers are done "
                     f"with it: {self._CLUSTER_SYNC}.", (self.pc,))
            return
        target.hz.remote[w] = (int(c.cluster.hz.vc[w, w]), self.pc, what, c, g - c.w0)

    def _block_exit(self, c: Any) -> None:
        """The last threads of ``c`` exit: every access of another block to its shared memory or barriers must be
        ordered before (known to one of its warps)."""
        if not c.hz.remote:
            return
        cs = c.cluster.hz
        W = self.mach.W
        mine = cs.vc[c.rank * W:(c.rank + 1) * W]
        for w, (epoch, pc, what, peer, lw) in sorted(c.hz.remote.items()):
            if int(mine[:, w].max()) >= epoch:
                continue
            self.add("exit-before-peers", f"block {c.label} exits {self.where(self.pc, c)} while nothing orders "
                     f"the {what} by block {peer.label} {self.where(pc, peer, lw)} before that exit: block "
                     f"{peer.label} may still reach into block {c.label}'s shared memory after it is gone. "
                     f"{self._CLUSTER_SYNC[0].upper()}{self._CLUSTER_SYNC[1:]}.", (self.pc, pc))
            break

    def thread_exit(self, m: Any, c: Any) -> None:
        mach = self.mach
        idx = np.atleast_1d(np.asarray(m) if not isinstance(m, slice) else np.arange(m.start, m.stop))
        left = np.flatnonzero(mach.STATE[c.lo:c.hi] != 2) + c.lo  # 2: EXIT
        if len(c.cluster.ctas) > 1 and np.isin(left, idx).all():
            self._block_exit(c)
        for g in np.unique(mach.WARPG[idx]).tolist():
            lw = g - c.w0
            st = c.wg.get(lw // 4)
            if st is not None:
                w4 = lw % 4
                left = st.ops[st.written[w4]:st.issued[w4]]
                if left:
                    op = left[0]
                    rec = self.wgmmas[getattr(op, "hz_id", 0)] if getattr(op, "hz_id", None) else None
                    why = self._wgmma_status(rec) if rec is not None else ""
                    self.add("wgmma-in-flight", f"warp {lw} of block {c.label} exits "
                             f"{self.where(self.pc, c, lw, self._thread(m))} while its wgmma "
                             f"{self.where(op.pc, c)} is still in flight: {why}.", (self.pc, op.pc))
        for t in idx.tolist():
            self._flag_check_pending(int(t), c)
            st = c.bulk.get(int(t))
            if not st:
                continue
            for op in [o for grp in st["groups"] for o in grp] + list(st["open"]):
                rec = op.get("hz")
                if rec is not None and not rec.waited and not op.get("read"):
                    self.add("store-before-exit", f"thread {int(mach.TLIN[t])} of block {c.label} exits "
                             f"{self.where(self.pc, c, int(mach.TLIN[t]) // 32, int(mach.TLIN[t]))} while its TMA "
                             f"store {self.where(rec.pc, c)} may still read shared memory: wait for it first "
                             "(cp.async.bulk.wait_group 0, or .read 0).", (self.pc, rec.pc))
                    break

    # ------------------------------------------------------------------ flags in global memory
    def _words(self, addr: np.ndarray, width: int, located: tuple | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """[(shadow, word indices)] of an access inside one allocation (``located``: (allocation, byte offsets)
        when the caller found it already); [] otherwise."""
        out = []
        if located is not None:
            alloc, off = located
        else:
            a = np.atleast_1d(np.asarray(addr, np.uint64))
            alloc = self.mach.memory.find(int(np.minimum.reduce(a)))
            if alloc is None:
                return out
            off = (a.astype(np.int64) - alloc.base)
            if int(np.maximum.reduce(off)) + width > alloc.size:  # off >= 0: the allocation holds the lowest address
                return out
        sh = self.gshadow.get(alloc.base)
        if sh is None:
            sh = np.zeros(alloc.size // 4 + 2, np.int64)
            self.gshadow[alloc.base] = sh
        words = off >> 2
        if width > 4:
            words = (words[:, None] + np.arange(-(-width // 4))).ravel()
        out.append((sh, words))
        return out

    def global_access(self, c: Any, addr: np.ndarray, width: int, store: bool, located: tuple | None = None) -> None:
        """A global load or store by the current instruction (ld, st, atom, red; others are not flags).
        ``located``: (allocation, byte offsets) when every address lies in that allocation."""
        kind = self._sem.get(self.pc)
        if kind is None:
            q = self.mach.prog.instrs[self.pc].opcode.split(".")
            sem = next((x for x in q[1:] if x in _STRONG or x == "weak"), "weak")
            kind = (q[0], sem)
            self._sem[self.pc] = kind
        base, sem = kind
        if base in ("atom", "red"):
            if store:  # an atomic is a strong write (its read is part of the RMW chain, not a poll)
                self.global_store(c, addr, width, sem, atomic=True, located=located)
        elif base == "st":
            self.global_store(c, addr, width, sem, located=located)
        elif base in ("ld", "ldu") and not store:
            if self.pending_acquire:
                self.load_point(self.m)
            self.global_load(c, addr, width, sem, located=located)

    def global_store(self, c: Any, addr: Any, width: int, sem: str, atomic: bool = False,
                     located: tuple | None = None) -> None:
        m = self.m
        if sem in ("release", "acq_rel"):
            release = True
        elif m.__class__ is slice:
            release = _count_nonzero(self.gpu_fence[m] > self.sync_seq[m]) == m.stop - m.start
        else:
            idx = np.atleast_1d(np.asarray(m))
            release = _count_nonzero(self.gpu_fence[idx] > self.sync_seq[idx]) == idx.size
        strong = sem in _STRONG or atomic
        code = (c.hz_serial << 32) | (self.pc << 2) | (1 if release else 0) | (2 if strong else 0)
        for sh, words in self._words(addr, width, located):
            sh[words] = code

    def global_load(self, c: Any, addr: Any, width: int, sem: str, located: tuple | None = None) -> None:
        """A plain ld (not an atomic): is it a flag another block wrote without release, or read without
        acquire?"""
        mine = c.hz_serial
        m = self.m
        for sh, words in self._words(addr, width, located):
            codes = sh[words]
            if not _count_nonzero(codes):
                continue
            other = (codes != 0) & ((codes >> 32) != mine)
            if not _count_nonzero(other):
                continue
            code = int(codes[np.flatnonzero(other)[0]])
            wpc, release, strong = (code >> 2) & ((1 << 30) - 1), bool(code & 1), bool(code & 2)
            load_strong = sem in _STRONG
            if not (strong or load_strong):
                continue  # a plain write read plainly: data, not a flag (ordered by the flag it follows)
            writer = self.cta_serial.get(code >> 32, "?")
            if not release:
                self.add("flag-ordering", f"{self.where(self.pc, c, None, self._thread(m))} reads a flag that "
                         f"block {writer} stored {self._where_pc(wpc)} without release semantics: the data that "
                         "block wrote before the flag may not be visible when the reader sees the flag. Store the "
                         "flag with st.release.gpu (hopper::flag_store_release) after the block's barrier.",
                         (self.pc, wpc))
            if sem not in ("acquire", "acq_rel", "sc"):
                t = self._first(m)
                self.pending_acquire[int(t)] = (self.pc, writer, wpc)

    def _flag_sync_point(self, m: Any) -> None:
        """A thread that read a flag without acquire reaches a point where it relies on it (a barrier, another
        load, its exit) without a fence since: report it."""
        if not self.pending_acquire:
            return
        idx = np.atleast_1d(np.asarray(m) if not isinstance(m, slice) else np.arange(m.start, m.stop))
        for t in idx.tolist():
            if t in self.pending_acquire:
                self._flag_check_pending(t, self.mach.cur)

    def _flag_check_pending(self, t: int, c: Any) -> None:
        p = self.pending_acquire.pop(t, None)
        if p is None:
            return
        pc, writer, wpc = p
        self.add("flag-ordering", f"{self.where(pc, c, None, int(self.mach.TLIN[t]))} polls a flag that block "
                 f"{writer} sets {self._where_pc(wpc)}, but the load has no acquire semantics and no fence follows "
                 "it: reads after the loop may see the other block's data from before the flag. Load the flag with "
                 "ld.acquire.gpu (hopper::flag_load_acquire / flag_wait_geq).", (pc, wpc))

    def load_point(self, m: Any) -> None:
        """A load at a different instruction than the pending flag load: the flag was relied on."""
        if not self.pending_acquire:
            return
        idx = np.atleast_1d(np.asarray(m) if not isinstance(m, slice) else np.arange(m.start, m.stop))
        for t in idx.tolist():
            p = self.pending_acquire.get(t)
            if p is not None and p[0] != self.pc:
                self._flag_check_pending(t, self.mach.cur)

    # ------------------------------------------------------------------ stalls
    def stalled(self) -> None:
        """Nothing can run and nothing is in flight: a phase that waits for bytes nobody delivers is an
        expect-tx larger than the copies (a hazard, reported as such)."""
        mach = self.mach
        for p in mach.parked:
            bar = p.obj
            if p.kind != "mbar" or not hasattr(bar, "tx_count"):
                continue
            if bar.pending_arrivals == 0 and bar.tx_count > 0:
                self.bar_comp(bar)
                got = bar.hz_expect - bar.tx_count
                self.add("expect-tx", f"{bar.name} of block {bar.cta.label} waits in phase {bar.phase} for "
                         f"{bar.tx_count} more bytes: expect-tx announced {bar.hz_expect} bytes but the copies "
                         f"issued for this phase delivered {got}; nothing else will arrive, so the waiters "
                         f"{self.where(p.pc, p.cta, int(mach.TLIN[p.idx[0]]) // 32, int(mach.TLIN[p.idx[0]]))} wait "
                         "forever. Announce exactly the bytes the copies bring.", (p.pc,))
                raise HazardsFound(self.found)
