"""Pieces shared by the lab graders: compiling a student's CUDA, and reading the PTX it became.

A wrapper written in inline PTX can be graded without a GPU: NVRTC compiles it (a stub's ``#error`` fails
with its hint), and the PTX shows the instruction as the student wrote it, between ``// begin inline asm`` and
``// end inline asm``, with each operand a virtual register. :func:`resolve` follows a register back through
``mov`` / ``cvta`` / ``cvt`` to where its value came from (a shared-memory variable, a kernel parameter, an
immediate), so a probe kernel that passes distinctive values can check the operand order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from helpers import grading

__all__ = [
    "Instr",
    "compile_student",
    "inline_asm",
    "find_instrs",
    "resolve",
    "trace",
    "shared_address_of",
    "split_operands",
    "run_on_gpu",
    "run",
    "runnable",
]


def compile_student(source: str, name: str, *, what: str) -> Any:
    """Compile CUDA source holding the student's code; a compile error becomes a plain-words CheckFailed."""
    from helpers import gpu

    try:
        return gpu.compile(source, name)
    except gpu.CompileError as exc:
        text = str(exc)
        m = re.search(r'not written yet: ([^"\n]*)', text)
        if m:
            raise grading.CheckFailed(
                f"❌ {what} is not written yet: it still holds the #error stub (hint: {m.group(1).strip()})"
            ) from None
        raise grading.CheckFailed(f"❌ {what} does not compile:\n{text}") from None


@dataclass
class Instr:
    """One PTX instruction: its dotted opcode (e.g. ``mbarrier.init.shared::cta.b64``) and operand text."""

    opcode: str
    operands: str
    line: str

    @property
    def parts(self) -> list[str]:
        """The opcode split at its dots: ``['mbarrier', 'init', 'shared::cta', 'b64']``."""
        return self.opcode.split(".")


_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z_][\w:.]*)\s*(.*?);?\s*$")


def _body(ptx: str, entry: str | None) -> str:
    if entry is None:
        return ptx
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\b.*?(?=^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\b"
                  r"|^\s*\.file\b|\Z)", ptx, re.S | re.M)
    return m.group(0) if m else ptx


def inline_asm(ptx: str, entry: str | None = None) -> list[Instr]:
    """Every instruction that came from an ``asm(...)`` statement, in order."""
    out: list[Instr] = []
    for block in re.findall(r"// begin inline asm\n(.*?)// end inline asm", _body(ptx, entry), re.S):
        for raw in re.split(r"[;\n]", block):
            line = raw.strip()
            if not line or line.startswith(("//", "{", "}", ".reg")):
                line = line.lstrip("{} ")
                if not line or line.startswith((".reg", "//")):
                    continue
            m = _INSTR.match(line)
            if m:
                out.append(Instr(m.group(1), m.group(2).strip(), line))
    return out


def find_instrs(ptx: str, prefix: str, entry: str | None = None) -> list[Instr]:
    """The inline-asm instructions whose opcode starts with ``prefix`` (e.g. ``"cp.async.bulk.tensor"``)."""
    return [i for i in inline_asm(ptx, entry) if i.opcode.startswith(prefix)]


def split_operands(text: str) -> list[str]:
    """Top-level operands of an instruction: ``[%r1], [%rd1, {%r2, %r3}], [%r4]`` -> three strings."""
    ops, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        ops.append(cur.strip())
    return ops


_DEF = re.compile(r"^\s*((?:mov|cvta|cvt|ld\.param)[\w.:]*)\s+(%\w+),\s*\[?([\w%$.+-]+)\]?\s*;", re.M)


def trace(ptx: str, operand: str, depth: int = 8) -> tuple[str, list[str]]:
    """Follow a register back through mov / cvta / cvt / ld.param: (where its value came from, the opcodes
    passed on the way). The origin is a symbol (a ``.shared`` variable, a kernel parameter), an immediate as
    decimal text, or the register itself when its value was computed (e.g. by an ``add``)."""
    defs: dict[str, tuple[str, str]] = {}
    for op, dst, src in _DEF.findall(ptx):
        defs.setdefault(dst, (op, src))
    cur = operand.strip().strip("[]").strip()
    ops: list[str] = []
    for _ in range(depth):
        if cur not in defs:
            break
        op, cur = defs[cur]
        ops.append(op)
    if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", cur):
        cur = str(int(cur, 0))
    return cur, ops


def resolve(ptx: str, operand: str) -> str:
    """Where a register's value came from (see :func:`trace`)."""
    return trace(ptx, operand)[0]


def shared_address_of(ptx: str, operand: str) -> str | None:
    """The shared variable a ``[addr]`` operand points at, or None when it is not a shared-window address
    (e.g. a generic pointer: ``cvta.shared`` turned the shared address into a generic one)."""
    origin, ops = trace(ptx, operand)
    if any(op.startswith("cvta.shared") or op.startswith("cvta.u64") for op in ops):
        return None
    return origin


def is_32bit_reg(operand: str) -> bool:
    """True for a 32-bit register (``%r7``), False for a 64-bit one (``%rd3``)."""
    return bool(re.fullmatch(r"%r\d+", operand.strip().strip("[]").strip()))


def run_on_gpu(kernel: Any, grid: Any, block: Any, smem: int, *args: Any, what: str,
               timeout: float = 30.0) -> list[Any]:
    """Launch the student's kernel in a child process (``gpu.run_isolated``); numpy arrays among ``args`` come
    back after the run. A fault or a deadlock becomes a CheckFailed carrying the runtime's sentence."""
    from helpers import gpu

    try:
        return gpu.run_isolated(kernel, grid, block, smem, *args, timeout=timeout).arrays
    except gpu.GpuError as exc:
        raise grading.CheckFailed(f"❌ {what} failed on the GPU: {exc}") from None


def runnable(kernel: Any, checked: str) -> bool:
    """True when the kernel can run here (an H100 now; the course's PTX executor once it lands, through the same
    call). Otherwise prints the runtime's one line (registers, spills, what was checked instead) and returns
    False."""
    from helpers import gpu

    return not gpu.skip_without_hopper(kernel, checked=checked)


def run(target: Any, *args: Any, what: str, timeout: float = 60.0) -> Any:
    """THE run path of every CUDA check: ``gpu.run_isolated`` in a child process, so a fault or a deadlock is a
    sentence and the notebook survives. ``target`` is a Kernel (then ``args`` are grid, block, shared memory and
    the kernel's arguments; numpy arrays come back) or a module-level function run in the child. A fault or a
    deadlock becomes a CheckFailed carrying the runtime's sentence."""
    from helpers import gpu

    try:
        result = gpu.run_isolated(target, *args, timeout=timeout)
    except gpu.GpuError as exc:
        raise grading.CheckFailed(f"❌ {what} failed when it ran: {exc}") from None
    return result.arrays if isinstance(result, gpu.IsolatedResult) else result
