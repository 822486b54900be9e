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
USERS = (TEACHER, ALICE, BOB)
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
    for user in (*USERS, GRADER):
        try:
            uids.add(pwd.getpwnam(user).pw_uid)
        except KeyError:
            pass
    for pid in _processes_of(uids):  # the test accounts' own processes, by id
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for user in (*USERS, GRADER):
        subprocess.run(["userdel", "--remove", user], capture_output=True)
    Path(f"/etc/sudoers.d/hopper-hub-{GRADER}").unlink(missing_ok=True)


class Hub:
    def __init__(self, base: Path):
        self.base = base
        self.root = base / "hub"
        self.port = _free_port_block()
        self.url = f"http://127.0.0.1:{self.port}"
        self.passwords = {u: secrets.token_urlsafe(12) for u in USERS}
        self.log = ARTIFACTS / "jupyterhub.log"
        self.proc: subprocess.Popen | None = None

    def setup(self) -> None:
        self.clone = _private_clone(self.base / "private")
        pwfile = self.base / "private" / "passwords"
        pwfile.write_text("".join(f"{u}:{p}\n" for u, p in self.passwords.items()))
        env = dict(os.environ, HOPPER_HUB_ROOT=str(self.root), HOPPER_HUB_PORT=str(self.port),
                   HOPPER_HUB_INSTRUCTOR=TEACHER, HOPPER_HUB_STUDENTS=f"{ALICE} {BOB}", HOPPER_HUB_GRADER=GRADER,
                   HOPPER_HUB_PASSWORDS=str(pwfile), HOPPER_HUB_TEST="1")
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

    def as_user(self, user: str, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run Python as one of the class's accounts, in its home, with the hub's environment."""
        home = pwd.getpwnam(user).pw_dir
        env = {"HOME": home, "PATH": f"{self.root / 'env' / 'bin'}:/usr/bin:/bin", "USER": user, "LANG": "C.UTF-8"}
        python = str(self.root / "env" / "bin" / "python")
        return subprocess.run([shutil.which("runuser"), "-u", user, "--", python, "-c", code], cwd=home, env=env,
                              capture_output=True, text=True, timeout=timeout)


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
    page.wait_for_selector(".jp-Notebook .jp-Cell")
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


def test_release_fetch_work_submit_collect_autograde_and_the_gradebook(hub, pages):
    teacher = pages[TEACHER]
    answers = solution_sources(hub.clone)
    gradebook_db = f"{pwd.getpwnam(TEACHER).pw_dir}/hopper-gemm-grading/gradebook.db"

    # the instructor releases Lab 1 through the exchange, from formgrader
    _formgrader(teacher, hub, "manage_assignments")
    _click_in_row(teacher, LAB, "release", f"Successfully released '{LAB}'")
    shot(teacher, "formgrader-released")

    # each student fetches it from JupyterLab's Assignments panel, works and submits
    work = {
        ALICE: {"lab1-map-args-answer": answers["lab1-map-args-answer"],
                "lab1-tile-coords-answer": answers["lab1-tile-coords-answer"]},
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
        save(page)
        show_assignments(page)
        page.get_by_role("button", name="Submit").click()
        page.wait_for_selector("text=/\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d/")  # the submission's time stamp
        shot(page, f"{user}-submitted")

    # Alice also files a submission in Bob's name; collecting must refuse it
    forged = hub.as_user(ALICE, "import subprocess, sys; sys.exit(subprocess.call(['nbgrader', 'submit', "
                                f"'{LAB}', '--student={BOB}']))")
    assert forged.returncode == 0, forged.stderr

    # the instructor collects and autogrades, from formgrader
    _formgrader(teacher, hub, "manage_assignments")
    _click_in_row(teacher, LAB, "collect", f"Successfully collected submissions of '{LAB}'")
    for user in (ALICE, BOB):
        _formgrader(teacher, hub, f"manage_submissions/{LAB}")
        _click_in_row(teacher, user, "autograde", f"Successfully autograded '{LAB}' for student '{user}'")
    _formgrader(teacher, hub, f"gradebook/{LAB}/{LAB}")
    shot(teacher, "formgrader-gradebook")
    rows = {user: teacher.locator("tbody tr", has_text=user).inner_text() for user in (ALICE, BOB)}

    # the gradebook: each student's points for each graded cell
    gradebook = hub.as_user(TEACHER, (
        "import json; from nbgrader.api import Gradebook\n"
        f"gb = Gradebook('sqlite:///{gradebook_db}', 'hopper-gemm')\n"
        f"print(json.dumps({{s: {{g.name: g.score for g in gb.find_submission_notebook('{LAB}', '{LAB}', s).grades"
        f" if g.cell_type == 'code'}} for s in {[ALICE, BOB]!r}}}))\ngb.close()"))
    assert gradebook.returncode == 0, gradebook.stderr
    points = json.loads(gradebook.stdout.strip().splitlines()[-1])
    graded = [c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", 4).cells
              if c.metadata.get("nbgrader", {}).get("grade")]
    assert {"lab1-map-args", "lab1-tile-coords"} <= set(graded)  # the rest read from the notebook, as many as it has
    zero = {g: 0 for g in graded if g not in ("lab1-map-args", "lab1-tile-coords")}
    assert points[ALICE] == {"lab1-map-args": 2, "lab1-tile-coords": 2, **zero}, points
    assert points[BOB] == {"lab1-map-args": 2, "lab1-tile-coords": 0, **zero}, points
    assert "4" in rows[ALICE] and "2" in rows[BOB], rows

    # Bob's graded notebook: the tampered check failed, the instructor's files were out of reach at grading time,
    # and it is Bob's own submission (not the one Alice filed in his name)
    graded = Path(pwd.getpwnam(TEACHER).pw_dir, "hopper-gemm-grading", "autograded", BOB, LAB, f"{LAB}.ipynb")
    nb = nbformat.read(graded, as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    text = json.dumps(by_id["lab1-tile-coords"].outputs)
    assert "TamperingDetected" in text, text
    assert "the grader refused" in json.dumps(by_id["lab1-tile-coords-answer"].outputs)
    assert "lab1.check_tile_coords = lambda" in by_id["lab1-tile-coords-answer"].source
    assert f"claims to be from {BOB} but was submitted by {ALICE}" in hub.log.read_text()  # the teacher's server log


ISOLATION = r"""
import json, os, pathlib, sys
attempts = {
    "read the other student's lab": lambda: pathlib.Path(OTHER_HOME, "course/labs/lab1_tma.ipynb").read_text(),
    "list the other student's home": lambda: os.listdir(OTHER_HOME),
    "write into the other student's home": lambda: pathlib.Path(OTHER_HOME, "x.txt").write_text("x"),
    "read the instructor's solutions": lambda: pathlib.Path(COURSE, "source/lab1_tma/lab1_tma.ipynb").read_text(),
    "read the gradebook": lambda: pathlib.Path(COURSE, "gradebook.db").read_bytes(),
    "read the clone's solutions": lambda: pathlib.Path(CLONE, "solutions/lab1_tma.ipynb").read_text(),
    "change the course's graders": lambda: pathlib.Path(HELPERS, "checks/lab1.py").write_text("x"),
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
    assert [(p.name, p.stat().st_mode & 0o777, p.stat().st_uid) for p in locks.iterdir()] == [("gpu-0.lock", 0o644, 0)]
    # the instructor may start and stop a student's server (hub admin page) but not open it
    response = pages[TEACHER].goto(f"{hub.url}/user/{ALICE}/lab")
    assert response.status == 403 or "403" in pages[TEACHER].title(), (response.status, pages[TEACHER].url)
    not_refused = {what: how for what, how in result.items() if how != "refused"}
    assert not not_refused, f"the operating system did not refuse: {not_refused}"
