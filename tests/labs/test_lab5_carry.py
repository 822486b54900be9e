"""Lab 5 grades the student's own kernel: their saved Lab 4 kernel (lab4_pipeline.ipynb beside the Lab 5 notebook, or
nbgrader's one folder per assignment) merged with Lab 5's change and their Lab 5 regions, on their own wrappers of
Labs 1 and 2. The course's Lab 4 kernel stands in, and says so once, where theirs is missing, a stub, or fails Lab 4's
check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from carrytools import edit as _edit
from carrytools import graded, opening_text, save, student_folder

from helpers.course import carry, labgen
from helpers.course.checks import lab5

ROOT = Path(__file__).resolve().parents[2]
LAB4 = "lab4_pipeline.ipynb"

#: a student's harmless personal edits of their Lab 4 kernel: a renamed local variable inside a region they wrote,
#: and a comment of their own
RENAME = [("      const unsigned char* a = smem + s * STAGE_BYTES + c * 64 * 128;",
           "      const unsigned char* my_rows = smem + s * STAGE_BYTES + c * 64 * 128;"),
          ("kslice_desc(a, kk), kslice_desc(b, kk)", "kslice_desc(my_rows, kk), kslice_desc(b, kk)"),
          ("        const int s = j % STAGES;\n",
           "        const int s = j % STAGES;\n        // my note: stage s again after STAGES uses\n")]

#: a race: the stage released before the wgmma that reads it has retired
RACE = [("      hopper::wgmma_wait<1>();  // step k - 1's group has retired; step k's may still run\n",
         "      my_mbar_arrive(&empty[s]);\n      hopper::wgmma_wait<1>();\n")]

#: a harmless edit of the student's step 7 producer (a region step 8 carries): the two copies in the other order
PRODUCER = [("        my_tma_load_2d(smem + s * STAGE_BYTES, &tmap_a, &full[s], j * BK, m0);\n"
             "        my_tma_load_2d(smem + s * STAGE_BYTES + A_BYTES, &tmap_b, &full[s], j * BK, n0);\n",
             "        my_tma_load_2d(smem + s * STAGE_BYTES + A_BYTES, &tmap_b, &full[s], j * BK, n0);  // B first\n"
             "        my_tma_load_2d(smem + s * STAGE_BYTES, &tmap_a, &full[s], j * BK, m0);\n")]


@pytest.fixture(scope="module")
def lab4_kernel() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB4)["LAB4_KERNEL"]


@pytest.fixture(scope="module")
def pc_kernel() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / LAB4)["PC_KERNEL"]


@pytest.fixture(scope="module")
def lab5_src() -> str:
    return labgen.solution_namespace(ROOT / "solutions" / "lab5_epilogue.ipynb")["LAB5_SRC"]


@pytest.fixture()
def static_only(monkeypatch):
    """Lab 5's check from the compile report and the PTX only (Lab 4's quick check still runs on the executor)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def _beside(tmp_path: Path, monkeypatch, kernel: str | None, *, lab4: bool = True, nbgrader: bool = False,
            pc: str | None = None) -> Path:
    """The student's folder: the solutions of Labs 1 and 2 (the wrappers), and their Lab 4 notebook with ``kernel``
    (and ``pc``, step 7's kernel, where given); the working directory is where the Lab 5 notebook runs."""
    return student_folder(tmp_path, monkeypatch, 5, {4: kernel}, absent=() if lab4 else (4,), nbgrader=nbgrader,
                          extra={4: {"PC_KERNEL": pc}})


def _opening(src: str) -> str:
    return opening_text(lab5, src)


def _graded(src: str) -> tuple[carry.Carried, str]:
    return graded(lab5, src)


