"""Lesson 06's section on the fused epilogue and programmatic dependent launch, tied to what backs it: the kernel
(bench/kernels/lab5_fused.cu), the numpy model (helpers.hopper.fused), the quizzes, and the H100 capture
tests/data/fused_h100.json (tools/h100/fused.py) once it exists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pytest

from helpers.course.quizzes import lesson06
from helpers.gpu import gemm
from helpers.hopper import epilogue, fused, parts

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "lessons" / "06_epilogue.ipynb"
KERNEL = (ROOT / "bench" / "kernels" / "lab5_fused.cu").read_text()
CAPTURE = ROOT / "tests" / "data" / "fused_h100.json"


def _cells() -> dict[str, str]:
    return {c.id: c.source for c in nbformat.read(LESSON, as_version=4).cells}


def _text() -> str:
    return "\n".join(_cells().values())


def test_the_section_teaches_the_fused_epilogue_the_reduction_limit_and_pdl():
    text = _text()
    for needle in ("D = act(α·A·B + β·C + bias)", "GELU", "ReLU", "bias", "C goes into D's buffer", "layer norm",
                   "softmax", "kernel boundary", "griddepcontrol.wait", "griddepcontrol.launch_dependents",
                   "cudaGridDependencySynchronize", "cudaTriggerProgrammaticLaunchCompletion", "cuLaunchKernelEx",
                   "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION", "fused_h100.json", "not measured yet",
                   "Predict before you run", "Predict before you read"):
        assert needle in text, needle
    summary = _cells()["l06-32"]
    assert "griddepcontrol.wait" in summary and "wait_group.read" in summary
    table = nbformat.read(LESSON, as_version=4).cells[-1].source
    for name in ("LinCombPerColBiasEltAct", "GELU_taylor", "ReuseSmemC", "wait_on_dependent_grids",
                 "launch_dependent_grids", "launch_with_pdl"):
        assert name in table, name


def test_the_steps_in_the_text_are_the_kernels_and_the_models():
    text = _cells()["l06-40"]
    for step in ("`x = α·acc`", "`x = x + β·C`", "`x = x + bias[n]`", "`x = act(x)`", "round to bf16"):
        assert step in text, step
    body = KERNEL.split("fused_subtile(unsigned char* buf")[1].split("extern \"C\"")[0]
    order = [body.index(s) for s in ("__fmul_rn(alpha, d[j])", "__fmul_rn(beta, cv.x)", "bv.x", "activate(x0)")]
    assert order == sorted(order)
    assert "tanh.approx" not in gemm.fused_kernel("gelu", "f32").ptx and "__fmaf" not in KERNEL
    assert "fma.rn.f32" not in gemm.fused_kernel("gelu", "f32").ptx.split(".entry")[1].split("wgmma")[-1]


def test_the_buffer_reuse_words_match_the_kernel():
    text = _cells()["l06-43"]
    assert "224 KiB" in text and gemm.SMEM_BYTES - 1024 == 224 * 1024
    assert f"`expect_tx` of {epilogue.SUB_BYTES} bytes" in text
    reload = KERNEL.index("hopper::tma_store_wait_read<0>();")
    assert reload < KERNEL.index("hopper::tma_load_2d(buf, &tmap_c") and "phase 0" in text and "phase 1" in text
    assert "(sub / 2) & 1" in KERNEL  # sub-tiles 0, 1 → phase 0; 2, 3 → phase 1
    # fp32 C: a 128-byte swizzled row holds 32 of them, so a 64-column sub-tile is two boxes and 16 KiB
    assert "two 64×32 boxes and 16 KiB" in text and 128 // 4 == 32 and 64 * 64 * 4 == 16 * 1024


def test_the_reduction_quiz_and_the_pieces_cell():
    assert fused.row_reduction_needs(4096) == 16 and lesson06.row_blocks.judge("16")[0]
    assert not lesson06.row_blocks.judge("32")[0]
    assert lesson06.pdl_wait.judge("b")[0] and not lesson06.pdl_wait.judge("a")[0]
    assert "4096" in _cells()["l06-47"] and "256-column piece" in _cells()["l06-47"]


def test_pdl_words_match_the_launch_and_the_grid():
    text = _cells()["l06-49"]
    tiles = math.ceil(512 / 128) * math.ceil(4096 / 256)
    sms = parts.PROFILES["h100-sxm"].sms  # the measured part the lesson's timings come from
    assert f"512×4096 is {tiles} tiles on {sms} SMs" in text and tiles < sms
    kernel_body = KERNEL.split("lab5_fused(")[1]
    wait, trigger = kernel_body.index("griddepcontrol.wait"), kernel_body.index("griddepcontrol.launch_dependents")
    first_read = min(kernel_body.index("hopper::tma_load_2d"), kernel_body.index("fused_subtile("))
    assert kernel_body.index("hopper::mbar_init") < wait < trigger < first_read
    assert "programmatic=True" in _cells()["l06-50"]


# ------------------------------------------------------------------------------------------- the H100 capture
@pytest.fixture(scope="module")
def capture() -> dict:
    if not CAPTURE.exists():
        pytest.skip("tests/data/fused_h100.json not captured yet: bash tools/h100/run.sh --wheels .whl-nb fused")
    return json.loads(CAPTURE.read_text())


def test_capture_names_the_gpu_driver_date_and_clock(capture):
    meta = capture["meta"]
    assert "H100" in meta["gpu"] and meta["driver"] and meta["date"] and meta["script"] == "tools/h100/fused.py"
    assert capture["clock"] and capture["summary"]


def test_capture_fused_output_is_right(capture):
    for c in capture["check"]:
        assert c["beyond_tolerance"] == 0, c
        assert c["fused_equals_unfused"] < c["elements"]  # the lesson: not the same bits as two kernels


def test_capture_has_every_shape_and_pair(capture):
    assert set(capture["speed"]) == {"4096×4096×4096", "8192×8192×4096"}
    for s in capture["speed"].values():
        assert s["fused_vs_plain"]["labels"] == ["fused", "plain Lab 5"]
        assert s["fused_vs_unfused"]["labels"] == ["fused", "unfused"]
    for pair in capture["pdl"].values():
        assert pair["bit_identical_runs"] == "5 of 5"  # griddepcontrol.wait keeps the second GEMM's input right


def test_lesson_words_hold_on_the_h100(capture):
    """"two dependent 512×4096×4096 GEMMs of a few tens of microseconds each" and "those few microseconds" of launch
    and prologue that the programmatic launch hides."""
    text = _cells()["l06-52"]
    assert "GEMMs of a few tens of microseconds each" in text
    p = capture["pdl"]["512×4096×4096 then 512×4096×4096"]
    per_gemm = p["us_per_pair"][1] / 2
    assert 15 <= per_gemm <= 100, f"a 512×4096×4096 GEMM took {per_gemm:.1f} µs: update l06-52's 'a few tens'"
    assert "those few microseconds" in _cells()["l06-49"]
    assert 0 < p["saved_us"] < 10, f"the programmatic launch saved {p['saved_us']:.1f} µs a pair: l06-49 says it " \
        "hides a few microseconds of launch and prologue"


def test_what_the_figures_say_is_what_the_h100_measured():
    """The cell after the figures: fusion loses here, C and the bias cost a few percent each, GELU the most."""
    text = _cells()["l06-53b"]
    for needle in ("fusion loses", "a few percent", "GELU costs the most", "tanh.approx.f32", "Labs 6 and 7", "Lab 8"):
        assert needle in text, needle
    if not CAPTURE.exists():
        pytest.skip("tests/data/fused_h100.json is written on an H100 by tools/h100/fused.py")
    speed = json.loads(CAPTURE.read_text())["speed"]["4096×4096×4096"]
    fused_ms, unfused_ms = speed["fused_vs_unfused"]["ms"]
    assert fused_ms > unfused_ms  # "fusion loses"
    if "parts" not in speed:
        pytest.skip("this capture predates the step-by-step timing")
    part = {label: p["ratio_b_over_a"] for label, p in speed["parts"].items()}
    assert 0.85 <= part["β·C (C loaded)"] < 1.0 and 0.85 <= part["fp32 bias"] < 1.0  # a few percent each
    assert part["GELU"] == min(v for k, v in part.items() if k != "β·C + bias + GELU")
