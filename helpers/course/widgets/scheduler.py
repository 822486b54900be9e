"""Persistent tile scheduling, animated: which worker (SM or cluster) takes which tile of C in which order, wave by
wave, and the L2 footprint of each wave; and a timeline of cooperative vs ping-pong consumers.

Pure computation first (tests call these without a browser):

- :func:`schedule_picture` — for one raster order: each tile's visit number, worker and wave (arrays over the tile
  grid, folded to at most 64×64 cells), and every wave's footprint (``helpers.hopper.scheduler``);
- :func:`consumer_timeline` — the segments of a cooperative and a ping-pong kernel's consumer warpgroups on a
  shared tensor core (a model with stated assumptions, not a measurement).

Then :func:`scheduler_widget` and :func:`timeline_figure`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.gpu.hardware import this_gpu
from helpers.hopper import scheduler

__all__ = [
    "SchedulePicture",
    "schedule_picture",
    "Segment",
    "consumer_timeline",
    "timeline_figure",
    "scheduler_widget",
]


@dataclass(frozen=True)
class SchedulePicture:
    """One raster order on one grid: per tile (rows = tile rows of C) its visit number, worker and wave."""

    order: str
    tiles_m: int
    tiles_n: int
    workers: int
    visit: np.ndarray  # (tiles_m, tiles_n): position in the raster order
    worker: np.ndarray  # (tiles_m, tiles_n): which worker takes it
    wave: np.ndarray  # (tiles_m, tiles_n): which wave it runs in
    footprints: list[scheduler.Footprint]

    @property
    def waves(self) -> int:
        return len(self.footprints)


def schedule_picture(M: int, N: int, BM: int = 256, BN: int = 256, workers: int | None = None,
                     order: str = "grouped", group: int = 8, K: int | None = None) -> SchedulePicture:
    """The schedule of an M×N GEMM cut into BM×BN tiles (default: Lab 7's 256×256 pairs on the GPU's resident
    pairs of blocks, 66 on an H100 SXM)."""
    workers = workers or this_gpu().resident(2)
    tm, tn = scheduler.tile_counts(M, N, BM, BN)
    visits = scheduler.order(order, tm, tn, group)
    visit = np.empty((tm, tn), np.int64)
    visit[visits[:, 0], visits[:, 1]] = np.arange(len(visits))
    fps = scheduler.footprints(visits, workers, BM, BN, K or max(M, N))
    return SchedulePicture(order, tm, tn, workers, visit, visit % workers, visit // workers, fps)


@dataclass(frozen=True)
class Segment:
    """One bar of a timeline: who, what, from when to when (model time units)."""

    who: str
    what: str
    start: float
    end: float
    tile: int


def consumer_timeline(design: str, tiles: int = 4, mainloop: float = 10.0, epilogue: float = 3.0) -> list[Segment]:
    """Consumer warpgroups of one SM over ``tiles`` 128×256 tiles, on a model: the tensor core does one thing at a
    time; a tile's MMAs take ``mainloop`` units whoever issues them; its epilogue (registers → shared → TMA) takes
    ``epilogue`` units of the warpgroups that hold the accumulators and no tensor-core time.

    - "cooperative": both warpgroups share each tile (64 rows each); both run the epilogue, then the next mainloop
      starts: the tensor core idles during every epilogue.
    - "ping-pong": each warpgroup owns whole tiles, alternately; one runs its epilogue while the other's mainloop
      uses the tensor core (an ordering barrier hands the tensor core over). Each warpgroup holds a whole tile's
      accumulators, so for the same registers its tiles are half as tall (64×256): it takes 2 × ``tiles`` tiles at
      half the MMA time and half the epilogue each to compute the same C (and, not drawn here, loads 1.7× the bytes
      per FLOP: a 64×256 tile's loads feed 51 FLOP/B, a 128×256 tile's 85).
    """
    out: list[Segment] = []
    if design == "cooperative":
        t = 0.0
        for i in range(tiles):
            for wg in ("consumer 0", "consumer 1"):
                out.append(Segment(wg, "mainloop", t, t + mainloop, i))
                out.append(Segment(wg, "epilogue", t + mainloop, t + mainloop + epilogue, i))
            out.append(Segment("tensor core", "busy", t, t + mainloop, i))
            t += mainloop + epilogue
        return out
    if design != "ping-pong":
        raise ValueError(f"design {design!r}: 'cooperative' or 'ping-pong'")
    half = mainloop / 2
    free = {"consumer 0": 0.0, "consumer 1": 0.0}
    core = 0.0
    for i in range(2 * tiles):
        wg = f"consumer {i % 2}"
        start = max(free[wg], core)
        out.append(Segment(wg, "mainloop", start, start + half, i))
        out.append(Segment("tensor core", "busy", start, start + half, i))
        core = start + half
        out.append(Segment(wg, "epilogue", core, core + epilogue / 2, i))
        free[wg] = core + epilogue / 2
    return out


def timeline_figure(tiles: int = 4, mainloop: float = 10.0, epilogue: float = 3.0):
    """Both designs' timelines, one above the other (plotly Figure), with each one's total time."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from helpers.course.widgets import figure

    designs = ("cooperative", "ping-pong")
    segs = {d: consumer_timeline(d, tiles, mainloop, epilogue) for d in designs}
    ends = {d: max(s.end for s in segs[d]) for d in designs}
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"{d}: {ends[d]:g} time units" for d in designs])
    colors = {"mainloop": "#1f77b4", "epilogue": "#ff7f0e", "busy": "#2ca02c"}
    for row, d in enumerate(designs, 1):
        for what in ("mainloop", "epilogue", "busy"):
            parts = [s for s in segs[d] if s.what == what]
            if not parts:
                continue
            fig.add_trace(go.Bar(x=[s.end - s.start for s in parts], base=[s.start for s in parts],
                                 y=[s.who for s in parts], orientation="h", marker_color=colors[what],
                                 name=what, showlegend=row == 1, text=[f"t{s.tile}" for s in parts],
                                 hovertext=[f"{s.who}: {what} of tile {s.tile}, {s.start:g}–{s.end:g}" for s in parts],
                                 hoverinfo="text"), row=row, col=1)
    fig.update_layout(barmode="overlay", width=860, height=420, margin={"t": 40, "l": 90, "r": 10, "b": 40})
    fig.update_xaxes(title_text="time (model units)", row=2, col=1)
    return figure.styled(fig)


