"""Formgrader shows students' notebooks without running their HTML or JavaScript.

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

What is not allowed is shown as text (escaped), so the instructor sees what the student wrote. Configure it in
the course's ``nbgrader_config.py`` with :func:`configure` (``hub/setup.sh`` does).
"""

from __future__ import annotations

import re
from typing import Any

import bleach

__all__ = ["clean_html", "markdown2html", "configure", "TAGS"]

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
    if name == "href":
        return tag == "a"
    if name == "src":
        return tag == "img"
    return name in _PLAIN


def clean_html(html: Any) -> str:
    """The student's HTML with only :data:`TAGS`, harmless attributes (no ``on…`` handlers, no ``style``, no
    ``id``) and links to ``http``, ``https`` and ``mailto``; anything else escaped, shown as text."""
    text = html.decode() if isinstance(html, bytes) else str(html)
    return bleach.clean(text, tags=TAGS, attributes=_allowed, protocols={"http", "https", "mailto"},
                        strip=False, strip_comments=True)


def markdown2html(source: str) -> str:
    """Markdown as nbconvert renders it (math kept for MathJax), then :func:`clean_html`."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return clean_html(markdown2html_mistune(source))


def configure(c: Any) -> None:
    """Set formgrader's exporter (and nbgrader's feedback) to clean every piece of a student's HTML; ``c`` is the
    config object of an ``nbgrader_config.py``."""
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"markdown2html": f"{__name__}.markdown2html", "clean_html": f"{__name__}.clean_html"}
