"""Lab 9 grades the student's own kernel: their saved Lab 7 kernel (lab7_clusters.ipynb beside the Lab 9 notebook, or
nbgrader's one folder per assignment), itself put together with their Labs 6, 5 and 4 as Lab 7 graded it, merged with
Lab 9's change and their Lab 9 regions, on their own wrappers of Labs 1 and 2. The course's Lab 7 kernel stands in,
and says so once, where theirs is missing, a stub, or fails Lab 7's check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from carrytools import edit as _edit
from carrytools import graded, opening_text, student_folder

from helpers.course import carry, labgen
from helpers.course.checks import lab9

ROOT = Path(__file__).resolve().parents[2]
LAB4, LAB5, LAB6, LAB7 = ("lab4_pipeline.ipynb", "lab5_epilogue.ipynb", "lab6_persistent.ipynb",
                          "lab7_clusters.ipynb")

#: a student's harmless personal edits in their Lab 7 regions, which Lab 9 leaves alone: the count of empty[s]
#: written the other way round, the stage's bytes spelled out, and a comment of their own after the last release
LAB7_EDITS = [("my_mbar_init(&empty[s], CONSUMERS * CLUSTER);", "my_mbar_init(&empty[s], CLUSTER * CONSUMERS);"),
              ("my_mbar_expect_tx(&full[s], STAGE_BYTES);", "my_mbar_expect_tx(&full[s], A_BYTES + 2 * B_HALF);"),
              ("hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);  // the tile's last stage\n",
               "hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);  // the tile's last stage\n"
               "      // my note: both CTAs hear of it\n")]

#: and theirs of Labs 6 and 5, which Lab 7 kept and Lab 9 keeps too: a renamed local in tile_coords, a renamed one in
#: stage_subtile
LAB6_EDITS = [("  const int per_group = LAB6_GROUP * tiles_n;\n", "  const int group_tiles = LAB6_GROUP * tiles_n;\n"),
              ("  const int first = (tile / per_group) * LAB6_GROUP;",
               "  const int first = (tile / group_tiles) * LAB6_GROUP;"),
              ("  const int in_group = tile % per_group;", "  const int in_group = tile % group_tiles;")]
LAB5_EDITS = [("    __nv_bfloat162 v = __floats2bfloat162_rn(d[j], d[j + 1]);",
               "    __nv_bfloat162 pair = __floats2bfloat162_rn(d[j], d[j + 1]);"),
              ("chunk * 16 + 4 * (l % 4)) = v;", "chunk * 16 + 4 * (l % 4)) = pair;")]

#: a Lab 7 kernel that fails Lab 7's check: empty[s] counts this CTA's consumers only
ONE_CTA_COUNT = [("my_mbar_init(&empty[s], CONSUMERS * CLUSTER);", "my_mbar_init(&empty[s], CONSUMERS);")]


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    out = {}
    for name, var in ((LAB5, "LAB5_SRC"), (LAB6, "LAB6_SRC"), (LAB7, "LAB7_SRC"), ("lab9_streamk.ipynb", "LAB9_SRC")):
        out[var] = labgen.solution_namespace(ROOT / "solutions" / name)[var]
    return out


@pytest.fixture()
def static_only(monkeypatch):
    """Lab 9's check from the compile report and the PTX only (the earlier labs' quick checks still run on the
    executor)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def _beside(tmp_path: Path, monkeypatch, lab7: str | None, *, lab6: str | None = None, lab5: str | None = None,
            lab7_notebook: bool = True, lab7_from: Path = ROOT / "solutions" / LAB7, nbgrader: bool = False) -> Path:
    """The student's folder: the solutions of Labs 1, 2 and 4, their Lab 5 and Lab 6 notebooks (their kernels
    ``lab5``, ``lab6`` if given) and their Lab 7 notebook with ``lab7``; the working directory is where the Lab 9
    notebook runs."""
    return student_folder(tmp_path, monkeypatch, 9, {5: lab5, 6: lab6, 7: lab7},
                          absent=(() if lab7_notebook else (7,)) + ((8,)), sources={7: lab7_from},
                          nbgrader=nbgrader)


def _opening(src: str) -> str:
    return opening_text(lab9, src)


def _graded(src: str) -> tuple[carry.Carried, str]:
    return graded(lab9, src)


