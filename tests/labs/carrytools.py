"""Helpers for the tests of the labs that carry the student's kernel (Labs 5 to 9): a student's folder with their
saved notebooks of the earlier labs (beside the lab's notebook, or in nbgrader's one folder per assignment), edits of
a saved kernel, and the lab's opening and graded kernel read quietly."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"

#: each lab's notebook and the variable its kernel cell assigns
KERNEL_CELL = {4: ("lab4_pipeline.ipynb", "LAB4_KERNEL"), 5: ("lab5_epilogue.ipynb", "LAB5_SRC"),
               6: ("lab6_persistent.ipynb", "LAB6_SRC"), 7: ("lab7_clusters.ipynb", "LAB7_SRC"),
               8: ("lab8_pingpong.ipynb", "LAB8_SRC"), 9: ("lab9_streamk.ipynb", "LAB9_SRC")}


def edit(text: str, edits: list[tuple[str, str]]) -> str:
    """``text`` with each (old, new) replaced; each old occurs exactly once."""
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def save(where: Path, cells: dict[str, str | None], source: Path) -> None:
    """A saved notebook at ``where``: ``source``, its cell assigning each variable of ``cells`` replaced by the text
    given (None: left as it is)."""
    nb = json.loads(source.read_text())
    for variable, text in cells.items():
        if text is not None:
            cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith(f"{variable} = r"))
            cell["source"] = f'{variable} = r"""' + text + '"""'
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(json.dumps(nb))


def student_folder(tmp_path: Path, monkeypatch: Any, lab: int, kernels: dict[int, str | None], *,
                   absent: tuple[int, ...] = (), sources: dict[int, Path] | None = None, nbgrader: bool = False,
                   extra: dict[int, dict[str, str | None]] | None = None) -> Path:
    """The student's folder for Lab ``lab``: the solutions of Labs 1 and 2 (the wrappers), and for each lab from 4
    to the one before ``lab`` (but those in ``absent``) their saved notebook: the solution (or ``sources[n]``), its
    kernel cell replaced by ``kernels[n]`` where given, and the cells of ``extra[n]``. The working directory becomes
    where Lab ``lab``'s notebook runs, which is returned."""
    def place(name: str) -> Path:
        return tmp_path / Path(name).stem / name if nbgrader else tmp_path / name

    for name in ("lab1_tma.ipynb", "lab2_mbarrier.ipynb"):
        place(name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOLUTIONS / name, place(name))
    for n in range(4, lab):
        if n in absent:
            continue
        notebook, variable = KERNEL_CELL[n]
        cells = {variable: kernels.get(n), **(extra or {}).get(n, {})}
        save(place(notebook), cells, (sources or {}).get(n, SOLUTIONS / notebook))
    here = place(KERNEL_CELL[lab][0]).parent
    here.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(here)
    return here


def opening_text(module: Any, src: str) -> str:
    """The lab's opening for the cell ``src``, as text, its own printing kept quiet."""
    with contextlib.redirect_stdout(io.StringIO()):
        return str(module.opening(src))


def graded(module: Any, src: str) -> Any:
    """(the merge, the whole source) the lab grades for the cell ``src``, on the wrappers beside."""
    return module._carried(src, None, None, quiet=True)
