"""Pieces shared by the lab graders: calling the student's code, compiling a student's CUDA and reading the PTX it
became, running a kernel (the one run path), carrying a student's wrappers from one lab to the next, and the
diff each lab opens with.

A wrapper written in inline PTX can be graded without a GPU: NVRTC compiles it (a stub's ``#error`` fails
with its hint), and the PTX shows the instruction as the student wrote it, between ``// begin inline asm`` and
``// end inline asm``, with each operand a virtual register. :func:`resolve` follows a register back through
``mov`` / ``cvta`` / ``cvt`` to where its value came from (a shared-memory variable, a kernel parameter, an
immediate), so a probe kernel that passes distinctive values can check the operand order.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import html
import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helpers.course import grading

from ._ptxflow import split_operands  # one reader of operands for the checks and the flow analysis

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
    "where",
    "Explanation",
    "check_no_accumulator_spills",
    "SPILL_SLACK_BYTES",
    "call",
    "carry",
    "saved_variable",
    "course_kernel",
    "kernel_diff",
    "on_hardware",
    "MEASURED",
    "Line",
    "stream",
    "symbol_plus_offset",
    "can_run",
    "on_h100",
    "run_isolated_call",
    "source_diff",
    "GemmLaunch",
    "Opening",
    "run_gemm",
    "time_gemm",
    "gemm_work_child",
    "emulated",
    "SPEED_FLOOR",
    "check_speed_floor",
]

HELPERS = Path(__file__).resolve().parents[2]


def compile_student(source: str, name: str, *, what: str) -> Any:
    """Compile CUDA source holding the student's code; a compile error becomes a plain-words CheckFailed."""
    from helpers import gpu
    from helpers.course import progress

    try:
        with progress.step(f"compiling {what}", slow=True):
            return gpu.compile(source, name)
    except gpu.CompileError as exc:
        text = str(exc)
        m = re.search(r'not written yet(?: \((in Lab \d)\))?: ((?:[^"\\\n]|\\.)*)', text)
        if m:
            where = f" {m.group(1)}" if m.group(1) else ""
            hint = m.group(2).replace('\\"', '"').strip()
            raise grading.CheckFailed(
                f"❌ {what} is not written yet{where}: it still holds the #error stub (hint: {hint})"
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


# ---------------------------------------------------------------------------------------------------------
# running the student's kernel: the one run path, where it ran, and the PTX as the explanation
# ---------------------------------------------------------------------------------------------------------
def on_h100() -> bool:
    """True when kernels run on a real Hopper GPU (not on the course's PTX executor): timings, occupancy queries and
    full-size problems need it."""
    from helpers import gpu

    return gpu.hopper_available() and not gpu.executor_active()


def on_hardware() -> bool:
    """The same as :func:`on_h100` (the name the Lab 2-4 graders use): full-size shapes and timings."""
    return on_h100()


def where(*, timing: bool = False, hazards: bool = True) -> str:
    """Where the student's kernel runs here, as the ✓ lines say it: ``ran on the H200`` (the GPU's own short name:
    ``gpu.where_name``) or ``ran on the emulator (no sm_90 GPU; hazard mode)``. ``timing``: the check times the kernel
    on the GPU, so an emulated run also says that it was not timed; ``hazards=False``: a plain emulated run."""
    from helpers import gpu

    if on_h100():
        return f"ran on {gpu.where_name()}"
    if _BESIDE["on"]:
        why = f"beside {gpu.where_name()}, the same kernel on a small shape"
    else:
        why = "HELPERS_EXECUTOR=force" if gpu.hopper_available() else "no sm_90 GPU"
    mode = "; hazard mode" if hazards and hazard_mode() else ""
    return f"ran on the emulator ({why}{mode}{'; not timed: the emulator does not time kernels' if timing else ''})"


def hazard_mode() -> bool:
    """Whether graded runs on the executor use its hazard mode (unless ``HELPERS_EXECUTOR_HAZARDS=0``)."""
    return os.environ.get("HELPERS_EXECUTOR_HAZARDS", "").strip() != "0"


def runnable(kernel: Any, checked: str) -> bool:
    """True when the kernel can run here (the H100, or the course's PTX executor): then prints the runtime's one line
    (registers, spills, where it runs). Otherwise (``HELPERS_EXECUTOR=off`` without a GPU) that line says the run was
    skipped and what was ``checked`` instead, and False."""
    from helpers import gpu

    return not gpu.skip_without_hopper(kernel, checked=checked)


#: the name the Lab 5-7 graders use
can_run = runnable


def run(target: Any, *args: Any, what: str, timeout: float = 60.0, cluster: Any = None, hint: str = "",
        hazards: bool | None = None) -> Any:
    """THE run path of every CUDA check. ``target`` is a Kernel (then ``args`` are grid, block, shared memory and the
    kernel's arguments: numpy arrays are copied in and come back, ``gpu.TensorMapArg`` becomes a tensor map) or a
    module-level function that launches kernels itself (then its return value comes back).

    On the H100 the run happens in a child process (``gpu.run_isolated``), so a fault or a deadlock is a sentence and
    the notebook survives. On the PTX executor it happens in this process (an emulated kernel cannot break it: its
    memory is numpy arrays, a fault is an exception, and each launch has its own time limit). A fault or a deadlock
    becomes a CheckFailed with the runtime's sentence and ``hint``. On the executor the run is in hazard mode unless
    ``hazards=False`` (or ``HELPERS_EXECUTOR_HAZARDS=0``): every copy lands at the latest moment the rules allow and
    a race the GPU's timing would hide fails the run, naming both accesses."""
    from helpers import gpu

    extra = {"cluster": cluster} if cluster is not None else {}
    mode = contextlib.nullcontext()
    if gpu.executor_active() and hazards is not False and hazard_mode():
        from helpers.gpu import executor

        mode = executor.executor_options(hazards=True)
    from helpers.course import progress

    with mode, progress.step(f"running {what} " + ("on the executor" if gpu.executor_active() else "on the GPU"),
                             slow=True):
        return _run(target, args, extra, what, timeout, hint)


def _run(target: Any, args: tuple, extra: dict, what: str, timeout: float, hint: str) -> Any:
    from helpers import gpu

    try:
        if gpu.executor_active() and not isinstance(target, gpu.Kernel):
            result = _call_here(target, args, extra)
        else:
            result = gpu.run_isolated(target, *args, timeout=timeout, **extra)
    except gpu.GpuError as exc:
        tail = f"\n    hint: {hint}" if hint else ""
        raise grading.CheckFailed(f"❌ {what} failed when it {where()}: {exc}{tail}") from None
    return result.arrays if isinstance(result, gpu.IsolatedResult) else result


def _call_here(fn: Any, args: tuple, kwargs: dict) -> Any:
    """Call a run function in this process (emulated kernels only): errors as the child process reports them."""
    from helpers import gpu

    try:
        return fn(*args, **kwargs)
    except gpu.GpuError:
        raise
    except Exception as exc:  # noqa: BLE001 - the child path's sentence for an error that is not the GPU's
        raise RuntimeError(f"the isolated run raised {type(exc).__name__}: {exc}") from exc


def run_on_gpu(kernel: Any, grid: Any, block: Any, smem: int, *args: Any, what: str,
               timeout: float = 30.0, cluster: Any = None) -> list[Any]:
    """Launch a kernel through :func:`run`; numpy arrays among ``args`` come back after the run."""
    return run(kernel, grid, block, smem, *args, what=what, timeout=timeout, cluster=cluster)


def run_isolated_call(fn: Any, *args: Any, what: str, timeout: float, hint: str = "") -> Any:
    """Run a module-level function that launches kernels, through :func:`run`."""
    return run(fn, *args, what=what, timeout=timeout, hint=hint)


class Explanation:
    """The PTX read as the explanation of a run: where the kernel can run, the run is the grade.

    Static checks (the instruction's full form, the protocol on every path, the compile report) run inside
    ``with ex:``. Where the kernel cannot run, a failure there fails the check at once (they are the grade). Where it
    can, the first failure is kept and the run goes ahead inside ``with ex.run():``: a failing run is reported with
    that finding as its likely cause, and :meth:`settle` fails a run that passed while the PTX shows a mistake (a race
    that this run's timing did not expose, or a cost in speed)."""

    def __init__(self, c: grading.Check, *, defer: bool | None = None):
        from helpers import gpu

        self.c = c
        self.defer = gpu.can_run() if defer is None else defer
        self.finding: grading.CheckFailed | None = None
        self.ran = False

    def __enter__(self) -> Explanation:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if kind is not None and issubclass(kind, grading.CheckFailed) and self.defer:
            if self.finding is None:
                self.finding = exc
            return True
        return False

    def _reason(self) -> str:
        """The finding without the check's title and the seed line, indented under the run's failure."""
        lines = str(self.finding).split("\n")
        first = re.sub(r"^\S+ " + re.escape(self.c.title) + r": ", "", lines[0])
        rest = [ln for ln in lines[1:] if not ln.startswith("    (random inputs drawn")]
        return "\n".join([f"    what the PTX shows (the likely cause): {first}"] + ["    " + ln for ln in rest])

    def runnable(self, kernel: Any, checked: str) -> bool:
        """:func:`runnable`; where the kernel cannot run, the finding kept (if any) fails the check now."""
        if runnable(kernel, checked):
            return True
        self.settle()
        return False

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        """The run: its failure carries the finding kept from the PTX, if any."""
        self.ran = True
        try:
            yield
        except grading.CheckFailed as exc:
            text = str(exc)
            if self.c.title not in text.split("\n", 1)[0]:  # the run path's sentence: name the check first
                text = re.sub(r"^(\S+) ", lambda m: f"{m.group(1)} {self.c.title}: ", text, count=1)
            raise grading.CheckFailed(text if self.finding is None else f"{text}\n{self._reason()}") from None

    def settle(self) -> None:
        """After a run that passed: fail with the finding kept from the PTX, if any."""
        if self.finding is not None:
            if not self.ran:  # nothing ran: the finding is the grade, as it stands
                raise self.finding
            raise grading.CheckFailed(
                f"{self.finding}\n    (the run above gave the right result all the same: a run shows only what its "
                "own timing exposes; this is read from the PTX and the compile report, where it holds on every path)")


# ---------------------------------------------------------------------------------------------------------
# calling the student's Python
# ---------------------------------------------------------------------------------------------------------
def _student_frames(tb: Any) -> list[traceback.FrameSummary]:
    """The frames of a traceback that are the student's own code (not the course's, not a library's)."""
    frames = traceback.extract_tb(tb)
    return [f for f in frames if not f.filename.startswith(str(HELPERS)) and "site-packages" not in f.filename
            and "/lib/python" not in f.filename]


def call(c: grading.Check, what: str, fn: Callable[..., Any], *args: Any, hint: str = "", **kwargs: Any) -> Any:
    """Call the student's function inside a check. A stub's NotImplementedError says "not written yet" (with its
    hint); any other exception fails the check with a ❌ line naming it and the student's own line."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as exc:
        hint_text = f" (hint: {exc})" if str(exc) else ""
        c.fail(f"{what} is not written yet: it still raises NotImplementedError{hint_text}")
    except grading.CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - the student's error, reported in words
        frames = _student_frames(exc.__traceback__)
        detail = ""
        if frames:
            f = frames[-1]
            detail = f"    in {f.name}, line {f.lineno} of your cell" + (f": {f.line}" if f.line else "")
        c.fail(f"{what} raised {type(exc).__name__}: {exc}", detail=detail, hint=hint)


# ---------------------------------------------------------------------------------------------------------
# carrying the student's wrappers from one lab to the next
# ---------------------------------------------------------------------------------------------------------
def _assigned_literal(source: str, variable: str) -> str | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def _find_notebook(notebook: str, here: Path) -> Path | None:
    stem = Path(notebook).stem
    for cand in (here / notebook, here.parent / stem / notebook):  # side by side, or nbgrader's one folder each
        if cand.exists():
            return cand
    return None


def saved_variable(notebook: str, variable: str, here: Path) -> tuple[Path | None, str | None, str]:
    """The string literal ``variable`` is assigned in the saved ``notebook`` beside ``here`` (or in nbgrader's one
    folder per assignment): (its path, the text, "") or, when it cannot be read, (path or None, None, why)."""
    path = _find_notebook(notebook, here)
    if path is None:
        return None, None, f"{notebook} is not beside this notebook"
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return path, None, f"could not read {path.name}: {exc}"
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            found = _assigned_literal(src, variable)
            if found is not None:
                return path, found, ""
    return path, None, f"{path.name} has no cell assigning {variable}"


def carry(notebook: str, variable: str, lab: str, *, here: Path | None = None,
          check: Callable[[str], None] | None = None) -> str:
    """The CUDA source the student's earlier lab ``notebook`` assigns to ``variable`` (read from the saved
    notebook beside this one), so each lab builds on the student's own wrappers.

    Never raises: a missing notebook or an unwritten stub gives source whose ``#error`` says so (the checks that
    compile it report it). With ``check`` (that lab's grader), prints one line saying whether the carried code
    still passes it."""
    here = Path.cwd() if here is None else here
    path = _find_notebook(notebook, here)
    if path is None:
        print(f"⚠ {variable}: {notebook} is not beside this notebook ({here}); the checks that use it will say so")
        return f'#error "not written yet (in {lab}): {variable} comes from {notebook}, which was not found"\n'
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"⚠ {variable}: could not read {path.name}: {exc}")
        return f'#error "not written yet (in {lab}): {notebook} could not be read"\n'
    found = None
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            found = _assigned_literal(src, variable)
            if found is not None:
                break
    if found is None:
        print(f"⚠ {variable}: {path.name} has no cell assigning it")
        return f'#error "not written yet (in {lab}): {notebook} does not define {variable}"\n'
    found = found.replace('#error "not written yet: ', f'#error "not written yet (in {lab}): ')
    # a stub's hint points "above", at its own lab's text: from here, that text is in the earlier lab
    found = re.sub(r'^(#error "not written yet \(in .*)$', lambda m: re.sub(r"\babove\b", f"shown in {lab}",
                                                                              m.group(1)), found, flags=re.M)
    saved = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
    status = ""
    if "#error" in found:
        status = ": not written yet there (so the checks here that use it fail until it is)"
    elif check is not None:
        import io

        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                check(found)
                status = f": ✓ it passes {lab}'s check"
            except grading.CheckFailed as exc:
                first = str(exc).strip().splitlines()[0]
                status = f": ⚠ it does not pass {lab}'s check ({first}); fix it there first"
        del out
    print(f"{variable} from {path.name} (saved {saved}){status}")
    return found


# ---------------------------------------------------------------------------------------------------------
# the diff each lab opens with
# ---------------------------------------------------------------------------------------------------------
#: The H100 run the Labs 2-3 speeds come from (tools/h100/lab_speeds.py; GPU, driver and date inside).
LAB_SPEEDS = Path(__file__).resolve().parents[3] / "bench" / "results" / "2026-11-22-labs123-h100.json"


def _measured_speeds() -> dict[str, str | None]:
    """Each lab's kernel at 4096³ on the H100, beside cuBLAS in the same run, as the opening diffs show it."""
    out: dict[str, str | None] = {"lab1": "a copy kernel: not a GEMM, no TFLOP/s", "lab2": None, "lab3": None}
    try:
        runs = json.loads(LAB_SPEEDS.read_text())
    except (OSError, ValueError):
        return out
    day = str(runs.get("meta", {}).get("date", ""))[:10]
    for lab in ("lab2", "lab3"):
        r = runs.get(f"{lab}_4096")
        if r:
            out[lab] = (f"{r['tflops']:.1f} TFLOP/s, {r['ratio']:.2f}× cuBLAS ({r['cublas_tflops']:.0f} TFLOP/s in the "
                        f"same run, {day})")
    return out


#: The measured speed of each lab's kernel at 4096³ on the H100, shown beside the diffs (None: no H100 run yet).
MEASURED: dict[str, str | None] = _measured_speeds()


#: beside a released notebook in a class: the solved kernels of the labs before it (helpers.course.answerkey)
RELEASE_FILE = "course-kernels.json"


def _kernels() -> dict[str, dict]:
    """Each lab's kernel entry from the course's data; in a class (whose install holds none) from the file a released
    lab brings beside its notebook."""
    path = HELPERS / "course" / "data" / "labs.json"
    kernels = json.loads(path.read_text()).get("kernels", {}) if path.exists() else {}
    if not kernels:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            kernels = dict(json.loads(Path(RELEASE_FILE).read_text()).get("kernels", {}))
    return kernels


def course_kernel(lab: str) -> str:
    """The course's kernel of ``lab`` ("lab4"), solved (solution markers and hints left out), from the course's data
    (``make labs`` writes it); empty when the data is missing."""
    from helpers.course.hints import decode

    solved = _kernels().get(lab, {}).get("solved", "")
    return decode(solved) if solved else ""


class _Html:
    def __init__(self, markup: str, text: str):
        self.markup, self.text = markup, text

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text


def kernel_diff(old: str, new: str, old_label: str, new_label: str, *, note: str = "", context: int = 2) -> _Html:
    """A compact coloured unified diff of two kernels (HTML in a notebook, plain text elsewhere)."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_label, new_label, lineterm="",
                                      n=context))
    styles = {"+": "background:#e6ffec;color:#1a7f37", "-": "background:#ffebe9;color:#cf222e",
              "@": "color:#8250df;background:#f6f8fa"}
    rows = []
    for line in lines[2:]:
        style = styles.get(line[:1], "color:#57606a")
        rows.append(f'<div style="{style};white-space:pre">{html.escape(line) or "&nbsp;"}</div>')
    added = sum(1 for x in lines[2:] if x.startswith("+"))
    removed = sum(1 for x in lines[2:] if x.startswith("-"))
    head = (f"<b>{html.escape(old_label)} → {html.escape(new_label)}</b>: {added} lines added, {removed} removed"
            + (f"<br><span style='color:#57606a'>{html.escape(note)}</span>" if note else ""))
    markup = (f'<div style="max-width:880px;font-size:12px">{head}<div style="font-family:monospace;'
              f'max-height:480px;overflow:auto;border:1px solid #d0d7de;border-radius:6px;padding:4px 0;'
              f'margin-top:4px">{"".join(rows)}</div></div>')
    text = f"{old_label} -> {new_label}: {added} added, {removed} removed\n" + "\n".join(lines[2:])
    return _Html(markup, text)


def lab_diff(prev_lab: str, lab: str, *, prev_source: str | None = None, prev_label: str | None = None,
             note: str | None = None) -> _Html:
    """What ``lab`` changes in ``prev_lab``'s kernel: the previous kernel as solved (this lab gives those lines
    anyway), this lab's as students see it (the parts they write are one ``// ✎`` line), with the previous step's
    measured speed."""
    kernels = _kernels()
    if lab not in kernels:
        return _Html("<i>run make labs: the kernels' skeletons are missing</i>", "run make labs")
    new = kernels[lab]["source"]
    old = prev_source if prev_source is not None else (course_kernel(prev_lab)
                                                         or kernels.get(prev_lab, {}).get("source", ""))
    measured = MEASURED.get(prev_lab)
    label = prev_label or f"Lab {prev_lab[3:]}'s kernel"
    if note is None:
        note = f"{label} on the H100 at 4096³: " + (measured if measured else "not measured on an H100 yet")
    return kernel_diff(old, new, label, f"Lab {lab[3:]}'s kernel", note=note)


# ---------------------------------------------------------------------------------------------------------
# the GEMM the labs grow: C (M × N, fp32) = A (M × K, bf16) · B (N × K, bf16)ᵀ, one block per 64 × 64 tile
# ---------------------------------------------------------------------------------------------------------
def make_operands(rng: Any, m: int, n: int, k: int) -> tuple[Any, Any]:
    """Random bf16 A (m×k) and B (n×k, K-major), normal values."""
    from ml_dtypes import bfloat16

    return rng.standard_normal((m, k)).astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16)


def gemm_shapes(rng: Any, count: int = 3, most: int = 12) -> list[tuple[int, int, int]]:
    """Non-square shapes, multiples of 64, M ≠ N, K ≠ N, K ≥ 128 (several K steps, every stage reused). The first is
    fixed, 128×192×320: 2×3 tiles, 5 K steps (a two-stage ring wraps twice), M, N and K all different; random
    ones follow."""
    shapes: list[tuple[int, int, int]] = [(128, 192, 320)]
    while len(shapes) < count:
        m, n, k = (64 * int(x) for x in rng.integers(1, most + 1, size=3))
        if m != n and k != n and k >= 128:
            shapes.append((m, n, k))
    return shapes


def gemm_run(source: str, name: str, cases: list[tuple[Any, Any]], runs: int = 1) -> list[Any]:
    """(Runs in the isolated child.) Launch kernel ``name`` (grid N/64 × M/64, 128 threads) on each (A, B) with
    C poisoned, ``runs`` times each; returns every C."""
    import numpy as np

    from helpers import gpu

    kernel = gpu.compile(source, name)
    out = []
    for a, b in cases:
        (m, k), n = a.shape, b.shape[0]
        da, db = gpu.to_device(a), gpu.to_device(b)
        ta, tb = gpu.tensor_map_2d(da, 64, 64), gpu.tensor_map_2d(db, 64, 64)
        for _ in range(runs):
            dc = gpu.poison((m, n), np.float32)
            gpu.launch(kernel, (n // 64, m // 64), 128, 0, ta, tb, dc, np.int32(m), np.int32(n), np.int32(k))
            out.append(dc.to_host())
    return out


def gemm_benchmark(source: str, name: str, size: int = 4096) -> Any:
    """(Runs in the isolated child.) Kernel ``name`` at size³ beside cuBLAS: a gpu.GemmBenchmark."""
    import numpy as np

    from helpers import gpu

    kernel = gpu.compile(source, name)

    def make_launch(a: Any, b: Any, c: Any) -> Any:
        (m, k), n = a.shape, b.shape[0]
        ta, tb = gpu.tensor_map_2d(a, 64, 64), gpu.tensor_map_2d(b, 64, 64)
        return gpu.prepare(kernel, (n // 64, m // 64), 128, 0, ta, tb, c, np.int32(m), np.int32(n), np.int32(k))

    return gpu.gemm_benchmark(make_launch, size, size, size)


def tiles_transposed(x: Any) -> Any:
    m, n = x.shape
    return x.reshape(m // 64, 64, n // 64, 64).transpose(0, 3, 2, 1).reshape(m, n)


def check_gemm_runs(c: grading.Check, source: str, name: str, rng: Any, diagnose: Callable[[Any, Any], str],
                    runs: int = 1, *, timed: bool = False) -> None:
    """Run the lab's GEMM (grid N/64 × M/64, 128 threads) into a NaN-poisoned C and compare every element with fp64.
    On the H100: three non-square shapes, ``runs`` times each. On the emulator: the first shape, once (its schedule is
    the same on every run). ``timed``: the check times the kernel on the H100, so an emulated run says it does not."""
    import numpy as np

    big = on_h100()
    shapes = gemm_shapes(rng, count=3 if big else 1)
    runs = runs if big else 1
    cases = [make_operands(rng, m, n, k) for m, n, k in shapes]
    outs = run(gemm_run, source, name, cases, runs, what=f"your {name}", timeout=180)
    for i, ((m, n, k), (a, b)) in enumerate(zip(shapes, cases, strict=True)):
        ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
        for r in range(runs):
            got = outs[i * runs + r]
            label = f"{where(timing=timed and i == r == 0)}: M={m}, N={n}, K={k} ({m // 64}×{n // 64} tiles, " \
                    f"{k // 64} K steps)" + (f", run {r + 1} of {runs}" if runs > 1 else "")
            c.array(f"{label}: every element against fp64, C poisoned with NaN first", got, ref,
                    atol=grading.gemm_tolerance(a, np.asarray(b, np.float64).T), hint=diagnose(got, ref))


#: Spill bytes a compiler may use for a stray scalar without hurting the kernel. Spilled accumulators are far more:
#: one m64n64k16 fragment is 32 registers (128 bytes), an m64n256k16 one 512 bytes. NVRTC 13.0 (the H100 machine's)
#: parks 4–8 bytes in the Lab 7 and Lab 9 kernels (clusters, Stream-K) where NVRTC 13.5 parks none.
SPILL_SLACK_BYTES = 16


def check_no_accumulator_spills(c: grading.Check, report: Any, hint: str) -> None:
    """The accumulators stay in registers: at most SPILL_SLACK_BYTES of spill stores, whatever the NVRTC."""
    c.true(f"no accumulator spills ({report.spill_stores} bytes spilled; up to {SPILL_SLACK_BYTES} is a stray "
           "scalar, an accumulator fragment is at least 128)", report.spill_stores <= SPILL_SLACK_BYTES, hint=hint)


# ------------------------------------------------------------------------------------------- whole-kernel PTX
_LABEL = re.compile(r"^\s*(\$?[\w$]+):\s*$")


@dataclass
class Line:
    """One line of a kernel's PTX body in text order: an instruction (``instr``), a label, or a branch."""

    index: int
    instr: Instr | None = None
    label: str | None = None
    target: str | None = None  # for a branch


