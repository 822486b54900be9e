"""Reading a kernel's PTX as a protocol: its instructions, its control flow, and where its addresses point.

The static CUDA checks of the labs ask questions such as "can a thread read a tile without waiting on its full
barrier first?" or "is there a path from a wgmma to the stage's release that skips the wgmma wait?". The PTX
NVRTC makes answers them without a GPU:

- :class:`Flow` parses one ``.entry``: every instruction (inline asm included), labels and branches (the control
  flow graph), the ``.shared`` variables, and the CUDA line each instruction came from (``.loc``);
- :meth:`Flow.symbols` follows a register back through the arithmetic that made it, to the shared variables
  (or kernel parameters) it was computed from: how a barrier operand is told apart from a tile address;
- :meth:`Flow.reach` answers path questions: from these instructions, can control reach one of those without
  passing any of these? Paths are all the control-flow paths, feasible or not, so a "yes" can only be trusted
  as far as the kernel's branches allow; the checks use it to find what *may* happen, with the line it is on;
- :func:`form_problem` compares an instruction's dotted qualifiers with the forms the PTX ISA allows, and says
  which qualifier is missing, wrong or extra.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Ins", "Flow", "form_problem", "Slot"]

_DEF_FAMILIES = ("mov", "add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "cvt", "cvta", "selp",
                 "ld.param", "neg", "min", "max", "rem", "div", "bfe", "bfi", "prmt", "cvt.u64", "mul.wide")
_TOKEN = re.compile(r"%?[A-Za-z_$][\w$.]*")


@dataclass
class Ins:
    """One PTX instruction of the kernel."""

    index: int
    opcode: str
    operands: str
    guard: str | None
    asm: bool
    line: int | None  # the line of the compiled CUDA source it came from (after inlining: the call site)
    text: str

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")

    def ops(self) -> list[str]:
        return split_operands(self.operands)


def split_operands(text: str) -> list[str]:
    """Top-level operands of an instruction: ``[%r1], [%rd1, {%r2, %r3}], [%r4]`` -> three strings (brackets,
    braces and parentheses nest)."""
    ops, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        ops.append(cur.strip())
    return ops


def _entry_body(ptx: str, entry: str) -> str:
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx)
    if not m:
        raise ValueError(f"the PTX has no kernel entry {entry!r}")
    start = ptx.index("{", ptx.index(")", m.end()))
    depth = 0
    for i in range(start, len(ptx)):
        if ptx[i] == "{":
            depth += 1
        elif ptx[i] == "}":
            depth -= 1
            if depth == 0:
                return ptx[start + 1:i]
    return ptx[start + 1:]


class Flow:
    """The instructions and control flow of one kernel entry of a PTX module."""

    def __init__(self, ptx: str, entry: str, line_offset: int = 0):
        self.ptx = ptx
        self.entry = entry
        self.line_offset = line_offset
        self.shared = set(re.findall(r"\.shared\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)\s*[\[;]", ptx))
        self.params = set(re.findall(r"\.param\s+[^;,)]*?\s([\w$]+_param_\d+)", ptx))
        self.ins: list[Ins] = []
        self.labels: dict[str, int] = {}
        self._parse(_entry_body(ptx, entry))
        self.defs: dict[str, list[list[str]]] = {}
        self.def_sites: dict[str, set[int]] = {}
        for i in self.ins:
            ops = i.ops()
            if ops and re.fullmatch(r"%\w+", ops[0]):
                self.def_sites.setdefault(ops[0], set()).add(i.index)
                if i.opcode.startswith(_DEF_FAMILIES):
                    self.defs.setdefault(ops[0], []).append(ops[1:])

    # ---------------------------------------------------------------------------------------------- parsing
    def _parse(self, body: str) -> None:
        files = dict(re.findall(r'\.file\s+(\d+)\s+"([^"]*)"', self.ptx))
        cell = next((n for n, path in files.items() if not path.endswith((".cuh", ".h", ".hpp"))), "1")
        loc = re.compile(r"inlined_at\s+" + cell + r"\s+(\d+)")
        direct = re.compile(r"\.loc\s+" + cell + r"\s+(\d+)")
        asm = False
        line: int | None = None
        buf = ""
        for raw in body.split("\n"):
            text = raw.strip()
            if text.startswith("// begin inline asm"):
                asm = True
                continue
            if text.startswith("// end inline asm"):
                asm = False
                continue
            if text.startswith(".loc"):
                m = loc.search(text) or direct.match(text)
                if m:
                    line = int(m.group(1)) - self.line_offset
                continue
            text = re.sub(r"//.*", "", text).strip()
            while text.startswith("{"):
                text = text[1:].strip()
            while text.endswith("}") and not buf:
                text = text[:-1].strip()
            if not text:
                continue
            m = re.fullmatch(r"([$\w%]+):", text)
            if m and not buf:
                self.labels[m.group(1)] = len(self.ins)
                continue
            if text.startswith(".") and not buf:
                continue
            buf += " " + text
            while ";" in buf:
                stmt, buf = buf.split(";", 1)
                self._add(stmt.strip(), asm, line)
            buf = buf.strip()
            while buf.startswith("}"):
                buf = buf[1:].strip()

    def _add(self, stmt: str, asm: bool, line: int | None) -> None:
        stmt = stmt.strip().lstrip("{").strip()
        if not stmt or stmt.startswith("."):
            return
        m = re.match(r"(?:@(!?%\w+)\s+)?([a-z_][\w:.]*)\s*(.*)$", stmt, re.S)
        if not m:
            return
        self.ins.append(Ins(len(self.ins), m.group(2), " ".join(m.group(3).split()), m.group(1), asm, line,
                            " ".join(stmt.split())))

    # ---------------------------------------------------------------------------------------------- control flow
    def successors(self, i: int) -> list[int]:
        ins = self.ins[i]
        nxt = [i + 1] if i + 1 < len(self.ins) else []
        if ins.opcode.startswith("bra"):
            target = ins.operands.strip().rstrip(";").strip()
            jump = [self.labels[target]] if target in self.labels and self.labels[target] < len(self.ins) else []
            return jump + nxt if ins.guard else jump
        if ins.opcode in ("ret", "exit", "trap") and not ins.guard:
            return []
        return nxt

    def reach(self, starts: Iterable[int | None], goal: Callable[[Ins], bool],
              avoid: Callable[[Ins], bool] = lambda i: False, *, forward: bool = False) -> Ins | None:
        """The first instruction matching ``goal`` that control can reach from ``starts`` (an index: from the
        instruction after it; ``None``: from the kernel's first instruction) without executing an instruction
        matching ``avoid``; None when there is none. ``forward``: follow only edges to later instructions (no
        loop back edge: the same iteration)."""
        seen: set[int] = set()
        todo: deque[int] = deque()
        for s in starts:
            todo.extend([0] if s is None else [j for j in self.successors(s) if not forward or j > s])
        while todo:
            i = todo.popleft()
            if i in seen or i >= len(self.ins):
                continue
            seen.add(i)
            ins = self.ins[i]
            if goal(ins):
                return ins
            if avoid(ins):
                continue
            todo.extend(j for j in self.successors(i) if not forward or j > i)
        return None

    def find(self, pred: Callable[[Ins], bool]) -> list[Ins]:
        return [i for i in self.ins if pred(i)]

    # ---------------------------------------------------------------------------------------------- data flow
    def symbols(self, operand: str, depth: int = 40) -> set[str]:
        """The shared variables and kernel parameters a register or address operand was computed from."""
        found: set[str] = set()
        seen: set[str] = set()
        todo = [(t, 0) for t in _TOKEN.findall(operand)]
        while todo:
            tok, d = todo.pop()
            if tok in seen or d > depth:
                continue
            seen.add(tok)
            if tok.startswith("%"):
                for srcs in self.defs.get(tok, []):
                    for src in srcs:
                        todo.extend((t, d + 1) for t in _TOKEN.findall(src))
            elif tok in self.shared or tok in self.params:
                found.add(tok)
        return found

    def registers(self, operand: str, depth: int = 40) -> set[str]:
        """Every register the value of an operand was computed from (its backward slice)."""
        found: set[str] = set()
        todo = [(t, 0) for t in _TOKEN.findall(operand) if t.startswith("%")]
        while todo:
            tok, d = todo.pop()
            if tok in found or d > depth:
                continue
            found.add(tok)
            for srcs in self.defs.get(tok, []):
                for src in srcs:
                    todo.extend((t, d + 1) for t in _TOKEN.findall(src) if t.startswith("%"))
        return found

    def evaluate(self, operand: str, env: dict[str, int], depth: int = 30) -> int | None:
        """The integer an operand computes, with the registers in ``env`` (and every register written in more
        than one place: loop counters) as inputs and shared variables as 0; None when it needs something else."""
        text = operand.strip().strip("[]").strip()
        m = re.fullmatch(r"(.+?)\s*\+\s*(-?\d+)", text)
        if m:
            base = self.evaluate(m.group(1), env, depth)
            return None if base is None else base + int(m.group(2))
        if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", text):
            return int(text, 0)
        if text in self.shared:
            return 0
        if text in env:
            return env[text]
        sites = self.def_sites.get(text, set())
        if depth <= 0 or len(sites) != 1:
            return None
        ins = self.ins[next(iter(sites))]
        srcs = [self.evaluate(o, env, depth - 1) for o in ins.ops()[1:]]
        if any(v is None for v in srcs):
            return None
        bits = 64 if re.search(r"\.[bsu]64$", ins.opcode) else 32
        op = ins.parts[0]
        if op == "mul" and ("hi" in ins.parts or "wide" in ins.parts):  # the high half, or the whole 2·bits product
            mask = (1 << bits) - 1
            a, b = (v & mask for v in srcs[:2])
            if ins.opcode.endswith(("s32", "s64")):
                a, b = (v - (1 << bits) if v >> (bits - 1) else v for v in (a, b))
            prod = a * b
            return (prod >> bits) & mask if "hi" in ins.parts else prod & ((1 << (2 * bits)) - 1)
        if op in ("div", "rem") and len(srcs) == 2 and srcs[1]:
            q, r = divmod(srcs[0] & ((1 << bits) - 1), srcs[1] & ((1 << bits) - 1))
            return q if op == "div" else r
        ops = {"mov": lambda a: a, "cvt": lambda a: a, "cvta": lambda a: a, "add": lambda a, b: a + b,
               "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "mad": lambda a, b, c: a * b + c,
               "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b, "and": lambda a, b: a & b,
               "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "not": lambda a: ~a, "neg": lambda a: -a,
               "min": min, "max": max}
        fn = ops.get(op)
        if fn is None:
            return None
        try:
            return fn(*srcs) & ((1 << bits) - 1)
        except TypeError:
            return None

    def value(self, operand: str) -> int | None:
        """The integer an operand holds when it is an immediate or a register moved from one; else None."""
        tok = operand.strip().strip("[]")
        for _ in range(10):
            if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", tok):
                return int(tok, 0)
            srcs = self.defs.get(tok)
            if not srcs or len(srcs) != 1 or len(srcs[0]) != 1:
                return None
            tok = srcs[0][0].strip()
        return None

    def where(self, ins: Ins, source: str | None = None) -> str:
        """``line 12 (hopper::mbar_arrive(&empty[s]);)`` for messages, from the .loc of the instruction."""
        if ins.line is None:
            return f"`{ins.text}`"
        text = ""
        if source is not None:
            lines = source.split("\n")
            if 0 < ins.line <= len(lines):
                text = lines[ins.line - 1].strip()
        return f"line {ins.line} of the kernel" + (f" (`{text}`)" if text else "")


# ---------------------------------------------------------------------------------------------- forms
@dataclass(frozen=True)
class Slot:
    """One qualifier position of an instruction form: its name and the values allowed (None: may be left out)."""

    name: str
    allowed: tuple[str | None, ...]
    why: str = ""


@dataclass
class _Match:
    problem: str | None = None
    extra: list[str] = field(default_factory=list)


def form_problem(opcode: str, family: str, slots: Sequence[Slot]) -> str | None:
    """None when ``opcode`` is ``family`` followed by one allowed qualifier per slot, in order; else a sentence
    naming the first qualifier that is missing, wrong or extra."""
    fam = family.split(".")
    parts = opcode.split(".")
    if parts[:len(fam)] != fam:
        return f"the instruction is {opcode}, not a {family} instruction"
    rest = parts[len(fam):]
    i = 0
    for slot in slots:
        q = rest[i] if i < len(rest) else None
        if q is not None and q in slot.allowed:
            i += 1
            continue
        if None in slot.allowed:
            if q is not None and not any(q in s.allowed for s in slots):
                return _wrong(slot, q, opcode)
            continue
        if q is None:
            return (f"{opcode} lacks the {slot.name} ({_names(slot)})" + (f": {slot.why}" if slot.why else ""))
        return _wrong(slot, q, opcode)
    if i < len(rest):
        return f"{opcode} has an unexpected qualifier .{rest[i]}" + _after(rest, i)
    return None


def _names(slot: Slot) -> str:
    return " or ".join("." + a for a in slot.allowed if a is not None)


def _wrong(slot: Slot, q: str, opcode: str) -> str:
    return (f"{opcode}: where the {slot.name} belongs it has .{q}; expected {_names(slot)}"
            + (f" ({slot.why})" if slot.why else ""))


def _after(rest: list[str], i: int) -> str:
    return f" (after .{rest[i - 1]})" if i else ""
