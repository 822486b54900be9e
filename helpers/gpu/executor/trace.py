"""Timelines of a kernel's own warps: what each warp issued, waited for and arrived on, over time.

A :class:`Trace` is a list of :class:`~helpers.gpu.executor.machine.Event` (time, block, warp, kind, barrier, phase,
stage,
detail, end) from one of two sources:

* the executor (``helpers.gpu.run_on_executor(..., trace=True)`` or ``executor_options(trace=True)``): every warp's
waits on
  mbarriers (``wait`` → ``wait_done``), arrivals, TMA copies (``tma_issue`` → ``tma_landed``), wgmmas
  (``wgmma_issue``; ``wgmma``: the span the block's tensor cores spend on it), commits, ``wait_group`` →
  ``wait_group_done``, TMA stores, phase completions, exits, with the modelled latencies of
  :mod:`helpers.hopper.pipeline` (TMA 500 cycles, a wgmma 100 cycles on the tensor cores, one at a time per block);
* an H100 (:func:`from_stamps`): the ``HOPPER_STAMP`` records a kernel writes into a per-warp ring buffer
  (``helpers/include/hopper_trace.cuh``), in SM cycles (``clock64``), one block per SM.

Events use the same kinds either way, so ``helpers.course.widgets.trace`` draws both with the Lesson 04 pipeline widget.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .machine import Event, stage_of

__all__ = ["Trace", "Event", "STAMP_KINDS", "STAMP_RECORD", "from_stamps", "stamp_buffer"]


@dataclass
class Trace:
    """Per-warp events of one launch. ``source``: 'emulator' or 'h100'; ``unit``: what a time counts."""

    events: list[Event] = field(default_factory=list)
    source: str = "emulator"
    unit: str = "cycles"
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_machine(cls, mach: Any) -> Trace:
        """The trace an executor run recorded (empty when it ran without ``trace=True``)."""
        if mach is None:
            return cls()
        meta = {"kernel": mach.name, "grid": list(mach.grid), "block": list(mach.block),
                "tma_latency": mach.opts.tma_latency, "wgmma_latency": mach.opts.wgmma_latency}
        return cls(sorted(mach.trace, key=lambda e: e.time), "emulator", "cycles", meta)

    # ------------------------------------------------------------------ selections
    def __len__(self) -> int:
        return len(self.events)

    def blocks(self) -> list[tuple[int, ...]]:
        """The blocks that have events, in the order they first appear."""
        seen: dict[tuple[int, ...], None] = {}
        for e in self.events:
            seen.setdefault(tuple(e.cta), None)
        return list(seen)

    def block(self, cta: Iterable[int]) -> Trace:
        """The events of one block."""
        key = tuple(cta)
        return Trace([e for e in self.events if tuple(e.cta) == key], self.source, self.unit, dict(self.meta))

    def of(self, kind: str, warp: int | None = None) -> list[Event]:
        return [e for e in self.events if e.kind == kind and (warp is None or e.warp == warp)]

    def roles(self) -> dict[int, str]:
        """Warpgroup -> its role in this trace: 'producer' (issues TMA copies), 'consumer' (issues wgmmas or
        waits on full barriers), or 'producer and consumer' (Labs 2-3: thread 0 of the only warpgroup loads)."""
        loads: set[int] = set()
        mmas: set[int] = set()
        for e in self.events:
            if e.warp < 0:
                continue
            if e.kind == "tma_issue":
                loads.add(e.warp // 4)
            elif e.kind in ("wgmma_issue", "wgmma") or (e.kind == "wait" and e.barrier.startswith("full")):
                mmas.add(e.warp // 4)
        out = {}
        for g in sorted(loads | mmas):
            out[g] = "producer and consumer" if g in loads and g in mmas else "producer" if g in loads else "consumer"
        return out

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict:
        """A compact form for fixtures: events as rows [time, block, warp, kind, barrier, phase, stage, detail,
        end]."""
        rows = [[e.time, list(e.cta), e.warp, e.kind, e.barrier, e.phase, e.stage, e.detail, e.end]
                for e in self.events]
        return {"source": self.source, "unit": self.unit, "meta": self.meta,
                "columns": ["time", "block", "warp", "kind", "barrier", "phase", "stage", "detail", "end"],
                "events": rows}

    @classmethod
    def from_json(cls, data: dict | str | Path) -> Trace:
        if isinstance(data, str | Path):
            data = json.loads(Path(data).read_text())
        events = [Event(int(t), tuple(b), int(w), k, bar, int(p), int(s), d, int(end))
                  for t, b, w, k, bar, p, s, d, end in data["events"]]
        return cls(events, data.get("source", "emulator"), data.get("unit", "cycles"), data.get("meta", {}))

    def as_dicts(self) -> list[dict]:
        return [asdict(e) for e in self.events]


# ------------------------------------------------------------------------------------------- H100 stamps
#: kind number (as HOPPER_STAMP writes it, helpers/include/hopper_trace.cuh) -> (event kind, barrier prefix)
STAMP_KINDS: dict[int, tuple[str, str]] = {
    1: ("wait", "full"), 2: ("wait_done", "full"),
    3: ("wait", "empty"), 4: ("wait_done", "empty"),
    5: ("tma_issue", "full"),
    6: ("wgmma_issue", ""),
    7: ("wait_group", ""), 8: ("wait_group_done", ""),
    9: ("arrive", "empty"),
    10: ("work", ""), 11: ("done", ""),
    12: ("start", ""),
}
STAMP_NAMES = {"WAIT_FULL": 1, "FULL_DONE": 2, "WAIT_EMPTY": 3, "EMPTY_DONE": 4, "TMA": 5, "WGMMA": 6,
               "WAIT_GROUP": 7, "WAIT_GROUP_DONE": 8, "RELEASE": 9, "EPILOGUE": 10, "DONE": 11, "START": 12}
#: one record: clock64 (8 bytes), then globaltimer's low 32 bits, the kind, the argument and a sequence number
STAMP_RECORD = np.dtype([("clock", "<u8"), ("gtime", "<u4"), ("kind", "u1"), ("arg", "u1"), ("seq", "<u2")])
STAMP_CAP = 512  # records per warp (HOPPER_STAMP_CAP)


def _dim3(d: int | Iterable[int]) -> tuple[int, int, int]:
    t = (int(d),) if isinstance(d, int | np.integer) else tuple(int(x) for x in d)
    return (t + (1, 1))[:3]


def stamp_buffer(blocks: int, warps_per_block: int, cap: int = STAMP_CAP) -> np.ndarray:
    """A zeroed trace buffer for a stamped kernel (uint64, 2 words per record): pass it as the kernel's
    ``unsigned long long* trace`` argument."""
    return np.zeros(blocks * warps_per_block * cap * 2, np.uint64)


def from_stamps(buffer: np.ndarray, grid: int | Iterable[int], block: int | Iterable[int], cap: int = STAMP_CAP,
                meta: dict | None = None, source: str = "h100", align: str = "clock") -> Trace:
    """The trace a stamped kernel wrote into ``buffer`` (see :func:`stamp_buffer`). Times are cycles from each
    block's first stamp (``align='clock'``: one block per SM, each SM its own clock), the raw clock64 values
    (``align='none'``), or nanoseconds of ``%globaltimer`` from the first stamp of the launch
    (``align='globaltimer'``)."""
    gx, gy, gz = _dim3(grid)
    bx, by, bz = _dim3(block)
    warps = -(-(bx * by * bz) // 32)
    recs = np.ascontiguousarray(buffer).view(STAMP_RECORD).reshape(gx * gy * gz, warps, cap)
    events: list[Event] = []
    g0 = None
    if align == "globaltimer":
        used = recs["kind"] != 0
        g0 = int(recs["gtime"][used].astype(np.int64).min()) if used.any() else 0
    for b in range(recs.shape[0]):
        cta = (b % gx, (b // gx) % gy, b // (gx * gy))
        used = recs[b]["kind"] != 0
        if not used.any():
            continue
        t0 = int(recs[b]["clock"][used].min()) if align == "clock" else 0
        for w in range(warps):
            r = recs[b, w]
            r = r[r["kind"] != 0]
            for rec in r[np.argsort(r["clock"], kind="stable")]:
                kind, prefix = STAMP_KINDS.get(int(rec["kind"]), ("stamp", ""))
                arg = int(rec["arg"])
                barrier = f"{prefix}[{arg}]" if prefix else ""
                if align == "globaltimer":
                    t = (int(rec["gtime"]) - g0) & 0xFFFFFFFF
                else:
                    t = int(rec["clock"]) - t0
                detail = f"SM {arg}" if kind == "start" else ""
                events.append(Event(t, cta, w, kind, barrier, -1, stage_of(barrier) if barrier else
                                    (arg if kind == "wgmma_issue" else -1), detail))
    events.sort(key=lambda e: (e.time, e.cta, e.warp))
    info = {"grid": [gx, gy, gz], "block": [bx, by, bz], "align": align, **(meta or {})}
    return Trace(events, source, "ns" if align == "globaltimer" else "cycles", info)


# ------------------------------------------------------------------------------------------- stamping a kernel
def add_stamps(source: str, lines: list[tuple[str, str, str]], replace: list[tuple[str, str]] = ()) -> str:
    """``source`` with stamp lines added: for each ``(anchor, before, after)`` the one line containing ``anchor``
    gets ``before`` on a line above it and ``after`` on a line below it (same indentation; '' for none); each
    ``(old, new)`` of ``replace`` is replaced once (the ``trace`` argument). Every anchor must be found exactly
    once, so a kernel that changed is refused in words instead of stamped in the wrong place."""
    for old, new in replace:
        if source.count(old) != 1:
            raise ValueError(f"cannot place the stamps: {old.strip()!r} occurs {source.count(old)} times in the "
                             "kernel (once expected); update the stamp list beside the kernel")
        source = source.replace(old, new)
    text = source.split("\n")
    for anchor, before, after in lines:
        hits = [i for i, line in enumerate(text) if anchor in line]
        if len(hits) != 1:
            raise ValueError(f"cannot place the stamps: {anchor.strip()!r} occurs {len(hits)} times in the kernel "
                             "(once expected); update the stamp list beside the kernel")
        i = hits[0]
        indent = text[i][:len(text[i]) - len(text[i].lstrip())]
        text[i:i + 1] = ([indent + before] if before else []) + [text[i]] + ([indent + after] if after else [])
    return "\n".join(text)


LAB4_KERNEL = Path(__file__).resolve().parents[3] / "bench" / "kernels" / "lab4_128x128.cu"

#: Where Lab 4's 128×128 ring kernel (bench/kernels/lab4_128x128.cu) gets its stamps: the producer's wait for a
#: free stage and its copies, each consumer warp's wait for a full stage, its wgmmas, its wait_group and its release,
#: the epilogue and the end. The kernel gains a last argument, ``unsigned long long* trace``.
LAB4_STAMPS = [
    ('#include "hopper.cuh"', "", '#include "hopper_trace.cuh"'),
    ("  __syncthreads();", "", "HOPPER_TRACE(trace);"),
    ("HOPPER_WAIT(empty, s, phase ^ 1);", "HOPPER_STAMP(WAIT_EMPTY, s);", "HOPPER_STAMP(EMPTY_DONE, s);"),
    ("hopper::tma_load_2d(a, &tmap_a,", "HOPPER_STAMP(TMA, s);", ""),
    ("    return;", "HOPPER_STAMP(DONE, 0);", ""),
    ("HOPPER_WAIT(full, s, (k / STAGES) & 1);", "HOPPER_STAMP(WAIT_FULL, s);", "HOPPER_STAMP(FULL_DONE, s);"),
    ("    hopper::wgmma_fence();", "HOPPER_STAMP(WGMMA, s);", ""),
    ("hopper::wgmma_wait<1>();", "HOPPER_STAMP(WAIT_GROUP, s);", "HOPPER_STAMP(WAIT_GROUP_DONE, s);"),
    ("if (k > 0 && tid == 0) hopper::mbar_arrive(&empty[(k - 1) % STAGES]);",
     "if (k > 0) HOPPER_STAMP(RELEASE, (k - 1) % STAGES);", ""),
    ("  hopper::wgmma_wait<0>();", "HOPPER_STAMP(WAIT_GROUP, 0);", "HOPPER_STAMP(WAIT_GROUP_DONE, 0);"),
    ("  hopper::wgmma_fence_operands(d);", "", "HOPPER_STAMP(EPILOGUE, 0);"),
    ("make_float2(d[j + 2], d[j + 3]);", "", ""),
]
LAB4_SIGNATURE = [("float* __restrict__ C, int M, int N, int K) {",
                   "float* __restrict__ C, int M, int N, int K, unsigned long long* __restrict__ trace) {"),
                  ("make_float2(d[j + 2], d[j + 3]);\n  }\n}", "make_float2(d[j + 2], d[j + 3]);\n  }\n"
                   "  HOPPER_STAMP(DONE, 0);\n}")]


def stamped_lab4(path: Path | str = LAB4_KERNEL) -> str:
    """Lab 4's 128×128 ring kernel (``lab4_gemm_128x128``) with timeline stamps and a ``trace`` argument."""
    return add_stamps(Path(path).read_text(), LAB4_STAMPS, LAB4_SIGNATURE)
