"""The three rooms of ``helpers/`` (the Hopper model, the runtime with its executor, the course machinery): every
import, at the top of a module or inside a function, points down the list, and no module imports itself back
through others."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parents[2] / "helpers"

#: What each room may import of ``helpers`` (a module belongs to the longest prefix listed).
ALLOWED = {
    "helpers.hopper": ("helpers.hopper",),
    "helpers.gpu.executor": ("helpers.hopper", "helpers.gpu.executor"),
    "helpers.gpu": ("helpers.hopper", "helpers.gpu"),
    "helpers.course": ("helpers.hopper", "helpers.gpu", "helpers.course"),
    "helpers": (),
}


def modules() -> dict[str, Path]:
    out = {}
    for path in HELPERS.rglob("*.py"):
        parts = list(path.relative_to(HELPERS.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The helpers modules ``name`` imports anywhere in its body, but for annotations only (a ``from X import y``
    counts ``X.y`` where that is a module, else ``X``)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                targets.append(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
        for t in targets:
            parts = t.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                found.add(".".join(parts))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def room(name: str) -> str:
    return max((r for r in ALLOWED if name == r or name.startswith(r + ".")), key=len)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert cycles(graph()) == []


def test_every_import_points_down_the_rooms():
    wrong = []
    for name, targets in graph().items():
        allowed = ALLOWED[room(name)]
        for t in sorted(targets):
            if t != "helpers" and not any(t == a or t.startswith(a + ".") for a in allowed):
                wrong.append(f"{name} imports {t} (the room {room(name)} may import {', '.join(allowed) or 'nothing'})")
    assert wrong == []


ROOMS = ["helpers", "helpers.hopper", "helpers.gpu", "helpers.gpu.executor", "helpers.course"]


@pytest.mark.parametrize("package", ROOMS)
def test_each_room_says_what_it_is_and_what_it_may_import(package):
    path = HELPERS.parent.joinpath(*package.split("."), "__init__.py")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert len(doc) > 200, f"{path} needs a docstring saying what the room holds"
    if package != "helpers":
        assert "May import" in doc, f"{path}'s docstring must say what the room may import"


def test_the_checker_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
