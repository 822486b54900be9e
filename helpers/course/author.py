"""Extend the course from the command line: scaffold an exercise or a widget, mark cells for nbgrader without
editing JSON by hand, and find authoring mistakes in seconds.

::

    python -m helpers.course.author new-exercise lab1 lab1-tile-bytes --after lab1-map-args --points 2
    python -m helpers.course.author new-widget chunk_order --lesson 01 --after "## Swizzling"
    python -m helpers.course.author check            # every mistake, one line each with its fix
    python -m helpers.course.author list solutions/lab1_tma.ipynb
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 7 --answer --id lab1-bytes-answer
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 8 --check --points 2 --id lab1-bytes
    python -m helpers.course.author mark solutions/lab1_tma.ipynb "Why does" --written --points 1 --id lab1-why
    python -m helpers.course.author mark solutions/lab1_tma.ipynb 8 --plain

``new-exercise`` inserts an explanation, an answer and a check cell into a solution notebook, appends a grader to
``helpers/course/checks/<lab>.py`` and its tests (the solution passes, the stub fails, named wrong answers fail) to
``tests/labs/test_<lab>.py``: a working exercise to make your own. ``new-widget`` writes a widget module and
registers it for the widget tests and the browser gallery (``tests/platform/widgets.json``).

A cell is named by its number in ``list``, its cell id, its grade id, or a piece of text only that cell contains.
The roles are the course's (docs/authoring.md): an *answer* is a code cell with a ``### BEGIN SOLUTION`` region
(nbgrader's "Autograded answer"); a *check* is a code cell that calls a grader and is worth points ("Autograder
tests"); *written* is a Markdown answer graded by hand ("Manually graded answer"); *plain* removes the marking.
``mark`` refuses what nbgrader or ``make labs`` would refuse later (a duplicate id, a check without points, an
answer without a solution region or without its ``# HINT:`` line) and validates the result with nbgrader's own
checker when it is installed. ``check`` finds the same mistakes in every course notebook, however they were made
(in JupyterLab's metadata editor, say), and a stale ``labs/``.
"""

from __future__ import annotations

import argparse
import ast
import json
import keyword
import re
import sys
from pathlib import Path

from helpers.course import labgen

nbformat = labgen.lazy_import("nbformat")

__all__ = ["ROLES", "AuthorError", "find_cell", "mark", "role_of", "describe", "new_exercise", "new_widget",
           "WIDGET_REGISTRY", "main"]

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
    """The index of the cell named by a number, a cell id, a grade id, or a piece of text only one cell holds."""
    if re.fullmatch(r"\d+", which):
        i = int(which)
        if i >= len(nb.cells):
            raise AuthorError(f"there is no cell {i}: the notebook has {len(nb.cells)} cells (0–{len(nb.cells) - 1})")
        return i
    by_id = [i for i, c in enumerate(nb.cells) if c.get("id") == which]
    if by_id:
        return by_id[0]
    by_grade_id = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == which]
    if by_grade_id:
        return by_grade_id[0]
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
    if role in ("answer", "written"):  # what `make labs` would refuse
        try:
            labgen.regions(cell.source, f"cell {index}", markdown=cell.cell_type == "markdown")
        except labgen.GenerationError as exc:
            raise AuthorError(f"{exc}" + (f": {exc.fix}" if exc.fix else "")) from None
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


# ---------------------------------------------------------------------------------------------------------
# scaffolds: a working exercise (cells, grader, tests) and a registered widget, to make your own
# ---------------------------------------------------------------------------------------------------------
WIDGET_REGISTRY = Path("tests") / "platform" / "widgets.json"

SPEC = """## {prefix}{number} · {title}

**Write** `{fn}(rows, cols)`: the bytes of a `rows × cols` tile of bf16 elements, which is what one TMA load of
that box brings into shared memory. The check below tries fresh sizes each run."""

