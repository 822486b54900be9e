"""Stored HTML and JavaScript in a submission against the instructor's browser: formgrader's page for Manual
Grading, rendered by the exporter formgrader makes (nbgrader's ``formgrade`` template), opened in Chromium.

Without the course's setting (helpers.course.autograde.formgrader) each attack runs, so they are real; with it none
does, the page still shows the honest content (a heading, a table, bold text) and the attack as text.
The same attack goes through the whole hub in tests/hub/test_hub.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from helpers.course.autograde import formgrader

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"]


def _mark(name: str, w: str = "window") -> str:
    """JavaScript that leaves a trace of an attack that ran: a marker on the window ``w`` and in its title."""
    return f"{w}.__xss=({w}.__xss||[]).concat('{name}');{w}.document.title='XSS {name}'"


#: each attack, where a student puts it: (markdown of an added cell, or an output's mimetype and data)
MARKDOWN_ATTACKS = {
    "img onerror": f'<img src="nothing-here.png" onerror="{_mark("img")}">',
    "svg onload": f'<svg onload="{_mark("svg")}"></svg>',
    "script in markdown": f"<script>{_mark('md-script')}</script>",
}
OUTPUT_ATTACKS = {
    "script in an HTML output": ("text/html", f"<b>bold output</b><script>{_mark('out-script')}</script>"),
    "JavaScript output": ("application/javascript", _mark("js-output")),
    "iframe srcdoc": ("text/html", f"<iframe srcdoc=\"<script>{_mark('iframe', 'parent')}</script>\"></iframe>"),
    "markdown output": ("text/markdown", f'<img src="none.png" onerror="{_mark("md-output")}">'),
}
HONEST = "## My notes\n\nThe **swizzle** pattern, `a<b` in code.\n\n| tile | rows |\n|---|---|\n| A | 64 |\n"


def attack_cells() -> list:
    """The cells a hostile student adds to a lab: honest notes, each markdown attack, a cell with each output."""
    cells = [nbformat.v4.new_markdown_cell(HONEST)]
    cells += [nbformat.v4.new_markdown_cell(f"Attack: {how}\n\n{html}\n") for how, html in MARKDOWN_ATTACKS.items()]
    outputs = [nbformat.v4.new_output("display_data", data={mime: data, "text/plain": how})
               for how, (mime, data) in OUTPUT_ATTACKS.items()]
    cells.append(nbformat.v4.new_code_cell("show()", outputs=outputs))
    return cells


def attack_code() -> str:
    """A code cell that makes every output attack when it runs (at grading time outputs are made afresh)."""
    lines = ["from IPython.display import display"]
    for how, (mime, data) in OUTPUT_ATTACKS.items():
        lines.append(f"display({{{mime!r}: {data!r}, 'text/plain': {how!r}}}, raw=True)")
    return "\n".join(lines)


def render(nb, safe: bool) -> str:
    """The page formgrader serves for a submission (its exporter, template and resources)."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    c = Config()
    c.HTMLExporter.template_name = "formgrade"  # what nbgrader's FormgradeExtension sets
    c.HTMLExporter.extra_template_basedirs = [handlers.template_path]
    if safe:
        formgrader.configure(c)
    resources = {"assignment_id": "lab1_tma", "notebook_id": "lab1_tma", "submission_id": "x", "index": 0,
                 "total": 1, "base_url": "/nowhere", "student": "s", "last_name": "", "first_name": "",
                 "notebook_path": "lab1_tma.ipynb"}
    html, _ = HTMLExporter(config=c).from_notebook_node(nb, resources=resources)
    return html


def ran(browser, page_file: Path) -> tuple[list[str], object]:
    """Open the page; the attacks that left their marker, and the page (for what it shows)."""
    page = browser.new_context().new_page()
    page.set_default_timeout(30_000)
    page.on("dialog", lambda d: d.dismiss())
    # the page's static files (jQuery …) are not served here; nbconvert wraps a JavaScript output in $(…)
    page.add_init_script("window.$ = window.jQuery = () => ({});")
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)  # late handlers (an image that fails to load, an iframe)
    return page.evaluate("() => window.__xss || []"), page


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS, timeout=60_000)
        yield b
        b.close()


pytestmark = pytest.mark.browser


def test_a_submissions_html_and_javascript_do_not_run_in_formgrader_and_honest_content_renders(browser, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = attack_cells()
    unsafe = tmp_path / "unsafe.html"
    unsafe.write_text(render(nb, safe=False))
    markers, _ = ran(browser, unsafe)
    assert set(markers) == {"img", "svg", "md-script", "out-script", "js-output", "iframe", "md-output"}, \
        f"not real attacks: without the setting only {markers} ran"

    safe = tmp_path / "safe.html"
    safe.write_text(render(nb, safe=True))
    markers, page = ran(browser, safe)
    assert markers == [] and not page.title().startswith("XSS"), f"ran in the instructor's browser: {markers}"
    assert page.locator("h2", has_text="My notes").count() == 1
    assert page.locator("th", has_text="rows").count() == 1 and page.locator("td", has_text="64").count() == 1
    assert page.locator("strong", has_text="swizzle").count() == 1
    assert page.locator("b", has_text="bold output").count() == 1
    assert "<script>" in page.inner_text("body"), "the attack is shown to the instructor as text"


def test_the_cleaner_keeps_plain_markup_and_drops_handlers_styles_ids_and_the_forms_classes():
    clean = formgrader.clean_html
    assert clean('<p class="highlight">x <a href="https://x.org">y</a></p>') == \
        '<p class="highlight">x <a href="https://x.org">y</a></p>'
    assert clean('<a href="javascript:alert(1)">y</a>') == "<a>y</a>"
    assert clean('<img src="a.png" onerror="x()" style="x">') == '<img src="a.png">'
    assert clean('<div id="statusmessage" class="btn full-credit">x</div>') == "<div>x</div>"
    assert clean("<form><input name=score></form>") == "&lt;form&gt;&lt;input name=score&gt;&lt;/form&gt;"
