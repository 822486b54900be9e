"""The ordered sequence barrier: cursors, the order it enforces, and each broken invariant reported as such."""

from __future__ import annotations

import pytest

from helpers.course.widgets import seqbar as view
from helpers.hopper import seqbar as sb
from helpers.hopper.mbarrier import Deadlock


def test_cursor_wraps_and_flips_the_phase():
    c = sb.Cursor()
    seen = []
    for _ in range(5):
        seen.append((c.index, c.phase))
        c = c.advance(2)
    assert seen == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 0)] and c.count == 5
    bar = sb.SequenceBarrier(2, 3)
    assert [bar.start(g).phase for g in range(3)] == [1, 0, 0]
    assert bar.ready(bar.start(0), 0) and not bar.ready(bar.start(1), 1)


@pytest.mark.parametrize("depth, groups", [(1, 2), (2, 2), (2, 3), (3, 2), (1, 4)])
def test_correct_use_takes_turns_in_order(depth, groups):
    s = sb.SeqBarStepper(depth, groups)
    steps = s.run([["wait", "arrive"] * 3 * depth] * groups)
    assert not any(x.kind in ("deadlock", "violation", "lapped", "error") for x in steps)
    for turns in s.entered:
        assert turns == [g % groups for g in range(len(turns))] and len(turns) == 3 * groups


def test_straight_line_wait_is_a_deadlock():
    bar = sb.SequenceBarrier(2, 2)
    with pytest.raises(Deadlock, match=r"order\[0\]\[1\]"):
        bar.wait(bar.start(1), 1)


@pytest.mark.parametrize("preset, kind, words", [
    ("ping-pong (correct)", "arrive", ""),
    ("group 0 leaves out its last arrive", "deadlock", "finished its program"),
    ("group 1's cursor built for depth 1", "deadlock", "every group is waiting"),
    ("group 0 arrives without waiting", "violation", "without having waited"),
    ("group 0 waits twice", "violation", "waits again"),
    ("group 0 runs ahead, never waiting", "lapped", "parity bit cannot tell"),
])
def test_presets(preset, kind, words):
    s = view.play(preset)
    assert s.steps[-1].kind == kind and words in s.steps[-1].outcome


def test_deadlock_names_every_waiter_slot_and_parity():
    s = view.play("group 1's cursor built for depth 1")
    text = s.steps[-1].outcome
    assert "group 0 waits on order[1][0] for parity 0" in text and "group 1 waits on order[0][1] for parity 0" in text


def test_pingpong_mma_sections_never_overlap_with_the_barrier():
    def overlaps(sections):
        mma = sorted((x.start, x.end) for x in sections if x.name == "MMA")
        return any(b[0] < a[1] for a, b in zip(mma, mma[1:], strict=False))
    ordered = sb.run_programs(sb.pingpong_programs(4))
    assert not overlaps(ordered)
    assert overlaps(sb.run_programs(sb.pingpong_programs(4), ordered=False))
    # epilogue of one group runs beside the MMA of the other
    g0_epi = next(x for x in ordered if x.group == 0 and x.name == "epilogue")
    g1_mma = next(x for x in ordered if x.group == 1 and x.name == "MMA")
    assert g0_epi.start < g1_mma.end and g1_mma.start < g0_epi.end


def test_widget_computations():
    s = view.play("ping-pong (correct)")
    grid = view.slot_grid(s.steps[-1])
    assert len(grid["z"]) == 2 and len(grid["z"][0]) == 2 and len(grid["cursors"]) == 2
    t = view.step_timeline(s.steps)
    assert len(t["x"]) == len(s.steps) and set(t["y"]) == {0, 1}
