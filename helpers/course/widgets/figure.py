"""How every widget looks: one style, sizes that fit a 900-pixel notebook column, a modebar that never covers a
title, and a first drawing that reaches the page.

- :func:`new_figure` — a ``go.FigureWidget`` (with subplots when asked) in the course's style;
- :class:`WidgetBox` — the ``VBox`` every widget returns; when it is displayed it hands its figures' current
  state to the page (see below);
- :func:`controls` — a row of controls that wraps instead of running past the column;
- :func:`integer_axis`, :func:`discrete_colorscale`, :data:`CATEGORY_COLORS`, :func:`colorbar_beside`.

Why :class:`WidgetBox`: a ``FigureWidget`` sends its initial state (``_widget_data`` / ``_widget_layout``) when
the widget model is created, and later changes as messages to the views that exist. plotly refreshes that state
when the figure itself is displayed, but not when a container holding it is; so traces added and data drawn after
``FigureWidget(...)`` but before the box reached the page were lost (the barrier stepper's bars showed on axis
0/1/2 in plotly's default red). The box refreshes it as it is displayed.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

__all__ = [
    "COLUMN",
    "TOP",
    "CATEGORY_COLORS",
    "new_figure",
    "WidgetBox",
    "controls",
    "integer_axis",
    "discrete_colorscale",
    "colorbar_beside",
    "sync_figure",
]

#: the widest a figure may be: a 900-pixel notebook column, less the output area's padding
COLUMN = 880
#: top margin: the modebar (about 30 px, top right, on hover) sits above every title
TOP = 64
#: ten colours that tell categories apart (Tableau 10, as plotly's ``T10``)
CATEGORY_COLORS = ("#4C78A8", "#F58518", "#E45756", "#72B7B2", "#54A24B", "#EECA3B", "#B279A2", "#FF9DA6",
                   "#9D755D", "#BAB0AC")

_CONFIG = {
    "displaylogo": False,
    "displayModeBar": "hover",
    "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines", "hoverClosestCartesian",
                               "hoverCompareCartesian"],
}


def new_figure(*, height: int, width: int = COLUMN, rows: int = 1, cols: int = 1, top: int = TOP,
               **subplots: Any) -> go.FigureWidget:
    """An empty FigureWidget in the course's style: white template, ``width`` ≤ :data:`COLUMN`, titles left of
    and below the modebar, subplot titles in 12-point type."""
    if width > COLUMN:
        raise ValueError(f"a figure {width} px wide does not fit a 900-pixel notebook column (at most {COLUMN})")
    base = make_subplots(rows=rows, cols=cols, **subplots) if (rows, cols) != (1, 1) or subplots else go.Figure()
    fig = go.FigureWidget(base)
    fig.update_layout(
        template="plotly_white",
        width=width,
        height=height,
        autosize=False,
        margin={"l": 56, "r": 16, "t": top, "b": 44},
        font={"size": 12},
        title={"x": 0, "xanchor": "left", "xref": "paper", "yref": "container", "y": 1 - 34 / height,
               "yanchor": "top", "font": {"size": 14}},
        showlegend=False,
        hoverlabel={"font_size": 12},
    )
    fig.update_annotations(font_size=12)
    fig._config = dict(_CONFIG)
    return fig


def sync_figure(fig: go.FigureWidget) -> None:
    """Make the state a new view starts from equal to the figure's current data and layout."""
    fig._widget_data = deepcopy(fig._data)
    fig._widget_layout = deepcopy(fig._layout_obj._props)


def _figures(widget: Any) -> list[go.FigureWidget]:
    if isinstance(widget, go.FigureWidget):
        return [widget]
    found = []
    for child in getattr(widget, "children", ()):
        found += _figures(child)
    return found


class WidgetBox(widgets.VBox):
    """A ``VBox`` that, when displayed, hands the page its figures' current state (see the module's notes)."""

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        for fig in _figures(self):
            sync_figure(fig)
        return super()._repr_mimebundle_(**kwargs)


def controls(*children: widgets.Widget, gap: str = "4px 12px") -> widgets.HBox:
    """A row of controls that wraps onto the next line rather than running past the notebook column."""
    return widgets.HBox(list(children), layout=widgets.Layout(flex_flow="row wrap", grid_gap=gap,
                                                              align_items="center", max_width=f"{COLUMN}px"))


def integer_axis(fig: go.FigureWidget, axis: str, *, step: int = 1, row: int | None = None,
                 col: int | None = None, **more: Any) -> None:
    """Ticks on whole numbers only (every ``step``): a chunk, bank, row or step axis never shows 0.5."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(tickmode="linear", tick0=0, dtick=step, tickformat="d", row=row, col=col, **more)


def discrete_colorscale(colors: list[str] | tuple[str, ...]) -> list[list]:
    """A colorscale that paints value i (of 0 … len(colors)-1, with zmin=-0.5, zmax=len-0.5) in colors[i]."""
    scale: list[list] = []
    n = len(colors)
    for i, c in enumerate(colors):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def colorbar_beside(fig: go.FigureWidget, row: int, col: int, title: str, **more: Any) -> dict:
    """A colour bar as tall as subplot (row, col) and just right of the figure's plotting area."""
    yaxis = fig.get_subplot(row, col).yaxis
    lo, hi = yaxis.domain
    return {"title": {"text": title, "side": "right"}, "y": (lo + hi) / 2, "len": hi - lo, "yanchor": "middle",
            "thickness": 12, "x": 1.01, "xanchor": "left", **more}
