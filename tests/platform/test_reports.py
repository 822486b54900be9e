"""Check reports in a real kernel: a failed check shows its report once, as the cell's error, with no
traceback into the course's code; a student's own exception shows only the student's frames; an NVRTC error
names the line of the student's cell. nbclient (and so `make validate` and nbgrader) still sees the error."""

from __future__ import annotations

import nbformat
import pytest

from helpers.course import labgen

pytestmark = pytest.mark.slow

CELLS = [
    "from helpers import gpu\nfrom helpers.course import grading\nimport numpy as np",
    # 1: the student's answer cell
    "def double(x):\n    y = x * 2\n    return y / 0\n",
    # 2: a check cell whose student code raises
    "with grading.check('Lab 0 · double') as c:\n    c.equal('double(3)', grading.call_student(double, 3), 6)",
    # 3: a check cell that fails a comparison on a numpy value
    "with grading.check('Lab 0 · bytes', seed=11) as c:\n    c.ok('warm-up')\n"
    "    c.equal('bytes of the box', np.uint8(223), 224, hint='rows × columns × 2')",
    # 4: the student's CUDA, in a cell with Python around it
    '# my kernel\nTILE = 64\nSRC = r"""\n__global__ void k(float* x) {\n    int i = threadIdx.x;\n'
    '    x[i] += undefined_name;\n}\n"""',
    # 5: compiled from another cell, inside a larger source
    "gpu.compile('#include \"hopper.cuh\"\\n// the course adds a line\\n' + SRC)",
    # 6: a grader (as in helpers/course/checks) that raises a CheckFailed outside any check context
    "raise grading.CheckFailed('❌ the kernel no longer defines TILE_BYTES')",
    # 7: a passing check
    "with grading.check('Lab 0 · fine') as c:\n    c.equal('one', 1, 1)",
    # 8: the CUDA and its compilation in one cell
    'k = gpu.compile(r"""\n__global__ void k2(int* x) {\n    x[0] = oops;\n}\n""")',
]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> list[list[dict]]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    labgen.run_notebook(nb, tmp_path_factory.mktemp("run"), timeout=120)
    return [cell.outputs for cell in nb.cells]


def _error(outputs: list[dict]) -> dict:
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert len(errors) == 1, outputs
    return errors[0]


def _text(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")


def test_a_failed_check_is_one_report_and_still_an_error(outputs):
    err = _error(outputs[3])
    assert err["ename"] == "CheckFailed"  # nbclient, make validate and nbgrader see the cell fail
    assert err["traceback"] == ["✗ Lab 0 · bytes: bytes of the box", "    expected: 224", "    got:      223",
                                "    hint: rows × columns × 2", "    (random inputs drawn with seed 11)"]
    out = _text(outputs[3])
    assert out == "Checking Lab 0 · bytes …\n   ✓ warm-up\n"  # the report is not printed a second time


def test_a_students_exception_shows_their_frames_only(outputs):
    err = _error(outputs[2])
    assert err["ename"] == "CheckFailed"
    assert err["traceback"] == ["✗ Lab 0 · double: your code raised ZeroDivisionError: division by zero",
                                "    Cell In[2], line 3, in double", "        return y / 0"]


def test_a_check_failed_outside_a_check_has_no_traceback_either(outputs):
    err = _error(outputs[6])
    assert err["traceback"] == ["✗ the kernel no longer defines TILE_BYTES"]


def test_nvrtc_errors_name_the_line_of_the_students_cell(outputs):
    err = _error(outputs[5])
    text = "\n".join(err["traceback"])
    assert err["ename"] == "CompileError"
    assert 'line 6 of your cell [5]: identifier "undefined_name" is undefined' in text
    assert "6 | x[i] += undefined_name;" in text
    assert "File " not in text and "helpers/" not in text


def test_a_passing_check_has_no_error(outputs):
    assert not [o for o in outputs[7] if o["output_type"] == "error"]
    assert _text(outputs[7]).endswith("✓ Lab 0 · fine: the check passed\n")


def test_nvrtc_errors_in_the_compiling_cell_itself(outputs):
    text = "\n".join(_error(outputs[8])["traceback"])
    assert 'line 3 of your cell [9]: identifier "oops" is undefined' in text and "3 | x[0] = oops;" in text
