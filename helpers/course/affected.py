"""``make test-fast``: run only what a change touches, in seconds to a few minutes instead of the whole suite.

The change is what ``git status`` shows (edited, added and untracked files), plus, with ``--since REF``, what the
commits since REF changed. Each changed file maps to the tests that exercise it:

- a test module runs itself; a ``conftest.py`` its folder's tests; a helper beside tests (``labtools.py``) the
  tests that import it;
- a module of ``helpers/`` runs every test module that imports it (and the architecture test);
- ``solutions/labN_*.ipynb`` runs ``tests/labs/test_labN.py`` and the notebook rules, and validates the lab's
  solution and student notebooks; ``lessons/NN_*.ipynb`` runs its lesson tests and validates it;
- ``helpers/course/checks/labN.py`` runs ``tests/labs/test_labN.py``; a quiz module its lesson's tests; a widget
  the widget tests; ``docs/*.md`` the tests that read it; the Makefile the guide's test.

Within a file, only what changed since the last commit (or since ``--since REF``) runs where that can be told:
the test functions added or edited in a test module; the tests that name a grader function added or edited in
``helpers/course/checks/labN.py``; for a solution notebook, the tests that name the functions and graders of its
added or edited cells (and the lab's notebook-wide rules: exercises, tiered hints, stubs), and, instead of the
whole notebooks, those cells with what they need (the imports, the cells defining the names they use, the checks of
an answer) run in the solution and in the student lab, judged by the rules of ``make validate``. A change outside
functions (a module's constants, a cell without an id, a new file) runs the whole module or notebook.

Every step runs, whichever failed before it: ``author check`` (the authoring mistakes, in seconds), ruff on the
changed Python files, pytest, the notebooks; the last lines say which failed. ``make test`` remains the whole suite,
for before a merge.

::

    python -m helpers.course.affected                 # what the working tree's changes touch
    python -m helpers.course.affected --since main    # and what the commits since main changed
    python -m helpers.course.affected --dry-run       # only say what would run
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from helpers.course import labgen

__all__ = ["Plan", "changed_files", "plan", "main"]

ROOT = labgen.ROOT


@dataclass
class Plan:
    """What a change touches: test modules to run, notebooks to validate, Python files to lint, and the changed
    files no test maps to."""

    tests: set[str] = field(default_factory=set)
    notebooks: set[str] = field(default_factory=set)  # file stems, for ``labgen.validate(only=…)``
    python: set[str] = field(default_factory=set)
    unmapped: list[str] = field(default_factory=list)
    #: test module -> the test functions to run (a module absent here runs whole)
    only_tests: dict[str, set[str]] = field(default_factory=dict)
    #: notebook stem -> the ids of the changed code cells (a notebook absent here runs whole)
    only_cells: dict[str, set[str]] = field(default_factory=dict)

    def pytest_args(self) -> list[str]:
        """The test modules and test functions (``path::name``) to hand to pytest."""
        args = []
        for test in sorted(self.tests):
            if test in self.only_tests:
                args += [f"{test}::{name}" for name in sorted(self.only_tests[test])]
            else:
                args.append(test)
        return args


def changed_files(root: Path = ROOT, since: str | None = None) -> list[str]:
    """Paths (relative to ``root``) that the working tree changes, and with ``since`` the commits since it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    found: list[str] = []
    entries = git("status", "--porcelain=v1", "-z", "--untracked-files=all").split("\0")
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        found.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the next entry is where it came from
            found.append(entries[i])
            i += 1
    if since:
        found += git("diff", "--name-only", f"{since}...HEAD").splitlines()
    return sorted({f for f in found if f})


def _module_name(path: str) -> str | None:
    if not (path.startswith("helpers/") and path.endswith(".py")):
        return None
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """The dotted names a test module imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _lesson_tests(root: Path, number: str) -> set[str]:
    """The lesson test modules that cover lesson ``number`` (``test_lesson00_01.py`` covers 00 and 01)."""
    found = set()
    for test in (root / "tests" / "lessons").glob("test_lesson*.py"):
        if number in re.findall(r"\d\d", test.stem.removeprefix("test_lesson").split("_edition")[0]):
            found.add(test.relative_to(root).as_posix())
    return found


def _at(root: Path, ref: str, path: str) -> str | None:
    """The text of ``path`` at git revision ``ref``; None where it does not exist there."""
    done = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=root, capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 else None


def _inert(node: ast.stmt) -> bool:
    """An import, ``__all__ = …`` or a docstring: a statement no test needs to run again for."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    return isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"]


