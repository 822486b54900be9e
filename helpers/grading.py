"""Check cells: clear ✅ / ❌ reports that raise on failure.

A check cell calls one grader from ``helpers.checks``; graders are built from the pieces here::

    with grading.check("Lab 1 · swizzle 128B") as c:
        c.equal("chunk of row 3, chunk 5", student(3, 5), 6)
        c.array("whole 64x64 image", got, expected)

Every comparison prints one line; the first failing one ends the check with a ❌ report (what was expected,
what came back, the first mismatching element and, for 2-D arrays, a small picture of where they differ)
and raises :class:`CheckFailed`, so nbclient and nbgrader see the failure. NaN never passes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = [
    "Check",
    "CheckFailed",
    "Quiz",
    "check",
    "fresh_rng",
    "call_student",
    "assert_rejects",
    "gemm_tolerance",
]


class CheckFailed(AssertionError):
    """A graded check did not pass; the message says what differed."""


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
        raise CheckFailed(f"❌ {name} is not written yet: it still raises NotImplementedError{hint}") from None


def assert_rejects(grader: Callable[[Any], Any], answer: Any, *needles: str) -> str:
    """For tests of graders: ``grader(answer)`` must fail, and its message must name every needle.

    Returns the failure message. A grader that accepts a wrong answer is a bug; this is how tests prove it doesn't.
    """
    try:
        grader(answer)
    except CheckFailed as exc:
        text = str(exc)
    else:
        raise AssertionError(f"{getattr(grader, '__name__', 'the grader')} accepted a wrong answer: {answer!r}")
    missing = [n for n in needles if n not in text]
    if missing:
        raise AssertionError(f"{missing} not in the failure message:\n{text}")
    return text


def _fmt(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 16:
            return np.array2string(value, separator=", ")
        return f"array of shape {value.shape}, dtype {value.dtype}"
    if isinstance(value, int) and not isinstance(value, bool) and value > 4096:
        return f"{value} (0x{value:x})"
    return repr(value)


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
        _say(f"   ✓ {what}")

    def fail(self, what: str, expected: Any = None, got: Any = None, *, detail: str = "", hint: str = "") -> None:
        lines = [f"❌ {self.title}: {what}"]
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
                f"    {n_bad} of {bad.size} elements differ; the first is at index {idx}:",
                f"      expected {exp_a[idx]!r}, got {got_a[idx]!r}",
            ]
            if nan.any():
                detail.append(f"    {int(nan.sum())} elements are NaN (unwritten or poisoned memory?)")
            if bad.ndim == 2:
                detail.append(_picture(bad, nan))
            elif bad.ndim == 1 and bad.size <= 4096:
                detail.append(_picture(bad[None, :], nan[None, :]))
            self.fail(what, detail="\n".join(detail), hint=hint)
        tol = "" if not (rtol or np.any(atol)) else " (within tolerance)"
        self.ok(f"{what}: all {bad.size} elements match{tol}")

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


@contextlib.contextmanager
def check(title: str, *, seed: int | None = None) -> Iterator[Check]:
    """Run a graded check: prints ✅ with a summary when every comparison passes, else ❌ and raises."""
    c = Check(title, seed=seed)
    _say(f"Checking {title} …")
    try:
        yield c
    except CheckFailed as exc:
        _say(str(exc))
        raise
    except NotImplementedError as exc:
        msg = f"❌ {title}: your code is not written yet (it raises NotImplementedError"
        msg += f": {exc})" if str(exc) else ")"
        _say(msg)
        raise CheckFailed(msg) from None
    _say(f"✅ {title}: {len(c.passed)} of {len(c.passed)} checks passed")


def _is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


class Quiz:
    """A lesson's quick check: a question, an answer box and a Check button.

    ``grade(answer)`` is what the button calls; it returns True/False and prints ✅ or ❌ with a hint. It does
    not raise, so running a lesson top to bottom never stops at an unanswered quiz. ``right`` and ``wrong``
    (plausible mistakes) are what the test suite feeds it, to prove it tells them apart.
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
        text = str(response).strip().replace(",", "").replace("_", "")
        if isinstance(expected, int | float) and not isinstance(expected, bool):
            try:
                value = float(text)
            except ValueError:
                return False, f"{response!r} is not a number"
            ok = abs(value - float(expected)) <= 1e-9 * max(1.0, abs(float(expected)))
            return ok, "" if ok else f"{response} is not it"
        ok = text.lower() == str(expected).strip().lower()
        return ok, "" if ok else f"{response!r} is not it"

    def grade(self, response: Any) -> bool:
        ok, msg = self.judge(response)
        if ok:
            _say(f"✅ {self.explanation or 'correct'}")
        else:
            _say(f"❌ {msg}" + (f" — hint: {self.hint}" if self.hint else ""))
        return ok

    def widget(self):  # pragma: no cover - drawn in the browser test
        import ipywidgets as w

        if self.choices:
            box = w.RadioButtons(options=self.choices, value=None, layout=w.Layout(width="auto"))
        else:
            box = w.Text(placeholder="your answer", layout=w.Layout(width="16em"))
        button = w.Button(description="Check", button_style="primary")
        out = w.Output()

        def on_click(_):
            out.clear_output()
            with out:
                self.grade(box.value)

        button.on_click(on_click)
        return w.VBox([w.HTML(f"<b>Quick check.</b> {self.question}"), w.HBox([box, button]), out])

    def _ipython_display_(self):  # pragma: no cover - notebook display
        from IPython.display import display

        display(self.widget())
