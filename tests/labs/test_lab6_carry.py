"""Lab 6 grades the student's own kernel: their saved Lab 5 kernel (lab5_epilogue.ipynb beside the Lab 6 notebook, or
nbgrader's one folder per assignment), itself put together with their Lab 4 kernel as Lab 5 graded it, merged with
Lab 6's change and their Lab 6 regions, on their own wrappers of Labs 1 and 2. The course's Lab 5 kernel stands in,
and says so once, where theirs is missing, a stub, or fails Lab 5's check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from carrytools import edit as _edit
from carrytools import graded, opening_text, student_folder

from helpers.course import carry, labgen
from helpers.course.checks import lab6

ROOT = Path(__file__).resolve().parents[2]
LAB4, LAB5 = "lab4_pipeline.ipynb", "lab5_epilogue.ipynb"

#: a student's harmless personal edits in their Lab 5 regions: a renamed local variable in the sub-tile writer, and a
#: comment of their own in the epilogue
LAB5_EDITS = [("    __nv_bfloat162 v = __floats2bfloat162_rn(d[j], d[j + 1]);",
               "    __nv_bfloat162 pair = __floats2bfloat162_rn(d[j], d[j + 1]);"),
              ("chunk * 16 + 4 * (l % 4)) = v;", "chunk * 16 + 4 * (l % 4)) = pair;"),
              ("      stage_subtile(buf, d + 32 * sub, t);\n",
               "      stage_subtile(buf, d + 32 * sub, t);\n      // my note: every thread has written its rows\n")]

#: and one in their Lab 4 kernel, which Lab 5 kept and Lab 6 keeps too
LAB4_EDITS = [("      const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;       // the whole B tile\n",
               "      const unsigned char* b = smem + s * STAGE_BYTES + A_BYTES;       // the whole B tile\n"
               "      // my note: both consumers read the same B\n")]

#: a Lab 5 kernel that fails Lab 5's check: the sub-tile handed to the TMA store without the proxy fence
NO_FENCE = [("      hopper::fence_proxy_async();        // these generic stores, before the TMA (async proxy) reads "
             "them\n", "")]


@pytest.fixture(scope="module")
def lab4_kernel() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB4)["LAB4_KERNEL"]


@pytest.fixture(scope="module")
def lab5_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB5)["LAB5_SRC"]


@pytest.fixture(scope="module")
def lab6_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / "lab6_persistent.ipynb")["LAB6_SRC"]


@pytest.fixture()
def static_only(monkeypatch):
    """Lab 6's check from the compile report and the PTX only (the earlier labs' quick checks still run on the
    executor)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def _beside(tmp_path: Path, monkeypatch, lab5: str | None, *, lab4: str | None = None, lab5_notebook: bool = True,
            lab5_from: Path = ROOT / "solutions" / LAB5, nbgrader: bool = False) -> Path:
    """The student's folder: the solutions of Labs 1 and 2, their Lab 4 notebook (its kernel ``lab4`` if given) and
    their Lab 5 notebook with ``lab5``; the working directory is where the Lab 6 notebook runs."""
    return student_folder(tmp_path, monkeypatch, 6, {4: lab4, 5: lab5}, absent=() if lab5_notebook else (5,),
                          sources={5: lab5_from}, nbgrader=nbgrader)


def _opening(src: str) -> str:
    return opening_text(lab6, src)


def _graded(src: str) -> tuple[carry.Carried, str]:
    return graded(lab6, src)


