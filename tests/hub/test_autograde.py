"""Autograding untrusted code (helpers.course.autograde): limits, the grader's own checks, tampering caught.

Every tampering case runs twice: with the guard off it must fool the checks (so the case is a real attack, not a
strawman), and with the guard on it must be graded as failed, naming what was tampered with.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from helpers.course.autograde import grade_notebook
from helpers.course.labgen import ROOT

pytestmark = pytest.mark.slow

CHECK = {"grade": True, "solution": False, "locked": True, "schema_version": 3}
ANSWER = {"grade": False, "solution": True, "locked": False, "schema_version": 3}


def make_notebook(folder: Path, cells: list[tuple[str, dict | None]], name: str = "sub.ipynb") -> Path:
    """A notebook of (source, nbgrader metadata or None) cells; graded cells get grade_id check<i>, 1 point."""
    nb = nbformat.v4.new_notebook()
    for i, (source, meta) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        if meta is not None:
            cell.metadata["nbgrader"] = dict(meta, grade_id=f"{'check' if meta['grade'] else 'answer'}{i}",
                                             **({"points": 1} if meta["grade"] else {}))
        nb.cells.append(cell)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    nbformat.write(nb, path)
    return path


def grade(path: Path, **traits):
    traits.setdefault("timeout", 60)
    return grade_notebook(path, **traits)


# ------------------------------------------------------------------------------------------ right answers pass
def test_the_solution_of_lab1_gets_every_point_and_the_stubs_none():
    solution = grade(ROOT / "solutions" / "lab1_tma.ipynb")
    import json

    cells = json.loads((ROOT / "solutions" / "lab1_tma.ipynb").read_text())["cells"]
    graded = [c["metadata"]["nbgrader"] for c in cells if c["metadata"].get("nbgrader", {}).get("grade")]
    points = sum(meta["points"] for meta in graded)  # read from the notebook: an added exercise changes it
    assert len(solution.cells) == len(graded) and points > 0, solution.summary()
    assert solution.points == sum(c.max_points for c in solution.cells) == points, solution.summary()
    stub = grade(ROOT / "labs" / "lab1_tma.ipynb")
    assert stub.points == 0 and all("NotImplementedError" in c.error or "#error stub" in c.error
                                    for c in stub.cells), stub.summary()


# ------------------------------------------------------------------------------------------ tampering
TILE_SETUP = "from helpers.course.checks import lab1"
TILE_WRONG = "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    return (0, 0)\n"
TILE_CHECK = "lab1.check_tile_coords(tile_coords)"

TAMPERING = {
    "redefine the check function": "lab1.check_tile_coords = lambda student: print('✅ all good')",
    "rebind the module's name": "import types\nlab1 = types.SimpleNamespace(check_tile_coords=lambda student: None)",
    "swap the check's code": "lab1.check_tile_coords.__code__ = (lambda student: None).__code__",
    "replace the module in sys.modules": (
        "import sys, types, helpers.course.checks\nfake = types.ModuleType('helpers.course.checks.lab1')\n"
        "fake.check_tile_coords = lambda student: None\nsys.modules['helpers.course.checks.lab1'] = fake\n"
        "helpers.course.checks.lab1 = fake\nfrom helpers.course.checks import lab1"),
    "patch the grading library": (
        "from helpers.course import grading\ngrading.Check.fail = lambda self, *args, **kwargs: None"),
    "edit helpers on disk and reload": (
        "import importlib, os, pathlib\nimport helpers.course.checks.lab1 as mod\np = pathlib.Path(mod.__file__)\n"
        "os.chmod(p.parent, 0o755); os.chmod(p, 0o644)\n"
        "p.write_text(p.read_text().replace('def check_tile_coords(student', "
        "'def check_tile_coords(student, *_):\\n    return\\n\\n\\ndef _was_check_tile_coords(student'))\n"
        "importlib.reload(mod)"),
    "load a fake helpers from the working directory": (
        "import pathlib, sys\nfor d in ('helpers', 'helpers/course/checks'):\n"
        "    pathlib.Path(d).mkdir(exist_ok=True)\n"
        "    pathlib.Path(d, '__init__.py').write_text('')\n"
        "pathlib.Path('helpers/course/checks/lab1.py').write_text('def check_tile_coords(student):\\n    pass\\n')\n"
        "for name in [m for m in sys.modules if m.startswith('helpers')]:\n    del sys.modules[name]\n"
        "sys.path.insert(0, '.')\nfrom helpers.course.checks import lab1"),
    "patch the grading library from inside the answer": (
        "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    from helpers.course import grading\n"
        "    grading.Check.fail = lambda self, *args, **kwargs: None\n    return (0, 0)"),
}


#: attacks the jail alone stops (the grader's copy of the course is mounted read-only; what a cell writes into its
#: working folder is not on the kernel's path before the graders)
STOPPED_BY_THE_JAIL = {"edit helpers on disk and reload", "load a fake helpers from the working directory"}


@pytest.mark.parametrize("how", list(TAMPERING))
def test_tampering_with_the_graders_is_graded_as_failed(tmp_path, how):
    cells = [(TILE_SETUP, None), (TILE_WRONG + "\n" + TAMPERING[how], ANSWER), (TILE_CHECK, CHECK)]
    path = make_notebook(tmp_path, cells)
    fooled = grade(path, tamper_guard=False, referee=False)
    if how in STOPPED_BY_THE_JAIL:  # the course is read-only in the jail: even without the guard it fails
        assert fooled.points == 0, fooled.summary()
    else:
        assert fooled.points == 1, f"not a real attack: without the guard it did not pass\n{fooled.summary()}"
    caught = grade(path)
    (cell,) = caught.cells
    assert cell.points == 0, caught.summary()
    assert how in STOPPED_BY_THE_JAIL or cell.error.startswith("TamperingDetected"), caught.summary()


def test_monkeypatched_numpy_is_graded_as_failed(tmp_path):
    wrong = "def one_product(smem, a_addr, b_addr, k):\n    return np.zeros((64, 64), np.float32)\n"
    patch = ("np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n"
             "np.abs = lambda x, *a, **k: np.asarray(x) * 0")
    path = make_notebook(tmp_path, [("import numpy as np\nfrom helpers.course.checks import lab3", None),
                                    (wrong + patch, ANSWER), ("lab3.check_one_product(one_product)", CHECK)])
    fooled = grade(path, tamper_guard=False, referee=False)
    assert fooled.points == 1, "without the guard, the patched numpy fools the check"
    (cell,) = grade(path).cells
    assert cell.points == 0 and "numpy.abs" in cell.error and "numpy.allclose" in cell.error, cell.error


def test_files_submitted_beside_the_notebook_cannot_stand_in_for_the_graders(tmp_path):
    fake = tmp_path / "helpers" / "course" / "checks"
    fake.mkdir(parents=True)
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "course" / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "lab1.py").write_text("def check_tile_coords(student):\n    pass\n")
    (tmp_path / "numpy.py").write_text("raise SystemExit('a submitted numpy was imported')\n")
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_WRONG, ANSWER), (TILE_CHECK, CHECK)])
    (cell,) = grade(path).cells
    assert cell.points == 0 and cell.error.startswith("CheckFailed"), cell.error


def test_an_honest_submission_that_uses_numpy_and_helpers_freely_is_not_flagged(tmp_path):
    right = ("import numpy as np\nfrom helpers.hopper import tma, tensormap\nfrom helpers.course import grading\n"
             "np.set_printoptions(precision=3)\n"
             "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    return (tile_col * box_cols, "
             "tile_row * box_rows)\n")
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (right, ANSWER), (TILE_CHECK, CHECK),
                                    ("from helpers.course.widgets import tiles\nx = np.random.default_rng(0).random(3)",
                                     None), (TILE_CHECK, CHECK)])
    report = grade(path)
    assert report.points == 2, report.summary()


# ------------------------------------------------------------------------------------------ limits
TILE_RIGHT = ("def tile_coords(tile_row, tile_col, box_rows, box_cols):\n"
              "    return (tile_col * box_cols, tile_row * box_rows)\n")


def test_an_endless_loop_is_interrupted_and_the_rest_is_graded(tmp_path):
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), ("while True:\n    pass", None),
                                    (TILE_CHECK, CHECK)])
    t0 = time.monotonic()
    report = grade(path, timeout=3)
    assert time.monotonic() - t0 < 30
    assert report.points == 1, report.summary()


def test_a_kernel_that_ignores_interrupts_is_stopped_and_costs_only_the_checks_after_it(tmp_path):
    hang = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)"
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (TILE_CHECK, CHECK), (hang, None),
                                    (TILE_CHECK, CHECK)])
    t0 = time.monotonic()
    report = grade(path, timeout=3)
    assert time.monotonic() - t0 < 40
    first, after = report.cells
    assert first.points == 1 and after.points == 0, report.summary()
    assert after.error.startswith("NotRun") and "could not be interrupted" in after.error


def test_the_cpu_limit_ends_a_spinning_kernel(tmp_path):
    spin = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (spin, None), (TILE_CHECK, CHECK)])
    t0 = time.monotonic()
    report = grade(path, timeout=120, cpu_seconds=4)
    assert time.monotonic() - t0 < 60
    (cell,) = report.cells
    assert cell.points == 0 and cell.error.startswith("NotRun") and "CPU time" in cell.error, cell.error


def test_the_memory_limit_fails_the_cell_that_asks_too_much_and_the_kernel_goes_on(tmp_path):
    hog = "x = bytearray(6 << 30)"
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (hog, CHECK), (TILE_CHECK, CHECK)])
    hogged, after = grade(path, memory_mb=3072, memory_rlimit="as").cells
    assert hogged.points == 0 and hogged.error.startswith("MemoryError"), hogged
    assert after.points == 1, after


def test_the_notebook_time_limit_stops_a_slow_notebook(tmp_path):
    slow = "import time\ntime.sleep(3)"
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (TILE_CHECK, CHECK), (slow, None),
                                    (slow, None), (slow, None), (TILE_CHECK, CHECK)])
    first, late = grade(path, notebook_seconds=5).cells
    assert first.points == 1 and late.points == 0, (first, late)
    assert late.error.startswith("NotRun") and "time limit" in late.error


def test_a_huge_file_is_refused(tmp_path):
    write = "open('big.bin', 'wb').write(b'0' * (3 << 20))"
    path = make_notebook(tmp_path, [(write, CHECK)])
    (cell,) = grade(path, file_mb=1).cells
    assert cell.points == 0 and "File too large" in cell.error, cell.error


def test_nbgrader_autograde_uses_the_sandbox_in_place_of_execute():
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from helpers.course.autograde import IsolatedExecute, autograde_preprocessors

    default = Autograde.class_traits()["autograde_preprocessors"].default()
    ours = autograde_preprocessors()
    assert ours[default.index(Execute)] is IsolatedExecute and Execute not in ours
    assert [p for p in ours if p is not IsolatedExecute] == [p for p in default if p is not Execute]


def test_autograding_as_an_account_that_does_not_exist_says_so(tmp_path):
    path = make_notebook(tmp_path, [(TILE_CHECK, CHECK)])
    with pytest.raises(ValueError, match="run_as names 'no-such-grader', and there is no such account"):
        grade(path, run_as="no-such-grader")


def test_a_work_root_too_deep_for_the_kernels_sockets_says_so_and_leaves_nothing(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = make_notebook(tmp_path / "nb", [(TILE_CHECK, CHECK)])
    with pytest.raises(ValueError, match="work_root .* is too deep: the kernel's Unix sockets"):
        grade(path, work_root=str(deep))
    assert list(deep.iterdir()) == []


@pytest.mark.skipif(shutil.which("sudo") is None or os.geteuid() == 0,
                    reason="needs sudo and a grader that is not root (as root the jail drops to the account itself)")
def test_autograding_as_an_account_it_cannot_become_names_the_rule(tmp_path):
    """nobody has no sudo rule for us (as root: cannot run this venv's Python, which lives in a private home)."""
    path = make_notebook(tmp_path, [(TILE_CHECK, CHECK)])
    with pytest.raises(RuntimeError, match=r"could not start .* as 'nobody' through sudo .*needs a sudo rule for "
                                           r"\w+, '\w+ ALL=\(nobody\) NOPASSWD: "):
        grade(path, run_as="nobody")


def test_nbgrader_autograde_goes_on_past_a_stuck_submission(tmp_path):
    """`nbgrader autograde` over a class: one submission hangs (ignoring interrupts), one tampers, one is right.
    The run finishes, and the gradebook has every student's points."""
    import os
    import subprocess
    import sys

    from helpers.course import labgen

    solution = TILE_SETUP + "\n"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(solution)]
    answer = nbformat.v4.new_code_cell("def tile_coords(tile_row, tile_col, box_rows, box_cols):\n"
                                       "    ### BEGIN SOLUTION\n    # HINT: innermost first\n"
                                       "    return (tile_col * box_cols, tile_row * box_rows)\n    ### END SOLUTION\n")
    answer.metadata["nbgrader"] = dict(ANSWER, grade_id="tiles-answer")
    check = nbformat.v4.new_code_cell(TILE_CHECK)
    check.metadata["nbgrader"] = dict(CHECK, grade_id="tiles", points=2)
    nb.cells += [answer, check]
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, tmp_path / "solutions" / "lab9_tiles.ipynb")
    assert labgen.nbgrader_layout(root=tmp_path) == 0
    course = tmp_path / "nbgrader"
    (course / "nbgrader_config.py").write_text((course / "nbgrader_config.py").read_text() + (
        "from helpers.course.autograde import autograde_preprocessors\n"
        "c.Autograde.autograde_preprocessors = autograde_preprocessors()\nc.IsolatedExecute.timeout = 5\n"))
    hang = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.1)"
    answers = {"right": TILE_RIGHT, "stuck": hang, "tampers": TILE_WRONG + TAMPERING["redefine the check function"]}
    for student, source in answers.items():
        sub = nbformat.read(course / "release" / "lab9_tiles" / "lab9_tiles.ipynb", as_version=4)
        next(c for c in sub.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiles-answer").source = source
        folder = course / "submitted" / student / "lab9_tiles"
        folder.mkdir(parents=True)
        nbformat.write(sub, folder / "lab9_tiles.ipynb")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "lab9_tiles"], cwd=course, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - t0 < 120
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "hopper-gemm") as gb:
        scores = {s: gb.find_submission("lab9_tiles", s).score for s in answers}
    assert scores == {"right": 2, "stuck": 0, "tampers": 0}, scores


