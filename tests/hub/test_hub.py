"""A whole class on one machine, for real: hub/setup.sh, JupyterHub with PAM accounts, Debian's Chromium.

Two students log in, each gets their own server (as their own Unix account) with the course, opens Lab 1 and runs
a check. The instructor releases Lab 1 through nbgrader's exchange (formgrader), the students fetch it, work and
submit (JupyterLab's Assignments panel), the instructor collects and autogrades (formgrader), and the gradebook
holds each student's points for each graded cell. Students try to read and change each other's files and the
instructor's; every attempt is refused by the operating system. One submission tampers with a check, reads the
instructor's files at grading time and claims to be from another student: all three fail.

Needs root (real accounts), sudo, npm (configurable-http-proxy), a system Python >= 3.11 every account can run,
and Chromium; skipped with the reason otherwise. CI has them (.ci/run). About 4 minutes, most of it installing
the hub's environment.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "hub"
TEACHER, ALICE, BOB, GRADER = "hubtest-teacher", "hubtest-alice", "hubtest-bob", "hubtest-grader"
CAROL, DAVE = "hubtest-carol", "hubtest-dave"  # work from a terminal (nbgrader's commands), no browser
USERS = (TEACHER, ALICE, BOB)  # log in with Chromium
CLASS = (*USERS, CAROL, DAVE)
LAB = "lab1_tma"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"]


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it creates Unix accounts for a teacher and two students"
    for tool in ("sudo", "npm", "node", "useradd", "runuser", "git"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install sudo nodejs npm)"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if not Path("/usr/bin/python3").exists() and "HOPPER_HUB_PYTHON" not in os.environ:
        return "needs a system Python >= 3.11 every account can run (/usr/bin/python3 or $HOPPER_HUB_PYTHON)"
    return None


pytestmark = [pytest.mark.hub, pytest.mark.browser, pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


# ---------------------------------------------------------------------------------------------------------
# the hub
# ---------------------------------------------------------------------------------------------------------
def _free_port_block() -> int:
    """A port p with p, p+1, p+2 free (the proxy, the hub's API, the proxy's API)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 60000:
            continue
        try:
            for p in (port + 1, port + 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no block of three free ports")


def _private_clone(dest: Path) -> Path:
    """A copy of the course's tracked files in a folder only root can enter (as an instructor keeps a clone)."""
    dest.mkdir(mode=0o700)
    clone = dest / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        src = ROOT / rel
        if src.is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / rel)
    return clone


