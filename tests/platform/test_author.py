"""helpers.course.author: instructors mark cells for nbgrader with a command, and get nbgrader's exact metadata."""

from __future__ import annotations

import json

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