# ------------------------------------------------------------------------------------------- (a) the solution
def test_the_solution_beside_builds_on_it_and_passes(tmp_path, monkeypatch, capsys, lab4_kernel, lab5_src):
    _beside(tmp_path, monkeypatch, lab4_kernel)
    text = _opening(lab5_src)
    assert "✓ your Lab 4 kernel (LAB4_KERNEL from lab4_pipeline.ipynb) passes Lab 4's check" in text
    assert "--- your Lab 4 kernel (Lab 4)" in text and "+++ Lab 5: the kernel graded (your Lab 4 kernel" in text
    assert "+#include <cuda_bf16.h>" in text and "-      if (row < M && col < N)" in text
    made, source = _graded(lab5_src)
    assert made.previous.yours and not made.merge.conflicts
    assert made.kernel == carry.code_lines(lab5_src)  # the course's Lab 4 merged with the cell: the cell
    assert "__device__ __forceinline__ void my_mbar_init(" in source  # the student's wrappers, not hopper:: copies
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 4 mainloop + Lab 5's change + your Lab 5 regions)" in out
    assert "✓ Lab 5 · the TMA-store epilogue kernel: all" in out


# ------------------------------------------------------------------------------------------- (b) personal edits
def test_personal_edits_are_in_the_graded_kernel_and_it_passes(tmp_path, monkeypatch, capsys, lab4_kernel, lab5_src):
    _beside(tmp_path, monkeypatch, _edit(lab4_kernel, RENAME))
    text = _opening(lab5_src)
    assert "✓ your Lab 4 kernel" in text and "⚠" not in text
    made, source = _graded(lab5_src)
    assert made.previous.yours and not made.merge.conflicts
    assert "const unsigned char* my_rows = smem + s * STAGE_BYTES + c * 64 * 128;" in made.kernel
    assert "kslice_desc(my_rows, kk)" in made.kernel and "// my note: stage s again after STAGES uses" in made.kernel
    assert "tma_store_2d(&tmap_c" in made.kernel  # and this lab's change
    # the edits are the student's own lines, so the diff from their kernel does not show them as changes
    assert "+      const unsigned char* my_rows" not in text and "-      const unsigned char* my_rows" not in text
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    out = capsys.readouterr().out
    assert "✓ graded: your kernel (your Lab 4 mainloop" in out and "✓ Lab 5 · the TMA-store epilogue kernel: all" in out


def _rename(kernel: str, old: str, new: str) -> str:
    """The kernel with the name ``old`` renamed ``new`` in its code (not in its comments)."""
    out = []
    for line in kernel.split("\n"):
        code, sep, comment = line.partition("//")
        out.append(re.sub(rf"\b{old}\b", new, code) + sep + comment)
    return "\n".join(out)


def test_a_consumer_index_renamed_in_lab4_is_carried_into_lab5s_lines(tmp_path, monkeypatch, capsys, lab4_kernel,
                                                                       pc_kernel, lab5_src, static_only):
    """The student's correct Lab 4 kernel calls the consumer index cons, not c; Lab 5's new lines name c: the graded
    kernel uses cons there too, compiles and passes, and the opening says what was carried."""
    _beside(tmp_path, monkeypatch, _rename(lab4_kernel, "c", "cons"), pc=_rename(pc_kernel, "c", "cons"))
    text = _opening(lab5_src)
    assert "✓ your Lab 4 kernel" in text, text
    made, _ = _graded(lab5_src)
    assert made.previous.yours and ("c", "cons") in made.merge.renamed
    assert not re.search(r"\bc\b", "\n".join(ln.split("//")[0] for ln in made.kernel.split("\n")))
    assert "you renamed c to cons in your kernel" in text
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    assert "✓ Lab 5 · the TMA-store epilogue kernel: all" in capsys.readouterr().out


def test_an_edit_outside_the_regions_is_named_in_the_opening(tmp_path, monkeypatch, lab4_kernel, lab5_src,
                                                             static_only):
    """A line of the course's code the student changed in their Lab 4 kernel (outside every region): the opening says
    which line, what it holds, and that it is kept; edits inside the regions are not named."""
    mine = _edit(lab4_kernel, [("desc |= (unsigned long long)(1024 >> 4) << 32;", "desc |= 64ull << 32;  // SBO")])
    _beside(tmp_path, monkeypatch, mine)
    text = _opening(lab5_src)
    assert "✓ your Lab 4 kernel" in text, text
    hits = [ln for ln in text.split("\n") if "outside the regions" in ln]
    assert len(hits) == 1 and "(desc |= 64ull << 32;  // SBO) changes the course's code outside the regions: kept as " \
        "you wrote it" in hits[0], text


