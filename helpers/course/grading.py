"""Check cells: clear ✓ / ✗ reports that raise on failure.

A check cell calls one grader from ``helpers.course.checks``; graders are built from the pieces here::

    with grading.check("Lab 1 · swizzle 128B") as c:
        c.equal("chunk of row 3, chunk 5", student(3, 5), 6)
        c.array("whole 64x64 image", got, expected)

Every comparison prints one line; the first failing one ends the check with a ✗ report (what was expected,
what came back, the first mismatching element and, for 2-D arrays, a small picture of where they differ)
and raises :class:`CheckFailed`, so nbclient and nbgrader see the failure. NaN never passes.

In a notebook the report is shown once, as the cell's error, with no traceback into the course's code; an
exception raised inside the student's own function is reported with the student's frames only. Values print as
plain numbers (:func:`plain`), counts with their plural (:func:`plural`). The symbols are ✓ and ✗: plain text
that Debian's default DejaVu fonts have, where the emoji ✅ / ❌ need an emoji font (a grader's message may still
use the emoji: they are written as ✓ / ✗).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "PASS",
    "FAIL",
    "Check",
    "CheckFailed",
    "Quiz",
    "check",
    "fresh_rng",
    "call_student",
    "assert_rejects",
    "gemm_tolerance",
    "plain",
    "plural",
    "parse_number",
]

#: the verdict symbols: in Debian's default DejaVu fonts (a test asks fontconfig), unlike ✅ / ❌
PASS, FAIL = "✓", "✗"
_EMOJI = {"✅": PASS, "❌": FAIL, "✔️": PASS, "❎": FAIL}


def _plain_symbols(text: str) -> str:
    for emoji, symbol in _EMOJI.items():
        text = text.replace(emoji, symbol)
    return text


class CheckFailed(AssertionError):
    """A graded check did not pass; the message is the report (what differed, and a hint).

    In IPython the report is the whole error (``_render_traceback_``): no traceback into the course's code,
    while the cell still ends in an error, so nbclient, ``make validate`` and nbgrader count it as failed.
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(_plain_symbols(str(message)))

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines() or [f"{FAIL} check failed"]


