"""Tiered hints for the labs: what to do first, more only when the student asks.

Each exercise region of a solution notebook carries its hints as comment lines (``#`` in Python, ``//`` in CUDA):

- ``# HINT: …``   tier 0, the stub's own text: what to do and where to look (a lesson section, a header
  function). Never code.
- ``# HINT 1: …`` a first hint, more specific, still no line of the solution.
- ``# HINT 2: …`` (optional) a second hint.
- the solution region itself is the answer.

``make labs`` collects them into ``helpers/course/data/labs.json`` (answers base64-encoded, so they are not in plain
sight), and the student asks for them in the notebook::

    lab1.hint("lab1-copy-kernel")          # tier 0 again
    lab1.hint("lab1-copy-kernel", 1)       # the first hint
    lab1.answer("lab1-copy-kernel")        # says how to see the answer; answer(..., sure=True) prints it

An exercise id is the grade id of its check cell (the solution cell's grade id without ``-answer``).
"""

from __future__ import annotations

import base64
import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Region", "Exercise", "hint", "answer", "hint_text", "answer_text", "exercises", "exercise_id",
           "parse_hint", "stub_text", "leaked_lines", "encode", "decode", "DATA"]

DATA = Path(__file__).resolve().parent / "data" / "labs.json"
_HINT = re.compile(r"^\s*(?:#|//)\s*HINT(?:\s+(\d))?\s*:\s*(.+?)\s*$")
#: a solution line shorter than this (whitespace removed) is too generic to count as giving the answer away
MIN_LEAK_CHARS = 7


@dataclass(frozen=True)
class Region:
    """One solution region: its hints by tier (tier 0 first) and its solution lines."""

    hints: tuple[str, ...]
    answer: str


@dataclass(frozen=True)
class Exercise:
    """The regions of one solution cell, under the id of its check."""

    id: str
    lab: str
    notebook: str
    regions: tuple[Region, ...]

    @property
    def tiers(self) -> int:
        return max(len(r.hints) for r in self.regions)


# ------------------------------------------------------------------------------------------- authoring side
def parse_hint(line: str) -> tuple[int, str] | None:
    """(tier, text) of a ``# HINT:`` / ``# HINT 1:`` / ``// HINT 2:`` line, or None."""
    m = _HINT.match(line)
    if not m:
        return None
    return int(m.group(1) or 0), m.group(2)


def exercise_id(grade_id: str) -> str:
    """The id students use: the check's grade id (``lab1-copy-kernel-answer`` -> ``lab1-copy-kernel``)."""
    return grade_id.removesuffix("-answer")


def lab_of(notebook: str) -> str:
    """``lab1_tma.ipynb`` -> ``lab1`` (the module students import the graders and hints from)."""
    return Path(notebook).stem.split("_")[0]


def stub_text(tier0: str, exercise: str | None, lab: str | None, more: bool) -> str:
    """The text a stub carries: tier 0, and how to ask for more."""
    if exercise and lab and more:
        return f"{tier0} (stuck? {lab}.hint('{exercise}', 1))"
    return tier0


def _normalised(text: str) -> str:
    return re.sub(r"\s+", "", text.replace("`", ""))


def _solution_lines(solution: str) -> list[str]:
    lines = []
    for raw in solution.split("\n"):
        s = raw.strip()
        if not s or s.startswith(("#", "//")):
            continue
        s = _normalised(s).rstrip(";:,{")
        if len(s) >= MIN_LEAK_CHARS and re.search(r"[A-Za-z0-9]", s):
            lines.append(s)
    return lines


def leaked_lines(text: str, solution: str) -> list[str]:
    """The (non-trivial) lines of ``solution`` that ``text`` contains, whitespace and backticks ignored."""
    flat = _normalised(text)
    return [line for line in _solution_lines(solution) if line in flat]


