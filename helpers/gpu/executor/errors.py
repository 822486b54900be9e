"""Errors of the PTX executor. Each says what happened in plain words and, where it applies, the PTX line and
the line of the CUDA cell it came from."""

from __future__ import annotations


class PTXError(RuntimeError):
    """Base class of the executor's errors."""

    def _render_traceback_(self) -> list[str]:  # IPython shows the sentence, not a traceback into the course
        return [f"{type(self).__name__}: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


class ParseError(PTXError):
    """The PTX text could not be read (names the PTX line)."""


class UnsupportedInstruction(PTXError):
    """An instruction (or a qualifier combination) the executor does not emulate: never a silent wrong result."""


class EmulationLimit(PTXError):
    """The kernel asks for something the executor deliberately does not model (e.g. recursion)."""


class ApproximationWarning(UserWarning):
    """A kernel ran an instruction whose results the executor knows only within a bound (said once per run)."""