def stream(ptx: str, entry: str | None = None) -> list[Line]:
    """Every instruction of the kernel ``entry`` in text order, inline asm or not, with labels and branch targets
    (so a check can tell a loop's back edge: a branch to a label that came earlier)."""
    out: list[Line] = []
    for raw in _body(ptx, entry).split("\n"):
        text = raw.split("//", 1)[0].strip()
        if not text or text.startswith("."):  # blank lines and directives (.loc, .reg, ...)
            continue
        m = _LABEL.match(text)
        if m:
            out.append(Line(len(out), label=m.group(1)))
            continue
        for part in text.split(";"):
            part = part.strip().strip("{}").strip()
            if not part or part.startswith("."):
                continue
            mi = _INSTR.match(part)
            if not mi:
                continue
            ins = Instr(mi.group(1), mi.group(2).strip(), part)
            target = ins.operands.split(",")[-1].strip() if ins.opcode.startswith("bra") else None
            out.append(Line(len(out), instr=ins, target=target))
    return out


def symbol_plus_offset(ptx: str, operand: str, depth: int = 8) -> tuple[str, int] | None:
    """Follow an address register back through mov / cvta / ``add r, r, imm`` to ``(symbol, byte offset)``; None
    when the address was computed some other way."""
    defs: dict[str, tuple[str, str]] = {}
    for op, dst, src in _DEF.findall(ptx):
        defs.setdefault(dst, (op, src))
    adds = {d: (s, int(i, 0)) for d, s, i in re.findall(
        r"^\s*add\.[su](?:32|64)\s+(%\w+),\s*(%\w+),\s*(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*;", ptx, re.M)}
    cur, offset = operand.strip().strip("[]").strip(), 0
    m = re.fullmatch(r"(%\w+)\s*\+\s*(-?\d+)", cur)
    if m:
        cur, offset = m.group(1), int(m.group(2))
    for _ in range(depth):
        if cur in adds:
            cur, imm = adds[cur]
            offset += imm
        elif cur in defs:
            cur = defs[cur][1]
        else:
            break
    return None if cur.startswith("%") else (cur, offset)


