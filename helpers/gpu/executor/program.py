"""A parsed module laid out for execution: one flat instruction array over every function, register slots in
four banks (predicates, 16-, 32- and 64-bit), and the addresses of every symbol (shared variables from 0x400,
local stack frames, call parameters, kernel parameters, global variables)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import ParseError
from .memory import SMEM_RESERVED
from .parser import TYPE_BITS, Function, Instr, Module, ParamDecl, VarDecl, parse

__all__ = ["Program", "bank_of", "load_program", "Symbol"]


def bank_of(typ: str) -> str:
    """The register bank of a PTX type: P (predicates), H (8/16-bit), W (32-bit), D (64-bit)."""
    bits = TYPE_BITS[typ]
    if bits == 1:
        return "P"
    if bits <= 16:
        return "H"
    if bits == 32:
        return "W"
    if bits == 64:
        return "D"
    raise ParseError(f"{bits}-bit registers (.{typ}) are not emulated")


def _align(x: int, a: int) -> int:
    return -(-x // max(a, 1)) * max(a, 1)


@dataclass(frozen=True)
class Symbol:
    kind: str  # shared, local, kparam, fparam, global, const, func
    offset: int  # byte offset in its space (global/const: offset in the module's globals block)
    size: int
    decl: object = None


@dataclass
class Program:
    module: Module
    entry: str
    instrs: list[Instr] = field(default_factory=list)
    func_at: list[str] = field(default_factory=list)
    start: dict[str, int] = field(default_factory=dict)
    end: dict[str, int] = field(default_factory=dict)
    labels: dict[tuple[str, str], int] = field(default_factory=dict)
    regs: dict[tuple[str, str], tuple[str, int, str]] = field(default_factory=dict)  # -> (bank, row, type)
    nregs: dict[str, int] = field(default_factory=lambda: {"P": 0, "H": 0, "W": 0, "D": 0})
    symbols: dict[tuple[str | None, str], Symbol] = field(default_factory=dict)  # (function or None, name)
    smem_static_end: int = SMEM_RESERVED
    dyn_align: int = 16
    local_bytes: int = 16
    fparam_bytes: int = 16
    kparams: list[tuple[ParamDecl, int]] = field(default_factory=list)
    kparam_bytes: int = 0
    globals_bytes: int = 16
    global_vars: list[tuple[VarDecl, int]] = field(default_factory=list)

    @property
    def function(self) -> Function:
        return self.module.functions[self.entry]

    def symbol(self, func: str, name: str) -> Symbol | None:
        return self.symbols.get((func, name)) or self.symbols.get((None, name))

    def dyn_offset(self) -> int:
        """Shared-memory offset where dynamic (extern) shared memory starts."""
        return _align(self.smem_static_end, self.dyn_align)

    def static_smem(self) -> int:
        """Bytes of static shared memory (from 0x400, as ptxas counts it, dynamic alignment included)."""
        return self.smem_static_end - SMEM_RESERVED

    def shared_name(self, offset: int) -> tuple[str, int] | None:
        """(variable name, byte offset inside it) of a shared-memory offset."""
        for (_, name), s in self.symbols.items():
            if s.kind == "shared" and s.offset <= offset < s.offset + max(s.size, 1):
                return name, offset - s.offset
        return None


def _layout(prog: Program) -> None:
    m = prog.module
    funcs = [f for f in m.functions.values() if f.defined]
    # instructions and registers
    counts = prog.nregs
    for f in funcs:
        prog.start[f.name] = len(prog.instrs)
        for lab, idx in f.labels.items():
            prog.labels[(f.name, lab)] = len(prog.instrs) + idx
        prog.instrs.extend(f.body)
        prog.func_at.extend([f.name] * len(f.body))
        prog.end[f.name] = len(prog.instrs)
        for name, typ in f.regs.items():
            b = bank_of(typ)
            prog.regs[(f.name, name)] = (b, counts[b], typ)
            counts[b] += 1
    # shared memory: static variables in declaration order from the reserved kilobyte, extern ones after
    off = SMEM_RESERVED
    externs = []
    for v in m.variables:
        if v.space != "shared":
            continue
        if v.extern or v.size == 0:
            externs.append(v)
            continue
        off = _align(off, v.align)
        prog.symbols[(None, v.name)] = Symbol("shared", off, v.size, v)
        off += v.size
    prog.smem_static_end = off
    prog.dyn_align = max([16] + [v.align for v in externs])
    for v in externs:
        prog.symbols[(None, v.name)] = Symbol("shared", -1, 0, v)  # resolved per launch: dyn_offset()
    # global and constant variables: one block per loaded module
    off = 0
    for v in m.variables:
        if v.space in ("global", "const"):
            off = _align(off, max(v.align, 1))
            prog.symbols[(None, v.name)] = Symbol(v.space, off, v.size, v)
            prog.global_vars.append((v, off))
            off += max(v.size, 1)
    prog.globals_bytes = max(_align(off, 16), 16)
    # local frames, call parameters, kernel parameters
    loc = 0
    fp = 0
    for f in funcs:
        for v in f.locals:
            loc = _align(loc, max(v.align, 1))
            prog.symbols[(f.name, v.name)] = Symbol("local", loc, v.size, v)
            loc += v.size
        if f.kind == "func":
            for p in list(f.params) + list(f.rets):
                fp = _align(fp, p.align)
                prog.symbols[(None, p.name)] = Symbol("fparam", fp, p.size, p)
                fp += p.size
        for name, p in f.call_params.items():
            fp = _align(fp, p.align)
            prog.symbols[(f.name, name)] = Symbol("fparam", fp, p.size, p)
            fp += p.size
    prog.local_bytes = max(_align(loc, 16), 16)
    prog.fparam_bytes = max(_align(fp, 16), 16)
    kp = 0
    entry = m.functions[prog.entry]
    for p in entry.params:
        kp = _align(kp, p.align)
        prog.kparams.append((p, kp))
        prog.symbols[(prog.entry, p.name)] = Symbol("kparam", kp, p.size, p)
        kp += p.size
    prog.kparam_bytes = kp
    for f in m.functions.values():
        prog.symbols.setdefault((None, f.name), Symbol("func", 0, 0, f))


@lru_cache(maxsize=64)
def _parsed(digest: str, text: str) -> Module:
    return parse(text)


_PROGRAMS: dict[tuple[str, str], Program] = {}  # most recently used last; at most 64 kept


def load_program(ptx: str, entry: str | None = None) -> Program:
    """Parse (cached by the PTX's hash) and lay out the module for kernel ``entry`` (the only one if None)."""
    digest = hashlib.sha256(ptx.encode()).hexdigest()
    module = _parsed(digest, ptx)
    if entry is None:
        entries = module.entries
        if len(entries) != 1:
            raise ParseError(f"the module defines {len(entries)} kernels ({', '.join(entries)}): name one")
        entry = entries[0]
    if entry not in module.functions or module.functions[entry].kind != "entry":
        raise ParseError(f"the module has no kernel {entry!r} (kernels: {', '.join(module.entries)})")
    key = (digest, entry)
    prog = _PROGRAMS.pop(key, None)
    if prog is None:
        prog = Program(module, entry)
        _layout(prog)
    _PROGRAMS[key] = prog
    while len(_PROGRAMS) > 64:
        del _PROGRAMS[next(iter(_PROGRAMS))]
    return prog
