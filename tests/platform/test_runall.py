"""Run All goes on past a failing check, while every grading path still sees the check fail.

JupyterLab's Run All sends every cell at once; a cell that fails stops the rest unless it is tagged
``raises-exception`` (JupyterLab then sends it with ``stop_on_error`` off). nbclient with errors not allowed behaves
the same way, so it stands in for Run All here; tests/platform/test_browser.py runs a lab in JupyterLab itself.
``make validate``, the course's autograder and nbgrader read each cell's error from its outputs.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import nbformat
import pytest

from helpers.course import labgen

ROOT = Path(__file__).resolve().parents[2]
LABS = [p for p, _ in labgen.notebooks(("lab",))]


def _run_all(nb: nbformat.NotebookNode, cwd: Path) -> str | None:
    """Execute like JupyterLab's Run All (stop at the first error of a cell not tagged raises-exception); returns
    the error that stopped it, or None."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(cwd)}})
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        client.km = client.create_kernel_manager()
        client.km.transport = "ipc"
        client.km.ip = os.path.join(sockets, "ipc")
        try:
            client.execute()
        except CellExecutionError as exc:
            return str(exc)[-400:]
    return None


def _graded(cell) -> bool:
    return cell.cell_type == "code" and bool(cell.metadata.get("nbgrader", {}).get("grade"))


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.name)
def test_every_check_and_answer_cell_of_a_lab_is_tagged(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("grade") or meta.get("solution")):
            assert labgen.RAISES in cell.metadata.get("tags", []), f"{path.name} cell {i} is not tagged"


def test_a_cell_that_uses_an_answer_is_tagged_and_one_that_does_not_is_not():
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("def tile(i):\n    raise NotImplementedError\nSIZE: int = 64")
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "a"}
    nb.cells = [nbformat.v4.new_code_cell("import math"), answer, nbformat.v4.new_code_cell("print(tile(3))"),
                nbformat.v4.new_code_cell("print(SIZE * 2)"), nbformat.v4.new_code_cell("print(math.pi)"),
                nbformat.v4.new_code_cell("%time x = 1")]
    nb.cells[2].metadata["tags"] = ["keep-me"]
    labgen.tag_cells_that_may_fail(nb)
    labgen.tag_cells_that_may_fail(nb)  # idempotent
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert tags == [[], [labgen.RAISES], ["keep-me", labgen.RAISES], [labgen.RAISES], [], []]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_run_all_runs_every_cell_of_every_stub_lab_and_its_checks_fail(tmp_path):
    """Each generated lab as a new student has it (every exercise unwritten): Run All reaches the last cell, and
    every graded check shows its ✗ report as the cell's error."""
    for path in LABS:
        nb = nbformat.read(path, as_version=4)
        stopped = _run_all(nb, path.parent)
        assert stopped is None, f"Run All stopped in {path.name}: {stopped}"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count is not None for c in code), f"{path.name}: cells left unrun"
        for cell in filter(_graded, nb.cells):
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert errors and errors[0].ename in ("CheckFailed", "NotImplementedError"), (path.name, cell.source)


CHECK = "from helpers.course import grading\nwith grading.check('{name}') as c:\n    c.equal('{name}', {got}, 2)"


def _tiny_lab(folder: Path) -> Path:
    """A student notebook as labgen writes it: a wrong answer, its failing check, then a right one and its check."""
    nb = nbformat.v4.new_notebook()
    cells = [("x = 1", "answer1", False), (CHECK.format(name="first", got="x"), "first", True),
             ("y = 2", "answer2", False), (CHECK.format(name="second", got="y"), "second", True),
             ("print('the last cell ran')", None, None)]
    for source, gid, grade in cells:
        cell = nbformat.v4.new_code_cell(source)
        if gid:
            cell.metadata["nbgrader"] = {"grade": grade, "solution": not grade, "grade_id": gid, "locked": grade,
                                         "schema_version": 3, **({"points": 1} if grade else {})}
        nb.cells.append(cell)
    labgen.tag_cells_that_may_fail(nb)
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "lab9_tiny.ipynb")
    return folder / "lab9_tiny.ipynb"


@pytest.mark.slow
def test_a_failing_check_lets_run_all_go_on_and_the_graders_still_count_it(tmp_path):
    path = _tiny_lab(tmp_path)
    nb = nbformat.read(path, as_version=4)
    assert _run_all(nb, tmp_path) is None
    assert "the last cell ran" in nb.cells[-1].outputs[0].text
    assert nb.cells[1].outputs[-1].output_type == "error" and "✗ first" in nb.cells[1].outputs[-1].evalue
    # make validate: the failing check is an error of its cell
    results = {r.grade_id: r.error for r in labgen.execute(path) if r.graded}
    assert results["first"].startswith("CheckFailed") and results["second"] is None
    # the course's autograder (nbgrader's grading rule): 0 for the failing check, the point for the later one
    from helpers.course.autograde import grade_notebook

    report = grade_notebook(path, timeout=60, referee=False).by_id()  # its checks are not the course's
    assert (report["first"].points, report["second"].points) == (0, 1), report
    # and without the tag, Run All would have stopped at the failing check (the tag is what lets it go on)
    untagged = nbformat.read(path, as_version=4)
    for cell in untagged.cells:
        cell.metadata.pop("tags", None)
    assert "✗ first" in (_run_all(untagged, tmp_path) or "")
    assert untagged.cells[-1].execution_count is None
