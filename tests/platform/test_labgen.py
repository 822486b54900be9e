"""Labs generated from solutions: stubs, hints, hidden tests, refusal to overwrite, and validation both ways."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from helpers.course import labgen

SOLUTION_CELL = '''def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    # HINT: multiply by two
    return 2 * x
    ### END SOLUTION
'''
CHECK_CELL = '''from helpers.course import grading
with grading.check("double") as c:
    for x in grading.fresh_rng().integers(-100, 100, size=5):
        c.equal(f"double({x})", grading.call_student(double, int(x)), 2 * int(x))
### BEGIN HIDDEN TESTS
assert double(0) == 0
### END HIDDEN TESTS
'''
CUDA_CELL = '''SRC = r"""
__device__ void arrive(unsigned long long* bar) {
    // ### BEGIN SOLUTION
    // HINT: mbarrier.arrive on the shared::cta barrier
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(0));
    // ### END SOLUTION
}
"""
'''


def _cell(kind: str, source: str, **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, **nbgrader}
    return cell


def make_course(root: Path) -> Path:
    for d in ("solutions", "labs", "lessons"):
        (root / d).mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _cell("markdown", "# Tiny lab\nWrite `double`."),
        _cell("code", SOLUTION_CELL, solution=True, grade=False, grade_id="double-answer"),
        _cell("code", CHECK_CELL, solution=False, grade=True, grade_id="double-check", points=1, locked=True),
        _cell("code", CUDA_CELL, solution=True, grade=False, grade_id="cuda-answer"),
        _cell("markdown", "Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", solution=True, grade=True,
              grade_id="why", points=1),
    ]
    path = root / "solutions" / "lab0_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_student_version_replaces_regions_with_hinted_stubs(tmp_path):
    sol = make_course(tmp_path)
    nb = nbformat.reads(labgen.student_version(sol), as_version=4)
    sources = [c.source for c in nb.cells]
    assert "raise NotImplementedError('multiply by two')" in sources[2]
    assert "return 2 * x" not in sources[2] and "# YOUR CODE HERE" in sources[2]
    assert "HIDDEN" not in sources[3] and "double(0)" not in sources[3]
    assert '#error "not written yet: mbarrier.arrive on the shared::cta barrier"' in sources[4]
    assert "asm volatile" not in sources[4]
    assert "YOUR ANSWER HERE" in sources[5] and "Because" not in sources[5]
    assert nb.cells[2].metadata["nbgrader"]["grade_id"] == "double-answer"
    # Run All goes on past a failing check (tests/platform/test_runall.py); the kernel is the course's
    assert [labgen.RAISES in c.metadata.get("tags", []) for c in nb.cells] == [False, False, True, True, True, False]
    assert nb.metadata["kernelspec"] == labgen.KERNELSPEC


@pytest.mark.parametrize(
    "source, message",
    [
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "no '# HINT"),
        ("### BEGIN SOLUTION\n# HINT: h\nx = 1\n", "never closed"),
        ("x = 1\n### END SOLUTION", "without a begin"),
        ("### BEGIN SOLUTION\n# HINT: h\n### BEGIN SOLUTION\n", "nested"),
    ],
)
def test_malformed_regions_are_refused(tmp_path, source, message):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(labgen.GenerationError, match=message):
        labgen.student_version(path)


def test_generate_never_destroys_a_students_work(tmp_path, capsys):
    make_course(tmp_path)
    assert labgen.generate(root=tmp_path) == 0
    assert labgen.check(root=tmp_path) == 0
    lab = tmp_path / "labs" / "lab0_tiny.ipynb"
    manifest = json.loads((tmp_path / "labs" / ".labgen.json").read_text())
    assert set(manifest) == {"lab0_tiny.ipynb"}
    # the student edits the lab: check fails, and regenerating keeps the edits and writes the new one beside
    lab.write_text(lab.read_text().replace("# YOUR CODE HERE", "return x + x"))
    assert labgen.check(root=tmp_path) == 1
    assert "differs" in capsys.readouterr().err
    assert labgen.generate(root=tmp_path) == 1
    err = capsys.readouterr().err
    assert "kept labs/lab0_tiny.ipynb" in err and "lab0_tiny.new.ipynb" in err
    assert "return x + x" in lab.read_text()
    assert (tmp_path / "labs" / "lab0_tiny.new.ipynb").exists()
    # an unedited lab is simply rewritten when its solution changes
    assert labgen.generate(root=tmp_path, force=True) == 0
    sol = tmp_path / "solutions" / "lab0_tiny.ipynb"
    sol.write_text(sol.read_text().replace("Write `double`.", "Write `double`, please."))
    assert labgen.check(root=tmp_path) == 1
    capsys.readouterr()
    assert labgen.generate(root=tmp_path) == 0
    assert "please" in lab.read_text()
    assert capsys.readouterr().out == "wrote labs/lab0_tiny.ipynb\n"
    assert labgen.generate(root=tmp_path) == 0  # nothing changed: nothing to say
    assert capsys.readouterr().out == ""


def test_judge_rules_for_labs():
    R = labgen.CellResult
    good = [R(0, False, None, None), R(1, True, "a", "CheckFailed: x"), R(2, False, None, "NotImplementedError: h")]
    assert labgen.judge(Path("x"), "lab", good) == []
    early = [R(0, False, None, "NotImplementedError: h"), R(1, True, "a", "CheckFailed: x")]
    assert "before any graded check failed" in labgen.judge(Path("x"), "lab", early)[0]
    passes = [R(0, True, "a", None)]
    assert "passes on the stub" in labgen.judge(Path("x"), "lab", passes)[0]
    crash = [R(0, True, "a", "CheckFailed: x"), R(1, False, None, "ZeroDivisionError: boom")]
    assert "only stubs may fail" in labgen.judge(Path("x"), "lab", crash)[0]
    assert labgen.judge(Path("x"), "solution", [R(0, True, "a", "CheckFailed: x")])
    assert labgen.judge(Path("x"), "solution", [R(0, False, None, None)]) == ["has no graded check cell"]


@pytest.mark.slow
def test_validate_end_to_end_and_a_removed_solution_line_fails(tmp_path, capsys):
    sol = make_course(tmp_path)
    labgen.generate(root=tmp_path)
    assert labgen.validate(kinds=("solution", "lab"), root=tmp_path) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "ok   solutions/lab0_tiny.ipynb" in out and "ok   labs/lab0_tiny.ipynb" in out
    sol.write_text(sol.read_text().replace("    return 2 * x\\n", ""))
    labgen.generate(root=tmp_path)
    assert labgen.validate(kinds=("solution",), root=tmp_path) == 1
    assert "double-check" in capsys.readouterr().out


@pytest.mark.slow
def test_nbgrader_runs_on_the_course_layout(tmp_path):
    """docs/instructors.md's nbgrader steps: lay out, generate, validate the source, validate --invert the release."""
    import os
    import subprocess
    import sys

    make_course(tmp_path)
    assert labgen.nbgrader_layout(root=tmp_path) == 0
    course = tmp_path / "nbgrader"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def nbgrader(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                              capture_output=True, text=True, timeout=300)
        return done.stdout + done.stderr

    assert "passes all the tests" in nbgrader("validate", "source/lab0_tiny/lab0_tiny.ipynb")
    release = nbformat.read(course / "release" / "lab0_tiny" / "lab0_tiny.ipynb", as_version=4)
    check_cell = next(c for c in release.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "double-check")
    assert labgen.RAISES in check_cell.metadata["tags"]  # the released notebook's Run All goes on too
    assert "does not pass any tests" in nbgrader("validate", "--invert", "release/lab0_tiny/lab0_tiny.ipynb")
    # nbgrader counts the failed check and shows the course's report as its error: no traceback into helpers/
    failed = nbgrader("validate", "release/lab0_tiny/lab0_tiny.ipynb")
    assert "VALIDATION FAILED" in failed and "✗ double is not written yet" in failed, failed
    assert "grading.py" not in failed and "Traceback" not in failed, failed