ANSWER = '''def {fn}(rows: int, cols: int) -> int:
    """Bytes of a rows × cols tile of bf16 elements."""
    ### BEGIN SOLUTION
    # HINT: rows times columns times the bytes of one element
    # HINT 1: a bf16 element is 16 bits wide
    return rows * cols * 2
    ### END SOLUTION
'''

GRADER = '''

# ---------------------------------------------------------------------------------------------------------
# {title}
# ---------------------------------------------------------------------------------------------------------
def check_{fn}(student: Callable[[int, int], int], seed: int | None = None) -> None:
    """``{fn}(rows, cols)`` -> the bytes of a rows × cols tile of bf16 elements."""
    rng = grading.fresh_rng(seed)
    with grading.check("{lab_title} · {title_lower}", seed=rng.seed) as c:
        cases = [(64, 64), (1, 1), (128, 64)]  # fixed cases that tell the named mistakes apart
        cases += [(int(r), int(k)) for r, k in rng.integers(1, 257, size=(5, 2))]
        for rows, cols in cases:
            got = grading.call_student(student, rows, cols)
            c.equal(f"{fn}({{rows}}, {{cols}})", got, rows * cols * 2, hint=_{fn}_hint(got, rows, cols))


def _{fn}_hint(got: object, rows: int, cols: int) -> str:
    """The mistake a wrong answer shows, in the student's terms."""
    if got == rows * cols:
        return "that is the number of elements: each bf16 element takes 2 bytes"
    if got == rows * cols * 16:
        return "that counts bits: the TMA counts bytes"
    return "rows × columns × 2 bytes"
'''

TESTS = '''

# ------------------------------------------------------------------------------------------ {exercise}
def test_{fn}_solution_passes_and_stub_fails():
    """The solution's {fn} passes; the stub students start from fails, saying it is not written yet."""
    from labtools import ROOT, accepts, rejects

    from helpers.course import labgen
    from helpers.course.checks import {lab}

    solution = labgen.solution_namespace(ROOT / "solutions" / "{notebook}")
    accepts({lab}.check_{fn}, solution["{fn}"])
    stub = labgen.solution_namespace(ROOT / "labs" / "{notebook}")
    rejects({lab}.check_{fn}, stub["{fn}"], "not written yet", seeds=3)


def test_{fn}_wrong_answers_fail_naming_the_mistake():
    """Each plausible mistake fails on every seed, and the report names it."""
    from labtools import rejects

    from helpers.course.checks import {lab}

    rejects({lab}.check_{fn}, lambda rows, cols: rows * cols, "number of elements")  # elements, not bytes
    rejects({lab}.check_{fn}, lambda rows, cols: rows * cols * 16, "counts bits")  # bits, not bytes
    rejects({lab}.check_{fn}, lambda rows, cols: 8192, "rows × columns × 2 bytes")  # one 64×64 tile's, always
'''

NEW_CHECKS_MODULE = '''"""Graders of {lab_title}."""

from __future__ import annotations

from collections.abc import Callable

from helpers.course import grading
from helpers.course.hints import answer, hint

__all__ = ["hint", "answer"]
'''

NEW_TESTS_MODULE = '''"""{lab_title} graders, both ways: the solution passes; the stub and each named wrong answer
fail."""

from __future__ import annotations
'''

