"""A pipeline timeline: the producer, the TMA, the stages, the consumers and the tensor cores over time.

Pure computation first (tests call these without a browser), all of it from :mod:`helpers.hopper.pipeline`:

- :data:`SCENARIOS` and :func:`run_scenario` — the mainloops the lesson compares (Lab 3's single warpgroup, a
  ring with consumers that wait for every wgmma group or keep one in flight, cooperative and ping-pong consumers)
  and the classic bugs (a parity not flipped on wrap, a wrong EMPTY count, a producer that never waits on EMPTY,
  a stage released before its wgmma retired), run on the emulator; a run that deadlocks or breaks a rule keeps
  its trace up to that point and the error in words;
- :func:`timeline_bars` — the bars and markers the timeline draws (lane, start, end, kind, label);
- :func:`measured_bars` — the same picture from a clock64 capture on an H100 (``tests/data/lab3_timeline_h100.json``);
- :func:`timeline_figure` — a plotly figure of either.

Then :func:`pipeline_widget`: sliders for stages, TMA latency, wgmma time, consumers and K tiles, and a scenario
picker.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers.course.widgets import figure
from helpers.hopper import pipeline as pl

__all__ = [
    "Bar",
    "Mark",
    "Outcome",
    "SCENARIOS",
    "BUGS",
    "run_scenario",
    "timeline_bars",
    "measured_bars",
    "load_measured",
    "timeline_figure",
    "draw_timeline",
    "pipeline_widget",
    "MEASURED_TIMELINE",
]

MEASURED_TIMELINE = Path(__file__).resolve().parents[3] / "tests" / "data" / "lab3_timeline_h100.json"

#: colours of the bar kinds (legend order)
KINDS = {
    "TMA in flight": "#9ecae1",
    "tile in the stage": "#dadaeb",
    "waiting on a barrier": "#fdd49e",
    "waiting for a wgmma group": "#fdae6b",
    "epilogue": "#74c476",
    "deadlocked": "#d62728",
    "wgmma": "#3b6ea5",  # drawn last and thinner, over the waits of the consumer that issued it
}
STAGE_BYTES = 49152  # the lab's 128×256 stage: a 128×64 A tile and a 256×64 B tile of bf16
LAB3_STAGE_BYTES = 16384  # Lab 3's stage: a 64×64 A tile and a 64×64 B tile of bf16


@dataclass(frozen=True)
class Bar:
    """A span of time on one lane of the timeline."""

    lane: str
    start: float
    end: float
    kind: str  # a key of KINDS
    label: str


@dataclass(frozen=True)
class Mark:
    """A moment on one lane: a barrier phase completing, or the hazard that stopped the run."""

    lane: str
    time: float
    text: str
    error: bool = False


@dataclass
class Outcome:
    """A scenario run: the pipeline (its trace ends where the run stopped) and the error, if any."""

    name: str
    pipeline: pl.Pipeline
    error: str | None = None
    error_kind: str | None = None
    lanes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


# ------------------------------------------------------------------------------------------- role programs
def _producer(k_tiles: int, flip: bool = True, waits: bool = True) -> Callable[[pl.Role], Generator]:
    def program(ctx: pl.Role) -> Generator:
        for k in range(k_tiles):
            s, phase = pl.stage_and_phase(k, ctx.stages)
            if waits:
                yield ctx.wait(ctx.empty[s], phase ^ 1 if flip else 1)
            yield ctx.arrive_expect_tx(ctx.full[s], STAGE_BYTES)
            yield ctx.tma_load(s, ctx.full[s], STAGE_BYTES // 3, "A")
            yield ctx.tma_load(s, ctx.full[s], 2 * STAGE_BYTES // 3, "B")

    return program


def _mainloop(ctx: pl.Role, uses: range, mmas: int, in_flight: int, early: bool = False,
              handoff: Any = None) -> Generator:
    """A consumer's loop over ring uses: wait FULL, issue the wgmmas as one group, keep ``in_flight`` groups
    running and release the stages whose groups retired; then (after arriving on ``handoff``, if given) drain.
    ``early`` is the bug: release each stage right after issuing its wgmmas."""
    held = []
    for k in uses:
        s, phase = pl.stage_and_phase(k, ctx.stages)
        yield ctx.wait(ctx.full[s], phase)
        for _ in range(mmas):
            yield ctx.wgmma_async(s)
        yield ctx.commit_group()
        if early:
            yield ctx.arrive(ctx.empty[s])
            continue
        held.append(s)
        yield ctx.wait_group(in_flight)
        while len(held) > in_flight:
            yield ctx.arrive(ctx.empty[held.pop(0)])
    if handoff is not None:
        yield ctx.arrive(handoff)
    yield ctx.wait_group(0)
    for s in held:
        yield ctx.arrive(ctx.empty[s])


def _consumer(k_tiles: int, in_flight: int, mmas: int, early: bool = False) -> Callable[[pl.Role], Generator]:
    def program(ctx: pl.Role) -> Generator:
        yield from _mainloop(ctx, range(k_tiles), mmas, in_flight, early)

    return program


def _lab3_warpgroup(k_tiles: int, mmas: int) -> Callable[[pl.Role], Generator]:
    """Lab 3's kernel: one warpgroup. Its thread 0 loads one K step ahead (step 0 before the loop, step k + 1 at the
    top of step k, once everybody released that stage); then everybody waits for step k's tiles, runs the step's
    wgmmas, waits for them (wait_group 0) and releases the stage."""
    def produce(ctx: pl.Role, j: int) -> Generator:
        s, phase = pl.stage_and_phase(j, ctx.stages)
        yield ctx.wait(ctx.empty[s], phase ^ 1)
        yield ctx.arrive_expect_tx(ctx.full[s], LAB3_STAGE_BYTES)
        yield ctx.tma_load(s, ctx.full[s], LAB3_STAGE_BYTES // 2, "A")
        yield ctx.tma_load(s, ctx.full[s], LAB3_STAGE_BYTES // 2, "B")

    def program(ctx: pl.Role) -> Generator:
        if k_tiles:
            yield from produce(ctx, 0)
        for k in range(k_tiles):
            s, phase = pl.stage_and_phase(k, ctx.stages)
            if k + 1 < k_tiles:
                yield from produce(ctx, k + 1)
            yield ctx.wait(ctx.full[s], phase)
            for _ in range(mmas):
                yield ctx.wgmma_async(s)
            yield ctx.commit_group()
            yield ctx.wait_group(0)
            yield ctx.arrive(ctx.empty[s])

    return program


def _tiles(k_tiles: int) -> tuple[int, int]:
    """(tiles, K tiles per tile) for the multi-tile scenarios: about k_tiles loads in all, at least 2 tiles."""
    per = max(2, k_tiles // 4)
    return max(2, k_tiles // per), per


def _cooperative(p: pl.Pipeline, k_tiles: int, consumers: int, mmas: int, epilogue: float) -> None:
    tiles, per = _tiles(k_tiles)
    p.add_role("producer", _producer(tiles * per))

    def consumer(ctx: pl.Role) -> Generator:
        for tile in range(tiles):  # every consumer reads every stage of every tile, then all store together
            yield from _mainloop(ctx, range(tile * per, (tile + 1) * per), mmas, 1)
            yield ctx.work(epilogue / consumers, "epilogue")

    for c in range(consumers):
        p.add_role(f"consumer {c}", consumer, consumer=True)


def _ping_pong(p: pl.Pipeline, k_tiles: int, consumers: int, mmas: int, epilogue: float) -> None:
    tiles, per = _tiles(k_tiles)  # p reads each fill once: readers=1, EMPTY count 1 (see _build)
    p.add_role("producer", _producer(tiles * per))
    turn = [p.barrier(f"turn[{c}]") for c in range(consumers)]

    def consumer(me: int) -> Callable[[pl.Role], Generator]:
        def program(ctx: pl.Role) -> Generator:
            for n, tile in enumerate(range(me, tiles, consumers)):
                if tile > 0:  # wait until the previous tile's consumer has issued its whole mainloop
                    yield ctx.wait(turn[me], n & 1 if me else (n - 1) & 1)
                handoff = turn[(me + 1) % consumers] if tile + 1 < tiles else None
                yield from _mainloop(ctx, range(tile * per, (tile + 1) * per), consumers * mmas, 1, handoff=handoff)
                yield ctx.work(epilogue, "epilogue")
        return program

    for c in range(consumers):
        p.add_role(f"consumer {c}", consumer(c), consumer=True)


# ------------------------------------------------------------------------------------------- scenarios
def _build(name: str, stages: int, tma_latency: float, wgmma_time: float, consumers: int, k_tiles: int,
           drain: float, epilogue: float) -> pl.Pipeline:
    mmas = 4
    ping_pong = name.startswith("ping-pong")
    empty_count = 1 if name.startswith("bug: EMPTY count 1") or ping_pong else None  # one reader per fill
    p = pl.Pipeline(stages, tma_latency, wgmma_time, empty_count=empty_count, wgmma_drain=drain,
                    readers=1 if ping_pong else None)
    if name.startswith("Lab 3"):
        p.add_role("warpgroup (thread 0 produces)", _lab3_warpgroup(k_tiles, mmas), consumer=True)
        return p
    if name == "cooperative consumers (epilogue per tile)":
        _cooperative(p, k_tiles, max(consumers, 2), mmas, epilogue)
        return p
    if name == "ping-pong consumers (epilogue per tile)":
        _ping_pong(p, k_tiles, max(consumers, 2), mmas, epilogue)
        return p
    p.add_role("producer", _producer(k_tiles, flip=name != "bug: parity not flipped on wrap",
                                     waits=name != "bug: producer never waits on EMPTY"))
    in_flight = 0 if name.startswith("wait for every") else 1
    for c in range(consumers):
        p.add_role(f"consumer {c}", _consumer(k_tiles, in_flight, mmas, early=name.startswith("bug: release")),
                   consumer=True)
    return p


#: the mainloops the lesson compares, with what each shows
SCENARIOS: dict[str, str] = {
    "Lab 3: one warpgroup, thread 0 produces": "thread 0 loads one step ahead, then computes with everyone: two "
    "stages, so at most two loads in flight, and the tensor cores wait for most of every load",
    "wait for every group (wait_group 0)": "a producer runs ahead through the ring; each consumer waits for its "
    "wgmmas before releasing the stage",
    "overlapped (wait_group 1)": "each consumer keeps one wgmma group in flight and releases the previous stage",
    "cooperative consumers (epilogue per tile)": "both consumers share every tile; the tensor cores idle while "
    "they store it",
    "ping-pong consumers (epilogue per tile)": "the consumers take turns on whole tiles: one stores while the "
    "other computes",
    "bug: parity not flipped on wrap": "the producer always waits on EMPTY with parity 1",
    "bug: EMPTY count 1 with 2 consumers": "the first consumer's release lets the producer refill the stage (with "
    "one consumer the count is right)",
    "bug: producer never waits on EMPTY": "the producer refills stages without asking",
    "bug: release before the wgmma retired": "consumers arrive on EMPTY right after issuing their wgmmas",
}
BUGS = [name for name in SCENARIOS if name.startswith("bug:")]


def run_scenario(name: str, stages: int = 4, tma_latency: float = 600, wgmma_time: float = 40,
                 consumers: int = 2, k_tiles: int = 16, drain: float = 60, epilogue: float = 600) -> Outcome:
    """Build and run one of :data:`SCENARIOS`; a deadlock or a hazard is kept as the outcome's error."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}: one of {list(SCENARIOS)}")
    p = _build(name, stages, tma_latency, wgmma_time, consumers, k_tiles, drain, epilogue)
    out = Outcome(name, p, lanes=[r.name for r in p.roles])
    try:
        p.run(max_time=1e9)
    except pl.MBarrierError as exc:  # Deadlock, the pipeline's hazards and barrier misuse all derive from it
        out.error, out.error_kind = str(exc), type(exc).__name__
    return out


