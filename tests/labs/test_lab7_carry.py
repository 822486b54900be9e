"""Lab 7 grades the student's own kernel: their saved Lab 6 kernel (lab6_persistent.ipynb beside the Lab 7 notebook,
or nbgrader's one folder per assignment), itself put together with their Labs 5 and 4 as Lab 6 graded it, merged with
Lab 7's change and their Lab 7 regions, on their own wrappers of Labs 1 and 2. The course's Lab 6 kernel stands in,
and says so once, where theirs is missing, a stub, or fails Lab 6's check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from carrytools import edit as _edit
from carrytools import graded, opening_text, student_folder

from helpers.course import carry, labgen
from helpers.course.checks import lab7

ROOT = Path(__file__).resolve().parents[2]
LAB4, LAB5, LAB6 = "lab4_pipeline.ipynb", "lab5_epilogue.ipynb", "lab6_persistent.ipynb"

#: a student's harmless personal edits in their Lab 6 regions: a renamed local in tile_coords (which Lab 7 calls on
#: pairs), and a comment of their own at the epilogue's wait
LAB6_EDITS = [("  const int per_group = LAB6_GROUP * tiles_n;\n", "  const int group_tiles = LAB6_GROUP * tiles_n;\n"),
              ("  const int first = (tile / per_group) * LAB6_GROUP;",
               "  const int first = (tile / group_tiles) * LAB6_GROUP;"),
              ("  const int in_group = tile % per_group;", "  const int in_group = tile % group_tiles;"),
              ("        if (t == 0) hopper::tma_store_wait_read<1>();\n",
               "        if (t == 0) hopper::tma_store_wait_read<1>();\n"
               "        // my note: both buffers may be in flight\n")]

#: and one in their Lab 5 region, which Lab 6 kept and Lab 7 keeps too
LAB5_EDITS = [("    __nv_bfloat162 v = __floats2bfloat162_rn(d[j], d[j + 1]);",
               "    __nv_bfloat162 pair = __floats2bfloat162_rn(d[j], d[j + 1]);"),
              ("chunk * 16 + 4 * (l % 4)) = v;", "chunk * 16 + 4 * (l % 4)) = pair;")]

#: a Lab 6 kernel that fails Lab 6's check: scale-d left at 1, so a block's second tile adds the first one's sums
SCALE_D = [("kslice_desc(b, kk), k > 0 || kk > 0);", "kslice_desc(b, kk), true);")]


@pytest.fixture(scope="module")
def lab5_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB5)["LAB5_SRC"]


@pytest.fixture(scope="module")
def lab6_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB6)["LAB6_SRC"]


@pytest.fixture(scope="module")
def lab7_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / "lab7_clusters.ipynb")["LAB7_SRC"]


@pytest.fixture()
def static_only(monkeypatch):
    """Lab 7's check from the compile report and the PTX only (the earlier labs' quick checks still run on the
    executor)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def _beside(tmp_path: Path, monkeypatch, lab6: str | None, *, lab5: str | None = None, lab6_notebook: bool = True,
            lab6_from: Path = ROOT / "solutions" / LAB6, nbgrader: bool = False) -> Path:
    """The student's folder: the solutions of Labs 1, 2 and 4, their Lab 5 notebook (its kernel ``lab5`` if given) and
    their Lab 6 notebook with ``lab6``; the working directory is where the Lab 7 notebook runs."""
    return student_folder(tmp_path, monkeypatch, 7, {5: lab5, 6: lab6}, absent=() if lab6_notebook else (6,),
                          sources={6: lab6_from}, nbgrader=nbgrader)


def _opening(src: str) -> str:
    return opening_text(lab7, src)


def _graded(src: str) -> tuple[carry.Carried, str]:
    return graded(lab7, src)


