"""The three-way merge that carries a student's kernel into the next lab (helpers.course.carry), on hand-made
base / yours / lab triples: base is the course's previous kernel, yours the student's, lab this lab's cell."""

from __future__ import annotations

import pytest

from helpers.course import carry
from helpers.course.carry import code_lines, merge

BASE = """\
constexpr int STAGES = 4;
__global__ void k(float* C) {
  int x = 1;
  int y = 2;
  // the mainloop
  for (int i = 0; i < 8; ++i) x += i;
  // the store
  C[0] = x + y;
}
"""


def _lines(*edits: tuple[str, str], text: str = BASE) -> str:
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def test_nobody_changed_anything():
    m = merge(BASE, BASE, BASE)
    assert m.text == BASE and not m.conflicts and not m.kept


def test_the_course_with_the_course_is_the_lab_exactly():
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"), ("int STAGES = 4;", "int  STAGES = 4;   "))
    assert merge(BASE, BASE, lab).text == lab


def test_non_overlapping_edits_are_both_kept():
    yours = _lines(("  int x = 1;\n", "  int x = 1;  // mine\n"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    m = merge(BASE, yours, lab)
    assert "int x = 1;  // mine" in m.text and "store(C, x + y);" in m.text and "C[0]" not in m.text
    assert not m.conflicts and m.kept == ((3, 3),)


def test_overlapping_edits_the_lab_wins_and_the_lines_are_named():
    yours = _lines(("  C[0] = x + y;\n", "  C[0] = y + x;  // swapped\n"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    m = merge(BASE, yours, lab)
    assert m.text == lab
    (c,) = m.conflicts
    assert c.yours_lines == (8, 8) and c.yours == ("  C[0] = y + x;  // swapped",)
    assert c.lab == ("  store(C, x + y);",)
    assert m.report() == ["line 8 of your kernel (C[0] = y + x;  // swapped): this lab rewrites that code; its "
                          "version is used"]


def test_insertions_at_the_same_place_are_both_kept_the_students_first():
    yours = _lines(("  // the store\n", "  // the store\n  // mine: x is the sum\n"))
    lab = _lines(("  // the store\n", "  // the store\n  __syncthreads();\n"))
    m = merge(BASE, yours, lab)
    assert "  // mine: x is the sum\n  __syncthreads();\n" in m.text
    assert not m.conflicts and m.both == ((8, 8),)


def test_the_same_insertion_on_both_sides_appears_once():
    extra = ("  int y = 2;\n", "  int y = 2;\n  int z = 3;\n")
    m = merge(BASE, _lines(extra), _lines(extra))
    assert m.text.count("int z = 3;") == 1 and not m.conflicts


def test_a_renamed_variable_inside_a_region_is_kept_where_the_lab_leaves_it():
    yours = _lines(("  for (int i = 0; i < 8; ++i) x += i;\n", "  for (int step = 0; step < 8; ++step) x += step;\n"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    m = merge(BASE, yours, lab)
    assert "for (int step = 0; step < 8; ++step) x += step;" in m.text and "store(C, x + y);" in m.text
    assert not m.conflicts


def test_a_renamed_variable_the_lab_also_touches_is_reported():
    yours = _lines(("  int x = 1;\n", "  int acc = 1;\n"), ("x += i", "acc += i"), ("C[0] = x + y;", "C[0] = acc + y;"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    m = merge(BASE, yours, lab)
    assert "int acc = 1;" in m.text and "acc += i" in m.text and "store(C, x + y);" in m.text
    (c,) = m.conflicts
    assert c.yours == ("  C[0] = acc + y;",) and c.yours_lines == (8, 8)


def test_a_name_the_student_renamed_is_carried_into_the_labs_lines():
    """The student renamed x to acc everywhere; this lab's new line names x: the merged kernel uses acc there too
    (never an undefined x on a line the student did not write), and the report says so."""
    yours = _lines(("  int x = 1;\n", "  int acc = 1;\n"), ("x += i", "acc += i"), ("C[0] = x + y;", "C[0] = acc + y;"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    assert carry.renames(BASE, yours) == {"x": "acc"}
    m = carry.carry_names(BASE, yours, lab, merge(BASE, yours, lab))
    assert "store(C, acc + y);" in m.text and not carry.renames(BASE, m.text).get("acc")
    assert not any(w == "x" for w in __import__("re").findall(r"\w+", m.text.split("//")[0]))
    assert "you renamed x to acc in your kernel: this lab's lines that name x use your acc" in m.report()


def test_a_rename_the_lab_collides_with_is_said_plainly():
    """This lab's own new lines already use the student's new name: nothing is renamed, and the report says what to
    rename."""
    yours = _lines(("  int x = 1;\n", "  int acc = 1;\n"), ("x += i", "acc += i"), ("C[0] = x + y;", "C[0] = acc + y;"))
    lab = _lines(("  C[0] = x + y;\n", "  float acc = 0;\n  store(C, x + y + acc);\n"))
    m = carry.carry_names(BASE, yours, lab, merge(BASE, yours, lab))
    assert not m.renamed and "rename acc back to x in your kernel of the previous lab" in " ".join(m.report())


def test_a_partial_rename_is_not_a_rename():
    """x renamed on one line only (x is still used elsewhere): no rename to carry."""
    yours = _lines(("C[0] = x + y;", "C[0] = acc + y;"))
    assert carry.renames(BASE, yours) == {}


@pytest.mark.parametrize("ws", ["    int y = 2;\n", "  int y = 2;   \n", "  int  y  =  2;\n", "\tint y = 2;\n"])
def test_whitespace_only_differences_are_no_edit(ws):
    yours = _lines(("  int y = 2;\n", ws))
    # where the lab leaves the line alone, the student's spacing stays
    m = merge(BASE, yours, _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n")))
    assert ws in m.text and not m.conflicts and not m.kept
    # where the lab rewrites it, the lab's line is used and nothing is reported
    lab = _lines(("  int y = 2;\n", "  const int y = 2;\n"))
    m = merge(BASE, yours, lab)
    assert m.text == lab and not m.conflicts


def test_a_deleted_line_stays_deleted_unless_the_lab_rewrites_it():
    yours = _lines(("  // the mainloop\n", ""))
    assert "// the mainloop" not in merge(BASE, yours, _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))).text
    lab = _lines(("  // the mainloop\n", "  // the mainloop, K steps\n"))
    m = merge(BASE, yours, lab)
    assert "// the mainloop, K steps" in m.text
    (c,) = m.conflicts
    assert c.yours == () and "removed" in c.describe()


def test_edits_at_the_start_and_the_end():
    yours = "// my header\n" + BASE + "// my footer\n"
    lab = _lines(("constexpr int STAGES = 4;\n", "#include <cuda_bf16.h>\nconstexpr int STAGES = 4;\n"))
    m = merge(BASE, yours, lab)
    assert m.text.startswith("// my header\n#include <cuda_bf16.h>\n") and m.text.endswith("// my footer\n")


def test_deterministic_and_pure():
    yours = _lines(("  int x = 1;\n", "  int x = 10;\n"), ("  C[0] = x + y;\n", "  C[0] = x - y;\n"))
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"), ("  int y = 2;\n", "  int y = 3;\n"))
    args = (BASE, yours, lab)
    first = merge(*args)
    assert all(merge(*args) == first for _ in range(3)) and args == (BASE, yours, lab)


def test_code_lines_drops_markers_hints_and_the_placeholder():
    src = ("a;\n  // ### BEGIN SOLUTION\n  // HINT: do it\n  // HINT 1: more\n  b;\n  // ### END SOLUTION\n"
           "  // YOUR CODE HERE\nc;\n")
    assert code_lines(src) == "a;\n  b;\nc;\n"


# ------------------------------------------------------------------------------------------- the previous kernel
def _prev(check, course: str = BASE) -> carry.Previous:
    return carry.Previous("Lab 9", "lab9_x.ipynb", "LAB9_KERNEL", lambda: course, check)


def _save(where, text: str) -> None:
    import json

    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "LAB9_KERNEL = r'''" + text + "'''"}
    where.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def _fails(text: str) -> None:
    from helpers.course import grading

    raise grading.CheckFailed("✗ Lab 9 · the kernel: a stage is released too early\n    hint: wait first")


@pytest.mark.parametrize("case, check, words", [
    ("missing", None, "⚠ your Lab 9 kernel was not found (lab9_x.ipynb is not beside this notebook)"),
    ("stub", None, "⚠ your Lab 9 kernel is not written yet (LAB9_KERNEL in lab9_x.ipynb is still a stub)"),
    ("fails", _fails, "⚠ your Lab 9 kernel does not pass Lab 9's check yet (Lab 9 · the kernel: a stage is released "
                      "too early); the course's Lab 9 kernel stands in until it does"),
    ("raises", lambda t: 1 / 0, "could not be checked (Lab 9's check could not run it: ZeroDivisionError"),
    ("passes", lambda t: None, "✓ your Lab 9 kernel (LAB9_KERNEL from lab9_x.ipynb) passes Lab 9's check"),
])
def test_whose_previous_kernel(tmp_path, capsys, case, check, words):
    mine = _lines(("  int x = 1;\n", "  int x = 1;  // mine\n"))
    if case != "missing":
        _save(tmp_path / "lab9_x.ipynb", '#error "not written yet: x"\n' if case == "stub" else mine)
    got = carry.your_previous_kernel(_prev(check or (lambda t: None)), here=tmp_path)
    out = capsys.readouterr().out
    assert words in out and out.count("\n") == 1 and words in got.line
    assert got.yours == (case == "passes")
    assert got.text == (code_lines(mine) if case == "passes" else code_lines(BASE))


def test_carried_merges_on_the_course_kernel(tmp_path):
    mine = _lines(("  int x = 1;\n", "  int x = 1;  // mine\n"))
    _save(tmp_path / "lab9_x.ipynb", mine)
    lab = _lines(("  C[0] = x + y;\n", "  store(C, x + y);\n"))
    made = carry.carried(_prev(lambda t: None), lab, here=tmp_path, quiet=True)
    assert "int x = 1;  // mine" in made.kernel and "store(C, x + y);" in made.kernel
    assert made.whose("Lab 10", "mainloop") == ("your kernel (your Lab 9 mainloop + Lab 10's change + your Lab 10 "
                                                "regions)")


# ------------------------------------------------------------------------------------------- a step carried in a lab
STEP_A = """\
__global__ void a(float* C) {
  int x = 0;
  // ✎ set y
  for (int i = 0; i < 8; ++i) {
    // ✎ add to x
    // then: the release
    // ✎ release
  }
  C[0] = x + y;
}
"""
MINE_A = """\
__global__ void a(float* C) {
  int x = 0;
  int y = 7;  // mine
  for (int i = 0; i < 8; ++i) {
    x += i * y;
    x -= 1;
    // then: the release
    release(i);
  }
  C[0] = x + y;  // my store
}
"""
CELL_B = """\
__global__ void b(float* C, int n) {
  int x = 0;
  // carried: your y
  for (int i = 0; i < n; ++i) {
    x += 2 * i;  // step B's own region
    // then: the release
    // carried: your release
  }
  C[0] = x + y;
}
"""


def test_assemble_puts_the_students_regions_where_the_cell_carries_them():
    made = carry.assemble(STEP_A, MINE_A, CELL_B, step="step A")
    assert made.text == ("__global__ void b(float* C, int n) {\n  int x = 0;\n  int y = 7;  // mine\n"
                         "  for (int i = 0; i < n; ++i) {\n    x += 2 * i;  // step B's own region\n"
                         "    // then: the release\n    release(i);\n  }\n  C[0] = x + y;  // my store\n}\n")
    assert [code for _, code in made.regions] == ["  int y = 7;  // mine", "    release(i);"] and not made.report


def test_assemble_a_stub_or_a_lost_region_says_which():
    with pytest.raises(carry.NotCarried, match="your release is not written yet in your step A kernel"):
        carry.assemble(STEP_A, MINE_A.replace("    release(i);\n", '#error "not written yet"\n'), CELL_B,
                       step="step A")
    with pytest.raises(carry.NotCarried, match="could not find your release in your step A kernel"):
        carry.assemble(STEP_A, MINE_A.replace("    // then: the release\n", ""), CELL_B, step="step A")
    with pytest.raises(carry.NotCarried, match="could not tell which part of your step A kernel"):
        carry.assemble(STEP_A, MINE_A, CELL_B + "// carried: your z\n", step="step A")


def test_a_verdict_is_kept_across_kernels(tmp_path, monkeypatch, capsys):
    """A lab's opening re-checked the previous lab's kernel in every new kernel (50-80 s under load): the verdict is
    kept on disk beside the compiled kernels, for the same kernel text and the same course code; a check that could
    not run is not kept."""
    monkeypatch.setenv("HELPERS_CUBIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(carry, "_CACHE", {})
    mine = _lines(("  int x = 1;\n", "  int x = 1;  // mine\n"))
    _save(tmp_path / "lab9_x.ipynb", mine)
    runs = []
    first = carry.your_previous_kernel(_prev(lambda t: runs.append(t)), here=tmp_path)
    monkeypatch.setattr(carry, "_CACHE", {})  # a new kernel
    again = carry.your_previous_kernel(_prev(lambda t: runs.append(t)), here=tmp_path)
    assert len(runs) == 1 and again == first and again.yours
    _save(tmp_path / "lab9_x.ipynb", mine.replace("// mine", "// mine, changed"))
    carry.your_previous_kernel(_prev(lambda t: runs.append(t)), here=tmp_path)
    assert len(runs) == 2  # another kernel text: checked again
    monkeypatch.setattr(carry, "_CACHE", {})
    _save(tmp_path / "lab9_x.ipynb", mine.replace("// mine", "// other"))
    for _ in range(2):
        monkeypatch.setattr(carry, "_CACHE", {})
        got = carry.your_previous_kernel(_prev(lambda t: 1 / 0), here=tmp_path)
        assert "could not be checked" in got.line
    assert len(list((tmp_path / "cache" / "verdicts").glob("*.json"))) == 2
