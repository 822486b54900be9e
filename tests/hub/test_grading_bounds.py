"""Grading keeps nothing readable and nothing behind, and bounds itself: the notebook's cells never on a command
line, every writable place of the jail capped (``/dev/shm`` too), the one host folder a jail shares locked once the
kernel is up, what the grader keeps of a notebook's output bounded, and a cell that defeats the referee's alarm
ended on time.

Runs the real sandbox (bubblewrap, the control group), as tests/hub/test_attacks.py does.
"""

from __future__ import annotations

import secrets
import threading
import time

import pytest
from test_attacks import _bwrap_missing, _processes_with
from test_autograde import ANSWER, CHECK, TILE_CHECK, TILE_RIGHT, TILE_SETUP, make_notebook

from helpers.course.autograde import grade_notebook

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))]


def _text(report) -> str:
    return "\n".join(str(o.get("text", "")) + str(o.get("evalue", "")) for c in report.notebook.cells
                     if c.cell_type == "code" for o in c.outputs)


def test_no_cell_of_the_notebook_is_ever_on_a_command_line(tmp_path):
    token = secrets.token_hex(8)
    answer = TILE_RIGHT + f"# {token}\n"
    path = make_notebook(tmp_path, [(TILE_SETUP, None), (f"note = '{token}'", None), (answer, ANSWER),
                                    (TILE_CHECK, CHECK)])
    seen: set[int] = set()
    done = threading.Event()
    result = {}

    def grade() -> None:
        result["report"] = grade_notebook(path, timeout=60, notebook_seconds=120)
        done.set()

    threading.Thread(target=grade, daemon=True).start()
    while not done.is_set():  # every process of the machine, all through the grading (kernel, answer, referee)
        seen.update(_processes_with(token))
        time.sleep(0.02)
    assert result["report"].points == 1, result["report"].summary()  # the referee got the cells, by pipe
    assert not seen, f"a process had the notebook's code on its command line: {sorted(seen)}"


WRITES = r"""
import errno, json, os
from ipykernel.kernelapp import IPKernelApp
shared = os.path.dirname(IPKernelApp.instance().connection_file)
found = {}
try:
    open(os.path.join(shared, "filler"), "wb").close()
    found["shared"] = "written"
except OSError as e:
    found["shared"] = errno.errorcode[e.errno]
try:
    with open("/dev/shm/filler", "wb") as f:
        for _ in range(64):
            f.write(b"\0" * (1 << 20))
    found["shm"] = "64 MB written"
except OSError as e:
    found["shm"] = errno.errorcode[e.errno]
print("FOUND", json.dumps(found))
"""


def test_dev_shm_has_a_size_and_the_shared_folder_is_locked_once_the_kernel_is_up(tmp_path):
    path = make_notebook(tmp_path, [(WRITES, None), (TILE_SETUP, None), (TILE_RIGHT, ANSWER), (TILE_CHECK, CHECK)])
    report = grade_notebook(path, timeout=60, tmp_mb=16)
    line = next(x for x in _text(report).splitlines() if x.startswith("FOUND"))
    assert '"shared": "EACCES"' in line and '"shm": "ENOSPC"' in line, line
    assert report.points == 1, report.summary()


def test_what_the_grader_keeps_of_a_notebooks_output_is_bounded_and_says_so(tmp_path):
    flood = "for _ in range(64):\n    print('x' * (1 << 20))\n"
    wrong = "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    return (0, 0)\n"
    path = make_notebook(tmp_path, [(flood, None), (TILE_SETUP, None), (wrong, ANSWER), (TILE_CHECK, CHECK)])
    report = grade_notebook(path, timeout=120, max_output_mb=2)
    kept = sum(len(str(o.get("text", ""))) for c in report.notebook.cells if c.cell_type == "code" for o in c.outputs)
    assert kept < 4 << 20, f"the grader kept {kept >> 20} MB"
    assert "printed more than 2 MB" in _text(report)
    (cell,) = report.cells
    assert cell.points == 0 and cell.error, "a failing check's error is kept past the cap (its score)"


SPIN_OUTSIDE = ("import signal\n"
                "if type(get_ipython()).__name__ != 'ZMQInteractiveShell':  # only in the referee's answer process\n"
                "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                "    while True:\n"
                "        pass\n")


def test_a_cell_that_ignores_the_referees_alarm_is_ended_at_its_time_limit(tmp_path):
    path = make_notebook(tmp_path, [(SPIN_OUTSIDE, None), (TILE_SETUP, None), (TILE_RIGHT, ANSWER),
                                    (TILE_CHECK, CHECK)])
    start = time.monotonic()
    report = grade_notebook(path, timeout=5, notebook_seconds=600)
    took = time.monotonic() - start
    assert took < 90, f"the grader was held {took:.0f} s (the notebook's limit is 600 s)"
    (cell,) = report.cells
    assert cell.points == 0 and "RefereeFailed" in cell.error, report.summary()