# ------------------------------------------------------------------------------------------- what is drawn
def timeline_bars(p: pl.Pipeline, error: str | None = None) -> tuple[list[Bar], list[Mark]]:
    """Bars: each role's waits (on a barrier, on a wgmma group), its wgmmas and other work, each stage's copies
    in flight and the time it holds a tile, the tensor cores' busy spans. Marks: every barrier phase that
    completed (on its stage's lane) and, after an error, where the run stopped."""
    bars: list[Bar] = []
    marks: list[Mark] = []
    end = p.time
    open_wait: dict[str, Any] = {}
    open_group: dict[str, Any] = {}
    copies: dict[tuple[int, int], list[float]] = {}
    for e in p.trace:
        if e.kind == "wait":
            open_wait[e.role] = e
        elif e.kind == "wait_done" and e.role in open_wait:
            w = open_wait.pop(e.role)
            bars.append(Bar(e.role, w.time, e.time, "waiting on a barrier", f"waits on {w.barrier} ({w.detail})"))
        elif e.kind == "wait_group":
            open_group[e.role] = e
        elif e.kind == "wait_group_done" and e.role in open_group:
            w = open_group.pop(e.role)
            bars.append(Bar(e.role, w.time, e.time, "waiting for a wgmma group", w.detail))
        elif e.kind == "read":
            label = f"wgmma on stage {e.stage} (fill {e.phase})"
            bars.append(Bar(e.role, e.time, e.end, "wgmma", label))
            bars.append(Bar("tensor cores", e.time, e.end, "wgmma", f"{e.role}: {label}"))
        elif e.kind == "work":
            bars.append(Bar(e.role, e.time, e.end, "epilogue", e.detail or "work"))
        elif e.kind == "tma_issue":
            copies.setdefault((e.stage, e.phase), []).append(e.time)
            bars.append(Bar(f"stage {e.stage}", e.time, e.end, "TMA in flight", f"{e.detail} (fill {e.phase})"))
        elif e.kind == "phase_complete" and e.stage is not None:  # the ring's barriers, on their stage's lane
            marks.append(Mark(f"stage {e.stage}", e.time, f"{e.barrier} phase {e.phase} done"))
    for role, w in open_wait.items():
        kind = "deadlocked" if error and "deadlock" in error else "waiting on a barrier"
        bars.append(Bar(role, w.time, max(end, w.time + 1), kind, f"waits on {w.barrier} ({w.detail}): never "
                        "returns" if kind == "deadlocked" else f"waits on {w.barrier}"))
    for role, w in open_group.items():
        bars.append(Bar(role, w.time, max(end, w.time + 1), "waiting for a wgmma group", w.detail))
    # how long each stage holds a fill: from its last copy landing until the last consumer released it
    landed = {}
    for e in p.events("tma_landed"):
        landed[(e.stage, e.phase)] = e.time
    released: dict[tuple[int, int], float] = {}
    for e in p.events("release"):
        released[(e.stage, e.phase)] = max(released.get((e.stage, e.phase), 0.0), e.time)
    for (stage, fill), t0 in landed.items():
        t1 = released.get((stage, fill), end)
        if t1 > t0:
            bars.append(Bar(f"stage {stage}", t0, t1, "tile in the stage", f"fill {fill} held until released"))
    if error:
        lane = next((r.name for r in p.roles if r.name in error), p.roles[0].name if p.roles else "")
        marks.append(Mark(lane, end, error.splitlines()[0][:160], error=True))
    return bars, marks


