"""Stream-K next to data-parallel: the iteration space of a shape coloured by CTA, each CTA's time line, and the
predicted time of each schedule (with the H100's measured figure where the shape was measured).

Pure computation first (tests call these without a browser), built on :mod:`helpers.hopper.streamk`:

- :func:`space_grid` — (tiles × K steps) → the CTA computing each iteration, folded to at most 64 × 64 cells;
- :func:`gantt` — a prediction's time line as bar arrays per kind (compute, wait, fix-up, epilogue);
- :func:`compare` — predictions of several schedules of one shape.

Then :func:`streamk_widget`.
"""

from __future__ import annotations

import numpy as np

from helpers.course.widgets import figure
from helpers.gpu.hardware import this_gpu
from helpers.hopper import streamk as sk

__all__ = ["space_grid", "gantt", "compare", "streamk_widget", "SHAPES", "KIND_COLORS"]

#: shapes offered by the widget: the two wave-quantized shapes measured on the H100, then squares
SHAPES = {"1024×1024×16384 (16 pairs for 66 clusters)": (1024, 1024, 16384),
          "1024×4352×8192 (68 pairs: just over 66)": (1024, 4352, 8192),
          "4096×4096×4096 (256 pairs)": (4096, 4096, 4096),
          "8192×8192×8192 (1024 pairs)": (8192, 8192, 8192),
          "2048×2048×8192 (64 pairs)": (2048, 2048, 8192)}

KIND_COLORS = {"compute": "#4c78a8", "wait": "#d62728", "fixup": "#f58518", "epilogue": "#54a24b"}