WIDGET = '''"""{title}: where the TMA puts the eight 16-byte chunks of a 128-byte row with the 128B swizzle."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from helpers.course.widgets.figure import WidgetBox, controls, integer_axis, new_figure

__all__ = ["{fn}", "{name}_widget"]


def {fn}(row: int) -> np.ndarray:
    """Which chunk of box row ``row`` lands in each 16-byte slot of shared memory: the emulator's TMA loads a
    box whose bytes are their chunk's number and reads the image back."""
    from helpers.hopper import tensormap, tma

    box = np.repeat(np.arange(8, dtype=np.uint8), 16)[None, :].repeat(8, axis=0)  # 8 rows × 128 bytes
    tmap = tensormap.for_matrix(box.shape, tensormap.DataType.UINT8, *box.shape, swizzle=tensormap.Swizzle.B128)
    image = np.asarray(tma.load_tile(tmap, box, (0, 0))).reshape(8, 8, 16)
    return image[row % 8, :, 0]


def {name}_widget(row: int = 1) -> WidgetBox:
    """A row slider and, for that row, the chunk each shared-memory slot holds."""
    slider = widgets.IntSlider(description="row", min=0, max=7, value=row)
    fig = new_figure(height=300, width=520)
    fig.add_trace(go.Bar(x=list(range(8)), y={fn}(row), name="chunk"))
    integer_axis(fig, "x", title_text="16-byte slot in shared memory")
    integer_axis(fig, "y", title_text="chunk of the row", range=[-0.5, 7.5])
    fig.update_layout(title_text="{title}")

    def redraw(change: dict) -> None:
        fig.data[0].y = {fn}(change["new"])

    slider.observe(redraw, names="value")
    return WidgetBox([controls(slider), fig])
'''


WIDGET_HEADING = """## Widget: {title_lower}

Move the slider: each bar is a 16-byte slot of shared memory, its height the chunk of the row that lands there."""

WIDGET_TEST = '''"""{title}: what the widget draws, tested without a browser (``helpers.course.widgets.{name}``)."""

from __future__ import annotations

from helpers.course.widgets import {modules}


def test_{fn}_puts_each_chunk_where_the_128B_swizzle_does():
    """Slot s of box row r holds chunk s XOR (r mod 8), as the emulator's TMA writes it."""
    for row in range(16):
        assert [int(c) for c in {name}.{fn}(row)] == [s ^ (row % 8) for s in range(8)], row


def test_{name}_widget_draws_the_row_it_starts_on():
    box = {name}.{name}_widget(row=3)
    bars = figure._figures(box)[0].data[0]
    assert [int(y) for y in bars.y] == [int(c) for c in {name}.{fn}(3)]
'''


def _python_name(text: str, what: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text):
        raise AuthorError(f"{what} {text!r} is not a Python name: letters, digits and '_', not starting with a digit")
    return text


def _lab_notebook(root: Path, lab: str) -> Path:
    found = sorted((root / "solutions").glob(f"{lab}_*.ipynb"))
    if len(found) != 1:
        labs = ", ".join(sorted(p.name.split("_")[0] for p in (root / "solutions").glob("*.ipynb")))
        raise AuthorError(f"no lab {lab!r} in solutions/ (the labs: {labs})" if not found else
                          f"{len(found)} notebooks in solutions/ start with {lab}_: keep one per lab")
    return found[0]


def _insert_all(text: str, name: str) -> str:
    """``text`` (a module) with ``name`` added to its ``__all__`` list, when it has one."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
                and isinstance(node.value, ast.List)):
            lines = text.splitlines(keepends=True)
            row, col = node.value.end_lineno - 1, node.value.end_col_offset - 1
            if lines[row][:col].strip() == "":  # the closing bracket on a line of its own
                lines.insert(row, f'    "{name}",\n')
            else:
                before = lines[row][:col].rstrip()
                sep = "" if before.endswith(("[", ",")) else ", "
                lines[row] = f'{before}{sep}"{name}"{lines[row][col:]}'
            return "".join(lines)
    return text


def _ensure_imports(text: str, wanted: dict[str, str]) -> tuple[str, bool]:
    """Add ``wanted`` (name -> import line) that the module lacks after its last top-level import."""
    tree = ast.parse(text)
    defined = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
               for a in n.names}
    missing = [line for name, line in wanted.items() if name not in defined]
    if not missing:
        return text, False
    last = max((n.end_lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)), default=0)
    lines = text.splitlines(keepends=True)
    lines[last:last] = [line + "\n" for line in missing]
    return "".join(lines), True


def _add_step_row(nb: nbformat.NotebookNode, number: int, writes: str, graded: str) -> int | None:
    """Add step ``number`` to the lab's step table (``| step | you write | graded on |`` in its opening cells),
    after the row of the step before it; returns the cell's index, or None when the lab has no such table."""
    for i, cell in enumerate(nb.cells[:6]):
        lines = cell.source.split("\n")
        head = next((n for n, ln in enumerate(lines) if re.match(r"\|\s*step\s*\|", ln)), None)
        if cell.cell_type != "markdown" or head is None:
            continue
        at = head + 2  # after the header and its |---| line
        for n in range(head + 2, len(lines)):
            m = re.match(r"\|\s*(\d+)\s*\|", lines[n])
            if not m:
                break
            if int(m.group(1)) < number:
                at = n + 1
        lines.insert(at, f"| {number} | {writes} | {graded} |")
        cell.source = "\n".join(lines)
        return i
    return None


