"""bench/torch_matmul.py's plumbing on a fake timer: its classes, its quick subset, its comparisons, its report.
Nothing here times anything; the GPU run writes what these render."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import torch_matmul as tm  # noqa: E402

from helpers.gpu.clocks import Telemetry  # noqa: E402


def test_the_classes_hold_what_people_run():
    assert list(tm.CLASSES) == ["squares", "transformer", "small M", "odd", "few tiles"]
    small = {s for _, s in tm.CLASSES["small M"]}
    for m in (1, 8, 16, 32, 64, 128, 256):
        assert {(m, 1024, 1024), (m, 4096, 4096), (m, 16384, 16384)} <= small
    tokens = {s[0] for _, s in tm.CLASSES["transformer"]}
    assert min(tokens) == 1 and max(tokens) == 8192
    odd = [s for _, s in tm.CLASSES["odd"]]
    assert all(any(d % 8 for d in s) for s in odd if s != (4000, 4000, 4000))
    names = [n for rows in tm.CLASSES.values() for n, _ in rows]
    assert len(names) == len(set(names))


def test_quick_takes_a_few_shapes_of_every_class():
    quick = tm.selected(None, quick=True)
    assert {c for c, _, _ in quick} == set(tm.CLASSES)
    assert len(quick) == sum(len(v) for v in tm.QUICK.values()) < len(tm.selected(None, quick=False)) / 3
    assert [n for c, n, _ in tm.selected(["odd"], quick=False)] == [n for n, _ in tm.CLASSES["odd"]]
    with pytest.raises(SystemExit, match="unknown classes"):
        tm.selected(["cubes"], quick=False)


def _fake_side(ms: float):
    return lambda: [ms, ms * 1.01, ms * 0.99]


def test_the_comparisons_on_a_fake_timer():
    """gpu.matmul at 0.9 ms against torch at 1.0 ms: 1.11× torch; torch against itself 1.0; cuBLAS at 1.0 ms."""
    sides = {"gpu.matmul": _fake_side(0.9), "torch.matmul": _fake_side(1.0), "torch.matmul again": _fake_side(1.0),
             "cuBLAS": _fake_side(1.0)}
    got = tm.compare(sides, rounds=3, telemetry=lambda: Telemetry(read=lambda: (1980, 650.0)))
    assert set(got) == {"torch", "noise", "cublas"}
    assert got["torch"]["ratio"] == pytest.approx(1 / 0.9) and got["noise"]["ratio"] == pytest.approx(1.0)
    assert got["torch"]["rounds"] == 3 and got["torch"]["first"] == ["gpu.matmul", "torch.matmul", "gpu.matmul"]
    assert got["torch"]["a_sm_clock_mhz"] == 1980 and got["torch"]["clock_differs"] is False
    del sides["cuBLAS"]
    assert set(tm.compare(sides, rounds=1)) == {"torch", "noise"}


def test_the_report_names_the_gpu_the_driver_the_clocks_and_the_classes():
    sides = {"gpu.matmul": _fake_side(0.5), "torch.matmul": _fake_side(0.55), "torch.matmul again": _fake_side(0.55)}
    entry = tm.compare(sides, rounds=3, telemetry=lambda: Telemetry(read=lambda: (1755, 700.0)))
    rows = [{"class": "small M", "name": "M=1 N=4096 K=4096", "shape": [1, 4096, 4096], "chosen": "lab9-16-swapAB",
             "max_error": 0.01, **entry},
            {"class": "odd", "name": "4000³", "shape": [4000, 4000, 4000], "chosen": "lab7",
             "failure": "AssertionError: values"}]
    result = {"gpu": "NVIDIA H200", "sm_count": 132, "driver": "580.159.04", "driver_cuda": [13, 0],
              "max_sm_clock_mhz": "1980", "torch": "2.9.0", "torch_cuda": "12.8", "cublas": "13.1.0",
              "dtype": "bf16", "date": "2026-12-02 08:00 UTC", "method": "fake", "shapes": rows,
              "geomean": tm.summarize([r for r in rows if r.get("torch")])}
    md = tm.render(result)
    assert f"NVIDIA H200 ({result['sm_count']} SMs), driver 580.159.04" in md and "max SM clock 1980 MHz" in md
    assert "| small M | M=1 N=4096 K=4096 | 1×4096×4096 | lab9-16-swapAB | 1.100 [" in md
    assert "1755 / 1755" in md and "AssertionError: values" in md
    assert result["geomean"]["all"]["torch"] == pytest.approx(1.1) and "odd" not in result["geomean"]
    assert math.isclose(tm.geomean([2.0, 0.5]), 1.0)


def test_without_a_gpu_it_prints_the_plan_and_exits_0(capsys):
    assert tm.main(["--quick", "--only", "small M"]) == 0
    out = capsys.readouterr().out
    assert "M=1 N=4096 K=4096" in out and "swapAB" in out and "timing skipped" in out


def test_the_gpu_script_lists_its_cases_and_the_alternatives_each_rule_rejected(capsys, tmp_path):
    sys.path.insert(0, str(ROOT / "tools" / "h100"))
    import every_shape

    from helpers.gpu import gemm as mm
    from helpers.hopper import parts

    sxm = parts.PROFILES["h100-sxm"].resident(2)
    assert every_shape.alternative("swap A and B", 1, 4096, 4096, sxm).name == "lab9-128"
    assert every_shape.alternative("narrow tiles", 4096, 16, 4096, sxm).name == "lab9-128"
    assert every_shape.alternative("split-K", 8, 4096, 1024, sxm).name == "lab9-16-pairs-swapAB"
    for rule, shape in every_shape.RULE_SHAPES:
        assert every_shape.alternative(rule, *shape, sxm) != mm.choose(*shape, sxm), (rule, shape)
    assert {d for *_, d, _ in every_shape.VALUE_CASES} == {"bf16", "f16", "f32"}
    assert any(mm.choose(m, n, k).swapped for m, n, k, *_ in every_shape.VALUE_CASES)
    assert every_shape.main([str(tmp_path)]) == 0
    assert "skipped: needs a Hopper GPU and torch" in capsys.readouterr().out