# ---------------------------------------------------------------------------------------------------------
# tiered hints (helpers.course.hints): the stub says what to do; more only when asked; never a line of the solution
# ---------------------------------------------------------------------------------------------------------
TIERED = '''def area(w, h):
    """Area of a w × h box."""
    ### BEGIN SOLUTION
    # HINT: multiply the two sides (the lesson's first section)
    # HINT 1: width times height, nothing else
    # HINT 2: the answer is one return statement of the product
    return w * h
    ### END SOLUTION
'''
TIERED_CUDA = '''SRC = r"""
__device__ int twice(int x) {
  // ### BEGIN SOLUTION
  // HINT: say "twice" in C
  // HINT 1: one return with a product
  return 2 * x;
  // ### END SOLUTION
}
"""
'''


def _tiered_course(root: Path, *cells: str) -> Path:
    for d in ("solutions", "labs", "lessons"):
        (root / d).mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("markdown", "# Tiny")]
    for i, src in enumerate(cells):
        nb.cells.append(_cell("code", src, solution=True, grade=False, grade_id=f"lab0-ex{i}-answer"))
        nb.cells.append(_cell("code", "pass", solution=False, grade=True, grade_id=f"lab0-ex{i}", points=1,
                              locked=True))
    path = root / "solutions" / "lab0_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_stub_carries_tier_0_and_how_to_ask_for_more(tmp_path):
    sol = _tiered_course(tmp_path, TIERED, TIERED_CUDA)
    text = labgen.student_version(sol)
    nb = nbformat.reads(text, as_version=4)
    py, cuda = nb.cells[2].source, nb.cells[4].source
    assert "raise NotImplementedError(\"multiply the two sides (the lesson's first section) (stuck? " \
           "lab0.hint('lab0-ex0', 1))\")" in py
    assert '#error "not written yet: say \\"twice\\" in C (stuck? lab0.hint(\'lab0-ex1\', 1))"' in cuda
    for secret in ("width times height", "return w * h", "one return with a product", "return 2 * x"):
        assert secret not in text, secret


