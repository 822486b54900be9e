"""Exceptions of the GPU runtime. Each message is a plain-words sentence; in IPython only that shows."""

from __future__ import annotations


class GpuError(RuntimeError):
    """Base class: a GPU-runtime failure whose message is meant for the student, no traceback needed."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [f"{type(self).__name__}: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


class CompileError(GpuError):
    """NVRTC rejected the source; ``log`` holds the raw compiler log."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class NoHopperError(GpuError):
    """The call needs an sm_90 GPU and a recent enough driver, and this machine has none."""


class LaunchError(GpuError):
    """The launch was refused before the kernel ran (bad arguments, too much shared memory, ...)."""


class ExecutorLimit(LaunchError):
    """The PTX executor (no GPU) could not run the kernel to the end for a reason of its own: an instruction or
    feature it does not support, or its step limit (or wall-clock safety net) was reached. A limit of the executor,
    never a verdict on the kernel."""


class KernelFault(GpuError):
    """The kernel faulted on the GPU (illegal address, misaligned access, trap, ...)."""


class KernelDeadlock(KernelFault):
    """The kernel waited forever (a bounded wait in hopper.cuh gave up, or the time limit passed)."""


class GpuContextLost(GpuError):
    """An earlier fault left this process's CUDA context unusable."""


class HazardError(KernelFault):
    """The PTX executor's hazard checker (``helpers.gpu.executor``, hazard mode) found an ordering bug that the GPU
    often
    hides: the message names the hazard and both accesses. ``kind`` is its id (``helpers.gpu.executor.hazards.KINDS``),
    ``hazards`` the checker's reports when raised in this process."""

    def __init__(self, message: str, hazards: list | None = None) -> None:
        super().__init__(message)
        self.hazards = list(hazards or [])

    @property
    def kind(self) -> str:
        """The first hazard's kind id (read from the message, so it survives a child process)."""
        from helpers.gpu.executor.hazards import KINDS

        text = str(self)
        hits = [(text.find(f"({words})"), k) for k, words in KINDS.items() if f"({words})" in text]
        return min(hits)[1] if hits else ""