def changed_functions(root: Path, path: str, ref: str) -> set[str] | None:
    """The top-level functions of module ``path`` added or edited since ``ref``; None when anything else changed
    (or the file is new, or does not parse): then all of it counts as changed. Imports, ``__all__`` and docstrings
    change no behaviour of their own."""
    old = _at(root, ref, path)
    try:
        trees = [ast.parse(old), ast.parse((root / path).read_text())] if old is not None else None
    except (OSError, SyntaxError):
        return None
    if trees is None:
        return None
    parts = []
    for tree in trees:
        functions = {n.name: ast.dump(n) for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        rest = [ast.dump(n) for n in tree.body if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and not _inert(n)]
        parts.append((functions, rest))
    (before, rest_before), (after, rest_after) = parts
    if rest_before != rest_after:
        return None
    return {name for name, body in after.items() if before.get(name) != body}


def changed_cells(root: Path, path: str, ref: str) -> set[str] | None:
    """The ids of the code cells of notebook ``path`` added or edited since ``ref``; None when the notebook is new
    there or a cell has no id."""
    nbformat = labgen.nbformat
    old = _at(root, ref, path)
    if old is None:
        return None
    try:
        cells = [nbformat.reads(old, as_version=4).cells, nbformat.read(root / path, as_version=4).cells]
    except Exception:  # noqa: BLE001 - unreadable: the whole notebook
        return None
    if any(not c.get("id") for nb in cells for c in nb):
        return None
    before = {c["id"]: (c.cell_type, c.source, c.metadata.get("nbgrader")) for c in cells[0]}
    return {c["id"] for c in cells[1] if c.cell_type == "code"
            and before.get(c["id"]) != (c.cell_type, c.source, c.metadata.get("nbgrader"))}


#: the lab tests' notebook-wide rules (tests/labs/hinttools.py): they run for any change to a lab's notebook
NOTEBOOK_RULES = ("assert_tiered", "assert_stubs_show_tier_0_only", "graded_ids", "notebook_exercises",
                  "notebook_regions", "lab_exercises")


def _tests_naming(root: Path, test: str, names: set[str]) -> set[str]:
    """The test functions of module ``test`` whose source names one of ``names``."""
    try:
        text = (root / test).read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError):
        return set()
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            words = set(re.findall(r"[A-Za-z_][\w-]*", ast.get_source_segment(text, node) or ""))
            if words & names:
                found.add(node.name)
    return found


def _widget_tests(root: Path, test: str, module: str) -> set[str] | None:
    """The widget tests of one widget module: each test parametrized over the widget table, for the widgets the
    registry (tests/platform/widgets.json) gives from that module, and the tests naming the module; None (the whole
    module) when the module is not registered."""
    import json

    registry = root / "tests" / "platform" / "widgets.json"
    names = [n for n, e in (json.loads(registry.read_text()) if registry.exists() else {}).items()
             if e.get("module") == module]
    if not names:
        return None
    tree = ast.parse((root / test).read_text())
    found = _tests_naming(root, test, {module})
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("parametrize" in ast.unparse(d) and "WIDGETS" in ast.unparse(d)
                                                     for d in node.decorator_list):
            found |= {f"{node.name}[{n}]" for n in names}
    return found


def _cell_names(root: Path, path: str, ids: set[str], lab: str) -> set[str]:
    """The function names, graders and grade ids of the cells ``ids`` of a solution notebook."""
    nb = labgen.nbformat.read(root / path, as_version=4)
    names: set[str] = set()
    for cell in nb.cells:
        if cell.get("id") not in ids:
            continue
        names |= labgen._top_level_names(cell.source)
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid:
            names.add(gid.removesuffix("-answer"))
        for grader, args, _ in labgen._grader_calls(cell.source, lab):
            names |= {grader, *args}
    return names


def narrow(p: Plan, changed: list[str], root: Path, ref: str) -> Plan:
    """Within the files of plan ``p``, only what changed since ``ref`` (see the module's docstring). Each changed
    file narrows the tests it brings in; a test another change brings in runs whole."""
    whole: set[str] = set()
    picked: dict[str, set[str]] = {}
    for path in changed:
        own = plan([path], root).tests & p.tests
        names = _narrowed(p, path, own, root, ref, changed) if (root / path).exists() else {}
        for test in own:
            if names.get(test) is None:
                whole.add(test)
            else:
                picked.setdefault(test, set()).update(names[test])
    p.only_tests = {t: n for t, n in picked.items() if t not in whole and n}
    p.tests = {t for t in p.tests if t in whole or t in p.only_tests or t not in picked}
    return p


