"""The one run path of the CUDA checks (helpers.course.checks._common): where it runs, what a run's failure says, and
the PTX as the explanation of a run (Explanation)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from helpers.course import grading
from helpers.course.checks import _common as C


def _finding(c: grading.Check) -> None:
    c.fail("a thread can read the tile before waiting for it", detail="    at line 7 of the kernel", hint="wait first")


def test_where_says_emulator_or_gpu(monkeypatch, executor):
    assert C.where() in ("ran on the emulator (no sm_90 GPU; hazard mode)",
                         "ran on the emulator (HELPERS_EXECUTOR=force; hazard mode)")
    assert C.where(hazards=False) in ("ran on the emulator (no sm_90 GPU)",
                                      "ran on the emulator (HELPERS_EXECUTOR=force)")
    assert "not timed: the emulator does not time kernels" in C.where(timing=True)
    from helpers import gpu

    monkeypatch.setattr(C, "on_h100", lambda: True)
    monkeypatch.setattr(gpu, "device_info", lambda: type("I", (), {"name": "NVIDIA H100 80GB HBM3"})())
    assert C.where() == C.where(timing=True) == f"ran on {gpu.where_name()}"


def test_a_failed_run_carries_the_ptx_finding():
    with pytest.raises(grading.CheckFailed) as err, grading.check("T") as c:
        ex = C.Explanation(c, defer=True)
        with ex:
            c.ok("compiles")
            _finding(c)
        with ex.run():
            c.array("ran on the emulator (no sm_90 GPU): the copy", np.zeros(4), np.ones(4))
    text = str(err.value)
    first, rest = text.split("\n", 1)
    assert "T: ran on the emulator (no sm_90 GPU): the copy" in first
    assert "what the PTX shows (the likely cause): a thread can read the tile before waiting" in rest
    assert "    at line 7 of the kernel" in rest and "hint: wait first" in rest


def test_a_run_that_passed_by_luck_fails_on_the_finding():
    with pytest.raises(grading.CheckFailed) as err, grading.check("T") as c:
        ex = C.Explanation(c, defer=True)
        with ex:
            _finding(c)
        with ex.run():
            c.ok("ran on the emulator (no sm_90 GPU): the copy")
        ex.settle()
    text = str(err.value)
    assert text.split("\n", 1)[0].endswith("a thread can read the tile before waiting for it")
    assert "the run above gave the right result all the same" in text


def test_without_a_run_the_finding_fails_at_once():
    with pytest.raises(grading.CheckFailed) as err, grading.check("T") as c:
        ex = C.Explanation(c, defer=False)
        with ex:
            _finding(c)
        raise AssertionError("not reached")
    assert "the run above" not in str(err.value)


def test_the_run_paths_sentence_names_the_check(executor):
    from helpers import gpu
    from helpers.gpu import examples

    kernel = gpu.compile(examples.DEADLOCK)
    with pytest.raises(grading.CheckFailed) as err, grading.check("Lab 0 · T") as c:
        ex = C.Explanation(c)
        with ex.run():
            C.run(kernel, 4, 32, 0, np.zeros(4 * 32, np.float32), what="the demo", timeout=20,
                  hint="look at the barrier")
    first = str(err.value).split("\n", 1)[0]
    assert first.startswith("✗ Lab 0 · T: the demo failed when it ran on the emulator") and "deadlock" in first
    assert "block (3,0)" in first and "full[2]" in first
    assert "hint: look at the barrier" in str(err.value)


def test_a_run_function_runs_here_on_the_emulator(executor, monkeypatch):
    """On the emulator a run function is called in this process (no child start-up, no GPU lock): its errors read
    as the child's would."""
    from helpers import gpu

    monkeypatch.setattr(gpu, "run_isolated", lambda *a, **k: pytest.fail("the child path was taken"))
    assert C.run(np.add, 2, 3, what="add", timeout=5) == 5
    with pytest.raises(RuntimeError, match="the isolated run raised ZeroDivisionError"):
        C.run(divmod, 1, 0, what="divmod", timeout=5)


# ------------------------------------------------------------------------------------------- on an H100 (simulated)
class _Bench:
    def __init__(self, tflops: float) -> None:
        self.tflops = tflops

    def summary(self) -> str:
        return f"{self.tflops:.0f} TFLOP/s"


def _pretend_h100(monkeypatch, student_tflops: float, course_tflops: float) -> list:
    """The Lab 5-6 run path as on an H100: the GPU's run gives the exact C, timing gives these speeds; the executor
    runs for real (inside ``emulated``). Returns the list the GPU runs are recorded in."""
    from helpers import gpu

    calls: list = []
    real = C.run_gemm

    def forced() -> bool:
        return os.environ.get("HELPERS_EXECUTOR") == "force"

    def run_gemm(source, spec, cases, *, work=False, **kw):
        if forced():
            return real(source, spec, cases, work=work, **kw)
        calls.append([a.shape for a, _ in cases])
        return [(a.astype(np.float64) @ b.astype(np.float64).T).astype(gpu.bfloat16) for a, b in cases]

    monkeypatch.setenv("HELPERS_EXECUTOR", "auto")
    monkeypatch.setattr(C, "run_gemm", run_gemm)
    monkeypatch.setattr(C, "on_h100", lambda: not forced())
    monkeypatch.setattr(gpu, "hopper_available", lambda: True)
    monkeypatch.setattr(gpu, "device_info", lambda: type("I", (), {"name": "NVIDIA H100 80GB HBM3"})())
    monkeypatch.setattr(C, "time_gemm", lambda source, spec, sizes, **kw: [
        (_Bench(student_tflops), "SM clock 1980 MHz", _Bench(course_tflops)) for _ in sizes])
    from helpers.course.checks import lab5

    monkeypatch.setattr(lab5, "on_h100", C.on_h100)
    return calls


def test_on_an_h100_the_kernel_also_runs_on_the_executor_in_hazard_mode(monkeypatch, capsys):
    """A student with a GPU gets the executor's verdict too: the GPU's shapes, then a small shape on the executor in
    hazard mode with the work checked, then the speed floor against the course's kernel timed in the same run."""
    from helpers.course.checks import lab5

    src = (Path(__file__).resolve().parents[2] / "bench" / "kernels" / "lab5_epilogue.cu").read_text()
    calls = _pretend_h100(monkeypatch, 590.0, 600.0)
    lab5.check_epilogue_kernel(src, sizes=(4096,), carried=False)
    out = capsys.readouterr().out
    from helpers import gpu

    here = gpu.where_name()  # how the check names the GPU it pretends to have
    assert calls and f"✓ ran on {here}: M=" in out, out
    assert f"ran on the emulator (beside {here}, the same kernel on a small shape; hazard mode): M=392, N=520" in out
    assert "the work, as the emulator recorded it" in out
    assert "your kernel 590 TFLOP/s, the course's 600 TFLOP/s in the same run (0.98×; the floor is 0.80×)" in out


def test_on_an_h100_a_slow_kernel_fails_the_speed_floor(monkeypatch):
    from helpers.course.checks import lab5

    src = (Path(__file__).resolve().parents[2] / "bench" / "kernels" / "lab5_epilogue.cu").read_text()
    _pretend_h100(monkeypatch, 11.0, 600.0)
    grading.assert_rejects(lambda s: lab5.check_epilogue_kernel(s, sizes=(4096,), carried=False), src,
                           "your kernel runs at 0.02× the course's (11 against 600 TFLOP/s, 98% slower)")
