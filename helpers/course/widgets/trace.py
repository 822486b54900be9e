"""Your own kernel's pipeline, drawn by the Lesson 04 timeline: a recorded :class:`helpers.gpu.executor.trace.Trace`
(the
executor's, or an H100 capture from ``HOPPER_STAMP``) as the bars and marks of :mod:`helpers.course.widgets.pipeline`.

Pure computation first: :func:`trace_bars` gives the lanes —

* one per warpgroup role: ``WG0 producer (warp 0)``, ``WG1 consumer (warp 4)``, … (``producer and consumer`` for
  the Lab 2-3 kernels, where thread 0 loads): its waits on barriers, its waits for wgmma groups, its epilogue;
* ``tensor cores``: each wgmma while the block's tensor cores work on it (the executor's model);
* ``stage s``: each copy in flight (issue → landed on the emulator; issue → first consumer through on the H100),
  the time the stage holds a tile (the full phase completing → the empty phase completing), and every barrier
  phase that completed, as a mark —

then :func:`trace_widget` shows one block at a time (a block picker) in a 900-px figure.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from helpers.course.widgets import figure
from helpers.course.widgets.pipeline import Bar, Mark, draw_timeline, timeline_figure
from helpers.gpu.executor.machine import Event
from helpers.gpu.executor.trace import Trace

__all__ = ["trace_bars", "lane_names", "trace_figure", "trace_widget", "load_measured", "MEASURED"]

#: one launch of Lab 4's 128×128 ring kernel stamped on an H100 (tools/h100/pipeline_trace.py)
MEASURED = Path(__file__).resolve().parents[3] / "tests" / "data" / "lab4_trace_h100.json"


def load_measured() -> Trace | None:
    """The H100 trace of the Lab 4 ring kernel (two blocks, the producer warp and each consumer warpgroup's first
    warp), or None where it was not captured."""
    return Trace.from_json(MEASURED) if MEASURED.exists() else None

_COPY = re.compile(r"copy (\d+)")


def lane_names(trace: Trace) -> dict[int, str]:
    """Warp (in its block) -> the lane that draws it: the first warp of each warpgroup with a role (the producer's
    warp that issues the copies)."""
    roles = trace.roles()
    lanes: dict[int, str] = {}
    for g, role in roles.items():
        issuing = sorted({e.warp for e in trace.events if e.kind == "tma_issue" and e.warp // 4 == g})
        warp = issuing[0] if role == "producer" and issuing else 4 * g
        lanes[warp] = f"WG{g} {role} (warp {warp})"
    return lanes


def _spans(events: list[Event], start: str, end: str) -> list[tuple[Event, Event | None]]:
    """Pairs (start event, end event or None) of one warp, in time order."""
    out = []
    open_: Event | None = None
    for e in events:
        if e.kind == start:
            if open_ is not None:
                out.append((open_, None))
            open_ = e
        elif e.kind == end and open_ is not None:
            out.append((open_, e))
            open_ = None
    if open_ is not None:
        out.append((open_, None))
    return out


def trace_bars(trace: Trace, block: Any = None, max_time: float | None = None) -> tuple[list[Bar], list[Mark]]:
    """The bars and marks of one block of a trace (default: its first block), up to ``max_time``."""
    blocks = trace.blocks()
    if not blocks:
        return [], []
    t = trace.block(block if block is not None else blocks[0])
    evs = [e for e in t.events if max_time is None or e.time <= max_time]
    end_time = max((max(e.time, e.end) for e in evs), default=0)
    lanes = lane_names(t)
    bars: list[Bar] = []
    marks: list[Mark] = []
    for warp, lane in lanes.items():
        mine = [e for e in evs if e.warp == warp]
        for a, b in _spans(mine, "wait", "wait_done"):
            bars.append(Bar(lane, a.time, b.time if b else end_time, "waiting on a barrier",
                            f"waits on {a.barrier}" + ("" if b else ": never returns")))
        for a, b in _spans(mine, "wait_group", "wait_group_done"):
            bars.append(Bar(lane, a.time, b.time if b else end_time, "waiting for a wgmma group",
                            "wgmma.wait_group"))
        for a, b in _spans(mine, "work", "done"):
            bars.append(Bar(lane, a.time, b.time if b else end_time, "epilogue", "epilogue (stores C)"))
        for e in mine:
            if e.kind == "wgmma_issue" and e.end < 0 and t.source != "emulator":
                marks.append(Mark(lane, e.time, f"wgmmas of stage {e.stage} issued"))
    for e in evs:
        if e.kind == "wgmma" and e.end >= 0:  # the executor's tensor-core span
            who = lanes.get(e.warp, f"warp {e.warp}")
            bars.append(Bar("tensor cores", e.time, e.end, "wgmma", f"{who}: {e.detail}"))
            bars.append(Bar(who, e.time, e.end, "wgmma", e.detail))
    bars += _stage_bars(t, evs, end_time)
    for e in evs:
        if e.kind == "phase_complete" and e.stage >= 0:
            marks.append(Mark(f"stage {e.stage}", e.time, f"{e.barrier} phase {e.phase} done"))
    return bars, marks


def _stage_bars(t: Trace, evs: list[Event], end_time: float) -> list[Bar]:
    """Copies in flight and tiles held, per stage."""
    bars: list[Bar] = []
    issued = {}
    for e in evs:
        if e.kind == "tma_issue" and e.stage >= 0:
            m = _COPY.search(e.detail)
            issued[m.group(1) if m else (e.stage, e.time)] = e
    if t.source == "emulator":
        for e in evs:
            m = _COPY.search(e.detail) if e.kind == "tma_landed" else None
            if m and m.group(1) in issued:
                a = issued.pop(m.group(1))
                bars.append(Bar(f"stage {a.stage}", a.time, e.time, "TMA in flight", a.detail))
        held: dict[int, float] = {}
        for e in evs:
            if e.kind != "phase_complete" or e.stage < 0:
                continue
            if e.barrier.startswith("full"):
                held[e.stage] = e.time
            elif e.barrier.startswith("empty") and e.stage in held:
                bars.append(Bar(f"stage {e.stage}", held.pop(e.stage), e.time, "tile in the stage",
                                f"fill until {e.barrier} phase {e.phase} completed (the stage released)"))
        for stage, t0 in held.items():
            bars.append(Bar(f"stage {stage}", t0, end_time, "tile in the stage", "still held"))
    else:  # stamps: a copy is in flight until the first consumer warp gets past the wait for its stage
        through = sorted((e.time, e.stage) for e in evs if e.kind == "wait_done" and e.barrier.startswith("full"))
        for a in sorted(issued.values(), key=lambda e: e.time):
            done = next((tm for tm, s in through if s == a.stage and tm >= a.time), None)
            if done is not None:
                bars.append(Bar(f"stage {a.stage}", a.time, done, "TMA in flight",
                                "copies issued → the first consumer got past its wait"))
    return bars


def _title(t: Trace, block: Any) -> str:
    where = "on an H100" if t.source == "h100" else "on the emulator (modelled latencies)"
    name = t.meta.get("kernel", "kernel")
    return f"{name}, block {tuple(block)[:2]}, {where}"


def trace_figure(trace: Trace, block: Any = None, max_time: float | None = None):
    """A plotly figure of one block of the trace, in the course's widget style."""
    blocks = trace.blocks()
    b = block if block is not None else (blocks[0] if blocks else (0, 0, 0))
    bars, marks = trace_bars(trace, b, max_time)
    return timeline_figure(bars, marks, _title(trace, b), f"time ({trace.unit})")


def trace_widget(trace: Trace, max_time: float | None = None):
    """The timeline of a recorded trace with a block picker (the Lesson 04 pipeline widget's drawing)."""
    import ipywidgets as w

    blocks = trace.blocks() or [(0, 0, 0)]
    pick = w.Dropdown(options=[(f"block {b[:2]}", b) for b in blocks], value=blocks[0], description="block",
                      style={"description_width": "4em"}, layout=w.Layout(width="16em"))
    note = w.HTML(layout=w.Layout(max_width=f"{figure.COLUMN}px"))
    fig = trace_figure(trace, blocks[0], max_time)

    def redraw(_: Any = None) -> None:
        bars, marks = trace_bars(trace, pick.value, max_time)
        draw_timeline(fig, bars, marks, _title(trace, pick.value), f"time ({trace.unit})")
        waits = sum(b.end - b.start for b in bars if b.kind == "waiting on a barrier")
        note.value = f"{len(bars)} spans; time waiting on barriers, all lanes together: {waits:g} {trace.unit}"

    pick.observe(redraw, names="value")
    redraw()
    return figure.WidgetBox([figure.controls(pick), note, fig])
