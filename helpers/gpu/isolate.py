"""Run GPU work in a child process with a time limit, so that a fault or a deadlock cannot break the notebook.

The child is a fresh ``python -m helpers.gpu._child``: it gets the job pickled on stdin, writes the pickled
answer to a file, and exits. A KernelFault/KernelDeadlock raised there is raised again here with the same
sentence; a child that outlives the time limit is killed and reported as a deadlock. Its printed output is
printed here afterwards.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import errors, gpulock
from .compiler import Kernel


@dataclass(frozen=True)
class TensorMapArg:
    """Stands for a tensor map in an isolated launch: the child copies `array` to the GPU and passes a tensor
    map over it (box in row-major order, like the array's shape)."""

    array: Any
    box: tuple[int, ...]
    swizzle: int = 128
    via: str = "driver"


@dataclass
class IsolatedResult:
    """What an isolated launch gives back: the numpy arrays after the kernel ran, and how long it took."""

    arrays: list[Any]
    seconds: float
    stdout: str


def _python_path() -> str:
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [here] + [p for p in sys.path if p and os.path.isdir(p)]
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(paths + ([old] if old else []))


def _run_child(job: dict[str, Any], timeout: float) -> Any:
    env = dict(os.environ, PYTHONPATH=_python_path(), HELPERS_ISOLATED_CHILD="1", PYTHONUNBUFFERED="1")
    # one graded run per GPU at a time, machine-wide (helpers.gpu.gpulock): correct timings, no out-of-memory races
    with tempfile.TemporaryDirectory(prefix="gpu-isolated-") as tmp, gpulock.hold():
        answer = os.path.join(tmp, "answer.pkl")
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "helpers.gpu._child", answer], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        try:
            out, _ = proc.communicate(pickle.dumps(job), timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            _echo(out)
            raise errors.KernelDeadlock(
                f"deadlock: {job.get('what', 'the isolated run')} did not finish within {timeout:g} s, so its process "
                "was stopped (a wait that nothing satisfies, or an endless loop). This notebook is unaffected."
            ) from None
        seconds = time.monotonic() - t0
        text = out.decode(errors="replace")
        if not os.path.exists(answer):
            _echo(out)
            code = proc.returncode
            how = f"signal {-code}" if code < 0 else f"exit status {code}"
            raise errors.KernelFault(f"the isolated run's process died ({how}) before answering. This notebook is "
                                     "unaffected.")
        with open(answer, "rb") as f:
            status, payload = pickle.load(f)
    if status == "ok":
        return payload, seconds, text
    _echo(out)
    cls_name, message = payload
    cls = getattr(errors, cls_name, None)
    if isinstance(cls, type) and issubclass(cls, errors.GpuError):
        raise cls(message + (" This notebook is unaffected." if issubclass(cls, errors.KernelFault) else ""))
    raise RuntimeError(f"the isolated run raised {cls_name}: {message}")


def _echo(out: bytes) -> None:
    text = out.decode(errors="replace").strip()
    if text:
        print(text)


def run_isolated(target: Kernel | Callable[..., Any] | str, *args: Any, timeout: float = 30.0,
                 cluster: Any = None, **kwargs: Any) -> Any:
    """Run GPU work in a child process, at most `timeout` seconds.

    * ``run_isolated(kernel, grid, block, shared_mem, *kernel_args, cluster=None, timeout=10)``: numpy arrays
      among the kernel arguments are copied to the GPU (and back afterwards), ``TensorMapArg(np_array, box)``
      becomes a tensor map over a GPU copy of np_array; returns an IsolatedResult whose ``arrays`` are the numpy
      argument arrays after the run, in argument order.
    * ``run_isolated(func, *args, **kwargs)`` with a module-level function, or ``"package.module:function"`` /
      ``"path/to/file.py:function"``: calls it in the child and returns its (picklable) result.

    Raises KernelFault / KernelDeadlock with the plain-words sentence; this process stays healthy.
    """
    if isinstance(target, Kernel) and _emulated():
        grid, block, smem, *kargs = args
        return _run_emulated(target, grid, block, smem, kargs, cluster, timeout)
    if isinstance(target, Kernel):
        grid, block, smem, *kargs = args
        job = {"kind": "launch", "kernel": target, "grid": grid, "block": block, "smem": smem, "args": kargs,
               "cluster": cluster, "timeout": timeout, "what": f"kernel {target.name}"}
        payload, seconds, text = _run_child(job, timeout)
        if text.strip():
            print(text.strip())
        return IsolatedResult(payload, seconds, text)
    if cluster is not None:
        kwargs["cluster"] = cluster
    if callable(target):
        spec: Any = (target.__module__, target.__qualname__)
        if target.__module__ == "__main__" or "<" in target.__qualname__:
            raise ValueError("run_isolated needs a function defined in a module file (not in a notebook cell), or "
                             "a kernel: pass the Kernel and its launch arguments instead")
    elif isinstance(target, str) and ":" in target:
        spec = tuple(target.rsplit(":", 1))
    else:
        raise ValueError("target must be a Kernel, a module-level function or 'module:function'")
    job = {"kind": "call", "spec": spec, "args": args, "kwargs": kwargs, "what": f"{spec[0]}:{spec[1]}"}
    payload, seconds, text = _run_child(job, timeout)
    if text.strip():
        print(text.strip())
    return payload


def _emulated() -> bool:
    from .device import executor_active

    return executor_active()


def _run_emulated(kernel: Kernel, grid: Any, block: Any, smem: int, kargs: list[Any], cluster: Any,
                  timeout: float, with_maps: bool = False) -> IsolatedResult:
    """run_isolated on the emulator, in this process: a kernel there cannot break anything (its memory is numpy
    arrays, a fault is an exception), and the time limit is enforced by the emulator's own clock, so a child
    process would only add its start-up time. Same arguments, results and sentences as the child path.
    ``with_maps``: the arrays behind TensorMapArg arguments come back too (run_on_executor)."""
    from . import arrays, tensormaps
    from .launch import EmuLauncher

    t0 = time.monotonic()
    dev: dict[int, Any] = {}
    real: list[Any] = []
    held: list[Any] = []  # the arrays behind the maps live until the kernel is done (a map holds only the address)
    for i, a in enumerate(kargs):
        if isinstance(a, np.ndarray):
            dev[i] = arrays.to_device(a)
            real.append(dev[i])
        elif isinstance(a, TensorMapArg):
            src = arrays.to_device(a.array)
            held.append(src)
            real.append(tensormaps.tensor_map(src, a.box, swizzle=a.swizzle, via=a.via))
            if with_maps:
                dev[i] = src
        else:
            real.append(a)
    try:
        EmuLauncher(kernel, grid, block, smem, real, cluster).run(timeout)
    except errors.KernelFault as e:
        err = type(e)(f"{e} This notebook is unaffected.")
        err.__dict__.update(e.__dict__)  # a HazardError keeps its hazards
        raise err from None
    return IsolatedResult([dev[i].to_host() for i in sorted(dev)], time.monotonic() - t0, "")


def run_on_executor(kernel: Kernel, grid: Any, block: Any, shared_mem: int, *args: Any, cluster: Any = None,
                    hazards: bool = True, trace: bool = False, check: bool = True,
                    timeout: float = 120.0) -> Any:
    """Run a compiled kernel (``helpers.gpu.compile``) once on the PTX executor, even where there is a GPU.
    Arguments as for ``gpu.run_isolated``: numpy arrays and ``TensorMapArg`` (copied in, and back in ``.arrays``
    in argument order), numpy scalars, or arrays made on the emulator. With ``hazards`` the hazard checker runs
    (a hazard raises ``gpu.HazardError``, or with ``check=False`` is returned in ``.hazards``); with ``trace``
    the per-warp timeline is recorded (``.trace``). Returns a :class:`helpers.gpu.executor.RunResult`."""
    from .executor import RunResult, executor_options, runtime

    saved = os.environ.get("HELPERS_EXECUTOR")
    os.environ["HELPERS_EXECUTOR"] = "force"
    res = RunResult()
    try:
        with executor_options(hazards=hazards, trace=trace):
            try:
                out = _run_emulated(kernel, grid, block, shared_mem, list(args), cluster, timeout, with_maps=True)
                res.arrays, res.seconds = list(out.arrays), out.seconds
            except errors.HazardError as e:
                if check:
                    raise
                res.error = e
    finally:
        if saved is None:
            os.environ.pop("HELPERS_EXECUTOR", None)
        else:
            os.environ["HELPERS_EXECUTOR"] = saved
    res.machine = runtime.LAST
    res.hazards = list(res.machine.hz.found) if res.machine is not None and res.machine.hz is not None else []
    return res


def launch_isolated(kernel: Kernel, grid: Any, block: Any, shared_mem: int, *args: Any, cluster: Any = None,
                    timeout: float = 10.0) -> Sequence[Any]:
    """Shorthand: run_isolated(kernel, ...) returning just the arrays."""
    return run_isolated(kernel, grid, block, shared_mem, *args, cluster=cluster, timeout=timeout).arrays
