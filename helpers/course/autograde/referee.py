"""The verdict of each graded cell, decided where the submission's code cannot reach.

In the grading kernel the student's code and the check share one Python process, so a determined submission can
make a failed check look passed (patching ``contextlib``, an IPython input transformer, replaying the tamper guard's
answers). The referee grades the notebook again, in two fresh jails that share nothing but two pipes:

- the **answer process** runs the notebook's code cells (every cell but the graded ones) as IPython does (magics,
  ``display``), with no startup files or configuration: the student's functions and strings live there;
- the **referee process** imports the graders, parses each graded cell (``lab1.check_tile_coords(tile_coords)``)
  and runs the check itself. A name the check is given comes from the answer process *by value* (numbers, strings,
  lists, dicts, numpy arrays) or, for a function, as a stand-in whose calls go to the answer process with their
  arguments by value (arrays the function changes are copied back); an object the check hands to a student's
  function (``ctx``) goes the other way as a stand-in. No code and no pickle crosses: what comes back is data.

A graded cell passes only when the referee's check passed, whatever the kernel showed. The referee also fails an
answer that calls the graders' own reference helpers (a private name of a ``helpers.course.checks`` module, or the
course header's ``hopper::`` reference functions in a lab's own wrapper) with a sentence saying so.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import ctypes
import inspect
import json
import os
import re
import signal
import sys
import time
import traceback
from typing import Any

#: argv: <grader dir> <role: answer|referee>; the spec (the notebook's cells among it) is the first line on stdin:
#: a command line is readable by every account of the machine (/proc/<pid>/cmdline), a pipe only by its ends
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from helpers.course.autograde.referee import main; "
        "main(sys.argv[2:])")

#: the course header's reference functions a lab asks students to write themselves, by the lab's grader module
HEADER_REFERENCES = {"lab1": re.compile(r"\bhopper::(tma_load_\w+)"), "lab2": re.compile(r"\bhopper::(mbar_\w+)"),
                     "lab3": re.compile(r"\bhopper::(wgmma_\w+)")}
MAX_DEPTH = 12
MAX_MESSAGE = 256 << 20


# --------------------------------------------------------------------------------------------------- the codec
class Remote:
    """A stand-in for a value that lives in the other process (a function or an object)."""

    def __init__(self, peer: Peer, handle: int, kind: str, name: str = "") -> None:
        self._peer, self._handle, self._kind, self._name = peer, handle, kind, name
        self.__name__ = self.__qualname__ = name or kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._peer.request("call", self._handle, list(args), kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self._peer.request("getattr", self._handle, [name], {})

    def __repr__(self) -> str:
        return f"<{self._name or self._kind} graded in another process>"


def _drive(remote: Remote) -> Any:
    """A real generator here that steps the student's generator in the answer process."""
    try:
        value = remote.send(None)
        while True:
            value = remote.send((yield value))
    except RemoteError as exc:
        if str(exc).startswith("StopIteration"):
            return None
        raise