def load_measured(path: Path | str = MEASURED_TIMELINE) -> dict[str, Any] | None:
    """The H100 timeline capture (see tools/h100/wgmma_timeline.py), or None when it was not captured yet."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def measured_bars(data: dict[str, Any], max_blocks: int = 4, max_steps: int = 12) -> tuple[list[Bar], list[Mark]]:
    """Bars from a clock64 capture of the Lab 3 kernel: for each block on one SM, per K step, thread 0's wait for
    a free stage, the load in flight (until the tiles were there) and the wgmmas (until wait_group 0 returned).
    Times in SM cycles from the first stamp."""
    bars: list[Bar] = []
    for b in data["blocks"][:max_blocks]:
        lane = f"block {b['block']}"
        for k, (issue, full, done) in enumerate(b["steps"][:max_steps]):
            bars.append(Bar(lane, issue, full, "TMA in flight", f"K step {k}: copies issued → tiles landed"))
            bars.append(Bar(lane, full, done, "wgmma", f"K step {k}: 4 × wgmma m64n64k16 until wait_group 0"))
            bars.append(Bar("tensor cores", full, done, "wgmma", f"{lane}, K step {k}"))
    return bars, []


def _traces(bars: list[Bar], marks: list[Mark]) -> list[Any]:
    """The plotly traces of a timeline: one horizontal bar trace per kind, then the marks."""
    import plotly.graph_objects as go

    traces = []
    for kind, color in KINDS.items():
        sel = [b for b in bars if b.kind == kind]
        if not sel:
            continue
        traces.append(go.Bar(orientation="h", y=[b.lane for b in sel], x=[b.end - b.start for b in sel],
                             base=[b.start for b in sel], name=kind, marker_color=color, marker_line_width=0,
                             width=[0.4 if kind == "wgmma" and b.lane != "tensor cores" else 0.8 for b in sel],
                             hovertext=[f"{b.label}<br>{b.start:g} → {b.end:g}" for b in sel],
                             hovertemplate="%{hovertext}<extra></extra>"))
    if marks:
        traces.append(go.Scatter(y=[m.lane for m in marks], x=[m.time for m in marks], mode="markers",
                                 name="barrier phase done / error",
                                 marker={"symbol": ["x" if m.error else "line-ns-open" for m in marks],
                                         "size": [14 if m.error else 9 for m in marks],
                                         "color": ["#d62728" if m.error else "#555" for m in marks]},
                                 hovertext=[m.text for m in marks], hovertemplate="%{hovertext}<extra></extra>"))
    return traces


def _lanes(bars: list[Bar], marks: list[Mark]) -> list[str]:
    """The lanes top to bottom: roles, then the tensor cores, then the stages."""
    lanes: list[str] = []
    for lane in [b.lane for b in bars] + [m.lane for m in marks]:
        if lane not in lanes:
            lanes.append(lane)
    return sorted(lanes, key=lambda s: (s.startswith("stage"), s == "tensor cores", s))


def _draw(fig: Any, bars: list[Bar], marks: list[Mark], title: str, x_title: str) -> None:
    """Put a timeline on a figure made by helpers.course.widgets.figure (its style kept; data and sizes replaced)."""
    lanes = _lanes(bars, marks)
    with fig.batch_update():
        fig.data = ()
        for trace in _traces(bars, marks):
            fig.add_trace(trace)
        height = max(260, figure.TOP + 110 + 24 * len(lanes))
        plot = height - figure.TOP - 110  # the plotting area, in pixels: the legend goes 48 px below it
        fig.update_layout(barmode="overlay", height=height, title_text=title, showlegend=True,
                          legend={"orientation": "h", "y": -48 / plot, "yanchor": "top", "x": 0},
                          margin={"l": 96, "b": 110})
        fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(lanes)))
        fig.update_xaxes(title_text=x_title)


def draw_timeline(fig: Any, bars: list[Bar], marks: list[Mark] = (), title: str = "",
                  x_title: str = "time (cycles)") -> None:
    """Redraw a figure made by :func:`timeline_figure` with other bars and marks (for widgets built on it, e.g.
    helpers.course.widgets.trace)."""
    _draw(fig, bars, list(marks), title, x_title)


def timeline_figure(bars: list[Bar], marks: list[Mark] = (), title: str = "", x_title: str = "time (cycles)"):
    """A figure of bars and marks, in the course's widget style: one row per lane, one colour per kind."""
    fig = figure.new_figure(height=240)
    _draw(fig, bars, list(marks), title, x_title)
    return fig


