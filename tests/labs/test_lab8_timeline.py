"""Lab 8's timeline of the student's own kernel: from the executor's trace everywhere, and on an H100 from timeline
stamps placed into their kernel (helpers/include/hopper_trace.cuh). The stamped kernel is run here on the executor,
which executes the stamps' %clock64 and %globaltimer reads like any other instruction. The kernel is the one the
check grades: the cell carried on the course's Lab 7 kernel (no Lab 7 notebook is beside the tests), on the solutions'
wrappers of Labs 1 and 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import gpu
from helpers.course import labgen
from helpers.course.checks import lab5, lab8
from helpers.gpu.executor.trace import from_stamps, stamp_buffer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)


@pytest.fixture(scope="module")
def sol() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / "lab8_pingpong.ipynb")["LAB8_SRC"]


def test_the_timeline_shows_the_two_consumers_taking_turns(sol):
    text = lab8.timeline(sol)
    lines = text.splitlines()
    assert lines[0].startswith("520×392×136 on the emulator")
    who = [ln.split("consumer ")[1] for ln in lines[1:] if "consumer " in ln and ":" in ln.split("consumer ")[1]]
    mains = [w[0] for w in who if w.endswith("mainloop")]
    assert mains[:4] == ["0", "1", "0", "1"]
    assert "of it while the other consumer's mainloop issued wgmmas" in lines[-1]


def test_the_stamps_go_into_the_students_kernel_and_run(sol):
    src = lab8.stamped(sol)
    assert src.count("HOPPER_STAMP(WGMMA, 0);") == 1 and src.count("HOPPER_STAMP(EPILOGUE, 0);") == 1
    assert "unsigned long long* __restrict__ trace) {" in src
    m, n, k = 520, 392, 136
    kernel = gpu.compile(src, lab8.KERNEL_NAME)
    a, b = lab8.C.make_operands(np.random.default_rng(0), m, n, k)
    buf = stamp_buffer(4, 12)
    res = gpu.run_on_executor(kernel, (4, 1, 1), 384, lab8.SMEM_BYTES, gpu.TensorMapArg(a, lab8.LAUNCH.box_a),
                              gpu.TensorMapArg(b, lab8.LAUNCH.box_b),
                              gpu.TensorMapArg(np.zeros((m, n), gpu.bfloat16), lab8.LAUNCH.box_c),
                              np.int32(m), np.int32(n), np.int32(k), buf, cluster=(2, 1, 1), hazards=False)
    out = res.arrays[-1] if hasattr(res, "arrays") else buf
    secs = lab8.sections(from_stamps(np.asarray(out), (4, 1, 1), 384, align="clock"), epilogue=("work",))
    runs = secs[(0, 0, 0)]
    assert [g for g, *_ in runs["mainloop"]][:2] == [0, 1]
    assert {g for g, *_ in runs["epilogue"]} == {0, 1}


def test_a_kernel_without_the_anchor_lines_says_where_the_stamps_go(sol):
    with pytest.raises(ValueError, match="cannot place the stamps"):
        lab8.stamped(sol.replace("int M, int N, int K) {", "int M, int N, int K)\n{"))
