"""``make test-fast`` (helpers.course.affected): a change maps to the tests and notebooks it touches."""

from __future__ import annotations

import subprocess

import pytest

from helpers.course import affected, labgen


@pytest.mark.parametrize("changed, tests, notebooks", [
    (["solutions/lab1_tma.ipynb"], {"tests/labs/test_lab1.py", "tests/platform/test_hygiene.py"}, {"lab1_tma"}),
    (["helpers/course/checks/lab2.py"], {"tests/labs/test_lab2.py", "tests/platform/test_architecture.py"}, set()),
    (["lessons/04_pipelines.ipynb"], {"tests/lessons/test_lesson04.py", "tests/platform/test_hygiene.py"},
     {"04_pipelines"}),
    (["lessons/01_tma.ipynb"], {"tests/lessons/test_lesson00_01.py"}, {"01_tma"}),
    (["helpers/course/widgets/swizzle.py"], {"tests/platform/test_widgets.py"}, set()),
    (["tests/platform/widgets.json"], {"tests/platform/test_widgets.py"}, set()),
    (["docs/instructors.md"], {"tests/platform/test_instructors_guide.py"}, set()),
    (["Makefile"], {"tests/platform/test_instructors_guide.py"}, set()),
    (["tests/labs/labtools.py"], {"tests/labs/test_lab1.py", "tests/labs/test_lab3.py"}, set()),
    (["tests/platform/test_author.py"], {"tests/platform/test_author.py"}, set()),
])
def test_a_change_maps_to_what_it_touches(changed, tests, notebooks):
    plan = affected.plan(changed)
    assert tests <= plan.tests and plan.notebooks == notebooks and not plan.unmapped, plan


def test_a_module_maps_to_the_tests_importing_it_and_only_those():
    plan = affected.plan(["helpers/hopper/seqbar.py"])
    assert "tests/emulator/test_seqbar.py" in plan.tests and "tests/labs/test_lab1.py" not in plan.tests
    assert plan.python == {"helpers/hopper/seqbar.py"}


def test_a_file_no_test_covers_is_named():
    assert affected.plan(["README.md"]).unmapped == ["README.md"]


def test_changed_files_are_what_git_status_shows(tmp_path):
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, timeout=30)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "start")
    (tmp_path / "kept.txt").write_text("a")
    git("add", "kept.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    assert affected.changed_files(tmp_path) == []
    (tmp_path / "kept.txt").write_text("b")
    (tmp_path / "new dir").mkdir()
    (tmp_path / "new dir" / "added.py").write_text("")
    assert affected.changed_files(tmp_path) == ["kept.txt", "new dir/added.py"]
    git("mv", "kept.txt", "moved.txt")
    assert "moved.txt" in affected.changed_files(tmp_path)
    assert affected.changed_files(tmp_path, since="HEAD~1") == ["kept.txt", "moved.txt", "new dir/added.py"]


def test_the_plan_names_only_test_modules_that_exist():
    plan = affected.plan([p.relative_to(labgen.ROOT).as_posix() for p in (labgen.ROOT / "solutions").glob("*")])
    assert all((labgen.ROOT / t).exists() for t in plan.tests) and len(plan.notebooks) >= 7


def test_only_what_changed_inside_each_file_runs(tmp_path):
    """A grader edited, a test added, an exercise's cells edited: the tests naming them, those cells; a test module
    another change brings in runs whole."""
    import nbformat

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True, timeout=30)

    checks = tmp_path / "helpers" / "course" / "checks" / "lab0.py"
    tests = tmp_path / "tests" / "labs" / "test_lab0.py"
    other = tmp_path / "tests" / "labs" / "test_lab0_more.py"
    for path in (checks, tests):
        path.parent.mkdir(parents=True, exist_ok=True)
    checks.write_text("def check_a(f):\n    return f\n\n\ndef check_b(f):\n    return f\n")
    tests.write_text("from helpers.course.checks import lab0\n\n\ndef test_a():\n    lab0.check_a(1)\n\n\n"
                     "def test_b():\n    lab0.check_b(1)\n\n\ndef test_notebook():\n    assert_tiered('lab0')\n")
    other.write_text("from helpers.course.checks import lab0\n\n\ndef test_c():\n    lab0.check_b(2)\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import math"), nbformat.v4.new_code_cell("def a(x):\n    return x"),
                nbformat.v4.new_code_cell("lab0.check_a(a)"), nbformat.v4.new_code_cell("def b(x):\n    return x")]
    for cell, cid in zip(nb.cells, ["imports", "a-answer", "a", "b-answer"], strict=True):
        cell.id = cid
    nb.cells[2].metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "lab0-a", "points": 1}
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, tmp_path / "solutions" / "lab0_x.ipynb")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "start")
    checks.write_text(checks.read_text().replace("return f\n\n\ndef check_b", "return f + 0\n\n\ndef check_b"))
    tests.write_text(tests.read_text() + "\n\ndef test_new():\n    pass\n")
    nb.cells[1].source = "def a(x):\n    return x + 0"
    nbformat.write(nb, tmp_path / "solutions" / "lab0_x.ipynb")
    changed = affected.changed_files(tmp_path)
    p = affected.narrow(affected.plan(changed, tmp_path), changed, tmp_path, "HEAD")
    assert p.only_tests == {"tests/labs/test_lab0.py": {"test_a", "test_new", "test_notebook"}}, p.only_tests
    assert "tests/labs/test_lab0_more.py" not in p.tests  # it names no changed grader
    assert p.only_cells == {"lab0_x": {"a-answer"}}
    assert labgen.cell_slice(nb, {"a-answer"}) == {"imports", "a-answer", "a"}  # its check comes along
    other.write_text(other.read_text() + "\nX = 1\n")  # module-level code: the whole module
    changed = affected.changed_files(tmp_path)
    p = affected.narrow(affected.plan(changed, tmp_path), changed, tmp_path, "HEAD")
    assert "tests/labs/test_lab0_more.py" in p.tests and "tests/labs/test_lab0_more.py" not in p.only_tests
