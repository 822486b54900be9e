"""The ordered sequence barrier: a ring of mbarrier slots that hands a turn from one warp group to the next, in order.

``depth`` sections (say "MMA" and "epilogue") × ``length`` groups (say two consumer warpgroups) of
:class:`~helpers.hopper.mbarrier.MBarrier` slots. Group ``g`` owns the slots ``[i][g]`` and waits on them; the group
before
it in the ring (``g - 1``, cyclically) arrives on them. Each group carries a :class:`Cursor` (index and phase, like a
pipeline's stage state): ``wait`` waits on ``[index][g]`` for ``phase``; ``arrive`` arrives on ``[index][g + 1]`` and
advances the cursor, flipping the phase when the index wraps. Group 0 starts with phase 1, which a fresh barrier
has already "completed", so it holds the first turn of every section; the others start with phase 0.

What it enforces: each section is entered by groups 0, 1, …, length-1, 0, 1, … in turn, one at a time, while
different sections overlap (group 0's epilogue runs beside group 1's MMA). Its invariants:

1. every participant waits and arrives in the same order (a wait, then an arrive, section after section, with
   cursors built for the same ring) — skip an arrive and the next group never gets its turn (deadlock); skip a
   wait and a group enters out of turn (order broken);
2. the ring never laps a slot still in use: an arrival must not complete a slot's phase while the previous one is
   still unconsumed by its waiter, or the parity (one bit) can no longer tell the two apart.

:class:`SequenceBarrier` is the ring; :class:`SeqBarStepper` drives it by hand (the lesson's widget) and reports
each step, a deadlock (naming every waiter's slot and parity), an order violation or a lapped slot in words;
:func:`run_programs` runs whole programs per group in simulated time (the ping-pong timeline).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .mbarrier import BarrierState, Deadlock, MBarrier, MBarrierError

__all__ = [
    "Cursor", "SequenceBarrier", "SeqBarError", "OrderViolation", "Lapped", "SeqStep", "SeqBarStepper",
    "run_programs", "pingpong_programs", "Section", "handoff", "handoff_on_gpu",
]


class SeqBarError(MBarrierError):
    """An invariant of the sequence barrier was broken (the message names the rule, group, slot and phase)."""


class OrderViolation(SeqBarError):
    """A group entered a section out of turn."""


class Lapped(SeqBarError):
    """An arrival completed a slot's phase while its previous phase was still unconsumed."""


@dataclass(frozen=True)
class Cursor:
    """A participant's place in the ring: slot ``index``, the ``phase`` (parity) it waits for, arrivals so far."""

    index: int = 0
    phase: int = 0
    count: int = 0

    def advance(self, depth: int) -> Cursor:
        """The next slot; the phase flips each time the index wraps around the ring."""
        index, phase = self.index + 1, self.phase
        if index == depth:
            index, phase = 0, phase ^ 1
        return Cursor(index, phase, self.count + 1)

    def __str__(self) -> str:
        return f"(index {self.index}, phase {self.phase})"


class SequenceBarrier:
    """``depth`` × ``length`` mbarrier slots, each initialised to ``group_size`` arrivals per phase."""

    def __init__(self, depth: int = 2, length: int = 2, group_size: int = 1, name: str = "order"):
        if depth < 1 or length < 1:
            raise SeqBarError(f"a sequence barrier needs depth ≥ 1 and length ≥ 1 (got {depth} × {length})")
        self.depth, self.length, self.group_size, self.name = depth, length, group_size, name
        self.slots = [[MBarrier(f"{name}[{i}][{g}]") for g in range(length)] for i in range(depth)]
        for row in self.slots:
            for bar in row:
                bar.init(group_size)

    def start(self, group: int) -> Cursor:
        """Group 0 starts on phase 1 (a fresh slot's "previous" phase counts as complete: it has the turn)."""
        return Cursor(0, 1 if group == 0 else 0)

    def slot(self, cursor: Cursor, group: int) -> MBarrier:
        """The slot a group waits on at its cursor."""
        return self.slots[cursor.index % self.depth][group]

    def ready(self, cursor: Cursor, group: int) -> bool:
        """Would ``wait`` return now (the slot's phase of this parity has completed)?"""
        return self.slot(cursor, group).test_wait(cursor.phase)

    def wait(self, cursor: Cursor, group: int, waiter: str | None = None) -> None:
        """Wait for this group's turn at its cursor; in straight-line code an incomplete phase is a Deadlock."""
        self.slot(cursor, group).wait(cursor.phase, waiter=waiter or f"group {group}")

    def arrive(self, cursor: Cursor, group: int, count: int | None = None, depth: int | None = None) -> Cursor:
        """Hand the turn of this section to the next group (arrive on its slot) and return the advanced cursor."""
        nxt = (group + 1) % self.length
        self.slots[cursor.index % self.depth][nxt].arrive(self.group_size if count is None else count)
        return cursor.advance(self.depth if depth is None else depth)