def _narrowed(p: Plan, path: str, tests: set[str], root: Path, ref: str,
              changed: list[str]) -> dict[str, set[str] | None]:
    """For one changed file, test module -> the test functions it needs (None: all of them)."""
    name = Path(path).name
    if path.startswith("tests/") and re.fullmatch(r"test_.*\.py", name):
        return {path: changed_functions(root, path, ref)}
    if re.fullmatch(r"helpers/course/checks/lab\d+\.py", path):  # graders: their tests call them by name
        functions = changed_functions(root, path, ref)
        module = _module_name(path)
        return {t: None if functions is None or module not in _imports(root / t) else
                _tests_naming(root, t, functions) for t in tests}
    if m := re.fullmatch(r"helpers/course/widgets/(\w+)\.py", path):
        return {t: _widget_tests(root, t, m.group(1)) if t == "tests/platform/test_widgets.py" else None
                for t in tests}
    if m := re.fullmatch(r"lessons/(\d\d_\w+)\.ipynb", path):
        ids = changed_cells(root, path, ref)
        if ids is not None:
            p.only_cells[m.group(1)] = p.only_cells.get(m.group(1), set()) | ids
        return {}
    if (m := re.fullmatch(r"labs/((lab\d+)_\w+)\.ipynb", path)) and f"solutions/{name}" in changed:
        lab_test = f"tests/labs/test_{m.group(2)}.py"  # generated: its solution's change says what runs
        return {t: set() if t == lab_test else None for t in tests}
    if m := re.fullmatch(r"solutions/((lab\d+)_\w+)\.ipynb", path):
        ids = changed_cells(root, path, ref)
        if ids is None:
            return {}
        p.only_cells[m.group(1)] = p.only_cells.get(m.group(1), set()) | ids
        names = _cell_names(root, path, ids, m.group(2)) | set(NOTEBOOK_RULES)
        lab_test = f"tests/labs/test_{m.group(2)}.py"
        return {t: _tests_naming(root, t, names) if t == lab_test else None for t in tests}
    return {}


def plan(changed: list[str], root: Path = ROOT) -> Plan:
    """Map changed files to what they touch."""
    p = Plan()
    test_modules = sorted((root / "tests").rglob("test_*.py"))
    imported = {t.relative_to(root).as_posix(): _imports(t) for t in test_modules}
    for path in changed:
        tests, notebooks = set(p.tests), set(p.notebooks)
        p.tests, p.notebooks = set(), set()
        name = Path(path).name
        if path.endswith(".py") and (root / path).exists():
            p.python.add(path)
        if path.startswith("tests/") and re.fullmatch(r"test_.*\.py", name):
            if (root / path).exists():
                p.tests.add(path)
        elif path.startswith("tests/") and path.endswith(".py"):  # conftest: its folder; a helper: who imports it
            p.tests.update(t for t, names in imported.items() if Path(t).parent == Path(path).parent
                           and (name == "conftest.py" or Path(path).stem in names))
        elif path == "tests/platform/widgets.json":
            p.tests.add("tests/platform/test_widgets.py")
        elif m := re.fullmatch(r"(solutions|labs)/(lab(\d+)_\w+)\.ipynb", path):
            p.tests.update({f"tests/labs/test_lab{m.group(3)}.py", "tests/platform/test_hygiene.py"})
            p.notebooks.add(m.group(2))
        elif path in ("labs/.labgen.json", labgen.LAB_DATA.as_posix()):
            p.tests.add("tests/platform/test_hygiene.py")
        elif m := re.fullmatch(r"lessons/((\d\d)_\w+)\.ipynb", path):
            p.tests.update(_lesson_tests(root, m.group(2)) | {"tests/platform/test_hygiene.py"})
            p.notebooks.add(m.group(1))
        elif m := re.fullmatch(r"helpers/course/checks/(lab\d+)\.py", path):
            p.tests.add(f"tests/labs/test_{m.group(1)}.py")
        elif m := re.fullmatch(r"helpers/course/quizzes/lesson(\d\d)\.py", path):
            p.tests.update(_lesson_tests(root, m.group(1)) | {"tests/platform/test_quizzes.py"})
        elif path.startswith("helpers/course/widgets/"):
            p.tests.add("tests/platform/test_widgets.py")
        elif path == "Makefile":
            p.tests.add("tests/platform/test_instructors_guide.py")
        elif path.startswith("docs/") and path.endswith(".md"):
            p.tests.update(t for t in imported if name in (root / t).read_text())
        if (module := _module_name(path)) is not None:
            p.tests.update(t for t, names in imported.items() if module in names)
            p.tests.add("tests/platform/test_architecture.py")
        if not (p.tests or p.notebooks) and not path.endswith(".py"):
            p.unmapped.append(path)
        p.tests |= tests
        p.notebooks |= notebooks
    p.tests = {t for t in p.tests if (root / t).exists()}
    return p


