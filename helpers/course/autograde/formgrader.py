"""Formgrader shows students' notebooks inert: nothing a student wrote runs, loads or styles itself in the
instructor's browser.

nbgrader's formgrader renders each submission for Manual Grading with nbconvert's ``HTMLExporter`` and its own
``formgrade`` template, in the instructor's browser, under the instructor's login. Left as it is, a markdown cell's
``<img onerror=…>`` and an output's ``<script>`` run there, as the instructor. The formgrade page needs its own
inline scripts (the grading form), so a Content-Security-Policy forbidding inline script would stop the page
itself; instead every piece of the student's HTML goes through :func:`clean_html` (bleach, an allow-list):

- ``HTMLExporter.sanitize_html = True``: outputs' ``text/html`` and ``text/markdown`` are cleaned, and
  ``application/javascript`` outputs are left out (nbconvert's template);
- the ``markdown2html`` filter is :func:`markdown2html`: markdown rendered by nbconvert's renderer, then cleaned
  (formgrade's template renders markdown cells with ``markdown2html`` and no sanitizer of its own);
- the ``clean_html`` filter is :func:`clean_html`: nbconvert's allows no headings, paragraphs or table heads, and
  would show an honest cell's markup as text.

- every output goes through :class:`InertOutputs` first (a preprocessor, run before the template): plain text
  stays; HTML is cleaned; PNG, JPEG and GIF images stay when their data is base64, their metadata reduced to whole
  numbers of width and height (the template writes them into the page unquoted); every other type (SVG, markdown,
  LaTeX, JavaScript, JSON, widgets, PDF, anything unknown) is shown as text, labelled with its type. Cell metadata
  is reduced to nbgrader's (with a plain grade id) and plain tags, attachments and the notebook's widget state are
  dropped;
- images load from ``data:`` only: a remote image would tell a student's server that the instructor is looking,
  with the instructor's cookies where the servers share an origin.
- the page carries a Content-Security-Policy (:func:`csp`, as a ``<meta>`` in the page's head through the course's
  ``formgrade`` template, :data:`TEMPLATES`): scripts from formgrader's own static files, the page's own three
  inline scripts and two event handlers, by their hashes, nothing else (no other inline script, no ``eval``, no
  remote script such as MathJax from a CDN: math shows as TeX); images from the page's ``data:`` only; no frames,
  objects, or forms posting elsewhere.

What is not allowed is shown as text (escaped), so the instructor sees what the student wrote. Configure it in
the course's ``nbgrader_config.py`` with :func:`configure` (``hub/setup.sh`` does).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from pathlib import Path
from typing import Any

import bleach
from nbconvert.preprocessors import Preprocessor

__all__ = ["clean_html", "markdown2html", "configure", "TAGS", "InertOutputs", "csp", "TEMPLATES"]

#: the course's formgrade template (formgrader's own, with the Content-Security-Policy in its head)
TEMPLATES = Path(__file__).resolve().parent / "templates"

#: the tags a student's markdown or HTML output may use
TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "small", "span",
    "strong", "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul",
})
#: classes of syntax highlighting (pygments' short token names, ``highlight``, ``language-…``) and pandas'
#: tables; no other class, so a student's element cannot pass for a piece of the grading form
_CLASS = re.compile(r"^(highlight(-[\w-]+)?|language-[\w+.-]+|[a-z]{1,3}\d?|dataframe|anchor-link)$")
_PLAIN = {"title", "alt", "width", "height", "colspan", "rowspan", "align", "start", "border", "open"}


def _allowed(tag: str, name: str, value: str) -> bool:
    if name == "class":
        return all(_CLASS.match(c) for c in value.split())
    if name == "href":  # http, https, mailto (bleach's protocol list lets data: through for images only)
        return tag == "a" and not value.strip().lower().startswith("data:")
    if name == "src":
        return tag == "img" and value.startswith(_DATA_IMAGE)
    return name in _PLAIN


#: the only images a page shows: inline data of a raster type (never a URL the page would fetch)
_DATA_IMAGE = ("data:image/png;base64,", "data:image/jpeg;base64,", "data:image/gif;base64,")


def clean_html(html: Any) -> str:
    """The student's HTML with only :data:`TAGS`, harmless attributes (no ``on…`` handlers, no ``style``, no
    ``id``) and links to ``http``, ``https`` and ``mailto``; anything else escaped, shown as text."""
    text = html.decode() if isinstance(html, bytes) else str(html)
    return bleach.clean(text, tags=TAGS, attributes=_allowed, protocols={"http", "https", "mailto", "data"},
                        strip=False, strip_comments=True)


def markdown2html(source: str) -> str:
    """Markdown as nbconvert renders it (math kept for MathJax), then :func:`clean_html`."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return clean_html(markdown2html_mistune(source))


#: output types shown as they are (after the checks below); every other one is shown as text
IMAGES = ("image/png", "image/jpeg", "image/gif")
_GRADE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_TAG = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else repr(value)


def _is_base64(value: Any) -> bool:
    try:
        base64.b64decode(re.sub(r"\s+", "", _text(value)), validate=True)
        return True
    except (binascii.Error, ValueError):
        return False


