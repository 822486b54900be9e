"""Which PTX the course's kernels use, and whether the executor emulates all of it.

``course_kernels()`` finds every CUDA kernel of the course: the solution notebooks' CUDA strings (through
``helpers.course.labgen.solution_namespace``), ``bench/kernels/*.cu``, ``tests/gpu/every_wrapper.cu``, the demo
kernels of
``helpers.gpu.examples`` and the CUDA strings in the lessons' code cells. ``opcodes(ptx)`` lists the opcodes with
their qualifiers NVRTC emitted; ``unsupported(ptx)`` decodes every instruction as the executor would and returns
the ones it refuses (with the reason). ``tools/ptx_coverage.py`` prints the table; ``tests/ptx`` asserts it.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from helpers.gpu.executor import runtime  # noqa: F401  (registers the decoders)
from helpers.gpu.executor.machine import Machine
from helpers.gpu.executor.memory import DeviceMemory
from helpers.gpu.executor.program import load_program

__all__ = ["CourseKernel", "course_kernels", "opcodes", "unsupported", "kernel_names", "KNOWN_GAPS"]

#: Instructions of the course's kernels the executor refuses on purpose, with why (substring of the refusal).
KNOWN_GAPS: dict[str, str] = {}

ROOT = Path(__file__).resolve().parents[2]
#: ``__global__ void [__launch_bounds__(...)] [__cluster_dims__(...)] [#if ... lines] name(``
_KERNEL = re.compile(r"__global__\s+void\s+(?:(?:__launch_bounds__\s*\([^)]*\)|__cluster_dims__\s*\([^)]*\)|#[^\n]*)"
                     r"\s*)*(\w+)\s*\(")


@dataclass(frozen=True)
class CourseKernel:
    """A kernel of the course: where it comes from, its CUDA source and its name."""

    where: str
    source: str
    name: str


def kernel_names(source: str) -> list[str]:
    """Names of the ``__global__`` functions a CUDA source defines (``extern "C"`` ones keep their name)."""
    return [n for n in _KERNEL.findall(source) if n not in ("__cluster_dims__",)]


def _cuda_strings(code: str) -> list[str]:
    """String constants of Python code that hold a CUDA kernel."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return re.findall(r'(?:r?"""|r?\'\'\')(.*?__global__.*?)(?:"""|\'\'\')', code, re.S)
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and "__global__" in n.value]


def _compiles(src: str) -> bool:
    from helpers import gpu

    try:
        gpu.compile(src, kernel_names(src)[0] if len(kernel_names(src)) == 1 else None)
    except gpu.CompileError:
        return False
    return True


def _whole(nb: Path, strings: dict[str, str]) -> None:
    """A kernel cell that carries an earlier step's regions (``// carried:`` lines; labs.json names the step) made
    whole, as its check compiles it."""
    from helpers.course import carry, hints
    from helpers.course.checks._common import _kernels

    entry = _kernels().get(hints.lab_of(nb.name), {})
    carries = entry.get("carries")
    if carries and entry["variable"] in strings and carries["variable"] in strings:
        strings[entry["variable"]] = carry.assemble(carries["skeleton"], strings[carries["variable"]],
                                                    strings[entry["variable"]]).text


#: device-function cells a check splices into a course kernel instead of carrying them as wrappers (Lab 5's
#: per-element fused epilogue goes into bench/kernels/lab5_fused.cu, which is covered as it is)
SPLICED = {"LAB5_FUSED"}


def course_kernels(root: Path = ROOT) -> list[CourseKernel]:
    """Every kernel of the course (see the module docstring)."""
    import nbformat

    from helpers.course import labgen

    out: list[CourseKernel] = []
    wrappers = ""  # the student's wrappers (CUDA strings without a kernel) of this lab and the labs before it
    for nb in sorted((root / "solutions").glob("*.ipynb")):
        ns = labgen.solution_namespace(nb)
        strings = {k: v for k, v in ns.items() if isinstance(v, str) and not k.startswith("_")}
        _whole(nb, strings)
        wrappers += "".join(v for k, v in strings.items()
                            if "__device__" in v and "__global__" not in v and k not in SPLICED)
        for key, val in strings.items():
            if "__global__" in val:
                # as the graders compile it: the header, the wrappers carried from the earlier labs, the kernel
                src = val if "hopper.cuh" in val else '#include "hopper.cuh"\n' + wrappers + val
                for name in kernel_names(val):
                    out.append(CourseKernel(f"{nb.name}:{key}", src, name))
    for cu in sorted((root / "bench" / "kernels").glob("*.cu")) + [root / "tests" / "gpu" / "every_wrapper.cu"]:
        if cu.exists():
            text = cu.read_text()
            for name in kernel_names(text):
                out.append(CourseKernel(str(cu.relative_to(root)), text, name))
    from helpers.gpu import examples

    for key in ("VECTOR_ADD", "DEADLOCK", "OUT_OF_BOUNDS", "MISALIGNED"):
        src = getattr(examples, key)
        for name in kernel_names(src):
            out.append(CourseKernel(f"helpers/gpu/examples.py:{key}", src, name))
    for nb in sorted((root / "lessons").glob("*.ipynb")):
        cells = nbformat.read(nb, as_version=4).cells
        for i, cell in enumerate(cells):
            if cell.cell_type != "code":
                continue
            for src in _cuda_strings(cell.source):
                if not _compiles(src):  # a template the lesson fills in before compiling (e.g. {REGS}, {bar_id})
                    continue
                for name in kernel_names(src):
                    out.append(CourseKernel(f"{nb.name}:cell {i}", src, name))
    seen = set()
    unique = []
    for k in out:
        key = (k.source, k.name)
        if key not in seen:
            seen.add(key)
            unique.append(k)
    return unique


def opcodes(ptx: str) -> Counter:
    """How often each opcode (with its qualifiers) appears in a module."""
    from helpers.gpu.executor.parser import parse

    m = parse(ptx)
    return Counter(ins.opcode for f in m.functions.values() for ins in f.body)


def unsupported(ptx: str, entry: str | None = None) -> list[str]:
    """Every instruction of the module the executor would refuse, as 'opcode: reason (PTX line N)'."""
    prog = load_program(ptx, entry)
    mem = DeviceMemory()
    lm = runtime.load_module(prog, mem)
    mach = Machine(prog, (1, 1, 1), (128, 1, 1), None, 0, bytes(prog.kparam_bytes), mem, lm)
    out = []
    for pc, op in enumerate(mach.ops):
        err = getattr(op, "unsupported", None)
        if err is not None:
            ins = prog.instrs[pc]
            out.append(f"{ins.opcode}: {err} (PTX line {ins.line})")
    return out
