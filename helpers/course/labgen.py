"""Student labs generated from the instructor's solutions, and the self-checks that keep them honest.

``solutions/`` is the single source of truth. In a solution notebook:

- an exercise region is fenced by ``### BEGIN SOLUTION`` / ``### END SOLUTION`` (nbgrader's markers). Its tiered
  hints (``# HINT: …`` what to do, required; ``# HINT 1: …``, ``# HINT 2: …`` on request; see helpers.course.hints)
  stay out of the student notebook except tier 0, which becomes the stub's text. In Python the region becomes
  ``raise NotImplementedError("<hint>")``; in CUDA source (marker lines starting with ``//``) it becomes an
  ``#error`` line with the hint, so the kernel fails to compile with that sentence until the student writes it;
  in Markdown it becomes ``YOUR ANSWER HERE``. Tiers 0 and 1 may not contain a line of the solution.
- ``make labs`` also writes ``helpers/course/data/labs.json``: every exercise's hints and (encoded) answer, and each
  lab's kernel (cells marked ``{"labgen": {"kernel": "NAME"}}``) for the diffs the labs open with.
- ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS`` fence checks the student never sees.
- check cells carry nbgrader metadata (``grade: true``, ``grade_id``, ``points``).
- Run All goes on past a failing check: the student notebook tags every cell that may fail while the student's work
  is unwritten or wrong (the check cells, the answer cells and the cells that use an answer's names) with
  ``raises-exception`` (:func:`tag_cells_that_may_fail`). JupyterLab then sends the cell with ``stop_on_error``
  off, so the kernel runs the cells queued after it; the cell still ends in its error, which nbgrader's autograde
  and ``make validate`` read from its outputs (they execute with errors allowed and judge each cell).

Command line (the Makefile calls these)::

    python -m helpers.course.labgen generate   # write labs/ from solutions/ (never overwrites a student's edits)
    python -m helpers.course.labgen check      # fail if labs/ is out of date with solutions/
    python -m helpers.course.labgen validate   # execute lessons, solutions and labs; assert the graded cells behave

``generate`` and ``validate`` first run ``lint``: every authoring mistake found without running a notebook (the
regions and hints, the cells' nbgrader roles, ids and points, graders that do not exist, a stale labs/), one line
each with its fix (``make check`` runs it alone). ``validate`` fails a notebook whose output holds a warning.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from helpers.course import hints as hints_mod


class _LazyModule(ModuleType):
    """A module imported on its first attribute access, under a lock (validate reads notebooks from threads, and
    importlib's LazyLoader is not safe when two threads touch a module while it loads)."""

    _lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        with self._lock:
            module = importlib.import_module(self.__name__)
        return getattr(module, attr)


def lazy_import(name: str) -> ModuleType:
    """Module ``name``, imported on its first use: nbformat's import takes seconds on a busy machine, and a warm
    ``make check`` needs none of it."""
    if name in sys.modules:
        return sys.modules[name]
    return _LazyModule(name)


nbformat = lazy_import("nbformat")

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ".labgen.json"
#: the kernel every course notebook runs on, as ``make lab`` installs it: shipped in each notebook, so that
#: opening one in JupyterLab changes nothing in it
KERNELSPEC = {"display_name": "Python 3 (course)", "language": "python", "name": "python3"}

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"

__all__ = ["GenerationError", "Problem", "student_version", "regions", "generate", "check", "stale", "lint",
           "report", "validate"]


class GenerationError(ValueError):
    """A solution notebook breaks a rule of the generator (e.g. an unclosed region or a region without hint);
    ``fix`` says what to do about it."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


FIX_FENCES = f"close each '{BEGIN}' with '{END}' before the next one opens"


# ---------------------------------------------------------------------------------------------------------
# solution -> student
# ---------------------------------------------------------------------------------------------------------
@dataclass
class SolutionRegion:
    """One ``### BEGIN SOLUTION`` region: its hints by tier and its solution lines (hint lines left out)."""

    hints: dict[int, str]
    lines: list[str]
    language: str  # python | cuda | markdown

    @property
    def tiers(self) -> list[str]:
        return [self.hints[t] for t in sorted(self.hints)]

    @property
    def solution(self) -> str:
        return "\n".join(self.lines)


def _stub(indent: str, hint: str, language: str) -> list[str]:
    if language == "markdown":
        return [indent + "YOUR ANSWER HERE"]
    if language == "cuda":
        text = hint.replace("\\", "\\\\").replace('"', '\\"')
        return [indent + "// YOUR CODE HERE", f'#error "not written yet: {text}"']
    return [indent + "# YOUR CODE HERE", indent + f"raise NotImplementedError({hint!r})"]


def _region(lines: list[str], where: str, language: str) -> SolutionRegion:
    """Split a region into hints and solution lines; enforce the hint rules (tier 0 present unless Markdown,
    tiers numbered without gaps, neither tier 0 nor tier 1 holding a line of the solution)."""
    hints: dict[int, str] = {}
    body = []
    for line in lines:
        parsed = hints_mod.parse_hint(line)
        if parsed is None:
            body.append(line)
            continue
        tier, text = parsed
        if tier in hints:
            raise GenerationError(f"{where}: two '# HINT {tier}:' lines in one solution region",
                                  "keep one hint line per tier")
        hints[tier] = text
    if language != "markdown" and 0 not in hints:
        raise GenerationError(f"{where}: the solution region has no '# HINT: …' line",
                              "add a line '# HINT: <what to do, in words>' inside the region: it becomes the stub's "
                              "message")
    if hints and sorted(hints) != list(range(len(hints))):
        raise GenerationError(f"{where}: hint tiers {sorted(hints)} have a gap (HINT, HINT 1, HINT 2, …)",
                              "number the hints HINT, HINT 1, HINT 2, … without a gap")
    region = SolutionRegion(hints, body, language)
    for tier in sorted(hints):
        leaked = hints_mod.leaked_lines(hints[tier], region.solution)
        if leaked:
            name = "HINT" if tier == 0 else f"HINT {tier}"
            raise GenerationError(f"{where}: '# {name}:' gives the answer away: it contains the solution line "
                                  f"{leaked[0]!r} (hints say what to do, where to look and the shape of the answer, "
                                  "never its code)",
                                  f"say in words what '# {name}:' asks for; keep the code in the region")
    return region


def _clear_regions(source: str, where: str, markdown: bool, *, exercise: str | None = None, lab: str | None = None,
                   found: list[SolutionRegion] | None = None, collapse: bool = False) -> tuple[str, int]:
    """Replace every solution region by its stub (or, with ``collapse``, by one ``// ✎ <hint>`` line) and drop
    hidden tests. Returns the new source and the number of regions; ``found`` collects the regions."""
    lines = source.split("\n")
    out: list[str] = []
    region: list[str] | None = None
    begin_line = ""
    hidden = False
    count = 0
    for n, line in enumerate(lines, 1):
        if BEGIN_HIDDEN in line:
            if hidden:
                raise GenerationError(f"{where}, line {n}: nested {BEGIN_HIDDEN}", FIX_FENCES)
            hidden = True
            continue
        if END_HIDDEN in line:
            if not hidden:
                raise GenerationError(f"{where}, line {n}: {END_HIDDEN} without a begin", FIX_FENCES)
            hidden = False
            continue
        if hidden:
            continue
        if BEGIN in line:
            if region is not None:
                raise GenerationError(f"{where}, line {n}: nested {BEGIN}", FIX_FENCES)
            region, begin_line = [], line
            continue
        if END in line:
            if region is None:
                raise GenerationError(f"{where}, line {n}: {END} without a begin", FIX_FENCES)
            indent = re.match(r"\s*", begin_line).group(0)
            language = "markdown" if markdown else ("cuda" if begin_line.strip().startswith("//") else "python")
            info = _region(region, f"{where}, line {n}", language)
            if found is not None:
                found.append(info)
            tier0 = info.hints.get(0, "")
            if collapse:
                out.append(f"{indent}{'//' if language == 'cuda' else '#'} ✎ {tier0}")
            else:
                out.extend(_stub(indent, hints_mod.stub_text(tier0, exercise, lab, len(info.hints) > 1), language))
            region = None
            count += 1
            continue
        if region is not None:
            region.append(line)
        else:
            out.append(line)
    if region is not None:
        raise GenerationError(f"{where}: {BEGIN} is never closed", FIX_FENCES)
    if hidden:
        raise GenerationError(f"{where}: {BEGIN_HIDDEN} is never closed", f"close it with '{END_HIDDEN}'")
    return "\n".join(out), count


def regions(source: str, where: str, markdown: bool) -> list[SolutionRegion]:
    """The solution regions of one cell's source; raises GenerationError (with its fix) where a rule is broken."""
    found: list[SolutionRegion] = []
    _clear_regions(source, where, markdown, found=found)
    return found


def _strip_outputs(nb: nbformat.NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)


RAISES = "raises-exception"


def _top_level_names(source: str) -> set[str]:
    """The names a cell binds at its top level (functions, classes, assignments); empty when it does not parse."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _used_names(source: str) -> set[str]:
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def tag_cells_that_may_fail(nb: nbformat.NotebookNode) -> None:
    """Tag ``raises-exception`` on every code cell that may fail on unwritten or wrong work: graded checks, answer
    cells, and the cells that use a name an answer cell binds. Idempotent; other tags are kept."""
    answers: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers |= _top_level_names(cell.source)
        may_fail = meta.get("grade") or meta.get("solution") or bool(_used_names(cell.source) & answers)
        tags = list(cell.metadata.get("tags", []))
        if may_fail and RAISES not in tags:
            cell.metadata["tags"] = [*tags, RAISES]


def student_version(solution: Path) -> str:
    """The student notebook for one solution notebook, as the exact text written to labs/."""
    nb = nbformat.read(solution, as_version=4)
    _strip_outputs(nb)
    regions = 0
    lab = hints_mod.lab_of(solution.name)
    for i, cell in enumerate(nb.cells):
        where = f"{solution.name}, cell {i}"
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        exercise = hints_mod.exercise_id(gid) if gid else None
        new, n = _clear_regions(cell.source, where, markdown=cell.cell_type == "markdown", exercise=exercise,
                                lab=lab)
        cell.source = new
        regions += n
    if regions == 0:
        raise GenerationError(f"{solution.name} has no {BEGIN} region: a lab needs at least one exercise",
                              "add one: python -m helpers.course.author new-exercise")
    tag_cells_that_may_fail(nb)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    banner = nbformat.v4.new_markdown_cell(
        f"> **Student notebook**, generated from `solutions/{solution.name}` by `make labs`. "
        "Write your code where it says `YOUR CODE HERE`, then run the check cell below it."
    )
    banner.id = "labgen-banner"
    banner.metadata["labgen"] = {"banner": True}
    nb.cells.insert(0, banner)
    return nbformat.writes(nb) + "\n"


def solution_namespace(path: Path) -> dict:
    """The names a lab notebook defines: its first code cell (the imports) and every solution cell, executed.

    Tests use it to feed a solution's own answers to the graders, without running the whole notebook.
    """
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    namespace: dict = {}
    exec(code[0].source, namespace)  # noqa: S102 - the notebook's imports
    for cell in code[1:]:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            exec(cell.source, namespace)  # noqa: S102
    return namespace


def lab_data(root: Path = ROOT) -> dict:
    """What ``make labs`` writes to ``helpers/course/data/labs.json``: every exercise's hints and (encoded) answer, and
    each lab's kernel as students see it (solution regions collapsed to one ``// ✎`` line), for the diff cells.

    A solution cell names its kernel with the metadata ``{"labgen": {"kernel": "VARIABLE"}}``: the cell assigns
    the kernel's CUDA source, as one string literal, to that variable.
    """
    exercises: dict[str, dict] = {}
    kernels: dict[str, dict] = {}
    for sol in _solutions(root):
        nb = nbformat.read(sol, as_version=4)
        lab = hints_mod.lab_of(sol.name)
        for i, cell in enumerate(nb.cells):
            where = f"{sol.name}, cell {i}"
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            found: list[SolutionRegion] = []
            _clear_regions(cell.source, where, markdown=cell.cell_type == "markdown", found=found)
            code = [r for r in found if r.language != "markdown"]
            if code and gid:
                exercises[hints_mod.exercise_id(gid)] = {
                    "lab": lab, "notebook": sol.name,
                    "regions": [{"hints": r.tiers, "answer": hints_mod.encode(r.solution)} for r in code]}
            variable = cell.metadata.get("labgen", {}).get("kernel")
            if variable:
                source = _assigned_string(cell.source, variable, where)
                skeleton, _ = _clear_regions(source, where, markdown=False, collapse=True)
                solved = _solved(source)
                entry: dict = {"variable": variable, "notebook": sol.name}
                carries = cell.metadata.get("labgen", {}).get("carries")
                if carries:  # the cell carries regions of an earlier step's kernel: the lab's kernel is both together
                    from helpers.course import carry

                    prev = _assigned_string(next(c.source for c in nb.cells if c.cell_type == "code"
                                                 and f"{carries} = " in c.source), carries, where)
                    prev_skeleton, _ = _clear_regions(prev, where, markdown=False, collapse=True)
                    skeleton = carry.assemble(prev_skeleton, prev_skeleton, skeleton).text
                    solved = carry.assemble(prev_skeleton, _solved(prev), solved).text
                    entry["carries"] = {"variable": carries, "skeleton": prev_skeleton.strip("\n") + "\n"}
                kernels[lab] = {**entry, "source": skeleton.strip("\n") + "\n",
                                "solved": hints_mod.encode(solved.strip("\n") + "\n")}
    return {"version": 1, "exercises": dict(sorted(exercises.items())), "kernels": dict(sorted(kernels.items()))}


def _solved(source: str) -> str:
    """A kernel's solution as code: the solution markers and hint lines left out."""
    return "\n".join(line for line in source.split("\n") if BEGIN not in line and END not in line
                     and hints_mod.parse_hint(line) is None)


def _assigned_string(source: str, variable: str, where: str) -> str:
    """The string literal a cell assigns to ``variable`` (``X = r\"\"\"...\"\"\"``)."""
    import ast

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
            raise GenerationError(f"{where}: {variable} must be assigned one string literal (the kernel alone)",
                                  f'write the cell as {variable} = r"""<the kernel>"""')
    raise GenerationError(f"{where}: the cell is marked as holding kernel {variable} but does not assign it",
                          f"assign {variable} in that cell, or remove its labgen kernel metadata")


def lab_data_text(root: Path = ROOT) -> str:
    return json.dumps(lab_data(root), indent=1, ensure_ascii=False) + "\n"


LAB_DATA = Path("helpers") / "course" / "data" / "labs.json"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _read_manifest(labs: Path) -> dict[str, str]:
    path = labs / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def _solutions(root: Path) -> list[Path]:
    return sorted((root / "solutions").glob("*.ipynb"))


#: what `make check` found in files it has seen, by a hash of their contents and of the course's code (git-ignored)
MEMO = Path(".cache") / "make-check.json"


class _Memo:
    """Results that depend only on files' contents, kept between runs: a warm ``make check`` re-reads what changed
    and nothing else. A key is a hash of the inputs and of the code that judged them: the generator's modules for
    the labs, every module of ``helpers/`` but the labs' grader modules for a notebook's mistakes (its own lab's
    grader module is one of its inputs); only clean results are kept."""

    GENERATOR = ("labgen.py", "hints.py", "carry.py")

    def __init__(self, root: Path) -> None:
        self.path = root / MEMO
        try:
            self.old = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.old = {}
        self.new: dict[str, object] = {}
        code, generator = hashlib.sha256(), hashlib.sha256()
        for module in sorted((root / "helpers").rglob("*.py")):
            rel = module.relative_to(root).as_posix()
            if re.fullmatch(r"helpers/course/checks/lab\d+\.py", rel):
                continue
            code.update(rel.encode() + b"\0" + module.read_bytes())
            if rel.removeprefix("helpers/course/") in self.GENERATOR:
                generator.update(rel.encode() + b"\0" + module.read_bytes())
        self.code, self.generator = code.hexdigest(), generator.hexdigest()

    def key(self, kind: str, *files: Path) -> str:
        """A hash of ``files`` and of the code that judges them (the generator's alone for the generated labs)."""
        code = self.generator if kind in ("student", "lab-data", "lesson") else self.code
        h = hashlib.sha256(f"{kind}\0{code}".encode())
        for f in files:
            h.update(b"\0" + (f.read_bytes() if f.exists() else b"(missing)"))
        return h.hexdigest()

    def get(self, key: str) -> object | None:
        value = self.old.get(key)
        if value is not None:
            self.new[key] = value
        return value

    def put(self, key: str, value: object) -> None:
        self.new[key] = value

    def save(self) -> None:
        kept = {**self.old, **self.new}
        if len(kept) > 1000:  # old contents pile up: keep what this run used
            kept = self.new
        if kept == self.old:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(kept, sort_keys=True))
            tmp.replace(self.path)
        except OSError:  # a read-only checkout: no memo, the same answers
            pass


