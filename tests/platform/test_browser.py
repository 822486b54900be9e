"""A real browser: JupyterLab headless on localhost, Debian's Chromium driven by Playwright.

1. The first lesson runs top to bottom, draws a plotly widget, and no news pop-up asks anything (the course's
   JupyterLab settings, as `make lab` writes them).
2. Every widget of the course (tests/platform/widget_gallery.py) in a notebook column exactly 900 px wide: each
   is screenshotted (test-artifacts/browser/<name>.png), no figure or control runs past the column, no button
   label is cut, no title sits under plotly's modebar, every figure drew its traces (the barrier stepper's bars
   with their categories and three colours), and the interactive parts answer (a quiz graded on Enter, a button
   redrawing a figure). Only the widgets the selected tests look at are shown: ``-k tile_grid`` runs one.
3. Every lesson and lab, Run All as the course ships it (labs with their stubs), with another process keeping a
   core busy (``COURSE_BROWSER_BUSY=0``: without): the kernel's connection never drops, every cell runs and those
   that show something show it, every figure draws its traces in the course's style (not plotly's default: its
   logo, the blue-grey plotting area), and no traceback shows outside a check's report. ``-k 04_pipelines`` runs
   one notebook; each takes one to eight minutes on a busy 2-core machine.

Every Playwright step has a time limit (:data:`STEP_MS`; ``page.evaluate`` has none of its own, so scripts run
through :func:`_js`), and a page that stops answering is replaced by a fresh one once before the test fails, with
a screenshot of each try in test-artifacts/browser/. Skipped (with the reason) where Chromium is not installed; CI
installs it (.ci/run).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from widget_gallery import GALLERY, gallery_notebook

from helpers.course import labserver, workspace
from helpers.course.widgets import barrier

ROOT = Path(__file__).resolve().parents[2]
FIRST_LESSON = "lessons/00_big_picture.ipynb"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "browser"
COLUMN = 900  # px: the width of a notebook's output area the widgets must fit
STEP_MS = 60_000  # the longest one Playwright step (a click, a screenshot, a script) may take
RUN_ALL_S = int(os.environ.get("COURSE_BROWSER_TIMEOUT", 240))  # Run All of one notebook

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
]


#: url of a running JupyterLab -> the folder it serves
SERVED: dict[str, Path] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    # serve a copy of the lessons: JupyterLab autosaves a notebook it ran, and committed notebooks stay clean
    course = tmp / "course"
    shutil.copytree(ROOT / "lessons", course / "lessons")
    shutil.copytree(ROOT / "labs", course / "labs")
    nbformat.write(gallery_notebook(), course / "gallery.ipynb")
    # the course's JupyterLab settings, as `make lab` writes them into the environment (here into a copy)
    overrides = workspace.jupyterlab_settings(tmp / "env").parent
    # and its server's (no WebSocket pings, the kept kernel connection), as `make lab` writes them
    labserver.write_server_config(tmp / "config" / "jupyter_server_config.json")
    # the test's own setting: every cell attached to the page (not only those scrolled to), to measure them all
    user = tmp / "user-settings" / "@jupyterlab" / "notebook-extension"
    user.mkdir(parents=True)
    (user / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTER_RUNTIME_DIR=str(tmp / "rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp / "ws"), JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"))
    log = open(tmp / "jupyterlab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}", "--LabApp.expose_app_in_browser=True",
         f"--LabApp.app_settings_dir={overrides}", "--ServerApp.disable_check_xsrf=True", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    SERVED[url] = course
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("JupyterLab exited:\n" + (tmp / "jupyterlab.log").read_text())
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start in 60 s:\n" + (tmp / "jupyterlab.log").read_text())
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


KERNEL_IDLE = ("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
               " return !!(w && w.sessionContext && w.sessionContext.session"
               " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'); }")
ALL_RAN = ("() => { const nb = window.jupyterapp.shell.currentWidget.node;"
           " const ps = [...nb.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];"
           " return ps.length > 0 && ps.every(p => /\\[\\d+\\]/.test(p.textContent)); }")


def _js(page, script: str, arg: Any = None, timeout: int = STEP_MS) -> Any:
    """``page.evaluate`` with a time limit: the script's value, through ``wait_for_function``, whose limit
    Playwright keeps outside the page (so a page that stopped answering fails the step instead of hanging it)."""
    wrapped = f"(arg) => {{ const v = ({script})(arg); return {{v: v === undefined ? null : v}}; }}"
    return page.wait_for_function(wrapped, arg=arg, timeout=timeout, polling=100).json_value()["v"]


def _screenshot(page, name: str) -> None:
    try:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False, timeout=15_000)
    except Exception as exc:  # noqa: BLE001 - a page that stopped answering takes no picture either
        warnings.warn(f"no screenshot {name}.png: {exc}", stacklevel=2)


def _fresh_page(browser, name: str, viewport: dict, setup: Callable[[Any], Any]) -> tuple[Any, Any]:
    """A new page (its own context, every step limited to STEP_MS) on which ``setup(page)`` succeeded: tried twice,
    the first failure screenshotted and the page replaced, the second screenshotted and raised."""
    for attempt in (1, 2):
        context = browser.new_context(viewport=viewport)
        context.set_default_timeout(STEP_MS)
        context.set_default_navigation_timeout(STEP_MS)
        page = context.new_page()
        try:
            return page, setup(page)
        except Exception as exc:
            _screenshot(page, f"failed-{name}-try{attempt}")
            context.close()
            if attempt == 2:
                raise
            warnings.warn(f"{name}: {type(exc).__name__} on the first page; trying once more on a fresh one",
                          stacklevel=2)
    raise AssertionError("unreachable")


def _open_and_run(page, url: str, token: str, path: str) -> None:
    # a workspace of its own: JupyterLab would otherwise reopen the notebooks of an earlier page beside it
    page.goto(f"{url}/lab/workspaces/{Path(path).stem}/tree/{path}?token={token}&reset", timeout=90_000)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    _js(page, "() => { window.jupyterapp.shell.collapseLeft(); }")
    _js(page, "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(ALL_RAN, timeout=RUN_ALL_S * 1000)


def test_first_lesson_runs_and_draws_a_plotly_widget(jupyterlab, browser):
    url, token = jupyterlab

    def run(page):
        _open_and_run(page, url, token, FIRST_LESSON)
        page.wait_for_selector(".js-plotly-plot .main-svg", state="attached", timeout=60_000)

    page, _ = _fresh_page(browser, "lesson00", {"width": 1400, "height": 1000}, run)
    try:
        _js(page, "() => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " const i = nb.widgets.findIndex(c => c.node.querySelector('.js-plotly-plot'));"
                  " nb.activeCellIndex = i; nb.scrollToItem(i, 'center'); }")
        page.wait_for_timeout(1500)
        box = page.locator(".js-plotly-plot").first.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100, f"the plotly figure has no size: {box}"
        errors = page.locator('[data-mime-type="application/vnd.jupyter.error"]')
        error_texts = [errors.nth(i).inner_text()[:500] for i in range(errors.count())]
        toasts = page.locator(".Toastify__toast").all_inner_texts()
    finally:
        _screenshot(page, "lesson00")
        page.context.close()
    assert not error_texts, "cells raised in the browser:\n" + "\n---\n".join(error_texts)
    assert not [t for t in toasts if "news" in t.lower()], f"JupyterLab asked about news: {toasts}"


def test_run_all_goes_on_past_a_failing_check_in_a_lab(jupyterlab, browser):
    """Lab 1 as a new student has it: Run All runs every cell (the ✗ reports included), not only those up to the
    first failing check."""
    url, token = jupyterlab
    page, _ = _fresh_page(browser, "lab1", {"width": 1400, "height": 1000},
                          lambda page: _open_and_run(page, url, token, "labs/lab1_tma.ipynb"))
    try:
        report = _js(page, "() => { const cells = window.jupyterapp.shell.currentWidget.content.widgets"
                           ".filter(c => c.model.type === 'code');"
                           " return {cells: cells.length, ran: cells.filter(c => c.model.executionCount).length,"
                           " failed: cells.filter(c => c.node.querySelector('.jp-OutputArea').innerText"
                           ".includes('✗')).length,"
                           " last: cells[cells.length - 1].node.querySelector('.jp-OutputArea').innerText}; }")
    finally:
        _screenshot(page, "lab1_run_all")
        page.context.close()
    assert report["ran"] == report["cells"], report
    assert report["failed"] >= 10 and "✗" in report["last"], report


@pytest.fixture(scope="module")
def busy_core():
    """A second process keeping one core busy all along (a student's laptop always does something else); off with
    COURSE_BROWSER_BUSY=0."""
    if os.environ.get("COURSE_BROWSER_BUSY", "1") == "0":
        yield None
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


#: the plotting area's colour in plotly's own template ("plotly"); the course's figures are white
PLOTLY_DEFAULT_BG = "#E5ECF6"
COURSE_NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for d in ("lessons", "labs") for p in (ROOT / d).glob("*.ipynb"))

# every code cell after Run All: its prompt, its outputs' text and kinds, and each plotly figure as drawn
RAN_CELLS = """() => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  return nb.widgets.map((c, i) => {
    if (c.model.type !== 'code') return null;
    const area = c.node.querySelector('.jp-OutputArea');
    const outs = [...area.querySelectorAll('.jp-OutputArea-output')];
    return {i, count: c.model.executionCount, prompt: c.node.querySelector('.jp-InputPrompt').textContent,
            outputs: c.model.outputs.length, text: area.innerText.slice(0, 3000),
            errors: outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.error')
                        .map(o => o.innerText.slice(0, 1500)),
            stderr: outs.filter(o => o.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr')
                        .map(o => o.innerText.slice(0, 1500)),
            plots: [...area.querySelectorAll('.js-plotly-plot')].map(gd => ({
              traces: (gd._fullData || []).length,
              logo: !gd._context || gd._context.displaylogo !== false,
              template: !!(gd.layout && gd.layout.template),
              bg: gd._fullLayout && gd._fullLayout.plot_bgcolor,
            }))};
  }).filter(c => c);
}"""

# the kernel's connection, watched from before Run All to the end: every status it passed through
WATCH_KERNEL = """() => {
  const ctx = window.jupyterapp.shell.currentWidget.sessionContext;
  window.__kernelSeen = [];
  const k = ctx.session.kernel;
  k.connectionStatusChanged.connect((_, s) => window.__kernelSeen.push('connection ' + s));
  k.statusChanged.connect((_, s) => { if (['unknown', 'dead', 'restarting', 'autorestarting'].includes(s))
                                         window.__kernelSeen.push('status ' + s); });
}"""


def _expects_output(source: str) -> bool:
    """Whether a cell shows something when it runs: it prints, displays or shows, or its last statement is an
    expression (other than a docstring-like constant or an assignment)."""
    import ast

    if re.search(r"\bprint\(|\bdisplay\(|\.show\(|\.display\(", source):
        return True
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False  # a cell the student completes; its error is what it shows
    return bool(body) and isinstance(body[-1], ast.Expr) and not isinstance(body[-1].value, ast.Constant)


@pytest.mark.parametrize("path", COURSE_NOTEBOOKS, ids=[Path(p).stem for p in COURSE_NOTEBOOKS])
def test_every_notebook_runs_clean_under_load(jupyterlab, browser, busy_core, path):
    """Run All of one lesson or lab (as the course ships it: labs with their stubs) while another process keeps a
    core busy: the kernel stays connected, every cell runs and the cells that show something show it, every figure
    draws its traces in the course's style (not plotly's default: logo, no template), and no traceback shows outside
    a check's report. ``-k 04_pipelines`` runs one notebook."""
    url, token = jupyterlab
    name = Path(path).stem

    def run(page):
        page.goto(f"{url}/lab/workspaces/{name}/tree/{path}?token={token}&reset", timeout=90_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        page.wait_for_function(KERNEL_IDLE, timeout=120_000)
        _js(page, "() => { window.jupyterapp.shell.collapseLeft(); }")
        _js(page, WATCH_KERNEL)
        _js(page, "() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.wait_for_function(ALL_RAN, timeout=RUN_ALL_S * 1000)
        page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000)
        drawn = ("() => [...window.jupyterapp.shell.currentWidget.node.querySelectorAll('.js-plotly-plot')]"
                 ".every(gd => gd._fullData && gd._fullData.length > 0)")
        try:
            page.wait_for_function(drawn, timeout=30_000, polling=200)
        except Exception:  # noqa: BLE001 - the figures without traces are reported below
            pass
        page.wait_for_timeout(500)

    page, _ = _fresh_page(browser, f"runall-{name}", {"width": 1400, "height": 1000}, run)
    try:
        cells = _js(page, RAN_CELLS)
        seen = _js(page, "() => window.__kernelSeen")
    finally:
        _screenshot(page, f"runall-{name}")
        page.context.close()
    nb = nbformat.read(ROOT / path, as_version=4)
    sources = [c.source for c in nb.cells]
    problems = [f"the kernel's connection dropped: {seen}"] if seen else []
    for c in cells:
        where = f"cell {c['i']} ({sources[c['i']].strip().splitlines()[0][:60] if sources[c['i']].strip() else ''})"
        if not c["count"]:
            problems.append(f"{where} did not run: prompt {c['prompt']!r}")
        elif _expects_output(sources[c["i"]]) and not c["outputs"]:
            problems.append(f"{where} ran but shows nothing")
        for k, plot in enumerate(c["plots"]):
            if not plot["traces"]:
                problems.append(f"{where}: figure {k} is empty (no traces drawn)")
            if plot["logo"] or not plot["template"] or plot["bg"] == PLOTLY_DEFAULT_BG:
                problems.append(f"{where}: figure {k} is plotly's default (logo {plot['logo']}, template "
                                f"{plot['template']}, background {plot['bg']}), not in the course's style")
        shown = c["errors"] + [t for t in c["stderr"] if "Traceback" in t]
        for text in shown:
            if path.startswith("lessons/") or "Traceback" in text or re.search(r'File "[^"]+", line', text):
                problems.append(f"{where} shows a traceback:\n{text[:600]}")
    assert not problems, f"{path}:\n" + "\n".join(problems)


# what the page knows about one output: sizes, overflow, plotly's own view of each figure
MEASURE = """(i) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
  const out = cell.node.querySelector('.jp-OutputArea-output');
  const R = out.getBoundingClientRect();
  const rect = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const sel = '.jupyter-widgets, .widget-button, .widget-toggle-button, .widget-inline-hbox, .widget-hbox, '
            + '.widget-vbox, .js-plotly-plot .main-svg';
  const past = [...out.querySelectorAll(sel)].filter(e => e.getBoundingClientRect().right > R.right + 1)
               .map(e => e.className.baseVal !== undefined ? e.className.baseVal : e.className);
  const cut = [...out.querySelectorAll('.widget-button, .widget-toggle-button')]
               .filter(b => b.scrollWidth > b.clientWidth + 1).map(b => b.textContent);
  const plots = [...out.querySelectorAll('.js-plotly-plot')].map(gd => {
    const fl = gd._fullLayout || {};
    const titles = [...gd.querySelectorAll('.gtitle, .annotation, .g-xtitle, .g-x2title, .g-ytitle')].map(rect)
                   .filter(r => r[2] > r[0]);
    return {
      width: gd.querySelector('.main-svg').getBoundingClientRect().width,
      traces: (gd._fullData || []).map(t => ({type: t.type, visible: t.visible, x: t.x && [...t.x].slice(0, 8),
                                              colors: t.marker && t.marker.color && [].concat(t.marker.color)})),
      heatmaps: gd.querySelectorAll('.hm image').length,
      bars: [...gd.querySelectorAll('.bars .point path')].map(p => getComputedStyle(p).fill),
      xticks: Object.fromEntries(((fl._subplots || {}).xaxis || []).map(id => [
        id, [...gd.querySelectorAll('.' + id + 'tick text')].map(t => t.textContent)])),
      colorbars: gd.querySelectorAll('.colorbar').length,
      legends: gd.querySelectorAll('.legend .traces').length,
      yticks: Object.fromEntries(((fl._subplots || {}).yaxis || []).map(id => [
        id, [...gd.querySelectorAll('.' + id + 'tick text')].map(t => t.textContent)])),
      cbticks: [...gd.querySelectorAll('.colorbar .cbaxis text, .colorbar .ycbaxis text')].map(t => t.textContent),
      texts: [...gd.querySelectorAll('.main-svg text')].filter(t => !t.closest('.hoverlayer'))
               .map(t => ({s: t.textContent, r: rect(t)})).filter(t => t.s.trim() && t.r[2] > t.r[0]),
      svg: rect(gd.querySelector('.main-svg')),
      areas: [...gd.querySelectorAll('.nsewdrag')].map(rect),
      ranges: {x: fl.xaxis && fl.xaxis.range, y: fl.yaxis && fl.yaxis.range},
      titles,
    };
  });
  const area = cell.node.querySelector('.jp-OutputArea');
  return {width: out.clientWidth, overflow: out.scrollWidth - out.clientWidth, past, cut, plots,
          text: area.innerText,
          errors: area.querySelectorAll('[data-mime-type="application/vnd.jupyter.error"]').length};
}"""

MODEBAR = """(i) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
  return [...cell.node.querySelectorAll('.js-plotly-plot')].map(gd => {
    const m = gd.querySelector('.modebar'); if (!m) return null;
    const r = m.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; });
}"""


# every plotly figure of one output has drawn its traces: a FigureWidget first draws an empty figure, then its data
# once the widget's state has arrived, which on a busy machine can be seconds after Run All ends
DRAWN = """(i) => {
  const out = window.jupyterapp.shell.currentWidget.content.widgets[i].node.querySelector('.jp-OutputArea');
  return [...out.querySelectorAll('.js-plotly-plot')].every(gd => gd._fullData && gd._fullData.length > 0);
}"""


def _wait_drawn(page, i: int, timeout_ms: int = 30_000) -> None:
    """Wait until the figures of cell `i` have drawn their traces (at most `timeout_ms`: past it the measurement is
    taken as it is, and the checks say what is missing), then a moment for their last relayout."""
    try:
        page.wait_for_function(DRAWN, arg=i, timeout=timeout_ms, polling=100)
    except Exception as exc:  # noqa: BLE001 - the checks on the measurement report it
        warnings.warn(f"cell {i}: figures without traces after {timeout_ms} ms ({type(exc).__name__})", stacklevel=2)
    page.wait_for_timeout(300)


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


#: the widgets each gallery test that is not parametrized by widget looks at
GALLERY_NEEDS = {"test_barrier_stepper_draws_its_first_state_and_answers_buttons": ["barrier_stepper"],
                 "test_swizzle_axes_are_whole_chunks_and_the_bank_load_has_a_scale": ["swizzle_32B", "swizzle_128B"],
                 "test_tensormap_builder_zooms_to_the_box": ["tensormap_builder"],
                 "test_quiz_grades_on_enter_and_a_new_answer_replaces_the_verdict": ["quiz"],
                 "test_a_failed_check_shows_its_report_once_without_a_traceback": ["check_report"]}


def _gallery_selected(session) -> list[str]:
    """The widgets the selected tests look at (``-k tile_grid`` runs the gallery with the tile grid alone); every
    widget when a selected test looks at them all."""
    wanted: set[str] = set()
    for item in session.items:
        if "gallery" not in getattr(item, "fixturenames", ()):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "name" in params:
            wanted.add(params["name"])
        elif item.originalname in GALLERY_NEEDS:
            wanted.update(GALLERY_NEEDS[item.originalname])
        else:
            return list(GALLERY)
    return [n for n in GALLERY if n in wanted] or list(GALLERY)


@pytest.fixture(scope="module")
def gallery(jupyterlab, browser, request):
    """The gallery notebook run in a 900-px column: name -> (page, cell index, measurements). Only the widgets the
    selected tests look at are in it."""
    url, token = jupyterlab
    console: list[str] = []
    names = _gallery_selected(request.session)
    if names != list(GALLERY):
        nbformat.write(gallery_notebook(names), SERVED[url] / "gallery.ipynb")

    def measure_all(page) -> tuple[dict, dict]:
        console.clear()
        page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
        try:
            _open_and_run(page, url, token, "gallery.ipynb")
        except Exception as exc:
            raise AssertionError(f"the gallery did not run: {exc}\nthe page's errors: {console[-10:]}") from exc
        # make the output column exactly 900 px: the notebook's padding and prompts take the rest of the window
        width = _js(page, "() => document.querySelector('.jp-OutputArea-output').clientWidth")
        page.set_viewport_size({"width": 1400 - (width - COLUMN), "height": 2400})
        page.wait_for_timeout(2500)
        cells = _js(page, "() => window.jupyterapp.shell.currentWidget.content.widgets.map("
                          "c => (c.model.getMetadata && c.model.getMetadata('tags')) || [])")
        index = {name: cells.index([f"gallery-{name}"]) for name in names}
        results = {}
        for name in names:
            i = index[name]
            _js(page, "(i) => { window.jupyterapp.shell.currentWidget.content.widgets[i].node.scrollIntoView(); }", i)
            _wait_drawn(page, i)
            output = page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea").first
            output.screenshot(path=str(ARTIFACTS / f"{name}.png"))
            results[name] = _js(page, MEASURE, i)
        return index, results

    page, (index, results) = _fresh_page(browser, "gallery", {"width": 1400, "height": 2400}, measure_all)
    yield page, index, results, console
    page.context.close()


@pytest.mark.parametrize("name", list(GALLERY))
def test_every_widget_fits_a_900px_column(gallery, name):
    _, _, results, _ = gallery
    r = results[name]
    assert abs(r["width"] - COLUMN) <= 2, f"the output column is {r['width']} px, not {COLUMN}"
    assert r["overflow"] <= 0 and not r["past"], f"{name} runs past the {COLUMN}-px column: {r['past'][:5]}"
    assert not r["cut"], f"{name}: button labels cut short: {r['cut']}"
    for plot in r["plots"]:
        assert plot["width"] <= COLUMN, f"{name}: a figure {plot['width']} px wide"
        assert plot["traces"] and all(t["visible"] is not False for t in plot["traces"][:1]), f"{name}: no traces"
        heat = sum(t["type"] == "heatmap" and t["visible"] is not False for t in plot["traces"])
        assert plot["heatmaps"] >= heat, f"{name}: {heat} heatmaps, {plot['heatmaps']} drawn"
    if name != "check_report":
        assert r["errors"] == 0, f"{name} raised:\n{r['text'][:800]}"


@pytest.mark.parametrize("name", [n for n in GALLERY if n not in ("quiz", "check_report")])
def test_the_modebar_never_covers_a_title(gallery, name):
    page, index, results, _ = gallery
    i = index[name]
    plots = page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".js-plotly-plot")
    for k in range(plots.count()):
        plots.nth(k).hover(position={"x": 60, "y": 120})
        page.wait_for_timeout(200)
        bar = _js(page, MODEBAR, i)[k]
        titles = _js(page, MEASURE, i)["plots"][k]["titles"]
        assert bar is not None
        hits = [t for t in titles if _overlap(bar, t)]
        assert not hits, f"{name}: the modebar {bar} covers titles at {hits}"