def encode(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decode(text: str) -> str:
    return base64.b64decode(text.encode()).decode()


# ------------------------------------------------------------------------------------------- student side
@functools.cache
def _load(path: Path) -> dict[str, Exercise]:
    data = json.loads(path.read_text())
    out = {}
    for ex_id, ex in data.get("exercises", {}).items():
        regions = tuple(Region(tuple(r["hints"]), decode(r["answer"]) if r.get("answer") else "")
                        for r in ex["regions"])
        out[ex_id] = Exercise(ex_id, ex["lab"], ex["notebook"], regions)
    return out


def exercises(path: Path = DATA) -> dict[str, Exercise]:
    """Every exercise of the course, by id (read from ``helpers/course/data/labs.json``)."""
    if not path.exists():
        return {}
    return _load(path)


def _find(exercise: str, path: Path) -> Exercise | str:
    table = exercises(path)
    ex_id = exercise_id(str(exercise).strip())
    if ex_id in table:
        return table[ex_id]
    close = difflib.get_close_matches(ex_id, list(table), n=3, cutoff=0.5)
    lab = ex_id.split("-")[0]
    same_lab = sorted(k for k in table if k.startswith(lab + "-"))
    known = close or same_lab or sorted(table)
    return (f"there is no exercise {exercise!r}. The exercise ids are the ids of the check cells"
            + (f", e.g. {', '.join(repr(k) for k in known[:6])}" if known else ""))


def _part_name(ex: Exercise, n: int) -> str:
    first = ex.regions[n - 1].hints[0]
    return f"part {n} of {len(ex.regions)} ({first[:60]}{'…' if len(first) > 60 else ''})"


def hint_text(exercise: str, tier: int = 0, path: Path = DATA, part: int | None = None) -> str:
    """The text ``hint(exercise, tier, part=part)`` prints. An exercise of several parts gives tier 0 of every part
    (what to do), and its later tiers one part at a time: each part's hints go from the idea to where to look to the
    shape of its answer, and a student stuck on one part should not read the next part's."""
    ex = _find(exercise, path)
    if isinstance(ex, str):
        return ex
    if tier < 0:
        return "hints are numbered from 0 (what to do) upwards"
    many = len(ex.regions) > 1
    if part is not None and not 1 <= part <= len(ex.regions):
        return f"{ex.id} has {len(ex.regions)} part{'s' if many else ''}: part is 1" + (
            f" to {len(ex.regions)}" if many else "")
    title = "What to do" if tier == 0 else f"Hint {tier}"
    if many and part is None and tier > 0:
        out = [f"{title} · {ex.id} has {len(ex.regions)} parts; ask for the one you are on:"]
        out += [f"  {_part_name(ex, n)}: {ex.lab}.hint('{ex.id}', {tier}, part={n})"
                for n in range(1, len(ex.regions) + 1)]
        return "\n".join(out)
    numbers = [part] if part is not None else list(range(1, len(ex.regions) + 1))
    lines = []
    for n in numbers:
        region = ex.regions[n - 1]
        if tier < len(region.hints):
            text = region.hints[tier]
        else:
            text = f"no hint {tier} for this part: its last hint is {len(region.hints) - 1}"
        lines.append((f"{_part_name(ex, n)}: " if many else "") + text)
    out = [f"{title} · {ex.id}"] + [f"  {line}" for line in lines]
    if many and part is None:  # tier 0 of every part
        out.append(f"More, one part at a time: {ex.lab}.hint('{ex.id}', 1, part=1) … part={len(ex.regions)}")
    elif part is not None and many:
        if tier + 1 < len(ex.regions[part - 1].hints):
            out.append(f"More: {ex.lab}.hint('{ex.id}', {tier + 1}, part={part})")
        else:
            out.append(f"That was the last hint for this part. The answer: {ex.lab}.answer('{ex.id}')")
    elif tier + 1 < ex.tiers:
        out.append(f"More: {ex.lab}.hint('{ex.id}', {tier + 1})")
    else:
        out.append(f"That was the last hint. The answer: {ex.lab}.answer('{ex.id}')")
    return "\n".join(out)


def hint(exercise: str, tier: int = 0, *, part: int | None = None, path: Path = DATA) -> None:
    """Print hint ``tier`` of an exercise (0: what to do; 1, 2: more specific), of one ``part`` where the exercise
    has several. Nothing is graded on hints."""
    print(hint_text(exercise, tier, path, part))


def answer_text(exercise: str, sure: bool = False, path: Path = DATA) -> str:
    """The text ``answer(exercise, sure)`` prints."""
    ex = _find(exercise, path)
    if isinstance(ex, str):
        return ex
    if not all(region.answer for region in ex.regions):  # a class's install: the answer key is the instructor's
        return (f"The answer of {ex.id} is not on this machine: in a class, your instructor shows it with your "
                f"feedback. The hints are here: {ex.lab}.hint('{ex.id}', 1)")
    if not sure:
        return (f"This prints the solution of {ex.id}. Try the hints first ({ex.lab}.hint('{ex.id}', 1)); to see "
                f"the answer, run {ex.lab}.answer('{ex.id}', sure=True)")
    parts = [f"The answer · {ex.id}"]
    for n, region in enumerate(ex.regions, 1):
        if len(ex.regions) > 1:
            parts.append(f"--- part {n} of {len(ex.regions)}: {region.hints[0]}")
        parts.append(region.answer)
    return "\n".join(parts)


def answer(exercise: str, sure: bool = False, *, path: Path = DATA) -> None:
    """Print the solution of an exercise, only with ``sure=True`` (without, it says how)."""
    print(answer_text(exercise, sure, path))
