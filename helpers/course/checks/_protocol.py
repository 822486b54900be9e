"""The barrier protocol of a lab kernel, read from its PTX, and the rules the labs teach, checked on it.

Which barrier is which is read from the code itself, not from names: a barrier a TMA load completes on is a
*full* barrier, every other mbarrier is an *empty* one; a shared variable a TMA load writes is a *tile*; a read
of a tile is an ``ld.shared`` from it or a ``wgmma.mma_async`` (which reads its tiles through descriptors).

The rules are path questions over every control-flow path of the kernel (see :class:`_ptxflow.Flow`). Each says
what the lab's protocol requires, so a kernel following the protocol passes whatever its shape; each failure
names the instruction's line. When the kernel can run (an H100, or the course's PTX executor), the run is the
grade and these rules explain it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from helpers.course.checks._ptxflow import Flow, Ins

__all__ = ["Protocol", "read"]


@dataclass
class Protocol:
    flow: Flow
    source: str  # the compiled source

    def __post_init__(self) -> None:
        f = self.flow
        self.loads = f.find(lambda i: i.opcode.startswith("cp.async.bulk.tensor") and ".global" in i.opcode
                            and i.opcode.index("shared") < i.opcode.index("global"))
        self.tiles: set[str] = set()
        self.full: set[str] = set()
        for ld in self.loads:
            ops = ld.ops()
            self.tiles |= {s for s in f.symbols(ops[0]) if s in f.shared}
            self.full |= {s for s in f.symbols(ops[2]) if s in f.shared} if len(ops) > 2 else set()
        self.bar_ops = f.find(lambda i: i.opcode.startswith("mbarrier."))
        self.barriers: set[str] = set()
        for i in self.bar_ops:
            self.barriers |= self.bars(i)
        self.empty = self.barriers - self.full
        #: full and empty barriers share a variable: the rules that tell them apart cannot be applied
        self.ambiguous = any(self.bars(i) & self.full and self.bars(i) - self.full for i in self.bar_ops)

    # ------------------------------------------------------------------------------------------ what is what
    def bars(self, ins: Ins) -> set[str]:
        addr = next((o for o in ins.ops() if o.startswith("[")), None)
        return {s for s in self.flow.symbols(addr) if s in self.flow.shared} if addr else set()

    def _on(self, ins: Ins, which: str) -> bool:
        b = self.bars(ins)
        return bool(b & self.full) if which == "full" else bool(b & self.empty)

    def is_wait(self, ins: Ins, which: str) -> bool:
        return ins.opcode.startswith(("mbarrier.try_wait", "mbarrier.test_wait")) and self._on(ins, which)

    def is_arrive(self, ins: Ins, which: str, *, plain: bool = False) -> bool:
        if not ins.opcode.startswith("mbarrier.arrive"):
            return False
        if plain and "expect_tx" in ins.parts:
            return False
        return self._on(ins, which)

    def is_expect(self, ins: Ins) -> bool:
        return ins.opcode.startswith(("mbarrier.expect_tx", "mbarrier.arrive.expect_tx")) and self._on(ins, "full")

    def is_read(self, ins: Ins) -> bool:
        if ins.opcode.startswith("wgmma.mma_async"):
            return True
        if ins.opcode.startswith("ld.") and "shared" in ins.opcode:
            addr = next((o for o in ins.ops() if o.startswith("[")), "")
            return bool(self.flow.symbols(addr) & self.tiles)
        return False

    def where(self, ins: Ins) -> str:
        return self.flow.where(ins, self.source)

    def is_sync(self, ins: Ins) -> bool:
        return ins.opcode.startswith(("bar.sync", "barrier.sync", "bar.red", "barrier.red"))

    # ------------------------------------------------------------------------------------------ the rules
    def consumer_violations(self) -> list[tuple[str, Ins]]:
        """Every thread is a consumer that goes: (start) -wait on full-> (holds a stage: may read it)
        -arrive on empty-> (idle: may not read, may not release again) -wait on full-> (holds) ...

        Returns ``(kind, instruction)`` for what some path does out of turn: ``"read-unwaited"`` (a tile read
        before any wait), ``"read-released"`` (a read after the release, before the next wait),
        ``"release-unheld"`` (a second release before the next wait: it releases a stage ahead of its reads).
        Arrivals on empty before the first wait are pre-arrivals, allowed. A read after its release, or a
        release ahead, is excused when every path from it to a TMA load passes a block-wide barrier (bar.sync):
        the producer cannot refill the stage before every thread is done with it."""
        START, HOLD, IDLE = 1, 2, 4
        n = len(self.flow.ins)
        state = [0] * n
        if n:
            state[0] = START
        todo = [0] if n else []
        while todo:
            i = todo.pop()
            ins = self.flow.ins[i]
            out = state[i]
            if self.is_wait(ins, "full"):
                out = HOLD
            elif self.is_arrive(ins, "empty"):
                out = (state[i] & START) | (IDLE if state[i] & (HOLD | IDLE) else 0)
            for j in self.flow.successors(i):
                if state[j] | out != state[j]:
                    state[j] |= out
                    todo.append(j)
        found = []
        for ins, st in zip(self.flow.ins, state, strict=True):
            if self.is_read(ins) and st & START:
                found.append(("read-unwaited", ins))
            elif self.is_read(ins) and st & IDLE and not self._guarded_by_sync(ins):
                found.append(("read-released", ins))
            elif self.is_arrive(ins, "empty") and st & IDLE and not self._guarded_by_sync(ins):
                found.append(("release-unheld", ins))
        return found

    def _guarded_by_sync(self, ins: Ins) -> bool:
        return self.flow.reach([ins.index], lambda i: i in self.loads, self.is_sync) is None

    def release_before_acquire(self) -> Ins | None:
        """An arrive on empty[i] followed in the same iteration (forward in the code, no loop back edge) by the
        wait on full[i] for the same i (both addresses' offsets evaluate equal whatever the loop counters hold):
        the thread releases the very stage it is about to wait for and read."""
        def addr(ins: Ins) -> str:
            return next((o for o in ins.ops() if o.startswith("[")), "")

        def same_index(a: Ins, w: Ins) -> bool:
            inputs = sorted(self.flow.registers(addr(a)) | self.flow.registers(addr(w)))
            rng = random.Random(7)
            for _ in range(6):
                env = {r: rng.randrange(0, 1 << 12) for r in inputs if len(self.flow.def_sites.get(r, ())) != 1}
                va, vw = self.flow.evaluate(addr(a), env), self.flow.evaluate(addr(w), env)
                if va is None or vw is None or va != vw:
                    return False
            return True

        waits = [i for i in self.flow.ins if self.is_wait(i, "full")]
        for a in self.flow.ins:
            if not self.is_arrive(a, "empty"):
                continue
            for w in waits:
                hit = self.flow.reach([a.index], lambda i, w=w: i.index == w.index, forward=True)
                if hit is not None and same_index(a, w):
                    return a
        return None

    def first_wait_deadlocks(self) -> Ins | None:
        """A producer wait on an empty barrier reached before any arrive on empty, for the constant parity 0: on a
        fresh barrier phase 0 completes only once every consumer has released the stage, which needs the very
        load this wait holds back."""
        ins = self.flow.reach([None], lambda i: self.is_wait(i, "empty"), lambda i: self.is_arrive(i, "empty"))
        if ins is not None:
            ops = ins.ops()
            if len(ops) >= 3 and self.flow.value(ops[2]) == 0:
                return ins
        return None

    def read_before_wait(self) -> Ins | None:
        """The first read a thread can make out of turn (see :meth:`consumer_violations`), or None."""
        found = [ins for kind, ins in self.consumer_violations() if kind.startswith("read")]
        return found[0] if found else None

    def release_in_loop(self) -> bool:
        """Some arrive on an empty barrier is reached after a full wait and leads back to a full wait: every
        step of the loop can release its stage."""
        waits = [i.index for i in self.flow.ins if self.is_wait(i, "full")]
        for a in self.flow.ins:
            if self.is_arrive(a, "empty"):
                after_wait = self.flow.reach(waits, lambda i, a=a: i.index == a.index) is not None
                loops = self.flow.reach([a.index], lambda i: self.is_wait(i, "full")) is not None
                if after_wait and loops:
                    return True
        return False

    def producer_waits(self) -> bool:
        """Some wait on an empty barrier comes before a TMA load."""
        waits = [i.index for i in self.flow.ins if self.is_wait(i, "empty")]
        return self.flow.reach(waits, lambda i: i in self.loads) is not None

    def arrive_before_bytes(self) -> Ins | None:
        """A plain arrive on a full barrier reachable (from the start, or from the previous arrive on it) without
        an expect_tx in between: the phase could complete before the bytes were announced."""
        arrives = [i.index for i in self.flow.ins if self.is_arrive(i, "full")]
        return self.flow.reach([None, *arrives], lambda i: self.is_arrive(i, "full", plain=True), self.is_expect)

    def bytes_announced(self) -> int | None:
        """The bytes announced on full barriers per use of a stage: the expect_tx instructions' constants, one per
        line of source (the producer's code may be inlined more than once); None when one is not a constant."""
        by_line: dict[int | None, int] = {}
        for i in self.bar_ops:
            if self.is_expect(i):
                v = self.flow.value(i.ops()[-1])
                if v is None:
                    return None
                by_line[i.line] = max(v, by_line.get(i.line, 0))
        return sum(by_line.values())

    def mma_before_fence(self) -> Ins | None:
        """A wgmma.mma_async reachable from the kernel's start without a wgmma.fence."""
        return self.flow.reach([None], lambda i: i.opcode.startswith("wgmma.mma_async"),
                               lambda i: i.opcode.startswith("wgmma.fence"))

    def release_before_retire(self) -> Ins | None:
        """An arrive on an empty barrier reachable from a wgmma.mma_async without a wgmma.wait_group between:
        the stage is handed back while the tensor cores may still read it."""
        mmas = [i.index for i in self.flow.ins if i.opcode.startswith("wgmma.mma_async")]
        return self.flow.reach(mmas, lambda i: self.is_arrive(i, "empty"),
                               lambda i: i.opcode.startswith("wgmma.wait_group"))

    def wait_before_commit(self) -> Ins | None:
        """A wgmma.wait_group reachable from a wgmma.mma_async without a wgmma.commit_group between: the wait
        does not cover the uncommitted wgmmas."""
        mmas = [i.index for i in self.flow.ins if i.opcode.startswith("wgmma.mma_async")]
        return self.flow.reach(mmas, lambda i: i.opcode.startswith("wgmma.wait_group"),
                               lambda i: i.opcode.startswith("wgmma.commit_group"))


def read(ptx: str, entry: str, compiled: str, kernel: str | None = None) -> Protocol:
    """The protocol of ``entry``; line numbers in messages count from the start of ``kernel`` (the kernel's own
    text inside the compiled source) when it is given."""
    offset, text = 0, compiled
    if kernel and kernel in compiled:
        offset, text = compiled[:compiled.index(kernel)].count("\n"), kernel
    return Protocol(Flow(ptx, entry, offset), text)
