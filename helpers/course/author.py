"""Mark notebook cells for nbgrader without editing JSON by hand.

::

    python -m helpers.course.author list solutions/lab1_tma.ipynb
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 7 --answer --id lab1-bytes-answer
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 8 --check --points 2 --id lab1-bytes
    python -m helpers.course.author mark solutions/lab1_tma.ipynb "Why does" --written --points 1 --id lab1-why
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 8 --plain

A cell is named by its number in ``list``, its cell id, or a piece of text only that cell contains. The roles are
the course's (docs/authoring.md): an *answer* is a code cell with a ``### BEGIN SOLUTION`` region (nbgrader's
"Autograded answer"); a *check* is a code cell that calls a grader and is worth points ("Autograder tests");
*written* is a Markdown answer graded by hand ("Manually graded answer"); *plain* removes the marking. The
command refuses what nbgrader or ``make labs`` would refuse later (a duplicate id, a check without points, an
answer without a solution region) and validates the result with nbgrader's own checker when it is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

__all__ = ["ROLES", "AuthorError", "find_cell", "mark", "role_of", "describe", "main"]

BEGIN = "### BEGIN SOLUTION"
ROLES = ("answer", "check", "written", "plain")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NBGRADER_NAMES = {"answer": "Autograded answer", "check": "Autograder tests", "written": "Manually graded answer"}


class AuthorError(ValueError):
    """A marking that nbgrader or the course would refuse; the message says which rule and what to do."""


def role_of(cell: nbformat.NotebookNode) -> str:
    """The cell's role from its metadata: answer, check, written or plain."""
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("solution") and meta.get("grade"):
        return "written"
    if meta.get("solution"):
        return "answer"
    if meta.get("grade"):
        return "check"
    return "plain"


def _first_line(cell: nbformat.NotebookNode) -> str:
    return next((ln.strip() for ln in cell.source.splitlines() if ln.strip()), "")


def describe(nb: nbformat.NotebookNode) -> list[str]:
    """One line per cell: number, kind, role (with id and points), first line of text."""
    lines = []
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        role = role_of(cell)
        tag = role if role == "plain" else f"{role} {meta.get('grade_id', '?')}"
        if meta.get("points"):
            tag += f", {meta['points']:g} pt"
        lines.append(f"{i:3d}  {cell.cell_type:8s} {tag:32s} {_first_line(cell)[:60]}")
    return lines


def find_cell(nb: nbformat.NotebookNode, which: str) -> int:
    """The index of the cell named by a number, a cell id, or a piece of text that only one cell contains."""
    if re.fullmatch(r"\d+", which):
        i = int(which)
        if i >= len(nb.cells):
            raise AuthorError(f"there is no cell {i}: the notebook has {len(nb.cells)} cells (0–{len(nb.cells) - 1})")
        return i
    by_id = [i for i, c in enumerate(nb.cells) if c.get("id") == which]
    if by_id:
        return by_id[0]
    hits = [i for i, c in enumerate(nb.cells) if which in c.source]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise AuthorError(f"no cell has the id or contains the text {which!r}")
    raise AuthorError(f"{len(hits)} cells contain {which!r} (cells {hits}): give more of the text, or the number")


def mark(nb: nbformat.NotebookNode, index: int, role: str, grade_id: str | None = None,
         points: float | None = None) -> str:
    """Set cell ``index``'s nbgrader metadata for ``role``; returns a sentence saying what it did."""
    if role not in ROLES:
        raise AuthorError(f"role {role!r}: one of {', '.join(ROLES)}")
    cell = nb.cells[index]
    if role == "plain":
        cell.metadata.pop("nbgrader", None)
        return f"cell {index} is a plain cell now (no nbgrader metadata)"
    if not grade_id:
        raise AuthorError(f"a{'n' if role == 'answer' else ''} {role} cell needs an id (--id lab1-…): nbgrader "
                          "keeps grades by it")
    if not _ID.match(grade_id):
        raise AuthorError(f"id {grade_id!r}: letters, digits, '-', '_' and '.', starting with a letter or digit")
    taken = [i for i, c in enumerate(nb.cells) if i != index and c.metadata.get("nbgrader", {}).get("grade_id")
             == grade_id]
    if taken:
        raise AuthorError(f"id {grade_id!r} is already cell {taken[0]}'s: ids are unique in a notebook")
    wanted_kind = "markdown" if role == "written" else "code"
    if cell.cell_type != wanted_kind:
        raise AuthorError(f"cell {index} is a {cell.cell_type} cell; a{'n' if role == 'answer' else ''} {role} "
                          f"cell is a {wanted_kind} cell")
    if role in ("answer", "written") and BEGIN not in cell.source:
        raise AuthorError(f"cell {index} has no '{BEGIN}' region: put the part students write between "
                          f"'{BEGIN}' and '### END SOLUTION' first (see docs/authoring.md)")
    if role in ("check", "written"):
        if points is None or not points > 0:
            raise AuthorError(f"a {role} cell is worth points: give --points (more than 0)")
    elif points is not None:
        raise AuthorError("an answer cell is not graded itself (its check cell is): leave out --points")
    meta = {"grade": role != "answer", "solution": role != "check", "locked": role == "check",
            "grade_id": grade_id, "schema_version": 3}
    if points is not None:
        meta["points"] = int(points) if float(points).is_integer() else float(points)
    cell.metadata["nbgrader"] = meta
    worth = f", {meta['points']} point{'s' if meta['points'] != 1 else ''}" if points is not None else ""
    return f"cell {index} is a{'n' if role == 'answer' else ''} {role} cell now: id {grade_id}{worth} " \
           f"(nbgrader: {_NBGRADER_NAMES[role]})"


def _validate(nb: nbformat.NotebookNode) -> None:
    try:
        from nbgrader.nbgraderformat import MetadataValidator
    except ImportError:  # nbgrader is a dev dependency
        return
    try:
        MetadataValidator().validate_nb(nb)
    except Exception as exc:  # noqa: BLE001 - nbgrader's own sentence
        raise AuthorError(f"nbgrader refuses the result: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.author", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="show every cell with its number and role")
    ls.add_argument("notebook", type=Path)
    mk = sub.add_parser("mark", help="make a cell an answer, a check, a written answer, or plain")
    mk.add_argument("notebook", type=Path)
    mk.add_argument("cell", help="the cell's number (from `list`), its id, or text only it contains")
    group = mk.add_mutually_exclusive_group(required=True)
    for role in ROLES:
        group.add_argument(f"--{role}", dest="role", action="store_const", const=role)
    mk.add_argument("--id", dest="grade_id", help="nbgrader's grade_id, unique in the notebook (e.g. lab1-bytes)")
    mk.add_argument("--points", type=float, help="points of a check or written cell")
    args = parser.parse_args(argv)
    try:
        nb = nbformat.read(args.notebook, as_version=4)
    except FileNotFoundError:
        print(f"no notebook at {args.notebook}", file=sys.stderr)
        return 2
    if args.cmd == "list":
        print("\n".join(describe(nb)))
        return 0
    try:
        index = find_cell(nb, args.cell)
        said = mark(nb, index, args.role, args.grade_id, args.points)
        _validate(nb)
    except AuthorError as exc:
        print(f"✗ {exc}", file=sys.stderr)
        return 1
    nbformat.write(nb, args.notebook)
    print(f"✓ {args.notebook}: {said}")
    print("  If this notebook is open in JupyterLab, reload it from disk (File → Reload Notebook from Disk) before "
          "you save it there again, or JupyterLab writes its copy over this change.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