def new_exercise(lab: str, exercise: str, after: str, points: float = 1, *, function: str | None = None,
                 title: str | None = None, root: Path = labgen.ROOT) -> list[str]:
    """Scaffold a working exercise in ``lab``: three cells after cell ``after`` of its solution notebook (the
    explanation, the answer, the check worth ``points``), a grader in ``helpers/course/checks/<lab>.py`` and its
    tests in ``tests/labs/test_<lab>.py``. Writes nothing when anything is refused; returns what it did, one
    line per file."""
    notebook = _lab_notebook(root, lab)
    if not exercise.startswith(f"{lab}-"):
        exercise = f"{lab}-{exercise}"
    if not _ID.match(exercise) or exercise.endswith("-answer"):
        raise AuthorError(f"exercise id {exercise!r}: letters, digits, '-', '_' and '.', not ending in '-answer' "
                          "(the answer cell gets that)")
    fn = _python_name(function or exercise[len(lab) + 1:].replace("-", "_").replace(".", "_"), "function name")
    if not points > 0:
        raise AuthorError("an exercise is worth points: give --points (more than 0)")
    nb = nbformat.read(notebook, as_version=4)
    rel = notebook.relative_to(root).as_posix()
    for other in sorted((root / "solutions").glob("*.ipynb")):
        theirs = nbformat.read(other, as_version=4) if other != notebook else nb
        for i, cell in enumerate(theirs.cells):
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in (exercise, f"{exercise}-answer"):
                raise AuthorError(f"id {gid!r} is already cell {i}'s in {other.name}: pick another exercise id")
    if any(re.search(rf"^def {fn}\(", c.source, flags=re.M) for c in nb.cells if c.cell_type == "code"):
        raise AuthorError(f"{rel} already defines {fn}(): give the exercise another name (--function)")
    checks_py = root / "helpers" / "course" / "checks" / f"{lab}.py"
    defined = labgen._defined_names(checks_py) if checks_py.exists() else set()
    if defined is None:
        raise AuthorError(f"{checks_py.relative_to(root)} does not parse: fix it first (ruff check shows where)")
    if f"check_{fn}" in defined or f"_{fn}_hint" in defined:
        raise AuthorError(f"{checks_py.relative_to(root)} already defines check_{fn}: give the exercise another "
                          "name (--function)")
    tests_py = root / "tests" / "labs" / f"test_{lab}.py"
    if tests_py.exists() and re.search(rf"^def test_{fn}_", tests_py.read_text(), flags=re.M):
        raise AuthorError(f"{tests_py.relative_to(root)} already has tests named test_{fn}_…: pick another name")
    index = find_cell(nb, after)
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), None)
    if first_code is not None and index < first_code:
        raise AuthorError(f"cell {index} comes before the notebook's imports (cell {first_code}): put the "
                          f"exercise after them (--after {first_code} or later)")

    lab_title = f"Lab {lab[3:]}" if re.fullmatch(r"lab\d+", lab) else lab
    words = exercise[len(lab) + 1:].replace("-", " ").replace("_", " ").replace(".", " ")
    title = title or words[:1].upper() + words[1:]
    numbered = [(i, m) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                and (m := re.match(r"##\s+(Exercise\s+)?(\d+)\s+·", c.source))]
    headings = [(i, int(m.group(2))) for i, m in numbered]
    prefix = "" if numbered and not any(m.group(1) for _, m in numbered) else "Exercise "  # the lab's own style
    number = max((n for i, n in headings if i <= index), default=0) + 1
    later = [i + 3 for i, n in headings if i > index and n >= number]
    cell_id = re.sub(r"[^A-Za-z0-9_-]", "-", exercise)[:56]
    spec = nbformat.v4.new_markdown_cell(SPEC.format(prefix=prefix, number=number, title=title, fn=fn))
    table_at = _add_step_row(nb, number, f"`{fn}`: the bytes of a bf16 tile", "fixed and random sizes, exactly")
    answer = nbformat.v4.new_code_cell(ANSWER.format(fn=fn))
    imported = any(f"from helpers.course.checks import {lab}" in c.source or
                   re.search(rf"from helpers\.course\.checks import .*\b{lab}\b", c.source)
                   for c in nb.cells[:index + 1] if c.cell_type == "code")
    check = nbformat.v4.new_code_cell(("" if imported else f"from helpers.course.checks import {lab}\n\n")
                                      + f"{lab}.check_{fn}({fn})")
    spec.id, answer.id, check.id = f"{cell_id}-spec", f"{cell_id}-answer", cell_id
    nb.cells[index + 1:index + 1] = [spec, answer, check]
    mark(nb, index + 2, "answer", f"{exercise}-answer")
    mark(nb, index + 3, "check", exercise, points)
    _validate(nb)

    grader = GRADER.format(fn=fn, title=title, title_lower=title[:1].lower() + title[1:], lab_title=lab_title)
    module = checks_py.read_text() if checks_py.exists() else NEW_CHECKS_MODULE.format(lab_title=lab_title)
    module, added = _ensure_imports(module, {"Callable": "from collections.abc import Callable",
                                             "grading": "from helpers.course import grading"})
    module = _insert_all(module.rstrip("\n") + "\n", f"check_{fn}") + grader
    tests = tests_py.read_text() if tests_py.exists() else NEW_TESTS_MODULE.format(lab_title=lab_title)
    tests = tests.rstrip("\n") + "\n" + TESTS.format(fn=fn, lab=lab, exercise=exercise, notebook=notebook.name)

    nbformat.write(nb, notebook)
    checks_py.write_text(module)
    tests_py.parent.mkdir(parents=True, exist_ok=True)
    tests_py.write_text(tests)
    said = [f"{rel}: cells {index + 1}–{index + 3} are exercise {exercise} (its explanation, the answer "
            f"{fn}() with two hints, the check, {points:g} point{'s' if points != 1 else ''})",
            f"{checks_py.relative_to(root).as_posix()}: check_{fn}, a grader in the course's report style (fresh "
            "inputs each run, fixed cases first, a hint per named mistake)" +
            (" — imports added: run ruff check --fix on it" if added else ""),
            f"{tests_py.relative_to(root).as_posix()}: test_{fn}_… (the solution passes, the stub fails, three "
            "named wrong answers fail on every one of 200 seeds)"]
    if table_at is not None:
        said.append(f"{rel}: cell {table_at}'s step table has a row for step {number}")
    if later:
        said.append(f"{rel}: the exercises after it keep their numbers: renumber the headings of cells "
                    f"{', '.join(map(str, later))}" + (" and the step table's later rows" if table_at is not None
                                                        else ""))
    return said


