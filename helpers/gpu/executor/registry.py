"""Where instruction decoders register, keyed by the opcode's first word (``add``, ``ld``, ``mbarrier``, ...).

Adding an instruction: write ``@decoder("name")`` on a function ``dec(b: Binder) -> op`` in the module of its
family (``alu``, ``memops``, ``control``, ``sync``, ``tensor``). The decoder checks every qualifier it is given
(``b.only(...)`` rejects the ones it does not know, so nothing is silently ignored), builds readers and writers for
the operands once, and returns ``op(m, c)``: ``m`` selects the threads (a slice or an index array into the
launch's thread axis), ``c`` is their CTA. An op that moves the program counter itself (branches, waits that
park) sets ``op.ctl = True`` and returns True when it did. See docs/emulator.md, "Adding an instruction".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DECODERS: dict[str, Callable[[Any], Callable]] = {}


def decoder(*names: str) -> Callable[[Callable], Callable]:
    """Register a decoder for opcodes whose first word is one of ``names``."""

    def reg(fn: Callable) -> Callable:
        for n in names:
            DECODERS[n] = fn
        return fn

    return reg


def ctl(fn: Callable) -> Callable:
    """Mark an op as one that may set the threads' program counter or park them (it ends a basic block)."""
    fn.ctl = True  # type: ignore[attr-defined]
    return fn
