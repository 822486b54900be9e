"""Read a PTX module (what NVRTC writes for a CUDA source) into functions, instructions and declarations.

The parser keeps what execution needs and what error messages need: every instruction knows its PTX line and,
through the ``.loc`` debug lines (``-lineinfo``), the line of the CUDA cell it came from (following
``inlined_at`` out of the course header into the cell). Names are scoped by ``{ }`` as ptxas scopes them: the
registers, labels, variables and call parameters an inline-asm scope ``{ .reg .pred p; W: ... bra W; }`` declares
are renamed apart (``p@3``, ``W@4``), so the same asm block inlined twice keeps its own labels and registers.
Declarations keep sizes, alignments and initial bytes; register ranges ``%r<52>`` declare ``%r0 .. %r51``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import ParseError

__all__ = [
    "Reg", "Neg", "Imm", "FImm", "Sym", "Vec", "Addr", "Pair", "Sink", "Paren", "Instr", "VarDecl", "ParamDecl",
    "Function", "Module", "parse", "TYPE_BITS",
]

#: Bits of each PTX fundamental type.
TYPE_BITS = {
    "pred": 1, "b8": 8, "b16": 16, "b32": 32, "b64": 64, "b128": 128, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "s8": 8, "s16": 16, "s32": 32, "s64": 64, "f16": 16, "f16x2": 32, "bf16": 16, "bf16x2": 32, "f32": 32,
    "f64": 64, "tf32": 32, "e4m3": 8, "e5m2": 8, "e4m3x2": 16, "e5m2x2": 16,
}


# ------------------------------------------------------------------------------------------- operands
@dataclass(frozen=True, slots=True)
class Reg:
    name: str  # unique within the function (scoped names renamed apart); special registers keep their name


@dataclass(frozen=True, slots=True)
class Neg:
    reg: Reg  # !%p


@dataclass(frozen=True, slots=True)
class Imm:
    value: int


@dataclass(frozen=True, slots=True)
class FImm:
    bits: int  # 0fXXXXXXXX (width 32) or 0dXXXXXXXXXXXXXXXX (width 64)
    width: int


@dataclass(frozen=True, slots=True)
class Sym:
    name: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Vec:
    items: tuple


@dataclass(frozen=True, slots=True)
class Addr:
    base: object  # Reg, Sym, Imm or None
    offset: int = 0
    coords: Vec | None = None  # [tmap, {c0, c1}]


@dataclass(frozen=True, slots=True)
class Pair:
    first: object
    second: object  # %r|%p


@dataclass(frozen=True, slots=True)
class Sink:
    pass


@dataclass(frozen=True, slots=True)
class Paren:
    items: tuple


# ------------------------------------------------------------------------------------------- program objects
@dataclass(slots=True)
class Instr:
    opcode: str  # dotted, e.g. "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    operands: tuple
    guard: tuple[str, bool] | None  # (predicate register, negated)
    line: int  # PTX line (1-based)
    src_file: int = 0  # .loc file index
    src_line: int = 0  # .loc line
    cell_line: int = 0  # line in the compiled CUDA file (file 1), following inlined_at
    text: str = ""

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass(slots=True)
class VarDecl:
    space: str  # global, shared, const, local
    name: str
    type: str
    align: int
    size: int  # bytes; 0 for an unsized extern array
    init: bytes | None = None
    extern: bool = False
    function: str | None = None  # declared inside this function
    relocs: list = field(default_factory=list)  # (byte offset, symbol, addend, generic)


@dataclass(slots=True)
class ParamDecl:
    name: str
    type: str
    size: int
    align: int
    ptr_space: str | None = None


@dataclass
class Function:
    name: str
    kind: str  # entry or func
    params: list[ParamDecl]
    rets: list[ParamDecl]
    body: list[Instr] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> index of the next instruction in body
    regs: dict[str, str] = field(default_factory=dict)  # unique register name -> type
    locals: list[VarDecl] = field(default_factory=list)
    call_params: dict[str, ParamDecl] = field(default_factory=dict)  # scoped .param of call sequences
    directives: dict[str, tuple] = field(default_factory=dict)  # maxntid, reqntid, ...
    line: int = 0
    defined: bool = True


@dataclass
class Module:
    version: str = ""
    target: str = ""
    address_size: int = 64
    variables: list[VarDecl] = field(default_factory=list)
    functions: dict[str, Function] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)

    def variable(self, name: str) -> VarDecl | None:
        for v in self.variables:
            if v.name == name:
                return v
        return None

    @property
    def entries(self) -> list[str]:
        return [f.name for f in self.functions.values() if f.kind == "entry" and f.defined]


# ------------------------------------------------------------------------------------------- tokens
_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"[^"\n]*")
  | (?P<num>0[fF][0-9a-fA-F]{8}(?![\w$])|0[dD][0-9a-fA-F]{16}(?![\w$])|0[xX][0-9a-fA-F]+U?
           |\d+\.\d*(?:[eE][+-]?\d+)?|\d+U?)
  | (?P<id>[%$._A-Za-z](?:[\w$.%]|::)*)
  | (?P<p>[{}\[\]();,:|!@+\-=<>*])
""", re.X)

