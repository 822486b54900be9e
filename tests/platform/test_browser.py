"""A real browser: JupyterLab headless on localhost, Debian's Chromium driven by Playwright.

Opens the first lesson, runs all cells, asserts that no cell raised and that a plotly widget rendered, and
saves a screenshot under test-artifacts/. Skipped (with the reason) where Chromium is not installed; CI
installs it (.ci/run).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_LESSON = "lessons/00_big_picture.ipynb"
CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts" / "browser"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    # serve a copy of the lessons: JupyterLab autosaves a notebook it ran, and committed notebooks stay clean
    course = tmp_path / "course"
    shutil.copytree(ROOT / "lessons", course / "lessons")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"))
    log = open(tmp_path / "jupyterlab.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.disable_check_xsrf=True", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("JupyterLab exited:\n" + (tmp_path / "jupyterlab.log").read_text())
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start in 60 s:\n" + (tmp_path / "jupyterlab.log").read_text())
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_first_lesson_runs_and_draws_a_plotly_widget(jupyterlab):
    from playwright.sync_api import sync_playwright

    url, token = jupyterlab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        console_errors: list[str] = []
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        try:
            page.goto(f"{url}/lab/tree/{FIRST_LESSON}?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            # wait for the kernel, then run every cell through JupyterLab's own command
            page.wait_for_function(
                "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                " return !!(w && w.sessionContext && w.sessionContext.session"
                " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'); }",
                timeout=120_000,
            )
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            # done when no prompt shows [*] and every code cell has an execution count
            page.wait_for_function(
                "() => { const ps = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];"
                " return ps.length > 0 && ps.every(p => /\\[\\d+\\]/.test(p.textContent)); }",
                timeout=240_000,
            )
            # attached first: JupyterLab may not paint cells outside the viewport until they are scrolled to
            page.wait_for_selector(".js-plotly-plot .main-svg", state="attached", timeout=60_000)
            plot = page.locator(".js-plotly-plot").first
            # scroll through JupyterLab's own API: a windowed notebook hides the cells it has not scrolled to
            page.evaluate(
                "async () => { const nb = window.jupyterapp.shell.currentWidget.content;"
                " const i = nb.widgets.findIndex(c => c.node.querySelector('.js-plotly-plot'));"
                " nb.activeCellIndex = i; await nb.scrollToItem(i, 'center'); }"
            )
            page.wait_for_timeout(1500)
            box = plot.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 100, f"the plotly figure has no size: {box}"
            errors = page.locator('[data-mime-type="application/vnd.jupyter.error"]')
            error_texts = [errors.nth(i).inner_text()[:500] for i in range(errors.count())]
            plots = page.locator(".js-plotly-plot").count()
        finally:
            page.screenshot(path=str(ARTIFACTS / "lesson00.png"), full_page=False)
            browser.close()
    assert not error_texts, "cells raised in the browser:\n" + "\n---\n".join(error_texts)
    assert plots >= 1, "no plotly figure rendered"