def test_an_edit_of_the_step7_producer_reaches_the_graded_kernel(tmp_path, monkeypatch, capsys, lab4_kernel,
                                                                 pc_kernel, lab5_src):
    """Step 8 carries the student's step 7 producer: their edit there is in their Lab 4 kernel, so in Lab 5's."""
    _beside(tmp_path, monkeypatch, lab4_kernel, pc=_edit(pc_kernel, PRODUCER))
    text = _opening(lab5_src)
    assert "✓ your Lab 4 kernel" in text and "⚠" not in text
    made, _ = _graded(lab5_src)
    assert made.previous.yours and not made.merge.conflicts
    assert "&full[s], j * BK, n0);  // B first" in made.kernel and "tma_store_2d(&tmap_c" in made.kernel
    assert made.kernel.index("// B first") < made.kernel.index("&tmap_a, &full[s], j * BK, m0);")
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    assert "✓ Lab 5 · the TMA-store epilogue kernel: all" in capsys.readouterr().out


def test_a_step7_stub_the_course_stands_in_said_why(tmp_path, monkeypatch, lab4_kernel, lab5_src, static_only):
    stub = labgen._assigned_string(next("".join(c["source"]) for c in json.loads((ROOT / "labs" / LAB4).read_text())
                                        ["cells"] if "".join(c["source"]).startswith("PC_KERNEL = r")), "PC_KERNEL", "")
    _beside(tmp_path, monkeypatch, lab4_kernel, pc=stub)
    text = _opening(lab5_src)
    assert text.count("⚠ your Lab 4 kernel could not be read (Lab 4's kernel could not be put together: your barrier "
                      "initialisation is not written yet in your step 7 kernel: step 7 must pass its check first)")\
        == 1, text
    made, _ = _graded(lab5_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab5_src)


def test_an_edit_this_lab_rewrites_is_named(tmp_path, monkeypatch, lab4_kernel, lab5_src, static_only):
    mine = ("      if (row < M && col < N) *reinterpret_cast<float2*>(&C[(long long)row * N + col]) = "
            "make_float2(d[j], d[j + 1]);")
    _beside(tmp_path, monkeypatch, _edit(lab4_kernel, [(mine, mine + "  // two floats at once")]))
    text = _opening(lab5_src)
    assert text.count("this lab rewrites that code; its version is used") == 1 and "two floats at once" in text
    made, _ = _graded(lab5_src)
    assert "two floats at once" not in made.kernel


# ------------------------------------------------------------------------------------------- (c) stub or missing
@pytest.mark.parametrize("case", ["stub", "missing"])
def test_a_stub_or_missing_lab4_the_course_stands_in_said_once(tmp_path, monkeypatch, capsys, lab5_src, case,
                                                               static_only):
    if case == "stub":
        _beside(tmp_path, monkeypatch, None, lab4=False)
        save(tmp_path / LAB4, {}, ROOT / "labs" / LAB4)
        why = "your Lab 4 kernel is not written yet (LAB4_KERNEL in lab4_pipeline.ipynb is still a stub); the " \
              "course's Lab 4 kernel stands in until it does"
    else:
        _beside(tmp_path, monkeypatch, None, lab4=False)
        why = "your Lab 4 kernel was not found (lab4_pipeline.ipynb is not beside this notebook); the course's Lab 4 " \
              "kernel stands in until it is"
    text = _opening(lab5_src)
    assert text.count(why) == 1 and text.count("stands in") == 1, text
    assert "--- the course's Lab 4 kernel (Lab 4)" in text
    made, _ = _graded(lab5_src)
    assert not made.previous.yours and made.kernel == carry.code_lines(lab5_src)
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    out = capsys.readouterr().out
    assert out.count("✓ graded: the course's Lab 4 kernel + Lab 5's change + your Lab 5 regions (the course's Lab 4 "
                     "kernel stood in: ") == 1, out


