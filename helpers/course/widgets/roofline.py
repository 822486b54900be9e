"""Kernel design on the roofline: drag the tile shape and the problem size, watch the bound move; and the measured
speed ladder of the course's kernels.

Pure computation first (tests call these without a browser):

- :func:`design` — for a GEMM M×N×K cut into BM×BN tiles on the GPU's SMs (132 on an H100 SXM): FLOPs, the whole
  GEMM's intensity (each operand read once), a tile's intensity (what each K step loads into shared memory for the
  FLOPs it feeds), the tiles, waves and wave efficiency, and the roofline's verdict;
- :func:`bench_results` / :func:`ladder` — the measured figures in ``bench/results/*.json`` (GPU, date, source
  file), the only place the lessons take speeds from;
- :func:`roofline_points`, :func:`ladder_figure`.

Then :func:`roofline_widget`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helpers.course.ladder import stored_key
from helpers.gpu.hardware import this_gpu
from helpers.gpu.roofline import attainable_tflops, ridge_point
from helpers.hopper.scheduler import waves

__all__ = [
    "H100_PEAK_FP32_TFLOPS",
    "Design",
    "design",
    "fp32_ridge",
    "RESULTS",
    "bench_results",
    "Measured",
    "measured",
    "LADDER",
    "ladder",
    "ladder_figure",
    "roofline_figure_widget",
    "roofline_widget",
]

#: datasheet FP32 (CUDA cores, non-tensor) peak of an H100 SXM, TFLOP/s
H100_PEAK_FP32_TFLOPS = 67.0
RESULTS = Path(__file__).resolve().parents[3] / "bench" / "results"


def fp32_ridge() -> float:
    """FLOP per byte where FP32 CUDA-core work stops being memory-bound (about 20 on an H100 SXM; the FP32 peak
    scales with the part's SMs and clock like the tensor cores' does)."""
    part = this_gpu()
    fp32 = H100_PEAK_FP32_TFLOPS * part.peak_bf16_tflops / 989.0
    return ridge_point(fp32, part.hbm_tbs)


@dataclass(frozen=True)
class Design:
    """One design point: a GEMM, a tile shape, the SMs (or clusters) that run the tiles."""

    M: int
    N: int
    K: int
    BM: int
    BN: int
    workers: int
    share_b: int  # CTAs sharing each B slice by multicast (1: none)
    in_bytes: int = 2
    out_bytes: int = 2

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    @property
    def gemm_bytes(self) -> float:
        """Ideal traffic: A and B read once, C written once."""
        return float((self.M + self.N) * self.K * self.in_bytes + self.M * self.N * self.out_bytes)

    @property
    def gemm_intensity(self) -> float:
        return self.flops / self.gemm_bytes

    @property
    def tile_intensity(self) -> float:
        """FLOP per byte a block loads: 2·BM·BN·BK FLOPs per (BM + BN/share)·BK·2 bytes, i.e. BM·BN/(BM + BN/share)
        for bf16 (each block loads its A rows and its share of the B rows)."""
        return self.BM * self.BN / (self.BM + self.BN / self.share_b) * 2 / self.in_bytes

    @property
    def tiles(self) -> int:
        return -(-self.M // self.BM) * -(-self.N // self.BN)

    @property
    def wave_efficiency(self) -> float:
        return waves(self.tiles, self.workers).efficiency

    @property
    def padded_efficiency(self) -> float:
        """Useful fraction of the work of the edge tiles (a partial tile costs a whole one)."""
        tm, tn = -(-self.M // self.BM), -(-self.N // self.BN)
        return self.M * self.N / (tm * self.BM * tn * self.BN)

    @property
    def gemm_bound(self) -> str:
        return "compute" if self.gemm_intensity >= ridge_point() else "memory"

    @property
    def attainable_tflops(self) -> float:
        """The roofline's bound for the whole GEMM, times the wave and edge-tile efficiencies."""
        return attainable_tflops(self.gemm_intensity) * self.wave_efficiency * self.padded_efficiency

    @property
    def smem_feed_tbs(self) -> float:
        """Bytes per second all blocks together must load (from L2) to run the tensor cores at their peak."""
        return this_gpu().peak_bf16_tflops / self.tile_intensity

    def summary(self) -> str:
        w = waves(self.tiles, self.workers)
        return (f"{self.M}×{self.N}×{self.K}, {self.BM}×{self.BN} tiles: {self.tiles} tiles on {self.workers} "
                f"workers = {w.count} wave(s), {w.efficiency:.0%} busy; GEMM {self.gemm_intensity:.0f} FLOP/B "
                f"({self.gemm_bound}-bound, ridge {ridge_point():.0f}); a tile {self.tile_intensity:.0f} FLOP/B, so "
                f"the blocks must load {self.smem_feed_tbs:.1f} TB/s at the tensor cores' peak")


