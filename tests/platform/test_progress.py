"""A long check shows what it is doing as it does it: one line under the cell, updated in place (compiling, running
on the executor block by block, the check's name and the seconds so far), gone when the work is done."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.course import grading, progress
from helpers.course.checks import _common

PROBE = r"""
extern "C" __global__ void fill(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = blockIdx.x; }
"""


class Handle:
    def __init__(self, shown: list):
        self.shown = shown

    def update(self, bundle, raw=False):
        self.shown.append(bundle["text/plain"])


@pytest.fixture
def page(monkeypatch):
    """The line as a Jupyter page would get it: the first display, then each update in place."""
    shown: list[str] = []

    def display(bundle, raw=False, display_id=False):
        shown.append(bundle["text/plain"])
        return Handle(shown)

    import IPython.display

    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setattr(progress, "_in_kernel", lambda: True)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    return shown


@pytest.mark.timeout(300)
def test_a_check_says_it_compiles_then_runs_block_by_block_then_goes(page, monkeypatch):
    monkeypatch.setattr(progress, "AFTER_S", 0.0)  # warm caches can make the whole probe quicker than the wait
    with grading.check("Lab 0 · a probe") as c:
        kernel = _common.compile_student(PROBE, "fill", what="the probe")
        (out,) = _common.run(kernel, (256, 1, 1), (32, 1, 1), 0, np.zeros(256 * 32, np.float32), what="the probe")
        c.equal("the last block's value", float(out[-1]), 255.0)
    assert any(line.startswith("⏳ Lab 0 · a probe · compiling the probe · ") for line in page), page
    running = [line for line in page if "running the probe on the executor" in line]
    assert running, page
    blocks = [line for line in running if "block " in line]
    assert blocks and all(" of 256 on the executor" in line for line in blocks), running
    assert page[-1] == "", "the line is gone when the check is done"
    from helpers.gpu.executor import machine

    assert machine.progress_hook is None


def test_a_quick_check_shows_no_line(page):
    with grading.check("Lab 0 · quick") as c:
        c.equal("one", 1, 1)
    assert page == []


def test_outside_jupyter_nothing_is_printed_to_a_pipe(capsys):
    with progress.step("compiling", slow=True):
        progress.detail("block 1 of 2")
    assert capsys.readouterr().err == ""
