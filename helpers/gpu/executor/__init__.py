"""The PTX executor, the runtime's second backend: runs the PTX that NVRTC produces on the CPU, with the Hopper
model (``helpers.hopper.tma``, ``mbarrier``, ``wgmma``, ...) as its hardware. See docs/emulator.md.

May import: ``helpers.hopper`` and its own modules, never the rest of ``helpers.gpu`` (the runtime chooses it,
not the other way round) nor ``helpers.course``. Its failures are its own (``runtime.KernelOutcome``,
``errors.UnsupportedInstruction``, ``hazards.Hazard``); ``helpers.gpu`` turns them into the runtime's errors.

Beyond what ``helpers.gpu`` does with it on a machine without a GPU:

* :class:`RunResult` — what ``helpers.gpu.run_on_executor`` returns: the arrays, the hazards found and the per-warp
  :class:`~helpers.gpu.executor.trace.Trace` the pipeline widget draws.
* :func:`executor_options` — a ``with`` block in which every launch through ``helpers.gpu`` that runs on the
  executor (``launch``, ``prepare``, ``run_isolated``, in this process or its children) uses these options;
  ``HELPERS_EXECUTOR_HAZARDS=1`` / ``HELPERS_EXECUTOR_TRACE=1`` do the same for a whole session.
* :func:`last_run` — the last emulated launch (its trace, hazards and ``work``: who computed and stored what).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunResult", "executor_options", "current_options", "last_run", "Options"]

_OPTIONS: ContextVar[dict | None] = ContextVar("helpers_ptx_options", default=None)
_ENV = {"hazards": "HELPERS_EXECUTOR_HAZARDS", "trace": "HELPERS_EXECUTOR_TRACE"}


def __getattr__(name: str) -> Any:
    if name == "Options":
        from .machine import Options

        return Options
    raise AttributeError(f"module 'helpers.gpu.executor' has no attribute {name!r}")


def _env_on(var: str) -> bool:
    return os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")


def current_options() -> Any:
    """The executor options a launch through helpers.gpu uses now: the innermost :func:`executor_options`, then
    ``HELPERS_EXECUTOR_HAZARDS`` / ``HELPERS_EXECUTOR_TRACE``, then the defaults."""
    from .machine import Options

    opts = Options()
    for key, var in _ENV.items():
        if _env_on(var):
            setattr(opts, key, True)
    for key, value in (_OPTIONS.get() or {}).items():
        setattr(opts, key, value)
    if opts.trace:
        opts.wgmma_latency = TRACE_WGMMA_LATENCY
    return opts


#: Cycles a wgmma occupies the tensor cores in a traced run: helpers.hopper.pipeline's default, so a recorded timeline
#: and
#: the Lesson 04 model speak the same units (TMA: 500 cycles in both).
TRACE_WGMMA_LATENCY = 100


@contextlib.contextmanager
def executor_options(**options: Any) -> Iterator[None]:
    """Launches on the executor inside the block use these :class:`Options` fields (``hazards=True``,
    ``trace=True``, ...). Child processes (``gpu.run_isolated`` of a function) inherit hazards and trace through
    the environment."""
    from .machine import Options

    known = {f.name for f in dataclasses.fields(Options)}
    bad = sorted(set(options) - known)
    if bad:
        raise TypeError(f"unknown executor option(s) {bad}: one of {sorted(known)}")
    merged = {**(_OPTIONS.get() or {}), **options}
    token = _OPTIONS.set(merged)
    saved = {var: os.environ.get(var) for var in _ENV.values()}
    for key, var in _ENV.items():
        if key in options:
            os.environ[var] = "1" if options[key] else "0"
    try:
        yield
    finally:
        _OPTIONS.reset(token)
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


@dataclass
class RunResult:
    """One launch on the executor: the arrays passed as numpy (copied back), the hazards found, the timeline."""

    arrays: list = field(default_factory=list)
    hazards: list = field(default_factory=list)
    machine: Any = None
    error: Exception | None = None
    seconds: float = 0.0

    @property
    def trace(self) -> Any:
        """The per-warp timeline (:class:`helpers.gpu.executor.trace.Trace`; empty unless the run had
        ``trace=True``)."""
        from .trace import Trace

        return Trace.from_machine(self.machine)

    @property
    def work(self) -> Any:
        """Who did which part of the work (:class:`helpers.gpu.executor.work.WorkLog`): every wgmma and store with
        the block that issued it."""
        from .work import WorkLog, log_of

        return log_of(self.machine) if self.machine is not None else WorkLog()

    @property
    def ok(self) -> bool:
        return not self.hazards and self.error is None


def last_run() -> RunResult | None:
    """The last launch on the executor in this process (its ``.trace`` and ``.hazards``), or None."""
    from . import runtime

    mach = runtime.LAST
    if mach is None:
        return None
    return RunResult(machine=mach, hazards=list(mach.hz.found) if mach.hz is not None else [])
