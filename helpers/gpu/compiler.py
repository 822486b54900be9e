"""NVRTC compilation to CUBIN, with an on-disk cache and a student-facing compile report.

Works without a GPU or driver: NVRTC only needs its own library. The report's figures come from ptxas's
verbose output (spills, stack) and from the CUBIN's ELF sections (registers, static shared memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from helpers.gpu import notebook

from .errors import CompileError

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"
_CACHE_FORMAT = 3


# ------------------------------------------------------------------------------------------- report
@dataclass
class CompileReport:
    """What the compiler made of one kernel."""

    name: str
    lowered_name: str
    arch: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    local_bytes: int = 0
    static_smem: int = 0
    uses_wgmma: bool = False
    uses_setmaxnreg: bool = False
    wgmma_serialized: bool = False
    setmaxnreg_ignored: bool = False
    log: str = ""
    warnings: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0
    cached: bool = False
    nvrtc_version: str = ""

    @property
    def spill_bytes(self) -> int:
        """Bytes spilled to and reloaded from local memory, together."""
        return self.spill_stores + self.spill_loads

    def summary(self) -> str:
        """One line, e.g. 'compiled for sm_90a: 58 registers, 0 spills'."""
        spills = "0 spills" if self.spill_bytes == 0 else (
            f"spills: {self.spill_stores} B stored, {self.spill_loads} B loaded")
        s = f"compiled for {self.arch}: {self.registers} registers, {spills}"
        if self.local_bytes:
            s += f", {self.local_bytes} B stack"
        if self.static_smem:
            s += f", {self.static_smem} B static shared memory"
        if self.uses_wgmma:
            s += ", wgmma" + (" (SERIALIZED, see log)" if self.wgmma_serialized else "")
        if self.uses_setmaxnreg:
            s += ", setmaxnreg"
        if self.setmaxnreg_ignored:
            s += ", setmaxnreg IGNORED (see log)"
        return s

    def __str__(self) -> str:
        return self.summary()


class Kernel:
    """A compiled kernel: its CUBIN, PTX and report; loaded onto the GPU on first launch."""

    def __init__(self, source: str, name: str, options: tuple[str, ...], arch: str, cubin: bytes, ptx: str,
                 report: CompileReport) -> None:
        self.source = source
        self.name = name
        self.options = options
        self.arch = arch
        self.cubin = cubin
        self.ptx = ptx
        self.report = report
        self._loaded: dict[str, Any] = {}

    @property
    def lowered_name(self) -> str:
        return self.report.lowered_name

    def __reduce__(self) -> tuple[Any, ...]:  # pickles as its source: a child process recompiles (cache hit)
        return (_recompile, (self.source, self.name, self.options, self.arch))

    def __repr__(self) -> str:
        return f"<Kernel {self.name}: {self.report.summary()}>"


def _recompile(source: str, name: str, options: tuple[str, ...], arch: str) -> Kernel:
    return compile(source, name, options=options, arch=arch)


# ------------------------------------------------------------------------------------------- NVRTC
@lru_cache(maxsize=1)
def nvrtc_version() -> tuple[int, int] | None:
    """(major, minor) of the NVRTC library, or None when it cannot be loaded."""
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        return (major, minor) if err == nvrtc.nvrtcResult.NVRTC_SUCCESS else None
    except Exception:
        return None


@lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """The course header directory, then the wheels' CUDA headers (cuda_bf16.h, CCCL) when found."""
    dirs = [str(INCLUDE_DIR)]
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        for lib in ("cudart", "cccl"):
            try:
                d = find_nvidia_header_directory(lib)
            except Exception:
                d = None
            if d:
                dirs.append(str(d))
    except ImportError:
        pass
    if not any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in dirs):
        crt = _crt_include_dir()
        if crt:
            dirs.append(crt)
    return tuple(dirs)


def _crt_include_dir() -> str | None:
    """A directory holding ``crt/mma.h`` (what ``<mma.h>`` includes): the nvidia-cuda-crt wheel wherever it was
    installed (next to nvidia-cuda-runtime, or a ``--target`` folder on sys.path), else a CUDA toolkit's."""
    import sys

    cands = [os.path.join(p, "nvidia", "cu13", "include") for p in sys.path if p]
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    cands += [os.path.join(home, "include")] if home else []
    cands += ["/usr/local/cuda/include"]
    return next((c for c in cands if os.path.exists(os.path.join(c, "crt", "mma.h"))), None)