# ------------------------------------------------------------------------------------------- (a) the solution
def test_the_solution_beside_builds_on_it_and_passes(tmp_path, monkeypatch, capsys, sources):
    _beside(tmp_path, monkeypatch, sources["LAB7_SRC"])
    text = _opening(sources["LAB9_SRC"])
    assert text.startswith("What Lab 9 changes in your Lab 7 kernel\n")
    assert "✓ your Lab 7 kernel (LAB7_SRC from lab7_clusters.ipynb) passes Lab 7's check" in text
    assert "the course's Lab 7 kernel on the H100 (same run as cuBLAS, " in text and "223 TFLOP/s at 1024×1024×16384" \
        in text
    assert "--- your Lab 7 kernel (Lab 7)" in text and "+++ Lab 9: the kernel graded (your Lab 7 kernel" in text
    assert "-lab7_gemm(" in text and "+lab9_gemm(" in text and "+    for (int w = 0; w < W.items(); ++w) {" in text
    made, source = _graded(sources["LAB9_SRC"])
    assert made.previous.yours and not made.merge.conflicts
    assert made.kernel == carry.code_lines(sources["LAB9_SRC"])  # the course's Lab 7 merged with the cell: the cell
    assert "__device__ __forceinline__ void my_mbar_init(" in source  # the student's wrappers, not hopper:: copies
    lab9.check_streamk_kernel(sources["LAB9_SRC"], benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 7 kernel + Lab 9's change + your Lab 9 regions)" in out
    assert "✓ Lab 9 · the Stream-K kernel: all" in out


# ------------------------------------------------------------------------------------------- (b) personal edits
def test_personal_edits_of_labs_5_6_and_7_are_in_the_graded_kernel_and_it_passes(tmp_path, monkeypatch, capsys,
                                                                                sources):
    _beside(tmp_path, monkeypatch, _edit(sources["LAB7_SRC"], LAB7_EDITS), lab6=_edit(sources["LAB6_SRC"], LAB6_EDITS),
            lab5=_edit(sources["LAB5_SRC"], LAB5_EDITS))
    text = _opening(sources["LAB9_SRC"])
    assert "✓ your Lab 7 kernel" in text and "⚠" not in text
    made, _ = _graded(sources["LAB9_SRC"])
    assert made.previous.yours and not made.merge.conflicts
    for mine in ("my_mbar_init(&empty[s], CLUSTER * CONSUMERS);", "my_mbar_expect_tx(&full[s], A_BYTES + 2 * B_HALF);",
                 "// my note: both CTAs hear of it", "const int in_group = tile % group_tiles;",
                 "__nv_bfloat162 pair = __floats2bfloat162_rn("):
        assert made.kernel.count(mine) == 1, mine
    assert "hopper::flag_store_release(flag, order + 1);" in made.kernel  # and this lab's change
    assert "my note" not in "\n".join(ln for ln in text.splitlines() if ln[:1] in "+-")
    lab9.check_streamk_kernel(sources["LAB9_SRC"], benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 7 kernel" in out
    assert "✓ Lab 9 · the Stream-K kernel: all" in out


def test_an_edit_this_lab_rewrites_is_named(tmp_path, monkeypatch, sources, static_only):
    mine = "        if (k > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);\n"
    _beside(tmp_path, monkeypatch, _edit(sources["LAB7_SRC"], [(mine, mine[:-1] + "  // hand back the last one\n")]))
    text = _opening(sources["LAB9_SRC"])
    assert text.count("this lab rewrites that code; its version is used") == 1 and "hand back the last one" in text
    made, _ = _graded(sources["LAB9_SRC"])
    assert made.previous.yours and "hand back the last one" not in made.kernel
    assert "if (k > ka && t < CLUSTER)" in made.kernel


# ------------------------------------------------------------------------------------------- (c) stub or missing
@pytest.mark.parametrize("case", ["stub", "missing"])
def test_a_stub_or_missing_lab7_the_course_stands_in_said_once(tmp_path, monkeypatch, capsys, sources, case,
                                                               static_only):
    if case == "stub":
        _beside(tmp_path, monkeypatch, None, lab7_from=ROOT / "labs" / LAB7)
        why = "your Lab 7 kernel is not written yet (LAB7_SRC in lab7_clusters.ipynb is still a stub); the " \
              "course's Lab 7 kernel stands in until it does"
    else:
        _beside(tmp_path, monkeypatch, None, lab7_notebook=False)
        why = "your Lab 7 kernel was not found (lab7_clusters.ipynb is not beside this notebook); the course's " \
              "Lab 7 kernel stands in until it is"
    text = _opening(sources["LAB9_SRC"])
    assert text.count(why) == 1 and text.count("stands in") == 1, text
    assert "--- the course's Lab 7 kernel (Lab 7)" in text
    made, _ = _graded(sources["LAB9_SRC"])
    assert not made.previous.yours and made.kernel == carry.code_lines(sources["LAB9_SRC"])
    lab9.check_streamk_kernel(sources["LAB9_SRC"], benchmark=False)
    out = capsys.readouterr().out
    assert out.count("✓ graded: the course's Lab 7 kernel + Lab 9's change + your Lab 9 regions (the course's Lab 7 "
                     "kernel stood in: ") == 1, out


def test_the_stub_of_lab9_fails_on_a_students_lab7(tmp_path, monkeypatch, sources, static_only):
    from helpers.course import grading

    _beside(tmp_path, monkeypatch, sources["LAB7_SRC"])
    stub = labgen.solution_namespace(ROOT / "labs" / "lab9_streamk.ipynb")["LAB9_SRC"]
    made, _ = _graded(stub)
    assert made.previous.yours and made.kernel.count('#error "not written yet:') == 5
    grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False), stub, "not written yet")


