"""The speed ladder the lessons and labs quote: every figure traced to an H100 run committed beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.course import ladder

ROOT = Path(__file__).resolve().parents[2]


def test_every_step_of_the_course_is_in_the_ladder_in_order():
    keys = [k for k, _, _ in ladder.STEPS]
    assert keys == ["lab3", "lab4a", "lab4b", "lab5", "lab6", "lab7", "lab8", "lab9"]


def test_measured_figures_come_from_a_committed_run_on_a_named_gpu():
    data = ladder.load()
    assert data["gpu"].startswith("NVIDIA H100") and data["date"] and data["driver_cuda"]
    for key, e in data["rungs"].items():
        assert e["source"], key
        src = ROOT / e["source"].split(" ")[0]
        assert src.is_file(), f"{key}: {src} missing"
        run = json.loads(src.read_text())
        assert run["rungs"][key]["speed"] == e["speed"], f"{key}: figures differ from {src.name}"
        for s in e["speed"]:
            if s.get("ratio_range"):  # interleaved: the median of the per-round ratios, inside their range
                lo, hi = s["ratio_range"]
                assert s["cublas_tflops"] and lo <= s["ratio"] <= hi and len(s["round_ratios"]) >= 7
            else:
                assert s["cublas_tflops"] and abs(s["ratio"] - s["tflops"] / s["cublas_tflops"]) < 1e-6
            assert s["sm_clock_mhz"], f"{key} {s['shape']}: no SM clock"
        assert all(c["ok"] for c in e["correctness"]), key


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (8192, 8192, 8192)])
def test_rungs_read_every_step_at_both_sizes(shape):
    data = ladder.load()
    rs = ladder.rungs(shape, data)
    assert [r.key for r in rs] == [k for k, _, _ in ladder.STEPS]
    unmeasured = {r.key for r in rs if not (r.tflops and r.ratio)}
    # Lab 6 (persistent, no clusters) has no figure until bench/ladder.py has run on the H100 with today's numbering
    assert unmeasured == ({"lab6"} if int(data.get("lab_numbering", 1)) < ladder.LAB_NUMBERING else set())


def test_results_recorded_before_the_split_are_read_through_their_former_keys():
    """A results file without "lab_numbering": its "lab6" is the clustered kernel (Lab 7), its "lab7" Stream-K
    (Lab 9)."""
    old = {"rungs": {"lab6": {"speed": [{"shape": [1, 2, 3], "tflops": 7.0, "cublas_tflops": 8.0, "ratio": 0.875}]},
                     "lab7": {"speed": [{"shape": [1, 2, 3], "tflops": 9.0, "cublas_tflops": 8.0, "ratio": 1.125}]}}}
    got = {r.key: r.tflops for r in ladder.rungs((1, 2, 3), old)}
    assert got["lab6"] is None and got["lab7"] == 7.0 and got["lab9"] == 9.0
    new = dict(old, lab_numbering=ladder.LAB_NUMBERING)
    got = {r.key: r.tflops for r in ladder.rungs((1, 2, 3), new)}
    assert got["lab6"] == 7.0 and got["lab7"] == 9.0 and got["lab9"] is None


def test_an_unmeasured_step_says_so(tmp_path):
    (tmp_path / "l.json").write_text(json.dumps({"rungs": {}}))
    rs = ladder.rungs((4096, 4096, 4096), ladder.load(tmp_path / "l.json"))
    assert all(r.tflops is None and "not measured yet" in str(r) for r in rs)


def test_the_figure_has_the_course_and_cublas_series():
    fig = ladder.figure(mine={"lab3": 300.0})
    assert [t.name for t in fig.data] == ["course kernel", "cuBLAS (same run)", "your kernel"]
    assert fig.layout.width <= 880


def test_the_readme_table_is_generated_from_the_results():
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import readme_table

    assert readme_table.main(["--check"]) == 0, "run python bench/readme_table.py"
    assert readme_table.cell({"tflops": 787.2, "ratio": 0.9881, "ratio_range": [0.987, 0.993]}) == \
        "787 (0.988× [0.987–0.993])"
    assert readme_table.cell(None) == "—"