# ------------------------------------------------------------------------------------------- diffs
def source_diff(old: str, new: str, old_name: str = "before", new_name: str = "after", context: int = 2, *,
                indent: bool = True) -> str:
    """A unified diff of two kernels' sources (solution markers and hints dropped), for a lab's opening cell.
    ``indent=False``: a line whose only change is its whitespace (code a new loop now holds) counts as unchanged and
    shows as the new source has it."""
    import difflib

    def clean(src: str) -> list[str]:
        return [line for line in src.strip("\n").split("\n")
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
                and not re.match(r"^\s*//\s*HINT:", line)]

    a, b = clean(old), clean(new)
    if indent:
        return "\n".join(difflib.unified_diff(a, b, old_name, new_name, n=context, lineterm=""))
    key = [" ".join(x.split()) for x in a], [" ".join(x.split()) for x in b]
    out = [f"--- {old_name}", f"+++ {new_name}"]
    for group in difflib.SequenceMatcher(None, *key, autojunk=False).get_grouped_opcodes(context):
        (_, i1, _, j1, _), (_, _, i2, _, j2) = group[0], group[-1]
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out += [" " + x for x in b[b1:b2]]
                continue
            out += ["-" + x for x in a[a1:a2]] + ["+" + x for x in b[b1:b2]]
    return "\n".join(out) if len(out) > 2 else ""


