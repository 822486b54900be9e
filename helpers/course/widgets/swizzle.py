"""Swizzle explorer: where each 16-byte chunk of a TMA box lands in shared memory, and which bank each
thread of a warp hits when it reads the box back.

Pure computation first (tests call these without a browser):

- :func:`swizzle_offset` — the hardware's address swizzle (XOR of address bits 4.. with bits 7..);
- :func:`chunk_placement` — where every 16-byte chunk of a box lands (from the emulator's TMA);
- :func:`warp_access` — the (row, chunk) each of 32 threads reads, for a few real access patterns;
- :func:`bank_conflicts` — banks, wavefronts and the conflict factor of one warp-wide 16-byte load;
- :func:`explore` — all of it at once, as the widget draws it.

Then :func:`swizzle_widget`.

Shared memory has 32 banks, each 4 bytes wide: byte address ``a`` lives in bank ``(a // 4) % 32``, and a
128-byte line touches every bank once. A warp loading 16 bytes per thread is served a quarter-warp (8 threads,
128 bytes) at a time; within a quarter, two threads that hit the same bank at *different* lines are a
conflict, and each extra line costs one more pass (a "wavefront"). This is the usual model of the hardware;
the profiler's ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared`` counter measures the real thing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.hopper import tensormap, tma
from helpers.hopper.tensormap import DataType, Swizzle, TensorMap

__all__ = [
    "MODES",
    "SPAN",
    "BANKS",
    "swizzle_offset",
    "box_map",
    "chunk_placement",
    "PATTERNS",
    "warp_access",
    "bank_of",
    "Conflicts",
    "bank_conflicts",
    "Exploration",
    "explore",
    "BANK_LOAD_MAX",
    "BANK_LOAD_COLORS",
    "swizzle_widget",
]

#: the four swizzle modes of a tensor map, by name
MODES = ("none", "32B", "64B", "128B")
#: bytes of one swizzle row (the most a box's inner dimension may span in that mode); None: no limit
SPAN: dict[str, int | None] = {"none": None, "32B": 32, "64B": 64, "128B": 128}
#: 4-byte banks of shared memory
BANKS = 32
CHUNK = 16  # bytes: the unit the swizzle moves


def _bits(mode: str) -> int:
    if mode not in SPAN:
        raise ValueError(f"unknown swizzle mode {mode!r}; pick one of {MODES}")
    span = SPAN[mode]
    return 0 if span is None else {32: 1, 64: 2, 128: 3}[span]


_SWIZZLE = {"none": Swizzle.NONE, "32B": Swizzle.B32, "64B": Swizzle.B64, "128B": Swizzle.B128}


def swizzle_offset(offset: int | np.ndarray, mode: str) -> int | np.ndarray:
    """The shared-memory byte offset a TMA swizzle moves ``offset`` to (the emulator's rule).

    With B = 1, 2, 3 bits for 32B, 64B, 128B: address bits [4, 4+B) are XOR-ed with bits [7, 7+B). So a
    16-byte chunk moves inside its own 128-byte line, by an amount that depends on which line it is in; the
    pattern repeats every 256, 512, 1024 bytes — the alignment a swizzled buffer needs.
    """
    _bits(mode)
    if mode == "none":
        return offset
    return tma.swizzled_offset(offset, _SWIZZLE[mode])


def box_map(rows: int, row_bytes: int, mode: str) -> TensorMap:
    """The tensor map of a box of ``rows`` rows of ``row_bytes`` bytes (as bytes), with swizzle ``mode``."""
    _bits(mode)
    return tensormap.encode_tiled(DataType.UINT8, 2, 0, (row_bytes, rows), (row_bytes,), (row_bytes, rows), (1, 1),
                                  swizzle=_SWIZZLE[mode])


def chunk_placement(rows: int, row_bytes: int, mode: str, base: int = 0) -> np.ndarray:
    """Byte offset, from the start of the buffer, where 16-byte chunk ``c`` of box row ``r`` lands: an int
    array of shape (rows, row_bytes // 16), as the emulator's TMA places it.

    Box rows follow each other every ``row_bytes`` without swizzle, and every swizzle span (32/64/128 bytes)
    with one — a row narrower than the span still takes a whole span-wide row. Every chunk address is then
    swizzled. ``base`` is the buffer's shared-memory address (a multiple of 128); a swizzled buffer should be
    aligned to the pattern's repeat (1024 B for 128B), and a misaligned one starts the pattern part-way through.
    """
    if row_bytes % CHUNK or row_bytes <= 0:
        raise ValueError(f"a box row is a whole number of 16-byte chunks, not {row_bytes} bytes")
    span = SPAN.get(mode)
    if span is not None and row_bytes > span:
        raise ValueError(f"with {mode} swizzle a box row may span at most {span} bytes, not {row_bytes}")
    if base % 128:
        raise ValueError(f"a TMA destination is 128-byte aligned; {base} is not")
    try:
        tmap = box_map(rows, row_bytes, mode)
    except tensormap.TensorMapError as exc:
        raise ValueError(str(exc)) from None
    return np.asarray(tma.chunk_offsets(tmap, base)).reshape(rows, row_bytes // CHUNK)


#: access patterns of one warp reading a box back, 16 bytes per thread: name -> (row, chunk) of thread t
PATTERNS = {
    "row by row (a copy loop)": "thread t reads chunk t % 8 of row t // 8",
    "down a column": "thread t reads the chosen chunk of row t",
    "ldmatrix.x4 (8×8 matrices)": "thread t gives the address of row t % 16, chunk (chosen + t // 16)",
}


def warp_access(pattern: str, row_chunks: int, chunk: int = 0, row0: int = 0) -> np.ndarray:
    """(row, chunk) read by each of the 32 threads, shape (32, 2); ``row_chunks`` = chunks per box row."""
    t = np.arange(32)
    if pattern == "row by row (a copy loop)":
        rows, chunks = t // row_chunks, t % row_chunks
    elif pattern == "down a column":
        rows, chunks = t, np.full(32, chunk)
    elif pattern == "ldmatrix.x4 (8×8 matrices)":
        rows, chunks = t % 16, chunk + t // 16
    else:
        raise ValueError(f"unknown pattern {pattern!r}; pick one of {list(PATTERNS)}")
    return np.stack([rows + row0, chunks % row_chunks], axis=1)


def bank_of(byte_offset: int | np.ndarray) -> int | np.ndarray:
    """The bank holding a byte: 32 banks of 4 bytes."""
    return (byte_offset // 4) % BANKS


@dataclass(frozen=True)
class Conflicts:
    """One warp-wide load of ``width`` bytes per thread."""

    width: int
    banks: np.ndarray  # (32, width // 4): the banks each thread's bytes occupy
    phase: np.ndarray  # (32,): which pass-group (quarter-warp for 16 B) each thread belongs to
    wavefronts: np.ndarray  # per phase: passes needed (the most distinct lines sharing one bank)
    load: np.ndarray  # (phases, 32): distinct lines each bank must deliver in each phase

    @property
    def ideal(self) -> int:
        """Passes a conflict-free load needs: one per phase."""
        return len(self.wavefronts)

    @property
    def total(self) -> int:
        return int(self.wavefronts.sum())

    @property
    def factor(self) -> float:
        """How many times slower than conflict-free (1.0 = no conflict)."""
        return self.total / self.ideal


def bank_conflicts(offsets: np.ndarray, width: int = 16) -> Conflicts:
    """Banks and passes for 32 threads each loading ``width`` bytes (4, 8 or 16) from byte ``offsets``.

    Threads are served in groups that move 128 bytes at most (32 threads for 4-byte loads, 16 for 8, 8 for
    16). Within a group, threads reading the same 4-byte word share it (a broadcast); different lines
    landing on the same bank take one pass each.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.shape != (32,):
        raise ValueError("one byte offset per thread of the warp (32 of them)")
    if width not in (4, 8, 16) or np.any(offsets % width):
        raise ValueError(f"loads of 4, 8 or 16 bytes, aligned to their size (width {width})")
    words = offsets[:, None] // 4 + np.arange(width // 4)[None, :]  # 4-byte words each thread reads
    banks = words % BANKS
    per_phase = 128 // width
    phase = np.arange(32) // per_phase
    n_phases = 32 // per_phase
    load = np.zeros((n_phases, BANKS), dtype=np.int64)
    for p in range(n_phases):
        w = words[phase == p].ravel()
        for bank in range(BANKS):
            load[p, bank] = len(np.unique(w[w % BANKS == bank]))
    return Conflicts(width, banks, phase, np.maximum(load.max(axis=1), 1), load)


@dataclass(frozen=True)
class Exploration:
    """Everything the widget draws for one choice of mode, box and access pattern."""

    mode: str
    rows: int
    row_bytes: int
    base: int
    placement: np.ndarray  # (rows, chunks): byte offset of each chunk, from base
    slot_of: np.ndarray  # (rows, chunks): 16-byte slot (0..7) inside its 128-byte line
    line_of: np.ndarray  # (rows, chunks): 128-byte line of shared memory
    access: np.ndarray  # (32, 2): (row, chunk) read by each thread
    conflicts: Conflicts


def explore(mode: str = "128B", rows: int = 32, pattern: str = "down a column", chunk: int = 0,
            row_bytes: int | None = None, base: int = 0) -> Exploration:
    """Place a box with ``rows`` rows of ``row_bytes`` (default: the mode's span, 128 B for none) and load
    it back with one warp reading 16 bytes per thread in ``pattern``."""
    if row_bytes is None:
        row_bytes = SPAN[mode] or 128
    placement = chunk_placement(rows, row_bytes, mode, base)
    access = warp_access(pattern, row_bytes // CHUNK, chunk)
    if access[:, 0].max() >= rows:
        raise ValueError(f"the pattern reads row {access[:, 0].max()}, but the box has only {rows} rows")
    offsets = base + placement[access[:, 0], access[:, 1]]
    absolute = base + placement
    return Exploration(mode, rows, row_bytes, base, placement, (absolute % 128) // CHUNK, absolute // 128,
                       access, bank_conflicts(offsets, 16))


# -----------------------------------------------------------------------------------------------------------
# the widget
# -----------------------------------------------------------------------------------------------------------
def _cells(e: Exploration) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The two pictures as (color, text) pairs: the box as the program sees it, and shared memory."""
    chunks = e.row_bytes // CHUNK
    lines = int(e.line_of.max()) + 1 - int(e.line_of.min())
    first = int(e.line_of.min())
    box_z = np.tile(np.arange(chunks, dtype=float), (e.rows, 1))
    box_t = np.full((e.rows, chunks), "", dtype=object)
    smem_z = np.full((lines, 8), np.nan)
    smem_t = np.full((lines, 8), "", dtype=object)
    for r in range(e.rows):
        for c in range(chunks):
            line, slot = int(e.line_of[r, c]) - first, int(e.slot_of[r, c])
            smem_z[line, slot] = c
            smem_t[line, slot] = f"{r},{c}"
    for t, (r, c) in enumerate(e.access):
        box_t[r, c] = (box_t[r, c] + f" t{t}").strip()
        line, slot = int(e.line_of[r, c]) - first, int(e.slot_of[r, c])
        smem_t[line, slot] = f"<b>t{t}</b>" if "t" not in smem_t[line, slot] else smem_t[line, slot] + f",t{t}"
    return box_z, box_t, smem_z, smem_t


def _ranges(values: np.ndarray) -> str:
    """[0, 1, 2, 3, 8, 9] -> '0–3, 8–9'."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}–{v}")
            start = None
    return ", ".join(out)


def summary_html(e: Exploration) -> str:
    c = e.conflicts
    verdict = ("conflict-free" if c.factor == 1 else f"<b style='color:#c0392b'>{c.factor:g}-way slower</b> "
               f"({c.total} passes instead of {c.ideal})")
    worst = int(np.argmax(c.wavefronts))
    banks = np.nonzero(c.load[worst] == c.load[worst].max())[0]
    detail = "" if c.factor == 1 else (
        f" In quarter-warp {worst} (threads {8 * worst}–{8 * worst + 7}), banks {_ranges(banks)} must "
        f"deliver {c.load[worst].max()} different lines each.")
    return (f"Swizzle <b>{e.mode}</b>, rows of {e.row_bytes} B, buffer at byte {e.base}: the warp's 16-byte "
            f"loads are {verdict}.{detail} Each quarter-warp moves 128 bytes per pass; it is conflict-free "
            "when its 8 threads cover all 32 banks.")


#: the bank-load colours: 0 lines (bank unused) grey-white, 1 (conflict-free) green, 2 … 8 orange to dark red
BANK_LOAD_MAX = 8
BANK_LOAD_COLORS = ("#f4f4f4", "#a6dba0", "#fdd49e", "#fdbb84", "#fc8d59", "#ef6548", "#d7301f", "#b30000",
                    "#7f0000")


def swizzle_widget(mode: str = "128B", rows: int = 32, pattern: str = "down a column"):
    """Pick a swizzle mode and an access pattern: see where chunks land and which banks the warp hits."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets.figure import (
        CATEGORY_COLORS,
        WidgetBox,
        colorbar_beside,
        controls,
        discrete_colorscale,
        integer_axis,
        new_figure,
    )

    narrow = w.Layout(width="17em")
    mode_w = w.ToggleButtons(options=list(MODES), value=mode, description="swizzle",
                             style={"button_width": "5em"})
    rows_w = w.SelectionSlider(options=[32, 64], value=rows, description="box rows", layout=narrow)
    bytes_w = w.SelectionSlider(options=[32, 64, 128], value=SPAN[mode] or 128, description="row bytes",
                                layout=narrow)
    pattern_w = w.Dropdown(options=list(PATTERNS), value=pattern, description="warp reads",
                           layout=w.Layout(width="22em"))
    chunk_w = w.IntSlider(0, 0, 7, description="chunk", layout=narrow)
    base_w = w.SelectionSlider(options=[0, 128, 256, 384, 512, 640, 768, 896], value=0,
                               description="base addr", layout=narrow)
    info = w.HTML()

    fig = new_figure(height=660, rows=2, cols=2, column_widths=[0.38, 0.62], row_heights=[0.74, 0.26],
                     specs=[[{}, {}], [{"colspan": 2}, None]], horizontal_spacing=0.1, vertical_spacing=0.13,
                     subplot_titles=("the box (row, chunk)", "shared memory (128-byte lines, 16-byte slots)",
                                     "bank load: different 128-byte lines each bank must deliver, per quarter-warp"))
    fig.update_layout(margin_r=80)
    chunk_scale = discrete_colorscale(CATEGORY_COLORS[:8])
    common = {"colorscale": chunk_scale, "zmin": -0.5, "zmax": 7.5, "showscale": False, "xgap": 1, "ygap": 1,
              "texttemplate": "%{text}", "textfont": {"size": 9}}
    fig.add_trace(go.Heatmap(z=[[0]], text=[[""]], hovertemplate="box row %{y}, chunk %{x}<extra></extra>",
                             **common), row=1, col=1)
    fig.add_trace(go.Heatmap(z=[[0]], text=[[""]], hovertemplate="line %{y}, slot %{x}: holds %{text}<extra></extra>",
                             **common), row=1, col=2)
    fig.add_trace(go.Heatmap(z=[[0]], colorscale=discrete_colorscale(BANK_LOAD_COLORS), zmin=-0.5,
                             zmax=BANK_LOAD_MAX + 0.5, xgap=1, ygap=1, texttemplate="%{z}", textfont={"size": 10},
                             colorbar=colorbar_beside(fig, 2, 1, "lines", tickmode="linear", tick0=0, dtick=2),
                             hovertemplate="quarter-warp %{y}, bank %{x}: %{z} lines<extra></extra>"), row=2, col=1)
    for r, c in ((1, 1), (1, 2), (2, 1)):
        fig.update_yaxes(autorange="reversed", row=r, col=c)
    integer_axis(fig, "x", title_text="chunk", row=1, col=1)
    integer_axis(fig, "y", step=4, title_text="box row", row=1, col=1)
    integer_axis(fig, "x", title_text="slot s (banks 4s … 4s+3)", row=1, col=2)
    integer_axis(fig, "y", step=4, title_text="line", row=1, col=2)
    integer_axis(fig, "x", step=4, title_text="bank", row=2, col=1)
    integer_axis(fig, "y", title_text="quarter", row=2, col=1)

    def redraw(change=None):
        span = SPAN[mode_w.value]
        if change is not None and change["owner"] is mode_w:
            bytes_w.value = span or 128  # a new mode starts with rows as wide as its swizzle span
        chunk_w.max = bytes_w.value // CHUNK - 1
        try:
            e = explore(mode_w.value, rows_w.value, pattern_w.value, chunk_w.value, bytes_w.value, base_w.value)
        except ValueError as exc:
            info.value = f"<b>Cannot draw:</b> {exc}"
            return
        box_z, box_t, smem_z, smem_t = _cells(e)
        with fig.batch_update():
            fig.data[0].z, fig.data[0].text = box_z, box_t
            fig.data[1].z, fig.data[1].text = smem_z, smem_t
            fig.data[1].y = np.arange(smem_z.shape[0]) + int(e.line_of.min())
            fig.data[2].z = e.conflicts.load
            fig.layout.xaxis.range = [-0.5, box_z.shape[1] - 0.5]
            fig.layout.yaxis2.dtick = 1 if smem_z.shape[0] <= 16 else 4
        info.value = summary_html(e)

    for c in (mode_w, rows_w, bytes_w, pattern_w, chunk_w, base_w):
        c.observe(redraw, names="value")
    redraw()
    note = w.HTML("Colour = the chunk's column in the box (chunk 0 blue, 1 orange, 2 red, …), so you can follow "
                  "each chunk into shared memory. Cells marked <b>t<i>n</i></b> are read by thread n. Bottom: 1 in "
                  "every used bank = conflict-free.")
    box_controls = w.VBox([mode_w, controls(pattern_w, chunk_w), controls(rows_w, bytes_w, base_w)])
    return WidgetBox([box_controls, fig, note, info])
