"""mbarrier semantics and misuse reports."""

from __future__ import annotations

import pytest

from helpers.hopper.mbarrier import Deadlock, MBarrier, MBarrierError


def test_phase_flip_arrivals_and_tx_reset():
    b = MBarrier("full[0]")
    b.init(3)
    assert (b.phase, b.parity, b.pending_arrivals, b.tx_count) == (0, 0, 3, 0)
    assert b.test_wait(1) and not b.test_wait(0)  # fresh barrier: the "previous" phase counts as complete
    b.arrive_expect_tx(8192)
    b.arrive(1)
    assert (b.pending_arrivals, b.tx_count, b.phase) == (1, 8192, 0)
    b.complete_tx(4096)
    b.arrive()
    assert b.phase == 0 and not b.test_wait(0)  # arrivals done, 4096 bytes still missing
    b.complete_tx(4096)
    assert (b.phase, b.parity, b.pending_arrivals, b.tx_count) == (1, 1, 3, 0)
    assert b.test_wait(0) and b.try_wait(0) and not b.test_wait(1)
    assert "phase 1" in repr(b) and b.state().pending_arrivals == 3
    b.arrive(3)
    assert b.phase == 2 and b.test_wait(1)


def test_tx_landing_before_arrival_counts():
    b = MBarrier()
    b.init(1)
    b.expect_tx(100)
    b.complete_tx(100)
    assert b.phase == 0  # the arrival is still missing
    b.arrive()
    assert b.phase == 1


def test_misuse_is_reported():
    b = MBarrier("empty[2]")
    with pytest.raises(MBarrierError, match="never initialized"):
        b.arrive()
    b.init(2)
    b.arrive()
    with pytest.raises(MBarrierError, match="only 1 of 2 arrivals"):
        b.arrive(2)
    with pytest.raises(MBarrierError, match="transaction underflow"):
        b.complete_tx(16)
    with pytest.raises(MBarrierError):
        b.init(0)
    with pytest.raises(MBarrierError):
        b.test_wait(2)
    with pytest.raises(Deadlock, match="consumer waits on barrier 'empty\\[2\\]'.*parity 0"):
        b.wait(0, waiter="consumer")


def test_negative_tx_allowed_when_asked():
    b = MBarrier(allow_negative_tx=True)
    b.init(1)
    b.complete_tx(64)
    assert b.tx_count == -64
    b.expect_tx(64)
    b.arrive()
    assert b.phase == 1
