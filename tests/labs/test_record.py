"""The protocol engine (helpers.course.checks._record) on hand-made executor records: a ring whose consumers read and
release as the protocol says passes; each way of breaking it (a wait on a fresh barrier, a wait on a phase read
before, a fill read by too few consumers, a release of another stage, a stage never released, one released twice) is
named; and a sequence barrier's turns (the slot and the phase of each wait, the slot of each arrival, their order)."""

from __future__ import annotations

import pytest

from helpers.course import grading
from helpers.course.checks._record import Protocol, Ring, Turns, check_protocol
from helpers.course.checks._work import Launched
from helpers.gpu.executor.work import BarrierEnd, Block, SyncOp, WorkLog

B0 = Block((0, 0, 0))


def _wait(warp: int, bar: str, phase: int, block: Block = B0) -> SyncOp:
    return SyncOp(block, warp, "wait", block, bar, (phase & 1) if phase >= 0 else 1, phase, 32)


def _arrive(warp: int, bar: str, phase: int = 0, block: Block = B0, owner: Block | None = None) -> SyncOp:
    return SyncOp(block, warp, "arrive", owner or block, bar, -1, phase, 1)


def _ring_run(uses: int = 6, stages: int = 2, *, drop_last: bool = False, stale: bool = False, twice: bool = False,
              reread: bool = False) -> Launched:
    """One block, a producer (warp 0) and two consumer warpgroups (warps 4 and 8) reading every fill of a ring."""
    log = WorkLog()
    fills = [0] * stages
    for u in range(uses):
        s, phase = u % stages, u // stages
        log.syncs.append(_arrive(0, f"full[{s}]"))
        fills[s] += 1
        for warp in (4, 8):
            wait_phase = phase - 1 if (reread and warp == 8 and u == stages) else phase
            log.syncs.append(_wait(warp, f"full[{s}]", wait_phase))
        for warp in (4, 8):
            if drop_last and u == uses - 1:
                continue
            stage = (s + 1) % stages if (stale and warp == 4 and u == uses - 1) else s
            log.syncs.append(_arrive(warp, f"empty[{stage}]"))
            if twice and warp == 8 and u == 1:
                log.syncs.append(_arrive(warp, f"empty[{stage}]"))
    log.barriers = [BarrierEnd(B0, f"full[{s}]", 1, 1, fills[s]) for s in range(stages)]
    return Launched(log, 1, 2, 3)


def _verdict(run: Launched, protocol: Protocol) -> str | None:
    try:
        with grading.check("the record") as c:
            check_protocol(c, run, protocol, label="here")
    except grading.CheckFailed as exc:
        return str(exc)
    return None


RING = Protocol(ring=Ring(readers=2))


def test_a_ring_that_follows_the_protocol_passes():
    assert _verdict(_ring_run(), RING) is None


@pytest.mark.parametrize("kind, needle", [
    ("drop_last", r"5 release\(s\) for 6 reads: the stage of its read #6 \(full\[1\]\) was never released"),
    ("stale", r"its release #6 named empty\[0\], but its read #6 was of full\[1\]"),
    ("twice", r"its release #3 named empty\[1\], but its read #3 was of full\[0\]"),
    ("reread", r"got through on phase 0, which an earlier wait of this warp got through on already"),
])
def test_each_way_of_breaking_the_ring_is_named(kind, needle):
    import re

    text = _verdict(_ring_run(**{kind: True}), RING)
    assert text is not None and re.search(needle, text), text


def test_a_wait_on_a_fresh_full_barrier_is_named():
    run = _ring_run()
    run.log.syncs.insert(0, _wait(4, "full[0]", -1))
    text = _verdict(run, RING)
    assert text is not None and "got through on the fresh barrier, before any fill landed" in text, text


def test_a_fill_read_by_one_consumer_where_two_read_it_is_named():
    run = _ring_run()
    run.log.syncs = [op for op in run.log.syncs if not (op.kind == "wait" and op.warp == 8 and op.barrier == "full[1]")]
    run.log.syncs = [op for op in run.log.syncs
                     if not (op.kind == "arrive" and op.warp == 8 and op.barrier == "empty[1]")]
    text = _verdict(run, RING)
    assert text is not None and "fill #0 of full[1] (its phase 0) was read by 1 consumer warpgroup(s)" in text, text


# ------------------------------------------------------------------------------------------- the turns
TURNS = Protocol(turns=Turns(barrier="order", groups=(1, 2), depth=2, first=0))


def _turns_run(sections: int = 4, *, wrong_slot: bool = False, late_arrive: bool = False,
               no_flip: bool = False) -> Launched:
    """Warpgroups 1 and 2 (warps 4 and 8) take ``sections`` sections each in turn through order[0..3]."""
    log = WorkLog()
    completed = {i: 0 for i in range(4)}  # phases completed on each slot
    for n in range(sections):
        for i, warp in ((0, 4), (1, 8)):
            slot = (n % 2) * 2 + i
            if wrong_slot and warp == 8 and n == 1:
                slot = ((n + 1) % 2) * 2 + i
            phase = completed[slot] - 1
            if no_flip and warp == 8 and n == 2:
                phase -= 1
            log.syncs.append(SyncOp(B0, warp, "wait", B0, f"order[{slot}]", phase & 1, phase, 32))
            nxt = (n % 2) * 2 + (i + 1) % 2
            if late_arrive and warp == 4 and n == 0:
                nxt = ((n + 1) % 2) * 2 + (i + 1) % 2
            log.syncs.append(_arrive(warp, f"order[{nxt}]"))
            completed[nxt] += 1
    return Launched(log, 1, 2, 3)


def test_turns_that_follow_the_protocol_pass():
    assert _verdict(_turns_run(), TURNS) is None


@pytest.mark.parametrize("kind, needle", [
    ("wrong_slot", "warp 8 (warpgroup 2) of block (0,0): entered its section 1 with a wait on order[1]; the protocol "
                   "admits warpgroup 2 to section 1 through order[3]"),
    ("late_arrive", "warp 4 (warpgroup 1) of block (0,0): handed its section 0 on through order[3]; the protocol hands "
                    "it on through order[1]"),
    ("no_flip", "got through on phase 0; section 2 is that slot's phase 1"),
])
def test_each_way_of_breaking_the_turns_is_named(kind, needle):
    text = _verdict(_turns_run(**{kind: True}), TURNS)
    assert text is not None and needle in text, text


def test_a_second_wait_before_the_hand_off_is_named():
    run = _turns_run()
    first_arrive = next(i for i, op in enumerate(run.log.syncs) if op.kind == "arrive" and op.warp == 4)
    del run.log.syncs[first_arrive]
    text = _verdict(run, TURNS)
    assert text is not None and "before it handed section 0 on" in text, text
