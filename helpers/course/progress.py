"""What a long cell is doing, as it does it: one line under the cell, updated in place ("Lab 2 · GEMM: running your
gemm on the executor · block 3 of 12 · 14 s"), gone when the cell's work is done.

The graders' common runner (``helpers.course.checks._common``: compiling, running), the check reports
(``helpers.course.grading.check``: which check, how many comparisons so far) and the lab openings (a previous lab's
kernel re-checked) open :func:`step` blocks; the PTX executor reports its blocks through :func:`executor_blocks`.

In a Jupyter kernel the line is a display updated in place (a text output, no widget: it shows whatever the
page's widget code is doing). Elsewhere it is a line on stderr for each step when stderr is a terminal, and nothing
at all otherwise (tests, ``make validate``, piped output), so no other output changes.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["step", "detail", "executor_blocks", "shown"]

#: seconds between two updates of the line (each is a message to the page)
EVERY_S = 0.5
#: a step not known to be slow shows only once the work has taken this long (a quick check shows no line)
AFTER_S = 1.0


class _Line:
    def __init__(self) -> None:
        self.steps: list[str] = []
        self.detail = ""
        self.t0 = 0.0
        self.last = 0.0
        self.handle: Any = None
        self.history: list[str] = []  # every text shown, for tests

    def text(self) -> str:
        parts = [" · ".join(self.steps)] + ([self.detail] if self.detail else [])
        return "⏳ " + " · ".join(parts) + f" · {time.monotonic() - self.t0:.0f} s"

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.steps or (not force and (now - self.last < EVERY_S or now - self.t0 < AFTER_S)):
            return
        self.last = now
        text = self.text()
        self.history.append(text)
        if _in_kernel():
            from IPython.display import display

            bundle = {"text/plain": text}
            if self.handle is None:
                self.handle = display(bundle, raw=True, display_id=True)
            else:
                self.handle.update(bundle, raw=True)
        elif sys.stderr.isatty() and force:
            print(text, file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": ""}, raw=True)
        self.handle = None
        self.detail = ""


_LINE = _Line()


def _executor_hook(hook: Any) -> None:
    from helpers.gpu.executor import machine

    machine.progress_hook = hook


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


@contextlib.contextmanager
def step(what: str, *, slow: bool = False) -> Iterator[None]:
    """A block of work that may take seconds: shown as ``what`` after the steps it is inside (at once when ``slow``,
    e.g. compiling or running a kernel; otherwise once the work has taken :data:`AFTER_S`); the line goes when the
    outermost step ends."""
    line = _LINE
    outermost = not line.steps
    if outermost:
        line.t0 = time.monotonic()
        line.history = []
        _executor_hook(executor_blocks)
    line.steps.append(what)
    saved = line.detail
    line.detail = ""
    line.show(force=slow)
    try:
        yield
    finally:
        line.steps.pop()
        line.detail = saved
        if outermost:
            line.clear()
            _executor_hook(None)


def detail(text: str) -> None:
    """What the current step is at now ("block 3 of 12", "check 2"); shown at most every :data:`EVERY_S`."""
    if _LINE.steps:
        _LINE.detail = text
        _LINE.show()


def executor_blocks(done: int, total: int) -> None:
    """The PTX executor's report: ``done`` of ``total`` thread blocks finished."""
    detail(f"block {min(done + 1, total)} of {total} on the executor")


def shown() -> list[str]:
    """The lines shown since the current (or last) outermost step began."""
    return list(_LINE.history)
