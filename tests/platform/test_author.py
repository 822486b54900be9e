"""helpers.course.author: instructors mark cells for nbgrader with a command, and get nbgrader's exact metadata."""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from helpers.course import author, labgen

ANSWER = 'def double(x):\n    ### BEGIN SOLUTION\n    # HINT: times two\n    return 2 * x\n    ### END SOLUTION\n'
CHECK = ("from helpers.course import grading\nwith grading.check('double') as c:\n"
         "    c.equal('double(2)', double(2), 4)\n")
WRITTEN = "Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\n"


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab 0"), nbformat.v4.new_code_cell("import numpy as np"),
                nbformat.v4.new_code_cell(ANSWER), nbformat.v4.new_code_cell(CHECK),
                nbformat.v4.new_markdown_cell(WRITTEN)]
    return nb


def test_each_role_gets_the_metadata_the_authoring_guide_documents():
    nb = _notebook()
    author.mark(nb, 2, "answer", "lab0-double-answer")
    author.mark(nb, 3, "check", "lab0-double", 2)
    author.mark(nb, 4, "written", "lab0-why", 1)
    assert nb.cells[2].metadata["nbgrader"] == {"grade": False, "solution": True, "locked": False,
                                                "grade_id": "lab0-double-answer", "schema_version": 3}
    assert nb.cells[3].metadata["nbgrader"] == {"grade": True, "solution": False, "locked": True,
                                                "grade_id": "lab0-double", "points": 2, "schema_version": 3}
    assert nb.cells[4].metadata["nbgrader"] == {"grade": True, "solution": True, "locked": False,
                                                "grade_id": "lab0-why", "points": 1, "schema_version": 3}
    assert [author.role_of(c) for c in nb.cells] == ["plain", "plain", "answer", "check", "written"]
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(nb)


def test_a_marked_notebook_generates_a_student_lab(tmp_path):
    nb = _notebook()
    author.mark(nb, 2, "answer", "lab0-double-answer")
    author.mark(nb, 3, "check", "lab0-double", 2)
    path = tmp_path / "lab0.ipynb"
    nbformat.write(nb, path)
    student = nbformat.reads(labgen.student_version(path), as_version=4)
    assert "raise NotImplementedError('times two')" in student.cells[3].source
    assert student.cells[4].metadata["nbgrader"]["points"] == 2


def test_plain_removes_the_marking():
    nb = _notebook()
    author.mark(nb, 3, "check", "lab0-double", 1)
    assert author.mark(nb, 3, "plain") == "cell 3 is a plain cell now (no nbgrader metadata)"
    assert "nbgrader" not in nb.cells[3].metadata


@pytest.mark.parametrize("index, role, gid, points, needle", [
    (3, "check", None, 1, "needs an id"),
    (3, "check", "lab0 double", 1, "letters, digits"),
    (3, "check", "lab0-double", None, "worth points"),
    (3, "check", "lab0-double", 0, "worth points"),
    (3, "check", "lab0-double", -1, "worth points"),
    (2, "answer", "lab0-a", 1, "leave out --points"),
    (1, "answer", "lab0-a", None, "no '### BEGIN SOLUTION' region"),
    (4, "check", "lab0-why", 1, "is a markdown cell; a check cell is a code cell"),
    (2, "written", "lab0-w", 1, "is a code cell; a written cell is a markdown cell"),
    (0, "written", "lab0-w", 1, "no '### BEGIN SOLUTION' region"),
    (3, "grade", "lab0-x", 1, "role 'grade'"),
])
def test_what_nbgrader_or_make_labs_would_refuse_is_refused_now(index, role, gid, points, needle):
    nb = _notebook()
    before = json.dumps(nb, sort_keys=True)
    with pytest.raises(author.AuthorError, match=needle.replace("(", r"\(").replace("'", "'")):
        author.mark(nb, index, role, gid, points)
    assert json.dumps(nb, sort_keys=True) == before  # nothing half-done


