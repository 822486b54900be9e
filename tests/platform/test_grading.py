"""The grading module: clear reports, strict comparisons, failures that raise."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.course import grading


def test_passing_check_prints_a_tick(capsys):
    with grading.check("demo") as c:
        c.equal("two", 1 + 1, 2)
        c.array("ones", np.ones((4, 4)), np.ones((4, 4)))
    out = capsys.readouterr().out
    assert "✓ demo: all 2 checks passed" in out and "✓ ones: all 16 elements match" in out
    with grading.check("one") as c:
        c.equal("it", 1, 1)
    assert "✓ one: the check passed" in capsys.readouterr().out


def test_first_mismatch_and_picture_are_reported(capsys):
    expected = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    got = expected.copy()
    got[5, 7] += 1
    with pytest.raises(grading.CheckFailed) as info:
        with grading.check("tile") as c:
            c.array("C tile", got, expected)
    msg = str(info.value)
    assert "1 of 4096 elements differ" in msg and "index (5, 7)" in msg and "expected 327.0, got 328.0" in msg
    assert "X" in msg and "·" in msg
    assert msg.startswith("✗ tile: C tile")
    assert "✗" not in capsys.readouterr().out  # the report is the error, shown once, not printed as well


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
    assert q.grade("16384") and not q.grade("abc")


# ---------------------------------------------------------------------------------------------------------
# the report: once, no traceback into the course, plain values, plain symbols
# ---------------------------------------------------------------------------------------------------------
def test_a_failed_check_renders_as_its_report_only():
    with pytest.raises(grading.CheckFailed) as info:
        with grading.check("Lab 9 · demo", seed=7) as c:
            c.equal("bytes of a box", np.uint8(223), 224, hint="rows × columns × element size")
    lines = info.value._render_traceback_()
    assert lines == ["✗ Lab 9 · demo: bytes of a box", "    expected: 224", "    got:      223",
                     "    hint: rows × columns × element size", "    (random inputs drawn with seed 7)"]
    assert str(info.value) == "\n".join(lines)


def test_emoji_in_a_graders_message_become_plain_symbols():
    failure = grading.CheckFailed("❌ the kernel no longer defines TILE_BYTES")
    assert str(failure) == "✗ the kernel no longer defines TILE_BYTES"
    assert grading.assert_rejects(lambda x: (_ for _ in ()).throw(failure), None, "❌", "✗").startswith("✗")


@pytest.mark.parametrize("value, text", [
    (np.uint8(223), "223"), (np.int64(-5), "-5"), (np.float32(0.1), "0.1"), (np.float64(2.5), "2.5"),
    (np.bool_(True), "True"), (16384, "16384 (0x4000)"), (-8192, "-8192 (-0x2000)"), (4096, "4096"),
    ((np.int32(64), np.int32(128)), "(64, 128)"), ((np.int8(1),), "(1,)"), ([np.uint16(3), "a"], "[3, 'a']"),
    ({"rows": np.int64(64)}, "{'rows': 64}"), ("64", "'64'"), (None, "None"), (1.5, "1.5"),
    (np.array([1, 2], np.uint8), "[1, 2]"), (np.zeros((64, 64), np.float32), "array of shape (64, 64), dtype float32"),
])
def test_plain_values(value, text):
    assert grading.plain(value) == text


def test_plain_bf16_scalar():
    import ml_dtypes

    assert grading.plain(np.array([1.5], ml_dtypes.bfloat16)[0]) == "1.5"


@pytest.mark.parametrize("n, text", [(0, "0 stages"), (1, "1 stage"), (2, "2 stages"), (np.int64(1), "1 stage")])
def test_plural(n, text):
    assert grading.plural(n, "stage") == text
    assert grading.plural(2, "index", "indices") == "2 indices"


def test_a_students_exception_is_reported_with_their_frames_only():
    def double(x):
        half = x / 0
        return half

    with pytest.raises(grading.CheckFailed) as info:
        with grading.check("double") as c:
            c.equal("double(3)", grading.call_student(double, 3), 6)
    msg = str(info.value)
    assert msg.startswith("✗ double: your code raised ZeroDivisionError: division by zero")
    assert ", in double" in msg and "half = x / 0" in msg
    assert "helpers/course/grading.py" not in msg and "call_student" not in msg and "c.equal" not in msg


def test_a_students_exception_through_numpy_names_their_line():
    def invert(a):
        return np.linalg.inv(a)

    with pytest.raises(grading.CheckFailed) as info:
        with grading.check("inverse") as c:
            c.equal("inverse", grading.call_student(invert, np.zeros((2, 2))), 1)
    msg = str(info.value)
    assert "raised LinAlgError: Singular matrix" in msg and "return np.linalg.inv(a)" in msg
    assert "numpy" not in msg.split("\n", 1)[1]


def test_a_bug_in_the_course_keeps_its_traceback():
    with pytest.raises(ValueError):
        with grading.check("a grader with a bug"):
            grading.plural("many", "stage")


# ---------------------------------------------------------------------------------------------------------
# quizzes: numbers as students type them, Enter submits, one verdict at a time
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("2048", 2048), (" 2048 ", 2048), ("2,048", 2048), ("2 048", 2048), ("2_048", 2048), ("2\u202f048", 2048),
    ("2048 FLOP/B", 2048), ("2048FLOP/B", 2048), ("2,048 FLOP/B", 2048), ("64 KiB", 64), ("50 %", 50),
    ("16,384 blocks", 16384), ("1e3", 1000), ("2.5", 2.5), ("-3", -3), ("\u22123", -3), (".5", 0.5),
    ("1,234,567", 1234567), ("295.2 FLOP/B", 295.2), (2048, 2048), (np.int64(7), 7), (0.5, 0.5),
])
def test_parse_number_reads_what_students_type(text, value):
    assert grading.parse_number(text) == value


@pytest.mark.parametrize("text", ["", "two", "2,04", "64, 128", "64,12", "(64, 128)", "2 04", "1.2.3", "FLOP 2048",
                                  "2048 2", "m64n64k16", "0x40", True, None, "12,3456", "--3"])
def test_parse_number_refuses_what_is_not_one_number(text):
    assert grading.parse_number(text) is None


def test_quiz_reads_numbers_with_units_and_separators_and_keeps_its_tolerance():
    q = grading.Quiz("intensity?", answer=2048, wrong=(4096,))
    for ok in ("2048", "2,048", "2048 FLOP/B", " 2 048 flop/b ", "2048.0", "2.048e3"):
        assert q.judge(ok)[0], ok
    for bad in ("2049", "2,04", "4096 FLOP/B", "2048.001", "20480"):
        assert not q.judge(bad)[0], bad
    ok, msg = q.judge("2 KiB")
    assert not ok and "read as 2" in msg and "'KiB' is not checked" in msg
    assert q.judge("two") == (False, "'two' is not a number")
    text_quiz = grading.Quiz("bound?", answer="compute-bound", wrong=("memory-bound",))
    assert text_quiz.judge(" Compute-Bound ")[0] and not text_quiz.judge("memory-bound")[0]


def test_quiz_widget_enter_grades_and_a_new_answer_replaces_the_verdict():
    pytest.importorskip("ipywidgets")
    q = grading.Quiz("How many blocks?", answer=16384, hint="tiles per row × tiles per column",
                     explanation="128 × 128 = 16,384.", wrong=(128,))
    box = q.widget()
    question, row, result = box.children
    answer, button = row.children
    assert answer.continuous_update is False  # the value arrives on Enter (or when the box loses focus)
    answer.value = "128"  # what Enter does
    assert result.value.count("✗") == 1 and "tiles per row" in result.value
    answer.value = "16,384"
    assert result.value.count("✓") == 1 and "✗" not in result.value and "128 × 128" in result.value
    answer.value = "16384 blocks"
    button.click()
    assert result.value.count("✓") == 1
    answer.value = ""
    assert "type an answer" in result.value


def test_choice_quiz_widget_grades_on_check():
    pytest.importorskip("ipywidgets")
    q = grading.Quiz("bound?", answer="compute-bound", choices=["memory-bound", "compute-bound"],
                     wrong=("memory-bound",))
    _, row, result = q.widget().children
    choice, button = row.children
    button.click()
    assert "pick an answer first" in result.value  # nothing picked: not "type"
    choice.value = "memory-bound"
    button.click()
    assert "✗" in result.value
    choice.value = "compute-bound"
    button.click()
    assert "✓" in result.value and "✗" not in result.value


# ---------------------------------------------------------------------------------------------------------
# the symbols are in the fonts a bare Debian has
# ---------------------------------------------------------------------------------------------------------
def test_report_symbols_are_in_debians_default_fonts():
    import shutil
    import subprocess

    if not shutil.which("fc-list"):
        pytest.skip("no fontconfig here")
    fonts = subprocess.run(["fc-list", ":family=DejaVu Sans Mono", "family"], capture_output=True, text=True).stdout
    if "DejaVu" not in fonts:
        pytest.skip("DejaVu fonts are not installed here")
    for symbol in (grading.PASS, grading.FAIL, "·", "…", "×", "→", "—"):
        found = subprocess.run(["fc-list", f":charset={ord(symbol):x}", "family"], capture_output=True,
                               text=True).stdout
        assert "DejaVu Sans Mono" in found, f"{symbol!r} (U+{ord(symbol):04X}) is not in DejaVu Sans Mono"
    emoji = subprocess.run(["fc-list", ":charset=2705", "family"], capture_output=True, text=True).stdout
    assert "DejaVu" not in emoji  # why the reports do not use ✅


@pytest.mark.parametrize("seed", range(200))
def test_numeric_quiz_accepts_the_answer_however_typed_and_never_a_neighbour(seed):
    rng = np.random.default_rng(seed)
    answer = int(rng.integers(1, 10**7))
    q = grading.Quiz("?", answer=answer, wrong=(answer + 1,))
    styles = [str(answer), f"{answer:,}", f"{answer:_}", f"{answer:,}".replace(",", " "), f" {answer}.0 ",
              f"{answer} FLOP/B", f"{answer:,} bytes", f"{answer:.6e}" if answer < 10**6 else str(answer)]
    for text in styles:
        assert q.judge(text)[0], text
    for wrong in (answer + 1, answer - 1, answer * 10, answer // 10 if answer >= 10 else answer + 2, answer * 1024):
        for text in (str(wrong), f"{wrong:,}", f"{wrong} FLOP/B"):
            assert not q.judge(text)[0], text
    assert not q.judge(f"{answer:,}"[:-1])[0]  # a digit short: never read as the answer
