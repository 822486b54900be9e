"""WGMMA seen from the inside: who holds which accumulator, and which K columns a descriptor reads.

Pure computation first (tests call these without a browser), all of it drawn from :mod:`helpers.hopper.wgmma`:

- :func:`owner_map` — for every element of the 64×N accumulator tile, the thread and register holding it;
- :func:`thread_elements` — the (register, row, column) list of one thread;
- :func:`fragment_picture` — the picture the fragment explorer draws (warp bands, a thread, its quad);
- :func:`seed_store` — the store loop of source document 000 (``d[w][k]`` into a column-major C), transcribed,
  so it can be compared element by element with the measured layout;
- :func:`store_offsets` — where one thread's registers go in a row-major or column-major C;
- :func:`descriptor_fields` — a 64-bit shared-memory matrix descriptor split into its fields, bit by bit;
- :func:`k_columns_read` — which K columns of a 128B-swizzled A tile one ``wgmma`` reads from a start offset.

Then :func:`fragment_explorer_widget` and :func:`descriptor_widget`, the ipywidgets + plotly views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helpers.hopper import wgmma
from helpers.hopper.tensormap import Swizzle

__all__ = [
    "FRAGMENT_NS",
    "owner_map",
    "thread_elements",
    "FragmentPicture",
    "fragment_picture",
    "seed_store",
    "store_offsets",
    "DescriptorField",
    "descriptor_fields",
    "k_columns_read",
    "k_steps_read",
    "fragment_figure_width",
    "fragment_explorer_widget",
    "descriptor_widget",
]

#: the N the explorer offers (a 64×N heatmap stays small); the functions take any N from 8 to 256
FRAGMENT_NS = (8, 16, 32, 64)

# cell values of the fragment picture: 0..3 the warp's band, then the quad and the chosen thread
QUAD, CHOSEN = 4, 5


def owner_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(threads, registers), each of shape (64, n): who holds element (row, col) of the accumulator tile.

    Built by scattering the emulator's fragment maps, so every element is written exactly once or it raises.
    """
    rows, cols = wgmma.fragment_maps(n)
    threads = np.full((64, n), -1, dtype=np.int64)
    registers = np.full((64, n), -1, dtype=np.int64)
    t = np.broadcast_to(np.arange(128)[:, None], rows.shape)
    j = np.broadcast_to(np.arange(n // 2)[None, :], rows.shape)
    threads[rows, cols] = t
    registers[rows, cols] = j
    if (threads < 0).any() or np.unique(rows * n + cols).size != rows.size:
        raise AssertionError(f"the m64n{n} fragments do not cover the tile exactly once")
    return threads, registers


def thread_elements(thread: int, n: int) -> list[tuple[int, int, int]]:
    """(register, row, column) for each accumulator register of one warpgroup thread, in register order."""
    return [(j, *wgmma.element_of(thread, j, n)) for j in range(n // 2)]


@dataclass(frozen=True)
class FragmentPicture:
    """What the explorer draws for one N and one chosen thread."""

    z: np.ndarray  # (64, n): warp 0..3, QUAD for the chosen thread's 3 partners, CHOSEN for its own cells
    text: np.ndarray  # (64, n) str: the register number on the chosen thread's cells, else ""
    threads: np.ndarray  # (64, n) owner thread of each element
    registers: np.ndarray  # (64, n) owner register of each element


def fragment_picture(n: int, thread: int) -> FragmentPicture:
    """The 64×n tile coloured by warp, with ``thread``'s own elements and its quad partners marked."""
    if not 0 <= thread < 128:
        raise ValueError(f"thread {thread}: a warpgroup has threads 0..127")
    threads, registers = owner_map(n)
    z = threads // 32
    quad = (threads // 4) == (thread // 4)  # the 4 lanes sharing the same pair of rows
    z = np.where(quad, QUAD, z)
    mine = threads == thread
    z = np.where(mine, CHOSEN, z)
    text = np.where(mine, registers.astype(str), "")
    return FragmentPicture(z, text, threads, registers)


def seed_store(tid: int, M: int = 64, wgmma_n: int = 64) -> list[dict]:
    """The accumulator store of source document 000, run for one thread of a 64×64 tile.

    Its registers are ``d[w][0..7]`` for w = 0..N/16-1 (register ``8w + k`` in the flat numbering of the
    PTX operand list), and it writes ``block_C[IDX(i, j)]`` with ``IDX(i, j) = j*M + i``: C is column-major
    with leading dimension M. Returns one record per store: w, k, the flat register, row, col, element offset.
    """
    lane, warp = tid % 32, tid // 32
    row = warp * 16 + lane // 4
    out = []
    for w in range(wgmma_n // 16):
        col = 16 * w + 2 * (tid % 4)
        targets = [(row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1),
                   (row, col + 8), (row, col + 9), (row + 8, col + 8), (row + 8, col + 9)]
        for k, (i, j) in enumerate(targets):
            out.append({"w": w, "k": k, "register": 8 * w + k, "row": i, "col": j, "offset": j * M + i})
    return out


def store_offsets(thread: int, n: int, ld: int, order: str = "row") -> np.ndarray:
    """Element offsets (from the tile's corner) where ``thread``'s registers 0..n/2-1 go in C.

    ``order="row"``: C row-major with ``ld`` elements per row (offset ``row*ld + col``); ``"col"``: column-major
    with ``ld`` elements per column (``col*ld + row``), as source document 000 stores it.
    """
    if order not in ("row", "col"):
        raise ValueError(f"order {order!r}: 'row' or 'col'")
    rc = np.array([wgmma.element_of(thread, j, n) for j in range(n // 2)])
    rows, cols = rc[:, 0], rc[:, 1]
    return rows * ld + cols if order == "row" else cols * ld + rows


@dataclass(frozen=True)
class DescriptorField:
    """One field of the 64-bit descriptor."""

    name: str
    lo: int  # first bit
    hi: int  # last bit (inclusive)
    raw: int  # the bits as stored
    meaning: str  # what they say, in bytes or words


def descriptor_fields(desc: int) -> list[DescriptorField]:
    """Split a shared-memory matrix descriptor into its fields, including the bits that must stay zero."""
    desc = int(desc) & ((1 << 64) - 1)
    d = wgmma.decode_descriptor(desc)

    def bits(lo: int, hi: int) -> int:
        return (desc >> lo) & ((1 << (hi - lo + 1)) - 1)

    names = {0: "no swizzle (interleaved 8×16-byte core matrices)", 1: "128B swizzle", 2: "64B swizzle",
             3: "32B swizzle"}
    return [
        DescriptorField("start address", 0, 13, bits(0, 13), f"{d.start_address} bytes (>> 4 = {bits(0, 13)})"),
        DescriptorField("(unused)", 14, 15, bits(14, 15), "must be 0"),
        DescriptorField("leading byte offset", 16, 29, bits(16, 29),
                        f"{d.leading_byte_offset} bytes" + (" (ignored with a swizzle, K-major)"
                                                            if d.layout else "")),
        DescriptorField("(unused)", 30, 31, bits(30, 31), "must be 0"),
        DescriptorField("stride byte offset", 32, 45, bits(32, 45),
                        f"{d.stride_byte_offset} bytes from one 8-row group to the next"),
        DescriptorField("(unused)", 46, 48, bits(46, 48), "must be 0"),
        DescriptorField("base offset", 49, 51, bits(49, 51), "0 when the tile is 1024-byte aligned"),
        DescriptorField("(unused)", 52, 61, bits(52, 61), "must be 0"),
        DescriptorField("layout (swizzle)", 62, 63, bits(62, 63), names[bits(62, 63)]),
    ]


def _k_probe_image() -> np.ndarray:
    """A 128×64 bf16 tile whose element (r, k) holds k + 64·(r % 2), laid out as TMA writes a 128B-swizzled
    box (64 rows past the A tile too, so a descriptor that walks off the tile still reads something)."""
    r = np.arange(128)[:, None]
    k = np.arange(64)[None, :]
    tile = (k + 64 * (r % 2)).astype(np.float32)  # exact in bf16 (integers below 256)
    smem = np.zeros(128 * 128, np.uint8)
    wgmma.write_kmajor_tile(smem, 0, tile, Swizzle.B128)
    return smem


def k_columns_read(start_offset: int, rows: int = 64) -> np.ndarray:
    """(rows, 16): the K column of the 128B-swizzled 64×64 tile that each slot of the A operand receives when
    the descriptor points ``start_offset`` bytes past the (1024-aligned) tile; -1 where the byte read belongs
    to a different row of the tile than the operand row (the descriptor has walked off the row)."""
    smem = _k_probe_image()
    desc = wgmma.make_descriptor(start_offset, 16, 1024, Swizzle.B128)
    values = wgmma.read_operand(smem, desc, rows).astype(np.int64)
    k = values % 64
    row_parity = values // 64
    wrong_row = row_parity != (np.arange(rows)[:, None] % 2)
    return np.where(wrong_row, -1, k)


def k_steps_read(step_bytes: int, steps: int = 4) -> list[np.ndarray]:
    """The K columns (of row 0) read by each of ``steps`` wgmmas whose start address advances ``step_bytes``."""
    return [k_columns_read(i * step_bytes)[0] for i in range(steps)]


# -----------------------------------------------------------------------------------------------------------
# the widgets
# -----------------------------------------------------------------------------------------------------------
_WARP_COLORS = ["#dbe7f3", "#e3efd9", "#f6e7cf", "#eadcf0"]
_QUAD_COLOR = "#8fb8de"
_CHOSEN_COLOR = "#f28e2b"


#: top margin of a figure whose column axis is on top: the modebar, then the axis title, then its ticks
_TOP_AXIS_MARGIN = 100


def fragment_cell_width(n: int) -> int:
    """The width in pixels of one element's cell in the explorer of a 64×n tile (at most 26)."""
    from helpers.course.widgets.figure import COLUMN

    return min(26, (COLUMN - 56 - 16) // n)


def fragment_figure_width(n: int) -> int:
    """The explorer's width for a 64×n tile: cells up to 26 px wide, and never wider than the column."""
    return 56 + 16 + n * fragment_cell_width(n)


def _thread_html(thread: int, n: int) -> str:
    w, lane = divmod(thread, 32)
    elems = thread_elements(thread, n)
    rows = sorted({r for _, r, _ in elems})
    cols = sorted({c for _, _, c in elems})
    first = ", ".join(f"d[{j}]→({r},{c})" for j, r, c in elems[:8])
    more = " …" if len(elems) > 8 else ""
    return (f"<b>thread {thread}</b> = warp {w}, lane {lane}: {n // 2} registers, rows {rows}, "
            f"{len(cols)} columns: {cols if len(cols) <= 16 else str(cols[:16])[:-1] + ', …]'}<br>"
            f"row = 16·{w} + {lane}//4 + 8·((j/2)%2); column = 8·(j/4) + 2·({lane}%4) + j%2 &nbsp; "
            f"<span style='color:#666'>{first}{more}</span><br>"
            f"quad partners (same two rows, blue): threads {[4 * (thread // 4) + i for i in range(4)]}")


def fragment_explorer_widget(n: int = 64, thread: int = 0):
    """Pick a thread to light up its accumulator elements, or click an element to see its thread and register."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets.figure import WidgetBox, controls, discrete_colorscale, integer_axis, new_figure

    n_pick = w.ToggleButtons(options=list(FRAGMENT_NS), value=n if n in FRAGMENT_NS else 64,
                             description="N", style={"button_width": "4em"})
    t_pick = w.IntSlider(value=thread, min=0, max=127, description="thread", continuous_update=True)
    info = w.HTML()
    clicked = w.HTML()
    colors = _WARP_COLORS + [_QUAD_COLOR, _CHOSEN_COLOR]
    fig = new_figure(height=560, width=fragment_figure_width(n_pick.value), top=_TOP_AXIS_MARGIN)
    fig.add_trace(go.Heatmap(z=[[0]], zmin=-0.5, zmax=5.5, colorscale=discrete_colorscale(colors),
                             showscale=False, xgap=1, ygap=1, texttemplate="%{text}", textfont={"size": 9}))
    integer_axis(fig, "y", step=8, autorange="reversed", title="row (M)")
    integer_axis(fig, "x", step=8, title="column (N)", side="top")
    fig.update_layout(margin={"b": 10})

    def redraw(*_):
        nn, t = n_pick.value, t_pick.value
        pic = fragment_picture(nn, t)
        hover = np.char.add(np.char.add("thread ", pic.threads.astype(str)),
                            np.char.add(", register ", pic.registers.astype(str)))
        with fig.batch_update():
            fig.data[0].z = pic.z
            fig.data[0].text = pic.text
            fig.data[0].customdata = hover
            fig.data[0].hovertemplate = "C[%{y}][%{x}]: %{customdata}<extra></extra>"
            fig.layout.width = fragment_figure_width(nn)
            # two-digit register numbers in cells 12 px wide ran together ("1213"): smaller type in narrow cells
            fig.data[0].textfont.size = 9 if fragment_cell_width(nn) >= 18 else 7
            fig.layout.xaxis.dtick = 8 if nn > 16 else (2 if nn == 8 else 4)
        info.value = _thread_html(t, nn)

    def on_click(trace, points, _state):
        if points.point_inds:
            r, c = int(points.ys[0]), int(points.xs[0])
            t, j = wgmma.thread_register_of(r, c, n_pick.value)
            clicked.value = f"C[{r}][{c}] is register <b>{j}</b> of thread <b>{t}</b> (warp {t // 32}, lane {t % 32})"
            t_pick.value = t

    fig.data[0].on_click(on_click)
    n_pick.observe(redraw, names="value")
    t_pick.observe(redraw, names="value")
    redraw()
    legend = w.HTML("Background: the four warps' 16-row bands. <span style='color:#f28e2b'>■</span> the chosen "
                    "thread (numbers: its register j) &nbsp; <span style='color:#8fb8de'>■</span> the other "
                    "three threads of its quad. Click any element to jump to the thread that holds it.")
    return WidgetBox([controls(n_pick, t_pick), fig, legend, info, clicked])


def descriptor_widget():
    """Step the A descriptor through a 128B-swizzled 64×64 tile and see which K columns each wgmma reads."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets.figure import WidgetBox, controls, discrete_colorscale, integer_axis, new_figure

    step_pick = w.ToggleButtons(options=[("32 bytes (right)", 32), ("16 bytes (wrong)", 16)], value=32,
                                description="step", style={"button_width": "auto"})
    k_pick = w.IntSlider(value=0, min=0, max=3, description="wgmma k")
    bits_html = w.HTML()
    fig = new_figure(height=470, width=600, top=_TOP_AXIS_MARGIN)
    fig.add_trace(go.Heatmap(z=np.zeros((64, 64)), zmin=-0.5, zmax=2.5, showscale=False, xgap=1, ygap=1,
                             colorscale=discrete_colorscale(["#eceff4", "#8fb8de", "#f28e2b"]),
                             hovertemplate="A[%{y}][k=%{x}]<extra></extra>"))
    integer_axis(fig, "y", step=8, autorange="reversed", title="row of the A tile (M)")
    integer_axis(fig, "x", step=8, title="K column of the A tile", side="top")
    fig.update_layout(margin={"b": 10})

    def redraw(*_):
        step, k = step_pick.value, k_pick.value
        z = np.zeros((64, 64))
        for i in range(4):
            cols = k_columns_read(i * step)
            value = 2 if i == k else 1
            for r in range(64):
                ok = cols[r][cols[r] >= 0]
                z[r, ok] = np.maximum(z[r, ok], value)
        with fig.batch_update():
            fig.data[0].z = z
        desc = wgmma.make_descriptor(k * step, 16, 1024, Swizzle.B128)
        row0 = k_columns_read(k * step)[0]
        rows = "".join(f"<tr><td>{f.lo}–{f.hi}</td><td>{f.name}</td><td><code>{f.raw:#x}</code></td>"
                       f"<td>{f.meaning}</td></tr>" for f in descriptor_fields(desc))
        bits_html.value = (
            f"descriptor of wgmma {k}: start = tile + {k * step} bytes → <code>{desc:#018x}</code><br>"
            f"binary: <code>{desc:064b}</code><br>"
            f"<table style='font-size:90%'><tr><th>bits</th><th>field</th><th>raw</th><th>meaning</th></tr>{rows}"
            f"</table>K columns read by this wgmma (row 0): {row0.tolist()}")

    step_pick.observe(redraw, names="value")
    k_pick.observe(redraw, names="value")
    redraw()
    legend = w.HTML("<span style='color:#f28e2b'>■</span> K columns read by the chosen wgmma &nbsp; "
                    "<span style='color:#8fb8de'>■</span> read by the other three. With a 32-byte step the four "
                    "cover K = 0..63 once each; with 16 bytes they overlap and K = 40..63 is never read.")
    return WidgetBox([controls(step_pick, k_pick), fig, legend, bits_html])