def generate(force: bool = False, root: Path = ROOT) -> int:
    """Write labs/ from solutions/ and print each lab it changed. A lab the student edited is kept; the new version
    goes beside it."""
    labs = root / "labs"
    labs.mkdir(exist_ok=True)
    manifest = _read_manifest(labs)
    refused = []
    for sol in _solutions(root):
        text = student_version(sol)
        target = labs / sol.name
        if target.exists() and not force:
            current = target.read_text()
            if current != text and _digest(current) != manifest.get(sol.name):
                beside = target.with_suffix(".new.ipynb")
                beside.write_text(text)
                refused.append((target, beside))
                continue
        manifest[sol.name] = _digest(text)
        if target.exists() and target.read_text() == text:
            continue  # unchanged: say nothing
        target.write_text(text)
        print(f"wrote {target.relative_to(root)}")
    for name in list(manifest):
        if not (root / "solutions" / name).exists():
            manifest.pop(name)
    (labs / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    data = root / LAB_DATA  # the hints, encoded answers and kernel skeletons (helpers.course.hints reads them)
    data.parent.mkdir(parents=True, exist_ok=True)
    if not data.exists() or data.read_text() != lab_data_text(root):
        data.write_text(lab_data_text(root))
        print(f"wrote {LAB_DATA}")
    for target, beside in refused:
        print(
            f"kept {target.relative_to(root)}: it differs from what make labs last wrote (your edits?); "
            f"the new version is {beside.relative_to(root)} — compare them, or run "
            "`python -m helpers.course.labgen generate --force` to overwrite",
            file=sys.stderr,
        )
    return 1 if refused else 0


def stale(root: Path = ROOT) -> list[str]:
    """What is out of date in labs/ (and the hints file) compared with what solutions/ generates; empty when
    nothing is."""
    return _stale(root, _Memo(root))


def _stale(root: Path, memo: _Memo) -> list[str]:
    """:func:`stale`, with what was generated before from the same contents read from ``memo``."""
    problems = []
    labs = root / "labs"
    manifest = _read_manifest(labs)
    for sol in _solutions(root):
        target = labs / sol.name
        key = memo.key("student", sol)
        digest = memo.get(key)
        if digest is None:
            digest = _digest(student_version(sol))
        current = _digest(target.read_text()) if target.exists() else None
        if current is None:
            problems.append(f"{target.relative_to(root)} is missing")
        elif current != digest:
            problems.append(f"{target.relative_to(root)} differs from what solutions/{sol.name} generates")
        elif manifest.get(sol.name) != digest:
            problems.append(f"labs/{MANIFEST} does not record labs/{sol.name} as generated (the next `make labs` "
                            "after a change to its solution would keep it as a lab edited by hand)")
        else:
            memo.put(key, digest)
    data = root / LAB_DATA
    key = memo.key("lab-data", *_solutions(root))
    want = memo.get(key) or _digest(lab_data_text(root))
    if not data.exists() or _digest(data.read_text()) != want:
        problems.append(f"{LAB_DATA} differs from what solutions/ generates (the hints)")
    else:
        memo.put(key, want)
    for lab in sorted(labs.glob("*.ipynb")):
        if lab.name.endswith(".new.ipynb"):
            continue
        if not (root / "solutions" / lab.name).exists():
            problems.append(f"{lab.relative_to(root)} has no solution in solutions/")
    return problems


def check(root: Path = ROOT) -> int:
    """0 when every lab equals what ``generate`` would write from its solution, else 1 with the reasons."""
    try:
        problems = stale(root)
    except GenerationError as exc:
        print(f"✗ {exc}" + (f" — fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        return 1
    for p in problems:
        print(f"labs/ out of date: {p}", file=sys.stderr)
    if problems:
        print("run `make labs` (labs/ is generated from solutions/ and never edited by hand; a student's work lives "
              "in my-work/, which `make lab` fills)", file=sys.stderr)
    return 1 if problems else 0


# ---------------------------------------------------------------------------------------------------------
# the authoring mistakes found without running anything (make check; make labs and make validate run it first)
# ---------------------------------------------------------------------------------------------------------
GRADE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
AUTHOR = "python -m helpers.course.author"


@dataclass(frozen=True)
class Problem:
    """One authoring mistake: the notebook (relative to the course root), the cell, what is wrong, the fix."""

    path: str
    cell: int | None
    what: str
    fix: str
    grade_id: str | None = None

    def __str__(self) -> str:
        where = self.path + ("" if self.cell is None else f", cell {self.cell}")
        where += f" ({self.grade_id})" if self.grade_id else ""
        return f"{where}: {self.what} — fix: {self.fix}"


def _role(meta: dict) -> str:
    if meta.get("solution") and meta.get("grade"):
        return "written"
    return "answer" if meta.get("solution") else "check" if meta.get("grade") else "plain"


def _defined_names(module: Path) -> set[str] | None:
    """The names a module defines or imports at its top level; None when it is missing or does not parse."""
    import ast

    try:
        tree = ast.parse(module.read_text())
    except (OSError, SyntaxError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _top_level_defs(source: str) -> set[str]:
    """The functions a cell defines at its top level; empty when it does not parse."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _grader_calls(source: str, lab: str) -> list[tuple[str, list[str], bool]]:
    """The grader calls of a check cell: (grader name, the names passed as positional arguments, whether every
    argument is a plain name), for each top-level ``lab.check_…(…)`` call."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    calls = []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and isinstance(call.func.value, ast.Name) and call.func.value.id == lab):
            names = [a.id for a in call.args if isinstance(a, ast.Name)]
            plain = len(names) == len(call.args) and not call.keywords
            calls.append((call.func.attr, names, plain))
    return calls


def _graded_names(source: str, lab: str) -> list[str]:
    return [name for _, names, _ in _grader_calls(source, lab) for name in names]


def _mark_fix(rel: str, index: int | str, role: str, grade_id: str, points: float | None = None) -> str:
    worth = "" if points is None else f" --points {points:g}"
    return f"{AUTHOR} mark {rel} {index} --{role}{worth} --id {grade_id}"


def _committed_ids(root: Path, rel: str) -> dict[str, str] | None:
    """cell id -> grade_id of the notebook as the last commit has it; None outside git or for a new notebook."""
    import subprocess

    try:
        done = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    try:
        nb = nbformat.reads(done.stdout, as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable old version blames nobody
        return None
    return {c.get("id", ""): (c.metadata.get("nbgrader") or {}).get("grade_id") for c in nb.cells}


def _duplicate(rel: str, nb: nbformat.NotebookNode, first: int, second: int, gid: str,
               committed: dict[str, str] | None) -> Problem:
    """Two cells with one grade id: the one that is new since the last commit gets the new id; where git cannot say
    which is new, both are named and the author chooses."""
    def fix(i: int) -> str:
        meta = nb.cells[i].metadata.get("nbgrader") or {}
        role = _role(meta)
        if role == "plain":
            return f"{AUTHOR} mark {rel} {i} --plain"
        return _mark_fix(rel, i, role, f"{gid}-2", meta.get("points") if role in ("check", "written") else None)

    had = [committed is not None and committed.get(nb.cells[i].get("id", "")) == gid for i in (first, second)]
    if had == [True, False]:
        return Problem(rel, second, f"uses the id of cell {first}, which had it in the last commit: ids are unique "
                       "in a notebook (nbgrader stops at the second)", fix(second) + " (or another new id)", gid)
    if had == [False, True]:
        return Problem(rel, first, f"uses the id of cell {second}, which had it in the last commit: ids are unique "
                       "in a notebook (nbgrader stops at the second)", fix(first) + " (or another new id)", gid)
    return Problem(rel, second, f"uses the id of cell {first}: ids are unique in a notebook (nbgrader stops at the "
                   "second); give the cell you added a new id", f"{fix(second)}, or {fix(first)}", gid)


def _lint_solution(path: Path, root: Path) -> tuple[list[Problem], dict[str, int]]:
    """The mistakes of one solution notebook, and its exercises (exercise id -> cell of its answer)."""
    rel = path.relative_to(root).as_posix()
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable notebook is one plain line
        return [Problem(rel, None, f"is not a notebook nbformat can read ({type(exc).__name__}: {exc})",
                        "restore it with git, or open and save it in JupyterLab")], {}
    lab = hints_mod.lab_of(path.name)
    checks_py = Path("helpers") / "course" / "checks" / f"{lab}.py"
    defined = _defined_names(root / checks_py)
    problems: list[Problem] = []
    ids: dict[str, int] = {}
    answers: dict[str, int] = {}
    checks: dict[str, int] = {}
    regions = 0
    committed: dict[str, str] | None | bool = False  # read from git only when two cells share an id
    defined_here: dict[str, int] = {}  # function name -> the plain code cell that defines it
    unmarked = 0  # cells with a solution region but no answer marking
    with_outputs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.get("outputs")
                                                                                  or c.get("execution_count"))]
    if with_outputs:
        problems.append(Problem(rel, None, f"has outputs committed (cell{'s' if len(with_outputs) > 1 else ''} "
                                f"{', '.join(map(str, with_outputs[:8]))}{' …' if len(with_outputs) > 8 else ''}): "
                                "course notebooks are committed without them",
                                "make strip (or Edit → Clear Outputs of All Cells in JupyterLab, then save)"))
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader") or {}
        gid = meta.get("grade_id")
        role = _role(meta)
        code = cell.cell_type == "code"

        def say(what: str, fix: str, gid: str | None = gid, i: int = i) -> None:
            problems.append(Problem(rel, i, what, fix, gid))

        where = f"{rel}, cell {i}"
        found: list[SolutionRegion] = []
        try:
            _, n = _clear_regions(cell.source, where, markdown=not code, found=found)
        except GenerationError as exc:
            say(str(exc)[len(where):].lstrip(",: "), exc.fix)
            n = cell.source.count(BEGIN)
        regions += n
        for region in found:
            if region.language != "markdown" and 1 not in region.hints:
                say("a solution region has no '# HINT 1: …' line: students who are stuck ask for it "
                    f"({lab}.hint(ID, 1)), and the lab's tests require it",
                    "add a line '# HINT 1: <where to look, in words>' under the region's '# HINT:' line")
        if code and role == "plain":
            defined_here |= {name: i for name in _top_level_defs(cell.source) if name not in defined_here}
        if n and role == "check":
            say("a check cell holds a solution region (nbgrader shows a check cell whole and locked)",
                "move the region into the answer cell above it")
        elif n and role == "plain":
            unmarked += 1
            follower = next((c for c in nb.cells[i + 1:] if c.cell_type == "code"), None)
            next_id = (follower.metadata.get("nbgrader") or {}).get("grade_id") if follower is not None else None
            suggested = f"{next_id}-answer" if next_id and not next_id.endswith("-answer") else f"{lab}-NAME-answer"
            if code:
                say("has a solution region but is not marked as an answer: nbgrader refuses the notebook and its "
                    "hints are left out of labs.json", _mark_fix(rel, i, "answer", suggested))
            else:
                say("has a solution region but is not marked as a written answer: nbgrader refuses the notebook",
                    _mark_fix(rel, i, "written", f"{lab}-NAME", 1))
        elif not n and role in ("answer", "written") and BEGIN not in cell.source:
            say(f"is marked as {'an answer' if role == 'answer' else 'a written answer'} but has no '{BEGIN}' "
                "region", f"fence what students write with '{BEGIN}' / '{END}', or {AUTHOR} mark {rel} {i} --plain")
        if not meta:
            continue
        if not gid:
            say("has nbgrader metadata without a grade_id", _mark_fix(rel, i, role if role != "plain" else "answer",
                                                                       f"{lab}-NAME"))
            continue
        if not GRADE_ID.match(gid):
            say(f"grade_id {gid!r} has characters nbgrader refuses",
                "use letters, digits, '-', '_' and '.', starting with a letter or digit")
        if gid in ids:
            if committed is False:
                committed = _committed_ids(root, rel)
            problems.append(_duplicate(rel, nb, ids[gid], i, gid, committed))
        ids.setdefault(gid, i)
        if role in ("check", "written"):
            points = meta.get("points")
            if not isinstance(points, int | float) or isinstance(points, bool) or not points > 0:
                say("is graded but worth no points", _mark_fix(rel, i, role, gid, 1))
        if role == "check" and not code:
            say("a check cell must be a code cell (it calls a grader)", f"{AUTHOR} mark {rel} {i} --plain")
        if role == "written" and code:
            say("a graded answer on a code cell: the course grades code with a check cell",
                _mark_fix(rel, i, "answer", f"{gid}-answer" if not gid.endswith("-answer") else gid))
        if role == "answer" and not code:
            say("a Markdown answer is graded by hand: it is a written answer",
                _mark_fix(rel, i, "written", hints_mod.exercise_id(gid), 1))
        if role == "answer" and code:
            answers.setdefault(hints_mod.exercise_id(gid), i)
        if role == "check" and code:
            checks.setdefault(gid, i)
            for name in sorted(set(re.findall(rf"\b{lab}\.(\w+)\s*\(", cell.source))):
                if defined is not None and name not in defined:
                    say(f"calls {lab}.{name}, which {checks_py.as_posix()} does not define",
                        f"write {name} there ({AUTHOR} new-exercise writes a grader with its tests), or correct "
                        "the name")
    paired = unmarked == 0 and all(exercise in checks for exercise in answers)  # else already said
    for gid, i in checks.items():
        graded_names = _graded_names(nb.cells[i].source, lab)
        if gid not in answers and paired:
            holder = next((defined_here[n] for n in graded_names if n in defined_here), None)
            at = f"cell {holder}" if holder is not None else "the cell that holds the solution"
            problems.append(Problem(rel, i, "a check cell with no answer cell (its id with '-answer'): the solution it "
                                    f"passes on {'is in plain ' + at if holder is not None else 'is not fenced'}, "
                                    "and make labs gives it to students as it is",
                                    f"fence the solution in {at} with '{BEGIN}' / '{END}' and a '# HINT:' line, then "
                                    + _mark_fix(rel, holder if holder is not None else "CELL", "answer",
                                                f"{gid}-answer"), gid))
        elif gid in answers:
            for name in graded_names:
                if name in defined_here:
                    problems.append(Problem(rel, defined_here[name], f"a plain cell defines {name}(), which check "
                                            f"{gid} grades: make labs gives students this solution as it is",
                                            f"move it into answer cell {answers[gid]}, inside its solution region "
                                            "(or give this one another name)"))
    for exercise, i in answers.items():
        if exercise not in checks:
            problems.append(Problem(rel, i, f"no check cell has the id {exercise!r}: an answer's id is its check's "
                                    "id with '-answer' (students ask for hints by the check's id)",
                                    f"give its check cell the id {exercise}, or rename this answer "
                                    "<check id>-answer", f"{exercise}-answer"))
    if regions == 0 and not problems:
        problems.append(Problem(rel, None, f"has no '{BEGIN}' region: a lab needs at least one exercise",
                                f"add one: {AUTHOR} new-exercise {lab} ID --after CELL"))
    if not checks and not problems:
        problems.append(Problem(rel, None, "has no graded check cell",
                                f"mark one: {AUTHOR} mark {rel} CELL --check --points 1 --id {lab}-NAME"))
    if not problems:
        problems += _probe_graders(rel, nb, lab, root, checks, answers)
    if not problems:
        try:
            from nbgrader.nbgraderformat import MetadataValidator
        except ImportError:  # nbgrader is a dev dependency
            pass
        else:
            try:
                MetadataValidator().validate_nb(nb)
            except Exception as exc:  # noqa: BLE001 - nbgrader's own sentence
                problems.append(Problem(rel, None, f"nbgrader refuses its metadata: {exc}",
                                        f"{AUTHOR} list {rel} shows every cell's role; re-mark the cell it names"))
    return problems, answers


FIX_PASSES = ("compare what the answer must be, case by case (c.equal, c.true, c.array): the stub and a wrong value "
              "then fail")
FIX_RAISES = ("call the student's function with grading.call_student and judge what it returns with c.equal / c.true "
              "inside grading.check (a value of the wrong type then fails with the report, not a traceback)")


def _probe_graders(rel: str, nb: nbformat.NotebookNode, lab: str, root: Path, checks: dict[str, int],
                   answers: dict[str, int]) -> list[Problem]:
    """Each grader that takes the answer cell's Python functions, run on the stub and on odd answers
    (helpers.course.graderprobe): it must fail cleanly on every one."""
    from helpers.course import graderprobe

    problems: list[Problem] = []
    module = None
    for gid, i in checks.items():
        if gid not in answers:
            continue
        answer = nb.cells[answers[gid]].source
        stub, _ = _clear_regions(answer, f"{rel}, cell {answers[gid]}", markdown=False, exercise=gid, lab=lab)
        for grader, names, plain in _grader_calls(nb.cells[i].source, lab):
            if not plain or not names or not set(names) <= set(graderprobe.answer_functions(answer)):
                continue
            module = module or graderprobe.grader_module(root, lab)
            if module is None:
                return problems
            for finding in graderprobe.probe(module, grader, answer, names, stub):
                fix = FIX_RAISES if " raises " in finding or " no verdict " in finding else FIX_PASSES
                problems.append(Problem(rel, i, finding, fix, gid))
    return problems


def lint(root: Path = ROOT, *, labs: bool = True, only: str | None = None) -> list[Problem]:
    """Every authoring mistake that can be found without running a notebook, in seconds: solution regions and
    hints, cells' nbgrader roles, ids and points, check cells calling graders that do not exist, an exercise id
    used by two labs, unreadable lessons and (with ``labs``) a stale labs/. ``only``: notebooks whose file name
    contains it."""
    problems: list[Problem] = []
    owner: dict[str, str] = {}
    memo = _Memo(root)
    for sol in _solutions(root):
        key = memo.key("lint", sol, root / "helpers" / "course" / "checks" / f"{hints_mod.lab_of(sol.name)}.py")
        exercises = memo.get(key)
        if exercises is None:
            found, exercises = _lint_solution(sol, root)
            problems += found
            if not found:
                memo.put(key, exercises)
        rel = sol.relative_to(root).as_posix()
        for exercise, i in exercises.items():
            if exercise in owner:
                problems.append(Problem(rel, i, f"exercise {exercise!r} is also {owner[exercise]}'s: hints are "
                                        "looked up by exercise id across the course",
                                        "give one of them an id starting with its own lab", f"{exercise}-answer"))
            owner.setdefault(exercise, rel)
    for lesson in sorted((root / "lessons").glob("*.ipynb")):
        key = memo.key("lesson", lesson)
        if memo.get(key):
            continue
        try:
            nbformat.validate(nbformat.read(lesson, as_version=4))
        except Exception as exc:  # noqa: BLE001 - one plain line
            problems.append(Problem(lesson.relative_to(root).as_posix(), None, f"is not a valid notebook "
                                    f"({type(exc).__name__}: {str(exc).splitlines()[0]})",
                                    "restore it with git, or open and save it in JupyterLab"))
        else:
            memo.put(key, True)
    if labs and not any(p.path.startswith("solutions/") for p in problems):
        for line in _stale(root, memo):
            problems.append(Problem(line.split(" ", 1)[0], None, line.split(" ", 1)[1],
                                    "make labs (labs/ is generated from solutions/)"))
        for new in sorted((root / "labs").glob("*.new.ipynb")):
            problems.append(Problem(new.relative_to(root).as_posix(), None, "waits beside the lab it would replace "
                                    "(the lab there was edited by hand)", "compare the two, keep one, delete the "
                                    "other (or python -m helpers.course.labgen generate --force)"))
    memo.save()
    if only:
        problems = [p for p in problems if only in Path(p.path).name]
    return problems


def report(problems: list[Problem], what: str = "course notebooks", quiet: bool = False) -> int:
    """Print one line per problem (or one ✓ line, unless ``quiet``); 1 when there is any."""
    for p in problems:
        print(f"✗ {p}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} authoring mistake{'s' if len(problems) != 1 else ''}: fix "
              f"{'them' if len(problems) != 1 else 'it'} first (`make check` shows this list again)", file=sys.stderr)
        return 1
    if not quiet:
        print(f"✓ {what}: no authoring mistakes found")
    return 0


# ---------------------------------------------------------------------------------------------------------
# validation: execute notebooks and judge every cell
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CellResult:
    index: int
    graded: bool
    grade_id: str | None
    error: str | None  # "ExceptionName: message" or None
    warnings: list[str] = field(default_factory=list)  # "UserWarning: message", as the cell printed them


#: A warning as Python prints it ("path.py:12: UserWarning: message"), or as a cell's own output starts it.
_WARNING = re.compile(r"^(?:\S.*?:\d+: )?([A-Z]\w*Warning): (.+)$")
#: What to do about a warning a widget or a lesson is known to cause.
WARNING_FIXES = {
    "Out of range float values are not JSON compliant":
        "a figure holds NaN or inf, which plotly cannot send to the browser: draw None where there is no value",
}


def warnings_in(outputs: list) -> list[str]:
    """The Python warnings a cell printed (its stderr stream), one "Category: message" each."""
    found = []
    for out in outputs:
        if out.get("output_type") != "stream" or out.get("name") != "stderr":
            continue
        for line in out.get("text", "").splitlines():
            m = _WARNING.match(line.strip())
            if m and f"{m.group(1)}: {m.group(2)}" not in found:
                found.append(f"{m.group(1)}: {m.group(2)}")
    return found


@dataclass
class NotebookResult:
    path: Path
    kind: str  # lesson | solution | lab
    cells: list[CellResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _grade_info(cell) -> tuple[bool, str | None]:
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("grade")) and cell.cell_type == "code", meta.get("grade_id")


class KernelStartError(RuntimeError):
    """The Jupyter kernel could not start (it died, or did not answer, before the first cell ran): the machine's
    trouble (load, memory, file handles), never a mistake in the notebook; no cell ran."""


#: attempts at starting a notebook's kernel, and the pause before each retry (seconds)
KERNEL_START_ATTEMPTS = 3
KERNEL_START_PAUSE = 3.0


def run_notebook(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 900,
                 course: Path | None = None) -> nbformat.NotebookNode:
    """Execute ``nb`` in place in a fresh kernel started in ``cwd``; errors are recorded in the outputs, not
    raised. ``course``: the course root whose ``helpers`` the kernel imports (first on its PYTHONPATH), whichever
    checkout the environment was installed from. On Linux and macOS the kernel talks over local sockets (IPC),
    not TCP: nothing listens on the network, and the kernel has no reason to warn about unencrypted TCP.

    A kernel that dies or does not answer before the first cell runs ("Kernel died before replying to
    kernel_info", under load) is started again, up to :data:`KERNEL_START_ATTEMPTS` times; then
    :class:`KernelStartError` says so: a start-up failure is never reported as a cell's error."""
    failures: list[str] = []
    for attempt in range(KERNEL_START_ATTEMPTS):
        started = {"cells": 0}
        try:
            return _run_once(nb, cwd, timeout, course, started)
        except Exception as exc:
            if started["cells"]:  # a cell ran: the kernel started; what happened after is the notebook's
                raise
            failures.append(f"{type(exc).__name__}: {exc}")
            if attempt + 1 < KERNEL_START_ATTEMPTS:
                time.sleep(KERNEL_START_PAUSE * (attempt + 1))
    raise KernelStartError(
        f"the Jupyter kernel could not start ({KERNEL_START_ATTEMPTS} attempts; the last said: {failures[-1]}); no "
        "cell ran, so nothing in the notebook was checked: this is the machine (busy, or out of memory or file "
        "handles), not a mistake in the notebook")


def _run_once(nb: nbformat.NotebookNode, cwd: Path, timeout: int, course: Path | None,
              started: dict[str, int]) -> nbformat.NotebookNode:
    from nbclient import NotebookClient

    def cell_started(**_: Any) -> None:
        started["cells"] += 1

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}}, on_cell_start=cell_started)
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        if os.name == "posix":
            client.km = client.create_kernel_manager()
            client.km.transport = "ipc"
            client.km.ip = os.path.join(sockets, "ipc")  # absolute: the kernel runs in another directory
        if course is None:
            client.execute()
        else:
            path = os.pathsep.join([str(course), *filter(None, [os.environ.get("PYTHONPATH")])])
            client.execute(env=dict(os.environ, PYTHONPATH=path))
    return nb