_LINE_DIRECTIVES = (".loc", ".file", ".version", ".target", ".address_size", ".maxntid", ".reqntid",
                    ".minnctapersm", ".maxnctapersm", ".maxnreg", ".explicitcluster", ".reqnctapercluster",
                    ".maxclusterrank", ".noreturn", ".blocksareclusters")


@dataclass(slots=True)
class _Tok:
    kind: str
    text: str
    line: int


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = []
    for line in text.split("\n"):
        if "//" in line:
            q = False
            for i, ch in enumerate(line):
                if ch == '"':
                    q = not q
                elif not q and line.startswith("//", i):
                    line = line[:i]
                    break
        out.append(line)
    return "\n".join(out)


def _tokenize(line: str, lineno: int) -> list[_Tok]:
    toks = []
    pos = 0
    while pos < len(line):
        m = _TOKEN.match(line, pos)
        if not m:
            raise ParseError(f"PTX line {lineno}: cannot read {line[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind != "ws":
            toks.append(_Tok(kind, m.group(kind), lineno))
    return toks


def _int(text: str) -> int:
    t = text.rstrip("U")
    if t.lower().startswith("0x"):
        return int(t, 16)
    if len(t) > 1 and t.startswith("0") and t.isdigit():
        return int(t, 8)
    return int(t)


# ------------------------------------------------------------------------------------------- parser
class _Parser:
    def __init__(self, text: str) -> None:
        self.module = Module(lines=text.split("\n"))
        self.toks: list[_Tok] = []
        self.locs: dict[int, tuple] = {}  # token index -> .loc directive seen just before it
        self.i = 0
        self.scope_id = 0
        self.directive_at: list[tuple[int, str, tuple]] = []  # (token index, name, values) of .maxntid & co
        self.reg_names: set[str] = set()  # registers declared without a % (inline-asm scopes)
        clean = _strip_comments(text)
        in_section = 0
        for n, line in enumerate(clean.split("\n"), 1):
            s = line.strip()
            if in_section == -1:
                if "{" in s:
                    in_section = max(s.count("{") - s.count("}"), 0)
                continue
            if in_section:
                in_section += s.count("{") - s.count("}")
                continue
            if s.startswith(".section"):
                in_section = max(s.count("{") - s.count("}"), 0)
                if "{" not in s:
                    in_section = -1  # the brace comes on a later line
                continue
            if s.split(None, 1)[0:1] and s.split(None, 1)[0] in _LINE_DIRECTIVES:
                self._line_directive(s, n)
                continue
            self.toks.extend(_tokenize(line, n))
        self.toks.append(_Tok("eof", "", len(self.module.lines)))

    # ------------------------------------------------------------------ line directives
    def _line_directive(self, s: str, n: int) -> None:
        word = s.split()[0]
        rest = s[len(word):].strip().rstrip(";").strip()
        m = self.module
        if word == ".loc":
            nums = re.match(r"(\d+)\s+(\d+)\s+(\d+)", rest)
            if not nums:
                return
            inl = re.search(r"inlined_at\s+(\d+)\s+(\d+)", rest)
            self.locs[len(self.toks)] = (int(nums.group(1)), int(nums.group(2)),
                                         (int(inl.group(1)), int(inl.group(2))) if inl else None)
        elif word == ".file":
            fm = re.match(r'(\d+)\s+"([^"]*)"', rest)
            if fm:
                m.files[int(fm.group(1))] = fm.group(2)
        elif word == ".version":
            m.version = rest
        elif word == ".target":
            m.target = rest
        elif word == ".address_size":
            m.address_size = int(rest)
        else:
            self.directive_at.append((len(self.toks), word[1:], tuple(int(x) for x in re.findall(r"\d+", rest))))

    # ------------------------------------------------------------------ token helpers
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> _Tok:
        t = self.next()
        if t.text != text:
            raise ParseError(f"PTX line {t.line}: expected {text!r}, found {t.text!r}")
        return t

    def accept(self, text: str) -> bool:
        if self.peek().text == text:
            self.i += 1
            return True
        return False

    # ------------------------------------------------------------------ module
    def parse(self) -> Module:
        while self.peek().kind != "eof":
            self.top_level()
        return self.module

    def top_level(self) -> None:
        attrs = []
        while self.peek().text in (".visible", ".extern", ".weak", ".common"):
            attrs.append(self.next().text)
        t = self.peek()
        if t.text in (".entry", ".func"):
            self.function(self.next().text[1:], attrs)
        elif t.text in (".global", ".shared", ".const", ".local"):
            decl = self.var_decl(function=None)
            decl.extern = ".extern" in attrs
            self.module.variables.append(decl)
        elif t.text == ".pragma":
            while self.next().text != ";":
                pass
        elif t.text == ";":
            self.next()
        else:
            raise ParseError(f"PTX line {t.line}: unexpected {t.text!r} at module level")

    def var_decl(self, function: str | None) -> VarDecl:
        space = self.next().text[1:]
        align = 0
        typ = None
        vec = 1
        while True:
            t = self.peek()
            if t.text == ".align":
                self.next()
                align = _int(self.next().text)
            elif t.text in (".v2", ".v4", ".v8"):
                vec = int(self.next().text[2:])
            elif t.text.startswith(".") and t.text[1:] in TYPE_BITS:
                typ = self.next().text[1:]
            elif t.text.startswith(".") and t.text in (".ptr",):
                self.next()
            else:
                break
        if typ is None:
            raise ParseError(f"PTX line {self.peek().line}: a {space} declaration without a type")
        name = self.next().text
        elem = max(TYPE_BITS[typ] // 8, 1) * vec
        count = 1
        unsized = False
        while self.accept("["):
            if self.peek().text == "]":
                unsized = True
            else:
                count *= _int(self.next().text)
            self.expect("]")
        if not align:
            align = elem
        decl = VarDecl(space, name, typ, align, 0 if unsized else elem * count, function=function)
        if self.accept("="):
            decl.init, decl.relocs = self.initializer(typ, elem // vec, decl.size)
        self.expect(";")
        return decl

    def initializer(self, typ: str, elem: int, size: int) -> tuple[bytes, list]:
        vals: list = []
        relocs: list = []

        def item() -> None:
            t = self.peek()
            if t.text == "{":
                self.next()
                while not self.accept("}"):
                    item()
                    self.accept(",")
                return
            neg = self.accept("-")
            t = self.next()
            if t.text in ("generic", "global"):  # generic(sym) / global-address initializers
                self.expect("(")
                sym = self.next().text
                add = 0
                if self.accept("+"):
                    add = _int(self.next().text)
                self.expect(")")
                relocs.append((len(vals) * elem, sym, add, t.text == "generic"))
                vals.append(0)
            elif t.kind == "num":
                vals.append(_number(t.text, neg, typ))
            elif t.kind == "id":
                add = 0
                if self.accept("+"):
                    add = _int(self.next().text)
                relocs.append((len(vals) * elem, t.text, add, False))
                vals.append(0)
            else:
                raise ParseError(f"PTX line {t.line}: cannot read the initializer at {t.text!r}")

        item()
        out = bytearray()
        for v in vals:
            out += int(v & ((1 << (8 * elem)) - 1)).to_bytes(elem, "little")
        out = out.ljust(size, b"\0") if size else out
        return bytes(out), relocs

    # ------------------------------------------------------------------ functions
    def param_list(self) -> list[ParamDecl]:
        out = []
        self.expect("(")
        while not self.accept(")"):
            out.append(self.param_decl())
            self.accept(",")
        return out

    def param_decl(self) -> ParamDecl:
        t = self.next()
        if t.text not in (".param", ".reg"):
            raise ParseError(f"PTX line {t.line}: expected .param, found {t.text!r}")
        align = 0
        typ = None
        ptr = None
        while True:
            t = self.peek()
            if t.text == ".align":
                self.next()
                align = _int(self.next().text)
            elif t.text == ".ptr":
                self.next()
            elif t.text in (".global", ".shared", ".const", ".local"):
                ptr = self.next().text[1:]
            elif t.text.startswith(".") and t.text[1:] in TYPE_BITS:
                typ = self.next().text[1:]
            else:
                break
        name = self.next().text
        elem = max(TYPE_BITS[typ or "b8"] // 8, 1)
        count = 1
        while self.accept("["):
            count *= _int(self.next().text)
            self.expect("]")
        return ParamDecl(name, typ or "b8", elem * count, align or elem, ptr)

    def function(self, kind: str, attrs: list[str]) -> None:
        start = self.peek().line
        first_tok = self.i
        rets = self.param_list() if self.peek().text == "(" else []
        name = self.next().text
        params = self.param_list() if self.peek().text == "(" else []
        while self.peek().text in (".noreturn",):
            self.next()
        directives = {d: v for k, d, v in self.directive_at if first_tok <= k <= self.i}
        fn = Function(name, kind, params, rets, line=start, directives=directives)
        if self.accept(";"):
            fn.defined = False
            if name not in self.module.functions:
                self.module.functions[name] = fn
            return
        self.module.functions[name] = fn
        self.body(fn)

    def body(self, fn: Function) -> None:
        self.expect("{")
        scopes: list[dict[str, str]] = [{}]
        loc: tuple = (0, 0, None)
        cell_line = 0
        while True:
            if self.i in self.locs:
                loc = self.locs[self.i]
                if loc[0] == 1:
                    cell_line = loc[1] or cell_line
                elif loc[2] is not None and loc[2][0] == 1:
                    cell_line = loc[2][1] or cell_line
            t = self.peek()
            if t.kind == "eof":
                raise ParseError(f"PTX line {t.line}: function {fn.name} is not closed")
            if t.text == "{":
                self.next()
                scopes.append({})
                for label in self._scope_labels():  # a branch may name a label before the scope defines it
                    self._declare(label, scopes)
                continue
            if t.text == "}":
                self.next()
                scopes.pop()
                if not scopes:
                    return
                continue
            if t.kind == "id" and self.peek(1).text == ":" and not t.text.startswith("%"):
                label = self._resolve(t.text, scopes)
                if label in fn.labels:
                    raise ParseError(f"PTX line {t.line}: label {t.text} is defined twice in one scope of "
                                     f"{fn.name}")
                fn.labels[label] = len(fn.body)
                self.i += 2
                continue
            if t.text == ".reg":
                self.reg_decl(fn, scopes)
                continue
            if t.text in (".shared", ".local", ".global", ".const"):
                fn_decl = self.var_decl(function=fn.name)
                if len(scopes) > 1:  # a variable of an inner scope: renamed apart like its registers
                    fn_decl.name = self._declare(fn_decl.name, scopes)
                if fn_decl.space == "local":
                    fn.locals.append(fn_decl)
                else:
                    self.module.variables.append(fn_decl)
                continue
            if t.text == ".param":
                p = self.param_decl()
                self.expect(";")
                unique = self._declare(p.name, scopes)
                p.name = unique
                fn.call_params[unique] = p
                continue
            if t.text == ".pragma":
                while self.next().text != ";":
                    pass
                continue
            if t.text == ";":
                self.next()
                continue
            ins = self.instruction(fn, scopes)
            ins.src_file, ins.src_line = loc[0], loc[1]
            ins.cell_line = cell_line
            fn.body.append(ins)

    def _scope_labels(self) -> list[str]:
        """The labels a ``{ }`` scope that starts at the current token defines itself (not those of scopes inside
        it): PTX scopes labels like registers, so an inline-asm block inlined twice defines its labels twice."""
        out = []
        depth = 0
        k = self.i
        toks = self.toks
        at_start = True  # a label can only open a statement
        while k < len(toks) - 1:
            t = toks[k]
            if t.kind == "eof":
                break
            if t.text == "{":
                depth += 1
                at_start = True
            elif t.text == "}":
                if depth == 0:
                    break
                depth -= 1
                at_start = True
            elif t.text == ";":
                at_start = True
            elif at_start and t.kind == "id" and toks[k + 1].text == ":" and not t.text.startswith("%"):
                if depth == 0:
                    out.append(t.text)
                k += 2
                continue
            else:
                at_start = False
            k += 1
        return out

    def _declare(self, name: str, scopes: list[dict[str, str]]) -> str:
        if len(scopes) == 1:
            scopes[0][name] = name
            return name
        self.scope_id += 1
        unique = f"{name}@{self.scope_id}"
        scopes[-1][name] = unique
        return unique

    def reg_decl(self, fn: Function, scopes: list[dict[str, str]]) -> None:
        self.expect(".reg")
        typ = None
        while self.peek().text.startswith(".") and (self.peek().text[1:] in TYPE_BITS or
                                                     self.peek().text in (".v2", ".v4")):
            tt = self.next().text
            if tt[1:] in TYPE_BITS:
                typ = tt[1:]
        if typ is None:
            raise ParseError(f"PTX line {self.peek().line}: .reg without a type")
        while True:
            name = self.next().text
            if self.accept("<"):
                n = _int(self.next().text)
                self.expect(">")
                for k in range(n):
                    fn.regs[self._declare(f"{name}{k}", scopes)] = typ
            else:
                unique = self._declare(name, scopes)
                fn.regs[unique] = typ
                self.reg_names.add(unique)
            if self.accept(";"):
                return
            self.expect(",")

    # ------------------------------------------------------------------ instructions
    def instruction(self, fn: Function, scopes: list[dict[str, str]]) -> Instr:
        first = self.peek()
        guard = None
        if self.accept("@"):
            neg = self.accept("!")
            guard = (self._resolve(self.next().text, scopes), neg)
        op = self.next()
        if op.kind != "id":
            raise ParseError(f"PTX line {op.line}: expected an instruction, found {op.text!r}")
        operands = []
        if not self.accept(";"):
            while True:
                operands.append(self.operand(scopes))
                if self.accept(";"):
                    break
                t = self.next()
                if t.text != ",":
                    raise ParseError(f"PTX line {t.line}: expected ',' or ';' in {op.text}, found {t.text!r}")
        text = self.module.lines[first.line - 1].strip() if first.line <= len(self.module.lines) else op.text
        return Instr(op.text, tuple(operands), guard, first.line, text=text)

    def _resolve(self, name: str, scopes: list[dict[str, str]]) -> str:
        for s in reversed(scopes):
            if name in s:
                return s[name]
        return name

    def operand(self, scopes: list[dict[str, str]]) -> object:
        t = self.peek()
        if t.text == "[":
            return self.address(scopes)
        if t.text == "{":
            self.next()
            items = []
            while not self.accept("}"):
                items.append(self.operand(scopes))
                self.accept(",")
            return Vec(tuple(items))
        if t.text == "(":
            self.next()
            items = []
            while not self.accept(")"):
                items.append(self.operand(scopes))
                self.accept(",")
            return Paren(tuple(items))
        if t.text == "!":
            self.next()
            return Neg(Reg(self._resolve(self.next().text, scopes)))
        neg = self.accept("-")
        t = self.next()
        if t.kind == "num":
            if t.text[:2] in ("0f", "0F"):
                v = FImm(int(t.text[2:], 16), 32)
                return FImm(v.bits ^ (1 << 31), 32) if neg else v
            if t.text[:2] in ("0d", "0D"):
                v = FImm(int(t.text[2:], 16), 64)
                return FImm(v.bits ^ (1 << 63), 64) if neg else v
            if "." in t.text:
                import struct

                bits = struct.unpack("<Q", struct.pack("<d", (-1 if neg else 1) * float(t.text)))[0]
                return FImm(bits, 64)
            return Imm(-_int(t.text) if neg else _int(t.text))
        if t.kind != "id":
            raise ParseError(f"PTX line {t.line}: cannot read operand {t.text!r}")
        if t.text == "_":
            if self.peek().text == "|":  # `elect.sync _|p, mask`: the lane id discarded
                self.next()
                return Pair(Sink(), Reg(self._resolve(self.next().text, scopes)))
            return Sink()
        if t.text.startswith("%") or self._resolve(t.text, scopes) in self.reg_names:
            r = Reg(self._resolve(t.text, scopes))
            if self.peek().text == "|":
                self.next()
                return Pair(r, Reg(self._resolve(self.next().text, scopes)))
            return r
        name = self._resolve(t.text, scopes)
        off = 0
        if self.peek().text == "+" and self.peek(1).kind == "num":
            self.next()
            off = _int(self.next().text)
        return Sym(name, off)

    def address(self, scopes: list[dict[str, str]]) -> Addr:
        self.expect("[")
        base: object = None
        off = 0
        coords = None
        t = self.peek()
        if t.kind == "num" or t.text == "-":
            neg = self.accept("-")
            off = _int(self.next().text) * (-1 if neg else 1)
        else:
            name = self.next().text
            is_reg = name.startswith("%") or self._resolve(name, scopes) in self.reg_names
            base = Reg(self._resolve(name, scopes)) if is_reg else Sym(self._resolve(name, scopes))
        while self.peek().text in ("+", "-"):
            sign = -1 if self.next().text == "-" else 1
            if self.accept("-"):
                sign = -sign
            off += sign * _int(self.next().text)
        if self.accept(","):
            c = self.operand(scopes)
            coords = c if isinstance(c, Vec) else Vec((c,))
        self.expect("]")
        return Addr(base, off, coords)


def _number(text: str, neg: bool, typ: str) -> int:
    if text[:2] in ("0f", "0F"):
        v = int(text[2:], 16)
        return v ^ (1 << 31) if neg else v
    if text[:2] in ("0d", "0D"):
        v = int(text[2:], 16)
        return v ^ (1 << 63) if neg else v
    if "." in text:
        import struct

        x = (-1 if neg else 1) * float(text)
        if typ == "f32":
            return struct.unpack("<I", struct.pack("<f", x))[0]
        return struct.unpack("<Q", struct.pack("<d", x))[0]
    v = _int(text)
    return -v if neg else v


def parse(text: str) -> Module:
    """Parse a whole PTX module."""
    return _Parser(text).parse()