def space_grid(tiles: int, k_steps: int, ctas: int, schedule: str, max_cells: int = 64
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid, tiles, K steps): the CTA index that computes each (tile, K step), folded to at most ``max_cells`` per
    side (a cell covering several iterations shows the CTA of its first one), with the tile and K step of each row
    and column."""
    grid = np.full((tiles, k_steps), -1, np.int64)
    for c, work in enumerate(sk.partition(tiles, k_steps, ctas, schedule)):
        for t, a, b in work:
            grid[t, a:b] = c
    rstep, cstep = -(-tiles // max_cells), -(-k_steps // max_cells)
    return grid[::rstep, ::cstep], np.arange(0, tiles, rstep), np.arange(0, k_steps, cstep)


def gantt(pred: sk.Prediction) -> dict[str, dict[str, list]]:
    """kind → {"y": CTA, "base": start µs, "x": duration µs, "tile": tile} for horizontal bars."""
    out = {k: {"y": [], "base": [], "x": [], "tile": []} for k in KIND_COLORS}
    for cta, start, end, kind, tile in pred.timeline:
        d = out[kind]
        d["y"].append(cta)
        d["base"].append(start)
        d["x"].append(end - start)
        d["tile"].append(tile)
    return out


def compare(M: int, N: int, K: int, sms: int | None = None,
            schedules=("data-parallel", "hybrid")) -> dict[str, sk.Prediction]:
    """Predicted time of each schedule on ``sms`` SMs (the GPU here, or the emulated part, by default)."""
    sms = sms or this_gpu().sms
    return {s: sk.predict(M, N, K, s, sms=sms) for s in schedules}


def _title(p: sk.Prediction, measured: dict) -> str:
    what = {"data-parallel": "data-parallel (Lab 7)", "hybrid": "Stream-K hybrid (Lab 9)",
            "stream-k": "pure Stream-K"}[p.schedule]
    m = measured.get((p.schedule, (p.M, p.N, p.K)))
    seen = f"; H100: {m[0]:.0f}" if m else ""
    return f"{what}: {p.microseconds:.0f} µs, {p.tflops:.0f} TFLOP/s predicted{seen}"


def streamk_widget(shape: str = "1024×1024×16384 (16 pairs for 66 clusters)", sms: int | None = None,
                   right: str = "hybrid"):
    """Pick a shape and the SM count: the iteration space coloured by cluster (top) and each cluster's time line
    (bottom) for data-parallel and Stream-K, with predicted times (and the H100's where measured)."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.hopper import parts

    sms = sms or this_gpu().sms
    counts = sorted({sms} | {p.sms for p in parts.PROFILES.values()}, reverse=True)
    measured = sk.measured()
    shape_pick = w.Dropdown(options=list(SHAPES), value=shape, description="shape", layout=w.Layout(width="30em"),
                            style={"description_width": "3.5em"})
    sm_pick = w.Dropdown(options=counts, value=sms, description="SMs",
                         layout=w.Layout(width="10em"), style={"description_width": "3em"})
    sched = w.ToggleButtons(options=[("hybrid (Lab 9)", "hybrid"), ("pure Stream-K", "stream-k")], value=right,
                            style={"button_width": "9em"})
    info = w.HTML()
    fig = figure.new_figure(height=600, rows=2, cols=2, row_heights=[0.42, 0.58], vertical_spacing=0.16,
                            horizontal_spacing=0.08, subplot_titles=(" ", " ", " ", " "))
    for col in (1, 2):
        # one colour per cluster (Turbo: neighbours differ), explained by the colour bar beside the right panel
        fig.add_trace(go.Heatmap(z=[[0]], colorscale="Turbo", showscale=col == 2, zmin=0,
                                 colorbar=figure.colorbar_beside(fig, 1, 2, "cluster"),
                                 hovertemplate="tile %{y}, K step %{x}: cluster %{z}<extra></extra>"), row=1, col=col)
        for kind, color in KIND_COLORS.items():
            fig.add_trace(go.Bar(x=[], base=[], y=[], orientation="h", marker_color=color, name=kind,
                                 showlegend=col == 2, customdata=[],
                                 hovertemplate=kind + " · tile %{customdata}<extra></extra>"), row=2, col=col)
    fig.update_layout(barmode="overlay", bargap=0.05, margin={"l": 50, "r": 70})
    figure.legend_below(fig)
    for col in (1, 2):
        # tiles, K steps and clusters are whole: never a tick at 0.5 ("d"), plotly's spacing otherwise
        fig.update_yaxes(title_text="tile" if col == 1 else None, autorange="reversed", tickformat="d", row=1, col=col,
                         ticklabelstandoff=6)  # the last tile's label clear of the K axis's 0
        fig.update_xaxes(title_text="K step", tickformat="d", row=1, col=col)
        fig.update_yaxes(title_text="cluster" if col == 1 else None, tickformat="d", row=2, col=col)
        fig.update_xaxes(title_text="µs (predicted)", row=2, col=col)

    def redraw(*_):
        M, N, K = SHAPES[shape_pick.value]
        preds = compare(M, N, K, sm_pick.value, ("data-parallel", sched.value))
        t_max = max(p.microseconds for p in preds.values())
        with fig.batch_update():
            for col, p in enumerate(preds.values()):
                base = col * (1 + len(KIND_COLORS))
                grid, rows, cols = space_grid(p.tiles, p.k_steps, p.ctas, p.schedule)
                heat = fig.data[base]
                heat.z, heat.y, heat.x, heat.zmax = grid, rows, cols, p.ctas - 1
                bars = gantt(p)
                for i, kind in enumerate(KIND_COLORS):
                    tr = fig.data[base + 1 + i]
                    tr.y, tr.base, tr.x, tr.customdata = (bars[kind]["y"], bars[kind]["base"], bars[kind]["x"],
                                                          bars[kind]["tile"])
                fig.layout.annotations[col].text = _title(p, measured)
                fig.layout.annotations[col].font = {"size": 11}
                fig.update_xaxes(range=[0, t_max * 1.02], row=2, col=col + 1)
                fig.update_yaxes(range=[p.ctas - 0.5, -0.5], autorange=False, row=2, col=col + 1)
        dp, other = preds["data-parallel"], preds[sched.value]
        n_waves = sk.waves(dp.tiles, dp.ctas)
        last = dp.tiles - (n_waves - 1) * dp.ctas
        gain = dp.microseconds / other.microseconds
        info.value = (f"{dp.tiles} pairs of 256×256 tiles × {dp.k_steps} K steps on {dp.ctas} clusters: "
                      f"{n_waves} wave(s), the last one {last}/{dp.ctas} full. Predicted speed-up of {sched.value}: "
                      f"<b>{gain:.2f}×</b> (clusters busy computing: {dp.busy:.0%} → {other.busy:.0%}).")

    for control in (shape_pick, sm_pick, sched):
        control.observe(redraw, "value")
    redraw()
    return figure.WidgetBox([figure.controls(shape_pick, sm_pick), sched, info, fig])