def test_barrier_stepper_draws_its_first_state_and_answers_buttons(gallery):
    page, index, results, _ = gallery
    now = _first_plot(results, "barrier_stepper")
    bars = now["traces"][1]
    assert bars["type"] == "bar" and bars["x"] == list(barrier.NOW_BARS)
    assert len(set(now["bars"])) == 3, f"the three bars are not three colours: {now['bars']}"
    assert now["xticks"]["x2"] == bars["x"]
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index["barrier_stepper"])
    cell.get_by_role("button", name="arrive.expect_tx(bytes)").click()
    page.wait_for_function(
        "(i) => { const gd = window.jupyterapp.shell.currentWidget.content.widgets[i].node"
        ".querySelector('.js-plotly-plot'); return gd && gd._fullData[1].y[1] === 8; }",
        arg=index["barrier_stepper"], timeout=10_000)


def test_swizzle_axes_are_whole_chunks_and_the_bank_load_has_a_scale(gallery):
    _, _, results, _ = gallery
    plot = _first_plot(results, "swizzle_32B")
    assert plot["xticks"]["x"] == ["0", "1"], plot["xticks"]
    assert _first_plot(results, "swizzle_128B")["colorbars"] == 1


def test_tensormap_builder_zooms_to_the_box(gallery):
    _, _, results, _ = gallery
    plot = _first_plot(results, "tensormap_builder")
    x0, x1 = plot["ranges"]["x"]
    assert x1 - x0 < 8192 / 16, f"the 64×64 box in an 8192² tensor is not zoomed to: x range {x0}..{x1}"
    assert plot["traces"][3]["visible"] is True  # the whole tensor, beside