def execute(path: Path, timeout: int = 900, save_to: Path | None = None,
            course: Path | None = None) -> list[CellResult]:
    """Run a notebook top to bottom in a fresh kernel (errors recorded, not fatal); one result per code cell."""
    nb = run_notebook(nbformat.read(path, as_version=4), path.parent, timeout, course)
    if save_to is not None:  # keep the executed notebook (e.g. to read a GPU run's figures)
        save_to.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, save_to / f"{path.parent.name}-{path.name}")
    return _cell_results(nb)


def _cell_results(nb: nbformat.NotebookNode) -> list[CellResult]:
    """One result per code cell of an executed notebook (its index, whether graded, its first error)."""
    results = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        graded, gid = _grade_info(cell)
        err = None
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                err = f"{out.get('ename')}: {out.get('evalue')}"
                break
        results.append(CellResult(i, graded, gid, err, warnings_in(cell.get("outputs", []))))
    return results


def judge(path: Path, kind: str, cells: list[CellResult]) -> list[str]:
    """The rules of ``make validate`` for one executed notebook; returns the problems found."""
    problems = []
    graded = [c for c in cells if c.graded]
    if kind in ("solution", "lab") and not graded:
        problems.append("has no graded check cell")
    for c in cells:  # a warning in a notebook is a failure: students read it as one
        for w in c.warnings:
            fix = next((f for text, f in WARNING_FIXES.items() if text in w), "")
            problems.append(f"cell {c.index}{' (' + c.grade_id + ')' if c.grade_id else ''} printed a warning: {w}"
                            + (f" — fix: {fix}" if fix else ""))
    if kind in ("lesson", "solution"):
        for c in cells:
            if c.error:
                problems.append(f"cell {c.index}{' (' + c.grade_id + ')' if c.grade_id else ''} raised {c.error}")
        return problems
    # a student lab: every graded check fails on the stubs, and the first failure is a graded cell's
    first_error = next((c for c in cells if c.error), None)
    if first_error is not None and not first_error.graded:
        problems.append(
            f"cell {first_error.index} raised {first_error.error} before any graded check failed "
            "(a stub must surface in its check cell, not earlier)"
        )
    allowed = ("NotImplementedError", "CheckFailed")
    for c in cells:
        if c.graded and not c.error:
            problems.append(f"graded cell {c.index} ({c.grade_id}) passes on the stub: it accepts a wrong answer")
        if c.error and not c.graded and not c.error.startswith(allowed):
            problems.append(f"cell {c.index} raised {c.error}: only stubs may fail in a student notebook")
    return problems


