"""Warp roles and pipelines: a small cooperative scheduler over a ring of shared-memory stages.

Each warp role is a Python generator function ``program(ctx)`` that *yields* commands made by its context
``ctx`` (a :class:`Role`): ``ctx.wait(bar, parity)``, ``ctx.arrive(bar)``, ``ctx.arrive_expect_tx(bar, n)``,
``ctx.expect_tx(bar, n)``, ``ctx.tma_load(stage, bar, nbytes)``, ``ctx.wgmma(stage)`` (issue, commit and wait:
the role waits for it), the asynchronous ``ctx.wgmma_async(stage)`` / ``ctx.commit_group()`` /
``ctx.wait_group(n)``, and ``ctx.work(t)``.

The :class:`Pipeline` owns ``stages`` full and empty :class:`~helpers.hopper.mbarrier.MBarrier` s and runs the roles in
simulated time: TMA copies land ``tma_latency`` after issue; every wgmma occupies the SM's tensor cores for
``wgmma_latency`` (the warpgroups of a block share them, so wgmmas of two consumers queue one after the other).
It records an event trace and raises:

- :class:`~helpers.hopper.mbarrier.Deadlock` when every unfinished role waits and nothing is in flight (the message
  lists who waits on which barrier, parity and phase);
- :class:`ReadBeforeFull` when a consumer reads a stage whose data has not landed (or that it already released);
- :class:`OverwriteBeforeEmpty` when a TMA copy targets a stage a consumer has not released yet, or that a wgmma
  still reads;
- :class:`ReleaseBeforeRetire` when a consumer arrives on a stage's empty barrier while a wgmma it issued on that
  stage has not retired (the silent corruption of an early release, made loud);
- :class:`PipelineError` for the rest (a role that ends with wgmma groups in flight, a stage out of range).

``standard_pipeline(...)`` builds the course's producer/consumer GEMM mainloop, ready to ``run()``;
``stage_and_phase(k, stages)`` is the ring arithmetic every role uses.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from .mbarrier import Deadlock, MBarrier, MBarrierError

__all__ = [
    "Event", "Pipeline", "Role", "PipelineError", "ReadBeforeFull", "OverwriteBeforeEmpty", "ReleaseBeforeRetire",
    "Deadlock", "stage_and_phase", "standard_pipeline", "producer_program", "consumer_program",
    "async_consumer_program", "arrival_counts", "verify_init", "prefetch_depth",
]


class PipelineError(MBarrierError):
    """A hazard in a pipeline (names the role, stage, time)."""


class ReadBeforeFull(PipelineError):
    """A consumer read a stage before its data landed."""


class OverwriteBeforeEmpty(PipelineError):
    """A copy was issued into a stage a consumer had not released."""


class ReleaseBeforeRetire(PipelineError):
    """A consumer released a stage (arrived on its empty barrier) while its wgmma still read it."""


def stage_and_phase(k: int, stages: int) -> tuple[int, int]:
    """Use number ``k`` of a ring of ``stages`` slots: the slot ``k % stages`` and the parity of that slot's
    barrier phase, ``(k // stages) & 1`` (it flips each time the ring wraps)."""
    return k % stages, (k // stages) & 1


@dataclass(frozen=True)
class Event:
    """One trace entry. ``kind`` is one of: arrive, expect_tx, arrive_expect_tx, wait (started waiting),
    wait_done (the wait returned), tma_issue, tma_landed, phase_complete, wgmma_issue (an asynchronous wgmma was
    issued), read (a wgmma started on the tensor cores; ``phase`` = the fill it reads, ``end`` = when the tensor
    cores are done with it), commit, wait_group, wait_group_done, retire (a wgmma group finished), release (a
    consumer arrived on the stage's empty barrier after reading it), work, done."""

    time: float
    role: str
    kind: str
    barrier: str | None = None
    stage: int | None = None
    phase: int | None = None
    detail: str = ""
    end: float | None = None


@dataclass
class _Cmd:
    op: str
    bar: MBarrier | None = None
    n: int = 0
    stage: int | None = None
    duration: float = 0.0
    label: str = ""


@dataclass
class _Mma:
    """One wgmma on the tensor cores: who issued it, the stage and fill it reads, when it runs."""

    role: str
    stage: int
    fill: int
    start: float
    end: float
    group: int | None = None  # commit-group number; None until committed
    done: bool = False


@dataclass
class Role:
    """The context a role program receives; its methods make the commands the program yields."""

    name: str
    pipeline: Pipeline
    consumer: bool = False
    _gen: Generator | None = field(default=None, repr=False)
    waiting: tuple[MBarrier, int, float] | None = None
    waiting_group: tuple[int, float] | None = None  # (n of wait_group, since)
    ready_at: float = 0.0
    finished: bool = False

    # the pipeline's barriers, for convenience
    @property
    def full(self) -> list[MBarrier]:
        return self.pipeline.full

    @property
    def empty(self) -> list[MBarrier]:
        return self.pipeline.empty

    @property
    def stages(self) -> int:
        """The number of stages of the ring."""
        return self.pipeline.stages

    @property
    def now(self) -> float:
        return self.pipeline.time

    def wait(self, bar: MBarrier, parity: int) -> _Cmd:
        """Block until the phase of ``bar`` with ``parity`` has completed (try_wait in a loop)."""
        return _Cmd("wait", bar, parity)

    def arrive(self, bar: MBarrier, count: int = 1) -> _Cmd:
        return _Cmd("arrive", bar, count)

    def expect_tx(self, bar: MBarrier, nbytes: int) -> _Cmd:
        return _Cmd("expect_tx", bar, nbytes)

    def arrive_expect_tx(self, bar: MBarrier, nbytes: int) -> _Cmd:
        return _Cmd("arrive_expect_tx", bar, nbytes)

    def tma_load(self, stage: int, bar: MBarrier, nbytes: int, label: str = "") -> _Cmd:
        """Issue a TMA copy of ``nbytes`` into ``stage``; it lands (``complete_tx`` on ``bar``) after the latency."""
        return _Cmd("tma", bar, nbytes, stage, label=label)

    def wgmma(self, stage: int, duration: float | None = None) -> _Cmd:
        """Read ``stage`` with a wgmma and wait for it (issue, commit, wait_group 0): the role continues when the
        tensor cores are done with it."""
        return _Cmd("wgmma", None, 0, stage, duration if duration is not None else -1.0)

    def wgmma_async(self, stage: int, duration: float | None = None) -> _Cmd:
        """Issue a wgmma reading ``stage`` and go on at once; it runs on the tensor cores when they are free and
        belongs to the next ``commit_group``."""
        return _Cmd("wgmma_async", None, 0, stage, duration if duration is not None else -1.0)

    def commit_group(self) -> _Cmd:
        """``wgmma.commit_group``: the wgmmas issued since the last commit form one group."""
        return _Cmd("commit")

    def wait_group(self, n: int) -> _Cmd:
        """``wgmma.wait_group n``: block until at most ``n`` of this role's committed groups are still running."""
        return _Cmd("wait_group", None, n)

    def work(self, duration: float, label: str = "") -> _Cmd:
        """Spend ``duration`` time units on something else."""
        return _Cmd("work", None, 0, None, duration, label)


class Pipeline:
    """A ring of ``stages`` shared-memory stages with ``full[i]`` / ``empty[i]`` barriers and warp roles.

    ``full_count`` / ``empty_count`` are the barriers' init counts (default: 1 producer arrival for full, one
    arrival per consumer role for empty). ``readers`` is how many consumer roles read each fill of a stage
    (default: every consumer, as when consumer warpgroups split one tile; 1 for ping-pong consumers that take
    turns). Times are abstract units (think cycles). ``negative_tx`` lets bytes land before they are expected,
    as on the H100. ``wgmma_drain`` is the time from the tensor cores finishing a wgmma's work to its group
    retiring (the depth of their pipeline): a role that waits for every group pays it each time, a role that
    keeps a group in flight hides it behind the next group's work.
    """

    def __init__(self, stages: int = 4, tma_latency: float = 500.0, wgmma_latency: float = 100.0,
                 issue_cost: float = 1.0, full_count: int | None = None, empty_count: int | None = None,
                 readers: int | None = None, negative_tx: bool = True, wgmma_drain: float = 0.0):
        if stages < 1:
            raise ValueError(f"stages = {stages}: a ring needs at least one stage")
        self.stages = stages
        self.tma_latency = float(tma_latency)
        self.wgmma_latency = float(wgmma_latency)
        self.issue_cost = float(issue_cost)
        self.wgmma_drain = float(wgmma_drain)
        self.readers = readers
        self._full_count = full_count
        self._empty_count = empty_count
        self.full = [MBarrier(f"full[{i}]", allow_negative_tx=negative_tx) for i in range(stages)]
        self.empty = [MBarrier(f"empty[{i}]", allow_negative_tx=negative_tx) for i in range(stages)]
        self.roles: list[Role] = []
        self.trace: list[Event] = []
        self.time = 0.0
        self._timers: list[tuple[float, int, str, object]] = []  # (time, seq, kind, payload)
        self._seq = 0
        self._inflight = [0] * stages
        self._read_gen: dict[tuple[str, int], int] = {}
        self._released_gen: dict[tuple[str, int], int] = {}
        self._fills: dict[tuple[int, int], dict[str, bool]] = {}  # (stage, fill) -> {reader: released?}
        self._programs: list[Callable] = []
        self._tensor_free = 0.0
        self._mmas: list[_Mma] = []  # wgmmas not yet retired
        self._uncommitted: dict[str, list[_Mma]] = {}
        self._groups: dict[str, list[list[_Mma]]] = {}  # role -> committed groups still running, oldest first
        self._group_no: dict[str, int] = {}
        self.tensor_busy = 0.0

    # ------------------------------------------------------------------ setup
    def add_role(self, name: str, program: Callable[[Role], Generator], consumer: bool = False) -> Role:
        """Register a warp role running ``program(ctx)``; mark readers of stages as ``consumer=True``."""
        role = Role(name, self, consumer)
        self.roles.append(role)
        self._programs.append(program)
        return role

    def barrier(self, name: str, count: int = 1) -> MBarrier:
        """An extra mbarrier (initialised with ``count``) that roles may wait on and arrive at, e.g. the turn
        barriers that order ping-pong consumers."""
        bar = MBarrier(name)
        bar.init(count)
        bar.on_complete.append(self._on_complete)
        return bar

    def _log(self, role: str, kind: str, bar: MBarrier | None = None, stage: int | None = None,
             phase: int | None = None, detail: str = "", end: float | None = None) -> None:
        self.trace.append(Event(self.time, role, kind, bar.name if bar else None, stage, phase, detail, end))

    def _stage_of(self, bar: MBarrier) -> tuple[str, int] | None:
        for i in range(self.stages):
            if bar is self.full[i]:
                return "full", i
            if bar is self.empty[i]:
                return "empty", i
        return None

    def _timer(self, t: float, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._timers, (t, self._seq, kind, payload))

    # ------------------------------------------------------------------ running
    def run(self, max_time: float = 1e12) -> list[Event]:
        """Run every role to completion; return the trace. Raises on deadlock and hazards."""
        consumers = [r for r in self.roles if r.consumer]
        fc = self._full_count if self._full_count is not None else 1
        ec = self._empty_count if self._empty_count is not None else max(1, len(consumers))
        for i in range(self.stages):
            if not self.full[i].initialized:
                self.full[i].init(fc)
            if not self.empty[i].initialized:
                self.empty[i].init(ec)
            for bar in (self.full[i], self.empty[i]):
                bar.on_complete.append(self._on_complete)
        for role, prog in zip(self.roles, self._programs, strict=True):
            role._gen = prog(role)
        while True:
            runnable = [r for r in self.roles if not r.finished and r.waiting is None and r.waiting_group is None]
            t_role = min((r.ready_at for r in runnable), default=None)
            t_timer = self._timers[0][0] if self._timers else None
            if t_role is None and t_timer is None:
                blocked = [r for r in self.roles if not r.finished]
                if blocked:
                    raise Deadlock(self._deadlock_message(blocked))
                return self.trace
            if t_timer is not None and (t_role is None or t_timer <= t_role):
                self._fire()
                continue
            self.time = max(self.time, t_role)
            if self.time > max_time:
                raise PipelineError(f"simulation passed max_time = {max_time}")
            role = min(runnable, key=lambda r: (r.ready_at, self.roles.index(r)))
            self._step(role)

    def _fire(self) -> None:
        t, _, kind, payload = heapq.heappop(self._timers)
        self.time = max(self.time, t)
        if kind == "land":
            bar, nbytes, stage, label, who = payload
            self._inflight[stage] -= 1
            self._log(who, "tma_landed", bar, stage, bar.phase, f"{nbytes} bytes {label}".strip())
            bar.complete_tx(nbytes)
        elif kind == "mma_start":
            m = payload
            self._log(m.role, "read", None, m.stage, m.fill, end=m.end - self.wgmma_drain)
        elif kind == "mma_end":
            self._mma_done(payload)

    def _mma_done(self, m: _Mma) -> None:
        m.done = True
        self._mmas.remove(m)
        groups = self._groups.get(m.role, [])
        while groups and all(x.done for x in groups[0]):
            g = groups.pop(0)
            self._log(m.role, "retire", None, g[-1].stage, g[-1].group, f"group {g[-1].group}: {len(g)} wgmma(s)")
        for r in self.roles:
            if r.name == m.role and r.waiting_group is not None and len(groups) <= r.waiting_group[0]:
                self._log(r.name, "wait_group_done", None, None, None,
                          f"waited {self.time - r.waiting_group[1]:g}")
                r.waiting_group = None
                r.ready_at = self.time

    def _on_complete(self, bar: MBarrier, phase: int) -> None:
        self._log("-", "phase_complete", bar, self._stage_index(bar), phase)
        for r in self.roles:
            if r.waiting is not None and r.waiting[0] is bar and bar.test_wait(r.waiting[1]):
                self._log(r.name, "wait_done", bar, self._stage_index(bar), phase,
                          f"waited {self.time - r.waiting[2]:g}")
                r.waiting = None
                r.ready_at = self.time

    def _stage_index(self, bar: MBarrier) -> int | None:
        s = self._stage_of(bar)
        return s[1] if s else None

    def _step(self, role: Role) -> None:
        try:
            cmd = next(role._gen)
        except StopIteration:
            self._finish(role)
            return
        if not isinstance(cmd, _Cmd):
            raise PipelineError(f"role {role.name!r} yielded {cmd!r}; yield the commands its ctx makes "
                                "(ctx.wait(...), ctx.arrive(...), ctx.tma_load(...), ...)")
        op, bar = cmd.op, cmd.bar
        stage = cmd.stage if cmd.stage is not None else (self._stage_index(bar) if bar is not None else None)
        if op == "wait":
            if bar.test_wait(cmd.n):
                self._log(role.name, "wait_done", bar, stage, bar.phase, "no wait")
                role.ready_at = self.time
            else:
                self._log(role.name, "wait", bar, stage, bar.phase, f"parity {cmd.n}")
                role.waiting = (bar, cmd.n, self.time)
            return
        if op in ("arrive", "arrive_expect_tx", "expect_tx"):
            kind = self._stage_of(bar)
            if op == "arrive" and kind and kind[0] == "empty" and role.consumer:
                self._release(role, kind[1], bar)
            phase = bar.phase
            self._log(role.name, op, bar, stage, phase, f"{cmd.n}" if op != "arrive" else "")
            if op == "arrive":
                bar.arrive(cmd.n)
            elif op == "expect_tx":
                bar.expect_tx(cmd.n)
            else:
                bar.arrive_expect_tx(cmd.n)
            role.ready_at = self.time + self.issue_cost
            return
        if op == "tma":
            self._check_overwrite(role, cmd.stage, bar)
            self._inflight[cmd.stage] += 1
            self._log(role.name, "tma_issue", bar, cmd.stage, bar.phase, f"{cmd.n} bytes {cmd.label}".strip(),
                      end=self.time + self.tma_latency)
            self._timer(self.time + self.tma_latency, "land", (bar, cmd.n, cmd.stage, cmd.label, role.name))
            role.ready_at = self.time + self.issue_cost
            return
        if op in ("wgmma", "wgmma_async"):
            m = self._issue_mma(role, cmd.stage, cmd.duration)
            if op == "wgmma":  # issue + commit + wait_group 0, as one step
                m.group = -1
                role.ready_at = m.end
            else:
                self._log(role.name, "wgmma_issue", None, cmd.stage, m.fill, end=m.end)
                self._uncommitted.setdefault(role.name, []).append(m)
                role.ready_at = self.time + self.issue_cost
            return
        if op == "commit":
            pending = self._uncommitted.pop(role.name, [])
            no = self._group_no.get(role.name, 0)
            self._group_no[role.name] = no + 1
            for m in pending:
                m.group = no
            if pending and not all(m.done for m in pending):
                self._groups.setdefault(role.name, []).append(pending)
            elif pending:
                self._log(role.name, "retire", None, pending[-1].stage, no, f"group {no}: {len(pending)} wgmma(s)")
            self._log(role.name, "commit", None, pending[-1].stage if pending else None, no,
                      f"group {no}: {len(pending)} wgmma(s)")
            role.ready_at = self.time + self.issue_cost
            return
        if op == "wait_group":
            running = self._groups.get(role.name, [])
            if len(running) <= cmd.n:
                self._log(role.name, "wait_group_done", None, None, None, f"wait_group {cmd.n}: no wait")
                role.ready_at = self.time
            else:
                self._log(role.name, "wait_group", None, None, None, f"wait_group {cmd.n}: {len(running)} running")
                role.waiting_group = (cmd.n, self.time)
            return
        if op == "work":
            self._log(role.name, "work", None, None, None, cmd.label, end=self.time + cmd.duration)
            role.ready_at = self.time + cmd.duration
            return
        raise PipelineError(f"unknown command {op!r}")

    def _finish(self, role: Role) -> None:
        left = [m for m in self._mmas if m.role == role.name]
        if left:
            raise PipelineError(f"t={self.time:g}: role {role.name!r} ended with {len(left)} wgmma(s) still running "
                                f"(on stage(s) {sorted({m.stage for m in left})}): drain with wait_group(0) before "
                                "the end, and release the stages it read.")
        role.finished = True
        self._log(role.name, "done")

    def _issue_mma(self, role: Role, stage: int, duration: float) -> _Mma:
        gen = self._check_read(role, stage)
        self._read_gen[(role.name, stage)] = gen
        self._fills.setdefault((stage, gen), {}).setdefault(role.name, False)
        dur = self.wgmma_latency if duration < 0 else duration
        start = max(self.time, self._tensor_free)
        m = _Mma(role.name, stage, gen, start, start + dur + self.wgmma_drain)
        self._tensor_free = start + dur
        self.tensor_busy += dur
        self._mmas.append(m)
        self._timer(start, "mma_start", m)
        self._timer(m.end, "mma_end", m)
        return m

    def _release(self, role: Role, stage: int, bar: MBarrier) -> None:
        reading = [m for m in self._mmas if m.role == role.name and m.stage == stage]
        if reading:
            m = reading[0]
            state = "still waiting for the tensor cores" if m.start > self.time else "still running"
            group = "not committed yet" if m.group is None else f"in group {m.group}"
            raise ReleaseBeforeRetire(
                f"t={self.time:g}: role {role.name!r} arrives on empty[{stage}] (releases stage {stage}) while its "
                f"wgmma on that stage ({group}) is {state} (it ends at t={m.end:g}): the producer may now overwrite "
                f"the tile under the tensor cores. Release a stage only after wait_group has retired the wgmma that "
                f"read it.")
        key = (role.name, stage)
        if self._read_gen.get(key, -1) > self._released_gen.get(key, -1):
            gen = self._read_gen[key]
            self._released_gen[key] = gen
            self._fills.setdefault((stage, gen), {})[role.name] = True
            self._log(role.name, "release", bar, stage, gen)

    def _check_read(self, role: Role, stage: int) -> int:
        """The fill a consumer reads (the latest that landed in the stage); raise if it is not there."""
        if not 0 <= stage < self.stages:
            raise PipelineError(f"role {role.name!r} reads stage {stage}; the ring has stages 0..{self.stages - 1}")
        full = self.full[stage]
        gen = full.phase - 1
        released = self._released_gen.get((role.name, stage), -1)
        why = ""
        if self._inflight[stage]:
            why = f"a TMA copy into it is still in flight ({self._inflight[stage]} pending)"
            gen = full.phase
        elif gen < 0:
            why = f"nothing has landed in it yet (full[{stage}] has completed no phase)"
            gen = 0
        elif gen <= released:
            why = (f"the data there is fill {gen}, which it already read and released; its next fill has not "
                   f"landed (full[{stage}] has completed {full.phase} phase(s))")
            gen = released + 1
        if why:
            raise ReadBeforeFull(f"t={self.time:g}: role {role.name!r} reads stage {stage} but {why}: wait on "
                                 f"full[{stage}] with parity {gen & 1} before reading it.")
        return gen

    def _check_overwrite(self, role: Role, stage: int, bar: MBarrier) -> None:
        if not 0 <= stage < self.stages:
            raise PipelineError(f"role {role.name!r} copies into stage {stage}; the ring has stages "
                                f"0..{self.stages - 1}")
        if bar is not self.full[stage]:
            raise PipelineError(f"t={self.time:g}: role {role.name!r} copies into stage {stage} but names "
                                f"{getattr(bar, 'name', bar)!r} as the barrier the bytes complete on: the consumers "
                                f"of stage {stage} wait on full[{stage}], which would never see them.")
        running = [m for m in self._mmas if m.stage == stage]
        fill = bar.phase  # the copy belongs to the fill whose phase is in progress
        if running:
            m = running[0]
            raise OverwriteBeforeEmpty(
                f"t={self.time:g}: role {role.name!r} issues a TMA copy into stage {stage} (fill {fill}) but consumer "
                f"{m.role!r} is still reading it (its wgmma runs until t={m.end:g}): the new tile would land under "
                f"the tensor cores. The consumer releases the stage (arrives on empty[{stage}]) too early, or the "
                f"producer does not wait on empty[{stage}].")
        if fill == 0:
            return
        prev = fill - 1
        readers = self._fills.get((stage, prev), {})
        consumers = [r.name for r in self.roles if r.consumer]
        want = len(consumers) if self.readers is None else self.readers
        holding = [name for name, released in readers.items() if not released]
        if holding or len(readers) < want:
            if holding:
                who = f"consumer {holding[0]!r} is still reading it"
            else:
                missing = [c for c in consumers if c not in readers]
                who = (f"consumer {missing[0]!r} has not read and released fill {prev}" if self.readers is None
                       else f"only {len(readers)} of the {want} consumer(s) that must read fill {prev} did")
            raise OverwriteBeforeEmpty(
                f"t={self.time:g}: role {role.name!r} issues a TMA copy into stage {stage} (fill {fill}) but {who}: "
                f"wait on empty[{stage}] with parity {prev & 1} first.")

    def _deadlock_message(self, blocked: list[Role]) -> str:
        lines = [f"t={self.time:g}: deadlock: every unfinished role waits and nothing is in flight."]
        for r in blocked:
            if r.waiting is None:
                lines.append(f"  {r.name}: not waiting (?)")
                continue
            bar, parity, since = r.waiting
            lines.append(f"  {r.name} waits since t={since:g} on {bar.name} for parity {parity}; {bar.name} is in "
                         f"phase {bar.phase} (parity {bar.parity}) with {bar.pending_arrivals}/{bar.expected} "
                         f"arrivals and {bar.tx_count} tx bytes missing")
        return "\n".join(lines)

    # ------------------------------------------------------------------ trace helpers
    def events(self, kind: str | None = None, role: str | None = None, stage: int | None = None) -> list[Event]:
        """Filter the trace."""
        return [e for e in self.trace if (kind is None or e.kind == kind) and (role is None or e.role == role)
                and (stage is None or e.stage == stage)]

    @property
    def elapsed(self) -> float:
        """Time of the last event."""
        return self.trace[-1].time if self.trace else 0.0

    @property
    def tensor_utilization(self) -> float:
        """Fraction of the elapsed time the tensor cores were busy."""
        return self.tensor_busy / self.elapsed if self.elapsed else 0.0


def producer_program(k_steps: int, stages: int, bytes_a: int, bytes_b: int) -> Callable[[Role], Generator]:
    """The course's producer: for each K step wait until the stage is empty, expect its bytes, issue two TMA
    copies (A and B tiles) that complete on the stage's full barrier."""

    def program(ctx: Role):
        for k in range(k_steps):
            s, ph = stage_and_phase(k, stages)
            yield ctx.wait(ctx.empty[s], ph ^ 1)  # a fresh barrier counts its "previous" phase as complete
            yield ctx.arrive_expect_tx(ctx.full[s], bytes_a + bytes_b)
            yield ctx.tma_load(s, ctx.full[s], bytes_a, f"A k={k}")
            yield ctx.tma_load(s, ctx.full[s], bytes_b, f"B k={k}")

    return program


def consumer_program(k_steps: int, stages: int, wgmmas_per_stage: int = 4) -> Callable[[Role], Generator]:
    """The course's first consumer: wait until the stage is full, run its wgmmas and wait for them, release."""

    def program(ctx: Role):
        for k in range(k_steps):
            s, ph = stage_and_phase(k, stages)
            yield ctx.wait(ctx.full[s], ph)
            for _ in range(wgmmas_per_stage):
                yield ctx.wgmma(s)
            yield ctx.arrive(ctx.empty[s])

    return program


def async_consumer_program(k_steps: int, stages: int, wgmmas_per_stage: int = 4,
                           in_flight: int = 1) -> Callable[[Role], Generator]:
    """The overlapped consumer: issue the stage's wgmmas as one group, keep ``in_flight`` groups running
    (``wait_group in_flight``), release the stage whose group just retired; drain with ``wait_group 0``."""

    def program(ctx: Role):
        for k in range(k_steps):
            s, ph = stage_and_phase(k, stages)
            yield ctx.wait(ctx.full[s], ph)
            for _ in range(wgmmas_per_stage):
                yield ctx.wgmma_async(s)
            yield ctx.commit_group()
            yield ctx.wait_group(in_flight)
            if k >= in_flight:  # the group of use k - in_flight has retired: its stage may be refilled
                yield ctx.arrive(ctx.empty[stage_and_phase(k - in_flight, stages)[0]])
        yield ctx.wait_group(0)
        for k in range(max(0, k_steps - in_flight), k_steps):
            yield ctx.arrive(ctx.empty[stage_and_phase(k, stages)[0]])

    return program


def standard_pipeline(k_steps: int = 128, stages: int = 4, consumers: int = 1, tma_latency: float = 500.0,
                      wgmma_latency: float = 100.0, wgmmas_per_stage: int = 4, tile_m: int = 64, tile_n: int = 64,
                      tile_k: int = 64, element_bytes: int = 2, overlap: bool = False) -> Pipeline:
    """A producer warp and ``consumers`` consumer warpgroups running a GEMM mainloop over a ring of ``stages``.

    Each stage holds an A tile (tile_m x tile_k) and a B tile (tile_n x tile_k); ``full`` barriers expect one
    producer arrival plus the tiles' bytes, ``empty`` barriers one arrival per consumer. With ``overlap`` the
    consumers keep one wgmma group in flight and release each stage one step later
    (:func:`async_consumer_program`); otherwise they wait for every wgmma (:func:`consumer_program`).
    """
    p = Pipeline(stages, tma_latency, wgmma_latency)
    ba, bb = tile_m * tile_k * element_bytes, tile_n * tile_k * element_bytes
    p.add_role("producer", producer_program(k_steps, stages, ba, bb))
    for c in range(consumers):
        prog = (async_consumer_program(k_steps, stages, wgmmas_per_stage) if overlap
                else consumer_program(k_steps, stages, wgmmas_per_stage))
        p.add_role(f"consumer{c}" if consumers > 1 else "consumer", prog, consumer=True)
    return p


# ---------------------------------------------------------------------------------------------------------
# arrival counts derived from the roles, and checked before the first use
# ---------------------------------------------------------------------------------------------------------
def arrival_counts(consumer_warpgroups: int, cluster: tuple[int, int] = (1, 1), multicast: str = "AB",
                   producers: int = 1) -> tuple[int, int]:
    """The counts a TMA pipeline's barriers need, derived from who arrives (``(full, empty)``).

    FULL: one arrival per producer thread that announces the stage's bytes (``arrive.expect_tx``); the copies
    complete the bytes, not arrivals. EMPTY: one elected thread of every consumer warpgroup that reads the stage,
    in every block whose copies land in it. With a cluster of ``(cm, cn)`` blocks, B is shared along M (``cm``
    blocks receive the same B slice) and A along N (``cn`` blocks); a block's stage is filled by itself and by
    the blocks of its cluster column (``multicast`` holds "B") and row ("A"), so the consumers of all those
    blocks must release it before any of them refills it: ``(1 + (cm − 1)·[B] + (cn − 1)·[A]) ×`` warpgroups.
    With both operands multicast this is the familiar ``(cm + cn − 1) × warpgroups``."""
    cm, cn = cluster
    if consumer_warpgroups < 1 or producers < 1 or cm < 1 or cn < 1:
        raise ValueError("warpgroups, producers and cluster sizes are at least 1")
    blocks = 1 + (cm - 1) * ("B" in multicast) + (cn - 1) * ("A" in multicast)
    return producers, blocks * consumer_warpgroups


def verify_init(stages: int, full_count: int, empty_count: int, *, consumer_warpgroups: int,
                cluster: tuple[int, int] = (1, 1), multicast: str = "AB", producers: int = 1,
                named_barriers: dict[int, int] | None = None) -> list[str]:
    """Every rule a pipeline's set-up breaks, in words (empty when it is sound): at least one stage; the FULL and
    EMPTY counts equal what the roles will do (:func:`arrival_counts`); and for each named barrier ``{id:
    threads}`` an id in 0..15 and a thread count that is a positive multiple of the warp size (``bar.sync``
    counts whole warps). A count that is too low lets a phase complete before every role arrived; one that is too
    high never completes: both are bugs no run reports until the timing is unlucky, so check them at init."""
    problems = []
    if stages < 1:
        problems.append(f"{stages} stages: a ring needs at least one")
    want_full, want_empty = arrival_counts(consumer_warpgroups, cluster, multicast, producers)
    for name, got, want, who in (
            ("FULL", full_count, want_full, f"{producers} producer thread(s) announcing the bytes"),
            ("EMPTY", empty_count, want_empty, f"{consumer_warpgroups} consumer warpgroup(s) in each of "
                                               f"{want_empty // consumer_warpgroups} block(s) sharing the stage")):
        if got != want:
            effect = ("the phase completes before every arrival is in (a stage used too early)" if got < want
                      else "the phase never completes (a deadlock)")
            problems.append(f"{name} initialised with {got}, but {want} arrive per phase ({who}): {effect}")
    for bar_id, threads in (named_barriers or {}).items():
        if not 0 <= bar_id < 16:
            problems.append(f"named barrier {bar_id}: a block has barriers 0..15")
        if threads <= 0 or threads % 32:
            problems.append(f"named barrier {bar_id} counts {threads} threads: bar.sync counts whole warps, so "
                            "the count is a positive multiple of 32")
    return problems


def prefetch_depth(p: Pipeline, role: str = "consumer") -> int:
    """The ring's effective prefetch depth over a run of ``p``: the stages left for the producer to fill ahead
    while ``role`` holds the most at once. A stage is held from the first wgmma issued on it to the arrival that
    releases it. A consumer that waits for its wgmmas and releases at once holds one stage (``S − 1`` left); one
    that keeps a wgmma group in flight holds the previous stage too (``S − 2``)."""
    held: set[int] = set()
    most = 0
    for e in p.events(role=role):
        if e.kind in ("wgmma_issue", "read") and e.stage is not None:
            held.add(e.stage)
        elif e.kind == "release":
            held.discard(e.stage)
        most = max(most, len(held))
    return p.stages - most