# ------------------------------------------------------------------------------------------- running a GEMM
EMULATED_CLUSTERS = 2  # a persistent grid's clusters where kernels run on the PTX executor (no occupancy query)


@dataclass(frozen=True)
class GemmLaunch:
    """How a lab's GEMM kernel ``name(tmap_a, tmap_b, C or tmap_c, int M, int N, int K)`` is launched: block size,
    dynamic shared memory, tensor-map boxes (rows, cols) of A (M×K), B (N×K) and, for a TMA-store epilogue, C;
    either a grid of ``cta_tile`` tiles or a persistent grid (every co-resident cluster of ``cluster`` blocks, no
    more than there are ``persistent_unit`` tiles)."""

    name: str
    block: int
    smem: int
    box_a: tuple[int, int]
    box_b: tuple[int, int]
    box_c: tuple[int, int] | None = None
    out_bf16: bool = False
    cta_tile: tuple[int, int] = (64, 64)
    cluster: int = 1
    persistent_unit: tuple[int, int] | None = None

    def launcher(self, kernel: Any, a: Any, b: Any, c: Any) -> Any:
        """(GPU side.) A packed launch of ``kernel`` on device arrays A, B, C (``gpu.prepare``)."""
        from helpers import gpu

        (m, k), n = a.shape, b.shape[0]
        ta, tb = gpu.tensor_map_2d(a, *self.box_a), gpu.tensor_map_2d(b, *self.box_b)
        tc = gpu.tensor_map_2d(c, *self.box_c) if self.box_c else c
        if self.persistent_unit:
            work = -(-m // self.persistent_unit[0]) * -(-n // self.persistent_unit[1])
            if on_h100():
                blocks = gpu.persistent_grid(kernel, self.block, self.smem, self.cluster, work)
            else:  # on the course's PTX executor: two clusters, so that each takes several tiles in turn
                blocks = min(work, EMULATED_CLUSTERS) * self.cluster
            grid: tuple[int, ...] = (blocks, 1, 1)
        else:
            grid = (-(-n // self.cta_tile[1]), -(-m // self.cta_tile[0]))
        cluster = (self.cluster, 1, 1) if self.cluster > 1 else None
        return gpu.prepare(kernel, grid, self.block, self.smem, ta, tb, tc, *(np.int32(v) for v in (m, n, k)),
                           cluster=cluster)


def gemm_cases_child(source: str, spec: GemmLaunch, cases: list[tuple[Any, Any]]) -> list[Any]:
    """(Runs in the isolated child.) The kernel on each (A, B), C poisoned with NaN first; every C back."""
    from helpers import gpu

    kernel = gpu.compile(source, spec.name)
    out = []
    for a, b in cases:
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((a.shape[0], b.shape[0]), gpu.bfloat16 if spec.out_bf16 else np.float32)
        spec.launcher(kernel, da, db, dc)()
        gpu.wait()
        out.append(dc.to_host())
    return out


def gemm_speed_child(source: str, spec: GemmLaunch, sizes: list[Any], reference: str | None = None) -> list[tuple]:
    """(Runs in the isolated child.) The kernel at each size (n: n³, or (m, n, k)) beside cuBLAS (same output
    type, same run), with the SM clock sampled while it ran: [(gpu.GemmBenchmark, clock summary, the course's
    ``reference`` kernel's GemmBenchmark at the same size in the same run, or None)]."""
    from helpers import gpu

    kernel = gpu.compile(source, spec.name)
    ref_kernel = gpu.compile(reference, spec.name) if reference else None
    out_dtype = gpu.bfloat16 if spec.out_bf16 else np.float32
    out = []
    for size in sizes:
        m, n, k = (size, size, size) if isinstance(size, int) else size
        with gpu.sm_clock() as clk:
            bench = gpu.gemm_benchmark(lambda a, b, c: spec.launcher(kernel, a, b, c), m, n, k, out_dtype=out_dtype)
            ref = None if ref_kernel is None else gpu.gemm_benchmark(
                lambda a, b, c: spec.launcher(ref_kernel, a, b, c), m, n, k, out_dtype=out_dtype)
        out.append((bench, clk.summary(), ref))
    return out


#: a speed lab's floor: the student's kernel at least this fraction of the course's kernel, timed in the same run.
#: The course's kernels timed against themselves the graders' way on an H100 (tools/h100/speed_floor.py, 9 rounds at
#: 4096³ and 8192³ per lab, Lab 9 on its quantized shapes too) give the ratios of tests/data/speed_floor_h100.json:
#: 0.928 at the lowest (2026-11-26, Lab 9 at 8192³); tests/labs/test_speed_floor.py asserts the floor sits below the
#: lowest of them with a margin.
SPEED_FLOOR = 0.8


def check_speed_floor(c: grading.Check, bench: Any, ref: Any, size: Any, hint: str) -> None:
    """The student's kernel (``bench``) is at least :data:`SPEED_FLOOR` of the course's (``ref``), both timed in the
    same run at ``size``; the message says how far off it is."""
    ratio = bench.tflops / ref.tflops if ref.tflops else 0.0
    c.true(f"{size}: your kernel {bench.tflops:.0f} TFLOP/s, the course's {ref.tflops:.0f} TFLOP/s in the same run "
           f"({ratio:.2f}×; the floor is {SPEED_FLOOR:.2f}×)", ratio >= SPEED_FLOOR,
           hint=f"your kernel runs at {ratio:.2f}× the course's ({bench.tflops:.0f} against {ref.tflops:.0f} "
                f"TFLOP/s, {100 * (1 - ratio):.0f}% slower): {hint}")


def gemm_work_child(source: str, spec: GemmLaunch, cases: list[tuple[Any, Any]]) -> dict:
    """(Runs on the executor, in this process.) :func:`gemm_cases_child`, keeping each launch's work log: ``{"c":
    [C, …], "work": [Launched, …]}``."""
    from helpers import gpu
    from helpers.gpu import executor

    from ._work import Launched

    kernel = gpu.compile(source, spec.name)
    out, work = [], []
    for a, b in cases:
        da, db = gpu.to_device(a), gpu.to_device(b)
        dc = gpu.poison((a.shape[0], b.shape[0]), gpu.bfloat16 if spec.out_bf16 else np.float32)
        spec.launcher(kernel, da, db, dc)()
        gpu.wait()
        last = executor.last_run()
        work.append(Launched(last.work if last is not None else None, int(da.ptr), int(db.ptr), int(dc.ptr)))
        out.append(dc.to_host())
    return {"c": out, "work": work}


def run_gemm(source: str, spec: GemmLaunch, cases: list[tuple[Any, Any]], *, what: str, timeout: float = 180.0,
             hint: str = "", work: bool = False) -> Any:
    """A student's GEMM on every (A, B) case, C poisoned, through :func:`run` (the one run path); returns the C of
    each case. ``work`` (the executor only): ``{"c": [C, …], "work": [Launched, …]}`` with each launch's work log."""
    if work and gpu_executor_active():
        return run_isolated_call(gemm_work_child, source, spec, cases, what=what, timeout=timeout, hint=hint)
    return run_isolated_call(gemm_cases_child, source, spec, cases, what=what, timeout=timeout, hint=hint)


def gpu_executor_active() -> bool:
    """Whether kernels run on the course's PTX executor here (no H100, forced, or inside :func:`emulated`)."""
    from helpers import gpu

    return gpu.executor_active()


#: set inside :func:`emulated` on a machine with an H100: the ✓ lines say the run is the emulator's, beside the GPU's
_BESIDE = {"on": False}


@contextlib.contextmanager
def emulated() -> Iterator[None]:
    """Kernels launched inside the block run on the course's PTX executor, in hazard mode, even beside an H100: on
    a GPU the graders run the student's kernel there too (a small shape), so a student with a GPU and one without
    get the same verdict on races and on the work."""
    from helpers import gpu

    saved = os.environ.get("HELPERS_EXECUTOR")
    beside = gpu.hopper_available()
    os.environ["HELPERS_EXECUTOR"] = "force"
    old, _BESIDE["on"] = _BESIDE["on"], beside
    try:
        yield
    finally:
        _BESIDE["on"] = old
        if saved is None:
            os.environ.pop("HELPERS_EXECUTOR", None)
        else:
            os.environ["HELPERS_EXECUTOR"] = saved


def time_gemm(source: str, spec: GemmLaunch, sizes: list[Any], *, what: str, timeout: float = 300.0,
              reference: str | None = None) -> list[Any]:
    """The kernel timed beside cuBLAS (and the course's ``reference`` kernel, when given) at each size (n: n³, or
    (m, n, k); the H100 only), through :func:`run`: [(bench, clock, reference bench or None)]."""
    return run_isolated_call(gemm_speed_child, source, spec, sizes, reference, what=what, timeout=timeout)


class Opening:
    """A lab's opening: the diff it makes to the previous lab's kernel, with that kernel's measured speed. Shows as
    a colored diff in a notebook, as text elsewhere."""

    def __init__(self, title: str, measured: list[str], diff: str):
        self.title, self.measured, self.diff = title, measured, diff

    def __str__(self) -> str:
        return "\n".join([self.title, *self.measured, "", self.diff])

    def _repr_markdown_(self) -> str:
        lines = [f"**{self.title}**", ""] + [f"- {m}" for m in self.measured]
        return "\n".join(lines) + "\n\n```diff\n" + self.diff + "\n```"
