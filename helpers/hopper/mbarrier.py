"""mbarrier: the Hopper split barrier with arrival and transaction-byte counts and a phase bit.

Semantics follow the PTX ISA (``mbarrier.*`` on sm_90), not a simplified picture:

- ``init(count)`` starts phase 0 expecting ``count`` arrivals and 0 transaction bytes;
- ``arrive(n)`` counts ``n`` arrivals, ``expect_tx(b)`` raises the pending transaction count by ``b``,
  ``complete_tx(b)`` (what a TMA copy does when its bytes land) lowers it;
- the phase completes when the pending arrivals reach 0 *and* the pending transaction count is 0; then the phase
  number increments (its parity flips), the arrival count is re-armed to ``count`` and the transaction count is 0;
- ``test_wait(parity)`` / ``try_wait(parity)`` return True iff the phase with that parity has completed, i.e. the
  current phase's parity differs from ``parity``: on a freshly initialised barrier ``test_wait(1)`` is already True
  (the "previous" phase counts as complete), which is why producers start waiting on "empty" with parity 1.

Misuse raises :class:`MBarrierError` instead of being silently modelled: using an uninitialised barrier, more
arrivals than the phase expects, a transaction count going below zero, counts out of the hardware's range.
``wait`` in straight-line (single-threaded) code raises :class:`Deadlock` when the phase cannot complete because
nobody else can run; the pipeline scheduler (``helpers.hopper.pipeline``) detects deadlocks across roles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MBarrier", "MBarrierError", "Deadlock", "MAX_COUNT", "MAX_TX"]

MAX_COUNT = (1 << 20) - 1  # arrival count range of mbarrier.init / arrive
MAX_TX = (1 << 20) - 1  # transaction count range (bytes)


class MBarrierError(RuntimeError):
    """Misuse of an mbarrier (the message names the barrier, its phase and what went wrong)."""


class Deadlock(MBarrierError):
    """A wait that can never be satisfied (names who waits on which barrier and parity)."""


@dataclass(frozen=True)
class BarrierState:
    """A snapshot of a barrier, for widgets and traces."""

    name: str
    initialized: bool
    expected: int
    phase: int
    parity: int
    pending_arrivals: int
    tx_count: int


class MBarrier:
    """One mbarrier object. ``phase`` counts completed phases; ``parity`` is ``phase % 2``."""

    def __init__(self, name: str = "bar", allow_negative_tx: bool = False):
        self.name = name
        self.allow_negative_tx = allow_negative_tx
        self._init = False
        self._expected = 0
        self._pending = 0
        self._tx = 0
        self._phase = 0
        self.on_complete: list[Callable[[MBarrier, int], None]] = []  # called with (barrier, completed phase)

    # ---------------------------------------------------------------- state
    @property
    def initialized(self) -> bool:
        """Whether ``init`` has run."""
        return self._init

    @property
    def expected(self) -> int:
        """Arrivals each phase needs (the ``init`` count)."""
        return self._expected

    @property
    def phase(self) -> int:
        """Number of completed phases (the phase now in progress has this number)."""
        return self._phase

    @property
    def parity(self) -> int:
        """Parity of the phase in progress (0 or 1)."""
        return self._phase & 1

    @property
    def pending_arrivals(self) -> int:
        """Arrivals still missing in the phase in progress."""
        return self._pending

    @property
    def tx_count(self) -> int:
        """Transaction bytes still expected in the phase in progress (negative if bytes landed before
        ``expect_tx``, when ``allow_negative_tx``)."""
        return self._tx

    def state(self) -> BarrierState:
        """A frozen snapshot of the barrier."""
        return BarrierState(self.name, self._init, self._expected, self._phase, self.parity, self._pending, self._tx)

    def __repr__(self) -> str:
        if not self._init:
            return f"MBarrier({self.name!r}: not initialized)"
        return (f"MBarrier({self.name!r}: phase {self._phase} (parity {self.parity}) in progress, "
                f"{self._pending}/{self._expected} arrivals pending, {self._tx} tx bytes pending)")

    def _where(self) -> str:
        return f"barrier {self.name!r} (phase {self._phase}, parity {self.parity})"

    def _need_init(self, what: str) -> None:
        if not self._init:
            raise MBarrierError(f"{what} on barrier {self.name!r}, which was never initialized: call init(count) "
                                "first (shared memory is not constructed; one thread must run mbarrier.init and "
                                "fence it before others use it).")

    # ---------------------------------------------------------------- operations
    def init(self, count: int) -> None:
        """``mbarrier.init``: expect ``count`` arrivals per phase; phase 0 starts."""
        if not 1 <= int(count) <= MAX_COUNT:
            raise MBarrierError(f"init({count}) on barrier {self.name!r}: the arrival count must be 1..{MAX_COUNT}.")
        self._init = True
        self._expected = int(count)
        self._pending = int(count)
        self._tx = 0
        self._phase = 0

    def invalidate(self) -> None:
        """``mbarrier.inval``: the object is no longer a barrier until the next ``init``."""
        self._init = False

    def _check_arrivals(self, count: int, what: str) -> None:
        if count < 1:
            raise MBarrierError(f"{what} on {self._where()}: the count must be at least 1.")
        if count > self._pending:
            raise MBarrierError(f"{what} on {self._where()}: only {self._pending} of {self._expected} "
                                "arrivals are still expected in this phase; more arrivals than the init count is "
                                "an error on the GPU (the H100 traps; check the count given to init and who arrives).")

    def arrive(self, count: int = 1) -> int:
        """``mbarrier.arrive``: count ``count`` arrivals. Returns the phase the arrival belonged to (a token)."""
        self._need_init(f"arrive({count})")
        self._check_arrivals(count, f"arrive({count})")
        token = self._phase
        self._pending -= count
        self._maybe_complete()
        return token

    def expect_tx(self, nbytes: int) -> None:
        """``mbarrier.expect_tx``: the phase in progress also waits for ``nbytes`` more transaction bytes."""
        self._need_init(f"expect_tx({nbytes})")
        if nbytes < 0 or self._tx + nbytes > MAX_TX:
            raise MBarrierError(f"expect_tx({nbytes}) on {self._where()}: the pending transaction count would be "
                                f"{self._tx + nbytes}, outside 0..{MAX_TX} bytes.")
        self._tx += nbytes
        # bytes that landed early (count below 0) are balanced by this expect_tx: on the H100 that completes the
        # phase when no arrivals are pending (seen on the chip, lesson 02's replay kernel)
        self._maybe_complete()

    def arrive_expect_tx(self, nbytes: int) -> int:
        """``mbarrier.arrive.expect_tx``: ``expect_tx(nbytes)`` and ``arrive(1)`` as one step.

        The arrival belongs to the phase in progress even when the added bytes balance bytes that landed early:
        on the H100, arrive.expect_tx on a phase whose arrivals are all in traps (tools/h100/mbarrier.py),
        while a plain expect_tx there completes the phase.
        """
        what = f"arrive_expect_tx({nbytes})"
        self._need_init(what)
        self._check_arrivals(1, what)
        if nbytes < 0 or self._tx + nbytes > MAX_TX:
            raise MBarrierError(f"{what} on {self._where()}: the pending transaction count would be "
                                f"{self._tx + nbytes}, outside 0..{MAX_TX} bytes.")
        token = self._phase
        self._tx += nbytes
        self._pending -= 1
        self._maybe_complete()
        return token

    def complete_tx(self, nbytes: int) -> None:
        """``complete_tx``: ``nbytes`` transaction bytes landed (a TMA copy does this)."""
        self._need_init(f"complete_tx({nbytes})")
        if nbytes < 0:
            raise MBarrierError(f"complete_tx({nbytes}) on {self._where()}: bytes cannot be negative.")
        if self._tx - nbytes < 0 and not self.allow_negative_tx:
            raise MBarrierError(f"transaction underflow on {self._where()}: {nbytes} bytes landed but only "
                                f"{self._tx} were expected. Call expect_tx / arrive_expect_tx with the copy's full "
                                "byte count (all boxes, out-of-bounds parts included) before the copy can land.")
        if self._tx - nbytes < -MAX_TX:
            raise MBarrierError(f"transaction count out of range on {self._where()}.")
        self._tx -= nbytes
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self._pending == 0 and self._tx == 0:
            done = self._phase
            self._phase += 1
            self._pending = self._expected
            self._tx = 0
            for cb in list(self.on_complete):
                cb(self, done)

    def test_wait(self, parity: int) -> bool:
        """``mbarrier.test_wait.parity``: has the phase with this parity completed? (non-blocking)"""
        self._need_init(f"test_wait({parity})")
        if parity not in (0, 1):
            raise MBarrierError(f"test_wait({parity}) on {self._where()}: the parity operand is 0 or 1.")
        return self.parity != parity

    def try_wait(self, parity: int) -> bool:
        """``mbarrier.try_wait.parity``: like ``test_wait`` (on the GPU it may suspend the thread a while)."""
        return self.test_wait(parity)

    def completed(self, phase: int) -> bool:
        """Has phase number ``phase`` (0, 1, 2, ...) completed?"""
        return self._phase > phase

    def wait(self, parity: int, waiter: str = "this thread") -> None:
        """Block until the phase with ``parity`` completes. In straight-line code nothing else can arrive, so an
        incomplete phase is a :class:`Deadlock`."""
        if not self.test_wait(parity):
            raise Deadlock(f"{waiter} waits on {self._where()} for parity {parity}, but that phase needs "
                           f"{self._pending} more arrival(s) and {self._tx} more transaction byte(s) and nothing "
                           "else can run: deadlock.")