def test_a_failed_regrade_leaves_no_earlier_score_in_the_gradebook(tmp_path):
    """Two students graded right (2 points each) re-submit a notebook that cannot be graded. Re-graded without
    the course's hook, nbgrader keeps the earlier 2 points (the failure is real); with it, the score is 0 and the
    cell is marked for manual grading."""
    import subprocess
    import sys

    from nbgrader.api import Gradebook

    from helpers.course import labgen

    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("def tile_coords(tile_row, tile_col, box_rows, box_cols):\n"
                                       "    ### BEGIN SOLUTION\n    return (tile_col * box_cols, tile_row * box_rows)\n"
                                       "    ### END SOLUTION\n")
    answer.metadata["nbgrader"] = dict(ANSWER, grade_id="tiles-answer")
    check = nbformat.v4.new_code_cell(TILE_CHECK)
    check.metadata["nbgrader"] = dict(CHECK, grade_id="tiles", points=2)
    nb.cells = [nbformat.v4.new_code_cell(TILE_SETUP), answer, check]
    (tmp_path / "solutions").mkdir()
    nbformat.write(nb, tmp_path / "solutions" / "lab9_tiles.ipynb")
    assert labgen.nbgrader_layout(root=tmp_path) == 0
    course = tmp_path / "nbgrader"
    (course / "nbgrader_config.py").write_text((course / "nbgrader_config.py").read_text() + (
        "import os\nfrom helpers.course.autograde import autograde_preprocessors, gradebook\n"
        "c.Autograde.autograde_preprocessors = autograde_preprocessors()\nc.IsolatedExecute.timeout = 30\n"
        "if os.environ.get('WITH_HOOK') == '1':\n"
        "    c.Autograde.pre_convert_hook = gradebook.forget_earlier_grades\n"))
    students = ("ana", "ben")
    for student in students:
        folder = course / "submitted" / student / "lab9_tiles"
        folder.mkdir(parents=True)
        shutil.copy(course / "release" / "lab9_tiles" / "lab9_tiles.ipynb", folder)
        (folder / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))  # this checkout's helpers, whichever the environment has installed

    def autograde(*args: str, hook: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nbgrader", "autograde", "lab9_tiles", *args], cwd=course,
                              env=dict(env, WITH_HOOK="1" if hook else "0"), capture_output=True, text=True,
                              timeout=300)

    def scores() -> dict:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "hopper-gemm") as gb:
            return {s: (gb.find_submission("lab9_tiles", s).score,
                        gb.find_grade("tiles", "lab9_tiles", "lab9_tiles", s).needs_manual_grade) for s in students}

    # the solution's answer cell as released is a stub: write the right answer into both submissions
    for student in students:
        path = course / "submitted" / student / "lab9_tiles" / "lab9_tiles.ipynb"
        sub = nbformat.read(path, as_version=4)
        next(c for c in sub.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiles-answer").source = \
            TILE_RIGHT
        nbformat.write(sub, path)
    done = autograde()
    assert done.returncode == 0, done.stdout + done.stderr
    assert scores() == {"ana": (2, False), "ben": (2, False)}
    for student in students:  # a re-submission nbgrader cannot read
        folder = course / "submitted" / student / "lab9_tiles"
        (folder / "lab9_tiles.ipynb").write_text('{"cells": [')
        (folder / "timestamp.txt").write_text("2026-11-21 10:00:00.000000 UTC")
    failed = autograde("--force", "--student=ben", hook=False)
    assert failed.returncode != 0 and scores()["ben"] == (2, False), "not a real failure: nbgrader cleared it"
    failed = autograde("--force", "--student=ana")
    assert failed.returncode != 0, failed.stdout + failed.stderr
    assert scores()["ana"] == (0, True), scores()
    assert not (course / "autograded" / "ana" / "lab9_tiles" / "lab9_tiles.ipynb").exists()