def _wave_color(i: int, waves: int) -> str:
    """Wave ``i`` of ``waves`` in Viridis, the colour the continuous bar would give it."""
    from plotly.colors import sample_colorscale

    return sample_colorscale("Viridis", [i / max(1, waves - 1)])[0]


def scheduler_widget(M: int = 4096, N: int = 4096, order: str = "grouped", group: int = 8,
                     workers: int | None = None,
                     BM: int = 256, BN: int = 256):
    """The tile grid of C colored by wave, the current wave outlined, a Play button stepping through the waves,
    and the current wave's L2 footprint (A panels and B panels it reads)."""
    import ipywidgets as w

    style = {"description_width": "70px"}
    order_w = w.Dropdown(options=list(scheduler.ORDERS), value=order, description="order", style=style)
    group_w = w.IntSlider(value=group, min=1, max=16, description="group", style=style)
    size_w = w.Dropdown(options=[(f"{s}×{s}", s) for s in (2048, 4096, 8192, 12288, 16384)], value=M,
                        description="M = N", style=style)
    part = this_gpu()
    workers = workers or part.resident(2)
    workers_w = w.IntSlider(value=workers, min=1, max=part.sms, description="workers", style=style)
    play = w.Play(value=0, min=0, max=1, interval=700, description="waves")
    wave_w = w.IntSlider(value=0, min=0, max=1, description="wave", style=style)
    w.jslink((play, "value"), (wave_w, "value"))
    info = w.HTML()
    from helpers.course.widgets import figure

    fig = figure.new_figure(height=540, width=560)
    fig.add_heatmap(z=[[0]], colorscale="Viridis", showscale=True,
                    colorbar={"title": {"text": "wave", "side": "right"}, "thickness": 12, "tickformat": "d"},
                    hovertemplate="tile (%{y}, %{x})<br>wave %{z}<extra></extra>")
    # the current wave: its tiles outlined (their fill keeps the colour of the bar), named in the legend
    fig.add_scatter(x=[], y=[], mode="markers", name="the wave shown", hoverinfo="skip", showlegend=True,
                    marker={"symbol": "square-open", "color": "#d62728", "line": {"width": 2}})
    fig.update_yaxes(autorange="reversed", title="tile row (M)", scaleanchor="x", tickformat="d")
    fig.update_xaxes(title="tile column (N)", tickformat="d")
    fig.update_layout(margin={"l": 60, "r": 10})
    figure.legend_below(fig)
    state: dict = {}

    def rebuild(*_):
        pic = schedule_picture(size_w.value, size_w.value, BM, BN, workers_w.value, order_w.value, group_w.value)
        state["pic"] = pic
        wave_w.max = play.max = max(0, pic.waves - 1)
        wave_w.value = min(wave_w.value, wave_w.max)
        waves = int(pic.wave.max()) + 1
        with fig.batch_update():
            fig.data[0].z = pic.wave
            # whole waves: a band of colour per wave up to 12 of them, integer ticks always
            if waves <= 12:
                colors = [_wave_color(i, waves) for i in range(waves)]
                fig.data[0].colorscale = figure.discrete_colorscale(colors)
                fig.data[0].zmin, fig.data[0].zmax = -0.5, waves - 0.5
                fig.data[0].colorbar.update(tickmode="array", tickvals=list(range(waves)))
            else:
                fig.data[0].colorscale = "Viridis"
                fig.data[0].zmin, fig.data[0].zmax = 0, waves - 1
                fig.data[0].colorbar.update(tickmode="auto", tickvals=None)
            side = max(pic.wave.shape)
            fig.data[1].marker.size = max(3, min(14, 400 // side))
        redraw()

    def redraw(*_):
        pic = state["pic"]
        wv = wave_w.value
        rows, cols = (pic.wave == wv).nonzero()
        with fig.batch_update():
            fig.data[1].x, fig.data[1].y = cols.tolist(), rows.tolist()
        fp = pic.footprints[wv]
        info.value = (f"<div style='max-width:300px'><b>wave {wv}</b> of {pic.waves}: tiles {wv * pic.workers}–"
                      f"{min((wv + 1) * pic.workers, pic.visit.size) - 1} of the order<br>"
                      f"reads {fp.a_panels} panels of A and {fp.b_panels} of B: <b>{fp.bytes / 2**20:.0f} MiB</b> "
                      f"(K = {size_w.value}; the L2 holds {part.l2_bytes >> 20} MB)<br>"
                      f"{scheduler.waves(pic.visit.size, pic.workers)}"
                      "</div>")

    for ctl in (order_w, group_w, size_w, workers_w):
        ctl.observe(rebuild, "value")
    wave_w.observe(redraw, "value")
    rebuild()
    controls = w.VBox([order_w, group_w, size_w, workers_w, w.HBox([play, wave_w]), info],
                      layout=w.Layout(width="320px"))
    return figure.WidgetBox([fig, controls], layout=w.Layout(flex_flow="row"))  # the figure, the controls beside
