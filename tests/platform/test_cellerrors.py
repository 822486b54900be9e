"""A check run too early names the cell to run first; a demo cell calling an unwritten stub gets the one-line
report a check gives, not a traceback."""

from __future__ import annotations

import os
import tempfile

import nbformat
import pytest

from helpers.course import cellerrors

STUB = ('def smem_image(box, swizzle):\n    """The image."""\n    # YOUR CODE HERE\n'
        '    raise NotImplementedError("return the image")')


def _notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("from helpers.course import grading"),
                nbformat.v4.new_markdown_cell("## Exercise 3 · The swizzle\n\ntext"),
                nbformat.v4.new_code_cell(STUB),
                nbformat.v4.new_code_cell("BOX = (64, 64)\nprint(BOX)"),
                nbformat.v4.new_code_cell("smem_image(None, 'B128')"),
                nbformat.v4.new_code_cell("print(BOX_ROWS)"),
                nbformat.v4.new_code_cell("import math\nmath.floor('x')")]
    path = tmp_path / "lab0_demo.ipynb"
    nbformat.write(nb, path)
    return nb, path


def test_the_cell_that_sets_a_name_is_found_in_words(tmp_path):
    _, path = _notebook(tmp_path)
    assert cellerrors.defining_cell(path, "smem_image") == ("the cell that starts `def smem_image(box, swizzle):` "
                                                            "(under “Exercise 3 · The swizzle”)")
    text = cellerrors.name_error(NameError("name 'BOX' is not defined", name="BOX"), path)
    assert text == ("✗ `BOX` is not defined yet: run the cells above first (Run → Run All Above). It is set in the "
                    "cell that starts `BOX = (64, 64)` (under “Exercise 3 · The swizzle”).")
    assert "check its spelling" in cellerrors.name_error(NameError("name 'BOXX' is not defined", name="BOXX"), path)


@pytest.mark.timeout(180)
def test_in_a_kernel_the_stub_and_the_early_cell_are_one_sentence_each(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    nb, path = _notebook(tmp_path)
    nb.cells = [c for c in nb.cells if c.cell_type == "markdown" or "BOX = " not in c.source]  # BOX never set
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setenv("PYTHONPATH", os.getcwd())
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:
        client.km = client.create_kernel_manager()
        client.km.transport = "ipc"
        client.km.ip = os.path.join(sockets, "ipc")
        client.execute()
    errors = {i: o for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"}
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    assert set(errors) == set(code[2:]), [c.outputs for c in nb.cells if c.cell_type == "code"]
    stub, early, other = errors[code[2]], errors[code[3]], errors[code[4]]
    assert stub.traceback == ["✗ smem_image() is not written yet (it raises NotImplementedError: return the image): "
                              "write it in its cell, run that cell, then this one"]
    assert len(early.traceback) == 1 and early.traceback[0].startswith("✗ `BOX_ROWS` is not defined")
    assert "Run → Run All Above" in early.traceback[0]
    assert len(other.traceback) > 1 and other.ename == "TypeError"  # any other error keeps its traceback


def test_a_run_time_report_names_the_students_cell_and_line(monkeypatch):
    """Hazards, deadlocks and faults counted lines in the joined CUDA source ("line 31", across two cells); they
    now also name the cell and its line, as compile errors do."""
    import importlib

    from helpers.gpu import notebook

    launch = importlib.import_module("helpers.gpu.launch")

    wrappers = "__device__ int twice(int x) {\n  return 2 * x;\n}\n"
    kernel = 'extern "C" __global__ void spin(volatile int* flag) {\n  while (flag[0] == 0) {}\n}\n'
    monkeypatch.setattr(notebook, "cells", lambda: [(7, f"KERNEL = r'''\n{kernel}'''"), (6, f"W = '''{wrappers}'''")])
    source = "#include <x>\n" + wrappers + kernel
    text = launch.in_cells("spins forever at line 6 of the CUDA source (`ld`)", source)
    assert text == "spins forever at line 3 of cell [7] (line 6 of the CUDA source) (`ld`)"
    assert launch.in_cells("at line 1 of the CUDA source", source) == "at line 1 of the CUDA source"  # no cell has it


def test_a_wait_on_the_phase_before_the_first_is_said_in_words():
    """The hazard report said a warp "last waited for full[0] phase -1": a wait with parity 1 on a fresh barrier,
    which returns at once. It says so in the course's words."""
    from types import SimpleNamespace

    from helpers.gpu.executor import hazards

    checker = hazards.HazardChecker.__new__(hazards.HazardChecker)
    said = []
    checker.last_wait = {1: (10, "full[0]", -1, None)}
    checker.last_arrive = {}
    checker.pc = 12
    checker.add = lambda kind, sentence, pcs: said.append(sentence)
    checker._region = lambda target, chunk: "sA bytes 0-15"
    checker.where = lambda *a: "at line 9"
    checker._thread = lambda: 32
    copy = SimpleNamespace(bars=[SimpleNamespace(name="full[0]")], phases={0: 0}, after_wait=None, what="TMA load",
                           pc=5, cta=None, warp=0, thread=0)
    checker.mach = SimpleNamespace(W=4)
    checker._read_before_delivered(SimpleNamespace(w0=0), 1, 1, SimpleNamespace(slot=0), 0, copy)
    assert "phase -1" not in said[0]
    assert ("warp 1 last waited on full[0] with the parity of the phase before its first: on a barrier none of whose "
            "phases has completed that wait returns at once") in said[0]