# -----------------------------------------------------------------------------------------------------------
# the stepper
# -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SeqStep:
    """One action and what it did. ``kind``: passes, blocked, unblocked, arrive, deadlock, violation, lapped, error."""

    action: str
    group: int
    outcome: str
    kind: str
    cursors: tuple[Cursor, ...]
    slots: tuple[tuple[BarrierState, ...], ...]  # [index][group]
    inside: tuple[int | None, ...]  # the section each group is in (None: outside)
    blocked: tuple[bool, ...]


@dataclass
class SeqBarStepper:
    """A sequence barrier and its groups, driven one action at a time.

    ``cursor_depths`` gives each group's own idea of the ring's depth (all ``depth`` when None); a different one is
    the "cursor built for another ring" mistake. A wait that cannot pass leaves its group *blocked* until an
    arrival completes the phase; when every group is blocked, that is a deadlock.
    """

    depth: int = 2
    length: int = 2
    group_size: int = 1
    cursor_depths: tuple[int, ...] | None = None
    names: tuple[str, ...] = ("MMA", "epilogue")
    bar: SequenceBarrier = field(init=False)
    steps: list[SeqStep] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.bar = SequenceBarrier(self.depth, self.length, self.group_size)
        self.depths = tuple(self.cursor_depths or (self.depth,) * self.length)
        if len(self.depths) != self.length:
            raise SeqBarError(f"cursor_depths {self.depths}: one depth per group ({self.length})")
        self.cursors = [self.bar.start(g) for g in range(self.length)]
        self.inside: list[int | None] = [None] * self.length
        self.blocked = [False] * self.length
        self.passed = [[0] * self.length for _ in range(self.depth)]  # waits that returned, per slot
        self.entered: list[list[int]] = [[] for _ in range(self.depth)]  # groups in the order they entered
        self.deadlocked = False

    # ------------------------------------------------------------------ helpers
    def section(self, index: int) -> str:
        """A section's name (``MMA``, ``epilogue``, … or ``section i``)."""
        return self.names[index] if index < len(self.names) else f"section {index}"

    def _unconsumed(self, i: int, g: int) -> int:
        bar = self.bar.slots[i][g]
        return bar.phase + (1 if g == 0 else 0) - self.passed[i][g]

    def _log(self, action: str, group: int, outcome: str, kind: str) -> SeqStep:
        states = tuple(tuple(b.state() for b in row) for row in self.bar.slots)
        step = SeqStep(action, group, outcome, kind, tuple(self.cursors), states, tuple(self.inside),
                       tuple(self.blocked))
        self.steps.append(step)
        return step

    def _enter(self, g: int) -> str:
        cur = self.cursors[g]
        i = cur.index % self.depth
        self.passed[i][g] += 1
        self.blocked[g] = False
        self.inside[g] = i
        turn = self.entered[i]
        expected = (turn[-1] + 1) % self.length if turn else 0
        turn.append(g)
        others = [h for h in range(self.length) if h != g and self.inside[h] == i]
        if others or g != expected:
            why = (f"group {others[0]} is still inside it" if others else f"it was group {expected}'s turn")
            raise OrderViolation(f"order broken: group {g} entered {self.section(i)} (slot {i}) out of turn: {why}. "
                                 "Every group must wait before it enters and arrive when it leaves, in the same "
                                 "order.")
        return f"group {g} enters {self.section(i)} (slot {i})"

    # ------------------------------------------------------------------ actions
    def wait(self, g: int) -> SeqStep:
        """Group ``g`` waits for its turn at its cursor."""
        cur = self.cursors[g]
        bar = self.bar.slot(cur, g)
        action = f"group {g}: wait {bar.name} parity {cur.phase}"
        if self.deadlocked:
            return self._log(action, g, "the groups are deadlocked: reset", "deadlock")
        if self.blocked[g]:
            return self._log(action, g, f"group {g} is already waiting on {bar.name}", "blocked")
        if self.inside[g] is not None:
            return self._guard(action, g, lambda: self._raise(OrderViolation(
                f"order broken: group {g} waits again while still inside {self.section(self.inside[g])}: it never "
                f"arrived to hand that section on (its cursor is still {cur})")))
        if self.bar.ready(cur, g):
            return self._guard(action, g, lambda: self._enter(g) + f": {bar.name} parity {cur.phase} has completed",
                               "passes")
        self.blocked[g] = True
        if all(self.blocked):
            return self._deadlock(action, g)
        prev = (g - 1) % self.length
        return self._log(action, g, f"group {g} blocks: {bar.name} needs {bar.pending_arrivals} more arrival(s) "
                         f"(from group {prev}) to complete phase {bar.phase}", "blocked")

    def arrive(self, g: int, count: int | None = None) -> SeqStep:
        """Group ``g`` hands the section at its cursor to the next group and advances its cursor."""
        cur = self.cursors[g]
        i = cur.index % self.depth
        nxt = (g + 1) % self.length
        target = self.bar.slots[i][nxt]
        n = self.group_size if count is None else count
        action = f"group {g}: arrive on {target.name}" + (f" ({n})" if n != self.group_size else "")
        if self.deadlocked:
            return self._log(action, g, "the groups are deadlocked: reset", "deadlock")
        if self.blocked[g]:
            return self._log(action, g, f"group {g} is blocked in its wait: it cannot arrive", "blocked")

        def go() -> str:
            completes = target.pending_arrivals <= n
            if completes and self._unconsumed(i, nxt) >= 1:
                raise Lapped(f"lapped: this arrival would complete phase {target.phase} of {target.name} while group "
                             f"{nxt} has not yet waited on the phase before it; the parity bit cannot tell the two "
                             "apart. The ring never laps a slot still in use: arrive only after your own wait.")
            was_inside = self.inside[g] == i
            self.bar.slots[i][nxt].arrive(n)
            self.inside[g] = None
            self.cursors[g] = cur.advance(self.depths[g])
            text = f"{n} arrival(s) on {target.name}"
            if completes:
                text += f": phase {target.phase - 1} completes, group {nxt} may enter {self.section(i)}"
            if not was_inside:
                raise OrderViolation(f"order broken: group {g} arrived on {target.name} without having waited for "
                                     f"its turn in {self.section(i)}: group {nxt} may now enter while group {g} "
                                     "was never in order")
            return text + f"; group {g}'s cursor → {self.cursors[g]}"

        step = self._guard(action, g, go, "arrive")
        if step.kind == "arrive":
            self._wake()
        return step

    def _wake(self) -> None:
        for h in range(self.length):
            if self.blocked[h] and self.bar.ready(self.cursors[h], h):
                bar = self.bar.slot(self.cursors[h], h)
                self._guard(f"group {h}: (its wait returns)", h,
                            lambda h=h, bar=bar: self._enter(h) + f": {bar.name} completed", "unblocked")

    def _raise(self, exc: Exception) -> str:
        raise exc

    def _guard(self, action: str, g: int, fn, kind: str = "passes") -> SeqStep:
        try:
            outcome = fn()
        except Lapped as exc:
            return self._log(action, g, str(exc), "lapped")
        except OrderViolation as exc:
            return self._log(action, g, str(exc), "violation")
        except MBarrierError as exc:
            return self._log(action, g, f"ERROR: {exc}", "error")
        return self._log(action, g, outcome, kind)

    def _deadlock(self, action: str, g: int) -> SeqStep:
        self.deadlocked = True
        parts = []
        for h in range(self.length):
            cur = self.cursors[h]
            bar = self.bar.slot(cur, h)
            parts.append(f"group {h} waits on {bar.name} for parity {cur.phase} (it needs {bar.pending_arrivals} "
                         f"arrival(s) from group {(h - 1) % self.length})")
        return self._log(action, g, "DEADLOCK: every group is waiting: " + "; ".join(parts), "deadlock")

    def do(self, g: int, action: str) -> SeqStep:
        """``"wait"`` or ``"arrive"`` for group ``g``."""
        if action == "wait":
            return self.wait(g)
        if action == "arrive":
            return self.arrive(g)
        raise ValueError(f"action {action!r}: 'wait' or 'arrive'")

    def run(self, programs: list[list[str]], max_steps: int = 10_000,
            stop: tuple[str, ...] = ("deadlock", "violation", "lapped", "error")) -> list[SeqStep]:
        """Run a list of actions per group, round-robin over the groups that can act, until all are done, a
        deadlock, or a step of a kind in ``stop``. Returns the steps taken."""
        pcs = [0] * self.length
        start = len(self.steps)
        for _ in range(max_steps):
            progressed = False
            for g in range(self.length):
                if pcs[g] >= len(programs[g]) or self.blocked[g]:
                    continue
                step = self.do(g, programs[g][pcs[g]])
                pcs[g] += 1
                progressed = True
                if step.kind in stop or step.kind == "deadlock":
                    return self.steps[start:]
            if not progressed:
                if any(self.blocked) and not self.deadlocked:
                    waiting = [h for h in range(self.length) if self.blocked[h]]
                    cur = self.cursors[waiting[0]]
                    bar = self.bar.slot(cur, waiting[0])
                    self.deadlocked = True
                    self._log("(no group can act)", waiting[0],
                              f"DEADLOCK: group {waiting[0]} waits on {bar.name} for parity {cur.phase} and every "
                              "other group has finished its program without arriving there", "deadlock")
                return self.steps[start:]
        return self.steps[start:]