def cell_slice(nb: nbformat.NotebookNode, seeds: set[str]) -> set[str]:
    """The ids of the code cells a run of cells ``seeds`` (cell ids) needs: the notebook's first code cell (its
    imports), the seeds, the graded checks that use a name a seed defines (an answer's check), and, backwards, every
    earlier code cell defining a name one of those uses."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code:
        return set()
    keep = {c.get("id") for c in code if c.get("id") in seeds} | {code[0].get("id")}
    defined = set().union(*(_top_level_names(c.source) for c in code if c.get("id") in keep))
    for c in code:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution") and _used_names(c.source) & defined:
            keep.add(c.get("id"))
    needed: set[str] = set()
    for c in reversed(code):
        if c.get("id") in keep:
            needed |= _used_names(c.source)
        elif _top_level_names(c.source) & needed:
            keep.add(c.get("id"))
            needed |= _used_names(c.source)
    return keep


def validate_cells(path: Path, kind: str, cell_ids: set[str], root: Path = ROOT) -> NotebookResult:
    """Run only the code cells ``cell_ids`` of a notebook (every Markdown cell kept), in order, in a fresh kernel,
    and judge them by the rules of ``make validate``: what ``make test-fast`` runs for a change to a few cells."""
    t0 = time.time()
    res = NotebookResult(path, kind)
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.cell_type != "code" or c.get("id") in cell_ids]
    try:
        res.cells = _cell_results(run_notebook(nb, path.parent, course=root))  # beside the notebook, as it runs
        res.problems = judge(path, kind, res.cells)
    except Exception as exc:  # noqa: BLE001 - a kernel that died is a problem to report
        res.problems = [f"could not execute: {type(exc).__name__}: {exc}"]
    res.seconds = time.time() - t0
    return res


def notebooks(kinds: Iterable[str] = ("lesson", "solution", "lab"), root: Path = ROOT) -> list[tuple[Path, str]]:
    """(path, kind) of every course notebook of the given kinds."""
    found = []
    if "lesson" in kinds:
        found += [(p, "lesson") for p in sorted((root / "lessons").glob("*.ipynb"))]
    if "solution" in kinds:
        found += [(p, "solution") for p in _solutions(root)]
    if "lab" in kinds:
        found += [(p, "lab") for p in sorted((root / "labs").glob("*.ipynb")) if not p.name.endswith(".new.ipynb")]
    return found


def validate(
    kinds: Iterable[str] = ("lesson", "solution", "lab"),
    only: str | None = None,
    jobs: int = 2,
    root: Path = ROOT,
    save_to: Path | None = None,
) -> int:
    """Execute notebooks and apply the rules; prints one line per notebook, returns 0 when all are fine."""
    targets = [(p, k) for p, k in notebooks(kinds, root) if only is None or only in p.name]

    def one(item: tuple[Path, str]) -> NotebookResult:
        path, kind = item
        t0 = time.time()
        res = NotebookResult(path, kind)
        try:
            res.cells = execute(path, save_to=save_to, course=root)
            res.problems = judge(path, kind, res.cells)
        except KernelStartError as exc:  # the machine's trouble: the notebook was not checked
            res.problems = [f"not checked: {exc}"]
        except Exception as exc:  # noqa: BLE001 - a kernel that died is a problem to report
            res.problems = [f"could not execute: {type(exc).__name__}: {exc}"]
        res.seconds = time.time() - t0
        return res

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, targets))
    bad = 0
    for r in results:
        rel = r.path.relative_to(root)
        n_graded = sum(c.graded for c in r.cells)
        if r.problems:
            bad += 1
            print(f"FAIL {rel} ({r.kind}, {r.seconds:.0f} s)")
            for p in r.problems:
                print(f"     - {p}")
        else:
            what = {"lab": f"{n_graded} graded checks fail on the stubs", "solution": f"{n_graded} graded checks pass",
                    "lesson": f"{len(r.cells)} code cells run clean"}[r.kind]
            print(f"ok   {rel} ({r.kind}: {what}; {r.seconds:.0f} s)")
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


def strip(root: Path = ROOT) -> int:
    """Remove outputs and execution counts from every course notebook, in place."""
    for path, _ in notebooks(root=root):
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        _strip_outputs(nb)
        after = nbformat.writes(nb)
        if after != before:
            path.write_text(after + "\n")
            print(f"stripped {path.relative_to(root)}")
    return 0


NBGRADER_CONFIG = """\
# Written by `make nbgrader`: the course laid out as an nbgrader course (see docs/instructors.md).
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "hopper-gemm"
c.Execute.timeout = 900
"""


def nbgrader_layout(root: Path = ROOT, target: Path | None = None, generate_release: bool = True) -> int:
    """Copy each solution (its cells that may fail tagged, as in labs/) into ``nbgrader/source/<lab>/`` and run
    ``nbgrader generate_assignment`` on it. Run again over a course with a gradebook (hub/setup.sh does on every
    run), it brings each assignment up to date with solutions/: a corrected check or new points reach the gradebook
    and release/. nbgrader refuses to add or remove cells of an assignment students have submitted: that lab's
    source stays as it was graded, the refusal is said in one line, the other labs go on, and the result is 1."""
    import subprocess

    course = target or root / "nbgrader"
    names = [sol.stem for sol in _solutions(root)]
    before: dict[str, str | None] = {}
    for sol in _solutions(root):
        dest = course / "source" / sol.stem
        dest.mkdir(parents=True, exist_ok=True)
        nb = nbformat.read(sol, as_version=4)
        tag_cells_that_may_fail(nb)  # the released notebook's Run All goes on past a failing check too
        before[sol.stem] = (dest / sol.name).read_text() if (dest / sol.name).exists() else None
        nbformat.write(nb, dest / sol.name)
    (course / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(root=str(course)))
    print(f"laid out {len(names)} assignments in {course}")
    if not generate_release:
        return 0
    # nbgrader calls `alembic` by name: put this environment's scripts first on PATH
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    failed = 0
    for n in names:
        cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", n, "--force"]
        done = subprocess.run(cmd, cwd=course, capture_output=True, text=True, env=env)
        if done.returncode == 0:
            print(f"nbgrader generate_assignment {n}: release/{n}/ written")
            continue
        failed = 1
        output = done.stdout + done.stderr
        if "Cannot add or remove cells" in output and before[n] is not None:
            (course / "source" / n / f"{n}.ipynb").write_text(before[n])
            subprocess.run(cmd, cwd=course, capture_output=True, text=True, env=env)  # its release/ as graded
            print(f"✗ {n}: kept as graded: students have submitted it, and nbgrader refuses to add or remove cells of "
                  "an assignment with submissions — put the new exercise in a lab not yet collected (or a new "
                  "assignment); corrected checks and points go through", file=sys.stderr)
        else:
            print(output, file=sys.stderr)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.labgen", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write labs/ from solutions/")
    g.add_argument("--force", action="store_true", help="overwrite labs even where they were edited")
    sub.add_parser("check", help="fail when labs/ is out of date")
    v = sub.add_parser("validate", help="execute lessons, solutions and labs and judge them")
    v.add_argument("--kind", action="append", choices=["lesson", "solution", "lab"])
    v.add_argument("--only", help="only notebooks whose file name contains this")
    v.add_argument("--jobs", type=int, default=2)
    v.add_argument("--save-executed", type=Path, help="also write the executed notebooks (with outputs) here")
    sub.add_parser("strip", help="remove outputs from every notebook")
    sub.add_parser("nbgrader", help="lay the course out for nbgrader in nbgrader/ and generate the assignments")
    args = parser.parse_args(argv)
    if args.cmd == "strip":
        return strip()
    if args.cmd == "nbgrader":
        return nbgrader_layout()
    try:
        if args.cmd == "generate":  # the authoring mistakes first, each in one line
            return report(lint(labs=False), "solutions/ and lessons/") or generate(force=args.force)
        if args.cmd == "check":
            return check()
        return report(lint(only=args.only), f"notebooks matching {args.only!r}" if args.only else "course notebooks",
                      quiet=True) \
            or validate(args.kind or ("lesson", "solution", "lab"), args.only, args.jobs, save_to=args.save_executed)
    except GenerationError as exc:
        print(f"✗ {exc}" + (f" — fix: {exc.fix}" if exc.fix else ""), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