@pytest.mark.parametrize("tier", ["HINT", "HINT 1", "HINT 2"])
def test_a_hint_holding_a_solution_line_is_refused(tmp_path, tier):
    said = {"HINT": "multiply the two sides", "HINT 1": "width times height",
            "HINT 2": "the answer is one return statement of the product"}[tier]
    leaky = TIERED.replace(f"# {tier}: {said}", f"# {tier}: write return w * h")
    sol = _tiered_course(tmp_path, leaky)
    with pytest.raises(labgen.GenerationError, match=f"'# {tier}:' gives the answer away.*return"):
        labgen.student_version(sol)


def test_the_leak_rule_ignores_whitespace_and_backticks_and_short_lines():
    from helpers.course import hints

    assert hints.leaked_lines("use `acc   = np.zeros((128,32))` here", "    acc = np.zeros((128, 32))\n")
    assert hints.leaked_lines("then return w * h", "    return w * h\n")
    assert not hints.leaked_lines("else: break, }", "    else:\n        break\n    }\n")  # too generic
    assert not hints.leaked_lines("anything", "    # a comment in the solution\n")


@pytest.mark.parametrize("source, message", [
    (TIERED.replace("# HINT 1:", "# HINT 3:"), "gap"),
    (TIERED.replace("# HINT 2: the answer is one return statement of the product", "# HINT 1: again"), "two"),
])
def test_hint_tiers_must_be_numbered_without_gaps(tmp_path, source, message):
    with pytest.raises(labgen.GenerationError, match=message):
        labgen.student_version(_tiered_course(tmp_path, source))


def test_generate_writes_hints_and_encoded_answers_and_check_notices_staleness(tmp_path, capsys):
    from helpers.course import hints

    sol = _tiered_course(tmp_path, TIERED, TIERED_CUDA)
    assert labgen.generate(root=tmp_path) == 0
    data_path = tmp_path / labgen.LAB_DATA
    raw = data_path.read_text()
    assert "width times height" in raw and "return w * h\\n" not in raw and "return 2 * x" not in raw
    ex = hints.exercises(data_path)["lab0-ex0"]
    assert ex.lab == "lab0" and ex.regions[0].hints[1] == "width times height, nothing else"
    assert ex.regions[0].answer.strip() == "return w * h"
    assert labgen.check(root=tmp_path) == 0
    sol.write_text(sol.read_text().replace("width times height", "w × h"))
    labgen.student_version(sol)
    assert labgen.check(root=tmp_path) == 1
    assert "labs.json differs" in capsys.readouterr().err


def test_hint_and_answer_texts(tmp_path):
    from helpers.course import hints

    _tiered_course(tmp_path, TIERED, TIERED_CUDA)
    labgen.generate(root=tmp_path)
    path = tmp_path / labgen.LAB_DATA
    assert "multiply the two sides" in hints.hint_text("lab0-ex0", 0, path)
    one = hints.hint_text("lab0-ex0", 1, path)
    assert "width times height" in one and "lab0.hint('lab0-ex0', 2)" in one
    assert "lab0.answer('lab0-ex0')" in hints.hint_text("lab0-ex0", 2, path)
    assert hints.hint_text("lab0-ex0-answer", 1, path) == one  # the solution cell's id works too
    assert "no hint 3" in hints.hint_text("lab0-ex0", 3, path)
    polite = hints.answer_text("lab0-ex0", path=path)
    assert "sure=True" in polite and "return w * h" not in polite
    assert "return w * h" in hints.answer_text("lab0-ex0", sure=True, path=path)
    assert "there is no exercise 'lab0-ex9'" in hints.hint_text("lab0-ex9", 1, path)


