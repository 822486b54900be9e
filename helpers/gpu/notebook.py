"""Where code came from in a notebook: the cells IPython ran, and the student's own frames of a traceback.

Reports speak of the student's code by its place in the notebook ("Cell In[5], line 3"), never by the course's
files: :func:`student_frames` keeps the frames of a traceback that are not the course's or a library's, and
:func:`find_line` finds a line of text (e.g. a line of CUDA that NVRTC rejected) in the cells run so far.
Everything works outside IPython too (then there are no cells and files are named as they are).
"""

from __future__ import annotations

import linecache
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["CellLine", "cell_label", "cells", "find_line", "student_frames", "format_frames"]

COURSE_DIR = Path(__file__).resolve().parents[1]  # helpers/


def _shell():
    """The running IPython shell, or None (plain Python, pytest)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a half-imported IPython is no shell
        return None


def cell_label(filename: str) -> str | None:
    """``"Cell In[5]"`` for the file IPython compiled cell 5 into; None for any other file."""
    shell = _shell()
    mapping = getattr(getattr(shell, "compile", None), "_filename_map", None) or {}
    count = mapping.get(filename)
    return None if count is None else f"Cell In[{count}]"


def cells() -> list[tuple[int, str]]:
    """(execution count, source) of the cells run in this kernel so far, the most recent first."""
    shell = _shell()
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or []
    return [(n, src) for n, src in reversed(list(enumerate(history))) if n and src]


@dataclass(frozen=True)
class CellLine:
    """A line of a cell: its execution count (the ``[5]`` beside the cell) and line number (from 1)."""

    count: int
    line: int

    def __str__(self) -> str:
        return f"line {self.line} of cell [{self.count}]"


def find_line(lines: list[str], index: int, context: int = 2) -> CellLine | None:
    """Where line ``index`` (0-based) of ``lines`` (a text the student wrote in a cell, e.g. a CUDA string)
    stands in the notebook: the most recent cell holding that line with the same neighbours (up to
    ``context`` lines each side, as many as exist). None when no cell holds it, or the line is blank."""
    if not 0 <= index < len(lines) or not lines[index].strip():
        return None
    want = [ln.strip() for ln in lines[max(0, index - context): index + context + 1]]
    offset = index - max(0, index - context)
    for count, source in cells():
        cell = [ln.strip() for ln in source.splitlines()]
        for start in range(len(cell) - len(want) + 1):
            if cell[start: start + len(want)] == want:
                return CellLine(count, start + offset + 1)
    # the neighbours may differ (the text was assembled from pieces): the line alone, if it is unique
    for count, source in cells():
        hits = [i for i, ln in enumerate(source.splitlines()) if ln.strip() == want[offset]]
        if len(hits) == 1:
            return CellLine(count, hits[0] + 1)
    return None


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(str(Path(d).resolve()) for d in dirs)


def is_course_or_library(filename: str) -> bool:
    """True for the course's own files (``helpers/``), the standard library and installed packages."""
    if filename.startswith("<frozen") or filename.startswith("<__array_function__"):
        return True
    try:
        path = Path(filename).resolve()
    except (OSError, ValueError):
        return False
    return path.is_relative_to(COURSE_DIR) or str(path).startswith(_library_dirs())


def student_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    """The frames of a traceback that are neither the course's nor a library's: the student's code, when ``tb``
    starts below the code that called it (e.g. below a grader's ``with grading.check(...)`` body)."""
    return [f for f in traceback.extract_tb(tb) if not is_course_or_library(f.filename)]


def format_frames(frames: list[traceback.FrameSummary], indent: str = "    ") -> list[str]:
    """``Cell In[5], line 3, in double`` and the line itself, for each frame."""
    out = []
    for f in frames:
        where = cell_label(f.filename) or f.filename
        out.append(f"{indent}{where}, line {f.lineno}, in {f.name}")
        text = (f.line or linecache.getline(f.filename, f.lineno or 0)).strip()
        if text:
            out.append(f"{indent}    {text}")
    return out