def test_quiz_grades_on_enter_and_a_new_answer_replaces_the_verdict(gallery):
    page, index, _, _ = gallery
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index["quiz"])
    box = cell.locator("input[type=text]")
    box.fill("128")
    box.press("Enter")
    cell.get_by_text("✗").wait_for(timeout=10_000)
    box.fill("16,384")
    box.press("Enter")
    cell.get_by_text("✓").wait_for(timeout=10_000)
    text = cell.locator(".jp-OutputArea").inner_text()
    assert "✗" not in text and text.count("✓") == 1, text
    cell.locator(".jp-OutputArea").screenshot(path=str(ARTIFACTS / "quiz_answered.png"))


def test_a_failed_check_shows_its_report_once_without_a_traceback(gallery):
    _, _, results, _ = gallery
    text = results["check_report"]["text"]
    assert text.count("✗ Lab 0 · a failing check: bytes of a 64×64 bf16 box") == 1
    assert "Traceback" not in text and "File " not in text and "helpers/" not in text


def test_the_page_logged_no_errors(gallery):
    console = gallery[3]
    assert not [m for m in console if "plotly" in m.lower() or "widget" in m.lower()], console


def _first_plot(results: dict, name: str) -> dict:
    """The widget's first plotly figure as measured in the page; a widget that drew none fails in words."""
    got = results.get(name)
    if got is None:
        pytest.fail(f"could not measure {name}: the gallery never showed it (it raised, or its cell did not run)")
    if not got.get("plots"):
        pytest.fail(f"could not measure {name}: it drew no plotly figure in the page (an error in the widget, or a "
                    "figure holding values plotly cannot draw, e.g. NaN); see the gallery's screenshot")
    return got["plots"][0]