# ------------------------------------------------------------------------------------------- (d) a broken Lab 7
def test_a_lab7_that_fails_its_check_does_not_stand(tmp_path, monkeypatch, capsys, sources, static_only):
    _beside(tmp_path, monkeypatch, _edit(sources["LAB7_SRC"], ONE_CTA_COUNT))
    text = _opening(sources["LAB9_SRC"])
    assert text.count("⚠ your Lab 7 kernel does not pass Lab 7's check yet (Lab 7 · the clustered, multicasting "
                      "kernel") == 1, text
    assert "the course's Lab 7 kernel stands in until it does" in text
    made, _ = _graded(sources["LAB9_SRC"])
    assert not made.previous.yours and made.kernel == carry.code_lines(sources["LAB9_SRC"])
    assert "my_mbar_init(&empty[s], CONSUMERS);" in made.previous.saved  # what they saved, kept for the message
    lab9.check_streamk_kernel(sources["LAB9_SRC"], benchmark=False)
    out = capsys.readouterr().out
    assert "(the course's Lab 7 kernel stood in: Lab 7 · the clustered, multicasting kernel" in out, out


# ------------------------------------------------------------------------------------------- nbgrader's layout
def test_nbgraders_one_folder_per_assignment(tmp_path, monkeypatch, sources, static_only):
    here = _beside(tmp_path, monkeypatch, _edit(sources["LAB7_SRC"], LAB7_EDITS),
                   lab6=_edit(sources["LAB6_SRC"], LAB6_EDITS), lab5=_edit(sources["LAB5_SRC"], LAB5_EDITS),
                   nbgrader=True)
    assert here == tmp_path / "lab9_streamk" and (tmp_path / "lab7_clusters" / LAB7).exists()
    made, source = _graded(sources["LAB9_SRC"])
    assert made.previous.yours and "#error" not in source
    assert "group_tiles" in made.kernel and "= pair;" in made.kernel and "CLUSTER * CONSUMERS" in made.kernel


# ------------------------------------------------------------------------------------------- on the H100
H100 = ROOT / "tests" / "data" / "lab9_carried_h100.json"


def test_the_notebooks_kernel_is_as_fast_as_the_courses_on_the_h100():
    """tools/h100/carried.py (Lab 9): the notebook's Lab 9 kernel (the course's Lab 7 cell: the student's wrappers and
    kslice_desc in the mainloop) passes the check on the H100 and runs as fast as bench/kernels/lab9_streamk.cu (the
    header's helpers): the two timed against each other, interleaved, within 5 % at the median, on both quantized
    shapes."""
    if not H100.exists():
        pytest.skip("no H100 capture yet: run `bash tools/h100/run.sh lab9_carried` on an H100 and commit "
                    "$OUT/lab9_carried_h100.json as tests/data/lab9_carried_h100.json")
    data = json.loads(H100.read_text())
    assert "H100" in data["meta"]["gpu"] and data["check"] == "passed", data["check"]
    for m, n, k in lab9.QUANTIZED:
        row = data["shapes"][f"{m}x{n}x{k}"]["interleaved"]
        assert row["notebook_vs_course"] >= 0.95 and row["rounds"] >= 9, ((m, n, k), row)


def test_the_ladder_shows_your_kernel_beside_the_courses(monkeypatch):
    from types import SimpleNamespace

    from helpers.course.checks import lab5

    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    shape = lab9.QUANTIZED[0]
    rows = lab9.ladder_rows(shape)
    assert [r["step"] for r in rows][-1] == "Lab 9 · your kernel" and "not timed" in rows[-1]["where"]
    assert {"Lab 7 · the course's kernel (data-parallel)", "Lab 9 · the course's kernel"} <= {r["step"] for r in rows}
    lab5.timed(lab9.KERNEL_NAME)[shape] = (SimpleNamespace(tflops=400.0, cublas_tflops=640.0),
                                           SimpleNamespace(tflops=420.0))
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    lab9.show_ladder(shape)
    (out,) = shown
    assert "| Lab 9 · your kernel | 400 | 640 | 0.62 | this notebook, just now |" in out
    assert "| Lab 9 · the course's kernel, same run | 420 |" in out