class Peer:
    """One end of the pipe: encodes values, answers the other end's requests while it waits for its own reply."""

    def __init__(self, rfile: Any, wfile: Any, *, share_objects: bool) -> None:
        self.rfile, self.wfile = rfile, wfile
        self.share_objects = share_objects  # may objects (not only functions) go across as stand-ins?
        self.handles: dict[int, Any] = {}

    # -- values -------------------------------------------------------------------------------------------
    def encode(self, value: Any, depth: int = 0) -> Any:
        import numpy as np

        if depth > MAX_DEPTH:
            raise ValueError("a value nested too deep to grade")
        if isinstance(value, Remote) and value._peer is self:
            return {"back": value._handle}
        if type(value) in (bool, int, str) or value is None:
            return value
        if type(value) is float:
            return {"float": repr(value)}
        if type(value) is complex:
            return {"complex": [repr(value.real), repr(value.imag)]}
        if type(value) is bytes:
            return {"bytes": base64.b64encode(value).decode()}
        if type(value) in (list, tuple):
            return {type(value).__name__: [self.encode(v, depth + 1) for v in value]}
        if type(value) is dict:
            return {"dict": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]}
        if type(value) is np.ndarray and value.dtype.kind in "biufc" or (
                type(value) is np.ndarray and value.dtype.name == "bfloat16"):
            if value.size and not value.flags.c_contiguous and all(st > 0 for st in value.strides) \
                    and value.strides[-1] % value.itemsize == 0:  # a view: its strides matter (a row pitch)
                span = sum((n - 1) * st for n, st in zip(value.shape, value.strides, strict=True)) // value.itemsize + 1
                flat = np.lib.stride_tricks.as_strided(value, shape=(span,), strides=(value.itemsize,))
                return {"view": [value.dtype.name, list(value.shape), list(value.strides),
                                 base64.b64encode(flat.tobytes()).decode()]}
            data = np.ascontiguousarray(value)
            return {"array": [data.dtype.name, list(data.shape), base64.b64encode(data.tobytes()).decode()]}
        if isinstance(value, np.generic) and type(value).__module__ == "numpy":
            return {"scalar": [value.dtype.name, base64.b64encode(np.asarray(value).tobytes()).decode()]}
        if inspect.isgenerator(value):
            handle = len(self.handles) + 1
            self.handles[handle] = value
            return {"remote": [handle, "generator", value.__name__]}
        if callable(value) or self.share_objects:
            handle = len(self.handles) + 1
            self.handles[handle] = value
            kind = "function" if callable(value) and not self.share_objects else "object"
            return {"remote": [handle, kind, getattr(value, "__name__", type(value).__name__)]}
        raise TypeError(f"a value of type {type(value).__name__} cannot be graded (numbers, strings, lists, dicts, "
                        "numpy arrays and functions can)")

    def decode(self, data: Any, depth: int = 0) -> Any:
        import numpy as np

        if depth > MAX_DEPTH:
            raise ValueError("a value nested too deep to grade")
        if data is None or type(data) in (bool, int, str):
            return data
        ((kind, body),) = data.items()
        if kind == "float":
            return float(body)
        if kind == "complex":
            return complex(float(body[0]), float(body[1]))
        if kind == "bytes":
            return base64.b64decode(body)
        if kind in ("list", "tuple"):
            items = [self.decode(v, depth + 1) for v in body]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {self.decode(k, depth + 1): self.decode(v, depth + 1) for k, v in body}
        if kind == "view":
            flat = np.frombuffer(base64.b64decode(body[3]), _dtype(body[0])).copy()
            if any(st <= 0 for st in body[2]) or sum((n - 1) * st for n, st in zip(body[1], body[2], strict=True)) \
                    >= flat.nbytes and flat.size:
                raise ValueError("an array view that does not fit its data")
            return np.lib.stride_tricks.as_strided(flat, shape=body[1], strides=body[2])
        if kind in ("array", "scalar"):
            dtype = _dtype(body[0])
            raw = base64.b64decode(body[-1])
            if kind == "scalar":
                return np.frombuffer(raw, dtype)[0]
            return np.frombuffer(raw, dtype).reshape(body[1]).copy()
        if kind == "remote":
            remote = Remote(self, int(body[0]), str(body[1]), str(body[2]))
            return _drive(remote) if body[1] == "generator" else remote
        if kind == "back":
            return self.handles[int(body)]
        raise ValueError(f"an unknown value kind {kind!r}")

    # -- messages -----------------------------------------------------------------------------------------
    def send(self, message: dict) -> None:
        self.wfile.write(json.dumps(message).encode() + b"\n")
        self.wfile.flush()

    def receive(self) -> dict:
        line = self.rfile.readline(MAX_MESSAGE)
        if not line:
            raise EOFError("the other process went away")
        return json.loads(line)

    def request(self, op: str, handle: int, args: list, kwargs: dict) -> Any:
        self.send({"op": op, "handle": handle, "args": self.encode(args), "kwargs": self.encode(kwargs)})
        return self.wait(args)

    def wait(self, sent: list | None = None) -> Any:
        """Serve the other side's requests until the reply to ours comes; copy back the arrays it changed."""
        while True:
            msg = self.receive()
            if "op" in msg:
                self.serve(msg)
            elif "error" in msg:
                raise RemoteError(msg["error"])
            else:
                reply = self.decode(msg["value"])
                for mine, after in zip(sent or [], self.decode(msg.get("arrays", {"list": []})), strict=False):
                    if _is_array(mine) and _is_array(after) and mine.shape == after.shape and mine.flags.writeable:
                        mine[...] = after
                return reply

    def serve(self, msg: dict) -> None:
        try:
            target = self.handles[int(msg["handle"])]
            args, kwargs = self.decode(msg["args"]), self.decode(msg["kwargs"])
            if msg["op"] == "getattr":
                (name,) = args
                if not isinstance(name, str) or name.startswith("_"):
                    raise AttributeError(f"{name!r} is not for a graded answer")
                value = getattr(target, name)
            elif msg["op"] == "call":
                value = target(*args, **kwargs)
            else:
                raise ValueError(f"unknown request {msg['op']!r}")
            arrays = [a if _is_array(a) else None for a in args]
            self.send({"value": self.encode(value), "arrays": self.encode(arrays)})
        except RemoteError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the other side gets it as an error in words
            self.send({"error": f"{type(exc).__name__}: {exc}"})


