"""The grading module: clear reports, strict comparisons, failures that raise."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import grading


def test_passing_check_prints_a_tick(capsys):
    with grading.check("demo") as c:
        c.equal("two", 1 + 1, 2)
        c.array("ones", np.ones((4, 4)), np.ones((4, 4)))
    out = capsys.readouterr().out
    assert "✅ demo: 2 of 2 checks passed" in out


def test_first_mismatch_and_picture_are_reported(capsys):
    expected = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    got = expected.copy()
    got[5, 7] += 1
    with pytest.raises(grading.CheckFailed) as info:
        with grading.check("tile") as c:
            c.array("C tile", got, expected)
    msg = str(info.value)
    assert "1 of 4096 elements differ" in msg and "index (5, 7)" in msg
    assert "X" in msg and "·" in msg
    assert "❌ tile" in capsys.readouterr().out


def test_nan_never_passes_even_with_tolerance():
    got = np.zeros((8, 8), dtype=np.float32)
    got[3, 3] = np.nan
    with pytest.raises(grading.CheckFailed, match="NaN"):
        with grading.check("nan") as c:
            c.array("C", got, np.zeros((8, 8)), rtol=1.0, atol=1e9)


def test_shape_mismatch_and_none_fail():
    with pytest.raises(grading.CheckFailed, match="shape"):
        with grading.check("shape") as c:
            c.array("C", np.zeros((4, 8)), np.zeros((8, 4)))
    with pytest.raises(grading.CheckFailed, match="return"):
        with grading.check("none") as c:
            c.array("C", None, np.zeros(3))


def test_stub_becomes_a_plain_words_failure():
    def stub(x):
        raise NotImplementedError("multiply by two")

    with pytest.raises(grading.CheckFailed, match="not written yet.*multiply by two"):
        with grading.check("double") as c:
            c.equal("double(3)", grading.call_student(stub, 3), 6)


def test_equal_is_strict_about_value_and_kind():
    with pytest.raises(grading.CheckFailed):
        with grading.check("x") as c:
            c.equal("int", 7, 6)
    with pytest.raises(grading.CheckFailed):
        with grading.check("x") as c:
            c.equal("float nan", float("nan"), float("nan"))
    with grading.check("x") as c:
        c.equal("numpy int is an int", np.int64(6), 6)


def test_raises_check():
    with grading.check("x") as c:
        c.raises("rejects", lambda: int("a"), ValueError)
    with pytest.raises(grading.CheckFailed, match="no error"):
        with grading.check("x") as c:
            c.raises("rejects", lambda: 1, ValueError)


def test_fresh_rng_differs_and_reports_its_seed():
    a, b = grading.fresh_rng(), grading.fresh_rng()
    assert a.seed != b.seed
    with pytest.raises(grading.CheckFailed, match=f"seed {a.seed}"):
        with grading.check("x", seed=a.seed) as c:
            c.equal("v", 1, 2)


def test_gemm_tolerance_accepts_fp32_accumulation_and_rejects_a_missed_k_step():
    rng = np.random.default_rng(0)
    import ml_dtypes

    a = rng.standard_normal((64, 256)).astype(ml_dtypes.bfloat16).astype(np.float64)
    b = rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16).astype(np.float64)
    exact = a @ b
    fp32 = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64)
    tol = grading.gemm_tolerance(a, b)
    assert np.all(np.abs(fp32 - exact) <= tol)
    missed = a[:, 16:] @ b[16:, :]
    assert np.any(np.abs(missed - exact) > tol)


def test_quiz_needs_wrong_answers_and_never_raises(capsys):
    with pytest.raises(ValueError):
        grading.Quiz("q", answer=1)
    q = grading.Quiz("q", answer=16384, wrong=(128,))
    assert q.grade("16 384".replace(" ", "")) and not q.grade("abc")