def _say(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


class SeededRng(np.random.Generator):
    """A numpy Generator that remembers its seed, so a failing check can say how to reproduce it."""

    def __init__(self, seed: int):
        super().__init__(np.random.PCG64(seed))
        self.seed = seed


def fresh_rng(seed: int | None = None) -> SeededRng:
    """A generator with a fresh seed each call, so a hard-coded answer cannot pass a check."""
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    return SeededRng(seed)


def call_student(fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
    """Call the student's function; turn a stub's NotImplementedError into a plain-words failure."""
    name = what or getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        hint = f" (hint: {exc})" if str(exc) else ""
        raise CheckFailed(f"{FAIL} {name} is not written yet: it still raises NotImplementedError{hint}") from None


def assert_rejects(grader: Callable[[Any], Any], answer: Any, *needles: str) -> str:
    """For tests of graders: ``grader(answer)`` must fail, and its message must name every needle (a needle
    ``"a|b"`` is named when either alternative is: what a run on a GPU reports may depend on timing).

    Returns the failure message. A grader that accepts a wrong answer is a bug; this is how tests prove it doesn't.
    """
    try:
        grader(answer)
    except CheckFailed as exc:
        text = str(exc)
    else:
        raise AssertionError(f"{getattr(grader, '__name__', 'the grader')} accepted a wrong answer: {answer!r}")
    missing = [n for n in needles if not any(_plain_symbols(alt) in text for alt in n.split("|"))]
    if missing:
        raise AssertionError(f"{missing} not in the failure message:\n{text}")
    return text


def plain(value: Any) -> str:
    """A value as a student reads it: numpy scalars as plain numbers (``223``, not ``np.uint8(223)``), small
    arrays as lists, big integers with their hex (``16384 (0x4000)``), strings quoted."""
    if isinstance(value, np.ndarray):
        if value.size <= 16:
            return np.array2string(value, separator=", ")
        return f"array of shape {plain(value.shape)}, dtype {value.dtype}"
    if isinstance(value, np.generic):
        value = value.item() if isinstance(value, np.integer | np.bool_) else str(value)
        if isinstance(value, str):
            return value  # numpy's own shortest text of a float of its type (0.1, not 0.10000000149011612)
    if hasattr(value, "dtype") and np.ndim(value) == 0 and not isinstance(value, int | float | bool):
        return str(value)  # ml_dtypes scalars (bfloat16)
    if isinstance(value, tuple):
        inner = ", ".join(plain(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(plain(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{plain(k)}: {plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 4096:
        return f"{value} ({'-' if value < 0 else ''}0x{abs(value):x})"
    return repr(value)


_fmt = plain


def plural(count: int | np.integer, word: str, many: str | None = None) -> str:
    """``plural(1, "stage")`` → ``"1 stage"``, ``plural(3, "stage")`` → ``"3 stages"``; ``many`` for irregular
    plurals (``plural(2, "index", "indices")``)."""
    n = int(count)
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _picture(mismatch: np.ndarray, nan: np.ndarray, max_rows: int = 16, max_cols: int = 64) -> str:
    """A small character map of a 2-D mismatch mask: '·' equal, 'X' differs, '?' NaN."""
    rows, cols = mismatch.shape
    rstep = max(1, -(-rows // max_rows))
    cstep = max(1, -(-cols // max_cols))
    lines = []
    for r0 in range(0, rows, rstep):
        line = []
        for c0 in range(0, cols, cstep):
            if nan[r0 : r0 + rstep, c0 : c0 + cstep].any():
                line.append("?")
            elif mismatch[r0 : r0 + rstep, c0 : c0 + cstep].any():
                line.append("X")
            else:
                line.append("·")
        lines.append("    " + "".join(line))
    scale = "" if rstep == cstep == 1 else f" (each character covers {rstep}×{cstep} elements)"
    return "    where they differ: · equal, X differs, ? NaN" + scale + "\n" + "\n".join(lines)


def gemm_tolerance(a: np.ndarray, b: np.ndarray, k_scale: float = 2.0) -> np.ndarray:
    """Per-element error bound for C = A @ B with bf16 inputs and fp32 accumulation.

    Inputs are already bf16, so only the fp32 accumulation error remains; it grows with the sum of the
    magnitudes of the products. The bound is ``k_scale * K * 2**-23 * (|A| @ |B|)`` plus a tiny floor, which
    an fp32-accumulated result meets and a wrong tile, a transposed operand or a missed K step does not.
    """
    a64 = np.abs(np.asarray(a, dtype=np.float64))
    b64 = np.abs(np.asarray(b, dtype=np.float64))
    k = a64.shape[1]
    return k_scale * k * 2.0**-23 * (a64 @ b64) + 1e-30


class Check:
    """One graded check: a title, a series of comparisons, one verdict."""

    def __init__(self, title: str, *, seed: int | None = None):
        self.title = title
        self.seed = seed
        self.passed: list[str] = []

    # -- the comparisons -------------------------------------------------------------------------
    def ok(self, what: str) -> None:
        self.passed.append(what)
        _say(f"   {PASS} {what}")

    def fail(self, what: str, expected: Any = None, got: Any = None, *, detail: str = "", hint: str = "") -> None:
        lines = [f"{FAIL} {self.title}: {what}"]
        if expected is not None or got is not None:
            lines.append(f"    expected: {_fmt(expected)}")
            lines.append(f"    got:      {_fmt(got)}")
        if detail:
            lines.append(detail)
        if hint:
            lines.append(f"    hint: {hint}")
        if self.seed is not None:
            lines.append(f"    (random inputs drawn with seed {self.seed})")
        raise CheckFailed("\n".join(lines))

    def true(self, what: str, condition: bool, *, hint: str = "", detail: str = "") -> None:
        if not condition:
            self.fail(what, detail=detail, hint=hint)
        self.ok(what)

    def equal(self, what: str, got: Any, expected: Any, *, hint: str = "") -> None:
        if isinstance(got, np.ndarray) or isinstance(expected, np.ndarray):
            self.array(what, got, expected, hint=hint)
            return
        if isinstance(got, float) and got != got:
            self.fail(what, expected, got, hint=hint or "NaN never passes a check")
        if type(got) is not type(expected) and not (_is_int(got) and _is_int(expected)):
            if not (isinstance(got, int | float) and isinstance(expected, int | float)):
                self.fail(what, expected, got, hint=hint or f"expected a {type(expected).__name__}, "
                          f"got a {type(got).__name__}")
        if got != expected:
            self.fail(what, expected, got, hint=hint)
        self.ok(what)

    def array(
        self,
        what: str,
        got: Any,
        expected: Any,
        *,
        rtol: float = 0.0,
        atol: float | np.ndarray = 0.0,
        hint: str = "",
    ) -> None:
        """Compare every element; exact unless a tolerance is given. NaN in ``got`` always fails."""
        if got is None:
            self.fail(what, f"an array of shape {np.shape(expected)}", None, hint=hint or "did you return it?")
        got_a = np.asarray(got)
        exp_a = np.asarray(expected)
        if got_a.shape != exp_a.shape:
            self.fail(what + " (shape)", exp_a.shape, got_a.shape, hint=hint)
        is_float = got_a.dtype.kind in "fc" or str(got_a.dtype) == "bfloat16"
        g = got_a.astype(np.float64) if is_float else got_a
        e = exp_a.astype(np.float64) if is_float else exp_a
        nan = np.isnan(g) if is_float else np.zeros(g.shape, dtype=bool)
        if is_float or rtol or np.any(atol):
            with np.errstate(invalid="ignore"):
                diff = np.abs(np.asarray(g, dtype=np.float64) - np.asarray(e, dtype=np.float64))
                bad = ~(diff <= atol + rtol * np.abs(np.asarray(e, dtype=np.float64))) | nan
        else:
            bad = g != e
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            n_bad = int(bad.sum())
            detail = [
                f"    {n_bad} of {plural(bad.size, 'element')} differ; the first is at index {plain(idx)}:",
                f"      expected {plain(exp_a[idx])}, got {plain(got_a[idx])}",
            ]
            if nan.any():
                n_nan = int(nan.sum())
                detail.append(f"    {plural(n_nan, 'element')} {'is' if n_nan == 1 else 'are'} NaN "
                              "(unwritten or poisoned memory?)")
            if bad.ndim == 2:
                detail.append(_picture(bad, nan))
            elif bad.ndim == 1 and bad.size <= 4096:
                detail.append(_picture(bad[None, :], nan[None, :]))
            self.fail(what, detail="\n".join(detail), hint=hint)
        tol = "" if not (rtol or np.any(atol)) else " (within tolerance)"
        self.ok(f"{what}: all {plural(bad.size, 'element')} match{tol}" if bad.size != 1 else f"{what}: matches{tol}")

    def raises(self, what: str, fn: Callable[[], Any], exc_type: type[BaseException], *, hint: str = "") -> None:
        try:
            fn()
        except exc_type:
            self.ok(what)
            return
        except NotImplementedError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the student
            self.fail(what, f"{exc_type.__name__} raised", f"{type(exc).__name__}: {exc}", hint=hint)
        self.fail(what, f"{exc_type.__name__} raised", "no error", hint=hint)


def _student_error(title: str, exc: BaseException) -> CheckFailed | None:
    """A CheckFailed reporting an exception raised in the student's own code, with the student's frames only;
    None when the exception did not come through the student's code (a bug of the course: keep its traceback)."""
    from helpers.gpu import notebook

    tb = exc.__traceback__  # check()'s own frame, then the body of the `with`, then what the body called
    frames = notebook.student_frames(tb.tb_next.tb_next if tb and tb.tb_next else None)
    if not frames:
        return None
    lines = [f"{FAIL} {title}: your code raised {type(exc).__name__}: {_plain_symbols(str(exc))}".rstrip(": "),
             *notebook.format_frames(frames)]
    return CheckFailed("\n".join(lines))


@contextlib.contextmanager
def check(title: str, *, seed: int | None = None) -> Iterator[Check]:
    """Run a graded check: prints ✓ with a summary when every comparison passes; else raises CheckFailed, whose
    report IPython shows as the cell's error (once, without a traceback into the course's code)."""
    from helpers.course import progress

    c = Check(title, seed=seed)
    _say(f"Checking {title} …")
    try:
        with progress.step(title):
            yield c
    except CheckFailed:
        raise
    except NotImplementedError as exc:
        msg = f"{FAIL} {title}: your code is not written yet (it raises NotImplementedError"
        msg += f": {exc})" if str(exc) else ")"
        raise CheckFailed(msg) from None
    except Exception as exc:
        failure = _student_error(title, exc)
        if failure is None:
            raise
        raise failure from None
    n = len(c.passed)
    if n == 0:  # a grader that compared nothing has judged nothing: never a pass
        raise CheckFailed(f"{FAIL} {title}: the check compared nothing, so it cannot pass (a mistake in the course's "
                          "grader: tell your instructor)")
    _say(f"{PASS} {title}: " + ("the check passed" if n == 1 else f"all {n} checks passed"))


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


_NUMBER = re.compile(
    r"""^\s*(?P<number>[-+−]?(?:\d{1,3}(?:[,_\s  ]\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?
        |[-+−]?\.\d+(?:[eE][-+]?\d+)?)
        \s*(?P<unit>[^\W\d][^\d]*?|%)?\s*$""",
    re.X,
)


def parse_number(response: Any) -> float | None:
    """A typed answer as a number, or None: ``"2048"``, ``"2,048"``, ``"2 048"``, ``"2048 FLOP/B"``, ``"1e3"``
    and ``"0.5"`` are numbers (thousands separators and a trailing unit are dropped: the unit is not checked);
    ``"2,04"``, ``"64, 128"`` and ``"two"`` are not."""
    if isinstance(response, bool):
        return None
    if isinstance(response, int | float | np.integer | np.floating):
        return float(response)
    m = _NUMBER.match(str(response))
    if m is None:
        return None
    text = re.sub(r"[,_\s  ]", "", m.group("number")).replace("−", "-")
    try:
        return float(text)
    except ValueError:
        return None


class Quiz:
    """A lesson's quick check: a question, an answer box and a Check button.

    ``grade(answer)`` returns True/False and prints ✓ or ✗ with a hint. It does not raise, so running a lesson
    top to bottom never stops at an unanswered quiz. ``right`` and ``wrong`` (plausible mistakes) are what the
    test suite feeds it, to prove it tells them apart. In a notebook the quiz draws itself: Enter in the answer
    box (or the Check button) grades, and each new verdict replaces the last one.

    A numeric ``answer`` accepts the number however it is typed (``2,048``, ``2048 FLOP/B``: see
    :func:`parse_number`) within a relative 1e-9; for a tolerance or a message per mistake, pass a ``judge``.
    """

    def __init__(
        self,
        question: str,
        judge: Callable[[str], tuple[bool, str]] | None = None,
        *,
        answer: Any = None,
        hint: str = "",
        explanation: str = "",
        choices: list[str] | None = None,
        right: Any = None,
        wrong: tuple[Any, ...] = (),
    ):
        if judge is None and answer is None:
            raise ValueError("a Quiz needs an answer or a judge")
        if not wrong:
            raise ValueError("a Quiz needs plausible wrong answers (wrong=...) so its tests can show it rejects them")
        #: a response that must pass and responses that must fail (the tests check both)
        self.right = answer if right is None else right
        self.wrong = tuple(wrong)
        self.question = question
        self._judge = judge
        self._answer = answer
        self.hint = hint
        self.explanation = explanation
        self.choices = choices

    def judge(self, response: Any) -> tuple[bool, str]:
        """(correct?, message) for a response, without printing."""
        if self._judge is not None:
            return self._judge(response)
        expected = self._answer
        if isinstance(expected, int | float) and not isinstance(expected, bool):
            value = parse_number(response)
            if value is None:
                return False, f"{str(response).strip()!r} is not a number"
            ok = abs(value - float(expected)) <= 1e-9 * max(1.0, abs(float(expected)))
            if ok:
                return True, ""
            m = _NUMBER.match(str(response))
            unit = m.group("unit") if m else None
            whole = np.isfinite(value) and value == int(value) and abs(value) < 1e15
            shown = str(int(value)) if whole else f"{value:g}"
            return False, f"{shown} is not it" + (f" (read as {shown}; the unit {unit!r} is not checked)"
                                                   if unit else "")
        text = str(response).strip()
        ok = text.lower() == str(expected).strip().lower()
        return ok, "" if ok else f"{text!r} is not it"

    def verdict(self, response: Any) -> tuple[bool, str]:
        """(correct?, the line ``grade`` prints): ✓ and the explanation, or ✗, what was wrong and the hint."""
        ok, msg = self.judge(response)
        if ok:
            return True, f"{PASS} {self.explanation or 'correct'}"
        return False, f"{FAIL} {_plain_symbols(msg)}" + (f" — hint: {self.hint}" if self.hint else "")

    def grade(self, response: Any) -> bool:
        ok, line = self.verdict(response)
        _say(line)
        return ok

    def widget(self):
        """The question, an answer box (Enter grades) or choices, a Check button and one verdict line."""
        import html

        import ipywidgets as w

        if self.choices:
            box = w.RadioButtons(options=self.choices, value=None, layout=w.Layout(width="auto"))
        else:
            box = w.Text(placeholder="your answer, then Enter", continuous_update=False,
                         layout=w.Layout(width="16em"))
        button = w.Button(description="Check", button_style="primary", layout=w.Layout(width="auto"))
        result = w.HTML(layout=w.Layout(margin="0 0 0 4px"))

        def show(_=None):
            if box.value is None or (isinstance(box.value, str) and not box.value.strip()):
                ask = "pick an answer first" if self.choices else "type an answer first"
                result.value = f"<span style='color:#666'>{ask}</span>"
                return
            ok, line = self.verdict(box.value)
            color = "#2e7d32" if ok else "#c62828"
            result.value = f"<span style='color:{color}'>{html.escape(line)}</span>"

        button.on_click(show)
        if not self.choices:
            box.observe(show, names="value")  # Enter (or leaving the box) sets the value: grade it
        question = w.HTML(f"<b>Quick check.</b> {self.question}", layout=w.Layout(max_width="880px"))
        return w.VBox([question, w.HBox([box, button], layout=w.Layout(flex_flow="row wrap")), result])

    def _ipython_display_(self):  # pragma: no cover - notebook display
        from IPython.display import display

        display(self.widget())


def _plain_cell_errors() -> None:
    """A cell run too early and a stub called from a demo cell: a sentence, not a traceback (see
    :mod:`helpers.course.cellerrors`); installed in the Jupyter kernel that imports the grading."""
    from helpers.course import cellerrors

    cellerrors.install()


_plain_cell_errors()