def inert_output(output: Any) -> Any:
    """One output as formgrader may show it (see :class:`InertOutputs`)."""
    from nbformat.notebooknode import NotebookNode, from_dict

    kind = output.get("output_type")
    if kind == "stream":
        return from_dict({"output_type": "stream", "name": "stderr" if output.get("name") == "stderr" else "stdout",
                          "text": _text(output.get("text", ""))})
    if kind == "error":
        lines = output.get("traceback") or [f"{output.get('ename', '')}: {output.get('evalue', '')}"]
        return from_dict({"output_type": "error", "ename": _text(output.get("ename", "")),
                          "evalue": _text(output.get("evalue", "")), "traceback": [_text(x) for x in lines]})
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    as_text = [_text(data["text/plain"])] if "text/plain" in data else []
    for mime, value in data.items():
        if mime == "text/plain":
            continue
        if mime == "text/html":
            kept[mime] = clean_html(_text(value))
        elif mime in IMAGES and _is_base64(value):
            kept[mime] = re.sub(r"\s+", "", _text(value))
            size = (output.get("metadata") or {}).get(mime) or {}
            sizes = {k: size[k] for k in ("width", "height") if type(size.get(k)) is int and 0 < size[k] < 10000}
            if sizes:
                metadata[mime] = sizes
        else:
            as_text.append(f"[{mime}, shown as text]\n{_text(value)}")
    if as_text:
        kept["text/plain"] = "\n".join(as_text)
    out = {"output_type": "display_data" if kind != "execute_result" else kind, "data": kept, "metadata": metadata}
    if kind == "execute_result":
        count = output.get("execution_count")
        out["execution_count"] = count if type(count) is int else None
    return NotebookNode(from_dict(out))


class InertOutputs(Preprocessor):
    """Every output, cell and notebook field the formgrade page shows, reduced to what is inert (module doc)."""

    def preprocess(self, nb: Any, resources: Any) -> tuple[Any, Any]:
        nb.metadata.pop("widgets", None)
        for key in [k for k in nb.metadata if k not in ("kernelspec", "language_info")]:
            nb.metadata.pop(key)
        for cell in nb.cells:
            cell.pop("attachments", None)
            meta = {}
            grading = cell.metadata.get("nbgrader")
            if isinstance(grading, dict) and _GRADE_ID.match(str(grading.get("grade_id", ""))):
                meta["nbgrader"] = {k: v for k, v in grading.items()
                                    if type(v) in (bool, int, float) or k in ("grade_id", "cell_type", "checksum")
                                    and isinstance(v, str) and _GRADE_ID.match(v)}
            tags = cell.metadata.get("tags")
            if isinstance(tags, list):
                meta["tags"] = [t for t in tags if isinstance(t, str) and _TAG.match(t)]
            cell.metadata = meta
            if cell.cell_type == "code":
                cell.outputs = [inert_output(o) for o in cell.get("outputs", []) if isinstance(o, dict)]
                if type(cell.get("execution_count")) is not int:
                    cell.execution_count = None
            if not isinstance(cell.get("source"), str):
                cell.source = _text(cell.get("source", ""))
        if isinstance(resources, dict) and "submission_id" in resources:  # formgrader's page (not the feedback)
            resources["formgrade_csp"] = csp(resources)
        return nb, resources


def _inline_scripts(resources: dict) -> list[str]:
    """The formgrade page's own inline scripts for these resources (its header and navigation macros): the script
    elements' text, then its two event handlers' (showing and hiding the student's name)."""
    from jinja2 import Environment, FileSystemLoader
    from nbgrader.server_extensions.formgrader import handlers

    env = Environment(loader=FileSystemLoader(str(Path(handlers.template_path) / "formgrade")))
    macros = env.get_template("formgrade_macros.html.j2").module
    page = str(macros.header(resources)) + str(macros.nav(resources))
    return re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S) + re.findall(r'\son\w+="([^"]*)"', page)


def csp(resources: dict) -> str:
    """The Content-Security-Policy of a formgrade page with these resources (module doc)."""
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
                      for s in _inline_scripts(resources) if s.strip())
    return ("default-src 'none'; "
            f"script-src 'self' 'unsafe-hashes' {hashes}; style-src 'self' 'unsafe-inline'; img-src data:; "
            "font-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-src 'none'; "
            "object-src 'none'")


def configure(c: Any) -> None:
    """Set formgrader's exporter (and nbgrader's feedback) to clean every piece of a student's HTML; ``c`` is the
    config object of an ``nbgrader_config.py``."""
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.preprocessors = [f"{__name__}.InertOutputs"]
    # the exporter's page with the policy first in its head on formgrader's page (the feedback's page unchanged); a
    # path, so its folder joins the template paths whatever else sets them (nbgrader's feedback does)
    c.HTMLExporter.template_file = str(TEMPLATES / "formgrade" / "hopper-formgrade.html.j2")
    c.HTMLExporter.filters = {"markdown2html": f"{__name__}.markdown2html", "clean_html": f"{__name__}.clean_html"}
