"""Two mistakes every beginner makes, as one sentence each instead of a traceback (in a Jupyter kernel; installed
when the course's grading is imported, as every lab's first cell does):

- a cell run before the cells it needs (a fresh kernel, after a restart, a check before its answer cell): the
  ``NameError`` says "run the cells above first (Run → Run All Above)" and names the cell that sets the name (its
  first line, under its heading), read from the notebook the kernel runs;
- a demo cell that calls a function still holding its stub: the ``NotImplementedError`` becomes the one line a
  check gives (``✗ smem_image is not written yet …``).

Any other error, and a ``NotImplementedError`` raised outside the student's cells, keeps IPython's traceback.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["install", "name_error", "stub_error", "defining_cell"]

FAIL = "✗"


def _cells(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text()).get("cells", [])
    except (OSError, ValueError):
        return []


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return bool(re.search(rf"^\s*(def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*=", source, re.M))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(t)):
                    return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
        if isinstance(node, ast.For) and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.target)):
            return True
    return False


def defining_cell(path: Path, name: str) -> str | None:
    """The cell of notebook ``path`` that sets ``name``, in words: its first line, under the heading above it."""
    heading = ""
    for cell in _cells(path):
        source = _source(cell)
        if cell.get("cell_type") == "markdown":
            for line in source.splitlines():
                if line.startswith("#"):
                    heading = line.lstrip("# ").strip()
        elif cell.get("cell_type") == "code" and _defines(source, name):
            first = next((line.strip() for line in source.splitlines() if line.strip()), "")
            first = first if len(first) <= 70 else first[:69] + "…"
            return f"the cell that starts `{first}`" + (f" (under “{heading}”)" if heading else "")
    return None


def _notebook(shell: Any) -> Path | None:
    """The notebook this kernel runs (JupyterLab tells the kernel its session's path)."""
    ns = getattr(shell, "user_ns", {}) or {}
    for candidate in (os.environ.get("JPY_SESSION_NAME"), ns.get("__session__"), ns.get("__vsc_ipynb_file__")):
        if candidate and str(candidate).endswith(".ipynb"):
            path = Path(candidate)
            if not path.is_absolute():
                path = Path.cwd() / path.name if not path.exists() else path
            if path.exists():
                return path
    return None


def name_error(exc: NameError, notebook: Path | None) -> str:
    """The sentence for a name not defined yet."""
    name = getattr(exc, "name", None) or (re.findall(r"name '([^']+)'", str(exc)) or [None])[0]
    if not name:
        return f"{FAIL} {exc}: run the cells above first (Run → Run All Above)"
    where = defining_cell(notebook, name) if notebook is not None else None
    if where:
        return (f"{FAIL} `{name}` is not defined yet: run the cells above first (Run → Run All Above). "
                f"It is set in {where}.")
    return (f"{FAIL} `{name}` is not defined: run the cells above first (Run → Run All Above); if it still is not, "
            "check its spelling")


def stub_error(exc: NotImplementedError, function: str) -> str:
    """The one line for a stub still in place (the check's own words)."""
    said = f": {exc}" if str(exc) else ""
    return (f"{FAIL} {function} is not written yet (it raises NotImplementedError{said}): write it in its cell, run "
            "that cell, then this one")


def _in_cell(filename: str) -> bool:
    return "ipykernel_" in filename or filename.startswith("<ipython-input") or filename.startswith("<cell")


def _innermost(tb: Any) -> Any:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def _handler(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:
    """IPython's custom handler (it shows nothing itself: the handler shows what it returns)."""
    last = _innermost(tb)
    stb = None
    if last is not None and _in_cell(last.tb_frame.f_code.co_filename):
        name = last.tb_frame.f_code.co_name
        if isinstance(value, NotImplementedError) and name != "<module>":
            stb = [stub_error(value, name + "()")]
        elif isinstance(value, NameError):
            stb = [name_error(value, _notebook(shell))]
    if stb is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    shell._showtraceback(etype, value, stb)
    return stb


def install() -> bool:
    """Install the two sentences in the running IPython kernel (nothing outside one); returns whether it did."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    shell.set_custom_exc((NameError, NotImplementedError), _handler)
    return True