# -----------------------------------------------------------------------------------------------------------
# programs in simulated time (the ping-pong consumers)
# -----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Section:
    """One stretch of a timeline: ``group`` ran ``name`` (section index ``index``) from ``start`` to ``end``."""

    group: int
    name: str
    index: int
    start: float
    end: float


def pingpong_programs(tiles_per_group: int = 3, mma: float = 4.0, epi: float = 2.0, groups: int = 2
                      ) -> list[list[tuple]]:
    """Each consumer warpgroup: for every tile, its MMA section then its epilogue section, each between a wait
    and an arrive on a depth-2 sequence barrier (``("wait",)``, ``("work", name, duration)``, ``("arrive",)``)."""
    prog = []
    for _ in range(tiles_per_group):
        prog += [("wait",), ("work", "MMA", mma), ("arrive",), ("wait",), ("work", "epilogue", epi), ("arrive",)]
    return [list(prog) for _ in range(groups)]


def run_programs(programs: list[list[tuple]], depth: int = 2, ordered: bool = True) -> list[Section]:
    """Run each group's program in simulated time: waits block until the turn comes (``ordered``) or are skipped
    (``ordered=False``: no barrier at all). Returns every section run. Raises Deadlock if the groups stall."""
    n = len(programs)
    bar = SequenceBarrier(depth, n)
    cursors = [bar.start(g) for g in range(n)]
    pcs, times = [0] * n, [0.0] * n
    ready_at: dict[tuple[int, int, int], float] = {}  # (index, group, phase completed) -> time
    sections: list[Section] = []
    while any(pcs[g] < len(programs[g]) for g in range(n)):
        best = None
        for g in range(n):
            if pcs[g] >= len(programs[g]):
                continue
            item = programs[g][pcs[g]]
            t = times[g]
            if item[0] == "wait" and ordered:
                if not bar.ready(cursors[g], g):
                    continue
                slot = bar.slot(cursors[g], g)
                t = max(t, ready_at.get((cursors[g].index, g, slot.phase), 0.0))
            if best is None or t < best[0]:
                best = (t, g)
        if best is None:
            waits = "; ".join(f"group {g} on {bar.slot(cursors[g], g).name} parity {cursors[g].phase}"
                              for g in range(n) if pcs[g] < len(programs[g]))
            raise Deadlock(f"the groups deadlocked: {waits}")
        t, g = best
        item = programs[g][pcs[g]]
        times[g] = t
        if item[0] == "work":
            index = cursors[g].index
            sections.append(Section(g, item[1], index, t, t + item[2]))
            times[g] = t + item[2]
        elif item[0] == "arrive" and ordered:
            i, nxt = cursors[g].index, (g + 1) % n
            cursors[g] = bar.arrive(cursors[g], g)
            ready_at[(i, nxt, bar.slots[i][nxt].phase)] = times[g]  # the next group may enter from now
        elif item[0] == "arrive":
            cursors[g] = cursors[g].advance(depth)
        pcs[g] += 1
    return sections


