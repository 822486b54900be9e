"""Warp roles and pipelines: a small cooperative scheduler over a ring of shared-memory stages.

Each warp role is a Python generator function ``program(ctx)`` that *yields* commands made by its context
``ctx`` (a :class:`Role`): ``ctx.wait(bar, parity)``, ``ctx.arrive(bar)``, ``ctx.arrive_expect_tx(bar, n)``,
``ctx.expect_tx(bar, n)``, ``ctx.tma_load(stage, bar, nbytes)``, ``ctx.wgmma(stage)``, ``ctx.work(t)``.
The :class:`Pipeline` owns ``stages`` full and empty :class:`~helpers.mbarrier.MBarrier` s, runs the roles in
simulated time (TMA copies land ``tma_latency`` after issue, a ``wgmma`` occupies its role ``wgmma_latency``) and
records an event trace. It raises:

- :class:`~helpers.mbarrier.Deadlock` when every unfinished role waits and nothing is in flight (the message
  lists who waits on which barrier, parity and phase);
- :class:`ReadBeforeFull` when a consumer reads a stage whose data has not landed (or that it already released);
- :class:`OverwriteBeforeEmpty` when a TMA copy targets a stage some consumer has not released yet.

``standard_pipeline(...)`` builds the course's producer/consumer GEMM mainloop, ready to ``run()``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from .mbarrier import Deadlock, MBarrier, MBarrierError

__all__ = [
    "Event", "Pipeline", "Role", "PipelineError", "ReadBeforeFull", "OverwriteBeforeEmpty", "Deadlock",
    "standard_pipeline", "producer_program", "consumer_program",
]


class PipelineError(MBarrierError):
    """A hazard in a pipeline (names the role, stage, time)."""


class ReadBeforeFull(PipelineError):
    """A consumer read a stage before its data landed."""


class OverwriteBeforeEmpty(PipelineError):
    """A copy was issued into a stage a consumer had not released."""


@dataclass(frozen=True)
class Event:
    """One trace entry. ``kind`` is one of: arrive, expect_tx, arrive_expect_tx, wait (started waiting),
    wait_done (the wait returned), tma_issue, tma_landed, phase_complete, read (a wgmma started on a stage),
    release (a consumer arrived on the stage's empty barrier), work, done."""

    time: float
    role: str
    kind: str
    barrier: str | None = None
    stage: int | None = None
    phase: int | None = None
    detail: str = ""


@dataclass
class _Cmd:
    op: str
    bar: MBarrier | None = None
    n: int = 0
    stage: int | None = None
    duration: float = 0.0
    label: str = ""


@dataclass
class Role:
    """The context a role program receives; its methods make the commands the program yields."""

    name: str
    pipeline: Pipeline
    consumer: bool = False
    _gen: Generator | None = field(default=None, repr=False)
    waiting: tuple[MBarrier, int, float] | None = None
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
        """Read ``stage`` with a WGMMA (occupies the role for ``wgmma_latency``)."""
        return _Cmd("wgmma", None, 0, stage, duration if duration is not None else -1.0)

    def work(self, duration: float, label: str = "") -> _Cmd:
        """Spend ``duration`` time units on something else."""
        return _Cmd("work", None, 0, None, duration, label)


class Pipeline:
    """A ring of ``stages`` shared-memory stages with ``full[i]`` / ``empty[i]`` barriers and warp roles.

    ``full_count`` / ``empty_count`` are the barriers' init counts (default: 1 producer arrival for full, one
    arrival per consumer role for empty). Times are abstract units (think cycles).
    """

    def __init__(self, stages: int = 4, tma_latency: float = 500.0, wgmma_latency: float = 100.0,
                 issue_cost: float = 1.0, full_count: int | None = None, empty_count: int | None = None):
        if stages < 1:
            raise ValueError(f"stages = {stages}: a ring needs at least one stage")
        self.stages = stages
        self.tma_latency = float(tma_latency)
        self.wgmma_latency = float(wgmma_latency)
        self.issue_cost = float(issue_cost)
        self._full_count = full_count
        self._empty_count = empty_count
        self.full = [MBarrier(f"full[{i}]") for i in range(stages)]
        self.empty = [MBarrier(f"empty[{i}]") for i in range(stages)]
        self.roles: list[Role] = []
        self.trace: list[Event] = []
        self.time = 0.0
        self._landings: list[tuple[float, int, MBarrier, int, int, str, str]] = []
        self._seq = 0
        self._inflight = [0] * stages
        self._read_gen: dict[tuple[str, int], int] = {}
        self._released_gen: dict[tuple[str, int], int] = {}
        self._programs: list[Callable] = []

    # ------------------------------------------------------------------ setup
    def add_role(self, name: str, program: Callable[[Role], Generator], consumer: bool = False) -> Role:
        """Register a warp role running ``program(ctx)``; mark readers of stages as ``consumer=True``."""
        role = Role(name, self, consumer)
        self.roles.append(role)
        self._programs.append(program)
        return role

    def _log(self, role: str, kind: str, bar: MBarrier | None = None, stage: int | None = None,
             phase: int | None = None, detail: str = "") -> None:
        self.trace.append(Event(self.time, role, kind, bar.name if bar else None, stage, phase, detail))

    def _stage_of(self, bar: MBarrier) -> tuple[str, int] | None:
        for i in range(self.stages):
            if bar is self.full[i]:
                return "full", i
            if bar is self.empty[i]:
                return "empty", i
        return None

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
            runnable = [r for r in self.roles if not r.finished and r.waiting is None]
            t_role = min((r.ready_at for r in runnable), default=None)
            t_land = self._landings[0][0] if self._landings else None
            if t_role is None and t_land is None:
                blocked = [r for r in self.roles if not r.finished]
                if blocked:
                    raise Deadlock(self._deadlock_message(blocked))
                return self.trace
            if t_land is not None and (t_role is None or t_land <= t_role):
                self._land()
                continue
            self.time = max(self.time, t_role)
            if self.time > max_time:
                raise PipelineError(f"simulation passed max_time = {max_time}")
            role = min(runnable, key=lambda r: (r.ready_at, self.roles.index(r)))
            self._step(role)

    def _land(self) -> None:
        t, _, bar, nbytes, stage, label, who = heapq.heappop(self._landings)
        self.time = max(self.time, t)
        self._inflight[stage] -= 1
        self._log(who, "tma_landed", bar, stage, bar.phase, f"{nbytes} bytes {label}".strip())
        bar.complete_tx(nbytes)

    def _on_complete(self, bar: MBarrier, phase: int) -> None:
        self._log("-", "phase_complete", bar, None, phase)
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
            role.finished = True
            self._log(role.name, "done")
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
                i = kind[1]
                key = (role.name, i)
                if self._read_gen.get(key, -1) > self._released_gen.get(key, -1):
                    self._released_gen[key] = self._read_gen[key]
                    self._log(role.name, "release", bar, i, self._read_gen[key])
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
            self._log(role.name, "tma_issue", bar, cmd.stage, bar.phase, f"{cmd.n} bytes {cmd.label}".strip())
            self._seq += 1
            heapq.heappush(self._landings, (self.time + self.tma_latency, self._seq, bar, cmd.n, cmd.stage,
                                            cmd.label, role.name))
            role.ready_at = self.time + self.issue_cost
            return
        if op == "wgmma":
            gen = self._check_read(role, cmd.stage)
            self._read_gen[(role.name, cmd.stage)] = gen
            self._log(role.name, "read", None, cmd.stage, gen)
            role.ready_at = self.time + (self.wgmma_latency if cmd.duration < 0 else cmd.duration)
            return
        if op == "work":
            self._log(role.name, "work", None, None, None, cmd.label)
            role.ready_at = self.time + cmd.duration
            return
        raise PipelineError(f"unknown command {op!r}")

    def _check_read(self, role: Role, stage: int) -> int:
        """The generation (fill number) a consumer reads; raise if it is not there yet."""
        if not 0 <= stage < self.stages:
            raise PipelineError(f"role {role.name!r} reads stage {stage}; the ring has stages 0..{self.stages - 1}")
        key = (role.name, stage)
        gen = self._released_gen.get(key, -1) + 1  # several wgmmas may read the same fill
        full = self.full[stage]
        if not full.completed(gen) or self._inflight[stage]:
            why = (f"a TMA copy into it is still in flight ({self._inflight[stage]} pending)"
                   if self._inflight[stage] else
                   f"its fill number {gen} has not landed (full[{stage}] has completed {full.phase} phase(s))")
            raise ReadBeforeFull(f"t={self.time:g}: role {role.name!r} reads stage {stage} but {why}: wait on "
                                 f"full[{stage}] with parity {gen & 1} before reading it.")
        return gen

    def _check_overwrite(self, role: Role, stage: int, bar: MBarrier) -> None:
        if not 0 <= stage < self.stages:
            raise PipelineError(f"role {role.name!r} copies into stage {stage}; the ring has stages "
                                f"0..{self.stages - 1}")
        gen = bar.phase  # this copy fills the stage for the full barrier's phase in progress
        if gen == 0:
            return
        for r in self.roles:
            if not r.consumer:
                continue
            released = self._released_gen.get((r.name, stage), -1)
            if released < gen - 1:
                reading = self._read_gen.get((r.name, stage), -1) > released
                raise OverwriteBeforeEmpty(
                    f"t={self.time:g}: role {role.name!r} issues a TMA copy into stage {stage} (fill {gen}) but "
                    f"consumer {r.name!r} " + ("is still reading it" if reading else f"has not read and released "
                                               f"fill {gen - 1}") + f": wait on empty[{stage}] with parity "
                    f"{(gen - 1) & 1} first.")

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


def producer_program(k_steps: int, stages: int, bytes_a: int, bytes_b: int) -> Callable[[Role], Generator]:
    """The course's producer: for each K step wait until the stage is empty, expect its bytes, issue two TMA
    copies (A and B tiles) that complete on the stage's full barrier."""

    def program(ctx: Role):
        for k in range(k_steps):
            s, ph = k % stages, (k // stages) & 1
            yield ctx.wait(ctx.empty[s], ph ^ 1)  # a fresh barrier counts its "previous" phase as complete
            yield ctx.arrive_expect_tx(ctx.full[s], bytes_a + bytes_b)
            yield ctx.tma_load(s, ctx.full[s], bytes_a, f"A k={k}")
            yield ctx.tma_load(s, ctx.full[s], bytes_b, f"B k={k}")

    return program


def consumer_program(k_steps: int, stages: int, wgmmas_per_stage: int = 4) -> Callable[[Role], Generator]:
    """The course's consumer: wait until the stage is full, run its WGMMAs, release the stage."""

    def program(ctx: Role):
        for k in range(k_steps):
            s, ph = k % stages, (k // stages) & 1
            yield ctx.wait(ctx.full[s], ph)
            for _ in range(wgmmas_per_stage):
                yield ctx.wgmma(s)
            yield ctx.arrive(ctx.empty[s])

    return program


def standard_pipeline(k_steps: int = 128, stages: int = 4, consumers: int = 1, tma_latency: float = 500.0,
                      wgmma_latency: float = 100.0, wgmmas_per_stage: int = 4, tile_m: int = 64, tile_n: int = 64,
                      tile_k: int = 64, element_bytes: int = 2) -> Pipeline:
    """A producer warp and ``consumers`` consumer warpgroups running a GEMM mainloop over a ring of ``stages``.

    Each stage holds an A tile (tile_m x tile_k) and a B tile (tile_n x tile_k); ``full`` barriers expect one
    producer arrival plus the tiles' bytes, ``empty`` barriers one arrival per consumer.
    """
    p = Pipeline(stages, tma_latency, wgmma_latency)
    ba, bb = tile_m * tile_k * element_bytes, tile_n * tile_k * element_bytes
    p.add_role("producer", producer_program(k_steps, stages, ba, bb))
    for c in range(consumers):
        p.add_role(f"consumer{c}" if consumers > 1 else "consumer", consumer_program(k_steps, stages,
                                                                                      wgmmas_per_stage),
                   consumer=True)
    return p
