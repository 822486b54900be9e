"""One set of lint rules everywhere: ``make lint``, ``make test-fast`` and an editor's ruff agree on which files are
checked and how their imports sort, whatever generated folders lie at the course root."""

from __future__ import annotations

import shutil
import subprocess
import sys

from helpers.course import labgen

ROOT = labgen.ROOT


def _ruff(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_lab_tests_are_linted_and_only_the_generated_labs_are_left_out():
    listed = _ruff("check", "--no-cache", "--show-files", "helpers", "tests", "bench", "tools").stdout
    assert "tests/labs/test_lab1.py" in listed and "tests/labs/labtools.py" in listed
    assert "/labs/lab1_tma.ipynb" not in listed


def test_a_generated_nbgrader_folder_does_not_change_how_imports_sort(tmp_path):
    """`make nbgrader` writes nbgrader/ at the root: ruff must not take it for a package of the course."""
    module = "helpers/course/autograde/execute.py"  # it imports nbgrader beside the course's own modules
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / module).parent.mkdir(parents=True)
    shutil.copyfile(ROOT / module, tmp_path / module)
    before = _ruff("check", "--no-cache", "--select", "I", module, cwd=tmp_path)
    (tmp_path / "nbgrader" / "source").mkdir(parents=True)
    (tmp_path / "nbgrader" / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    after = _ruff("check", "--no-cache", "--select", "I", module, cwd=tmp_path)
    assert before.returncode == after.returncode == 0, after.stdout