def test_the_course_labs_hold_no_hint_beyond_tier_0_and_no_answer():
    """Every solution notebook obeys the hint rules (generation succeeds), labs/ shows only tier 0, and the
    generated data file is up to date."""
    from helpers.course import hints

    table = hints.exercises()
    assert len(table) >= 20
    for ex in table.values():  # (a later lab gives the earlier labs' answers: its kernel grows from them)
        labs_text = (labgen.ROOT / "labs" / ex.notebook).read_text()
        for region in ex.regions:
            for tier_text in region.hints[1:]:
                assert json.dumps(tier_text)[1:-1] not in labs_text, (ex.id, tier_text)
            for line in region.answer.split("\n"):
                if len(line.strip()) > 30:
                    assert json.dumps(line.strip())[1:-1] not in labs_text, (ex.id, line)
            assert region.hints[0]
        if ex.lab in ("lab1", "lab2", "lab3"):  # (the later labs may add theirs: hint 1 is optional)
            assert ex.tiers >= 2, f"{ex.id} has no first hint"
    assert labgen.check() == 0


# ---------------------------------------------------------------------------------------------------------
# warnings in a notebook's output, the generated-labs record, and the rules' fixes
# ---------------------------------------------------------------------------------------------------------
PLOTLY_NAN = ("/venv/lib/python3.12/site-packages/plotly/io/_json.py:120: UserWarning: Out of range float values "
              "are not JSON compliant\n  warnings.warn(\n")


def test_a_warning_in_the_output_is_a_failure_with_its_fix():
    outputs = [{"output_type": "stream", "name": "stdout", "text": "UserWarning: printed on purpose\n"},
               {"output_type": "stream", "name": "stderr", "text": PLOTLY_NAN}]
    assert labgen.warnings_in(outputs) == ["UserWarning: Out of range float values are not JSON compliant"]
    R = labgen.CellResult
    problems = labgen.judge(Path("x"), "lesson", [R(3, False, None, None, labgen.warnings_in(outputs))])
    assert problems == ["cell 3 printed a warning: UserWarning: Out of range float values are not JSON compliant "
                        "— fix: a figure holds NaN or inf, which plotly cannot send to the browser: draw None where "
                        "there is no value"]
    assert labgen.judge(Path("x"), "lesson", [R(3, False, None, None)]) == []


@pytest.mark.slow
def test_validate_fails_a_lesson_that_warns_and_runs_it_with_the_courses_own_modules(tmp_path, capsys):
    (tmp_path / "lessons").mkdir()
    (tmp_path / "course_probe.py").write_text("HERE = True\n")  # importable only with the course root on the path
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import course_probe\nassert course_probe.HERE"),
                nbformat.v4.new_code_cell("import warnings\nwarnings.warn('Out of range float values are not JSON "
                                          "compliant', UserWarning)")]
    nbformat.write(nb, tmp_path / "lessons" / "09_probe.ipynb")
    assert labgen.validate(kinds=("lesson",), root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "FAIL lessons/09_probe.ipynb" in out and "cell 0" not in out, out
    assert "cell 1 printed a warning: UserWarning: Out of range float values are not JSON compliant — fix:" in out


def test_a_stale_record_of_the_generated_labs_is_reported(tmp_path, capsys):
    make_course(tmp_path)
    assert labgen.generate(root=tmp_path) == 0 and labgen.stale(tmp_path) == []
    (tmp_path / "labs" / labgen.MANIFEST).write_text('{"lab0_tiny.ipynb": "0"}\n')
    assert labgen.stale(tmp_path) == ["labs/.labgen.json does not record labs/lab0_tiny.ipynb as generated (the "
                                      "next `make labs` after a change to its solution would keep it as a lab "
                                      "edited by hand)"]
    assert labgen.check(root=tmp_path) == 1
    capsys.readouterr()
    assert labgen.generate(root=tmp_path) == 0 and labgen.stale(tmp_path) == []
    assert "wrote labs/lab0_tiny.ipynb" not in capsys.readouterr().out  # unchanged labs are not rewritten


def test_each_refusal_of_the_generator_says_its_fix():
    for source in ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "### BEGIN SOLUTION\n# HINT: h\nx = 1\n",
                   "x = 1\n### END SOLUTION", "### BEGIN HIDDEN TESTS\nx = 1\n"):
        with pytest.raises(labgen.GenerationError) as info:
            labgen.regions(source, "cell 0", markdown=False)
        assert info.value.fix, source


def test_the_lint_report_is_one_line_per_mistake(tmp_path, capsys):
    problem = labgen.Problem("solutions/lab0_tiny.ipynb", 3, "is graded but worth no points", "give it points",
                             "lab0-x")
    assert labgen.report([problem]) == 1
    assert capsys.readouterr().err.splitlines()[0] == ("✗ solutions/lab0_tiny.ipynb, cell 3 (lab0-x): is graded "
                                                       "but worth no points — fix: give it points")
    assert labgen.report([]) == 0
