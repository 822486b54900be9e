"""Place kernels on a Hopper GPU's roofline (plotly): the GPU here, or the emulated part, by default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .hardware import this_gpu


@dataclass
class RooflinePoint:
    """A kernel run: FLOPs done, bytes moved to/from device memory, seconds taken."""

    name: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        """FLOP per byte of device-memory traffic."""
        return self.flops / self.bytes

    @property
    def tflops(self) -> float:
        return self.flops / self.seconds / 1e12


def gemm_point(name: str, m: int, n: int, k: int, seconds: float, *, in_bytes: int = 2,
               out_bytes: int = 4) -> RooflinePoint:
    """A GEMM's point assuming each input is read once and C written once (the ideal traffic)."""
    return RooflinePoint(name, 2.0 * m * n * k, float((m * k + n * k) * in_bytes + m * n * out_bytes), seconds)


def _roofs(peak_tflops: float | None, bandwidth_tbs: float | None) -> tuple[float, float]:
    part = this_gpu()
    return peak_tflops or part.peak_bf16_tflops, bandwidth_tbs or part.hbm_tbs


def ridge_point(peak_tflops: float | None = None, bandwidth_tbs: float | None = None) -> float:
    """Intensity (FLOP/B) where the memory roof meets the compute roof (the GPU here by default): about 295 for bf16
    on an H100 SXM, about 206 on an H200."""
    peak, bw = _roofs(peak_tflops, bandwidth_tbs)
    return peak / bw


def attainable_tflops(intensity: float, peak_tflops: float | None = None,
                      bandwidth_tbs: float | None = None) -> float:
    """The roof at ``intensity``: the lower of the compute peak and intensity × bandwidth."""
    peak, bw = _roofs(peak_tflops, bandwidth_tbs)
    return min(peak, intensity * bw)


def roofline_figure(points: Sequence[RooflinePoint | dict[str, Any]] = (), *,
                    peak_tflops: float | None = None, bandwidth_tbs: float | None = None,
                    title: str | None = None) -> Any:
    """A log-log plotly Figure: the memory roof, the compute roof, and each point (RooflinePoint, or a dict
    with name, flops, bytes, seconds). Hover shows TFLOP/s and the fraction of the roof reached."""
    import plotly.graph_objects as go

    pts = [p if isinstance(p, RooflinePoint) else RooflinePoint(**p) for p in points]
    peak_tflops, bandwidth_tbs = _roofs(peak_tflops, bandwidth_tbs)
    title = title or f"{this_gpu().name} roofline (bf16 tensor cores, HBM)"
    ridge = ridge_point(peak_tflops, bandwidth_tbs)
    lo = min([1.0] + [p.intensity / 2 for p in pts])
    hi = max([ridge * 8] + [p.intensity * 2 for p in pts])
    x = np.geomspace(lo, hi, 200)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=np.minimum(peak_tflops, x * bandwidth_tbs), mode="lines", name="roof",
                             line={"color": "black"}))
    fig.add_vline(x=ridge, line_dash="dot", annotation_text=f"ridge {ridge:.0f} FLOP/B")
    for p in pts:
        roof = attainable_tflops(p.intensity, peak_tflops, bandwidth_tbs)
        fig.add_trace(go.Scatter(
            x=[p.intensity], y=[p.tflops], mode="markers+text", name=p.name, text=[p.name], textposition="top center",
            hovertemplate=f"{p.name}<br>{p.intensity:.0f} FLOP/B<br>{p.tflops:.0f} TFLOP/s "
                          f"({p.tflops / roof:.0%} of the roof)<extra></extra>"))
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP per byte of HBM traffic)")
    fig.update_yaxes(type="log", title="TFLOP/s")
    fig.update_layout(title=title, showlegend=True)
    return fig
