"""The value of a named constant of a student's CUDA source, as the compiler sees it.

A lab that needs a kernel's ``STAGES`` (to size its shared memory, to check it against the budget) asks NVRTC: the
source is compiled to PTX with one more line, a ``__device__`` constant initialised with the name, and the PTX holds
its value. So every spelling the compiler accepts gives the same answer: ``constexpr int STAGES = 4;``,
``constexpr int STAGES{4};``, ``#define STAGES 4``, ``static constexpr unsigned STAGES = 2 * 2;``, an enumerator, one
name of a list. Where the name is not visible at file scope (declared inside the kernel's body) or NVRTC is not
there, a reader of the source's declarations stands in (the same spellings, evaluated with the constants before it).
"""

from __future__ import annotations

import ast
import hashlib
import operator
import re
from functools import lru_cache

__all__ = ["constant", "declared_constants"]

_PROBE = "course_value_of_"


def constant(source: str, name: str) -> int | None:
    """The integer value of ``name`` in ``source`` (a whole translation unit: header, wrappers and kernel), or None
    when the source gives it none (not declared, not a constant expression)."""
    value = _compiled_value(hashlib.sha256(source.encode()).hexdigest(), source, name)
    if value is not None:
        return value
    return declared_constants(source).get(name)


@lru_cache(maxsize=64)
def _compiled_value(digest: str, source: str, name: str) -> int | None:
    """NVRTC's value of ``name``: the source compiled to PTX with ``__device__ const long long <probe> = (name);``."""
    del digest  # the cache's key: the source itself is kept only for this call
    try:
        from cuda.bindings import nvrtc

        from helpers.gpu.compiler import include_dirs
    except ImportError:
        return None
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return None
    probe = f'\nextern "C" __device__ const long long {_PROBE}{name} = (long long)({name});\n'
    opts = ["-arch=compute_90a", "-std=c++17", "-default-device", *(f"-I{d}" for d in include_dirs())]
    err, prog = nvrtc.nvrtcCreateProgram((source + probe).encode(), b"constant.cu", 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return None
    try:
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size == 0:
            return None
        buf = b" " * size
        nvrtc.nvrtcGetPTX(prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ptx = buf.rstrip(b"\0").decode(errors="replace")
    m = re.search(rf"\b{_PROBE}{name}\s*=\s*(-?\d+)\s*;", ptx)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------------------------------- the source reader
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.BitXor: operator.xor}


def _evaluate(expr: str, known: dict[str, int]) -> int | None:
    """A C integer expression of literals, known names, + - * / % << >> | & ^ and parentheses (C's ``/`` of
    non-negative integers is Python's ``//``); None for anything else."""
    text = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr.strip())
    text = re.sub(r"\(\s*(?:int|unsigned|long|uint32_t|int32_t|size_t)\s*\)", "", text)  # casts
    if "?" in text or ":" in text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(node)

    try:
        return int(ev(tree))
    except (ValueError, ZeroDivisionError, TypeError):
        return None


_TYPE = r"(?:unsigned\s+int|unsigned|int|long\s+long|long|size_t|uint32_t|int32_t|uint64_t|int64_t|auto)"


_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]+)$", re.M)
_DECL = re.compile(rf"((?:\b(?:static|inline|const|constexpr|__device__|__constant__)\s+)*){_TYPE}\s+"
                   r"((?:[A-Za-z_]\w*\s*(?:=[^,;{}]+|\{[^}]*\}|\([^)]*\))\s*,?\s*)+);")
_CONST = re.compile(r"\b(?:constexpr|const)\b")
_ENUM = re.compile(r"\benum\b[^{;]*\{([^}]*)\}")


def _split_top(text: str) -> list[str]:
    """Split a declarator list at its top-level commas (not inside parentheses or braces)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "({["
        depth -= ch in ")}]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def declared_constants(source: str) -> dict[str, int]:
    """The integer constants a source declares, in text order, each evaluated with the ones before it: ``#define
    NAME expr``, ``[static] constexpr|const <int type> NAME = expr`` or ``NAME{expr}`` / ``NAME(expr)`` (several to a
    declaration), and enumerators ``enum { NAME = expr, … }``. One this reader cannot evaluate is left out."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)
    known: dict[str, int] = {}
    forms = [(m.start(), "define", m) for m in _DEFINE.finditer(text)]
    forms += [(m.start(), "decl", m) for m in _DECL.finditer(text) if _CONST.search(m.group(1))]
    forms += [(m.start(), "enum", m) for m in _ENUM.finditer(text)]
    for _, kind, m in sorted(forms, key=lambda f: f[0]):
        if kind == "define":
            value = _evaluate(m.group(2), known)
            if value is not None:
                known[m.group(1)] = value
        elif kind == "decl":
            for part in _split_top(m.group(2)):
                d = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:=\s*(.+?)|\{(.*)\}|\((.*)\))\s*", part, re.S)
                if d:
                    value = _evaluate(next(g for g in d.groups()[1:] if g is not None), known)
                    if value is not None:
                        known[d.group(1)] = value
        else:
            nxt = 0
            for part in _split_top(m.group(1)):
                e = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:=\s*(.+?))?\s*", part, re.S)
                if not e:
                    continue
                value = _evaluate(e.group(2), known) if e.group(2) else nxt
                if value is None:
                    break
                known[e.group(1)] = value
                nxt = value + 1
    return known