# ------------------------------------------------------------------------------------------- (d) a race
def test_a_lab4_with_a_race_does_not_stand(tmp_path, monkeypatch, capsys, lab4_kernel, lab5_src, static_only):
    _beside(tmp_path, monkeypatch, _edit(lab4_kernel, RACE))
    text = _opening(lab5_src)
    assert text.count("⚠ your Lab 4 kernel does not pass Lab 4's check yet (Lab 4 · 128×256") == 1, text
    assert "the course's Lab 4 kernel stands in until it does" in text
    made, _ = _graded(lab5_src)
    assert not made.previous.yours and "my_mbar_arrive(&empty[s]);" not in made.kernel
    assert "my_mbar_arrive(&empty[s]);" in made.previous.saved  # what they saved, kept for the message
    lab5.check_epilogue_kernel(lab5_src, benchmark=False)
    out = capsys.readouterr().out
    # the run on the executor rejects it first (every consumer thread arrives on EMPTY at once: a warp's 32 lanes on
    # a phase that awaits 2 stop the kernel, as on the H100); Lab 4's message goes on with what the PTX shows (a
    # stage released while its wgmma group may still run)
    assert "(the course's Lab 4 kernel stood in: Lab 4 · 128×256 · m64n256k16 + setmaxnreg kernel:" in out, out
    assert "with 32 lanes in one mbarrier.arrive" in out, out


# ------------------------------------------------------------------------------------------- nbgrader's layout
def test_nbgraders_one_folder_per_assignment(tmp_path, monkeypatch, lab4_kernel, lab5_src, static_only):
    here = _beside(tmp_path, monkeypatch, _edit(lab4_kernel, RENAME), nbgrader=True)
    assert here == tmp_path / "lab5_epilogue" and (tmp_path / "lab4_pipeline" / LAB4).exists()
    made, source = _graded(lab5_src)
    assert made.previous.yours and "my_rows" in made.kernel and "#error" not in source


def test_the_verdict_is_remembered_for_the_same_saved_kernel(tmp_path, monkeypatch, lab4_kernel, lab5_src):
    _beside(tmp_path, monkeypatch, lab4_kernel)
    calls = []
    prev = lab5.previous("// wrappers\n")
    counting = carry.Previous(prev.lab, prev.notebook, prev.variable, prev.course,
                              lambda k: calls.append(k), "counting")
    for _ in range(3):
        assert carry.your_previous_kernel(counting, quiet=True).yours
    assert len(calls) == 1


# ------------------------------------------------------------------------------------------- on the H100
H100 = ROOT / "tests" / "data" / "lab5_carried_h100.json"


def test_the_notebooks_kernel_is_as_fast_as_the_courses_on_the_h100():
    """tools/h100/carried.py (Lab 5): the notebook's Lab 5 kernel (the student's wrappers in the mainloop) passes the
    check on the H100 and runs as fast as bench/kernels/lab5_epilogue.cu (the header's helpers): the two timed
    against each other, interleaved, within 5 % at the median."""
    if not H100.exists():
        pytest.skip("no H100 capture yet: run `bash tools/h100/run.sh lab5_carried` on an H100 and commit "
                    "$OUT/lab5_carried_h100.json as tests/data/lab5_carried_h100.json")
    data = json.loads(H100.read_text())
    assert "H100" in data["meta"]["gpu"] and data["check"] == "passed", data["check"]
    for size in ("4096", "8192"):
        row = data["sizes"][size]["interleaved"]
        assert row["notebook_vs_course"] >= 0.95 and row["rounds"] >= 9, (size, row)


def test_the_ladder_shows_your_kernel_beside_the_courses(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr("helpers.course.checks._ladder.TIMED", {})
    monkeypatch.setattr(lab5, "MEASURED", lab5.timed(lab5.KERNEL_NAME))
    rows = lab5.ladder_rows(4096)
    assert [r["step"] for r in rows][-1] == "Lab 5 · your kernel" and "not timed" in rows[-1]["where"]
    assert {"Lab 4 · the course's kernel", "Lab 5 · the course's kernel"} <= {r["step"] for r in rows}
    lab5.MEASURED[4096] = (SimpleNamespace(tflops=600.0, cublas_tflops=650.0), SimpleNamespace(tflops=610.0))
    rows = lab5.ladder_rows(4096)
    mine = next(r for r in rows if r["step"] == "Lab 5 · your kernel")
    assert mine["tflops"] == 600.0 and mine["where"] == "this notebook, just now"
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda md: shown.append(md.data))
    lab5.show_ladder(4096)
    (out,) = shown
    assert "| Lab 5 · your kernel | 600 | 650 | 0.92 | this notebook, just now |" in out
    assert "| Lab 5 · the course's kernel, same run | 610 |" in out