def test_ids_are_unique_in_a_notebook():
    nb = _notebook()
    author.mark(nb, 2, "answer", "lab0-double")
    with pytest.raises(author.AuthorError, match="already cell 2's"):
        author.mark(nb, 3, "check", "lab0-double", 1)
    author.mark(nb, 2, "answer", "lab0-double")  # re-marking a cell with its own id is fine


def test_cells_are_found_by_number_id_or_text():
    nb = _notebook()
    assert author.find_cell(nb, "3") == 3
    assert author.find_cell(nb, nb.cells[4].id) == 4
    assert author.find_cell(nb, "grading.check") == 3
    with pytest.raises(author.AuthorError, match="no cell 9"):
        author.find_cell(nb, "9")
    with pytest.raises(author.AuthorError, match="2 cells contain"):
        author.find_cell(nb, "double(")
    with pytest.raises(author.AuthorError, match="no cell has"):
        author.find_cell(nb, "tensor core")


def test_the_command_line_marks_lists_and_explains(tmp_path, capsys):
    path = tmp_path / "lab0.ipynb"
    nbformat.write(_notebook(), path)
    assert author.main(["mark", str(path), "BEGIN SOLUTION\n    # HINT", "--answer", "--id", "lab0-a"]) == 0
    assert author.main(["mark", str(path), "grading.check", "--check", "--points", "2", "--id", "lab0-c"]) == 0
    out = capsys.readouterr().out
    assert "cell 2 is an answer cell now: id lab0-a (nbgrader: Autograded answer)" in out
    assert "cell 3 is a check cell now: id lab0-c, 2 points (nbgrader: Autograder tests)" in out
    assert "Reload Notebook from Disk" in out
    assert author.main(["list", str(path)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert "answer lab0-a" in listing[2] and "check lab0-c, 2 pt" in listing[3] and "plain" in listing[0]
    assert author.main(["mark", str(path), "4", "--check", "--points", "1", "--id", "lab0-a"]) == 1
    assert "✗ id 'lab0-a' is already cell 2's" in capsys.readouterr().err
    assert nbformat.read(path, as_version=4).cells[4].metadata.get("nbgrader") is None
    assert author.main(["list", str(tmp_path / "missing.ipynb")]) == 2


def test_the_course_solutions_read_back_with_their_roles():
    for path in sorted(labgen.ROOT.glob("solutions/*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        roles = {author.role_of(c) for c in nb.cells}
        assert {"answer", "check"} <= roles, path.name
        assert len(author.describe(nb)) == len(nb.cells)


def test_an_answer_region_make_labs_would_refuse_is_refused_now():
    nb = _notebook()
    nb.cells[2].source = ANSWER.replace("    # HINT: times two\n", "")
    with pytest.raises(author.AuthorError, match=r"no '# HINT: …' line: add a line '# HINT: <what to do"):
        author.mark(nb, 2, "answer", "lab0-double-answer")
    assert "nbgrader" not in nb.cells[2].metadata


def test_cells_are_found_by_grade_id_too():
    nb = _notebook()
    author.mark(nb, 3, "check", "lab0-double", 1)
    assert author.find_cell(nb, "lab0-double") == 3


# ------------------------------------------------------------------------------------------ scaffolds, end to end
COURSE_PARTS = ("helpers", "solutions", "labs", "lessons", "tests/labs", "tests/platform", "tests/conftest.py",
                "pyproject.toml")


def _course_copy(tmp_path):
    """A copy of the course's parts a scaffold touches, so the real notebooks and modules stay as they are."""
    import shutil

    root = tmp_path / "course"
    for part in COURSE_PARTS:
        source, target = labgen.ROOT / part, root / part
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.new.ipynb"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    return root


def _run(root, *args: str, timeout: int = 600):
    """A command in the copy (its own helpers first on the path), with a hard timeout."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ruff_codes(root) -> str:
    """The rule codes ruff reports in the two files a scaffold appends to, sorted (line numbers left out)."""
    return _ruff_codes_of(root, "helpers/course/checks/lab1.py", "tests/labs/test_lab1.py")


def _ruff_codes_of(root, *files: str) -> str:
    done = _run(root, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *files)
    return "\n".join(sorted(line.split(": ")[1].split(" ")[0] for line in done.stdout.splitlines() if ": " in line
                            and line.startswith(("helpers", "tests"))))


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory):
    """A course copy with exercise lab1-tile-bytes scaffolded after Exercise 1's check, and `make labs` run."""
    root = _course_copy(tmp_path_factory.mktemp("scaffold"))
    root.joinpath("ruff-before.txt").write_text(_ruff_codes(root))
    assert author.main(["new-exercise", "lab1", "tile-bytes", "--after", "lab1-map-args", "--points", "2",
                        "--root", str(root)]) == 0
    assert labgen.generate(root=root) == 0
    return root


def test_new_exercise_writes_cells_grader_and_tests_that_fit_together(scaffolded, capsys):
    nb = nbformat.read(scaffolded / "solutions" / "lab1_tma.ipynb", as_version=4)
    at = author.find_cell(nb, "lab1-map-args")
    spec, answer, check = nb.cells[at + 1:at + 4]
    assert spec.source.startswith("## Exercise 2 · Tile bytes") and spec.cell_type == "markdown"
    assert [author.role_of(c) for c in (answer, check)] == ["answer", "check"]
    assert answer.metadata.nbgrader.grade_id == "lab1-tile-bytes-answer" and check.metadata.nbgrader.points == 2
    assert check.source == "lab1.check_tile_bytes(tile_bytes)"
    student = nbformat.read(scaffolded / "labs" / "lab1_tma.ipynb", as_version=4)
    assert "raise NotImplementedError(\"rows times columns times the bytes of one element (stuck? " \
           "lab1.hint('lab1-tile-bytes', 1))\")" in student.cells[at + 3].source
    from helpers.course import hints

    data = scaffolded / labgen.LAB_DATA
    assert "a bf16 element is 16 bits wide" in hints.hint_text("lab1-tile-bytes", 1, data)
    assert labgen.lint(scaffolded) == []
    assert _ruff_codes(scaffolded) == (scaffolded / "ruff-before.txt").read_text()  # ruff finds nothing new
    checks = (scaffolded / "helpers" / "course" / "checks" / "lab1.py").read_text()
    assert '"check_tile_bytes",\n]' in checks and "def check_tile_bytes(student: Callable[[int, int], int]" in checks


def test_the_scaffolded_tests_pass_with_the_solution_and_fail_on_a_wrong_one(scaffolded):
    args = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/labs/test_lab1.py", "-k", "tile_bytes")
    done = _run(scaffolded, *args)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout
    sol = scaffolded / "solutions" / "lab1_tma.ipynb"
    right = sol.read_text()
    try:
        sol.write_text(right.replace("return rows * cols * 2", "return rows * cols"))
        done = _run(scaffolded, *args)
        assert done.returncode == 1 and "1 failed, 1 passed" in done.stdout, done.stdout
        assert "test_tile_bytes_solution_passes_and_stub_fails" in done.stdout, done.stdout
    finally:
        sol.write_text(right)


@pytest.mark.slow
def test_make_validate_nb_lab1_passes_after_the_scaffold(scaffolded):
    done = _run(scaffolded, "-m", "helpers.course.labgen", "validate", "--only", "lab1")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "ok   solutions/lab1_tma.ipynb (solution: 11 graded checks pass" in out
    assert "ok   labs/lab1_tma.ipynb (lab: 11 graded checks fail on the stubs" in out


@pytest.mark.parametrize("args, needle", [
    (["lab9", "x", "--after", "3"], "no lab 'lab9' in solutions/"),
    (["lab1", "map-args", "--after", "3"], "id 'lab1-map-args-answer' is already cell 6's in lab1_tma.ipynb"),
    (["lab1", "other", "--after", "3", "--function", "tile_coords"], "already defines tile_coords()"),
    (["lab1", "x", "--after", "0"], "before the notebook's imports"),
    (["lab1", "x-answer", "--after", "3"], "not ending in '-answer'"),
    (["lab1", "x", "--after", "3", "--function", "class"], "not a Python name"),
    (["lab1", "x", "--after", "3", "--points", "0"], "worth points"),
])
def test_new_exercise_refuses_in_one_line_and_writes_nothing(tmp_path, capsys, args, needle):
    root = tmp_path / "course"
    for part in ("solutions", "helpers/course/checks"):
        (root / part).mkdir(parents=True)
    for name in ("solutions/lab1_tma.ipynb", "helpers/course/checks/lab1.py"):
        (root / name).write_bytes((labgen.ROOT / name).read_bytes())
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert author.main(["new-exercise", *args, "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_new_widget_registers_it_where_the_widget_tests_and_gallery_look(tmp_path, capsys):
    """Beside a widget registered before it (the registry is not assumed empty): its module, its heading and cell in
    the lesson, its registration, and a test of its pure function, all green."""
    root = _course_copy(tmp_path)
    registry = root / author.WIDGET_REGISTRY
    registry.write_text(json.dumps({"bank": {"module": "tiles", "function": "tile_grid_widget"}}))
    assert author.main(["new-widget", "chunk_order", "--lesson", "01", "--after", "3", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "tests/platform/widgets.json: chunk_order registered" in out
    assert "lessons/01_tma.ipynb: cell 4 is its heading, cell 5 shows it" in out
    assert "tests/platform/test_widget_chunk_order.py: tests of chunk_order_slots()" in out
    lesson = nbformat.read(root / "lessons" / "01_tma.ipynb", as_version=4)
    assert lesson.cells[4].source.startswith("## Widget: chunk order") and lesson.cells[4].cell_type == "markdown"
    assert lesson.cells[5].source.endswith("chunk_order.chunk_order_widget()")
    assert set(json.loads(registry.read_text())) == {"bank", "chunk_order"}
    done = _run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/platform/test_widgets.py", "-k",
                "chunk_order", "tests/platform/test_widget_chunk_order.py")
    passed = re.search(r"(\d+) passed", done.stdout)
    assert done.returncode == 0 and passed and int(passed.group(1)) >= 4, done.stdout + done.stderr  # each widget test
    gallery = _run(root, "-c", "import sys; sys.path.insert(0, 'tests/platform'); import widget_gallery as g; "
                   "print(g.GALLERY['chunk_order']); print(g.SETUP.splitlines()[-1])")
    cell, imports = gallery.stdout.split("\n")[:2]
    assert cell == "chunk_order.chunk_order_widget()", gallery.stderr
    assert imports.startswith("from helpers.course.widgets import ") and "chunk_order" in imports.split(" import ")[1]
    assert author.main(["new-widget", "chunk_order", "--root", str(root)]) == 1
    assert "exists" in capsys.readouterr().err
    assert _ruff_codes_of(root, "helpers/course/widgets/chunk_order.py", "tests/platform/test_widget_chunk_order.py") \
        == ""


# ------------------------------------------------------------------------------------------ author check
LAB_ANSWER = ('def double(x):\n    ### BEGIN SOLUTION\n    # HINT: times two\n    # HINT 1: an int doubled is an int\n'
              '    return 2 * x\n    ### END SOLUTION\n')
GRADER = """from helpers.course import grading


def check_double(double):
    with grading.check("Lab 0 · double") as c:
        for x in (2, 5):
            c.equal(f"double({x})", grading.call_student(double, x), 2 * x)
"""


def _lab_course(root, *, answer=LAB_ANSWER, answer_id="lab0-double-answer", check_meta=None,
                call="lab0.check_double(double)", grader=GRADER, outputs=()):
    """A one-exercise course: solutions/lab0_tiny.ipynb, its grader module, and labs/ generated when it can be."""
    for part in ("solutions", "labs", "lessons", "helpers/course/checks"):
        (root / part).mkdir(parents=True, exist_ok=True)
    (root / "helpers/course/checks/lab0.py").write_text(grader)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lab 0"),
                nbformat.v4.new_code_cell("from helpers.course.checks import lab0"),
                nbformat.v4.new_code_cell(answer), nbformat.v4.new_code_cell(call)]
    if answer_id:  # set as JSON, the way JupyterLab's metadata editor does: unchecked
        nb.cells[2].metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False,
                                            "grade_id": answer_id, "schema_version": 3}
    nb.cells[3].metadata["nbgrader"] = check_meta or {"grade": True, "solution": False, "locked": True,
                                                      "grade_id": "lab0-double", "points": 1, "schema_version": 3}
    for i in outputs:
        nb.cells[i].outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ Lab 0 · double\n")]
        nb.cells[i].execution_count = 3
    nbformat.write(nb, root / "solutions" / "lab0_tiny.ipynb")
    return root


def test_check_passes_a_sound_course_and_the_real_one(tmp_path, capsys):
    root = _lab_course(tmp_path)
    labgen.generate(root=root)
    assert labgen.lint(root) == []
    assert author.main(["check", "--root", str(root)]) == 0
    assert "✓ course notebooks: no authoring mistakes found" in capsys.readouterr().out
    assert labgen.lint() == []


CHECK_META = {"grade": True, "solution": False, "locked": True, "grade_id": "lab0-double", "schema_version": 3}


@pytest.mark.parametrize("mistake, course, needles", [
    ("a region with no # HINT: line", dict(answer=LAB_ANSWER.replace("    # HINT: times two\n", "")),
     ["cell 2 (lab0-double-answer): line 5: the solution region has no '# HINT: …' line", "fix: add a line"]),
    ("an answer cell left unmarked", dict(answer_id=None),
     ["cell 2: has a solution region but is not marked as an answer", "hints are left out of labs.json",
      "fix: python -m helpers.course.author mark solutions/lab0_tiny.ipynb 2 --answer --id lab0-double-answer"]),
    ("a grade_id used twice", dict(answer_id="lab0-double"),
     ["cell 3 (lab0-double): uses the id of cell 2", "mark solutions/lab0_tiny.ipynb 3 --check --points 1 --id "
      "lab0-double-2"]),
    ("a check without points", dict(check_meta=CHECK_META),
     ["cell 3 (lab0-double): is graded but worth no points", "mark solutions/lab0_tiny.ipynb 3 --check --points 1"]),
    ("a grader that does not exist", dict(call="lab0.check_dubble(double)"),
     ["cell 3 (lab0-double): calls lab0.check_dubble, which helpers/course/checks/lab0.py does not define"]),
    ("an answer whose check has another id", dict(check_meta=dict(CHECK_META, grade_id="lab0-twice", points=1)),
     ["cell 2 (lab0-double-answer): no check cell has the id 'lab0-double'"]),
    ("a solution in a plain cell, no markers", dict(answer="def double(x):\n    return 2 * x\n", answer_id=None),
     ["cell 3 (lab0-double): a check cell with no answer cell", "is in plain cell 2", "make labs gives it to students",
      "then python -m helpers.course.author mark solutions/lab0_tiny.ipynb 2 --answer --id lab0-double-answer"]),
    ("a grader that passes the stub", dict(grader=GRADER.replace("c.equal(", "c.ok(").replace(
        ", grading.call_student(double, x), 2 * x)", ")")),
     ["cell 3 (lab0-double): check_double passes the stub students start from and an answer returning None",
      "fix: compare what the answer must be"]),
    ("a grader that compares nothing", dict(grader=GRADER.replace(
        'c.equal(f"double({x})", grading.call_student(double, x), 2 * x)', "grading.call_student(double, x)")),
     ["cell 3 (lab0-double): check_double compares nothing on an answer returning None"]),
    ("a grader that raises for an odd answer", dict(grader=GRADER.replace(
        "grading.call_student(double, x), 2 * x)", "grading.call_student(double, x) + 0, 2 * x)")),
     ["check_double raises TypeError on an answer returning None instead of failing with its report",
      "fix: call the student's function with grading.call_student"]),
    ("outputs committed", dict(outputs=(1, 3)),
     ["solutions/lab0_tiny.ipynb: has outputs committed (cells 1, 3)", "fix: make strip"]),
    ("a region without tier 1", dict(answer=LAB_ANSWER.replace("    # HINT 1: an int doubled is an int\n", "")),
     ["cell 2 (lab0-double-answer): a solution region has no '# HINT 1: …' line", "fix: add a line '# HINT 1: "]),
])
def test_check_reports_each_mistake_in_one_plain_line(tmp_path, capsys, mistake, course, needles):
    root = _lab_course(tmp_path, **course)
    assert author.main(["check", "--root", str(root)]) == 1, mistake
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("✗ ")]
    assert len(lines) == 1 and lines[0].startswith("✗ solutions/lab0_tiny.ipynb"), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in err


def test_check_reports_a_stale_lab_and_list_flags_the_mistakes(tmp_path, capsys):
    root = _lab_course(tmp_path)
    labgen.generate(root=root)
    sol = root / "solutions" / "lab0_tiny.ipynb"
    sol.write_text(sol.read_text().replace("times two", "double it"))
    assert author.main(["check", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "✗ labs/lab0_tiny.ipynb: differs from what solutions/lab0_tiny.ipynb generates — fix: make labs" in err
    _lab_course(root, answer_id="lab0-double")
    assert author.main(["list", str(sol)]) == 0
    out = capsys.readouterr().out
    assert "✗ solutions/lab0_tiny.ipynb, cell 3 (lab0-double): uses the id of cell 2" in out


def test_a_duplicate_id_blames_the_cell_that_is_new_since_the_last_commit(tmp_path, capsys):
    """An exercise pasted above an older one with the older one's id: the new cell gets the new id, whatever its
    position; the older exercise keeps its id (and its pairing with its answer)."""
    import subprocess

    root = _lab_course(tmp_path)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, timeout=30)
    path = root / "solutions" / "lab0_tiny.ipynb"
    nb = nbformat.read(path, as_version=4)
    pasted = nbformat.v4.new_code_cell("lab0.check_double(double)")
    pasted.metadata["nbgrader"] = dict(CHECK_META, points=1)
    nb.cells.insert(2, pasted)  # before the older check: first by position
    nbformat.write(nb, path)
    assert author.main(["check", "--root", str(root), "--no-labs"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("✗ ")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("✗ solutions/lab0_tiny.ipynb, cell 2 (lab0-double): uses the id of cell 4, which had "
                               "it in the last commit"), lines[0]
    assert lines[0].endswith("mark solutions/lab0_tiny.ipynb 2 --check --points 1 --id lab0-double-2 (or another "
                             "new id)") and " 4 --check" not in lines[0]


def test_new_exercise_follows_the_labs_own_headings_and_step_table(tmp_path, capsys):
    """Lab 6 numbers its parts "## 3 · …" (Lab 1 "## Exercise 3 · …") and opens with a step table: the scaffold
    writes its heading the lab's way and adds its row to the table, and names what to renumber."""
    root = tmp_path / "course"
    for name in ("solutions/lab6_persistent.ipynb", "helpers/course/checks/lab6.py", "tests/labs/test_lab6.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((labgen.ROOT / name).read_bytes())
    assert author.main(["new-exercise", "lab6", "tile-bytes", "--after", "lab6-footprint", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    nb = nbformat.read(root / "solutions" / "lab6_persistent.ipynb", as_version=4)
    at = author.find_cell(nb, "lab6-footprint")
    assert nb.cells[at + 1].source.startswith("## 4 · Tile bytes\n")
    rows = [ln for ln in nb.cells[0].source.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2", "3", "4", "4"]
    assert rows[3].startswith("| 4 | `tile_bytes`: the bytes of a bf16 tile |")
    assert "cell 0's step table has a row for step 4" in out
    assert re.search(r"renumber the headings of cells \d+ and the step table's later rows", out), out
