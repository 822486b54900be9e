"""Helpers for the lab grader tests (imported by the test modules): a wrong answer must be rejected on every one of
200 seeds, with the hint that names its mistake; a right answer accepted."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.course import grading

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 200


def rejects(grader: Callable[..., Any], answer: Any, *needles: str, seeds: int | None = SEEDS, **kw: Any) -> str:
    """``grader(answer, seed=s)`` fails for every seed (or once, for a grader without randomness: seeds=None),
    and every failure names each needle (a regex). Returns the first failure's text."""
    first = ""
    for seed in ([None] if seeds is None else range(seeds)):
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                grader(answer, **({} if seed is None else {"seed": seed}), **kw)
            except grading.CheckFailed as exc:
                text = str(exc)
            else:
                raise AssertionError(f"{grader.__name__} accepted a wrong answer with seed {seed}")
        missing = [n for n in needles if not re.search(n.replace("❌", "(?:❌|✗)"), text, re.S)]  # either symbol
        if missing:
            raise AssertionError(f"seed {seed}: {missing} not in the failure message:\n{text}")
        first = first or text
    return first


def accepts(grader: Callable[..., Any], answer: Any, seeds: int | None = 5, **kw: Any) -> str:
    """``grader(answer, seed=s)`` passes for a few seeds (once without seeds); returns the last report."""
    out = ""
    for seed in ([None] if seeds is None else range(seeds)):
        with contextlib.redirect_stdout(io.StringIO()) as buf:
            grader(answer, **({} if seed is None else {"seed": seed}), **kw)
        out = buf.getvalue()
    return out


def swap(src: str, old: str, new: str) -> str:
    """``src`` with ``old`` replaced; fails loudly when the solution no longer contains ``old``."""
    assert old in src, f"the solution no longer contains {old!r}"
    return src.replace(old, new)


def rejected_by_the_run(grader: Callable[..., Any], answer: Any, *needles: str, **kw: Any) -> str:
    """``grader(answer)`` fails (a CUDA grader: once) and the RUN rejected it: the failure's first line is the run's
    (where the kernel ran, then what went wrong), not a finding read from the PTX; every needle is in the message
    (the PTX's explanation follows the run's failure). Returns the message."""
    text = rejects(grader, answer, *needles, seeds=None, **kw)
    first = text.split("\n", 1)[0]
    assert re.search(r"ran on the emulator", first), f"not rejected by the run:\n{text}"
    return text
