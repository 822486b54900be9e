"""A hostile student against autograding: each attack runs in the same grading run as an honest student, and the
attack fails while the honest student gets every point.

Runs the real sandbox (bubblewrap, the control group) on this machine; skipped where bubblewrap cannot make its
namespaces here, with the reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from test_autograde import ANSWER, CHECK, TILE_CHECK, TILE_RIGHT, TILE_SETUP, TILE_WRONG, make_notebook

from helpers.course.autograde import grade_notebook


def _bwrap_missing() -> str | None:
    if shutil.which("bwrap") is None:
        return "needs bubblewrap (apt-get install bubblewrap)"
    probe = subprocess.run(["bwrap", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "true"],
                           capture_output=True, text=True, timeout=30)
    return None if probe.returncode == 0 else f"bubblewrap cannot make namespaces here: {probe.stderr.strip()}"


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))]


def honest(folder: Path) -> Path:
    return make_notebook(folder, [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (TILE_CHECK, CHECK)])


def grade_class(attack: Path, folder: Path, **traits) -> tuple:
    """Grade the attack, then an honest student after it (as nbgrader grades a class, one after another)."""
    traits.setdefault("timeout", 60)
    bad = grade_notebook(attack, **traits)
    good = grade_notebook(honest(folder / "honest"), **traits)
    assert good.points == 1, f"the honest student after the attack lost points:\n{good.summary()}"
    return bad, good


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _sandboxes(root: Path) -> set[str]:
    return {p.name for p in root.glob("hopper-grade-*")}


def test_nothing_a_submission_starts_outlives_its_grading(tmp_path, request):
    token = secrets.token_hex(8)
    escape = ("import subprocess, sys\n"
              f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(900)  # {token}'],"
              " start_new_session=True)\n"
              f"subprocess.Popen(['setsid', 'sh', '-c', 'sleep 900 # {token}'])\n"
              "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              f"        os.execvp('sh', ['sh', '-c', 'sleep 900 # {token}'])\n    os._exit(0)\n")
    # a folder of its own, so that gradings running beside this test (other pytest workers) are not counted; short,
    # as the kernel's Unix sockets are made under it
    boxes = Path(tempfile.mkdtemp(prefix="hg-"))
    request.addfinalizer(lambda: shutil.rmtree(boxes, ignore_errors=True))
    path = make_notebook(tmp_path / "attack", [(escape, None), (TILE_SETUP, None), (TILE_WRONG, ANSWER),
                                               (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path, work_root=str(boxes))
    time.sleep(1)
    assert _processes_with(token) == [], "a process the submission started is still running"
    assert _sandboxes(boxes) == set(), f"sandbox folders left behind: {_sandboxes(boxes)}"
    assert bad.points == 0


def test_a_fork_flood_is_capped_for_the_whole_submission_and_leaves_nothing(tmp_path):
    token = secrets.token_hex(8)
    flood = ("import os, time\nmade = 0\nfor _ in range(3000):\n    try:\n        pid = os.fork()\n"
             "    except OSError:\n        break\n    if pid == 0:\n"
             f"        os.execvp('sh', ['sh', '-c', 'sleep 900 # {token}'])\n    made += 1\nprint('forked', made)")
    path = make_notebook(tmp_path / "attack", [(flood, None), (TILE_SETUP, None), (TILE_RIGHT, ANSWER),
                                               (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path, max_processes=64)
    out = bad.notebook.cells[0].outputs
    made = int(next(o["text"] for o in out if o.get("name") == "stdout").split()[1])
    assert made < 64, f"{made} processes: the cap is for the whole submission"
    assert _processes_with(token) == []


def test_memory_is_limited_for_the_whole_submission_not_per_process(tmp_path):
    """Two children of 700 MB each, each under the per-process limit (1 GB), together over the submission's."""
    hog = ("import subprocess, sys\n"
           "child = 'import numpy, time; x = numpy.ones(700 << 20, numpy.uint8); time.sleep(3)'\n"
           "procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(2)]\n"
           "codes = [p.wait() for p in procs]\nprint('exit codes', codes)\nassert codes == [0, 0]")
    path = make_notebook(tmp_path / "attack", [(TILE_SETUP, None), (TILE_RIGHT, ANSWER), (hog, CHECK),
                                               (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path, memory_mb=1024, memory_rlimit="data")
    hogged, after = bad.cells
    said = "".join(o.get("text", "") for o in bad.notebook.cells[2].outputs)
    assert hogged.points == 0 and "-9" in said, (said, bad.summary())  # one child killed: out of memory
    assert after.points == 1


def test_a_grading_kernel_reaches_no_network_not_even_this_machine(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    reached = []

    def accept() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end and not reached:
            try:
                reached.append(listener.accept())
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    dial = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "    print('connected')\nexcept OSError as e:\n    print('refused', e)")
    path = make_notebook(tmp_path / "attack", [(dial, None), (TILE_SETUP, None), (TILE_RIGHT, ANSWER),
                                               (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path)
    listener.close()
    assert not reached, "the grading kernel opened a connection to this machine"
    assert "refused" in bad.notebook.cells[0].outputs[0]["text"]


def test_startup_files_and_configuration_submitted_beside_the_notebook_are_not_loaded(tmp_path):
    folder = tmp_path / "attack"
    startup = folder / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    cheat = "from helpers.course.checks import lab1\nlab1.check_tile_coords = lambda student: None\n"
    (startup / "00-cheat.py").write_text(cheat)
    config = f"c = get_config()\nc.InteractiveShellApp.exec_lines = {[cheat]!r}\n"
    (folder / "ipython_kernel_config.py").write_text(config)
    (folder / "ipython_config.py").write_text((folder / "ipython_kernel_config.py").read_text())
    (folder / ".config").mkdir()
    path = make_notebook(folder, [(TILE_SETUP, None), (TILE_WRONG, ANSWER), (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path, tamper_guard=False)
    (cell,) = bad.cells
    assert cell.points == 0 and cell.error.startswith("CheckFailed"), bad.summary()


def test_the_kernel_sees_no_home_no_instructor_files_and_only_a_copy_of_the_submission(tmp_path):
    look = ("import os, pathlib\nprint(sorted(os.listdir('/home')), os.path.exists('/root/.local'), "
            f"os.path.exists({str(Path.home())!r} + '/.local/share/jupyter'), os.getuid() != 0)\n"
            "pathlib.Path('written.txt').write_text('x')")
    path = make_notebook(tmp_path / "attack", [(look, None), (TILE_SETUP, None), (TILE_RIGHT, ANSWER),
                                               (TILE_CHECK, CHECK)])
    bad, _ = grade_class(path, tmp_path)
    assert bad.notebook.cells[0].outputs[0]["text"].strip() == "['student'] False False True"
    assert not (tmp_path / "attack" / "written.txt").exists(), "the kernel wrote into the submitted folder"
    assert os.path.exists(path)


# ------------------------------------------------------------------------------------------ the verdict from outside
CONTEXTLIB = ("import contextlib\n_exit = contextlib._GeneratorContextManager.__exit__\n"
              "def _quiet(self, typ, value, tb):\n    _exit(self, typ, value, tb) if typ is None else None\n"
              "    return typ is not None\ncontextlib._GeneratorContextManager.__exit__ = _quiet\n")
TRANSFORMER = ("ip = get_ipython()\n"
               "ip.input_transformers_post.append(lambda lines: ['pass\\n'] if any('check_' in l for l in lines)"
               " else lines)\n")
REPLAY = ("import json\nfrom helpers.course.checks import lab1\n_dumps = json.dumps\n_first = []\n"
          "def _replay(obj, *a, **k):\n    if isinstance(obj, dict) and 'fingerprint' in obj:\n"
          "        if not _first:\n            _first.append(_dumps(obj, *a, **k))\n"
          "            lab1.check_tile_coords = lambda student: None\n        return _first[0]\n"
          "    return _dumps(obj, *a, **k)\njson.dumps = _replay\n")
HELPER = ("from helpers.course.checks import lab1\n"
          "def tensor_map_args(a, box_rows, box_cols):\n    return lab1._map_args_expected(a, box_rows, box_cols)\n")

#: attacks the grader alone rejects too (a check that compared nothing fails), kept to show the referee rejects them
ALSO_CAUGHT_WITHOUT_THE_REFEREE = {"contextlib's __exit__ swallows the check's error"}
IN_PROCESS = {"contextlib's __exit__ swallows the check's error": CONTEXTLIB,
              "an input transformer blanks the check cell": TRANSFORMER,
              "the tamper guard's fingerprint replayed": REPLAY}


@pytest.mark.parametrize("how", list(IN_PROCESS))
def test_a_submission_cannot_fool_the_verdict_from_inside_its_own_process(tmp_path, how):
    path = make_notebook(tmp_path / "attack", [(TILE_SETUP, None), (TILE_WRONG + "\n" + IN_PROCESS[how], ANSWER),
                                               (TILE_CHECK, CHECK)])
    fooled = grade_notebook(path, timeout=60, referee=False)
    # the swallowed error no longer fools even the check itself, which fails when it compared nothing; the others must
    # be real attacks (they pass without the referee)
    assert fooled.points == 1 or how in ALSO_CAUGHT_WITHOUT_THE_REFEREE, \
        f"not a real attack: without the referee it did not pass\n{fooled.summary()}"
    bad, _ = grade_class(path, tmp_path)
    (cell,) = bad.cells
    assert cell.points == 0 and "RefereeFailed" in cell.error, bad.summary()


def test_an_answer_that_calls_the_graders_reference_helper_fails_saying_so(tmp_path, monkeypatch):
    from helpers.course.autograde.referee import reference_helpers_used

    assert reference_helpers_used([HELPER], {"helpers.course.checks.lab1"}) == ["lab1._map_args_expected"]
    assert reference_helpers_used(["s = 'hopper::tma_load_2d(dst, map, bar, x, y);'"], set(), {"lab1"}) == \
        ["hopper::tma_load_2d"]
    assert reference_helpers_used(["// the header's hopper::tma_load_2d is the reference"], set(), {"lab1"}) == []
    path = make_notebook(tmp_path / "attack", [(TILE_SETUP, None), (HELPER, ANSWER),
                                               ("lab1.check_map_args(tensor_map_args)", CHECK)])
    assert grade_notebook(path, timeout=60, referee=False).points == 1, "not a real attack: it passes the check"
    bad, _ = grade_class(path, tmp_path)
    (cell,) = bad.cells
    assert cell.points == 0 and "the graders' own reference lab1._map_args_expected" in cell.error, cell.error


# ------------------------------------------------------------------------------------------ collect
def test_collect_copies_regular_files_only_and_names_what_it_refuses(tmp_path):
    from helpers.course.autograde.exchange import UnsafeSubmission, copy_regular_files

    secret = tmp_path / "instructor" / "source.ipynb"
    secret.parent.mkdir()
    secret.write_text("the solution")
    honest_dir = tmp_path / "honest"
    (honest_dir / "data").mkdir(parents=True)
    (honest_dir / "lab1_tma.ipynb").write_text("{}")
    (honest_dir / "data" / "x.npy").write_bytes(b"x")
    copy_regular_files(str(honest_dir), str(tmp_path / "honest-copy"))
    assert (tmp_path / "honest-copy" / "data" / "x.npy").read_bytes() == b"x"
    attacks = {
        "symlink": lambda d: (d / "lab1_tma.ipynb").symlink_to(secret),
        "symlinked folder": lambda d: (d / "runtime").symlink_to(secret.parent, target_is_directory=True),
        "hard link": lambda d: os.link(secret, d / "lab1_tma.ipynb"),
        "fifo": lambda d: os.mkfifo(d / "pipe"),
    }
    for how, make in attacks.items():
        folder = tmp_path / how.replace(" ", "-")
        folder.mkdir()
        make(folder)
        with pytest.raises(UnsafeSubmission, match=r"(lab1_tma.ipynb|runtime|pipe) is "):
            copy_regular_files(str(folder), str(tmp_path / f"{folder.name}-copy"))
