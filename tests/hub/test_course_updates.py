"""Changes reach the class: once the gradebook exists, re-running hub/setup.sh lays solutions/ out again as the
instructor's nbgrader source and regenerates the assignments (labgen.nbgrader_layout, what setup.sh runs), so an
exercise added mid-term and a corrected check reach the gradebook and the release; `nbgrader autograde --force`
then regrades the submissions with the corrected check (docs/hub.md, "Changes during the term")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.course import labgen

ANSWER = {"grade": False, "solution": True, "locked": False, "schema_version": 3}
CHECK = {"grade": True, "solution": False, "locked": True, "schema_version": 3}
NAME = "lab0_tiny"


def _exercise(fn: str, body: str, check: str, points: int) -> list:
    answer = nbformat.v4.new_code_cell(f"def {fn}(x):\n    ### BEGIN SOLUTION\n    # HINT: in words\n"
                                       f"    # HINT 1: more words\n    return {body}\n    ### END SOLUTION\n")
    answer.metadata["nbgrader"] = dict(ANSWER, grade_id=f"lab0-{fn}-answer")
    graded = nbformat.v4.new_code_cell(check)
    graded.metadata["nbgrader"] = dict(CHECK, grade_id=f"lab0-{fn}", points=points)
    answer.id, graded.id = f"{fn}-answer", fn
    return [answer, graded]


def _write(root: Path, cells: list) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab 0"), *cells]
    (root / "solutions").mkdir(exist_ok=True)
    nbformat.write(nb, root / "solutions" / f"{NAME}.ipynb")


def _nbgrader(course: Path, *args: str) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _score(course: Path, student: str | None = None) -> float:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "hopper-gemm") as gb:
        if student is None:
            return gb.find_assignment(NAME).max_score
        return gb.find_submission(NAME, student).score


def _submit(course: Path, student: str, answers: dict[str, str]) -> None:
    nb = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    for cell in nb.cells:
        fn = cell.metadata.get("nbgrader", {}).get("grade_id", "").removeprefix("lab0-").removesuffix("-answer")
        if cell.metadata.get("nbgrader", {}).get("solution") and fn in answers:
            cell.source = f"def {fn}(x):\n    return {answers[fn]}\n"
    folder = course / "submitted" / student / NAME
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{NAME}.ipynb")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_corrected_checks_and_new_exercises_reach_the_gradebook_and_submissions_are_regraded(tmp_path, capsys):
    course = tmp_path / "grading"
    double = _exercise("double", "2 * x", "assert double(2) == 4", 1)
    _write(tmp_path, double)
    assert labgen.nbgrader_layout(root=tmp_path, target=course) == 0  # hub/setup.sh, the first time
    _submit(course, "ana", {"double": "x + 2"})  # wrong, but the first check cannot tell
    _nbgrader(course, "autograde", NAME)
    assert _score(course) == 1 and _score(course, "ana") == 1

    double[1].source = "assert double(2) == 4\nassert double(3) == 6"  # a corrected check, worth 2 now
    double[1].metadata["nbgrader"]["points"] = 2
    _write(tmp_path, double)
    assert labgen.nbgrader_layout(root=tmp_path, target=course) == 0  # hub/setup.sh again: the gradebook is kept
    assert "double(3) == 6" in (course / "source" / NAME / f"{NAME}.ipynb").read_text()
    assert _score(course) == 2
    _nbgrader(course, "autograde", NAME, "--force")  # the regrade: the corrected check judges ana's submission
    assert _score(course, "ana") == 0

    _write(tmp_path, double + _exercise("triple", "3 * x", "assert triple(2) == 6", 2))  # a new exercise, here
    assert labgen.nbgrader_layout(root=tmp_path, target=course) == 1  # refused: ana has submitted this lab
    assert "✗ lab0_tiny: kept as graded: students have submitted it" in capsys.readouterr().err
    assert "def triple" not in (course / "source" / NAME / f"{NAME}.ipynb").read_text() and _score(course) == 2
    release = nbformat.read(course / "release" / NAME / f"{NAME}.ipynb", as_version=4)
    assert "double(3) == 6" in release.cells[-1].source

    _write(tmp_path, double)  # the new exercise goes to a lab nobody has submitted yet
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab 1"), *_exercise("triple", "3 * x", "assert triple(2) == 6", 2)]
    nbformat.write(nb, tmp_path / "solutions" / "lab1_more.ipynb")
    assert labgen.nbgrader_layout(root=tmp_path, target=course) == 0
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "hopper-gemm") as gb:
        assert gb.find_assignment("lab1_more").max_score == 2
    _submit(course, "ben", {"double": "2 * x"})
    _nbgrader(course, "autograde", NAME, "--student=ben")
    assert _score(course, "ben") == 2
