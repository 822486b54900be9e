"""The labs' tiered hints as students read them: no tier of an exercise holds a line of any of its parts' answers,
and an exercise of several parts hands out its later tiers one part at a time."""

from __future__ import annotations

import pytest

from helpers.course import hints

EXERCISES = hints.exercises()
MULTI = sorted(k for k, ex in EXERCISES.items() if len(ex.regions) > 1)


def test_there_are_exercises_of_one_and_of_several_parts():
    assert len(EXERCISES) >= 50 and len(MULTI) >= 10


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_no_hint_tier_holds_a_solution_line_of_its_exercise(ex_id):
    ex = EXERCISES[ex_id]
    for n, region in enumerate(ex.regions, 1):
        assert len(region.hints) >= 2, (ex_id, n)
        assert len(set(region.hints)) == len(region.hints), (ex_id, n, "a tier repeats another")
        for tier, text in enumerate(region.hints):
            for m, other in enumerate(ex.regions, 1):
                leaked = hints.leaked_lines(text, other.answer)
                assert not leaked, f"{ex_id} part {n} hint {tier} holds part {m}'s solution line {leaked[0]!r}"


@pytest.mark.parametrize("ex_id", MULTI)
def test_a_later_tier_comes_one_part_at_a_time(ex_id):
    ex = EXERCISES[ex_id]
    overview = hints.hint_text(ex_id, 0)
    assert all(r.hints[0] in overview for r in ex.regions), "tier 0 says what to do in every part"
    assert f"{ex.lab}.hint('{ex_id}', 1, part=1)" in overview
    listing = hints.hint_text(ex_id, 1)
    assert not any(r.hints[1] in listing for r in ex.regions), "hint 1 without a part gives no part's hint"
    for n in range(1, len(ex.regions) + 1):
        assert f"{ex.lab}.hint('{ex_id}', 1, part={n})" in listing
        one = hints.hint_text(ex_id, 1, part=n)
        assert ex.regions[n - 1].hints[1] in one
        assert not any(r.hints[1] in one for m, r in enumerate(ex.regions, 1) if m != n and r.hints[1] not in
                       ex.regions[n - 1].hints[1])
        last = hints.hint_text(ex_id, len(ex.regions[n - 1].hints) - 1, part=n)
        assert f"{ex.lab}.answer('{ex_id}')" in last
    assert "part is 1 to" in hints.hint_text(ex_id, 1, part=len(ex.regions) + 1)


def test_an_exercise_of_one_part_reads_as_before():
    one = next(k for k, ex in EXERCISES.items() if len(ex.regions) == 1 and len(ex.regions[0].hints) == 3)
    ex = EXERCISES[one]
    assert hints.hint_text(one, 1) == hints.hint_text(one, 1, part=1).replace(
        f"That was the last hint for this part. The answer: {ex.lab}.answer('{one}')",
        f"That was the last hint. The answer: {ex.lab}.answer('{one}')")
    assert f"More: {ex.lab}.hint('{one}', 2)" in hints.hint_text(one, 1)