# ------------------------------------------------------------------------------------------- (a) the solution
def test_the_solution_beside_builds_on_it_and_passes(tmp_path, monkeypatch, capsys, lab5_src, lab6_src):
    _beside(tmp_path, monkeypatch, lab5_src)
    text = _opening(lab6_src)
    assert "✓ your Lab 5 kernel (LAB5_SRC from lab5_epilogue.ipynb) passes Lab 5's check" in text
    assert "--- your Lab 5 kernel (Lab 5)" in text and "+++ Lab 6: the kernel graded (your Lab 5 kernel" in text
    assert "-lab5_gemm(" in text and "+lab6_gemm(" in text
    made, source = _graded(lab6_src)
    assert made.previous.yours and not made.merge.conflicts
    assert made.kernel == carry.code_lines(lab6_src)  # the course's Lab 5 merged with the cell: the cell
    assert "__device__ __forceinline__ void my_mbar_init(" in source  # the student's wrappers, not hopper:: copies
    lab6.check_persistent_kernel(lab6_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 5 kernel + Lab 6's change + your Lab 6 regions)" in out
    assert "✓ Lab 6 · the persistent kernel: all" in out


# ------------------------------------------------------------------------------------------- (b) personal edits
def test_personal_edits_of_labs_4_and_5_are_in_the_graded_kernel_and_it_passes(tmp_path, monkeypatch, capsys,
                                                                              lab4_kernel, lab5_src, lab6_src):
    _beside(tmp_path, monkeypatch, _edit(lab5_src, LAB5_EDITS), lab4=_edit(lab4_kernel, LAB4_EDITS))
    text = _opening(lab6_src)
    assert "✓ your Lab 5 kernel" in text and "⚠" not in text
    made, source = _graded(lab6_src)
    assert made.previous.yours and not made.merge.conflicts
    for mine in ("__nv_bfloat162 pair = __floats2bfloat162_rn(d[j], d[j + 1]);", "= pair;",
                 "// my note: every thread has written its rows", "// my note: both consumers read the same B"):
        assert made.kernel.count(mine) == 1, mine
    assert "for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {" in made.kernel  # and this lab's change
    # the edits are the student's own lines, so the diff from their kernel does not show them as changes
    assert "my note" not in "\n".join(ln for ln in text.splitlines() if ln[:1] in "+-")
    lab6.check_persistent_kernel(lab6_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 5 kernel" in out and "✓ Lab 6 · the persistent kernel: all" in out


def test_an_edit_this_lab_rewrites_is_named(tmp_path, monkeypatch, lab5_src, lab6_src, static_only):
    mine = "    if (nk > 0 && t == 0) my_mbar_arrive(&empty[(nk - 1) % STAGES]);\n"
    _beside(tmp_path, monkeypatch, _edit(lab5_src, [(mine, mine.replace(";\n", ";  // the last stage\n"))]))
    text = _opening(lab6_src)
    assert text.count("this lab rewrites that code; its version is used") == 1 and "// the last stage" in text
    made, _ = _graded(lab6_src)
    assert made.previous.yours and "my_mbar_arrive(&empty[(nk - 1) % STAGES]);  // the last stage" not in made.kernel


# ------------------------------------------------------------------------------------------- (c) stub or missing
@pytest.mark.parametrize("case", ["stub", "missing"])
def test_a_stub_or_missing_lab5_the_course_stands_in_said_once(tmp_path, monkeypatch, capsys, lab6_src, case,
                                                               static_only):
    if case == "stub":
        _beside(tmp_path, monkeypatch, None, lab5_from=ROOT / "labs" / LAB5)
        why = "your Lab 5 kernel is not written yet (LAB5_SRC in lab5_epilogue.ipynb is still a stub); the " \
              "course's Lab 5 kernel stands in until it does"
    else:
        _beside(tmp_path, monkeypatch, None, lab5_notebook=False)
        why = "your Lab 5 kernel was not found (lab5_epilogue.ipynb is not beside this notebook); the course's Lab 5 " \
              "kernel stands in until it is"
    text = _opening(lab6_src)
    assert text.count(why) == 1 and text.count("stands in") == 1, text
    assert "--- the course's Lab 5 kernel (Lab 5)" in text
    made, _ = _graded(lab6_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab6_src)
    lab6.check_persistent_kernel(lab6_src, benchmark=False)
    out = capsys.readouterr().out
    assert out.count("✓ graded: the course's Lab 5 kernel + Lab 6's change + your Lab 6 regions (the course's Lab 5 "
                     "kernel stood in: ") == 1, out


def test_a_missing_lab4_under_a_lab5_that_passes(tmp_path, monkeypatch, lab5_src, lab6_src, static_only):
    """Lab 5's kernel is put together on the course's Lab 4 where the student's is not beside: it still passes, so
    Lab 6 builds on the student's Lab 5 regions."""
    _beside(tmp_path, monkeypatch, _edit(lab5_src, LAB5_EDITS))
    (tmp_path / LAB4).unlink()
    made, _ = _graded(lab6_src)
    assert made.previous.yours and "__nv_bfloat162 pair =" in made.kernel


def test_the_stub_of_lab6_fails_on_a_students_lab5(tmp_path, monkeypatch, lab5_src, static_only):
    from helpers.course import grading

    _beside(tmp_path, monkeypatch, lab5_src)
    stub = labgen.solution_namespace(ROOT / "labs" / "lab6_persistent.ipynb")["LAB6_SRC"]
    made, _ = _graded(stub)
    assert made.previous.yours and made.kernel.count('#error "not written yet:') == 6
    grading.assert_rejects(lambda s: lab6.check_persistent_kernel(s, benchmark=False), stub, "not written yet")


# ------------------------------------------------------------------------------------------- (d) a broken Lab 5
def test_a_lab5_that_fails_its_check_does_not_stand(tmp_path, monkeypatch, capsys, lab5_src, lab6_src, static_only):
    _beside(tmp_path, monkeypatch, _edit(lab5_src, NO_FENCE))
    text = _opening(lab6_src)
    assert text.count("⚠ your Lab 5 kernel does not pass Lab 5's check yet (Lab 5 · the TMA-store epilogue kernel") \
        == 1, text
    assert "the course's Lab 5 kernel stands in until it does" in text
    made, _ = _graded(lab6_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab6_src)
    assert "fence_proxy_async" not in made.previous.saved  # what they saved, kept for the message
    lab6.check_persistent_kernel(lab6_src, benchmark=False)
    out = capsys.readouterr().out
    assert "(the course's Lab 5 kernel stood in: Lab 5 · the TMA-store epilogue kernel" in out, out


# ------------------------------------------------------------------------------------------- nbgrader's layout
def test_nbgraders_one_folder_per_assignment(tmp_path, monkeypatch, lab4_kernel, lab5_src, lab6_src, static_only):
    here = _beside(tmp_path, monkeypatch, _edit(lab5_src, LAB5_EDITS), lab4=_edit(lab4_kernel, LAB4_EDITS),
                   nbgrader=True)
    assert here == tmp_path / "lab6_persistent" and (tmp_path / "lab5_epilogue" / LAB5).exists()
    made, source = _graded(lab6_src)
    assert made.previous.yours and "#error" not in source
    assert "= pair;" in made.kernel and "// my note: both consumers read the same B" in made.kernel


def test_the_verdict_is_remembered_for_the_same_saved_kernel(tmp_path, monkeypatch, lab5_src):
    _beside(tmp_path, monkeypatch, lab5_src)
    calls = []
    prev = lab6.previous("// wrappers\n")
    counting = carry.Previous(prev.lab, prev.notebook, prev.variable, prev.course, lambda k: calls.append(k),
                              "counting", prev.whole)
    for _ in range(3):
        assert carry.your_previous_kernel(counting, quiet=True).yours
    assert len(calls) == 1


# ------------------------------------------------------------------------------------------- on the H100
H100 = ROOT / "tests" / "data" / "lab6_carried_h100.json"


def test_the_notebooks_kernel_is_as_fast_as_the_courses_on_the_h100():
    """tools/h100/carried.py (Lab 6): the notebook's Lab 6 kernel (the student's wrappers and kslice_desc in the
    mainloop) passes the check on the H100 and runs as fast as bench/kernels/lab6_persistent.cu (the header's
    helpers): the two timed against each other, interleaved, within 5 % at the median."""
    if not H100.exists():
        pytest.skip("no H100 capture yet: run `bash tools/h100/run.sh lab6_carried` on an H100 and commit "
                    "$OUT/lab6_carried_h100.json as tests/data/lab6_carried_h100.json")
    data = json.loads(H100.read_text())
    assert "H100" in data["meta"]["gpu"] and data["check"] == "passed", data["check"]
    for size in ("4096", "8192"):
        row = data["sizes"][size]["interleaved"]
        assert row["notebook_vs_course"] >= 0.95 and row["rounds"] >= 9, (size, row)


def test_the_ladder_shows_your_kernel_beside_the_courses(monkeypatch):
    from types import SimpleNamespace

    from helpers.course.checks import lab5

    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    monkeypatch.setattr(lab6, "MEASURED", lab5.timed(lab6.KERNEL_NAME))
    rows = lab6.ladder_rows(4096)
    assert [r["step"] for r in rows][-1] == "Lab 6 · your kernel" and "not timed" in rows[-1]["where"]
    assert {"Lab 5 · the course's kernel", "Lab 6 · the course's kernel"} <= {r["step"] for r in rows}
    lab6.MEASURED[4096] = (SimpleNamespace(tflops=640.0, cublas_tflops=700.0), SimpleNamespace(tflops=650.0))
    rows = lab6.ladder_rows(4096)
    mine = next(r for r in rows if r["step"] == "Lab 6 · your kernel")
    assert mine["tflops"] == 640.0 and mine["where"] == "this notebook, just now"
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    lab6.show_ladder(4096)
    (out,) = shown
    assert "| Lab 6 · your kernel | 640 | 700 | 0.91 | this notebook, just now |" in out
    assert "| Lab 6 · the course's kernel, same run | 650 |" in out
