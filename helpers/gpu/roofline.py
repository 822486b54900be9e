"""Place kernels on the H100's roofline (plotly)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .device import H100_HBM_TBS, H100_PEAK_BF16_TFLOPS


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


def ridge_point(peak_tflops: float = H100_PEAK_BF16_TFLOPS, bandwidth_tbs: float = H100_HBM_TBS) -> float:
    """Intensity (FLOP/B) where the memory roof meets the compute roof: about 295 for bf16 on an H100 SXM."""
    return peak_tflops / bandwidth_tbs


def attainable_tflops(intensity: float, peak_tflops: float = H100_PEAK_BF16_TFLOPS,
                      bandwidth_tbs: float = H100_HBM_TBS) -> float:
    return min(peak_tflops, intensity * bandwidth_tbs)


def roofline_figure(points: Sequence[RooflinePoint | dict[str, Any]] = (), *,
                    peak_tflops: float = H100_PEAK_BF16_TFLOPS, bandwidth_tbs: float = H100_HBM_TBS,
                    title: str = "H100 SXM roofline (bf16 tensor cores, HBM3)") -> Any:
    """A log-log plotly Figure: the memory roof, the compute roof, and each point (RooflinePoint, or a dict
    with name, flops, bytes, seconds). Hover shows TFLOP/s and the fraction of the roof reached."""
    import plotly.graph_objects as go

    pts = [p if isinstance(p, RooflinePoint) else RooflinePoint(**p) for p in points]
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
