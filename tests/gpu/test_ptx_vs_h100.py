"""On an H100: every course kernel gives bit-identical outputs on the GPU and on the PTX executor, and the demo
kernels fail with the same sentences (tools/h100/executor_vs_h100.py does the work; tests/ptx/test_silicon.py checks
the committed result on machines without a GPU)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "h100" / "executor_vs_h100.py"


def test_executor_matches_the_h100_bit_for_bit() -> None:
    spec = importlib.util.spec_from_file_location("ptx_compare", SCRIPT)
    compare = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    old = os.environ.get("HELPERS_EXECUTOR")
    try:
        spec.loader.exec_module(compare)
        res = compare.run_all()
    finally:
        if old is None:
            os.environ.pop("HELPERS_EXECUTOR", None)
        else:
            os.environ["HELPERS_EXECUTOR"] = old
    bad = [k["name"] for k in res["kernels"] if not k["bit_identical"]]
    bad += [a["op"] for a in res["alu"] if not a["bit_identical"]]
    # a deadlock is reported by whichever waiter gives up first (a race among the waiters on the GPU): the same
    # barrier, parity and block is the same report
    bad += [s["demo"] for s in res["sentences"] if not (s["same_but_waiter"] if "deadlock" in s["demo"] else
                                                         s["identical"])]
    bad += [r["launch"] for r in res["refusals"] if not r["identical"]]
    assert not bad, bad
