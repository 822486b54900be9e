"""The mbarriers of each CTA, found by their shared-memory offset and named after the variable they live in
(``full[2]``), so every sentence about a barrier speaks the kernel's own names."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from helpers.hopper.mbarrier import MBarrier

if TYPE_CHECKING:
    from .machine import CTA, Machine

__all__ = ["demangle", "barrier_label", "get_barrier"]


def demangle(name: str) -> str:
    """The source name of a (possibly mangled) shared variable: ``_ZZ9lab3_gemmE4full`` -> ``full``."""
    m = re.match(r"_ZZ.*?E(\d+)(\w+)", name)
    if m:
        n = int(m.group(1))
        return m.group(2)[:n]
    if name.startswith("_ZN"):
        parts = re.findall(r"(\d+)([A-Za-z_]\w*)", name[3:])
        out = ""
        rest = name[3:]
        while rest and rest[0].isdigit():
            k = re.match(r"(\d+)", rest)
            n = int(k.group(1))
            out = rest[len(k.group(1)):len(k.group(1)) + n]
            rest = rest[len(k.group(1)) + n:]
        return out or (parts[-1][1] if parts else name)
    return name


def barrier_label(mach: Machine, offset: int) -> tuple[str, int]:
    """(label, index) of the mbarrier at a shared offset, from the variable it lives in: ("full", 2)."""
    hit = mach.prog.shared_name(offset)
    if hit is None:
        if offset >= mach.dyn_base:
            return "", -1
        return "", -1
    name, inner = hit
    s = mach.prog.symbol(None, name)
    label = demangle(name)
    if s is not None and s.size > 8:
        return label, inner // 8
    return label, -1


def get_barrier(mach: Machine, cta: CTA, off: int, create: bool = False) -> MBarrier:
    bar = cta.barriers.get(off)
    if bar is None:
        label, index = barrier_label(mach, off)
        name = f"{label}[{index}]" if label and index >= 0 else (label or f"mbarrier at shared offset {off:#x}")
        bar = MBarrier(name, allow_negative_tx=True)
        bar.label, bar.index, bar.offset, bar.cta = label, index, off, cta

        def completed(b: MBarrier, phase: int) -> None:
            if mach.hz is not None:
                mach.hz.phase_completed(b, phase)
            mach.wake(b)
            mach.note_progress()
            if mach.opts.trace:
                mach.event(cta, -1, "phase_complete", b.name, phase)

        bar.on_complete.append(completed)
        if create:
            cta.barriers[off] = bar
            cta.barmask[off:off + 8] = True
    return bar
