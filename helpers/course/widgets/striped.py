"""Block-striped ownership: a run of elements coloured by the thread that owns each one.

Pure computation first (tests call these without a browser), built on :mod:`helpers.hopper.striped`:

- :func:`owner_grid` — the elements laid out ``columns`` wide, each cell the owning thread;
- :func:`access_cells` — the cells one warp-wide access (register ``j`` of a warp) touches, and its 32-byte sectors.

Then :func:`striped_widget`: threads, elements, the layout (block-striped or each thread's registers contiguous)
and the register one warp accesses.
"""

from __future__ import annotations

import numpy as np

from helpers.course.widgets import figure
from helpers.hopper import striped

__all__ = ["owner_grid", "access_cells", "striped_widget"]


def owner_grid(threads: int, elements: int, columns: int, layout: str = "striped") -> np.ndarray:
    """(rows, columns) owning thread of each element, row-major (``-1`` past the end)."""
    owners = striped.owner_map(threads, elements, layout)
    rows = -(-elements // columns)
    grid = np.full(rows * columns, -1, np.int64)
    grid[:elements] = owners
    return grid.reshape(rows, columns)


def access_cells(threads: int, elements: int, columns: int, register: int, warp: int = 0,
                 layout: str = "striped", element_bytes: int = 4) -> tuple[list[tuple[int, int]], int]:
    """((row, col) of every element lane l of ``warp`` touches at register ``register``, 32-byte sectors touched)."""
    regs = -(-elements // threads)
    offs = striped.offsets(threads, regs) if layout == "striped" else striped.blocked_offsets(threads, regs)
    lanes = offs[32 * warp:32 * warp + 32, register]
    lanes = lanes[lanes < elements]
    cells = [(int(e) // columns, int(e) % columns) for e in lanes]
    sectors = int(np.unique(lanes * element_bytes // 32).size)
    return cells, sectors


def striped_widget(threads: int = 64, elements: int = 1024, columns: int = 64):
    """The elements of a workspace slot coloured by owning thread; pick the layout and the register a warp moves."""
    import ipywidgets as w
    import plotly.graph_objects as go

    layout = w.ToggleButtons(options=[("block-striped: j·T + t", "striped"), ("contiguous: t·R + j", "blocked")],
                             value="striped", style={"button_width": "13em"})
    t_pick = w.Dropdown(options=[32, 64, 128, 256], value=threads, description="threads T",
                        layout=w.Layout(width="13em"), style={"description_width": "5.5em"})
    reg = w.IntSlider(value=0, min=0, max=max(0, elements // threads - 1), description="register j",
                      style={"description_width": "5.5em"}, layout=w.Layout(width="26em"))
    info = w.HTML()
    fig = go.FigureWidget()
    fig.add_trace(go.Heatmap(z=[[0]], colorscale="Turbo", showscale=True, colorbar={"title": "thread", "len": 0.8},
                             hovertemplate="element %{customdata}<br>thread %{z}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[], y=[], mode="markers", marker={"symbol": "square-open", "size": 9,
                                                                 "color": "white", "line": {"width": 2}},
                             hoverinfo="skip", name="warp 0's access"))
    fig.update_yaxes(autorange="reversed", title=f"row ({columns} elements each)")
    fig.update_xaxes(title="element within the row")
    fig.update_layout(height=390, width=880, margin={"l": 60, "r": 10, "t": 30, "b": 40}, showlegend=False)
    figure.styled(fig)

    def redraw(*_):
        t = t_pick.value
        reg.max = max(0, elements // t - 1)
        grid = owner_grid(t, elements, columns, layout.value)
        cells, sectors = access_cells(t, elements, columns, min(reg.value, reg.max), 0, layout.value)
        with fig.batch_update():
            fig.data[0].z = grid
            fig.data[0].customdata = np.arange(grid.size).reshape(grid.shape)
            fig.data[1].x = [c for _, c in cells]
            fig.data[1].y = [r for r, _ in cells]
        lines = "one 128-byte line: coalesced" if sectors == 4 else f"{sectors} different sectors: not coalesced"
        info.value = (f"{t} threads × {elements // t} registers = {elements} fp32 elements. Warp 0's access of "
                      f"register {reg.value} (white squares) touches <b>{sectors} 32-byte sectors</b> ({lines}). "
                      "Each element has exactly one owner in both layouts.")

    for control in (layout, t_pick, reg):
        control.observe(redraw, "value")
    redraw()
    return figure.WidgetBox([figure.controls(layout, t_pick), reg, info, fig])