def _is_array(value: Any) -> bool:
    return type(value).__name__ == "ndarray" and type(value).__module__ == "numpy"


def _dtype(name: str) -> Any:
    import numpy as np

    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class RemoteError(Exception):
    """An error raised in the other process, in words."""


# --------------------------------------------------------------------------------------------------- the answer side
def _cell_watchdog(deadline: list[float]) -> None:
    """End this process (status 124) when a cell runs past ``deadline[0]`` (0: no cell running), whatever the cell
    does with signals; a thread started before any of the notebook's code runs."""
    import threading

    sleep, now, leave = time.sleep, time.monotonic, os._exit

    def watch() -> None:
        while True:
            sleep(0.5)
            if deadline[0] and now() > deadline[0]:
                leave(124)

    threading.Thread(target=watch, name="cell-time-limit", daemon=True).start()


def _answer(spec: dict) -> None:
    """Run the notebook's code cells as IPython runs them (magics, ``display``: an honest cell that runs in
    JupyterLab runs here), then answer the referee's questions about the names they made. IPython's hooks are the
    notebook's own here: whatever the cells do to them changes only their own values, which the referee checks in
    its own process."""
    from IPython.core.interactiveshell import InteractiveShell

    from .kernel import copy_submission

    copy_submission(spec.get("submission", "/submission"), spec["work"])
    os.chdir(spec["work"])
    shell = InteractiveShell.instance(colors="NoColor")
    namespace: dict[str, Any] = shell.user_ns
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what the cells print goes nowhere; the pipe to the referee is `out`
    def late(*_: Any) -> None:
        raise TimeoutError("the cell ran past its time limit")

    signal.signal(signal.SIGALRM, late)
    seconds = int(spec.get("cell_seconds") or 0)
    deadline = [0.0]  # a cell that ignores SIGALRM (or spins in C) ends the whole answer process at its deadline
    if seconds:
        _cell_watchdog(deadline)
    for source in spec["cells"]:
        signal.alarm(seconds)
        deadline[0] = time.monotonic() + seconds + 5 if seconds else 0.0
        try:
            shell.run_cell(source, store_history=False)  # a failing cell fails only the checks that need its names
        except BaseException:  # noqa: BLE001 - what IPython itself lets through (SystemExit, the alarm)
            continue
        finally:
            signal.alarm(0)
            deadline[0] = 0.0
    peer = Peer(sys.stdin.buffer, out, share_objects=False)
    while True:
        try:
            msg = peer.receive()
        except EOFError:
            return
        if msg.get("op") == "name":
            name = msg["args"]
            try:
                if name not in namespace:
                    raise NameError(f"name {name!r} is not defined")
                peer.send({"value": peer.encode(namespace[name])})
            except BaseException as exc:  # noqa: BLE001
                peer.send({"error": f"{type(exc).__name__}: {exc}"})
        else:
            peer.serve(msg)