def _processes_of(uids: set[int]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids


def _remove_accounts() -> None:
    uids = set()
    for user in (*CLASS, GRADER):
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            pass
    for pid in _processes_of(uids):  # the test accounts' own processes, by id
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for user in (*CLASS, GRADER):
        subprocess.run(["userdel", "--remove", user], capture_output=True)
    Path(f"/etc/sudoers.d/hopper-hub-{GRADER}").unlink(missing_ok=True)


class Hub:
    def __init__(self, base: Path):
        self.base = base
        self.root = base / "hub"
        self.port = _free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.passwords = {u: secrets.token_urlsafe(12) for u in CLASS}
        self.log = ARTIFACTS / "jupyterhub.log"
        self.proc: subprocess.Popen | None = None

    def setup(self) -> None:
        self.clone = _private_clone(self.base / "private")
        pwfile = self.base / "private" / "passwords"
        pwfile.write_text("".join(f"{u}:{p}\n" for u, p in self.passwords.items()))
        env = dict(os.environ, HOPPER_HUB_ROOT=str(self.root), HOPPER_HUB_PORT=str(self.port),
                   HOPPER_HUB_INSTRUCTOR=TEACHER, HOPPER_HUB_STUDENTS=" ".join(CLASS[1:]),
                   HOPPER_HUB_GRADER=GRADER, HOPPER_HUB_PASSWORDS=str(pwfile), HOPPER_HUB_TEST="1")
        done = subprocess.run([str(self.clone / "hub" / "setup.sh")], env=env, capture_output=True, text=True,
                              timeout=900)
        (ARTIFACTS / "setup.log").write_text(done.stdout + done.stderr)
        assert done.returncode == 0, f"hub/setup.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        self.setup_output = done.stdout + done.stderr

    def start(self) -> None:
        log = self.log.open("w")
        self.proc = subprocess.Popen([str(self.clone / "hub" / "start.sh")], env=dict(
            os.environ, HOPPER_HUB_ROOT=str(self.root)), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{self.url}/hub/login", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None:
                    pytest.fail("the hub exited:\n" + self.log.read_text()[-5000:])
                time.sleep(0.5)
        pytest.fail("the hub did not answer in 60 s:\n" + self.log.read_text()[-5000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def as_user(self, user: str, code: str, timeout: float = 120, cwd: str = "") -> subprocess.CompletedProcess:
        """Run Python as one of the class's accounts, in its home (or ``cwd``), with the hub's environment."""
        home = pwd.getpwnam(user).pw_dir
        env = {"HOME": home, "PATH": f"{self.root / 'env' / 'bin'}:/usr/bin:/bin", "USER": user, "LANG": "C.UTF-8"}
        python = str(self.root / "env" / "bin" / "python")
        return subprocess.run([shutil.which("runuser"), "-u", user, "--", python, "-c", code], cwd=cwd or home,
                              env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def hub(hub_base, course_env):
    """The hub, set up by hub/setup.sh from a private copy of the course (its environment is course_env's)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    _remove_accounts()  # what an interrupted earlier run may have left
    h = Hub(hub_base)
    try:
        h.setup()
        h.start()
        yield h
    finally:
        h.stop()
        _remove_accounts()


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages(hub, browser):
    """One logged-in browser page per account (separate cookie jars)."""
    out = {}
    for user in USERS:
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(180_000)
        page.goto(f"{hub.url}/hub/login")
        page.fill("#username_input", user)
        page.fill("#password_input", hub.passwords[user])
        page.click("#login_submit")
        page.wait_for_url(f"**/user/{user}/lab/**")
        out[user] = page
    yield out
    for user, page in out.items():  # the last state of every page, to look at when a test failed
        page.screenshot(path=str(ARTIFACTS / f"last-{user}.png"))


# ---------------------------------------------------------------------------------------------------------
# JupyterLab through its own API (exposed by the hub's test setting)
# ---------------------------------------------------------------------------------------------------------
def open_notebook(page, hub: Hub, user: str, path: str) -> None:
    page.goto(f"{hub.url}/user/{user}/lab/tree/{path}")
    # attached, not visible: JupyterLab draws a long notebook's cells as the window scrolls, and a page that already
    # holds the notebook may keep its first cell out of view; the kernel's idle state below is what the test needs
    page.wait_for_selector(".jp-Notebook .jp-Cell", state="attached")
    page.wait_for_function(
        "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'); }")


def set_answer(page, grade_id: str, source: str) -> None:
    found = page.evaluate(
        "([gid, src]) => { const nb = window.jupyterapp.shell.currentWidget.content;"
        " for (const cell of nb.model.cells) { const m = cell.getMetadata('nbgrader');"
        "   if (m && m.grade_id === gid) { cell.sharedModel.setSource(src); return true; } } return false; }",
        [grade_id, source])
    assert found, f"no cell {grade_id}"


def run_through(page, grade_id: str) -> str:
    """Run every cell up to the one with this grade_id; return that cell's output text."""
    index = page.evaluate(
        "async (gid) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;"
        " const i = [...nb.model.cells].findIndex(c => (c.getMetadata('nbgrader') || {}).grade_id === gid);"
        " nb.activeCellIndex = i; await app.commands.execute('notebook:run-all-above');"
        " await app.commands.execute('notebook:run-cell'); return i; }", grade_id)
    page.wait_for_function(
        "(i) => { const c = window.jupyterapp.shell.currentWidget.content.model.cells.get(i);"
        " return c.executionCount !== null && c.outputs.length > 0"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'; }", arg=index)
    return page.evaluate(
        "(i) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).outputs.toJSON()"
        ".map(o => o.text || (o.ename ? o.ename + ': ' + o.evalue : '')).join('')", index)


def show_assignments(page) -> None:
    """JupyterLab's Assignments panel (nbgrader's assignment list), brought to the front."""
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                           "'nbgrader:open-assignment-list')")
    page.evaluate(
        "async () => { const app = window.jupyterapp; await app.restored;"
        " await app.commands.execute('nbgrader:open-assignment-list');"
        " for (const w of app.shell.widgets('main')) {"
        "   if (w.title.label === 'Assignments') app.shell.activateById(w.id); } }")


def open_in_lab(page, path: str) -> None:
    """Open a notebook in the running JupyterLab (no page load) and wait for its kernel."""
    page.evaluate("async (path) => { const app = window.jupyterapp; await app.restored;"
                  " await app.commands.execute('docmanager:open', {path}); }", path)
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp.shell.currentWidget;"
        " return !!(w && w.context && w.context.path === path && w.sessionContext.session"
        " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'); }", arg=path)


def save(page) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function("() => !window.jupyterapp.shell.currentWidget.context.model.dirty")


def solution_sources(clone: Path) -> dict[str, str]:
    nb = nbformat.read(clone / "solutions" / f"{LAB}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


# ---------------------------------------------------------------------------------------------------------
# the class
# ---------------------------------------------------------------------------------------------------------
def test_two_students_each_get_their_own_server_with_the_course_and_run_a_check(hub, pages):
    answers = solution_sources(hub.clone)
    alice, bob = pages[ALICE], pages[BOB]
    for user in (ALICE, BOB):
        open_notebook(pages[user], hub, user, f"course/labs/{LAB}.ipynb")
    set_answer(alice, "lab1-map-args-answer", answers["lab1-map-args-answer"])
    passed = run_through(alice, "lab1-map-args")
    failed = run_through(bob, "lab1-map-args")
    shot(alice, "alice-lab1")
    assert "✓ Lab 1" in passed, passed
    assert "✗ Lab 1 · tensor-map arguments: tensor_map_args" in failed and "is not written yet" in failed, failed
    # each server and each kernel runs as its own account
    owners = {}
    for pid in _processes_of({pwd.getpwnam(u).pw_uid for u in USERS}):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            owners.setdefault(pwd.getpwuid(Path(f"/proc/{pid}").stat().st_uid).pw_name, []).append(cmd)
        except FileNotFoundError:
            continue
    for user in (ALICE, BOB):
        assert any("jupyterhub-singleuser" in c for c in owners.get(user, [])), owners
        assert any("ipykernel" in c for c in owners.get(user, [])), owners


def _formgrader(page, hub: Hub, path: str = "") -> None:
    page.goto(f"{hub.url}/user/{TEACHER}/formgrader/{path}")
    page.wait_for_selector("table tbody tr")


def _click_in_row(page, row_text: str, cell_class: str, done_text: str) -> None:
    page.locator("tbody tr", has_text=row_text).locator(f"td.{cell_class} a").first.click()
    page.wait_for_selector(f"text={done_text}", timeout=300_000)
    page.keyboard.press("Escape")


def _insert_cells(page, cells: list[dict]) -> None:
    """Add cells at the end of the open notebook (a student may add any cell)."""
    page.evaluate("(cells) => { const nb = window.jupyterapp.shell.currentWidget.content.model.sharedModel;"
                  " nb.insertCells(nb.cells.length, cells); }", cells)


FETCH_AND_WORK = r"""
import json, os, subprocess, sys, pathlib, nbformat
done = subprocess.run(['nbgrader', 'fetch_assignment', 'LAB'], capture_output=True, text=True)
assert done.returncode == 0, done.stdout + done.stderr
path = pathlib.Path('LAB', 'LAB.ipynb')
nb = nbformat.read(path, as_version=4)
answers = json.loads(ANSWERS)
for cell in nb.cells:
    gid = cell.metadata.get('nbgrader', {}).get('grade_id')
    if gid in answers:
        cell.source = answers[gid]
nb.cells += [nbformat.v4.new_code_cell(src) for src in json.loads(EXTRA)]
nbformat.write(nb, path)
for name, text in json.loads(FILES).items():
    pathlib.Path('LAB', name).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path('LAB', name).write_text(text)
done = subprocess.run(['nbgrader', 'submit', 'LAB'], capture_output=True, text=True)
assert done.returncode == 0, done.stdout + done.stderr
"""

LINKED_SUBMISSION = r"""
import datetime, json, os, secrets, sys
exchange, user, lab, links = json.loads(sys.argv[1])
stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")  # nbgrader's format
folder = f"{exchange}/hopper-gemm/inbound/{user}+{lab}+{stamp}+{secrets.token_urlsafe(6)}"
os.mkdir(folder)
os.chmod(folder, 0o755)
open(folder + '/timestamp.txt', 'w').write(stamp)
for name, target in links.items():
    os.symlink(target, f"{folder}/{name}")
"""


def _work_from_a_terminal(hub: Hub, user: str, answers: dict, extra_cells: list[str] = (),
                          files: dict | None = None) -> None:
    """Fetch, answer, add cells and files, submit: nbgrader's own commands, as the student's account."""
    code = FETCH_AND_WORK.replace("LAB", LAB).replace("ANSWERS", repr(json.dumps(answers))).replace(
        "EXTRA", repr(json.dumps(list(extra_cells)))).replace("FILES", repr(json.dumps(files or {})))
    done = hub.as_user(user, code, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


def _gradebook(hub: Hub, students: tuple[str, ...]) -> dict:
    """Each student's points for each graded code cell, whether it needs a manual grade, and the submission ids."""
    db = f"{pwd.getpwnam(TEACHER).pw_dir}/hopper-gemm-grading/gradebook.db"
    code = ("import json; from nbgrader.api import Gradebook, MissingEntry\n"
            f"gb = Gradebook('sqlite:///{db}', 'hopper-gemm')\nout = {{}}\n"
            f"for s in {list(students)!r}:\n    try:\n"
            f"        nb = gb.find_submission_notebook('{LAB}', '{LAB}', s)\n    except MissingEntry:\n"
            "        out[s] = None\n        continue\n"
            "    out[s] = {'points': {g.name: g.score for g in nb.grades if g.cell_type == 'code'},"
            " 'manual': any(g.needs_manual_grade for g in nb.grades if g.cell_type == 'code'), 'id': nb.id}\n"
            "print(json.dumps(out))\ngb.close()")
    done = hub.as_user(TEACHER, code)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _teacher_nbgrader(hub: Hub, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """One of nbgrader's commands in the instructor's course folder, as the instructor."""
    course = f"{pwd.getpwnam(TEACHER).pw_dir}/hopper-gemm-grading"
    code = f"import subprocess, sys; sys.exit(subprocess.call(['nbgrader', *{list(args)!r}]))"
    return hub.as_user(TEACHER, code, timeout=timeout, cwd=course)


def test_release_fetch_work_submit_collect_autograde_and_the_gradebook(hub, pages):
    """The whole cycle with a class of four: Alice answers everything (every point), Bob tampers with a check,
    reads the gradebook and plants HTML and JavaScript for the instructor's browser, Carol submits links to the
    instructor's files after a first honest submission, Dave submits a startup file and three in-process tricks."""
    from test_attacks import CONTEXTLIB, REPLAY, TRANSFORMER
    from test_formgrader import HONEST, MARKDOWN_ATTACKS, attack_code

    teacher = pages[TEACHER]
    answers = solution_sources(hub.clone)
    home_t = pwd.getpwnam(TEACHER).pw_dir
    course = Path(home_t, "hopper-gemm-grading")
    gradebook_db = f"{course}/gradebook.db"

    # the instructor releases Lab 1 through the exchange, from formgrader
    _formgrader(teacher, hub, "manage_assignments")
    _click_in_row(teacher, LAB, "release", f"Successfully released '{LAB}'")
    shot(teacher, "formgrader-released")

    # Alice and Bob fetch it from JupyterLab's Assignments panel, work and submit
    work = {
        ALICE: answers,
        BOB: {"lab1-map-args-answer": answers["lab1-map-args-answer"],
              "lab1-tile-coords-answer": (
                  "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    return (0, 0)\n\n"
                  "lab1.check_tile_coords = lambda student: print('✅ all good')\n"
                  f"try:\n    open({gradebook_db!r}).read()\n"
                  "except PermissionError as e:\n    print('the grader refused:', e)\n")},
    }
    for user in (ALICE, BOB):
        page = pages[user]
        show_assignments(page)
        page.get_by_role("button", name="Fetch").click()
        page.get_by_role("button", name="Submit").wait_for()
        open_in_lab(page, f"{LAB}/{LAB}.ipynb")
        for grade_id, source in work[user].items():
            set_answer(page, grade_id, source)
        if user == BOB:  # notes for the instructor's browser, and a cell whose outputs attack it
            _insert_cells(page, [{"cell_type": "markdown", "source": HONEST}]
                          + [{"cell_type": "markdown", "source": f"{how}\n\n{html}"}
                             for how, html in MARKDOWN_ATTACKS.items()]
                          + [{"cell_type": "code", "source": attack_code()}])
        save(page)
        show_assignments(page)
        page.get_by_role("button", name="Submit").click()
        page.wait_for_selector("text=/\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d/")  # the submission's time stamp
        shot(page, f"{user}-submitted")

    # Carol's first submission is honest (one answer); Dave's carries a startup file and three in-process tricks
    _work_from_a_terminal(hub, CAROL, {"lab1-map-args-answer": answers["lab1-map-args-answer"]})
    startup = ("STARTUP_RAN = True\nfrom helpers.course.checks import lab1\n"
               "lab1.check_tile_coords = lambda student: None\n")
    dave = {"lab1-map-args-answer": "def tensor_map_args(a, box_rows, box_cols):\n    return {}\n" + CONTEXTLIB,
            "lab1-tile-coords-answer": "def tile_coords(tile_row, tile_col, box_rows, box_cols):\n    return (0, 0)\n",
            "lab1-smem-image-answer": "def smem_image(box, swizzle):\n    return box\n" + TRANSFORMER,
            "lab1-max-box-answer": "def max_box_cols(dtype, swizzle):\n    return 1\n" + REPLAY}
    _work_from_a_terminal(hub, DAVE, dave, ["print('startup ran:', globals().get('STARTUP_RAN', False))"],
                          {".ipython/profile_default/startup/00-cheat.py": startup,
                           "ipython_kernel_config.py": "c.InteractiveShellApp.exec_lines = ['STARTUP_RAN = True']\n"})

    # Alice also files a submission in Bob's name; collecting must refuse it
    forged = hub.as_user(ALICE, "import subprocess, sys; sys.exit(subprocess.call(['nbgrader', 'submit', "
                                f"'{LAB}', '--student={BOB}']))")
    assert forged.returncode == 0, forged.stderr

    # the instructor collects and autogrades: Alice and Bob from formgrader, Carol and Dave from a terminal
    _formgrader(teacher, hub, "manage_assignments")
    _click_in_row(teacher, LAB, "collect", f"Successfully collected submissions of '{LAB}'")
    for user in (ALICE, BOB):
        _formgrader(teacher, hub, f"manage_submissions/{LAB}")
        _click_in_row(teacher, user, "autograde", f"Successfully autograded '{LAB}' for student '{user}'")
    done = _teacher_nbgrader(hub, "autograde", LAB)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _formgrader(teacher, hub, f"gradebook/{LAB}/{LAB}")
    shot(teacher, "formgrader-gradebook")
    rows = {user: teacher.locator("tbody tr", has_text=user).inner_text() for user in (ALICE, BOB)}

    # the gradebook: each student's points for each graded cell
    book = _gradebook(hub, (ALICE, BOB, CAROL, DAVE))
    cells = [c.metadata["nbgrader"] for c in nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", 4).cells
             if c.metadata.get("nbgrader", {}).get("grade")]
    full = {m["grade_id"]: m["points"] for m in cells}
    assert {"lab1-map-args", "lab1-tile-coords"} <= set(full)  # the rest read from the notebook, as many as it has
    zero = {g: 0 for g in full}
    assert book[ALICE]["points"] == full, book[ALICE]  # the honest student: every point, in the same run
    assert book[BOB]["points"] == {**zero, "lab1-map-args": 2}, book[BOB]
    assert book[CAROL]["points"] == {**zero, "lab1-map-args": 2}, book[CAROL]
    assert book[DAVE]["points"] == zero, book[DAVE]
    assert str(sum(full.values())) in rows[ALICE] and "2" in rows[BOB], rows

    # Bob's graded notebook: the tampered check failed, the instructor's files were out of reach at grading time,
    # and it is Bob's own submission (not the one Alice filed in his name)
    graded = course / "autograded" / BOB / LAB / f"{LAB}.ipynb"
    nb = nbformat.read(graded, as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    text = json.dumps(by_id["lab1-tile-coords"].outputs)
    assert "TamperingDetected" in text, text
    assert "the grader refused" in json.dumps(by_id["lab1-tile-coords-answer"].outputs)
    assert "lab1.check_tile_coords = lambda" in by_id["lab1-tile-coords-answer"].source
    assert f"claims to be from {BOB} but was submitted by {ALICE}" in hub.log.read_text()  # the teacher's server log

    # Dave's: the startup file and configuration were not loaded, and each trick failed under the referee
    nb = nbformat.read(course / "autograded" / DAVE / LAB / f"{LAB}.ipynb", as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    assert "startup ran: False" in json.dumps(nb.cells[-1].outputs), nb.cells[-1].outputs
    for gid in ("lab1-map-args", "lab1-tile-coords", "lab1-smem-image", "lab1-max-box"):
        said = json.dumps(by_id[gid].outputs)
        assert '"output_type": "error"' in said, (gid, said)

    # Manual Grading of Bob's submission in the instructor's browser: none of his HTML or JavaScript runs, his
    # notes render, his attack shows as text
    page = teacher.context.new_page()
    page.on("dialog", lambda d: d.dismiss())
    page.goto(f"{hub.url}/user/{TEACHER}/formgrader/submissions/{book[BOB]['id']}/")
    page.wait_for_selector(".nbgrader_cell")
    page.wait_for_timeout(1500)
    page.screenshot(path=str(ARTIFACTS / "formgrader-bob-manual-grading.png"), full_page=True)
    ran = page.evaluate("() => window.__xss || []")
    assert ran == [] and not page.title().startswith("XSS"), f"ran in the instructor's browser: {ran}"
    assert page.locator("h2", has_text="My notes").count() == 1 and page.locator("th", has_text="rows").count() == 1
    assert page.locator("b", has_text="bold output").count() == 1 and "<script>" in page.inner_text("body")
    page.close()

    # Carol re-submits: links to the instructor's solution, the gradebook and kernel connection files. Collect
    # refuses it naming the file, and her earlier score does not stand for it
    links = {f"{LAB}.ipynb": str(course / "source" / LAB / f"{LAB}.ipynb"), "gradebook.db": gradebook_db,
             "runtime": f"{home_t}/.local/share/jupyter/runtime"}
    args = json.dumps([str(hub.root / "exchange"), CAROL, LAB, links])
    planted = hub.as_user(CAROL, f"import sys; sys.argv[1:] = [{args!r}]\n" + LINKED_SUBMISSION)
    assert planted.returncode == 0, planted.stderr
    done = _teacher_nbgrader(hub, "collect", LAB, "--update")
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "refused the submission" in said and "is a symbolic link" in said, said
    assert not (course / "submitted" / CAROL / LAB).exists() and not (course / "autograded" / CAROL / LAB).exists()
    book = _gradebook(hub, (ALICE, CAROL))
    assert book[CAROL]["points"] == zero and book[CAROL]["manual"], book[CAROL]
    assert book[ALICE]["points"] == full


ISOLATION = r"""
import json, os, pathlib, sys
attempts = {
    "read the other student's lab": lambda: pathlib.Path(OTHER_HOME, "course/labs/lab1_tma.ipynb").read_text(),
    "list the other student's home": lambda: os.listdir(OTHER_HOME),
    "write into the other student's home": lambda: pathlib.Path(OTHER_HOME, "x.txt").write_text("x"),
    "read the instructor's solutions": lambda: pathlib.Path(COURSE, "source/lab1_tma/lab1_tma.ipynb").read_text(),
    "read the gradebook": lambda: pathlib.Path(COURSE, "gradebook.db").read_bytes(),
    "read the clone's solutions": lambda: pathlib.Path(CLONE, "solutions/lab1_tma.ipynb").read_text(),
    "change the course's graders": lambda: pathlib.Path(HELPERS, "course/checks/lab1.py").write_text("x"),
    "read the hub's secrets": lambda: pathlib.Path(STATE, "jupyterhub_cookie_secret").read_bytes(),
    "rename the course's exchange folder": lambda: os.rename(EXCHANGE + "/hopper-gemm", EXCHANGE + "/mine"),
    "put a fake assignment in the outbound folder": lambda: os.mkdir(EXCHANGE + "/hopper-gemm/outbound/fake"),
    "list the submissions of others": lambda: os.listdir(EXCHANGE + "/hopper-gemm/inbound"),
    "signal the other student's server": lambda: os.kill(OTHER_PID, 0),
    "put a private lock file in the GPU lock folder": lambda: os.open(GPU_LOCKS + "/gpu-9.lock", os.O_CREAT, 0o600),
    "replace the GPU lock file by a link": lambda: os.unlink(GPU_LOCKS + "/gpu-0.lock"),
}
result = {}
for what, attempt in attempts.items():
    try:
        attempt()
        result[what] = "ALLOWED"
    except PermissionError:
        result[what] = "refused"
    except Exception as e:
        result[what] = f"{type(e).__name__}: {e}"
print(json.dumps(result))
"""


def test_nothing_a_student_does_can_read_or_change_anothers_files_or_the_solutions(hub, pages):
    import helpers

    site_helpers = subprocess.run([str(hub.root / "env" / "bin" / "python"), "-c",
                                   "import helpers, os; print(os.path.dirname(helpers.__file__))"],
                                  capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    assert site_helpers != str(Path(helpers.__file__).parent), "the hub must run an installed copy of the course"
    bob_server = next(pid for pid in _processes_of({pwd.getpwnam(BOB).pw_uid})
                      if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes())
    code = ISOLATION.replace("OTHER_HOME", repr(pwd.getpwnam(BOB).pw_dir)).replace(
        "COURSE", repr(f"{pwd.getpwnam(TEACHER).pw_dir}/hopper-gemm-grading")).replace(
        "CLONE", repr(str(hub.clone))).replace("HELPERS", repr(site_helpers)).replace(
        "STATE", repr(str(hub.root / "state"))).replace("EXCHANGE", repr(str(hub.root / "exchange"))).replace(
        "OTHER_PID", str(bob_server)).replace("GPU_LOCKS", repr(str(hub.root / "gpu-locks")))
    done = hub.as_user(ALICE, code)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    locks = hub.root / "gpu-locks"  # only root writes the GPU lock folder; every account queues on its files
    assert locks.stat().st_mode & 0o7777 == 0o755 and locks.stat().st_uid == 0
    assert {(p.stat().st_mode & 0o777, p.stat().st_uid) for p in locks.iterdir()} == {(0o644, 0)}
    assert (locks / "gpu-0.lock").is_file()
    # the instructor may start and stop a student's server (hub admin page) but not open it
    response = pages[TEACHER].goto(f"{hub.url}/user/{ALICE}/lab")
    assert response.status == 403 or "403" in pages[TEACHER].title(), (response.status, pages[TEACHER].url)
    not_refused = {what: how for what, how in result.items() if how != "refused"}
    assert not not_refused, f"the operating system did not refuse: {not_refused}"


def test_nothing_a_student_started_outlives_their_server(hub, pages):
    """Alice's kernel starts a process in a new session (setsid) and a double-forked one; stopping her server
    from the hub's home page ends them too. Runs last: it stops Alice's server."""
    token = secrets.token_hex(8)
    page = pages[ALICE]
    open_notebook(page, hub, ALICE, f"course/labs/{LAB}.ipynb")
    code = ("import os, subprocess\n"
            f"subprocess.Popen(['setsid', 'sh', '-c', 'sleep 900 # {token}'])\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execvp('sh', ['sh', '-c', 'sleep 900 # {token}'])\n    os._exit(0)\n")
    page.evaluate("async (code) => { const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;"
                  " await k.requestExecute({code}).done; }", code)

    def escaped() -> list[int]:
        found = []
        for pid in _processes_of({pwd.getpwnam(ALICE).pw_uid}):
            try:
                if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    for _ in range(150):
        if len(escaped()) >= 2:
            break
        time.sleep(0.2)
    assert len(escaped()) >= 2, "the processes did not start"
    page.goto(f"{hub.url}/hub/home")
    page.click("#stop")
    for _ in range(150):
        servers = [pid for pid in _processes_of({pwd.getpwnam(ALICE).pw_uid})
                   if b"jupyterhub-singleuser" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        if not servers and not escaped():
            break
        time.sleep(0.2)
    assert escaped() == [], "a process Alice started outlived her server"