def _header_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(INCLUDE_DIR.glob("*.cuh")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def cache_dir() -> Path | None:
    """Where CUBINs are cached: $HELPERS_CUBIN_CACHE ('off' disables), else the repo's .cubins/, else
    ~/.cache/hopper-gemm-course/cubins."""
    env = os.environ.get("HELPERS_CUBIN_CACHE")
    if env:
        return None if env.lower() in ("off", "0", "none") else Path(env)
    repo = INCLUDE_DIR.parent.parent
    if (repo / "pyproject.toml").exists() and os.access(repo, os.W_OK):
        return repo / ".cubins"
    return Path.home() / ".cache" / "hopper-gemm-course" / "cubins"


_GLOBAL_RE = re.compile(
    r"__global__\s+(?:(?:void|static|inline|__noinline__|__forceinline__)\s+|__launch_bounds__\s*\([^)]*\)\s*"
    r"|__cluster_dims__\s*\([^)]*\)\s*)*(\w+)\s*\(")


def _strip_comments(src: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)


def find_kernel_names(source: str) -> list[str]:
    """Names of the __global__ functions defined in the source (a regex, good enough for course cells)."""
    return list(dict.fromkeys(m.group(1) for m in _GLOBAL_RE.finditer(_strip_comments(source))))


def _is_template_kernel(source: str, name: str) -> bool:
    pat = re.compile(r"template\s*<[^{;]*?>\s*(?:extern\s+\"C\"\s*)?__global__[^;{(]*?\b" + re.escape(name) + r"\s*\(")
    return bool(pat.search(_strip_comments(source)))


def _nvrtc_log(nvrtc: Any, prog: Any) -> str:
    err, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def _format_error(log: str, source: str, filename: str, arch: str) -> str:
    lines = source.splitlines()
    inc = str(INCLUDE_DIR) + os.sep
    clean = "\n".join(ln for ln in log.replace(inc, "").splitlines() if not ln.startswith("ptxas info"))
    out = [f"compiling {filename} for {arch} failed:"]
    errs = re.findall(rf"^{re.escape(filename)}\((\d+)\): (?:catastrophic )?error: (.*)$", clean, re.M)
    for lineno, msg in errs[:5]:
        i = int(lineno)
        text = lines[i - 1].strip() if 0 < i <= len(lines) else ""
        where = notebook.find_line(lines, i - 1)  # the line's place in the notebook cell the student typed it in
        if where is not None:
            out.append(f"  line {where.line} of your cell [{where.count}]: {msg}\n      {where.line} | {text}")
        else:
            out.append(f"  line {i}: {msg}\n      {i} | {text}")
    if not errs:
        out.append("  " + "\n  ".join(ln for ln in clean.splitlines() if ln.strip())[:4000])
    else:
        out.append("the compiler's log (its line numbers count lines of the CUDA source):\n" + clean.strip())
    if "not supported on .target 'sm_90'" in clean or "requires .target sm_90a" in clean:
        out.append("hint: wgmma and setmaxnreg need arch='sm_90a' (the 'a' matters).")
    return "\n".join(out)


def _cache_key(source: str, name: str, options: tuple[str, ...], arch: str) -> str:
    nv = nvrtc_version()
    blob = json.dumps([_CACHE_FORMAT, source, name, list(options), arch, nv, _header_digest()])
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def compile(source: str, name: str | None = None, *, options: Sequence[str] = (), arch: str = "sm_90a",
            filename: str = "cell.cu", cache: bool = True) -> Kernel:
    """Compile CUDA C++ `source` with NVRTC to a CUBIN for `arch` and return a Kernel.

    `name` is the __global__ function to launch (found automatically when the source defines one; for a
    template give the instantiation, e.g. ``"gemm<128>"``). ``#include "hopper.cuh"`` works. Errors raise
    CompileError with the offending cell lines. Results are cached on disk by source, options, arch, NVRTC
    version and header contents.
    """
    options = tuple(options)
    if name is None:
        names = find_kernel_names(source)
        if len(names) != 1:
            found = ", ".join(names) if names else "none"
            raise CompileError(f"cannot tell which kernel to compile (__global__ functions found: {found}); "
                               "pass name=...")
        name = names[0]
        if _is_template_kernel(source, name):
            raise CompileError(f"kernel {name!r} is a template: pass the instantiation, e.g. name='{name}<64>'")
    key = _cache_key(source, name, options, arch)
    cdir = cache_dir() if cache else None
    if cdir is not None:
        hit = _cache_load(cdir, key)
        if hit is not None:
            cubin, ptx, meta = hit
            report = CompileReport(**meta)
            report.cached = True
            return Kernel(source, name, options, arch, cubin, ptx, report)
    cubin, ptx, report = _compile_uncached(source, name, options, arch, filename)
    if cdir is not None:
        _cache_store(cdir, key, cubin, ptx, asdict(report))
    return Kernel(source, name, options, arch, cubin, ptx, report)


def _compile_uncached(source: str, name: str, options: tuple[str, ...], arch: str,
                      filename: str) -> tuple[bytes, str, CompileReport]:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover
        raise CompileError(f"NVRTC is not available ({e}); pip install nvidia-cuda-nvrtc cuda-bindings") from e
    opts = [f"-arch={arch}", "-std=c++17", "-Xptxas=-v", "-lineinfo", "-default-device"]
    opts += [f"-I{d}" for d in include_dirs()]
    opts += list(options)
    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    try:
        nvrtc.nvrtcAddNameExpression(prog, name.encode())
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _nvrtc_log(nvrtc, prog)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(_format_error(log, source, filename, arch), log)
        err, lowered = nvrtc.nvrtcGetLoweredName(prog, name.encode())
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"kernel {name!r} not found in {filename} (is it a __global__ function?)", log)
        lowered_s = lowered.decode() if isinstance(lowered, bytes) else str(lowered)
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * n
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        if n == 0:
            raise CompileError(f"NVRTC produced no CUBIN for arch {arch!r}: use a real architecture like sm_90a",
                               log)
        ptx = ""
        err, n = nvrtc.nvrtcGetPTXSize(prog)
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and n > 0:
            buf = b" " * n
            nvrtc.nvrtcGetPTX(prog, buf)
            ptx = buf.rstrip(b"\0").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    report = build_report(cubin, ptx, log, name, lowered_s, arch)
    report.compile_seconds = seconds
    return bytes(cubin), ptx, report


