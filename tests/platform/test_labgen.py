"""Labs generated from solutions: stubs, hints, hidden tests, refusal to overwrite, and validation both ways."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from helpers import labgen

SOLUTION_CELL = '''def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    # HINT: multiply by two
    return 2 * x
    ### END SOLUTION
'''
CHECK_CELL = '''from helpers import grading
with grading.check("double") as c:
    for x in grading.fresh_rng().integers(-100, 100, size=5):
        c.equal(f"double({x})", grading.call_student(double, int(x)), 2 * int(x))
### BEGIN HIDDEN TESTS
assert double(0) == 0
### END HIDDEN TESTS
'''
CUDA_CELL = '''SRC = r"""
__device__ void arrive(unsigned long long* bar) {
    // ### BEGIN SOLUTION
    // HINT: mbarrier.arrive on the shared::cta barrier
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(0));
    // ### END SOLUTION
}
"""
'''


def _cell(kind: str, source: str, **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, **nbgrader}
    return cell


def make_course(root: Path) -> Path:
    for d in ("solutions", "labs", "lessons"):
        (root / d).mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("markdown", "# Tiny lab\nWrite `double`."),
        _cell("code", SOLUTION_CELL, solution=True, grade=False, grade_id="double-answer"),
        _cell("code", CHECK_CELL, solution=False, grade=True, grade_id="double-check", points=1, locked=True),
        _cell("code", CUDA_CELL, solution=True, grade=False, grade_id="cuda-answer"),
        _cell("markdown", "Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", solution=True, grade=True,
              grade_id="why", points=1),
    ]
    path = root / "solutions" / "lab0_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_student_version_replaces_regions_with_hinted_stubs(tmp_path):
    sol = make_course(tmp_path)
    nb = nbformat.reads(labgen.student_version(sol), as_version=4)
    sources = [c.source for c in nb.cells]
    assert "raise NotImplementedError('multiply by two')" in sources[2]
    assert "return 2 * x" not in sources[2] and "# YOUR CODE HERE" in sources[2]
    assert "HIDDEN" not in sources[3] and "double(0)" not in sources[3]
    assert '#error "not written yet: mbarrier.arrive on the shared::cta barrier"' in sources[4]
    assert "asm volatile" not in sources[4]
    assert "YOUR ANSWER HERE" in sources[5] and "Because" not in sources[5]
    assert nb.cells[2].metadata["nbgrader"]["grade_id"] == "double-answer"


@pytest.mark.parametrize(
    "source, message",
    [
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "no '# HINT"),
        ("### BEGIN SOLUTION\n# HINT: h\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION", "without a begin"),
        ("### BEGIN SOLUTION\n# HINT: h\n### BEGIN SOLUTION\n", "nested"),
    ],
)
def test_malformed_regions_are_refused(tmp_path, source, message):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(labgen.GenerationError, match=message):
        labgen.student_version(path)


def test_generate_never_destroys_a_students_work(tmp_path, capsys):
    make_course(tmp_path)
    assert labgen.generate(root=tmp_path) == 0
    assert labgen.check(root=tmp_path) == 0
    lab = tmp_path / "labs" / "lab0_tiny.ipynb"
    manifest = json.loads((tmp_path / "labs" / ".labgen.json").read_text())
    assert set(manifest) == {"lab0_tiny.ipynb"}
    # the student edits the lab: check fails, and regenerating keeps the edits and writes the new one beside
    lab.write_text(lab.read_text().replace("# YOUR CODE HERE", "return x + x"))
    assert labgen.check(root=tmp_path) == 1
    assert "differs" in capsys.readouterr().err
    assert labgen.generate(root=tmp_path) == 1
    err = capsys.readouterr().err
    assert "kept labs/lab0_tiny.ipynb" in err and "lab0_tiny.new.ipynb" in err
    assert "return x + x" in lab.read_text()
    assert (tmp_path / "labs" / "lab0_tiny.new.ipynb").exists()
    # an unedited lab is simply rewritten when its solution changes
    assert labgen.generate(root=tmp_path, force=True) == 0
    sol = tmp_path / "solutions" / "lab0_tiny.ipynb"
    sol.write_text(sol.read_text().replace("Write `double`.", "Write `double`, please."))
    assert labgen.check(root=tmp_path) == 1
    assert labgen.generate(root=tmp_path) == 0
    assert "please" in lab.read_text()


def test_judge_rules_for_labs():
    R = labgen.CellResult
    good = [R(0, False, None, None), R(1, True, "a", "CheckFailed: x"), R(2, False, None, "NotImplementedError: h")]
    assert labgen.judge(Path("x"), "lab", good) == []
    early = [R(0, False, None, "NotImplementedError: h"), R(1, True, "a", "CheckFailed: x")]
    assert "before any graded check failed" in labgen.judge(Path("x"), "lab", early)[0]
    passes = [R(0, True, "a", None)]
    assert "passes on the stub" in labgen.judge(Path("x"), "lab", passes)[0]
    crash = [R(0, True, "a", "CheckFailed: x"), R(1, False, None, "ZeroDivisionError: boom")]
    assert "only stubs may fail" in labgen.judge(Path("x"), "lab", crash)[0]
    assert labgen.judge(Path("x"), "solution", [R(0, True, "a", "CheckFailed: x")])
    assert labgen.judge(Path("x"), "solution", [R(0, False, None, None)]) == ["has no graded check cell"]


@pytest.mark.slow
def test_validate_end_to_end_and_a_removed_solution_line_fails(tmp_path, capsys):
    sol = make_course(tmp_path)
    labgen.generate(root=tmp_path)
    assert labgen.validate(kinds=("solution", "lab"), root=tmp_path) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "ok   solutions/lab0_tiny.ipynb" in out and "ok   labs/lab0_tiny.ipynb" in out
    sol.write_text(sol.read_text().replace("    return 2 * x\\n", ""))
    labgen.generate(root=tmp_path)
    assert labgen.validate(kinds=("solution",), root=tmp_path) == 1
    assert "double-check" in capsys.readouterr().out


@pytest.mark.slow
def test_nbgrader_runs_on_the_course_layout(tmp_path):
    """docs/instructors.md's nbgrader steps: lay out, generate, validate the source, validate --invert the release."""
    import os
    import subprocess
    import sys

    make_course(tmp_path)
    assert labgen.nbgrader_layout(root=tmp_path) == 0
    course = tmp_path / "nbgrader"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def nbgrader(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                              capture_output=True, text=True, timeout=300)
        return done.stdout + done.stderr

    assert "passes all the tests" in nbgrader("validate", "source/lab0_tiny/lab0_tiny.ipynb")
    assert "does not pass any tests" in nbgrader("validate", "--invert", "release/lab0_tiny/lab0_tiny.ipynb")
    # nbgrader counts the failed check and shows the course's report as its error: no traceback into helpers/
    failed = nbgrader("validate", "release/lab0_tiny/lab0_tiny.ipynb")
    assert "VALIDATION FAILED" in failed and "✗ double is not written yet" in failed, failed
    assert "grading.py" not in failed and "Traceback" not in failed, failed
