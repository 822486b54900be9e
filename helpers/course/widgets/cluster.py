"""Clusters and TMA multicast, drawn: which CTA of a cluster loads which part of the A and B slices, and who
receives it; what each CTA's FULL barrier must expect; how many such clusters fit on the H100 at once.

Pure computation first: :func:`cluster_summary` (from ``helpers.hopper.cluster.multicast_plan``). Then
:func:`multicast_figure` and :func:`cluster_widget`.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.course.widgets import figure
from helpers.gpu.hardware import this_gpu
from helpers.hopper import cluster

__all__ = ["ClusterSummary", "cluster_summary", "multicast_figure", "cluster_widget"]

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]


@dataclass(frozen=True)
class ClusterSummary:
    """Per K step of a cm × cn cluster: bytes every CTA expects, bytes read from L2 with and without multicast."""

    cm: int
    cn: int
    share: str
    plans: list[cluster.CtaPlan]
    l2_bytes: int
    l2_bytes_without: int
    co_resident: tuple[int, int] | None  # (clusters, SMs busy) on the GPU here (or the emulated part)
    sms: int = 0
    part: str = ""

    @property
    def saving(self) -> float:
        return 1 - self.l2_bytes / self.l2_bytes_without


def cluster_summary(cm: int = 2, cn: int = 1, share: str = "B", BM: int = 128, BN: int = 256,
                    BK: int = 64) -> ClusterSummary:
    plans = cluster.multicast_plan(cm, cn, BM, BN, BK, share=share)
    without = cm * cn * (BM + BN) * BK * 2
    return ClusterSummary(cm, cn, share, plans, sum(p.l2_bytes for p in plans), without,
                          cluster.co_resident(this_gpu()).get(cm * cn), this_gpu().sms, this_gpu().name)


def multicast_figure(cm: int = 2, cn: int = 1, share: str = "B", BM: int = 128, BN: int = 256):
    """The cluster's CTAs as boxes (i down M, j along N), the A slices on the left and B slices on top, cut into the
    parts each CTA loads (colored by issuer), with a line from every part to every CTA that receives it."""
    import plotly.graph_objects as go

    s = cluster_summary(cm, cn, share, BM, BN)
    fig = go.Figure()
    cw, ch = 1.0, 0.6  # a CTA box
    gap = 0.25

    def box(x0, y0, x1, y1, color, text, opacity=0.35):
        fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, line={"color": "black", "width": 1},
                      fillcolor=color, opacity=opacity)
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text, showarrow=False, font={"size": 11})

    def cta_xy(i, j):
        return 1.2 + j * (cw + gap), -(i * (ch + gap))

    centers: list[tuple[float, float, str]] = []
    for p in s.plans:
        i, j = p.cta
        x, y = cta_xy(i, j)
        box(x, y - ch, x + cw, y, _COLORS[p.rank % len(_COLORS)],
            f"CTA {p.rank} ({i},{j})<br>expects {p.expect_tx // 1024} KiB", 0.15)
        loads = ", ".join(f"{ld.operand} rows {ld.rows[0]}–{ld.rows[1] - 1}" for ld in p.issues)
        centers.append((x + cw / 2, y - ch / 2, f"CTA {p.rank} ({i},{j}): loads {loads or 'nothing'}; full[s] "
                                                 f"expects {p.expect_tx} bytes; reads {p.l2_bytes} bytes from L2"))
    # the CTAs as hover targets (the boxes are shapes, which plotly does not hover)
    fig.add_trace(go.Scatter(x=[c[0] for c in centers], y=[c[1] for c in centers], mode="markers",
                             marker={"size": 40, "opacity": 0}, hovertext=[c[2] for c in centers],
                             hoverinfo="text", name="CTAs"))
    seen = set()
    for p in s.plans:
        for ld in p.issues:
            key = (ld.operand, ld.rows, ld.receivers)
            if key in seen:
                continue
            seen.add(key)
            color = _COLORS[p.rank % len(_COLORS)]
            if ld.operand == "A":  # A slices on the left, one per block-row
                i = ld.receivers[0][0]
                _, y = cta_xy(i, 0)
                y0 = y - ch * ld.rows[0] / BM
                y1 = y - ch * ld.rows[1] / BM
                box(0.2, y1, 0.8, y0, color, f"A {ld.rows[0]}–{ld.rows[1] - 1}")
                src = (0.8, (y0 + y1) / 2)
            else:  # B slices on top, one per block-column
                j = ld.receivers[0][1]
                x, _ = cta_xy(0, j)
                x0 = x + cw * ld.rows[0] / BN
                x1 = x + cw * ld.rows[1] / BN
                box(x0, 0.3, x1, 0.8, color, f"B {ld.rows[0]}–{ld.rows[1] - 1}")
                src = ((x0 + x1) / 2, 0.3)
            mid = (ld.rows[0] + ld.rows[1]) / 2
            for r in ld.receivers:
                x, y = cta_xy(*r)
                # B lands along the top edge of the receiver, A along its left edge, at the rows it carries
                end = (x + cw * mid / BN, y) if ld.operand == "B" else (x, y - ch * mid / BM)
                fig.add_annotation(x=end[0], y=end[1], ax=src[0], ay=src[1], xref="x", yref="y",
                                   axref="x", ayref="y", showarrow=True, arrowhead=2, arrowcolor=color, opacity=0.8,
                                   text="")
    fig.update_xaxes(visible=False, range=[0, 1.4 + cn * (cw + gap)])
    fig.update_yaxes(visible=False, range=[-(cm * (ch + gap)) - 0.1, 1.0], scaleanchor="x")
    fig.update_layout(width=560, height=140 + 150 * cm, margin={"t": 10, "l": 10, "r": 10, "b": 10},
                      plot_bgcolor="white")
    return fig


def _summary_html(s: ClusterSummary) -> str:
    def loads(p: cluster.CtaPlan) -> str:
        return ", ".join(f"{ld.operand} {ld.rows[0]}–{ld.rows[1] - 1}" for ld in p.issues)

    rows = "".join(f"<tr><td>CTA {p.rank} ({p.cta[0]},{p.cta[1]})</td><td>{loads(p)}</td>"
                   f"<td>{p.expect_tx}</td><td>{p.l2_bytes}</td></tr>" for p in s.plans)
    n = s.cm * s.cn
    co = (f"{s.co_resident[0]} clusters of {n} CTAs at once, {s.co_resident[1]} of {s.sms} SMs busy (for "
          f"{n} CTAs of this kernel's size)" if s.co_resident else f"clusters of {n} CTAs: not measured")
    return (f"<table><tr><th>CTA</th><th>loads (rows of its slice)</th><th>full[s] expects (bytes)</th>"
            f"<th>reads from L2</th></tr>{rows}</table>"
            f"<p>per K step the cluster reads {s.l2_bytes // 1024} KiB from L2 instead of "
            f"{s.l2_bytes_without // 1024} KiB ({s.saving:.0%} less); on the {s.part}: {co}</p>")


def cluster_widget(cm: int = 2, cn: int = 1, share: str = "B"):
    """Pick the cluster shape and what is shared; the picture and the table follow."""
    import ipywidgets as w

    style = {"button_width": "56px", "description_width": "80px"}
    cm_w = w.ToggleButtons(options=[1, 2, 4], value=cm, description="CTAs on M", style=style)
    cn_w = w.ToggleButtons(options=[1, 2, 4], value=cn, description="CTAs on N", style=style)
    share_w = w.ToggleButtons(options=["none", "A", "B", "both"], value=share, description="multicast", style=style)
    import plotly.graph_objects as go

    fig = figure.styled(go.FigureWidget(multicast_figure(cm, cn, share)))
    table = w.HTML()

    def redraw(*_):
        if cm_w.value * cn_w.value > 8:
            table.value = "<p>more than 8 CTAs per cluster needs the non-portable cluster attribute; pick fewer</p>"
            return
        s = cluster_summary(cm_w.value, cn_w.value, share_w.value)
        table.value = _summary_html(s)
        new_fig = multicast_figure(cm_w.value, cn_w.value, share_w.value)
        new = new_fig.layout
        with fig.batch_update():
            fig.layout.shapes, fig.layout.annotations = new.shapes, new.annotations
            fig.data[0].x, fig.data[0].y, fig.data[0].hovertext = new_fig.data[0].x, new_fig.data[0].y, \
                new_fig.data[0].hovertext
            fig.layout.xaxis.range, fig.layout.yaxis.range = new.xaxis.range, new.yaxis.range
            fig.layout.height = new.height

    for ctl in (cm_w, cn_w, share_w):
        ctl.observe(redraw, "value")
    redraw()
    return figure.WidgetBox([cm_w, cn_w, share_w, fig, table])