# --------------------------------------------------------------------------------------------------- the referee side
def _no_dumping() -> None:
    """Make this process untraceable by its own account (PR_SET_DUMPABLE 0): no /proc/<pid>/mem, no ptrace."""
    try:
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def check_call(source: str) -> tuple[str, str, list[ast.expr], list[ast.keyword]]:
    """``lab1.check_x(a, b + c, rank=2)`` → (``lab1``, ``check_x``, args, keywords); ValueError otherwise."""
    tree = ast.parse(source)
    calls = [s for s in tree.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(calls) != 1 or not isinstance(calls[0], ast.Expr) or not isinstance(calls[0].value, ast.Call):
        raise ValueError("a graded cell must be one call of a course check")
    call = calls[0].value
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)):
        raise ValueError("a graded cell must call <module>.<check>(…)")
    return call.func.value.id, call.func.attr, call.args, call.keywords


class _Names:
    def __init__(self, peer: Peer) -> None:
        self.peer, self.cache = peer, {}

    def get(self, name: str) -> Any:
        if name not in self.cache:
            self.peer.send({"op": "name", "args": name})
            self.cache[name] = self.peer.wait()
        return self.cache[name]

    def evaluate(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.get(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            if type(left) is not type(right) or type(left) not in (str, int, float):
                raise TypeError("only strings and numbers are added in a graded cell")
            return left + right
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.evaluate(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        raise ValueError(f"the graded cell passes {ast.unparse(node)!r}, which the referee does not evaluate")


def reference_helpers_used(answers: list[str], modules: set[str], labs: set[str] = frozenset()) -> list[str]:
    """The graders' reference helpers the answer cells use: ``lab1._map_args_expected``, and for the labs named in
    ``labs`` the header's functions that lab asks for (``hopper::tma_load_2d`` in Lab 1)."""
    used = []
    for source in answers:
        code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S)  # a comment may name the reference
        for lab in labs:
            if lab in HEADER_REFERENCES:
                used += [f"hopper::{m}" for m in HEADER_REFERENCES[lab].findall(code)]
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        aliases = {"helpers", "checks", "course"} | {m.rsplit(".", 1)[-1] for m in modules
                                                     if m.startswith("helpers.course.checks.")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and isinstance(node.value, ast.Name) and node.value.id in aliases:
                used.append(f"{node.value.id}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers.course.checks"):
                used += [f"{node.module}.{a.name}" for a in node.names
                         if a.name.startswith("_") and not a.name.startswith("__")]
    return sorted(set(used))


def _referee(spec: dict, peer: Peer) -> dict[str, str | None]:
    import importlib

    from . import guard

    verdicts: dict[str, str | None] = {}
    names = _Names(peer)
    labs = set()
    for _, source in spec["graded"]:
        with contextlib.suppress(ValueError, SyntaxError):
            labs.add(check_call(source)[0])
    helpers_used = reference_helpers_used(spec["answers"], set(spec["modules"]), labs)
    for grade_id, source in spec["graded"]:
        try:
            if helpers_used:
                raise AssertionError(
                    f"the answer uses the graders' own reference {', '.join(helpers_used[:3])} in place of code of "
                    "its own; write the answer yourself")
            module_name, check, args, keywords = check_call(source)
            bind = guard.course_names(f"{module_name}.{check}", set(spec["modules"]))
            if module_name not in bind:
                raise ValueError(f"{module_name!r} is not a course module")
            function = getattr(importlib.import_module(bind[module_name]), check)
            values = [names.evaluate(a) for a in args]
            kw = {k.arg: names.evaluate(k.value) for k in keywords if k.arg}
            function(*values, **kw)
            verdicts[grade_id] = None
        except BaseException as exc:  # noqa: BLE001 - every failure is this cell's verdict
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, SystemExit):
                raise
            verdicts[grade_id] = f"{type(exc).__name__}: {exc}".strip()
            if isinstance(exc, EOFError):
                verdicts[grade_id] = "the answer process went away: " + str(exc)
    return verdicts


def main(argv: list[str]) -> None:
    """``answer`` or ``referee``; the spec is the first line on stdin, as JSON; the referee writes its verdicts as
    JSON on stdout."""
    role, spec = argv[0], json.loads(sys.stdin.buffer.readline(MAX_MESSAGE))
    os.environ.update(spec.get("env", {}))
    from .kernel import apply_limits

    apply_limits(spec.get("limits", {}))
    if role == "answer":
        _answer(spec)
        return
    _no_dumping()
    wfile = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the checks print goes to the log
    peer = Peer(sys.stdin.buffer, wfile, share_objects=True)
    try:
        verdicts = _referee(spec, peer)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        verdicts = {gid: "the referee could not grade this notebook" for gid, _ in spec["graded"]}
    peer.send({"verdicts": verdicts})


# --------------------------------------------------------------------------------------------------- the grader side
def judge(box: Any, nb: Any, limits: dict, env: dict[str, str], seconds: float, cell_seconds: int = 0
          ) -> dict[str, str | None]:
    """Grade ``nb``'s graded cells in two fresh jails of ``box`` (a Sandbox); grade_id → None (passed) or the
    reason it failed. Lines from the referee go to the answer process and back through this process.

    ``nb`` is the notebook as the kernel ran it: code cells that failed or ran out of time there are not run again.
    """
    import subprocess
    import threading
    import time

    from nbgrader import utils as nbg_utils

    graded = [(c.metadata["nbgrader"]["grade_id"], c.source) for c in nb.cells
              if c.cell_type == "code" and nbg_utils.is_grade(c)]
    if not graded:
        return {}
    cells = [c.source for c in nb.cells if c.cell_type == "code" and not nbg_utils.is_grade(c)
             and not any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    answers = [c.source for c in nb.cells if c.cell_type == "code" and nbg_utils.is_solution(c)]
    common = {"env": env, "limits": {k: v for k, v in limits.items() if k in ("memory_mb", "memory_rlimit",
                                                                            "cpu_seconds", "file_mb")}}
    answer_spec = dict(common, cells=cells, work=box.jail_work, cell_seconds=cell_seconds)
    referee_spec = dict(common, graded=graded, answers=answers, modules=sorted(box.modules))
    boot = [sys.executable, "-P", "-s", "-c", BOOT, str(box.grader)]
    answer = subprocess.Popen(box.jail_argv([*boot, "answer"], "answer", limits),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=box.log)
    referee = subprocess.Popen(box.jail_argv([*boot, "referee"], "referee", limits),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=box.log)
    for proc, spec in ((answer, answer_spec), (referee, referee_spec)):  # the cells go by pipe, never by argv
        with contextlib.suppress(OSError):
            proc.stdin.write(json.dumps(spec).encode() + b"\n")
            proc.stdin.flush()
    result: dict = {}

    def answer_to_referee() -> None:
        for line in iter(lambda: answer.stdout.readline(MAX_MESSAGE), b""):
            try:
                referee.stdin.write(line)
                referee.stdin.flush()
            except OSError:
                return
        with contextlib.suppress(OSError):  # the answer process ended: the referee hears so now, not at the deadline
            referee.stdin.close()

    def referee_to_answer() -> None:
        for line in iter(lambda: referee.stdout.readline(MAX_MESSAGE), b""):
            try:
                msg = json.loads(line)
            except ValueError:
                return
            if isinstance(msg, dict) and "verdicts" in msg:
                result.update(msg["verdicts"])
                return
            try:
                answer.stdin.write(line)
                answer.stdin.flush()
            except OSError:
                pass

    threads = [threading.Thread(target=f, daemon=True) for f in (answer_to_referee, referee_to_answer)]
    for t in threads:
        t.start()
    end = time.monotonic() + seconds
    threads[1].join(max(1.0, end - time.monotonic()))
    for proc in (answer, referee):
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    box.cleanup_jail("answer")
    box.cleanup_jail("referee")
    missing = "the referee did not finish in time" if threads[1].is_alive() else "the referee gave no verdict"
    return {gid: (result[gid] if gid in result else missing) for gid, _ in graded}
