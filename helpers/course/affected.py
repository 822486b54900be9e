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

Every run starts with ``author check`` (the authoring mistakes, in seconds) and ruff on the changed Python files.
``make test`` remains the whole suite, for before a merge.

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.affected", description=__doc__.split("\n")[0])
    parser.add_argument("--since", help="also what the commits since this git revision changed (e.g. main)")
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    args = parser.parse_args(argv)
    changed = changed_files(ROOT, args.since)
    if not changed:
        print("nothing changed (git status is clean): nothing to test; `--since main` adds the commits since main")
        return 0
    p = plan(changed, ROOT)
    print(f"{len(changed)} changed file{'s' if len(changed) != 1 else ''}: {', '.join(changed)}")
    print(f"  ruff on {len(p.python)} Python file{'s' if len(p.python) != 1 else ''}; pytest on "
          f"{', '.join(sorted(p.tests)) or 'no test module'}; validate {', '.join(sorted(p.notebooks)) or 'nothing'}")
    if p.unmapped:
        print(f"  no test maps to {', '.join(p.unmapped)} (`make test` runs everything)")
    if args.dry_run:
        return 0
    if labgen.report(labgen.lint(ROOT)):
        return 1
    python = sys.executable
    if p.python:
        done = subprocess.run([python, "-m", "ruff", "check", *sorted(p.python)], cwd=ROOT)
        if done.returncode != 0:
            return done.returncode
    if p.tests:
        done = subprocess.run([python, "-m", "pytest", "-q", *sorted(p.tests)], cwd=ROOT)
        if done.returncode not in (0, 5):  # 5: every test deselected or skipped
            return done.returncode
    failed = 0
    for stem in sorted(p.notebooks):
        failed |= labgen.validate(only=stem, root=ROOT)
    return failed


if __name__ == "__main__":
    sys.exit(main())
