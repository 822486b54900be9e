"""The executor's core: thread state, the scheduler, memory windows, parking and the async-operation queue.

Execution is vectorised over threads: a *group* is the set of runnable threads of one warp that share the lowest
program counter; the group runs one basic block at a time (every op works on numpy arrays over the group).
Branches split groups, and groups meet again at labels. Warps of a CTA are interleaved round-robin; a warp woken
by a barrier runs next (so a producer released by the last consumer's arrive gets in before that consumer moves
on). CTAs run by smallest clock; each CTA's clock counts the instructions it issued.

Waits never spin: a thread whose wait cannot succeed is *parked* on the object it waits for (an mbarrier phase,
a named barrier, wgmma or bulk groups, registers for setmaxnreg) and woken when that object changes. When no
thread can run and no asynchronous operation is in flight, the machine enters *stall mode*: parked mbarrier
pollers are woken, their waits now return false, and every ``clock64`` read jumps 2**24 cycles, so the course
header's bounded waits run out and its own report path writes the deadlock record, exactly as on the H100. A
kernel with no such wait is reported by the machine itself, naming the barrier, the parity and who waits.

Asynchronous operations (TMA copies, bulk stores, wgmma) are events on a time-ordered queue with modelled
latencies (:class:`Options`). Hooks for a hazard checker (delay every async op to the latest legal moment, poison
what is not yet written) and for per-warp timelines (:attr:`Machine.trace`) go through :meth:`Machine.schedule`
and :meth:`Machine.event`.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from helpers.hopper import parts

from .errors import EmulationLimit, UnsupportedInstruction
from .memory import (
    LOCAL_WINDOW,
    OFFSET_MASK,
    RANK_SHIFT,
    SHARED_WINDOW,
    SMEM_PER_SM,
    SMEM_RESERVED,
    WINDOW_SIZE,
    DeviceMemory,
    MemoryFault,
)
from .parser import TYPE_BITS, FImm, Imm, Instr, Neg, Reg, Sym
from .program import Program
from .registry import DECODERS

__all__ = ["Machine", "Options", "CTA", "Binder", "ExecFault", "Deadlock", "Trap", "DT", "Event"]

RUN, PARK, EXIT, IDLE = 0, 1, 2, 3

DT: dict[str, np.dtype] = {
    "pred": np.dtype(bool), "b8": np.dtype(np.uint8), "u8": np.dtype(np.uint8), "s8": np.dtype(np.int8),
    "b16": np.dtype(np.uint16), "u16": np.dtype(np.uint16), "s16": np.dtype(np.int16),
    "f16": np.dtype(np.float16), "bf16": np.dtype(np.uint16), "e4m3x2": np.dtype(np.uint16),
    "e5m2x2": np.dtype(np.uint16), "b32": np.dtype(np.uint32), "u32": np.dtype(np.uint32),
    "s32": np.dtype(np.int32), "f32": np.dtype(np.float32), "f16x2": np.dtype(np.uint32),
    "bf16x2": np.dtype(np.uint32), "tf32": np.dtype(np.uint32), "b64": np.dtype(np.uint64),
    "u64": np.dtype(np.uint64), "s64": np.dtype(np.int64), "f64": np.dtype(np.float64),
    "e4m3": np.dtype(np.uint8), "e5m2": np.dtype(np.uint8),
}
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_SIGNED = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}
_BANK_DT = {"P": np.dtype(bool), "H": np.dtype(np.uint16), "W": np.dtype(np.uint32), "D": np.dtype(np.uint64)}

SPECIAL_PREFIXES = ("%tid", "%ntid", "%laneid", "%warpid", "%nwarpid", "%ctaid", "%nctaid", "%smid", "%nsmid",
                    "%gridid", "%clock", "%clock64", "%clock_hi", "%globaltimer", "%lanemask", "%dynamic_smem_size",
                    "%total_smem_size", "%aggr_smem_size", "%cluster", "%nclusterid", "%clusterid",
                    "%is_explicit_cluster", "%envreg", "%reserved_smem")


# ------------------------------------------------------------------------------------------- errors
class ExecFault(Exception):
    """The kernel stopped the way it would on the GPU: ``error`` is the CUDA error name."""

    def __init__(self, error: str, detail: str, where: str = "") -> None:
        super().__init__(detail)
        self.error = error
        self.detail = detail
        self.where = where


class Trap(ExecFault):
    """A ``trap`` instruction (the header's deadlock report path ends with one)."""


class Deadlock(Exception):
    """No thread can make progress: ``sentence`` says who waits on what."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence


class StepLimit(Exception):
    """The launch executed ``Options.step_limit`` warp instructions without finishing (the executor's own limit,
    counted in the program's steps, so every machine reaches the same verdict)."""

    def __init__(self, steps: int, where: str) -> None:
        super().__init__(steps, where)
        self.steps = steps
        self.where = where


# ------------------------------------------------------------------------------------------- options
@dataclass
class Options:
    """How the machine schedules and times things (all deterministic)."""

    tma_latency: int = 500  # cycles from issue to landing (load) or to the global write (store)
    wgmma_latency: int = 120  # cycles from the 4th warp's issue to the result
    warp_quantum: int = 512  # basic blocks a warp runs before the next warp's turn (it usually waits first)
    stall_quantum: int = 2  # the same in stall mode, so every waiter reaches its time-out
    cta_quantum: int = 64  # basic blocks a CTA runs before the scheduler looks for the CTA with the smallest clock
    stall_clock_step: int = 1 << 24  # cycles a clock read adds in stall mode
    livelock_blocks: int = 100_000  # blocks run without any progress before the machine enters stall mode
    spin_blocks: int = 1_000  # blocks run without any progress before the machine watches for a warp that repeats
    step_limit: int = field(default_factory=lambda: _step_limit())  # warp instructions a launch may execute
    time_limit: float | None = field(default_factory=lambda: _wall_limit())  # wall-clock safety net, seconds
    max_resident: int | None = None  # CTAs resident at once (default: what fits on the emulated part's SMs)
    trace: bool = False  # record per-warp events (Machine.trace)
    hazards: bool = False  # the hazard checker (hazards.py): latest-moment async ops, happens-before checks


#: Warp instructions one launch may execute (a group of a warp's threads running one instruction is one): 25 times
#: the course's largest emulated run (Lab 2's CUDA-core GEMM at 128x128x256 runs 1.3 million). Counted, not timed,
#: so a loaded machine reaches the same verdict as an idle one.
STEP_LIMIT = 50_000_000

#: called now and then during a run as ``progress_hook(blocks_done, blocks)`` when set (the course's progress line)
progress_hook: Callable[[int, int], None] | None = None


def _step_limit() -> int:
    """HELPERS_EXECUTOR_STEP_LIMIT, else :data:`STEP_LIMIT`."""
    import os

    return int(os.environ.get("HELPERS_EXECUTOR_STEP_LIMIT", "") or STEP_LIMIT)


def _wall_limit() -> float | None:
    """The executor's wall-clock safety net: HELPERS_EXECUTOR_WALL_LIMIT seconds (0: none), default 1800. It only
    keeps a run from going on for ever; when it is reached the executor says so as its own limit."""
    import os

    v = float(os.environ.get("HELPERS_EXECUTOR_WALL_LIMIT", "1800") or 0)
    return v if v > 0 else None


@dataclass
class Event:
    """A per-warp event for timelines: (time, cta, warp, kind, barrier, phase, stage)."""

    time: int
    cta: tuple[int, int, int]
    warp: int
    kind: str
    barrier: str = ""
    phase: int = -1
    stage: int = -1
    detail: str = ""
    end: int = -1  # spans (a wgmma on the tensor cores): when it ended


def stage_of(barrier: str) -> int:
    """The stage a barrier guards, from its name: ``full[2]`` -> 2 (-1 without an index)."""
    if barrier.endswith("]") and "[" in barrier:
        try:
            return int(barrier[barrier.rindex("[") + 1:-1])
        except ValueError:
            return -1
    return -1


@dataclass(eq=False)
class Park:
    """Threads parked on an object until it changes."""

    cta: CTA
    idx: np.ndarray
    obj: object
    kind: str  # mbar, bar, cluster, wgmma, bulk, setmaxnreg, sync
    pc: int
    since: int
    info: dict = field(default_factory=dict)
    on_wake: Callable[[], None] | None = None


class Cluster:
    def __init__(self, ctas: list[CTA], cid: tuple[int, int, int]) -> None:
        self.ctas = ctas
        self.cid = cid
        self.phase = 0
        self.arrived = 0


class CTA:
    """One resident thread block."""

    def __init__(self, mach: Machine, slot: int) -> None:
        self.mach = mach
        self.slot = slot
        self.lo = slot * mach.T
        self.hi = self.lo + mach.T
        self.w0 = slot * mach.W
        self.alive = False
        self.smem = np.zeros(0, np.uint8)

    def start(self, ctaid: tuple[int, int, int], cluster: Cluster | None, rank: int) -> None:
        m = self.mach
        self.ctaid = ctaid
        self.cluster = cluster
        self.rank = rank
        self.rank_bits = rank << RANK_SHIFT
        self.smem = np.full(m.smem_bytes, 0xFF, np.uint8)  # uninitialised shared memory reads as poison
        self.barmask = np.zeros(m.smem_bytes, bool)
        self.barriers: dict[int, Any] = {}
        self.named: dict[int, dict] = {}
        self.clock = m.start_clock
        self.woken: list[int] = []
        self.rr = 0
        self.wq = 0
        self.cur_warp = self.w0
        self.wg: dict[int, Any] = {}
        self.bulk: dict[int, Any] = {}
        self.regs_pool = m.regs_per_thread * m.T
        self.regs_wg: dict[int, int] = {}
        self.pending_reads: list = []  # bulk stores that have not read their shared-memory source yet
        self.last_pc, self.last_m = 0, None  # the block it ran last (where a step-limit verdict points)
        self.alive = True

    @property
    def label(self) -> str:
        x, y, z = self.ctaid
        return f"({x},{y},{z})" if z else f"({x},{y})"


# ------------------------------------------------------------------------------------------- the machine
class Machine:
    """One kernel launch on the executor."""

    def __init__(self, program: Program, grid: tuple[int, int, int], block: tuple[int, int, int],
                 cluster: tuple[int, int, int] | None, dyn_smem: int, params: bytes, memory: DeviceMemory,
                 loaded: Any, options: Options | None = None, regs_per_thread: int = 0,
                 setmaxnreg_ignored: bool = False, name: str = "") -> None:
        self.prog = program
        self.opts = options or Options()
        self.memory = memory
        self.loaded = loaded
        self.name = name or program.entry
        self.grid, self.block = grid, block
        self.cdims = cluster or (1, 1, 1)
        self.csize = self.cdims[0] * self.cdims[1] * self.cdims[2]
        self.explicit_cluster = cluster is not None
        self.T = block[0] * block[1] * block[2]
        self.W = -(-self.T // 32)
        self.dyn_smem = dyn_smem
        self.dyn_base = program.dyn_offset()
        self.smem_bytes = -(-(self.dyn_base + dyn_smem) // 16) * 16
        self.regs_per_thread = regs_per_thread
        self.setmaxnreg_ignored = setmaxnreg_ignored
        self.params = params
        self.param_alloc = memory.alloc(max(len(params), 16), label=f"the parameters of kernel {self.name}",
                                        readonly=True)
        self.param_alloc.data[:len(params)] = np.frombuffer(params, np.uint8)
        total = grid[0] * grid[1] * grid[2]
        S = min(total, self._resident_limit())
        S = max(self.csize, S - S % self.csize)
        self.S = S
        self.N = S * self.T
        N = self.N
        self.PC = np.zeros(N, np.int64)
        self.STATE = np.full(N, IDLE, np.int8)
        nw = S * self.W
        self.RCOUNT = np.zeros(nw, np.int64)
        self.WARPG = (np.arange(N) // self.T) * self.W + (np.arange(N) % self.T) // 32
        self.wlo = [(g // self.W) * self.T + (g % self.W) * 32 for g in range(nw)]
        self.whi = [min(lo + 32, (g // self.W) * self.T + self.T) for g, lo in enumerate(self.wlo)]
        n = program.nregs
        self.banks = {"P": np.zeros((max(n["P"], 1), N), bool), "H": np.zeros((max(n["H"], 1), N), np.uint16),
                      "W": np.zeros((max(n["W"], 1), N), np.uint32), "D": np.zeros((max(n["D"], 1), N), np.uint64)}
        self._views: dict[tuple[str, np.dtype], np.ndarray] = {}
        t = np.arange(N) % self.T
        bx, by = block[0], block[1]
        self.TID = np.stack([t % bx, (t // bx) % by, t // (bx * by)]).astype(np.uint32)
        self.LANE = (t % 32).astype(np.uint32)
        self.WARPID = (t // 32).astype(np.uint32)
        self.TLIN = t.astype(np.uint32)
        self.LOCAL = np.zeros((N, program.local_bytes), np.uint8)
        self.FPARAM = np.zeros((N, program.fparam_bytes), np.uint8)
        self.DEPTH = np.zeros(N, np.int64)
        self.RET = np.zeros((8, N), np.int64)
        self.CLU_PHASE = np.full(N, -1, np.int64)
        self.ctas = [CTA(self, s) for s in range(S)]
        self.pending = self._cta_order()
        self.blocks_total = len(self.pending) * self.csize
        self.events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.parked: list[Park] = []
        self.stall_mode = False
        self.stall_snapshot: list[Park] = []
        self.stall_clock: dict[int, int] = {}
        self.progress = 0
        self.since_progress = 0
        self.trace: list[Event] = []
        self.open_waits: dict[int, tuple] = {}  # traced runs: machine warp -> the wait it is parked in
        self.copy_seq = 0  # traced runs: numbers the copies so a landing matches its issue
        self._async_now: int | None = None  # the time of the asynchronous event being applied
        self.start_clock = 1000
        self.cur: CTA = self.ctas[0]
        self.printed: list[str] = []
        self.dispatches = 0
        self.block_pc = 0  # the first instruction of the block running now (clock reads count from it)
        self.steps = 0  # warp instructions executed (a group running one instruction is one step)
        self.notes: dict[str, str] = {}  # instruction -> what the run says once about its fidelity
        self._watch: dict | None = None  # watching warps for a repeated state (see _livelock)
        self.hz: Any = None
        if self.opts.hazards:
            from .hazards import HazardChecker

            self.hz = HazardChecker(self)
        self._bind()

    # ------------------------------------------------------------------ setup
    def _resident_limit(self) -> int:
        if self.opts.max_resident:
            return self.opts.max_resident
        regs = self.regs_per_thread or 32
        per_sm = min(32, 64 // self.W or 1, max(SMEM_PER_SM // max(self.smem_bytes, 1), 1),
                     max(65536 // max(regs * self.T, 1), 1))
        limit = parts.current().sms * per_sm
        # keep the register file of the emulator modest
        n = sum(self.prog.nregs.values()) + 4
        cap = max(int(2e8 // max(n * 4 * self.T, 1)), self.csize)
        return max(min(limit, cap), 1)

    def _cta_order(self) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
        """CTAs to launch, cluster by cluster: (cluster id, first CTA id)."""
        gx, gy, gz = self.grid
        cx, cy, cz = self.cdims
        out = []
        for z in range(0, gz, cz):
            for y in range(0, gy, cy):
                for x in range(0, gx, cx):
                    out.append(((x // cx, y // cy, z // cz), (x, y, z)))
        out.reverse()
        return out

    def view(self, bank: str, dt: np.dtype) -> np.ndarray:
        key = (bank, dt)
        v = self._views.get(key)
        if v is None:
            v = self.banks[bank].view(dt)
            self._views[key] = v
        return v

    def _bind(self) -> None:
        prog = self.prog
        self.ops: list[Callable] = []
        ctl = []
        for pc, ins in enumerate(prog.instrs):
            b = Binder(self, pc, ins, prog.func_at[pc])
            op = b.bind()
            if self.hz is not None:
                op = self.hz.wrap(pc, ins, op)
            self.ops.append(op)
            ctl.append(bool(getattr(op, "ctl", False)))
        n = len(self.ops)
        target = [False] * (n + 1)
        for pc in prog.labels.values():
            if pc <= n:
                target[pc] = True
        for f, e in prog.end.items():
            target[e] = True
            target[prog.start[f]] = True
        end = [0] * n
        for pc in range(n - 1, -1, -1):
            end[pc] = pc if (ctl[pc] or target[pc + 1] or pc == n - 1) else end[pc + 1]
        self.block_end = end
        self.blocks: dict[int, tuple] = {}

    # ------------------------------------------------------------------ thread state
    def set_state(self, idx: Any, new: int) -> None:
        old = np.array(self.STATE[idx], copy=True)
        self.STATE[idx] = new
        was = np.atleast_1d(old == RUN)
        w = np.atleast_1d(self.WARPG[idx])
        if was.any():
            np.subtract.at(self.RCOUNT, w[was], 1)
        if new == RUN and (~was).any():
            np.add.at(self.RCOUNT, w[~was], 1)

    def park(self, m: Any, c: CTA, obj: object, kind: str, pc: int, retry: bool = True,
             on_wake: Callable[[], None] | None = None, **info: Any) -> bool:
        """Park threads ``m`` on ``obj``; they resume at ``pc`` (retry) or after it. Returns True (op is ctl)."""
        idx = _indices(m)
        self.PC[idx] = pc if retry else pc + 1
        self.set_state(idx, PARK)
        self.parked.append(Park(c, idx, obj, kind, pc, c.clock, info, on_wake))
        return True

    def wake(self, obj: object) -> None:
        """Make every thread parked on ``obj`` runnable."""
        keep = []
        key = isinstance(obj, tuple)
        for p in self.parked:
            if p.obj is obj or (key and p.obj == obj):
                self.set_state(p.idx, RUN)
                ws = np.unique(self.WARPG[p.idx]).tolist()
                p.cta.woken.extend(reversed(ws))
                if p.on_wake is not None:
                    p.on_wake()
            else:
                keep.append(p)
        self.parked = keep

    def note_progress(self) -> None:
        """A barrier phase completed (or something else happened that a waiter may have waited for)."""
        self.progress += 1
        self.since_progress = 0
        if self.stall_mode:
            self.stall_mode = False

    # ------------------------------------------------------------------ async operations
    def schedule(self, c: CTA, delay: int, fn: Callable[[], None]) -> None:
        """Run ``fn`` ``delay`` cycles after now on ``c``'s clock (an async op landing or completing)."""
        self._seq += 1
        heapq.heappush(self.events, (c.clock + max(int(delay), 0), self._seq, fn))

    def _apply_events(self, until: int | None) -> bool:
        done = False
        while self.events and (until is None or self.events[0][0] <= until):
            t, _, fn = heapq.heappop(self.events)
            self.event_time = self._async_now = t
            try:
                fn()
            finally:
                self._async_now = None
            done = True
        return done

    def event(self, c: CTA, warp: int, kind: str, barrier: str = "", phase: int = -1, stage: int = -1,
              detail: str = "", time: int | None = None, end: int = -1) -> None:
        """Record a per-warp event for timelines (only with Options.trace). ``warp`` is the warp in its block (-1:
        the block's asynchronous units); the time is the block's clock, or the event's own time while an
        asynchronous operation completes."""
        if self.opts.trace:
            if time is None:
                time = self._async_now if self._async_now is not None else c.clock
            if stage < 0 and barrier:
                stage = stage_of(barrier)
            self.trace.append(Event(int(time), c.ctaid, warp, kind, barrier, phase, stage, detail, int(end)))

    def wait_began(self, c: CTA, g: int, kind: str, barrier: str = "", phase: int = -1) -> None:
        """A traced warp (machine index ``g``) starts waiting (``wait`` on a barrier, ``wait_group``)."""
        if g not in self.open_waits:
            self.open_waits[g] = (kind, barrier, phase)
            self.event(c, g - c.w0, kind, barrier, phase)

    def wait_ended(self, c: CTA, gs: Any, kind: str) -> None:
        """Traced warps ``gs`` (machine indices) got past a wait of ``kind``: close the waits they were parked in."""
        for g in np.unique(np.atleast_1d(gs)).tolist():
            w = self.open_waits.get(g)
            if w is not None and w[0] == kind:
                del self.open_waits[g]
                self.event(c, g - c.w0, f"{kind}_done", w[1], w[2])

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        try:
            self._run()
        finally:
            if self.opts.trace:  # asynchronous events carry their own time: keep the trace in time order
                self.trace.sort(key=lambda e: e.time)

    def _run(self) -> None:
        t0 = time.monotonic()
        limit = self.opts.time_limit
        steps = self.opts.step_limit
        with np.errstate(all="ignore"):
            self._fill_slots()
            loops = 0
            while True:
                c = self._pick_cta()
                if c is None:
                    if self.events:
                        self._apply_events(self.events[0][0])
                        continue
                    if self.hz is not None and self.hz.flush():  # the latest moment: nothing runs without it
                        continue
                    if not any(x.alive for x in self.ctas) and not self.pending:
                        break
                    self._stall()
                    continue
                self._apply_events(c.clock)
                self._run_cta(c)
                loops += 1
                if self.steps > steps:
                    raise StepLimit(self.steps, self.where(c.last_pc, c.last_m, c) if c.last_m is not None else "")
                if limit is not None and loops % 16 == 0 and time.monotonic() - t0 > limit:
                    raise TimeoutError(limit)
                if progress_hook is not None and loops % 64 == 0:
                    running = sum(x.alive for x in self.ctas)
                    progress_hook(self.blocks_total - len(self.pending) * self.csize - running, self.blocks_total)
            while self.events or (self.hz is not None and self.hz.flush()):
                self._apply_events(None)

    def _fill_slots(self) -> None:
        free = [c for c in self.ctas if not c.alive]
        while self.pending and len(free) >= self.csize:
            cid, first = self.pending.pop()
            group = free[:self.csize]
            free = free[self.csize:]
            cl = Cluster(group, cid)
            cx, cy, _ = self.cdims
            for r, c in enumerate(group):
                off = (r % cx, (r // cx) % cy, r // (cx * cy))
                c.start((first[0] + off[0], first[1] + off[1], first[2] + off[2]), cl, r)
                self.PC[c.lo:c.hi] = self.prog.start[self.prog.entry]
                self.DEPTH[c.lo:c.hi] = 0
                self.CLU_PHASE[c.lo:c.hi] = -1
                for arr in self.banks.values():
                    arr[:, c.lo:c.hi] = 0
                self.LOCAL[c.lo:c.hi] = 0
                self.set_state(slice(c.lo, c.hi), RUN)
            cl.expected = len(group) * self.T
            if self.hz is not None:
                self.hz.start_cluster(cl)

    def _pick_cta(self) -> CTA | None:
        counts = (self.RCOUNT.reshape(self.S, self.W) > 0).any(axis=1)
        best = None
        for s in np.flatnonzero(counts).tolist():
            c = self.ctas[s]
            if best is None or c.clock < best.clock:
                best = c
        return best

    def _next_warp(self, c: CTA) -> int | None:
        while c.woken:
            w = c.woken.pop()
            if self.RCOUNT[w] > 0:
                c.wq = 0
                return w
        w = c.cur_warp
        quantum = self.opts.stall_quantum if self.stall_mode else self.opts.warp_quantum
        if self.RCOUNT[w] > 0 and c.wq < quantum:
            return w
        for k in range(1, self.W + 1):
            g = c.w0 + (w - c.w0 + k) % self.W
            if self.RCOUNT[g] > 0:
                c.wq = 0
                return g
        return None

    def _run_cta(self, c: CTA) -> None:
        self.cur = c
        PC, STATE, RCOUNT = self.PC, self.STATE, self.RCOUNT
        umin, umax = np.minimum.reduce, np.maximum.reduce
        for _ in range(self.opts.cta_quantum):
            w = self._next_warp(c)
            if w is None:
                return
            c.cur_warp = w
            c.wq += 1
            lo, hi = self.wlo[w], self.whi[w]
            pcs = PC[lo:hi]
            if RCOUNT[w] == hi - lo:
                p = int(umin(pcs))
                if umax(pcs) == p:
                    m: Any = slice(lo, hi)
                else:
                    m = _compact(np.flatnonzero(pcs == p) + lo)
            else:
                run = STATE[lo:hi] == RUN
                p = int(umin(pcs[run]))
                m = _compact(np.flatnonzero(run & (pcs == p)) + lo)
            self._run_block(p, m, c)
            if not c.alive:
                return

    def _run_block(self, p: int, m: Any, c: CTA) -> None:
        self.block_pc = p
        end = self.block_end[p]
        body = self.blocks.get(p)
        if body is None:
            body = tuple(self.ops[p:end])
            self.blocks[p] = body
        i = p
        try:
            for op in body:
                op(m, c)
                i += 1
            r = self.ops[end](m, c)
        except MemoryFault as e:
            raise ExecFault(e.error, e.detail, self.where(i, m, c)) from None
        except ExecFault as e:
            if not e.where:
                e.where = self.where(i, m, c)
            raise
        except (UnsupportedInstruction, EmulationLimit) as e:
            raise type(e)(f"{e} {self.where(i, m, c)}") from None
        except (Deadlock, TimeoutError):
            raise
        except Exception as e:  # a gap in the emulator, not the student's mistake: say so, without a traceback
            raise EmulationLimit(f"the executor does not support `{self.prog.instrs[i].opcode}` as this kernel uses it "
                                 f"({type(e).__name__}: {e}): a gap in the executor, not a mistake in the kernel; "
                                 f"please report it {self.where(i, m, c)}") from None
        if r is None:
            self.PC[m] = end + 1
        c.clock += end - p + 1
        self.steps += end - p + 1
        c.last_pc, c.last_m = p, m
        self.dispatches += 1
        self.since_progress += 1
        if self.since_progress > self.opts.livelock_blocks:
            self._livelock(c, m, i)
        elif self._watch is not None:
            self._watch_len += 1
            if self.since_progress < self._watch_base + self._watch_len:  # a store or a barrier phase ended it
                self._watch = None
            else:
                self._watch_step(c, m, p)
        elif self.since_progress % self.opts.spin_blocks == 0:
            self._start_watch(self.since_progress - 1)

    # ------------------------------------------------------------------ where
    def where(self, pc: int, m: Any, c: CTA) -> str:
        """'at line 12 of the cell (PTX line 80: st.global.f32 ...), block (0,0) thread 5'."""
        ins = self.prog.instrs[pc]
        idx = _indices(m)
        t = int(self.TLIN[idx[0]]) if len(idx) else 0
        cell = f"line {ins.cell_line} of the CUDA source, " if ins.cell_line else ""
        return f"(at {cell}PTX line {ins.line}: `{ins.text}`; block {c.label}, thread {t})"

    def instr(self, pc: int) -> Instr:
        return self.prog.instrs[pc]

    # ------------------------------------------------------------------ deadlocks
    def _stall(self) -> None:
        if self.hz is not None and not self.stall_mode:
            self.hz.stalled()
        regs = [p for p in self.parked if p.kind == "setmaxnreg"]
        if regs:  # registers that never come: the root cause, whoever else waits behind it
            raise Deadlock(self.deadlock_sentence(regs))
        polls = [p for p in self.parked if p.kind == "mbar"]
        if not self.stall_mode and polls:
            self.stall_mode = True
            self.stall_snapshot = list(self.parked)
            for p in polls:
                self.wake(p.obj)
            for c in self.ctas:  # round robin from each CTA's first warp: the lowest thread gives up first
                c.woken.clear()
                c.cur_warp, c.wq = c.w0, 0
            return
        raise Deadlock(self.deadlock_sentence(self.stall_snapshot or self.parked))

    def _livelock(self, c: CTA, m: Any, pc: int) -> None:
        """No store and no barrier phase for ``livelock_blocks`` blocks. First the machine enters stall mode (the
        header's bounded waits give up and report); after another such stretch it watches every warp for a repeat
        of its own state (program counters, registers, local memory): memory did not change, so a warp whose state
        repeats loops forever. A warp whose state keeps changing (a long computation, a loop that counts) is no
        spin: it runs on, up to the step limit."""
        self.since_progress = 0
        if not self.stall_mode:
            self.stall_mode = True
            self.stall_snapshot = list(self.parked)
            self._spinner = (c, _indices(m), pc)
            for p in [p for p in self.parked if p.kind == "mbar"]:
                self.wake(p.obj)
            return
        self._start_watch(0)

    def _start_watch(self, base: int) -> None:
        """(Re)start watching every warp for a repeat of its state: warp -> its state when first seen in the stretch.
        A spin on memory nothing writes repeats within a few of each warp's turns, so the watch starts early (every
        ``spin_blocks`` blocks without progress), without stall mode: a warp's state repeating exactly, memory
        unchanged and nothing in flight, is a proof, whatever the clock says. ``base``: ``since_progress`` when the
        watch starts (it ends when a store or a barrier phase resets the count)."""
        self._watch = {}
        self._watch_base = base
        self._watch_len = 0
        self._cycling: set[int] = set()

    def _warp_state(self, w: int) -> tuple:
        lo, hi = self.wlo[w], self.whi[w]
        return (self.PC[lo:hi].tobytes(), self.STATE[lo:hi].tobytes(),
                *(b[:, lo:hi].tobytes() for b in self.banks.values()), self.LOCAL[lo:hi].tobytes(),
                self.DEPTH[lo:hi].tobytes())

    def _watch_step(self, c: CTA, m: Any, pc: int) -> None:
        """One block ran in a stretch without progress: note whether its warp's state repeated. The watch lasts
        a tenth of ``livelock_blocks`` (a spin repeats within a few blocks of each warp's turns); a warp that has
        not repeated by then is computing, and the machine stops watching until the next stretch."""
        if self._watch_len > max(self.opts.livelock_blocks // 10, 64):
            self._watch = None
            return
        idx = _indices(m)
        w = int(self.WARPG[idx[0]])
        first = self._watch.get(w)
        if first is None:
            self._watch[w] = self._warp_state(w)
            return
        if first[0] != self.PC[self.wlo[w]:self.whi[w]].tobytes() or first != self._warp_state(w):
            return
        self._cycling.add(w)
        if self.events or not self._cycling.issuperset(np.flatnonzero(self.RCOUNT > 0).tolist()):
            return
        snap = self.stall_snapshot or self.parked
        if any(p.kind == "mbar" for p in snap):
            raise Deadlock(self.deadlock_sentence(snap))
        c0, idx0, pc0 = getattr(self, "_spinner", (c, idx, pc))
        ins = self.prog.instrs[pc0]
        t = int(self.TLIN[idx0[0]])
        cell = f"line {ins.cell_line} of the CUDA source" if ins.cell_line else f"PTX line {ins.line}"
        raise Deadlock(f"deadlock: block {c0.label} warp {t // 32} (thread {t}) spins forever at {cell} "
                       f"(`{ins.text}`): the value it waits for is never written. Check who should write it "
                       "and that every block it waits for can run at the same time.")

    def deadlock_sentence(self, parks: list[Park]) -> str:
        from helpers.hopper.faults import StuckRecord

        order = {"mbar": 0, "setmaxnreg": 1, "bar": 2, "cluster": 3, "wgmma": 4, "bulk": 5, "sync": 6}
        parks = sorted(parks, key=lambda p: (order.get(p.kind, 9), p.cta.slot, int(p.idx[0])))
        if not parks:
            return "deadlock: no thread can run and nothing is in flight"
        p = parks[0]
        t = int(self.TLIN[p.idx[0]])
        if p.kind == "mbar":
            rec = StuckRecord(p.info.get("parity", 0), p.info.get("index", -1), p.info.get("addr", 0),
                              p.cta.ctaid, t, p.cta.rank, max(p.cta.clock - p.since, 1), p.info.get("label", ""))
            return rec.sentence()
        who = f"deadlock: block {p.cta.label} warp {t // 32} (thread {t})"
        what = p.info.get("what", "waits")
        return f"{who} {what() if callable(what) else what}"


# ------------------------------------------------------------------------------------------- warp collectives
def _members(mach: Machine, m: Any, c: CTA, mask: int) -> np.ndarray:
    """Global thread indices of the warp of ``m`` named by ``mask`` that have not exited."""
    idx = _indices(m)
    w = int(mach.WARPG[idx[0]])
    lo, hi = mach.wlo[w], mach.whi[w]
    lanes = np.arange(hi - lo)
    sel = ((mask >> lanes) & 1).astype(bool)
    t = lanes[sel] + lo
    return t[mach.STATE[t] != EXIT]


def collective(mach: Machine, m: Any, c: CTA, pc: int, mask: int) -> Any:
    """The group that executes a warp-collective instruction now, or None when lanes of ``mask`` are still on
    their way (the arriving lanes park until the last one comes)."""
    if isinstance(m, slice) and m.stop - m.start == 32 and mask == 0xFFFFFFFF:
        return m
    idx = _indices(m)
    need = _members(mach, m, c, mask)
    key = ("sync", int(mach.WARPG[idx[0]]), pc)
    waiting = [p for p in mach.parked if p.obj == key]
    have = np.union1d(idx, np.concatenate([p.idx for p in waiting]) if waiting else idx)
    if np.isin(need, have).all():
        if waiting:
            mach.parked = [p for p in mach.parked if p.obj != key]
            for p in waiting:
                mach.set_state(p.idx, RUN)
        return have if len(have) != 32 else slice(int(have[0]), int(have[0]) + 32)
    mach.park(idx, c, key, "sync", pc, retry=True,
              what="waits in a warp-synchronous instruction (shfl/vote/bar.warp.sync) for lanes of its member mask "
                   "that never arrive (they exited or took another path).")
    return None


# ------------------------------------------------------------------------------------------- helpers
def _indices(m: Any) -> np.ndarray:
    if isinstance(m, slice):
        return np.arange(m.start, m.stop)
    return np.asarray(m)


def _compact(idx: np.ndarray) -> Any:
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def subset(m: Any, sel: np.ndarray) -> Any:
    """The threads of ``m`` where ``sel`` is True (a slice when they are contiguous)."""
    if isinstance(m, slice):
        return _compact(np.flatnonzero(sel) + m.start)
    return _compact(np.asarray(m)[sel])


def count(m: Any) -> int:
    return m.stop - m.start if isinstance(m, slice) else len(m)


# ------------------------------------------------------------------------------------------- binder
class Binder:
    """What a decoder sees: the instruction, its qualifiers, and readers/writers for its operands."""

    def __init__(self, mach: Machine, pc: int, ins: Instr, func: str) -> None:
        self.mach = mach
        self.pc = pc
        self.ins = ins
        self.func = func
        self.parts = ins.opcode.split(".")
        self.base = self.parts[0]
        self.q = self.parts[1:]
        self.ops = ins.operands

    # ------------------------------------------------------------------ errors
    def fail(self, why: str = "") -> UnsupportedInstruction:
        extra = f": {why}" if why else ""
        e = UnsupportedInstruction(f"the executor does not support `{self.ins.opcode}`{extra}")
        e.pc = self.pc  # type: ignore[attr-defined]
        return e

    def only(self, allowed: set[str] | frozenset[str]) -> None:
        """Refuse any qualifier outside ``allowed`` (types are checked by the decoder)."""
        bad = [x for x in self.q if x not in allowed and x not in TYPE_BITS]
        if bad:
            raise self.fail(f"qualifier .{bad[0]} is not emulated")

    @property
    def types(self) -> list[str]:
        return [x for x in self.q if x in TYPE_BITS]

    def type(self, k: int = -1) -> str:
        ts = self.types
        if not ts:
            raise self.fail("no type qualifier")
        return ts[k]

    # ------------------------------------------------------------------ binding
    def bind(self) -> Callable:
        dec = DECODERS.get(self.base)
        ins = self.ins
        try:
            if dec is None:
                raise self.fail()
            op = dec(self)
        except UnsupportedInstruction as e:
            err = e

            def unsupported(m: Any, c: CTA) -> None:
                raise err

            unsupported.ctl = True  # type: ignore[attr-defined]
            unsupported.unsupported = err  # type: ignore[attr-defined]
            return unsupported
        if ins.guard is None:
            return op
        return self._guarded(op, ins.guard)

    def _guarded(self, op: Callable, guard: tuple[str, bool]) -> Callable:
        get = self.pred(Reg(guard[0]))
        neg = guard[1]
        pc = self.pc
        mach = self.mach
        if getattr(op, "ctl", False) and not getattr(op, "guard_aware", False):
            def g(m: Any, c: CTA) -> Any:
                sel = get(m)
                if neg:
                    sel = ~sel
                if sel.all():
                    return op(m, c)
                mach.PC[m] = pc + 1
                if sel.any():
                    op(subset(m, sel), c)
                return True

            g.ctl = True  # type: ignore[attr-defined]
            return g
        if getattr(op, "guard_aware", False):
            def ga(m: Any, c: CTA) -> Any:
                sel = get(m)
                return op(m, c, ~sel if neg else sel)

            ga.ctl = getattr(op, "ctl", False)  # type: ignore[attr-defined]
            return ga

        def p(m: Any, c: CTA) -> Any:
            sel = get(m)
            if neg:
                sel = ~sel
            if sel.all():
                return op(m, c)
            if sel.any():
                op(subset(m, sel), c)
            return None

        return p

    # ------------------------------------------------------------------ registers
    def reg(self, name: str) -> tuple[str, int, str]:
        r = self.mach.prog.regs.get((self.func, name))
        if r is None:
            raise self.fail(f"register {name} is not declared")
        return r

    def is_special(self, op: object) -> bool:
        return isinstance(op, Reg) and op.name.startswith(SPECIAL_PREFIXES) and \
            (self.func, op.name) not in self.mach.prog.regs

    def val(self, op: object, ty: str) -> Callable[[Any], Any]:
        """A reader for an operand as PTX type ``ty``: ``f(m) -> array or numpy scalar``."""
        dt = DT[ty]
        if isinstance(op, Reg):
            if self.is_special(op):
                return self.special(op.name, ty)
            bank, row, _rtype = self.reg(op.name)
            bdt = _BANK_DT[bank]
            if bank == "P":
                if ty != "pred":
                    raise self.fail(f"predicate {op.name} used as .{ty}")
                V = self.mach.view("P", bdt)
                return lambda m: V[row, m]
            if dt.itemsize == bdt.itemsize:
                V = self.mach.view(bank, dt)
                return lambda m: V[row, m]
            if dt.itemsize < bdt.itemsize:
                U = self.mach.view(bank, bdt)
                ud = _UNSIGNED[dt.itemsize]
                return lambda m: U[row, m].astype(ud).view(dt)
            raise self.fail(f"{op.name} is {bdt.itemsize * 8} bits wide, the instruction reads .{ty}")
        if isinstance(op, Neg):
            r = self.val(op.reg, "pred")
            return lambda m: ~r(m)
        if isinstance(op, Imm):
            k = imm_value(op.value, dt)
            return lambda m: k
        if isinstance(op, FImm):
            k = fimm_value(op, dt)
            return lambda m: k
        if isinstance(op, Sym):
            return self.symbol_value(op, dt)
        raise self.fail(f"operand {op!r} cannot be read as .{ty}")

    def pred(self, op: object) -> Callable[[Any], Any]:
        """A reader for a predicate operand (``%p`` or ``!%p``) giving a bool array."""
        if isinstance(op, Imm):
            k = bool(op.value)
            return lambda m: np.full(count(m), k)
        return self.val(op, "pred")

    def regref(self, op: object, ty: str, wider: bool = False) -> tuple[np.ndarray, int] | None:
        """(typed 2-D bank view, row) when ``op`` is a plain register as wide as ``ty`` (for fused ops). With
        ``wider``, an integer register wider than ``ty`` gives its own width with ``ty``'s signedness (what ld
        and st do: extend on load, truncate on store)."""
        if not isinstance(op, Reg) or self.is_special(op):
            return None
        r = self.mach.prog.regs.get((self.func, op.name))
        if r is None:
            return None
        bank, row, _ = r
        dt = DT[ty]
        if bank == "P":
            return None
        bw = _BANK_DT[bank].itemsize
        if bw == dt.itemsize:
            return self.mach.view(bank, dt), row
        if wider and bw > dt.itemsize and dt.kind in "iu":
            return self.mach.view(bank, _SIGNED[bw] if dt.kind == "i" else _UNSIGNED[bw]), row
        return None

    def fused_binary(self, fn: Any, ty: str) -> Callable | None:
        """``d = fn(a, b)`` as one closure over the register banks (no reader/writer calls), when d and a are
        plain registers and b a register or an immediate; None otherwise."""
        ops = self.ops
        if len(ops) != 3:
            return None
        d = self.regref(ops[0], ty)
        a = self.regref(ops[1], ty)
        if d is None or a is None:
            return None
        Vd, rd = d
        Va, ra = a
        bref = self.regref(ops[2], ty)
        if bref is not None:
            Vb, rb = bref

            def rr(m: Any, c: Any) -> None:
                if m.__class__ is slice:
                    fn(Va[ra, m], Vb[rb, m], out=Vd[rd, m])
                else:
                    Vd[rd, m] = fn(Va[ra, m], Vb[rb, m])

            return rr
        if isinstance(ops[2], Imm | FImm):
            k = self.val(ops[2], ty)(None)

            def ri(m: Any, c: Any) -> None:
                if m.__class__ is slice:
                    fn(Va[ra, m], k, out=Vd[rd, m])
                else:
                    Vd[rd, m] = fn(Va[ra, m], k)

            return ri
        return None

    def dst(self, op: object, ty: str) -> Callable[[Any, Any], None]:
        """A writer for a destination operand: ``f(m, value)`` with value of type ``ty`` (sink ``_``: nothing)."""
        from .parser import Sink

        if isinstance(op, Sink):
            return lambda m, v: None
        if not isinstance(op, Reg) or self.is_special(op):
            raise self.fail(f"cannot write to {op!r}")
        dt = DT[ty]
        bank, row, _rtype = self.reg(op.name)
        bdt = _BANK_DT[bank]
        if bank == "P":
            V = self.mach.view("P", bdt)

            def wp(m: Any, v: Any) -> None:
                V[row, m] = v

            return wp
        if dt.itemsize == bdt.itemsize:
            V = self.mach.view(bank, dt)

            def w(m: Any, v: Any) -> None:
                V[row, m] = v

            return w
        if dt.itemsize < bdt.itemsize:
            signed = dt.kind == "i"
            ext = _SIGNED[bdt.itemsize] if signed else _UNSIGNED[bdt.itemsize]
            V = self.mach.view(bank, ext)
            raw = _SIGNED[dt.itemsize] if signed else _UNSIGNED[dt.itemsize]

            def wx(m: Any, v: Any) -> None:
                V[row, m] = np.asarray(v).view(raw).astype(ext) if np.ndim(v) else np.asarray(v, dt).view(raw)

            return wx
        raise self.fail(f"{op.name} is {bdt.itemsize * 8} bits wide, the instruction writes .{ty}")

    # ------------------------------------------------------------------ special registers
    def special(self, name: str, ty: str) -> Callable[[Any], Any]:
        mach = self.mach
        dt = DT[ty]
        comp = {"x": 0, "y": 1, "z": 2}

        def per_thread(arr: np.ndarray) -> Callable[[Any], Any]:
            if dt == arr.dtype:
                return lambda m: arr[m]
            return lambda m: arr[m].astype(dt)

        def uniform(fn: Callable[[CTA], int]) -> Callable[[Any], Any]:
            return lambda m: dt.type(fn(mach.cur))

        base, _, c = name.partition(".")
        k = comp.get(c, 0)
        if base == "%tid":
            return per_thread(mach.TID[k])
        if base == "%ntid":
            return uniform(lambda cta: mach.block[k])
        if base == "%laneid":
            return per_thread(mach.LANE)
        if base == "%warpid":
            return per_thread(mach.WARPID)
        if base == "%nwarpid":
            return uniform(lambda cta: 64)
        if base == "%ctaid":
            return uniform(lambda cta: cta.ctaid[k])
        if base == "%nctaid":
            return uniform(lambda cta: mach.grid[k])
        if base == "%smid":
            sms = parts.current().sms
            return uniform(lambda cta: cta.slot % sms)
        if base == "%nsmid":
            sms = parts.current().sms
            return uniform(lambda cta: sms)
        if base == "%gridid":
            return uniform(lambda cta: 1)
        if base in ("%clock", "%clock64", "%clock_hi", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi"):
            shift = 32 if base in ("%clock_hi", "%globaltimer_hi") else 0

            at = self.pc

            def clock(m: Any) -> Any:
                cta = mach.cur
                t = cta.clock + max(at - mach.block_pc, 0)  # a block's instructions issue one cycle apart
                if mach.stall_mode:  # every read by a warp moves that warp's view of time on by a big step
                    w = int(mach.WARPG[m.start if isinstance(m, slice) else m[0]])
                    mach.stall_clock[w] = mach.stall_clock.get(w, 0) + mach.opts.stall_clock_step
                    t += mach.stall_clock[w]
                v = (t >> shift) & (0xFFFFFFFF if dt.itemsize == 4 else (1 << 64) - 1)
                return dt.type(v)

            return clock
        if base.startswith("%lanemask"):
            lane = mach.LANE.astype(np.uint64)
            kind = base[len("%lanemask_"):]
            vals = {"eq": np.uint64(1) << lane, "lt": (np.uint64(1) << lane) - np.uint64(1),
                    "le": (np.uint64(2) << lane) - np.uint64(1)}
            vals["ge"] = ~vals["lt"] & np.uint64(0xFFFFFFFF)
            vals["gt"] = ~vals["le"] & np.uint64(0xFFFFFFFF)
            if kind not in vals:
                raise self.fail(f"special register {name}")
            return per_thread(vals[kind].astype(np.uint32))
        if base == "%dynamic_smem_size":
            return uniform(lambda cta: mach.dyn_smem)
        if base in ("%total_smem_size", "%aggr_smem_size"):
            return uniform(lambda cta: mach.smem_bytes - SMEM_RESERVED)
        if base == "%cluster_ctarank":
            return uniform(lambda cta: cta.rank)
        if base == "%cluster_nctarank":
            return uniform(lambda cta: mach.csize)
        if base == "%cluster_ctaid":
            return uniform(lambda cta: cta.ctaid[k] % mach.cdims[k])
        if base == "%cluster_nctaid":
            return uniform(lambda cta: mach.cdims[k])
        if base == "%clusterid":
            return uniform(lambda cta: cta.ctaid[k] // mach.cdims[k])
        if base == "%nclusterid":
            return uniform(lambda cta: mach.grid[k] // mach.cdims[k])
        if base == "%is_explicit_cluster":
            return uniform(lambda cta: int(mach.explicit_cluster))
        raise self.fail(f"special register {name} is not emulated")

    # ------------------------------------------------------------------ symbols and addresses
    def symbol(self, name: str) -> Any:
        s = self.mach.prog.symbol(self.func, name)
        if s is None:
            raise self.fail(f"unknown symbol {name}")
        return s

    def symbol_value(self, op: Sym, dt: np.dtype) -> Callable[[Any], Any]:
        """The address of a symbol (``mov.u32 %r, smem_var``): shared, global, local, or parameter address."""
        s = self.symbol(op.name)
        mach = self.mach
        off = op.offset
        if s.kind == "shared":
            base = s.offset if s.offset >= 0 else mach.dyn_base
            return lambda m: dt.type(mach.cur.rank_bits + base + off)
        if s.kind in ("global", "const"):
            addr = mach.loaded.globals.base + s.offset + off
            return lambda m: dt.type(addr)
        if s.kind == "local":
            return lambda m: dt.type(s.offset + off)
        if s.kind == "kparam":
            addr = mach.param_alloc.base + s.offset + off
            return lambda m: dt.type(addr)
        raise self.fail(f"the address of {op.name} ({s.kind}) is not emulated")

    def addr(self, op: object) -> Callable[[Any], Any]:
        """A reader for an address operand ``[reg+off]`` / ``[sym+off]`` / ``[imm]`` as uint64 (scalar or array)."""
        from .parser import Addr

        if not isinstance(op, Addr):
            raise self.fail(f"expected an address, got {op!r}")
        off = np.uint64(op.offset & ((1 << 64) - 1))
        base = op.base
        if base is None:
            k = off
            return lambda m: k
        if isinstance(base, Sym):
            sv = self.symbol_value(Sym(base.name, 0), np.dtype(np.uint64))
            return lambda m: sv(m) + off
        bank, row, _ = self.reg(base.name)
        if bank == "D":
            V = self.mach.view("D", np.dtype(np.uint64))
            if op.offset == 0:
                return lambda m: V[row, m]
            return lambda m: V[row, m] + off
        if bank == "W":
            V = self.mach.view("W", np.dtype(np.uint32))
            return lambda m: V[row, m].astype(np.uint64) + off
        raise self.fail(f"address register {base.name} is not 32 or 64 bits")

    def space_of(self, op: object) -> str | None:
        """The state space a symbol operand lives in (for ld/st [sym])."""
        from .parser import Addr

        if isinstance(op, Addr) and isinstance(op.base, Sym):
            return self.symbol(op.base.name).kind
        return None


def imm_value(v: int, dt: np.dtype) -> Any:
    """An integer immediate as a numpy scalar of ``dt`` (wrapped to its width; value-converted for floats)."""
    if dt.kind == "f":
        return dt.type(v)
    if dt == np.dtype(bool):
        return bool(v)
    bits = dt.itemsize * 8
    u = v & ((1 << bits) - 1)
    return np.array(u, _UNSIGNED[dt.itemsize]).view(dt)[()]


def fimm_value(op: FImm, dt: np.dtype) -> Any:
    """A 0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX immediate as a numpy scalar of ``dt``."""
    if op.width == 32:
        f = np.array(op.bits, np.uint32).view(np.float32)[()]
    else:
        f = np.array(op.bits, np.uint64).view(np.float64)[()]
    if dt.kind == "f":
        if dt.itemsize * 8 == op.width:
            return f
        return dt.type(f)
    if dt.itemsize * 8 == op.width:  # a float bit pattern for a .b32 / .b64 operand
        return np.array(op.bits, _UNSIGNED[dt.itemsize]).view(dt)[()]
    return dt.type(f)


def shared_window(addr: Any) -> Any:
    """Shared address of a generic address in the shared window."""
    return (np.asarray(addr, np.uint64) - np.uint64(SHARED_WINDOW)).astype(np.uint64)


__all__ += ["subset", "count", "imm_value", "fimm_value", "RUN", "PARK", "EXIT", "IDLE", "Park", "Cluster",
            "LOCAL_WINDOW", "SHARED_WINDOW", "WINDOW_SIZE", "OFFSET_MASK", "shared_window"]
