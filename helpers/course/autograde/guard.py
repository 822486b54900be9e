"""Catching a submission that tampers with the graders inside the grading kernel.

Before the first cell, the grader records a *fingerprint* of the kernel: for every loaded module of ``helpers``,
``numpy``, ``ml_dtypes`` and ``builtins``, the identity of each function, class, method and public value (for a
function also the identity of its code and default arguments), and for the graders' own modules
(``helpers.course.grading``, ``helpers.course.checks.*``) a hash of every value, so a table edited in place shows too.
Around
every graded cell it takes the fingerprint again and compares, here in the grading process where the submission's
code never runs: a check function redefined, ``helpers`` reloaded from edited files, ``numpy.allclose`` swapped
for something kinder — each shows as a changed entry, and the graded cell fails with ``TamperingDetected``.

Before a graded cell the guard also binds the names the cell uses that are course modules (``lab1`` →
``helpers.course.checks.lab1``) to the real modules; a name the submission had bound to something else is tampering too.

The fingerprint code is sent into the kernel afresh each time (the submission cannot edit it in advance). What
it cannot stop is a submission written to defeat this guard itself (undoing its patches before the guard looks,
or patching the builtins the guard runs on); such code is in plain sight in the submitted notebook.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass

#: fingerprinted top-level modules
GUARDED = ("helpers", "numpy", "ml_dtypes", "builtins")
#: modules whose every value (private ones too) is hashed: the graders themselves
STRICT = ("helpers.course.grading", "helpers.course.checks")
#: builtins that IPython rebinds while it runs a cell
VOLATILE_BUILTINS = ("input", "display", "get_ipython", "exit", "quit", "help", "_", "__", "___")

# Runs in the kernel; its only output is the variable _hopper_guard_out (a JSON string). Keep it self-contained.
_FINGERPRINT = r'''
def _hopper_fingerprint(guarded, strict, volatile, bind):
    import hashlib, sys, types
    def ident(v):
        f = getattr(v, "__func__", v)
        if isinstance(f, types.FunctionType):
            return "%d/%d/%d/%d/%d" % (id(f), id(f.__code__), id(f.__defaults__), id(f.__kwdefaults__),
                                       id(getattr(v, "__self__", None)))
        return str(id(v))
    def digest(v):
        try:
            import numpy
            raw = v.tobytes() + str(v.dtype).encode() if isinstance(v, numpy.ndarray) else repr(v).encode()
        except Exception as e:
            raw = ("unhashable %s" % type(e).__name__).encode()
        return hashlib.sha256(raw).hexdigest()[:16]
    out, files, rebound = {}, {}, []
    for name, mod in list(sys.modules.items()):
        if name.partition(".")[0] not in guarded:
            continue
        out["sys.modules[%s]" % name] = str(id(mod))
        if not isinstance(mod, types.ModuleType):
            continue
        files[name] = str(getattr(mod, "__file__", None))
        is_strict = any(name == s or name.startswith(s + ".") for s in strict)
        for key, value in list(vars(mod).items()):
            if name == "builtins" and key in volatile:
                continue
            code = callable(value) or isinstance(value, types.ModuleType)
            if key.startswith("_") and not code and not is_strict:
                continue  # a module's private state may change as it runs
            out["%s:%s" % (name, key)] = ident(value)
            if is_strict and not code:
                out["%s:%s#" % (name, key)] = digest(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for attr, member in list(vars(value).items()):
                    out["%s:%s.%s" % (name, key, attr)] = ident(member)
    user = globals()
    for alias, module_name in bind.items():
        import importlib
        real = sys.modules.get(module_name) or importlib.import_module(module_name)
        if alias in user and user[alias] is not real:
            rebound.append(alias)
        user[alias] = real
    return {"fingerprint": out, "files": files, "rebound": rebound}
import json as _hopper_json
_hopper_guard_out = _hopper_json.dumps(_hopper_fingerprint(__ARGS__))
del _hopper_fingerprint, _hopper_json
'''


def fingerprint_code(bind: dict[str, str] | None = None) -> str:
    """The code the grader runs in the kernel; it leaves a JSON string in ``_hopper_guard_out``.

    ``bind`` maps names a graded cell uses to the course modules they must be (``{"lab1":
    "helpers.course.checks.lab1"}``).
    """
    args = ", ".join(repr(a) for a in (GUARDED, STRICT, VOLATILE_BUILTINS, dict(bind or {})))
    return _FINGERPRINT.replace("__ARGS__", args)


RESULT_NAME = "_hopper_guard_out"


@dataclass
class Snapshot:
    """One reading of the kernel: the fingerprint, where each guarded module was loaded from, names rebound."""

    fingerprint: dict[str, str]
    files: dict[str, str]
    rebound: list[str]

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        data = json.loads(text)
        return cls(data["fingerprint"], data["files"], data["rebound"])


def course_names(source: str, modules: set[str]) -> dict[str, str]:
    """The names a check cell uses that are course modules: ``lab1`` → ``helpers.course.checks.lab1``.

    ``modules`` are the importable module names of the grader's copy of ``helpers``.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bind = {}
    for name in sorted(names):
        for candidate in (f"helpers.course.checks.{name}", f"helpers.{name}"):
            if candidate in modules:
                bind[name] = candidate
                break
    return bind


def _readable(key: str) -> str:
    """``numpy:allclose`` → ``numpy.allclose``; ``helpers.course.grading:Check.equal#`` →
    ``helpers.course.grading.Check.equal``."""
    return key.rstrip("#").replace(":", ".")


def compare(baseline: Snapshot, now: Snapshot, grader_dir: str) -> list[str]:
    """What the submission changed since the baseline, in plain words (empty when nothing)."""
    problems = []
    changed = [k for k, v in baseline.fingerprint.items() if now.fingerprint.get(k) != v]
    # members added to a class the graders use (e.g. an __eq__ that always says yes): "module:Class.member"
    added = [k for k in now.fingerprint if k not in baseline.fingerprint and "." in k.partition(":")[2]
             and k.rsplit(".", 1)[0] in baseline.fingerprint]
    names = sorted({_readable(k) for k in changed + added})
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        problems.append(f"the submission replaced or changed {shown} (the graders and numpy must stay as the "
                        "course ships them)")
    strangers = sorted(name for name, file in now.files.items()
                       if name.startswith("helpers") and file != "None" and not file.startswith(grader_dir))
    if strangers:
        problems.append(f"{', '.join(strangers[:4])} was loaded from outside the grader's copy of the course")
    if now.rebound:
        problems.append(f"the name{'s' if len(now.rebound) > 1 else ''} {', '.join(now.rebound)} no longer referred "
                        "to the course's module (the check cell must call the course's grader)")
    return problems
