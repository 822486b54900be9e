"""A warp's mbarrier.arrive, as the H100 counts it (tools/h100/warp_arrivals.py,
tests/data/mbarrier_warp_arrivals_h100.json): the lanes arriving at once on one barrier (plain, with an arrival count,
with .expect_tx, or on the other block of a cluster) are one arrival of their sum, and more than the phase awaits stop
the kernel. Each case runs on the PTX
executor and must end as it did on the H100: the same fault, or the same test_wait answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "mbarrier_warp_arrivals_h100.json"
sys.path.insert(0, str(ROOT / "tools" / "h100"))

import warp_arrivals  # noqa: E402


def _cases() -> list[dict]:
    return json.loads(FIXTURE.read_text())["cases"]


def test_the_capture_covers_every_case_and_ran_on_an_h100():
    data = json.loads(FIXTURE.read_text())
    assert "H100" in data["meta"]["gpu"]
    assert [c["name"] for c in data["cases"]] == list(warp_arrivals.CASES)
    assert not [c for c in data["cases"] if "error" in c]
    faulted = {c["name"] for c in data["cases"] if c["faulted"]}
    assert {"count2_warp32", "count2_three_lanes", "count31_warp32", "count2_two_lanes_arrive_2_each",
            "count2_expect_tx_three_lanes", "remote_count2_warp32", "remote_count2_three_lanes"} <= faulted
    assert not {"count32_warp32", "count2_one_lane_x32", "count2_two_lanes", "count64_128_threads",
                "count4_two_lanes_arrive_2_each", "count2_expect_tx_two_lanes", "remote_count2_two_lanes",
                "remote_count32_warp32"} & faulted


@pytest.mark.parametrize("recorded", _cases(), ids=lambda c: c["name"])
def test_the_executor_ends_each_case_as_the_h100_did(recorded):
    got = warp_arrivals.case(recorded["name"])
    assert got["faulted"] == recorded["faulted"], got
    if recorded["faulted"]:
        assert "CUDA_ERROR_LAUNCH_FAILED" in got["message"] and "in one mbarrier.arrive" in got["message"], got
    else:
        assert (got["test_wait_parity0"], got["test_wait_parity1"]) == (recorded["test_wait_parity0"],
                                                                        recorded["test_wait_parity1"])