def new_widget(name: str, *, lesson: str | None = None, after: str | None = None, title: str | None = None,
               root: Path = labgen.ROOT) -> list[str]:
    """Scaffold a widget: ``helpers/course/widgets/<name>.py`` (a pure function drawn from the emulator and a
    function returning a WidgetBox), registered in ``tests/platform/widgets.json`` for the widget tests and the
    browser gallery; with ``lesson`` (e.g. ``01``), a cell showing it after cell ``after`` of that lesson."""
    name = _python_name(name, "widget name")
    path = root / "helpers" / "course" / "widgets" / f"{name}.py"
    test_path = root / "tests" / "platform" / f"test_widget_{name}.py"
    for taken in (path, test_path):
        if taken.exists():
            raise AuthorError(f"{taken.relative_to(root)} exists: pick another name")
    registry_path = root / WIDGET_REGISTRY
    registry = json.loads(registry_path.read_text()) if registry_path.exists() else {}
    if name in registry:
        raise AuthorError(f"{WIDGET_REGISTRY} already registers {name!r}")
    fn = f"{name}_slots" if not name.endswith("_slots") else f"{name}_of"
    words = name.replace("_", " ")
    title = title or words[:1].upper() + words[1:]
    notebook = cell = None
    if lesson is not None:
        found = sorted((root / "lessons").glob(f"{lesson}*.ipynb"))
        if len(found) != 1:
            raise AuthorError(f"{len(found)} lessons match {lesson!r}: give the number and more of the name")
        if after is None:
            raise AuthorError("say where in the lesson: --after CELL (a number, a cell id or text only it holds)")
        notebook = found[0]
        nb = nbformat.read(notebook, as_version=4)
        index = find_cell(nb, after)
        heading = nbformat.v4.new_markdown_cell(WIDGET_HEADING.format(title_lower=title[:1].lower() + title[1:]))
        cell = nbformat.v4.new_code_cell(f"from helpers.course.widgets import {name}\n\n{name}.{name}_widget()")
        heading.id, cell.id = f"widget-{name}-heading"[:64], f"widget-{name}"[:64]
        nb.cells[index + 1:index + 1] = [heading, cell]
    path.write_text(WIDGET.format(name=name, fn=fn, title=title))
    test_path.parent.mkdir(parents=True, exist_ok=True)
    test_path.write_text(WIDGET_TEST.format(name=name, fn=fn, title=title, modules=", ".join(sorted(["figure", name]))))
    registry[name] = {"module": name, "function": f"{name}_widget"}
    registry_path.parent.mkdir(parents=True, exist_ok=True)
    registry_path.write_text(json.dumps(dict(sorted(registry.items())), indent=1) + "\n")
    said = [f"{path.relative_to(root).as_posix()}: {fn}() (what is drawn, from the emulator) and {name}_widget()",
            f"{WIDGET_REGISTRY.as_posix()}: {name} registered (tests/platform/test_widgets.py checks its style and "
            "first drawing; the browser test draws it in a 900-pixel column)",
            f"{test_path.relative_to(root).as_posix()}: tests of {fn}() (what is drawn) and of the widget's first "
            "drawing"]
    if notebook is not None:
        nbformat.write(nb, notebook)
        said.append(f"{notebook.relative_to(root).as_posix()}: cell {index + 1} is its heading, cell {index + 2} "
                    "shows it")
    return said