def _validate(root: Path, p: Plan) -> list[tuple[str, bool]]:
    """Run the plan's notebooks (a solution's changed cells and what they need, in the solution and its student lab;
    other notebooks whole), two at a time; one (name, passed) per notebook, after its lines are printed."""
    nbformat = labgen.nbformat
    jobs: list[tuple[Path, str, set[str] | None]] = []
    for stem in sorted(p.notebooks):
        for path, kind in labgen.notebooks(root=root):
            if path.stem == stem:
                ids = p.only_cells.get(stem)
                if ids is not None:  # a lab's cells and what they need, as the solution has them
                    source = root / "solutions" / path.name if kind in ("solution", "lab") else path
                    ids = labgen.cell_slice(nbformat.read(source, as_version=4), ids)
                jobs.append((path, kind, ids))

    def one(job: tuple[Path, str, set[str] | None]) -> labgen.NotebookResult:
        path, kind, ids = job
        if ids is None:
            res = labgen.NotebookResult(path, kind)
            t0 = time.time()
            try:
                res.cells = labgen.execute(path, course=root)
                res.problems = labgen.judge(path, kind, res.cells)
            except Exception as exc:  # noqa: BLE001 - a kernel that died is a problem to report
                res.problems = [f"could not execute: {type(exc).__name__}: {exc}"]
            res.seconds = time.time() - t0
            return res
        return labgen.validate_cells(path, kind, ids, root)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, jobs))
    said = []
    for (path, kind, ids), r in zip(jobs, results, strict=True):
        rel = path.relative_to(root).as_posix()
        what = f"{len(ids)} cells" if ids is not None else "whole"
        if r.problems:
            print(f"FAIL {rel} ({kind}, {what}, {r.seconds:.0f} s)")
            for problem in r.problems:
                print(f"     - {problem}")
        else:
            graded = sum(c.graded for c in r.cells)
            verdict = {"lab": f"{graded} graded checks fail on the stubs", "solution": f"{graded} graded checks pass",
                       "lesson": f"{len(r.cells)} code cells run clean"}[kind]
            print(f"ok   {rel} ({kind}, {what}: {verdict}; {r.seconds:.0f} s)")
        said.append((rel, not r.problems))
    return said


def _cells(n: int) -> str:
    return f"{n} changed cell{'s' if n != 1 else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.affected", description=__doc__.split("\n")[0])
    parser.add_argument("--since", help="also what the commits since this git revision changed (e.g. main)")
    parser.add_argument("--whole", action="store_true", help="whole test modules and notebooks, not only what "
                        "changed in them")
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    args = parser.parse_args(argv)
    t0 = time.time()
    changed = changed_files(ROOT, args.since)
    if not changed:
        print("nothing changed (git status is clean): nothing to test; `--since main` adds the commits since main")
        return 0
    p = plan(changed, ROOT)
    if not args.whole:
        p = narrow(p, changed, ROOT, args.since or "HEAD")
    tests = p.pytest_args()
    print(f"{len(changed)} changed file{'s' if len(changed) != 1 else ''}: {', '.join(changed)}")
    print(f"  ruff on {len(p.python)} Python file{'s' if len(p.python) != 1 else ''}; pytest on "
          f"{', '.join(tests) or 'no test'}; validate "
          + (", ".join(f"{s} ({_cells(len(p.only_cells[s]))})" if s in p.only_cells else s
                       for s in sorted(p.notebooks)) or "nothing"))
    if p.unmapped:
        print(f"  no test maps to {', '.join(p.unmapped)} (`make test` runs everything)")
    if args.dry_run:
        return 0
    steps: list[tuple[str, bool]] = [("make check", labgen.report(labgen.lint(ROOT)) == 0)]
    python = sys.executable
    if p.python:
        done = subprocess.run([python, "-m", "ruff", "check", *sorted(p.python)], cwd=ROOT)
        steps.append(("ruff", done.returncode == 0))
    if tests:
        done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT)
        steps.append(("pytest", done.returncode in (0, 5)))  # 5: every test deselected or skipped
    steps += _validate(ROOT, p)
    failed = [name for name, ok in steps if not ok]
    print(f"{'✗' if failed else '✓'} make test-fast, {time.time() - t0:.0f} s: "
          + (f"{len(failed)} of {len(steps)} steps failed: {', '.join(failed)}" if failed
             else f"all {len(steps)} steps passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
