"""The epilogue, drawn: which banks a warp's stores into a sub-tile hit (plain stores vs stmatrix, with and without
the swizzle), and what each ordering mistake does to C on the epilogue model.

Pure computation first: :func:`store_banks`, :data:`VARIANTS`, :func:`race`. Then :func:`bank_figure` and
:func:`epilogue_race_widget`.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from helpers.course.widgets import swizzle
from helpers.hopper import epilogue

__all__ = ["StoreBanks", "store_banks", "bank_figure", "VARIANTS", "Race", "race", "epilogue_race_widget"]


@dataclass(frozen=True)
class StoreBanks:
    """One warp store instruction into a sub-tile: lanes' byte offsets, the banks they hit, passes needed, and how
    many such instructions a warp needs for its 16 rows × 64 columns."""

    kind: str
    swizzled: bool
    offsets: np.ndarray
    conflicts: swizzle.Conflicts
    per_subtile: int

    @property
    def passes(self) -> int:
        return self.conflicts.total


def store_banks(kind: str = "st.shared.b32", swizzled: bool = True, warp: int = 0) -> StoreBanks:
    """``kind``: "st.shared.b32" (registers 0 and 1 as a bf16 pair per lane) or "stmatrix.x4" (columns 0–15 of the
    warp's 16 rows, one 16-byte row address per lane)."""
    if kind == "st.shared.b32":
        off = epilogue.warp_store_offsets(warp, 0, swizzle=swizzled)
        return StoreBanks(kind, swizzled, off, swizzle.bank_conflicts(off, 4), 16)
    if kind == "stmatrix.x4":
        off = epilogue.stmatrix_offsets(warp, 0, swizzle=swizzled)
        return StoreBanks(kind, swizzled, off, swizzle.bank_conflicts(off, 16), 4)
    raise ValueError(f"kind {kind!r}: 'st.shared.b32' or 'stmatrix.x4'")


def bank_figure(warp: int = 0):
    """Four panels (plain stores / stmatrix × plain / swizzled buffer): for each lane (row) the banks its bytes hit;
    the title gives the passes per instruction and the instructions per sub-tile."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from helpers.course.widgets import figure

    combos = [(k, s) for k in ("st.shared.b32", "stmatrix.x4") for s in (False, True)]
    results = [store_banks(k, s, warp) for k, s in combos]
    titles = [f"{r.kind}, {'swizzled' if r.swizzled else 'plain'}: {r.passes} pass(es) × {r.per_subtile}"
              for r in results]
    phases = max(int(r.conflicts.phase.max()) + 1 for r in results)
    # colour = the phase of the lane that writes the bank (the lanes served together: the whole warp for 4-byte
    # stores, a quarter-warp for stmatrix's 16-byte rows); a band per phase, light grey where no lane writes
    colors = ["#f4f6f9", *figure.CATEGORY_COLORS[:phases]]
    fig = make_subplots(rows=2, cols=2, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.14)
    for n, r in enumerate(results):
        hits = np.zeros((32, swizzle.BANKS))
        for lane in range(32):
            hits[lane, r.conflicts.banks[lane]] = 1 + r.conflicts.phase[lane]
        fig.add_trace(go.Heatmap(z=hits, colorscale=figure.discrete_colorscale(colors), zmin=-0.5,
                                 zmax=phases + 0.5, showscale=n == 0,
                                 colorbar={"title": {"text": "written by a lane of", "side": "right"},
                                           "thickness": 12, "tickvals": list(range(phases + 1)),
                                           "ticktext": ["no lane"] + [f"phase {k}" for k in range(1, phases + 1)]},
                                 hovertemplate="lane %{y}, bank %{x}<extra></extra>"), row=n // 2 + 1, col=n % 2 + 1)
    fig.update_yaxes(autorange="reversed", title_text="lane")
    fig.update_xaxes(title_text="bank")
    fig.update_layout(width=860, height=660, margin={"t": figure.TOP + 16, "l": 50, "r": 90, "b": 40},
                      title={"text": "colour: the phase of the writing lane (4-byte stores: one for the warp; "
                                     "stmatrix: a quarter-warp each)", "x": 0, "xanchor": "left", "y": 0.985,
                             "font": {"size": 13}})
    fig.update_annotations(font_size=12)
    figure.integer_axis(fig, "x", step=8)  # banks and lanes are whole
    figure.integer_axis(fig, "y", step=8, autorange="reversed")
    return figure.styled(figure.CourseFigure(fig))


def _replace(name: str, op: tuple, new: Callable[[int, int], tuple | None]):
    def ops(sub: int, buffers: int) -> list[tuple]:
        out = []
        for o in epilogue.LAB5_OPS(sub, buffers):
            if o[0] == op[0] and (len(op) == 1 or o == op):
                repl = new(sub, buffers)
                if repl is not None:
                    out.append(repl)
            else:
                out.append(o)
        return out

    ops.__name__ = name
    return ops


def _fence_after_bar(sub: int, buffers: int) -> list[tuple]:
    ops = epilogue.LAB5_OPS(sub, buffers)
    i = ops.index(("fence",))
    ops.insert(i + 1, ops.pop(i))
    return ops


#: the epilogue's operations, right and wrong: name -> (ops(sub, buffers), tiles to run)
VARIANTS: dict[str, tuple[Callable[[int, int], list[tuple]], int]] = {
    "Lab 5 (correct)": (epilogue.LAB5_OPS, 1),
    "no fence.proxy.async": (_replace("nofence", ("fence",), lambda s, b: None), 1),
    "fence after the barrier": (_fence_after_bar, 1),
    "no wait_group.read": (_replace("nowait", ("wait_read",), lambda s, b: None), 1),
    "wait_group.read 2 (too shallow)": (_replace("wait2", ("wait_read",), lambda s, b: ("wait_read", b)), 1),
    "wait_group.read 0 (correct, no overlap)": (_replace("wait0", ("wait_read",), lambda s, b: ("wait_read", 0)), 1),
    "no commit_group": (_replace("nocommit", ("commit",), lambda s, b: None), 1),
    "Lab 5's operations, persistent (3 tiles)": (epilogue.LAB5_OPS, 3),
    "Lab 6 (correct, persistent, 3 tiles)": (epilogue.LAB6_OPS, 3),
}


@dataclass(frozen=True)
class Race:
    """What one variant does: the rules it breaks, stores in flight after each store, and which sub-tile's data
    each 64-column quarter of C ended up holding (0…3; -1: none)."""

    name: str
    ops: list[list[tuple]]
    violations: list[str]
    in_flight: list[int]
    landed: list[int]


def race(name: str, subtiles: int = 4, buffers: int = 2) -> Race:
    """Run variant ``name`` of :data:`VARIANTS` on the epilogue model (not strict), each sub-tile's data a
    recognisable constant, and read back what landed where."""
    fn, tiles = VARIANTS[name]
    data = [np.full(epilogue.SUB_BYTES, s + 1, np.uint8) for s in range(subtiles)]
    result = epilogue.run(lambda s: fn(s, buffers), subtiles, buffers, tiles=tiles, data=data, strict=False)
    landed = []
    for s in range(subtiles):
        v = result.C[0, s * epilogue.SUB]
        landed.append(int(v & 0xFF) - 1 if v != 0x7FFF else -1)
    return Race(name, [fn(s, buffers) for s in range(subtiles)], [str(v) for v in result.violations],
                result.in_flight_after_store, landed)


def epilogue_race_widget():
    """Pick a variant: its operations, the rules it breaks and the C it leaves (each sub-tile's quarter colored
    by whose data landed there)."""
    import ipywidgets as w

    from helpers.course.widgets import figure

    pick = w.Dropdown(options=list(VARIANTS), value="Lab 5 (correct)", description="epilogue",
                      layout=w.Layout(width="520px"))
    text = w.HTML()
    fig = figure.new_figure(height=180, width=860)
    fig.add_heatmap(z=[[1, 1, 1, 1]], zmin=0, zmax=1, colorscale=[[0, "#f4a6a6"], [1, "#a8ddb5"]], showscale=False,
                    texttemplate="%{text}", text=[["", "", "", ""]], hoverinfo="skip", xgap=3)
    fig.update_xaxes(tickvals=[0, 1, 2, 3], ticktext=[f"C columns {64 * s}–{64 * s + 63}" for s in range(4)])
    fig.update_yaxes(visible=False)
    fig.update_layout(margin={"l": 10, "r": 10, "b": 40}, title_text="C after the epilogue: whose sub-tile landed in "
                      "each quarter (✓ its own, ✗ not)")

    def redraw(*_):
        r = race(pick.value)
        with fig.batch_update():
            fig.data[0].z = [[int(x == s) for s, x in enumerate(r.landed)]]
            fig.data[0].text = [[("sub-tile " + str(x) if x >= 0 else "nothing") + (" ✓" if x == s else " ✗")
                                 for s, x in enumerate(r.landed)]]
        ops = "<br>".join(f"sub-tile {s}: " + ", ".join(o[0] + (f" {o[1]}" if len(o) > 1 else "") for o in ops)
                          for s, ops in enumerate(r.ops))
        # each broken rule in full (the sentence says what to do), the first three of them
        broke = "<br>".join(html.escape(v.split("] ", 1)[-1]) for v in r.violations[:3]) or "no rule broken"
        more = f"<br>(and {len(r.violations) - 3} more)" if len(r.violations) > 3 else ""
        text.value = (f"<div style='max-width:860px'><b>operations</b><br><code>{ops}</code><br><b>rules</b><br>"
                      f"{broke}{more}<br><b>stores in flight after each store</b>: {r.in_flight}</div>")

    pick.observe(redraw, "value")
    redraw()
    return figure.WidgetBox([pick, fig, text])