def design(M: int, N: int, K: int, BM: int = 128, BN: int = 256, *, workers: int | None = None,
           share_b: int = 1, out_bytes: int = 2) -> Design:
    """The numbers of one design point (see :class:`Design`); ``workers``: the GPU's SMs by default."""
    workers = workers or this_gpu().sms
    for name, v in (("M", M), ("N", N), ("K", K), ("BM", BM), ("BN", BN), ("workers", workers), ("share_b", share_b)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return Design(int(M), int(N), int(K), int(BM), int(BN), int(workers), int(share_b), out_bytes=out_bytes)


# ------------------------------------------------------------------------------------------- measured figures
def bench_results(directory: Path | None = None) -> dict[str, dict]:
    """Every ``bench/results/*.json`` written by ``bench/ladder.py`` (those with a ``rungs`` table), by file stem."""
    out = {}
    for path in sorted((directory or RESULTS).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("rungs"), dict):
            out[path.stem] = data
    return out


@dataclass(frozen=True)
class Measured:
    """One measured speed: kernel and cuBLAS TFLOP/s in the same run, and where the figure comes from."""

    key: str
    title: str
    shape: tuple[int, int, int]
    tflops: float
    cublas_tflops: float
    sm_clock_mhz: float | None
    gpu: str
    date: str
    source: str

    @property
    def ratio(self) -> float:
        return self.tflops / self.cublas_tflops

    def __str__(self) -> str:
        m, n, k = self.shape
        return (f"{self.tflops:.0f} TFLOP/s at {m}×{n}×{k} beside cuBLAS {self.cublas_tflops:.0f} in the same run "
                f"({self.ratio:.3f}×; {self.gpu}, {self.date}; {self.source})")


#: where each rung of the ladder is read: (key in the results, preferred files, newest first); "ladder" is the
#: file a full `make bench` run writes, the dated ones are the runs committed so far
LADDER = [
    ("lab3", "Lab 3 · 64×64 tile, wgmma, no overlap", ("ladder", "2026-11-22-ladder-run1")),
    ("lab4a", "Lab 4 · 128×128, 4-stage ring", ("ladder", "2026-11-22-ladder-run1")),
    ("lab4b", "Lab 4 · 128×256, warp-specialized", ("ladder", "2026-11-22-ladder-run1")),
    ("lab5", "Lab 5 · TMA-store epilogue, bf16 C", ("ladder", "2026-11-22-ladder-run1")),
    ("lab6", "Lab 6 · persistent blocks, grouped raster order", ("ladder",)),
    ("lab7", "Lab 7 · 2-block clusters, B multicast", ("ladder", "2026-11-22-tune-run2:lab6-g8")),
    ("lab8", "Lab 8 · ping-pong consumers, a sequence barrier", ("ladder",)),
    ("lab9", "Lab 9 · Stream-K over the last waves", ("ladder",)),
]


def measured(key: str, shape: tuple[int, int, int], files: tuple[str, ...] | None = None,
             results: dict[str, dict] | None = None) -> Measured | None:
    """The figure for rung ``key`` at ``shape`` from the first of ``files`` (``stem`` or ``stem:key``) that has it;
    None when none does (the lessons then say "not measured yet")."""
    results = bench_results() if results is None else results
    for spec in files or ("ladder",):
        stem, _, alias = spec.partition(":")
        data = results.get(stem)
        stored = alias or stored_key(key, data or {})  # an alias is the key as that file stores it
        rung = (data or {}).get("rungs", {}).get(stored) if stored else None
        if not rung:
            continue
        for s in rung.get("speed", []):
            if tuple(s["shape"]) == tuple(shape) and s.get("cublas_tflops"):
                return Measured(key, rung.get("title", key), tuple(shape), float(s["tflops"]),
                                float(s["cublas_tflops"]), s.get("sm_clock_mhz"), data.get("gpu", "?"),
                                data.get("date", "?"), f"bench/results/{stem}.json")
    return None


def ladder(size: int = 4096, results: dict[str, dict] | None = None) -> list[tuple[str, str, Measured | None]]:
    """The course's ladder at size³: (key, title, measured figure or None) per rung."""
    results = bench_results() if results is None else results
    return [(key, title, measured(key, (size, size, size), files, results)) for key, title, files in LADDER]


def ladder_figure(sizes: tuple[int, ...] = (4096, 8192), results: dict[str, dict] | None = None) -> Any:
    """A plotly bar chart of the ladder: each rung's TFLOP/s beside cuBLAS's in the same run, one panel per size;
    a rung not measured yet is drawn as an empty slot with that note."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(sizes), subplot_titles=[f"{s}³ (bf16 in, fp32 accumulate)" for s in sizes],
                        shared_yaxes=True)
    for col, size in enumerate(sizes, 1):
        rows = ladder(size, results)
        names = ["Lab " + key[3:] for key, _, _ in rows]
        got = [m.tflops if m else 0 for _, _, m in rows]
        ref = [m.cublas_tflops if m else 0 for _, _, m in rows]
        text = [f"{m.ratio:.2f}×" if m else "not measured yet" for _, _, m in rows]
        hover = [f"{title}<br>{m if m else 'not measured yet'}" for _, title, m in rows]
        fig.add_trace(go.Bar(x=names, y=got, name="the lab's kernel (× cuBLAS above the bar)", marker_color="#1f77b4",
                             text=text, textposition="outside", textfont={"size": 11}, hovertext=hover,
                             hoverinfo="text", showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Bar(x=names, y=ref, name="cuBLAS, same run", marker_color="#bbbbbb", hovertext=hover,
                             hoverinfo="text", showlegend=col == 1), row=1, col=col)
    fig.update_yaxes(title_text="TFLOP/s", row=1, col=1)
    fig.update_yaxes(range=[0, 1000])
    fig.update_layout(barmode="group", width=880, height=420, margin={"t": 40, "l": 60, "r": 10, "b": 60},
                      legend={"orientation": "h", "y": -0.12, "x": 0.5, "xanchor": "center"})
    from helpers.course.widgets import figure

    return figure.styled(fig)


# ------------------------------------------------------------------------------------------- the widget
def roofline_points(d: Design) -> dict[str, tuple[float, float]]:
    """(intensity, TFLOP/s) of what the widget marks: the GEMM at its attainable speed, and the tile's intensity
    at the compute roof."""
    return {"GEMM": (d.gemm_intensity, d.attainable_tflops),
            "one tile's loads": (d.tile_intensity, attainable_tflops(d.tile_intensity))}


def roofline_figure_widget(d: Design) -> Any:
    """A log-log FigureWidget: the bf16 and FP32 roofs, the ridge points, and the design's two points."""
    import plotly.graph_objects as go

    x = np.geomspace(1, 20000, 200)
    part = this_gpu()
    fp32 = H100_PEAK_FP32_TFLOPS * part.peak_bf16_tflops / 989.0
    fig = go.FigureWidget()
    fig.add_scatter(x=x, y=np.minimum(part.peak_bf16_tflops, x * part.hbm_tbs), mode="lines",
                    name="bf16 tensor cores", line={"color": "black"})
    fig.add_scatter(x=x, y=np.minimum(fp32, x * part.hbm_tbs), mode="lines", name="FP32 CUDA cores",
                    line={"color": "gray", "dash": "dash"})
    pts = roofline_points(d)
    for (name, (xi, yi)), color in zip(pts.items(), ("#d62728", "#1f77b4"), strict=True):
        fig.add_scatter(x=[xi], y=[yi], mode="markers+text", name=name, text=[name], textposition="top center",
                        marker={"size": 12, "color": color})
    for ridge, name, color in ((ridge_point(), "bf16 ridge", "black"), (fp32_ridge(), "FP32 ridge", "gray")):
        # a vertical line as a trace: shapes and their annotations misplace themselves on log axes
        fig.add_scatter(x=[ridge, ridge], y=[1, 1500], mode="lines+text", line={"dash": "dot", "color": color},
                        text=["", f"{name} {ridge:.0f}"], textposition="top center", showlegend=False,
                        hoverinfo="skip")
    # from 0.8: the x axis's first label, 1, sits clear of the y axis's 1 in the corner
    fig.update_xaxes(type="log", title="FLOP per byte", range=[math.log10(0.8), math.log10(20000)])
    fig.update_yaxes(type="log", title="TFLOP/s", range=[0, math.log10(3000)])
    fig.update_layout(width=860, height=460, margin={"t": 30, "l": 60, "r": 10, "b": 50})
    from helpers.course.widgets import figure

    figure.legend_below(fig)
    return figure.styled(fig)  # the course's white background, as every other figure


def roofline_widget(M: int = 4096, N: int = 4096, K: int = 4096, BM: int = 128, BN: int = 256):
    """Sliders for M, N, K (powers of two and between), BM, BN, multicast of B; the roofline redraws and the
    numbers below it say the tiles, waves and the bound."""
    import ipywidgets as w

    sizes = [256 * i for i in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)]
    box = {"layout": w.Layout(width="420px"), "style": {"description_width": "60px"}}
    m_s = w.SelectionSlider(options=sizes, value=M, description="M", **box)
    n_s = w.SelectionSlider(options=sizes, value=N, description="N", **box)
    k_s = w.SelectionSlider(options=sizes, value=K, description="K", **box)
    narrow = {"style": {"button_width": "56px", "description_width": "70px"}}
    bm = w.ToggleButtons(options=[64, 128, 256], value=BM, description="BM", **narrow)
    bn = w.ToggleButtons(options=[64, 128, 256], value=BN, description="BN", **narrow)
    share = w.ToggleButtons(options=[("no", 1), ("2 share B", 2)], value=1, description="multicast",
                            style={"button_width": "90px", "description_width": "70px"})
    info = w.HTML()
    d0 = design(M, N, K, BM, BN)
    fig = roofline_figure_widget(d0)

    def redraw(*_):
        sms = this_gpu().sms
        workers = sms // share.value if share.value > 1 else sms
        d = design(m_s.value, n_s.value, k_s.value, bm.value, bn.value, workers=workers * share.value,
                   share_b=share.value)
        pts = roofline_points(d)
        with fig.batch_update():
            for trace, (xi, yi) in zip(fig.data[2:4], pts.values(), strict=True):
                trace.x, trace.y = [xi], [yi]
        info.value = f"<div style='max-width:860px'>{d.summary()}; the roofline allows " \
                     f"<b>{d.attainable_tflops:.0f} TFLOP/s</b> after wave and edge losses.</div>"

    for ctl in (m_s, n_s, k_s, bm, bn, share):
        ctl.observe(redraw, "value")
    redraw()
    from helpers.course.widgets.figure import WidgetBox

    return WidgetBox([w.HBox([w.VBox([m_s, n_s, k_s]), w.VBox([bm, bn, share])]), fig, info])