def _summary(out: Outcome) -> str:
    p = out.pipeline
    if out.error:
        return (f"<b style='color:#d62728'>{out.error_kind}</b> at t={p.time:g}: "
                + out.error.replace("\n", "<br>") + "")
    return (f"done at t={p.elapsed:g}; tensor cores busy {p.tensor_utilization:.0%} of the time "
            f"({SCENARIOS[out.name]})")


def pipeline_widget(scenario: str = "overlapped (wait_group 1)", stages: int = 4, tma_latency: float = 600,
                    wgmma_time: float = 40, consumers: int = 2, k_tiles: int = 16):
    """The timeline of a scenario with sliders for its parameters; bugs show the deadlock or the hazard."""
    import ipywidgets as w

    style = {"description_width": "7em"}
    pick = w.Dropdown(options=list(SCENARIOS), value=scenario, description="scenario", style=style,
                      layout=w.Layout(width="30em"))
    s_stages = w.IntSlider(value=stages, min=1, max=8, description="stages", style=style)
    s_tma = w.IntSlider(value=int(tma_latency), min=50, max=2000, step=50, description="TMA latency", style=style)
    s_mma = w.IntSlider(value=int(wgmma_time), min=10, max=200, step=5, description="wgmma time", style=style)
    s_cons = w.IntSlider(value=consumers, min=1, max=3, description="consumers", style=style)
    s_k = w.IntSlider(value=k_tiles, min=4, max=32, description="K tiles", style=style)
    status = w.HTML(layout=w.Layout(max_width=f"{figure.COLUMN}px"))
    fig = figure.new_figure(height=240)

    def redraw(_=None):
        out = run_scenario(pick.value, s_stages.value, s_tma.value, s_mma.value, s_cons.value, s_k.value)
        bars, marks = timeline_bars(out.pipeline, out.error)
        _draw(fig, bars, marks, "", "time (cycles)")
        status.value = _summary(out)

    for control in (pick, s_stages, s_tma, s_mma, s_cons, s_k):
        control.observe(redraw, names="value")
    redraw()
    return figure.WidgetBox([figure.controls(pick), figure.controls(s_stages, s_tma, s_mma, s_cons, s_k), status,
                             fig])