def _overlapping_texts(plot: dict, gap: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of a figure's texts closer than ``gap`` px (or overlapping): labels that run into each other."""
    texts = plot["texts"]
    pairs = []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            ra, rb = a["r"], b["r"]
            inside = ra[0] >= rb[0] and ra[2] <= rb[2] and ra[1] >= rb[1] and ra[3] <= rb[3]
            if not inside and ra[0] < rb[2] + gap and rb[0] < ra[2] + gap and ra[1] < rb[3] and rb[1] < ra[3]:
                pairs.append((a["s"][:40], b["s"][:40]))
    return pairs


@pytest.mark.parametrize("name", [n for n in GALLERY if n not in ("quiz", "check_report")])
def test_no_label_runs_into_another_or_past_the_figure(gallery, name):
    """Every text a figure draws (titles, ticks, legends, cell labels) keeps clear of the others and inside the
    figure: no "…waits here for pa│group 1 waits…", no "1213" from registers 12 and 13."""
    _, _, results, _ = gallery
    for k, plot in enumerate(results[name]["plots"]):
        hits = _overlapping_texts(plot)
        assert not hits, f"{name}, figure {k}: labels run into each other: {hits[:6]}"
        x0, y0, x1, y1 = plot["svg"]
        cut = [t["s"][:40] for t in plot["texts"] if t["r"][0] < x0 - 1 or t["r"][2] > x1 + 1
               or t["r"][1] < y0 - 1 or t["r"][3] > y1 + 1]
        assert not cut, f"{name}, figure {k}: labels cut at the figure's edge: {cut[:6]}"
        short = [t["s"] for t in plot["texts"] if t["s"].endswith("…") and len(t["s"].strip("… ")) < 4]
        assert not short, f"{name}, figure {k}: labels plotly cut short to fit: {short[:6]}"


#: figures whose colours stand for categories or numbers: each explains them with a legend or a colour bar
EXPLAINED = ("streamk", "bank_figure", "pingpong", "scheduler", "striped", "roofline", "swizzle_128B")


@pytest.mark.parametrize("name", EXPLAINED)
def test_coloured_figures_explain_their_colours(gallery, name):
    _, _, results, _ = gallery
    plot = _first_plot(results, name)
    assert plot["legends"] + plot["colorbars"] > 0, f"{name}: colours with neither a legend nor a colour bar"


#: axes that count whole things (steps, groups, phases, waves): (widget, axis or "colorbar")
WHOLE_AXES = (("seqbar_stepper", "x"), ("seqbar_stepper", "x2"), ("seqbar_stepper", "y2"),
              ("barrier_stepper", "x"), ("barrier_stepper", "y"), ("scheduler", "colorbar"),
              ("bank_figure", "x"), ("fragment_explorer_n64", "x"))


@pytest.mark.parametrize("name, axis", WHOLE_AXES)
def test_whole_number_axes_have_whole_number_ticks(gallery, name, axis):
    _, _, results, _ = gallery
    plot = _first_plot(results, name)
    if axis == "colorbar":
        ticks = plot["cbticks"]
    else:
        ticks = (plot["xticks"] if axis.startswith("x") else plot["yticks"]).get(axis, [])
    assert ticks, f"{name}: no ticks on {axis}"
    numbers = [t.replace("−", "-") for t in ticks if t.strip()]
    assert all(re.fullmatch(r"-?\d+", t) for t in numbers), f"{name}: {axis} ticks {numbers}"


@pytest.mark.parametrize("name", [n for n in GALLERY if n not in ("quiz", "check_report")])
def test_the_modebar_never_covers_a_plotting_area(gallery, name):
    """The modebar shows on hover, top right: it sits in the top margin, above every subplot (the epilogue race's
    sub-tile boxes were under it)."""
    page, index, results, _ = gallery
    plots = page.locator(".jp-Notebook .jp-Cell").nth(index[name]).locator(".js-plotly-plot")
    for k in range(plots.count()):
        plots.nth(k).hover(position={"x": 60, "y": 120})
        page.wait_for_timeout(200)
        bar = _js(page, MODEBAR, index[name])[k]
        areas = _js(page, MEASURE, index[name])["plots"][k]["areas"]
        hits = [a for a in areas if _overlap(bar, a)]
        assert not hits, f"{name}: the modebar {bar} covers plotting areas {hits}"
