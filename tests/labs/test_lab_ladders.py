"""The ladder at the end of Labs 3 and 5 to 9 (Lab 4 has its own): the course's kernels of the lab and the lab before as
the H100 measured them, then the student's own kernel as the lab's check timed it in this session, beside the course's
kernel timed in the same run; "not timed" until the check has run on an H100."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers.course.checks import lab3, lab5, lab7, lab8, lab9


@pytest.mark.parametrize("mod, lab, size, before", [
    (lab3, "Lab 3", 4096, "Lab 3 · the course's kernel"),
    (lab7, "Lab 7", 4096, "Lab 6 · the course's kernel"),
    (lab8, "Lab 8", 4096, "Lab 7 · the course's kernel (cooperative)"),
    (lab9, "Lab 9", (1024, 1024, 16384), "Lab 7 · the course's kernel (data-parallel)"),
])
def test_the_ladder_shows_your_kernel_beside_the_courses(monkeypatch, mod, lab, size, before):
    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    rows = mod.ladder_rows(size)
    assert rows[-1]["step"] == f"{lab} · your kernel" and "not timed" in rows[-1]["where"]
    assert {before, f"{lab} · the course's kernel"} <= {r["step"] for r in rows}
    course = next(r for r in rows if r["step"] == f"{lab} · the course's kernel")
    assert course["tflops"] and course["cublas_tflops"], "the course's kernel of this lab is measured at this shape"
    lab5.timed(mod.KERNEL_NAME)[size] = (SimpleNamespace(tflops=600.0, cublas_tflops=650.0),
                                        SimpleNamespace(tflops=610.0))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    mod.show_ladder(size)
    (out,) = shown
    assert f"| {lab} · your kernel | 600 | 650 | 0.92 | this notebook, just now |" in out
    assert f"| {lab} · the course's kernel, same run | 610 |" in out
    assert out.startswith(f"| {lab5.shape_words(size)} |")


def test_each_kernel_keeps_its_own_timings(monkeypatch):
    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    lab5.timed(lab7.KERNEL_NAME)[4096] = (SimpleNamespace(tflops=1.0, cublas_tflops=2.0), None)
    assert 4096 not in lab5.timed(lab5.KERNEL_NAME) and 4096 not in lab5.timed(lab8.KERNEL_NAME)