def _validate(nb: nbformat.NotebookNode) -> None:
    try:
        from nbgrader.nbgraderformat import MetadataValidator
    except ImportError:  # nbgrader is a dev dependency
        return
    try:
        MetadataValidator().validate_nb(nb)
    except Exception as exc:  # noqa: BLE001 - nbgrader's own sentence
        raise AuthorError(f"nbgrader refuses the result: {exc}") from None


def _lint_lines(path: Path) -> list[str]:
    """The authoring mistakes of one solution notebook (none for a notebook outside a course's solutions/)."""
    path = path.resolve()
    if path.parent.name != "solutions":
        return []
    found, _ = labgen._lint_solution(path, path.parents[1])
    return [f"✗ {p}" for p in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.author", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="show every cell with its number and role, then the notebook's mistakes")
    ls.add_argument("notebook", type=Path)
    mk = sub.add_parser("mark", help="make a cell an answer, a check, a written answer, or plain")
    mk.add_argument("notebook", type=Path)
    mk.add_argument("cell", help="the cell's number (from `list`), its id, or text only it contains")
    group = mk.add_mutually_exclusive_group(required=True)
    for role in ROLES:
        group.add_argument(f"--{role}", dest="role", action="store_const", const=role)
    mk.add_argument("--id", dest="grade_id", help="nbgrader's grade_id, unique in the notebook (e.g. lab1-bytes)")
    mk.add_argument("--points", type=float, help="points of a check or written cell")
    ck = sub.add_parser("check", help="every authoring mistake, one line each with its fix (runs in seconds)")
    ck.add_argument("--only", help="only notebooks whose file name contains this (e.g. lab1)")
    ck.add_argument("--no-labs", dest="labs", action="store_false", help="leave out whether labs/ is up to date")
    ne = sub.add_parser("new-exercise", help="scaffold an exercise: its cells, its grader and its tests")
    ne.add_argument("lab", help="the lab, e.g. lab1 (its notebook is solutions/lab1_*.ipynb)")
    ne.add_argument("exercise", help="the exercise id, e.g. lab1-tile-bytes (the check cell's grade_id)")
    ne.add_argument("--after", required=True, help="the cell it follows: number, cell id or text only it holds")
    ne.add_argument("--points", type=float, default=1, help="points of its check (default 1)")
    ne.add_argument("--function", help="the function students write (default: from the id, tile_bytes)")
    ne.add_argument("--title", help="the exercise's heading (default: from the id)")
    nw = sub.add_parser("new-widget", help="scaffold a widget and register it for the widget and browser tests")
    nw.add_argument("name", help="the widget's module name, e.g. chunk_order")
    nw.add_argument("--lesson", help="show it in this lesson (its number, e.g. 01)")
    nw.add_argument("--after", help="the lesson cell it follows: number, cell id or text only it holds")
    nw.add_argument("--title", help="the figure's title (default: from the name)")
    for command in (ck, ne, nw):
        command.add_argument("--root", type=Path, default=labgen.ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "check":
            return labgen.report(labgen.lint(args.root, labs=args.labs, only=args.only),
                                 f"notebooks matching {args.only!r}" if args.only else "course notebooks")
        if args.cmd in ("new-exercise", "new-widget"):
            if args.cmd == "new-exercise":
                said = new_exercise(args.lab, args.exercise, args.after, args.points, function=args.function,
                                    title=args.title, root=args.root)
                then = f"make labs && make validate NB={args.lab} && make test-fast"
            else:
                said = new_widget(args.name, lesson=args.lesson, after=args.after, title=args.title, root=args.root)
                then = "make test-fast" + (f" && make validate NB={args.lesson}" if args.lesson else "")
            print("\n".join(f"✓ {line}" for line in said))
            print(f"  It works as it is: make it yours in those places, then {then}")
            print("  (reload an open notebook in JupyterLab first: File → Reload Notebook from Disk)")
            return 0
    except AuthorError as exc:
        print(f"✗ {exc}", file=sys.stderr)
        return 1
    try:
        nb = nbformat.read(args.notebook, as_version=4)
    except FileNotFoundError:
        print(f"no notebook at {args.notebook}", file=sys.stderr)
        return 2
    if args.cmd == "list":
        print("\n".join(describe(nb)))
        mistakes = _lint_lines(args.notebook)  # flagged under the listing; `check` is the one that fails
        if mistakes:
            print("\n".join(mistakes))
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
