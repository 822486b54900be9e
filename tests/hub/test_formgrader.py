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
    assert clean('<img src="a.png" onerror="x()" style="x">') == "<img>"  # nothing fetched: data: images only
    assert clean(f'<img src="data:image/png;base64,{PNG}">') == f'<img src="data:image/png;base64,{PNG}">'
    assert clean('<img src="data:image/svg+xml;base64,PHN2Zz4=">') == "<img>"
    assert clean('<a href="data:text/html,x">y</a>') == "<a>y</a>"
    assert clean('<div id="statusmessage" class="btn full-credit">x</div>') == "<div>x</div>"
    assert clean("<form><input name=score></form>") == "&lt;form&gt;&lt;input name=score&gt;&lt;/form&gt;"


# ------------------------------------------------------------------------------------------ every output type
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")


def every_output_type(listener: str) -> list:
    """Cells whose outputs are every nbformat output type, each hostile, with hostile metadata; ``listener`` is a
    URL of this test's own server (a request to it: the page fetched something a student chose)."""
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" onload="{_mark("svg-output")}">'
           f'<script>{_mark("svg-script")}</script></svg>')
    outputs = [
        nbformat.v4.new_output("display_data", data={"image/svg+xml": svg, "text/plain": "svg"}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "png"},
                               metadata={"image/png": {"width": f'1" onload="{_mark("png-width")}',
                                                       # the template writes the height unquoted
                                                       "height": "1 onload=window.__xss=(window.__xss||[])"
                                                                 ".concat('png-height')"}}),
        nbformat.v4.new_output("display_data", data={"image/png": f'x" onerror="{_mark("png-data")}'}),
        nbformat.v4.new_output("display_data", data={"image/jpeg": PNG}, metadata={"unconfined": True}),
        nbformat.v4.new_output("display_data", data={"text/latex": r"$\href{javascript:alert(1)}{x}$"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": _mark("js-output-2")}),
        nbformat.v4.new_output("display_data", data={
            "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2, "version_minor": 0},
            "text/plain": "widget"}),
        nbformat.v4.new_output("display_data",
                               data={"application/json": {"a": f"</script><script>{_mark('json')}</script>"}}),
        nbformat.v4.new_output("display_data", data={"text/html": f'<img src="{listener}/html-img">'
                                                                  f'<a href="{listener}/link">a link</a>'}),
        nbformat.v4.new_output("display_data", data={"text/markdown": f"![x]({listener}/md-img)"}),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"<img src=x onerror=\"{_mark('plain')}\">"},
                               execution_count=1),
        nbformat.v4.new_output("stream", name="stdout", text=f"<script>{_mark('stream')}</script>"),
        nbformat.v4.new_output("error", ename="<b>E</b>", evalue=f"<img src=x onerror=\"{_mark('evalue')}\">",
                               traceback=[f"<script>{_mark('traceback')}</script>"]),
    ]
    code = nbformat.v4.new_code_cell("show()", outputs=outputs)
    code.metadata["tags"] = [f'"><img src=x onerror="{_mark("tag")}">', "ok-tag"]
    graded = nbformat.v4.new_code_cell("x = 1")
    graded.metadata["nbgrader"] = {"grade": True, "solution": False, "points": 1, "schema_version": 3,
                                   "grade_id": f'"><img src=x onerror="{_mark("grade-id")}">'}
    md = nbformat.v4.new_markdown_cell(f"![remote]({listener}/md-cell) and math $\\href{{javascript:x}}{{y}}$")
    md.attachments = {"a.svg": {"image/svg+xml": svg}}
    return [md, code, graded]


WIDGET_STATE = {"application/vnd.jupyter.widget-state+json": {
    "version_major": 2, "version_minor": 0,
    "state": {"m1": {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
                     "model_module_version": "2.0.0",
                     "state": {"value": f"<img src=x onerror=\"{_mark('widget')}\">"}}}}}


@pytest.fixture
def listener():
    """A server on this machine's loopback that records every request (what a page fetched)."""
    import http.server
    import threading

    seen: list[str] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the standard library's name
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_every_output_type_with_hostile_metadata_is_inert_and_the_page_has_a_strict_policy(browser, tmp_path,
                                                                                         listener):
    url, seen = listener
    nb = nbformat.v4.new_notebook()
    nb.cells = every_output_type(url)
    nb.metadata["widgets"] = WIDGET_STATE
    unsafe = tmp_path / "unsafe.html"
    unsafe.write_text(render(nb, safe=False))
    markers, _ = ran(browser, unsafe)
    assert {"png-height", "grade-id", "js-output-2"} <= set(markers) and any("img" in p for p in seen), \
        f"not real attacks: without the setting {markers} ran and {seen} were fetched"

    seen.clear()
    html = render(nb, safe=True)
    safe = tmp_path / "safe.html"
    safe.write_text(html)
    markers, page = ran(browser, safe)
    assert markers == [] and not page.title().startswith("XSS"), f"ran in the instructor's browser: {markers}"
    assert seen == [], f"the page fetched what a student chose: {seen}"
    assert page.evaluate("() => window.submission_id") == "x", "the page's own inline script must still run"
    policy = page.locator('meta[http-equiv="Content-Security-Policy"]').get_attribute("content")
    assert "'unsafe-inline'" not in policy.split("style-src")[0] and "img-src data:;" in policy
    assert "frame-src 'none'" in policy and "object-src 'none'" in policy and "cdnjs" not in policy
    assert page.evaluate("() => typeof window.MathJax") == "undefined", "MathJax from a CDN must not load: math as TeX"
    body = page.inner_text("body")
    for shown in ("[image/svg+xml, shown as text]", "[text/latex, shown as text]", "[application/javascript, "
                  "shown as text]", "[application/vnd.jupyter.widget-view+json, shown as text]", "<script>"):
        assert shown in body, f"{shown!r} is not shown to the instructor as text"
    assert page.locator("img[src^='data:image/png']").count() >= 1, "an honest image still shows"


def test_an_inline_script_the_cleaner_missed_would_not_run_under_the_policy(browser, tmp_path):
    """The policy alone: a script that got into the page past every cleaner is refused by the browser."""
    nb = nbformat.v4.new_notebook()
    html = render(nb, safe=True).replace("</body>", f"<script>{_mark('missed')}</script>"
                                                   f"<img src=x onerror=\"{_mark('missed-handler')}\"></body>")
    page_file = tmp_path / "missed.html"
    page_file.write_text(html)
    markers, page = ran(browser, page_file)
    assert markers == [] and page.evaluate("() => window.submission_id") == "x"
    # the page's own handlers (show and hide the student's name) still run: toggle_name is called on a click
    page.evaluate("() => { window.toggle_name = (on) => { window.__toggled = on; }; }")
    page.locator("span.name-hidden").first.dispatch_event("click")
    assert page.evaluate("() => window.__toggled") is True
