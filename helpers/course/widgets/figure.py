"""How every widget looks: one style, sizes that fit a 900-pixel notebook column, a modebar that never covers a
title, and a first drawing that reaches the page.

- :func:`new_figure` — a :class:`CourseFigure` (a ``go.FigureWidget``, with subplots when asked) in the course's
  style; shown on its own (a cell's last line), it hands its complete state to the page as a box does (below);
- :class:`WidgetBox` — the ``VBox`` every widget returns; when it is displayed it hands its figures' current
  state to the page (see below);
- :func:`controls` — a row of controls that wraps instead of running past the column;
- :func:`integer_axis`, :func:`discrete_colorscale`, :data:`CATEGORY_COLORS`, :func:`colorbar_beside`;
- :func:`styled` — a figure built elsewhere brought to the same style; :func:`legend_below` — a legend that
  keeps clear of the x axis's title.

Why :class:`WidgetBox`: a ``FigureWidget`` opens its model on the page when it is created, with the state it has
then (no traces yet), and sends every later change as a message. The page applies such a message only once
plotly's widget code has loaded (5 MB; seconds on a busy laptop), and a view draws from the state its model has
when it is created, ignoring later replacements of that state: so a widget shown on a busy machine could draw an
empty default plot and stay empty after clicks (its traces never reached the page). When a box is first shown,
it opens each figure's model afresh with the figure's complete current state (and re-sends its containers'
children, which name the new models), so the first view draws from a complete model whatever was lost or late.
A :class:`CourseFigure` shown by itself does the same for its own model: without it, the first figure of a notebook
(shown while plotly's widget code was still loading) drew plotly's default empty plot, logo and all.
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
    "CourseFigure",
    "CATEGORY_COLORS",
    "new_figure",
    "WidgetBox",
    "controls",
    "integer_axis",
    "discrete_colorscale",
    "colorbar_beside",
    "sync_figure",
    "reopen_complete",
    "styled",
    "legend_below",
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


class CourseFigure(go.FigureWidget):
    """A ``FigureWidget`` that, when first shown by itself, opens its model with its complete current state (see
    the module's notes); inside a :class:`WidgetBox` the box does that."""

    _opened_complete = False

    def _repr_mimebundle_(self, *args: Any, **kwargs: Any) -> Any:
        if not self._opened_complete and self.comm is not None:
            self._opened_complete = True
            reopen_complete(self)
        return super()._repr_mimebundle_(*args, **kwargs)


def _course_renderers() -> None:
    """Figures shown without a widget (``fig.show()``, a plain ``go.Figure`` as a cell's value) in the course's
    style too: the white template, and the course's modebar (no plotly logo) in every renderer that takes a
    config."""
    import plotly.io as pio

    pio.templates.default = "plotly_white"
    for name in list(pio.renderers):
        renderer = pio.renderers[name]
        if isinstance(getattr(renderer, "config", None), dict):
            renderer.config = {**renderer.config, **_CONFIG}


_course_renderers()


def new_figure(*, height: int, width: int = COLUMN, rows: int = 1, cols: int = 1, top: int = TOP,
               **subplots: Any) -> CourseFigure:
    """An empty FigureWidget in the course's style: white template, ``width`` ≤ :data:`COLUMN`, titles left of
    and below the modebar, subplot titles in 12-point type."""
    if width > COLUMN:
        raise ValueError(f"a figure {width} px wide does not fit a 900-pixel notebook column (at most {COLUMN})")
    base = make_subplots(rows=rows, cols=cols, **subplots) if (rows, cols) != (1, 1) or subplots else go.Figure()
    fig = CourseFigure(base)
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


def styled(fig: Any, *, top: int = TOP) -> Any:
    """A figure built elsewhere in the course's style: white template, 12-point type, the course's modebar, and a
    top margin of at least ``top`` (the modebar's room above the plotting area). Returns ``fig``."""
    margin = fig.layout.margin
    fig.update_layout(template="plotly_white", font={"size": 12}, hoverlabel={"font_size": 12},
                      margin={"t": max(top, margin.t or 0)})
    fig._config = dict(_CONFIG)
    return fig


def legend_below(fig: Any, *, rows_of_entries: int = 1, axis_title: bool = True) -> None:
    """A horizontal legend under the plotting area, below the x axis's tick labels and title: the bottom margin
    grows to hold it."""
    below = 22 + (22 if axis_title else 0)  # tick labels, then the axis title
    height = fig.layout.height or 450
    fig.update_layout(showlegend=True, legend={"orientation": "h", "x": 0, "xanchor": "left", "yref": "container",
                                               "y": 4 / height, "yanchor": "bottom"},
                      margin={"b": below + 12 + 22 * rows_of_entries})


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


def _containers(widget: Any) -> list[Any]:
    if isinstance(widget, go.FigureWidget) or not hasattr(widget, "children"):
        return []
    found = [widget]
    for child in widget.children:
        found += _containers(child)
    return found


def reopen_complete(fig: go.FigureWidget) -> None:
    """Open the figure's model on the page afresh, its opening state the figure's complete current drawing."""
    sync_figure(fig)
    if fig.comm is None:
        return
    fig.close()
    vars(fig).pop("_repr_mimebundle_", None)  # close() hides the display method; the figure is shown again
    fig._model_id = None  # a new model id: the page never mixes the new model with the closed one
    fig.open()


class WidgetBox(widgets.VBox):
    """A ``VBox`` that, when first displayed, opens its figures' models with their complete current state (see
    the module's notes); when displayed again, hands them the current state."""

    _opened_complete = False

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        figures = _figures(self)
        if not self._opened_complete and self.comm is not None:
            self._opened_complete = True
            for fig in figures:
                reopen_complete(fig)
                if isinstance(fig, CourseFigure):
                    fig._opened_complete = True
            for box in _containers(self):
                box.send_state("children")
        else:
            for fig in figures:
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
