"""Lab 5's fused-epilogue step (the LAB5_FUSED cell: ``activate`` and ``fused_element``, run inside the course's
fused kernel on the PTX executor), both ways: the solution passes; the stub fails; named plausible wrong element
functions fail with a hint that names the mistake. Each CUDA run takes seconds, so the wrong kernels run on one seed
each, and the launches' inputs are shown to part every mistake from the model on each of 200 seeds with the
mistakes' numpy twins (no kernel run)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from helpers.course import grading, labgen
from helpers.course.checks import lab5
from helpers.gpu import gemm
from helpers.hopper import epilogue, fused

ROOT = Path(__file__).resolve().parents[2]
SOL = labgen.solution_namespace(ROOT / "solutions" / "lab5_epilogue.ipynb")
STUB = labgen.solution_namespace(ROOT / "labs" / "lab5_epilogue.ipynb")


def _seeded(monkeypatch, seed: int) -> None:
    monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))


@pytest.mark.parametrize("seed", [0, 1])
def test_solution_passes(monkeypatch, seed):
    _seeded(monkeypatch, seed)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        lab5.check_fused_element(SOL["LAB5_FUSED"])
    assert out.getvalue().count("✓ ran on the emulator (hazard mode)") == 4


def test_stub_fails():
    msg = grading.assert_rejects(lab5.check_fused_element, STUB["LAB5_FUSED"], "not written yet", "hint")
    assert "(stuck? lab5.hint('lab5-fused', 1))" in msg


def test_the_splice_replaces_only_the_element_code():
    """The graded kernel is the course's fused kernel with its activate and per-element lines swapped for the
    student's functions and a call of them; everything else (mainloop, C reloads, stores) is the course's."""
    src = lab5.fused_source_with(SOL["LAB5_FUSED"], "gelu", "f32")
    course = gemm.fused_source("gelu", "f32")
    assert "fused_element(a0, cv.x, bv.x" in src and "fused_pair(d[j], d[j + 1]" in src
    assert "__floats2bfloat162_rn(activate(x0), activate(x1))" in course
    assert "__floats2bfloat162_rn(activate(x0), activate(x1))" not in src
    for line in ("hopper::tma_load_2d(buf, &tmap_c, &cbar[sub % 2], n0 + (sub + 2) * SUB, m0 + 64 * c);",
                 "__device__ __forceinline__ float tanh_rational(float x) {",
                 "HOPPER_WAIT(full, s, (k / STAGES) & 1);"):
        assert line in src and line in course


def _swap(old: str, new: str) -> str:
    src = SOL["LAB5_FUSED"]
    assert old in src, old
    return src.replace(old, new)


def wrong_elements() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Plausible wrong LAB5_FUSED cells: name -> (source, words the failure must hold)."""
    c_line = "  if (with_c) x = __fadd_rn(x, __fmul_rn(beta, __bfloat162float(c)));\n"
    bias_line = "  if (with_bias) x = __fadd_rn(x, bias);\n"
    tail = "  return __float2bfloat16_rn(activate(x));\n"
    return {
        "beta C added after rounding": (_swap(c_line + bias_line + tail, bias_line + (
            "  __nv_bfloat16 r = __float2bfloat16_rn(activate(x));\n"
            "  if (with_c) r = __float2bfloat16_rn(__fadd_rn(__bfloat162float(r),\n"
            "                                                __fmul_rn(beta, __bfloat162float(c))));\n"
            "  return r;\n")), ("came in after a rounding",)),
        "bias after the activation": (_swap(bias_line + tail, "  x = activate(x);\n" + bias_line
                                            + "  return __float2bfloat16_rn(x);\n"),
                                      ("bias was added after the activation",)),
        "GELU with another constant": (_swap("0x1.988454p-1f", "0.79788f"), ("0x1.988454p-1f", "tanh_rational")),
        "GELU with tanhf": (_swap("tanh_rational(u)", "tanhf(u)"), ("not tanhf or tanh.approx", "tanh_rational")),
        "alpha applied to C too": (_swap("  float x = __fmul_rn(alpha, acc);\n" + c_line,
                                         "  float x = acc;\n" + c_line + "  x = __fmul_rn(alpha, x);\n"),
                                   ("α scaled C too",)),
        "a fused multiply-add": (_swap("  float x = __fmul_rn(alpha, acc);\n" + c_line,
                                       "  float x = alpha * acc;\n  if (with_c) x = x + beta * __bfloat162float(c);\n"),
                                 ("fused multiply-add", "__fmul_rn")),
        "C added without with_c": (_swap("  if (with_c) x = __fadd_rn(", "  x = __fadd_rn("), ("never loads C",)),
        "bias added without with_bias": (_swap(bias_line, "  x = __fadd_rn(x, bias);\n"), ("not a no-op",)),
    }


@pytest.mark.parametrize("name", list(wrong_elements()))
def test_wrong_elements_fail_with_the_mistake_named(monkeypatch, name):
    src, needles = wrong_elements()[name]
    _seeded(monkeypatch, 7)
    grading.assert_rejects(lab5.check_fused_element, src, *needles)


def _gelu_k0(k0: np.float32):
    def act(x):
        x = np.asarray(x, np.float32)
        with np.errstate(all="ignore"):
            u = k0 * (x + fused.GELU_K1 * ((x * x) * x))
            return ((np.float32(0.5) * x) * (np.float32(1) + fused.tanh_rational(u))).astype(np.float32)
    return act


def test_every_seeds_launches_part_each_mistake_from_the_model():
    """On each of 200 seeds, the check's launches (their inputs; the mistakes' numpy twins for the kernel's bits)
    tell every named mistake from the model, and the hint reader names it: whatever the seed, a wrong element
    function cannot pass."""
    other_k0 = np.float32(0.79788)
    for seed in range(200):
        cases = lab5.fused_cases(grading.SeededRng(seed))
        runs = []
        for case in cases:
            acc = case.acc
            want = fused.fused_epilogue(acc, alpha=case.alpha, beta=case.beta, c=case.c,
                                        bias=case.bias if case.bias_kind else None, act=case.act)
            runs.append((case, acc, want))
        for kind in lab5._FUSED_HINTS:
            results = [(case, acc, lab5._fused_wrong(case, acc, kind), want) for case, acc, want in runs]
            assert any(not np.array_equal(got, want) for _, _, got, want in results), (seed, kind)
            assert lab5._fused_hint(results) == lab5._FUSED_HINTS[kind], (seed, kind)
        gelu = [(case, acc, want) for case, acc, want in runs if case.act == "gelu"]
        assert any(not np.array_equal(epilogue.to_bf16_bits(_gelu_k0(other_k0)(
            _pre_activation(case, acc))), want) for case, acc, want in gelu), seed


def _pre_activation(case, acc):
    with np.errstate(all="ignore"):
        x = np.float32(case.alpha) * acc
        if case.beta:
            x = x + np.float32(case.beta) * case.c.astype(np.float32)
        if case.bias_kind:
            x = x + case.bias.astype(np.float32)[None, :]
    return x.astype(np.float32)


def test_the_model_twin_of_the_solution_is_the_model():
    """The hint reader's twins are built on the same steps as the model: with no mistake the model's bits."""
    case = lab5.fused_cases(grading.SeededRng(3))[0]
    acc = case.acc
    want = fused.fused_epilogue(acc, alpha=case.alpha, beta=case.beta, c=case.c, bias=case.bias, act=case.act)
    assert np.array_equal(epilogue.to_bf16_bits(fused.activate(_pre_activation(case, acc), case.act)), want)
