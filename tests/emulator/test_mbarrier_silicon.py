"""The emulator's mbarrier gives the H100's test_wait answers after every step of every captured script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.course.widgets import barrier
from helpers.hopper.mbarrier import MBarrierError

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "mbarrier_h100.json"
DATA = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {"meta": {}, "cases": []}


def test_fixture_is_there_and_says_where_it_came_from():
    assert DATA["cases"], f"{FIXTURE} missing: run tools/h100/mbarrier.py on an H100"
    assert "H100" in DATA["meta"]["gpu"] and DATA["meta"]["date"]
    assert len(DATA["cases"]) >= 40


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["name"])
def test_emulator_matches_the_h100(case):
    script = [tuple(step) for step in case["script"]]
    if "fault" in case:  # the chip trapped: the emulator must refuse the script too, not model it silently
        with pytest.raises(MBarrierError):
            barrier.wait_bits(script)
    else:
        assert barrier.wait_bits(script).tolist() == case["wait_bits"], f"script {script}"
