"""An instructor's first hour, end to end: in a scratch clone of the course, an exercise scaffolded into every lab
in turn and a widget into a lesson pass `make check` after each addition, and `make test-fast` (the tests and
notebooks they touch) at the end, without editing any other file. The commands are the ones the Makefile's targets
run (`make check`: author check; `make labs`: labgen generate; `make test-fast`: helpers.course.affected): the first
three in this process on the clone (its code is this checkout's), test-fast with this environment's Python on the
clone's own code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from helpers.course import affected, labgen

ROOT = labgen.ROOT
GIT = ["git", "-c", "user.name=instructor", "-c", "user.email=instructor@example.org"]


def _scratch_clone(tmp_path):
    """A clone of this checkout with its uncommitted changes too, committed there as the starting point."""
    scratch = tmp_path / "course"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(ROOT), str(scratch)], check=True, timeout=120,
                   capture_output=True)
    for path in affected.changed_files(ROOT):
        source, target = ROOT / path, scratch / path
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        elif target.exists() and not source.exists():
            target.unlink()
    subprocess.run([*GIT, "add", "-A"], cwd=scratch, check=True, timeout=60)
    subprocess.run([*GIT, "commit", "--quiet", "--allow-empty", "-m", "the course as it is"], cwd=scratch,
                   check=True, timeout=60)
    return scratch


def _here(capsys, *args: str) -> str:
    """``python -m helpers.course.author ARGS --root <clone>``, in this process; its output."""
    from helpers.course import author

    code = author.main([*args])
    out = capsys.readouterr()
    assert code == 0, f"{' '.join(args)} failed:\n{out.out}{out.err}"
    return out.out + out.err


def _run(scratch, *args: str, timeout: int = 120) -> str:
    env = dict(os.environ, PYTHONPATH=str(scratch))
    done = subprocess.run([sys.executable, "-m", *args], cwd=scratch, env=env, capture_output=True, text=True,
                          timeout=timeout)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{out[-6000:]}"
    return out


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_exercise_in_every_lab_and_a_widget_pass_check_and_test_fast(tmp_path, capsys):
    scratch = _scratch_clone(tmp_path)
    at = ("--root", str(scratch))
    expected = {"labs/.labgen.json", labgen.LAB_DATA.as_posix()}
    for solution in sorted((scratch / "solutions").glob("lab*_*.ipynb")):
        lab = solution.name.split("_")[0]
        nb = nbformat.read(solution, as_version=4)
        first_check = next(c.metadata["nbgrader"]["grade_id"] for c in nb.cells
                           if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code")
        _here(capsys, "new-exercise", lab, f"{lab}-tile-bytes", "--after", first_check, *at)
        assert labgen.report(labgen.lint(scratch, labs=False)) == 0 and labgen.generate(root=scratch) == 0
        assert "no authoring mistakes found" in _here(capsys, "check", *at)
        expected |= {f"solutions/{solution.name}", f"labs/{solution.name}", f"helpers/course/checks/{lab}.py",
                     f"tests/labs/test_{lab}.py"}
    _here(capsys, "new-widget", "chunk_order", "--lesson", "01", "--after", "3", *at)
    assert "no authoring mistakes found" in _here(capsys, "check", *at)
    expected |= {"helpers/course/widgets/chunk_order.py", "tests/platform/test_widget_chunk_order.py",
                 "tests/platform/widgets.json", "lessons/01_tma.ipynb"}
    assert set(affected.changed_files(scratch)) == expected  # the scaffolds' files and generated ones, no other
    out = _run(scratch, "helpers.course.affected", timeout=1200)
    assert "✓ make test-fast" in out and "steps passed" in out, out[-6000:]
    labs = len(list((scratch / "solutions").glob("lab*_*.ipynb")))
    assert out.count("graded checks fail on the stubs") == labs and out.count("graded checks pass") == labs, out