def handoff(participant_count: int, arrivals: int) -> str:
    """What ``arrivals`` single arrivals (``mbarrier.arrive`` with count 1, one per thread that arrives) do to the
    next group's slot, initialised with ``participant_count``: the count must equal the threads that arrive."""
    bar = MBarrier("order[0][1]")
    bar.init(participant_count)
    completed = 0
    for _ in range(arrivals):
        before = bar.phase
        bar.arrive(1)
        completed += bar.phase - before
    if completed == 0:
        return (f"{arrivals} arrival(s) on a slot initialised with {participant_count}: the phase never completes "
                f"({bar.pending_arrivals} more needed), so the next group waits forever")
    if completed == 1 and bar.pending_arrivals == participant_count:
        return (f"{arrivals} arrival(s) on a slot initialised with {participant_count}: one phase completes, the "
                "next group gets exactly one turn")
    extra = participant_count - bar.pending_arrivals
    early = f" (and {extra} arrival(s) already sit in the next)" if extra else ""
    return (f"{arrivals} arrival(s) on a slot initialised with {participant_count}: {completed} phases complete "
            f"instead of one{early}: the turns ahead are handed out before their owners arrive, and the parity "
            "bit can no longer tell the laps apart")


def handoff_on_gpu(participant_count: int, threads: int, warp: int = 32) -> str:
    """What ``threads`` threads, each running ``mbarrier.arrive`` (count 1) once, do to a slot initialised with
    ``participant_count`` on an H100, where the lanes of one warp that arrive together count as one arrival of all
    of theirs (``tests/data/mbarrier_warp_arrivals_h100.json``): an arrival larger than what the phase still
    awaits traps the kernel. ``handoff`` is the model's view, one thread at a time."""
    who = f"{threads} thread{'' if threads == 1 else 's'} on a slot initialised with {participant_count}"
    pending, completed = participant_count, 0
    for first in range(0, threads, warp):
        lanes = min(warp, threads - first)
        if lanes > pending:
            return (f"{who}: warp {first // warp}'s {lanes} lanes arrive at once, {lanes - pending} more than the "
                    "phase awaits: the kernel traps (CUDA_ERROR_LAUNCH_FAILED)")
        pending -= lanes
        if pending == 0:
            completed, pending = completed + 1, participant_count
    if completed == 0:
        return f"{who}: the phase never completes ({pending} more needed), so the next group waits forever"
    if completed == 1 and pending == participant_count:
        return f"{who}: one phase completes, one turn"
    return f"{who}: {completed} phases complete instead of one"