# ------------------------------------------------------------------------------------------- (a) the solution
def test_the_solution_beside_builds_on_it_and_passes(tmp_path, monkeypatch, capsys, lab6_src, lab7_src):
    _beside(tmp_path, monkeypatch, lab6_src)
    text = _opening(lab7_src)
    assert "✓ your Lab 6 kernel (LAB6_SRC from lab6_persistent.ipynb) passes Lab 6's check" in text
    assert "--- your Lab 6 kernel (Lab 6)" in text and "+++ Lab 7: the kernel graded (your Lab 6 kernel" in text
    assert "-lab6_gemm(" in text and "+lab7_gemm(" in text
    made, source = _graded(lab7_src)
    assert made.previous.yours and not made.merge.conflicts
    assert made.kernel == carry.code_lines(lab7_src)  # the course's Lab 6 merged with the cell: the cell
    assert "__device__ __forceinline__ void my_mbar_init(" in source  # the student's wrappers, not hopper:: copies
    lab7.check_cluster_kernel(lab7_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 6 kernel + Lab 7's change + your Lab 7 regions)" in out
    assert "✓ Lab 7 · the clustered, multicasting kernel: all" in out


# ------------------------------------------------------------------------------------------- (b) personal edits
def test_personal_edits_of_labs_5_and_6_are_in_the_graded_kernel_and_it_passes(tmp_path, monkeypatch, capsys,
                                                                              lab5_src, lab6_src, lab7_src):
    _beside(tmp_path, monkeypatch, _edit(lab6_src, LAB6_EDITS), lab5=_edit(lab5_src, LAB5_EDITS))
    text = _opening(lab7_src)
    assert "✓ your Lab 6 kernel" in text and "⚠" not in text
    made, _ = _graded(lab7_src)
    assert made.previous.yours and not made.merge.conflicts
    for mine in ("const int group_tiles = LAB6_GROUP * tiles_n;", "const int in_group = tile % group_tiles;",
                 "// my note: both buffers may be in flight", "__nv_bfloat162 pair = __floats2bfloat162_rn("):
        assert made.kernel.count(mine) == 1, mine
    assert "tma_load_2d_multicast(" in made.kernel  # and this lab's change
    assert "my note" not in "\n".join(ln for ln in text.splitlines() if ln[:1] in "+-")
    lab7.check_cluster_kernel(lab7_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 6 kernel" in out
    assert "✓ Lab 7 · the clustered, multicasting kernel: all" in out


def test_an_edit_this_lab_rewrites_is_named(tmp_path, monkeypatch, lab6_src, lab7_src, static_only):
    mine = "  __syncthreads();\n"
    _beside(tmp_path, monkeypatch, _edit(lab6_src, [(mine, "  __syncthreads();  // the barriers are ready\n")]))
    text = _opening(lab7_src)
    assert text.count("this lab rewrites that code; its version is used") == 1 and "the barriers are ready" in text
    made, _ = _graded(lab7_src)
    assert made.previous.yours and "the barriers are ready" not in made.kernel


# ------------------------------------------------------------------------------------------- (c) stub or missing
@pytest.mark.parametrize("case", ["stub", "missing"])
def test_a_stub_or_missing_lab6_the_course_stands_in_said_once(tmp_path, monkeypatch, capsys, lab7_src, case,
                                                               static_only):
    if case == "stub":
        _beside(tmp_path, monkeypatch, None, lab6_from=ROOT / "labs" / LAB6)
        why = "your Lab 6 kernel is not written yet (LAB6_SRC in lab6_persistent.ipynb is still a stub); the " \
              "course's Lab 6 kernel stands in until it does"
    else:
        _beside(tmp_path, monkeypatch, None, lab6_notebook=False)
        why = "your Lab 6 kernel was not found (lab6_persistent.ipynb is not beside this notebook); the course's " \
              "Lab 6 kernel stands in until it is"
    text = _opening(lab7_src)
    assert text.count(why) == 1 and text.count("stands in") == 1, text
    assert "--- the course's Lab 6 kernel (Lab 6)" in text
    made, _ = _graded(lab7_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab7_src)
    lab7.check_cluster_kernel(lab7_src, benchmark=False)
    out = capsys.readouterr().out
    assert out.count("✓ graded: the course's Lab 6 kernel + Lab 7's change + your Lab 7 regions (the course's Lab 6 "
                     "kernel stood in: ") == 1, out


def test_the_stub_of_lab7_fails_on_a_students_lab6(tmp_path, monkeypatch, lab6_src, static_only):
    from helpers.course import grading

    _beside(tmp_path, monkeypatch, lab6_src)
    stub = labgen.solution_namespace(ROOT / "labs" / "lab7_clusters.ipynb")["LAB7_SRC"]
    made, _ = _graded(stub)
    assert made.previous.yours and made.kernel.count('#error "not written yet:') == 7
    grading.assert_rejects(lambda s: lab7.check_cluster_kernel(s, benchmark=False), stub, "not written yet")


# ------------------------------------------------------------------------------------------- (d) a broken Lab 6
def test_a_lab6_that_fails_its_check_does_not_stand(tmp_path, monkeypatch, capsys, lab6_src, lab7_src, static_only):
    _beside(tmp_path, monkeypatch, _edit(lab6_src, SCALE_D))
    text = _opening(lab7_src)
    assert text.count("⚠ your Lab 6 kernel does not pass Lab 6's check yet (Lab 6 · the persistent kernel") == 1, text
    assert "the course's Lab 6 kernel stands in until it does" in text
    made, _ = _graded(lab7_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab7_src)
    assert "kslice_desc(b, kk), true);" in made.previous.saved  # what they saved, kept for the message
    lab7.check_cluster_kernel(lab7_src, benchmark=False)
    out = capsys.readouterr().out
    assert "(the course's Lab 6 kernel stood in: Lab 6 · the persistent kernel" in out, out


# ------------------------------------------------------------------------------------------- nbgrader's layout
def test_nbgraders_one_folder_per_assignment(tmp_path, monkeypatch, lab5_src, lab6_src, lab7_src, static_only):
    here = _beside(tmp_path, monkeypatch, _edit(lab6_src, LAB6_EDITS), lab5=_edit(lab5_src, LAB5_EDITS),
                   nbgrader=True)
    assert here == tmp_path / "lab7_clusters" and (tmp_path / "lab6_persistent" / LAB6).exists()
    made, source = _graded(lab7_src)
    assert made.previous.yours and "#error" not in source
    assert "group_tiles" in made.kernel and "= pair;" in made.kernel


# ------------------------------------------------------------------------------------------- on the H100
H100 = ROOT / "tests" / "data" / "lab7_carried_h100.json"


def test_the_notebooks_kernel_is_as_fast_as_the_courses_on_the_h100():
    """tools/h100/carried.py (Lab 7): the notebook's Lab 7 kernel (the student's wrappers and kslice_desc in the
    mainloop) passes the check on the H100 and runs as fast as bench/kernels/lab7_clusters.cu (the header's
    helpers): the two timed against each other, interleaved, within 5 % at the median."""
    if not H100.exists():
        pytest.skip("no H100 capture yet: run `bash tools/h100/run.sh lab7_carried` on an H100 and commit "
                    "$OUT/lab7_carried_h100.json as tests/data/lab7_carried_h100.json")
    data = json.loads(H100.read_text())
    assert "H100" in data["meta"]["gpu"] and data["check"] == "passed", data["check"]
    for size in ("4096", "8192"):
        row = data["sizes"][size]["interleaved"]
        assert row["notebook_vs_course"] >= 0.95 and row["rounds"] >= 9, (size, row)


def test_the_ladder_shows_your_kernel_beside_the_courses(monkeypatch):
    from types import SimpleNamespace

    from helpers.course.checks import lab5

    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    monkeypatch.setattr(lab7, "MEASURED", lab5.timed(lab7.KERNEL_NAME))
    rows = lab7.ladder_rows(4096)
    assert [r["step"] for r in rows][-1] == "Lab 7 · your kernel" and "not timed" in rows[-1]["where"]
    assert {"Lab 6 · the course's kernel", "Lab 7 · the course's kernel"} <= {r["step"] for r in rows}
    lab7.MEASURED[4096] = (SimpleNamespace(tflops=660.0, cublas_tflops=700.0), SimpleNamespace(tflops=665.0))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    lab7.show_ladder(4096)
    (out,) = shown
    assert "| Lab 7 · your kernel | 660 | 700 | 0.94 | this notebook, just now |" in out
    assert "| Lab 7 · the course's kernel, same run | 665 |" in out
