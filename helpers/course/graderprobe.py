"""Run a lab's graders on answers that must fail, without running the notebook: the stub students start from and
functions that return odd values (None, a float, a string). Each must fail cleanly, with the grader's own report
(``grading.CheckFailed``): a grader that passes accepts an unwritten answer (or compares nothing), and one that
raises anything else shows the student a traceback into the course's code.

``make check`` runs it for every check cell whose grader takes the answer cell's Python functions
(``lab1.check_tile_bytes(tile_bytes)``); graders of CUDA sources are judged by ``make validate``, which compiles
and runs them.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import io
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["ODD", "Finding", "probe", "answer_functions"]

#: what a wrong answer's function returns, beside the stub (which raises NotImplementedError)
ODD: dict[str, Any] = {"None": None, "a float (1.5)": 1.5, "a string ('x')": "x"}
#: seconds one grader may take on one probe answer
LIMIT_S = 10


class Finding(str):
    """One sentence: what the grader did with which answer."""


def answer_functions(source: str) -> dict[str, ast.FunctionDef]:
    """The functions an answer cell defines at its top level, by name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _shaped(node: ast.FunctionDef, body: str, namespace: dict) -> Callable[..., Any]:
    """A function with ``node``'s name and parameters (annotations left out) whose body is ``body``; with
    ``*args, **kwargs`` when the parameters' defaults need names the grader module lacks."""
    args = node.args
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
        if a is not None:
            a.annotation = None
    params = ast.unparse(args)
    for signature in (params, "*args, **kwargs"):
        space = dict(namespace)
        try:
            exec(f"def {node.name}({signature}):\n    {body}\n", space)  # noqa: S102 - the course's own cell
        except Exception:  # noqa: BLE001 - a default the module cannot evaluate: the plain signature
            continue
        return space[node.name]
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError after ``seconds`` (in the main thread; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"no verdict in {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def grader_module(root: Path, lab: str) -> ModuleType | None:
    """The grader module of ``lab`` in the course at ``root`` (imported from that checkout's file); None when it
    is missing or does not import."""
    path = root / "helpers" / "course" / "checks" / f"{lab}.py"
    if not path.exists():
        return None
    import helpers

    if Path(helpers.__file__).resolve().parents[1] == root.resolve():
        try:
            return importlib.import_module(f"helpers.course.checks.{lab}")
        except Exception:  # noqa: BLE001 - ruff and the lab's tests say why
            return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    name = f"helpers.course.checks._probed_{lab}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:  # noqa: BLE001
        return None
    sys.modules[name] = module
    return module


def probe(module: ModuleType, grader: str, answer_cell: str, names: list[str], stub_cell: str) -> list[Finding]:
    """Run ``module.<grader>`` on the stub (``stub_cell``: the answer cell as students get it) and on functions
    named ``names`` returning each odd value. At most three findings: the answers it passes, the first it raises on
    (or gives no verdict for), and whether it compared nothing."""
    from helpers.course import grading

    fn = getattr(module, grader, None)
    shapes = answer_functions(answer_cell)
    if fn is None or not names or any(n not in shapes for n in names):
        return []
    namespace = dict(vars(module))
    stubs = answer_functions(stub_cell)
    answers: dict[str, list[Callable[..., Any]]] = {}
    if all(n in stubs for n in names):
        stub_text = "raise NotImplementedError('not written yet')"
        answers["the stub students start from"] = [_shaped(stubs[n], stub_text, namespace) for n in names]
    for label, value in ODD.items():
        answers[f"an answer returning {label}"] = [_shaped(shapes[n], f"return {value!r}", namespace) for n in names]
    passed: list[str] = []
    raised: list[str] = []
    empty: list[str] = []
    for label, functions in answers.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()), _limit(LIMIT_S):
                fn(*functions)
        except grading.CheckFailed as exc:
            if "compared nothing" in str(exc):
                empty.append(label)
        except TimeoutError:
            raised.append(f"gives no verdict in {LIMIT_S} s on {label}")
        except Exception as exc:  # noqa: BLE001 - the very mistake this looks for
            why = str(exc).splitlines()[0][:80] if str(exc) else "no message"
            raised.append(f"raises {type(exc).__name__} on {label} instead of failing with its report ({why})")
        else:
            passed.append(label)
    found = [Finding(f"{grader} passes {' and '.join(passed)}: it accepts an unwritten or wrong answer")] if passed \
        else []
    found += [Finding(f"{grader} {raised[0]}")] if raised else []
    found += [Finding(f"{grader} compares nothing on {' and '.join(empty)}: it judges no answer")] if empty else []
    return found