# ------------------------------------------------------------------------------------------- cache
def _cache_load(cdir: Path, key: str) -> tuple[bytes, str, dict[str, Any]] | None:
    try:
        meta = json.loads((cdir / f"{key}.json").read_text())
        cubin = (cdir / f"{key}.cubin").read_bytes()
        ptx = (cdir / f"{key}.ptx").read_text()
        return cubin, ptx, meta
    except (OSError, ValueError):
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _cache_store(cdir: Path, key: str, cubin: bytes, ptx: str, meta: dict[str, Any]) -> None:
    try:
        cdir.mkdir(parents=True, exist_ok=True)
        _atomic_write(cdir / f"{key}.cubin", cubin)
        _atomic_write(cdir / f"{key}.ptx", ptx.encode())
        _atomic_write(cdir / f"{key}.json", json.dumps(meta).encode())  # written last: marks the entry complete
    except OSError:
        pass  # a read-only home is no reason to fail a compile


# ------------------------------------------------------------------------------------------- CUBIN reading
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F


@dataclass
class ElfFacts:
    """Per-kernel facts read from a CUBIN's ELF sections."""

    registers: int | None = None
    frame_size: int | None = None
    static_smem: int = 0
    text: bytes = field(default=b"", repr=False)


def read_cubin(cubin: bytes, lowered_name: str) -> ElfFacts:
    """Registers (EIATTR_REGCOUNT), stack frame (EIATTR_FRAME_SIZE), static shared memory (.nv.shared.<k>)
    and the machine code (.text.<k>) of one kernel, from the CUBIN's ELF (64-bit little endian)."""
    facts = ElfFacts()
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return facts
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", cubin, shoff + i * shentsize)
        secs.append((name, typ, off, size, link, info))
    stroff = secs[shstrndx][2]

    def sname(i: int) -> str:
        start = stroff + secs[i][0]
        return cubin[start:cubin.index(b"\0", start)].decode(errors="replace")

    names = [sname(i) for i in range(shnum)]
    # the kernel's symbol index, for the global .nv.info attributes
    sym_index = None
    if ".symtab" in names:
        st = names.index(".symtab")
        _, _, off, size, link, _ = secs[st]
        stroff2 = secs[link][2]
        for j in range(size // 24):
            st_name, = struct.unpack_from("<I", cubin, off + j * 24)
            start = stroff2 + st_name
            if cubin[start:cubin.index(b"\0", start)].decode(errors="replace") == lowered_name:
                sym_index = j
                break
    for i, n in enumerate(names):
        _, typ, off, size, _, _ = secs[i]
        if n == f".nv.shared.{lowered_name}":
            facts.static_smem = size
        elif n == f".text.{lowered_name}":
            facts.text = cubin[off:off + size]
        elif n == ".nv.info" and sym_index is not None:
            p, end = off, off + size
            while p + 4 <= end:
                fmt, attr, sz = cubin[p], cubin[p + 1], struct.unpack_from("<H", cubin, p + 2)[0]
                if fmt == 4:
                    if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and sz == 8:
                        sym, val = struct.unpack_from("<II", cubin, p + 4)
                        if sym == sym_index:
                            if attr == EIATTR_REGCOUNT:
                                facts.registers = val
                            else:
                                facts.frame_size = val
                    p += 4 + sz
                else:
                    p += 4
    return facts


def _ptxas_block(log: str, lowered: str) -> str:
    m = re.search(rf"Compiling entry function '{re.escape(lowered)}'.*?(?=Compiling entry function|\Z)", log, re.S)
    return m.group(0) if m else log


def build_report(cubin: bytes, ptx: str, log: str, name: str, lowered: str, arch: str) -> CompileReport:
    """Combine ptxas's verbose lines, the ELF facts and the PTX into a CompileReport."""
    block = _ptxas_block(log, lowered)
    r = CompileReport(name=name, lowered_name=lowered, arch=arch)
    nv = nvrtc_version()
    r.nvrtc_version = f"{nv[0]}.{nv[1]}" if nv else ""
    if m := re.search(r"Used (\d+) registers", block):
        r.registers = int(m.group(1))
    if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block):
        r.local_bytes, r.spill_stores, r.spill_loads = (int(x) for x in m.groups())
    facts = read_cubin(cubin, lowered)
    if facts.registers is not None:
        r.registers = facts.registers
    if facts.frame_size is not None:
        r.local_bytes = facts.frame_size
    r.static_smem = facts.static_smem
    if m := re.search(r"Used \d+ registers.*?(\d+) bytes smem", block):
        r.static_smem = int(m.group(1))  # ptxas's figure; the ELF section also counts alignment padding
    body = _ptx_function(ptx, lowered)
    r.uses_wgmma = "wgmma.mma_async" in body
    r.uses_setmaxnreg = "setmaxnreg" in body
    r.wgmma_serialized = bool(re.search(r"wgmma.*serializ", log, re.I))
    r.setmaxnreg_ignored = r.uses_setmaxnreg and bool(re.search(r"C7508|setmaxnreg.*ignor", log, re.I))
    if r.setmaxnreg_ignored:
        r.uses_setmaxnreg = False
    r.log = log
    r.warnings = [ln for ln in log.splitlines() if "warning" in ln.lower() or re.search(r"\(C7\d\d\d\)", ln)]
    return r


def _ptx_function(ptx: str, lowered: str) -> str:
    """The PTX text of one entry (falls back to the whole module, which holds inlined device functions)."""
    m = re.search(rf"\.entry {re.escape(lowered)}\b(.*?)(?=\n\.(?:visible|weak)?\s*\.?entry |\Z)", ptx, re.S)
    return m.group(1) if m else ptx
