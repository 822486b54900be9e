"""The big picture of a tiled GEMM: which tiles one thread block reads and writes, and what it costs.

Pure computation first (tests call these without a browser):

- :class:`TilePlan` — how C = A·B is cut into BM×BN output tiles and BK-wide K steps;
- :func:`block_step` — the A, B and C rectangles (and TMA coordinates) of one block at one K step;
- :func:`grid_cells` — the pictures the widget draws (one cell per tile, aggregated past 64 per side);
- :func:`gemm_costs`, :func:`tile_costs`, :func:`ridge_point`, :func:`roofline` — FLOPs, bytes, intensity;
- :func:`tiled_matmul` — the block/K-step/wgmma loop nest run in numpy, to show it equals ``A @ B``.

Then :func:`tile_grid_widget`, the ipywidgets + plotly view of all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "H100_PEAK_BF16",
    "H100_HBM_BW",
    "WGMMA_M",
    "WGMMA_K",
    "TilePlan",
    "Rect",
    "BlockStep",
    "Costs",
    "block_step",
    "grid_cells",
    "gemm_costs",
    "tile_costs",
    "ridge_point",
    "roofline",
    "tiled_matmul",
    "tile_frame",
    "tile_grid_widget",
]

#: dense bf16 tensor-core peak of an H100 SXM (datasheet), FLOP/s
H100_PEAK_BF16 = 989e12
#: HBM3 bandwidth of an H100 SXM (datasheet), bytes/s
H100_HBM_BW = 3.35e12
#: rows of one wgmma instruction (one warpgroup of 128 threads) and its K for 16-bit inputs
WGMMA_M = 64
WGMMA_K = 16

# cell values of the pictures
UNTOUCHED, EARLIER, NOW = 0, 1, 2


@dataclass(frozen=True)
class TilePlan:
    """C (M×N) = A (M×K) · B (K×N), one thread block per BM×BN tile of C, K walked in BK-wide steps."""

    M: int = 8192
    N: int = 8192
    K: int = 8192
    BM: int = 64
    BN: int = 64
    BK: int = 64

    def __post_init__(self) -> None:
        for name in ("M", "N", "K", "BM", "BN", "BK"):
            v = getattr(self, name)
            if not isinstance(v, int | np.integer) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.BM % WGMMA_M:
            raise ValueError(f"BM={self.BM}: one wgmma covers 64 rows, so BM must be a multiple of 64")
        if self.BN % 8 or self.BN > 256:
            raise ValueError(f"BN={self.BN}: wgmma's N is a multiple of 8 from 8 to 256")
        if self.BK % WGMMA_K:
            raise ValueError(f"BK={self.BK}: one bf16 wgmma consumes K=16, so BK must be a multiple of 16")

    @property
    def grid_m(self) -> int:
        """Tile rows of C (blocks along M), rounding up: a partial last tile still needs a block."""
        return -(-self.M // self.BM)

    @property
    def grid_n(self) -> int:
        """Tile columns of C (blocks along N)."""
        return -(-self.N // self.BN)

    @property
    def blocks(self) -> int:
        """Thread blocks launched: one per C tile."""
        return self.grid_m * self.grid_n

    @property
    def k_steps(self) -> int:
        """Iterations of each block's K loop."""
        return -(-self.K // self.BK)

    @property
    def warpgroups(self) -> int:
        """Consumer warpgroups per block: each owns 64 rows of the tile."""
        return self.BM // WGMMA_M

    @property
    def wgmma_per_step(self) -> int:
        """wgmma instructions per K step for the whole block (m64nBNk16, BK/16 per warpgroup)."""
        return self.warpgroups * (self.BK // WGMMA_K)

    @property
    def wgmma_shape(self) -> str:
        return f"m64n{self.BN}k16"

    @property
    def accumulators_per_thread(self) -> int:
        """fp32 accumulator registers per thread: BM·BN values over 128·BM/64 threads = BN/2."""
        return self.BM * self.BN // (128 * self.warpgroups)

    @property
    def smem_per_stage(self) -> int:
        """Bytes of shared memory one K step needs: a BM×BK tile of A and a BK×BN tile of B, bf16."""
        return 2 * (self.BM * self.BK + self.BK * self.BN)

    def check_block(self, bm: int, bn: int, k: int | None = None) -> None:
        if not (0 <= bm < self.grid_m and 0 <= bn < self.grid_n):
            raise ValueError(f"block ({bm}, {bn}) is outside the {self.grid_m}×{self.grid_n} grid")
        if k is not None and not 0 <= k < self.k_steps:
            raise ValueError(f"K step {k} is outside 0..{self.k_steps - 1}")


@dataclass(frozen=True)
class Rect:
    """Half-open element ranges [r0, r1) × [c0, c1) of a matrix; ``full`` is False for a clipped edge tile."""

    r0: int
    r1: int
    c0: int
    c1: int
    full: bool = True

    @property
    def shape(self) -> tuple[int, int]:
        return self.r1 - self.r0, self.c1 - self.c0

    def __str__(self) -> str:
        return f"[{self.r0}:{self.r1}, {self.c0}:{self.c1}]"


@dataclass(frozen=True)
class BlockStep:
    """What block (bm, bn) touches at K step k."""

    a: Rect  # rows of A (M) × columns of A (K)
    b: Rect  # rows of B (K) × columns of B (N)
    c: Rect  # rows of C (M) × columns of C (N)
    tma_a: tuple[int, int]  # TMA coordinates of the A box, innermost first: (k offset, m offset)
    tma_b: tuple[int, int]  # of the B box, B stored K-major (as Bᵀ, N×K): (k offset, n offset)
    last: bool  # the last K step: after it the block stores its C tile


def _rect(r0: int, rows: int, r_max: int, c0: int, cols: int, c_max: int) -> Rect:
    r1, c1 = min(r0 + rows, r_max), min(c0 + cols, c_max)
    return Rect(r0, r1, c0, c1, full=(r1 - r0 == rows and c1 - c0 == cols))


def block_step(plan: TilePlan, bm: int, bn: int, k: int) -> BlockStep:
    """The A, B and C rectangles block (bm, bn) touches at K step k, clipped to the matrices."""
    plan.check_block(bm, bn, k)
    m0, n0, k0 = bm * plan.BM, bn * plan.BN, k * plan.BK
    return BlockStep(
        a=_rect(m0, plan.BM, plan.M, k0, plan.BK, plan.K),
        b=_rect(k0, plan.BK, plan.K, n0, plan.BN, plan.N),
        c=_rect(m0, plan.BM, plan.M, n0, plan.BN, plan.N),
        tma_a=(k0, m0),
        tma_b=(k0, n0),
        last=k == plan.k_steps - 1,
    )


def _fold(z: np.ndarray, max_cells: int) -> tuple[np.ndarray, int, int]:
    """Shrink a picture to at most max_cells per side, keeping the largest value of each group."""
    gr = max(1, -(-z.shape[0] // max_cells))
    gc = max(1, -(-z.shape[1] // max_cells))
    if gr == gc == 1:
        return z, 1, 1
    rows, cols = -(-z.shape[0] // gr), -(-z.shape[1] // gc)
    padded = np.zeros((rows * gr, cols * gc), dtype=z.dtype)
    padded[: z.shape[0], : z.shape[1]] = z
    return padded.reshape(rows, gr, cols, gc).max(axis=(1, 3)), gr, gc


@dataclass(frozen=True)
class GridCells:
    """The three pictures: one cell per tile (or per group of tiles when folded)."""

    a: np.ndarray  # grid_m × k_steps: 0 untouched, 1 read at an earlier K step, 2 read now
    b: np.ndarray  # k_steps × grid_n: same
    c: np.ndarray  # grid_m × grid_n: 1 accumulating in registers, 2 stored (after the last step)
    fold_a: tuple[int, int]  # tiles per cell (rows, cols) in each picture; (1, 1) when not folded
    fold_b: tuple[int, int]
    fold_c: tuple[int, int]


def grid_cells(plan: TilePlan, bm: int, bn: int, k: int, max_cells: int = 64) -> GridCells:
    """What block (bm, bn) has read and written by K step k, as three small tile-level pictures."""
    plan.check_block(bm, bn, k)
    a = np.zeros((plan.grid_m, plan.k_steps), dtype=np.int8)
    a[bm, :k] = EARLIER
    a[bm, k] = NOW
    b = np.zeros((plan.k_steps, plan.grid_n), dtype=np.int8)
    b[:k, bn] = EARLIER
    b[k, bn] = NOW
    c = np.zeros((plan.grid_m, plan.grid_n), dtype=np.int8)
    c[bm, bn] = NOW if k == plan.k_steps - 1 else EARLIER
    fa, fb, fc = _fold(a, max_cells), _fold(b, max_cells), _fold(c, max_cells)
    return GridCells(fa[0], fb[0], fc[0], fa[1:], fb[1:], fc[1:])


@dataclass(frozen=True)
class Costs:
    """Work and minimum memory traffic of a matrix product."""

    flops: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP per byte of memory traffic."""
        return self.flops / self.bytes


def gemm_costs(M: int, N: int, K: int, in_bytes: int = 2, out_bytes: int = 4) -> Costs:
    """The whole GEMM: 2·M·N·K FLOPs (a multiply and an add each); A and B read once, C written once."""
    return Costs(2 * M * N * K, in_bytes * (M * K + K * N), out_bytes * M * N)


def tile_costs(plan: TilePlan, in_bytes: int = 2, out_bytes: int = 4) -> Costs:
    """One block on its own (a full tile): BM rows of A and BN columns of B over all of K, one C tile."""
    BM, BN, K = plan.BM, plan.BN, plan.K
    return Costs(2 * BM * BN * K, in_bytes * (BM * K + K * BN), out_bytes * BM * BN)


def _roofs(peak_flops: float | None, bandwidth: float | None) -> tuple[float, float]:
    from helpers.gpu.hardware import this_gpu

    part = this_gpu()
    return peak_flops or part.peak_bf16_tflops * 1e12, bandwidth or part.hbm_tbs * 1e12


def ridge_point(peak_flops: float | None = None, bandwidth: float | None = None) -> float:
    """The intensity (FLOP/B) where a kernel stops being memory-bound: peak FLOP/s ÷ bytes/s (the GPU here, or the
    emulated part, by default)."""
    peak, bw = _roofs(peak_flops, bandwidth)
    return peak / bw


def roofline(intensity: float, peak_flops: float | None = None, bandwidth: float | None = None) -> float:
    """Attainable FLOP/s at a given intensity: the lower of the compute roof and bandwidth × intensity."""
    peak, bw = _roofs(peak_flops, bandwidth)
    return min(peak, bw * intensity)


def tiled_matmul(a: np.ndarray, b: np.ndarray, BM: int = 64, BN: int = 64, BK: int = 64) -> np.ndarray:
    """C = A·B computed the way the kernel does: per block, per K step, per 16-wide wgmma, fp32 accumulate.

    Edge tiles are padded with zeros, as TMA fills out-of-bounds elements, so any M, N, K work.
    """
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not multiply")
    M, K = a.shape
    N = b.shape[1]
    plan = TilePlan(M, N, K, BM, BN, BK)
    c = np.full((M, N), np.nan, dtype=np.float32)  # every element must be written by some block
    for bm in range(plan.grid_m):
        for bn in range(plan.grid_n):
            acc = np.zeros((BM, BN), dtype=np.float32)  # the block's registers, zeroed once
            for k in range(plan.k_steps):
                s = block_step(plan, bm, bn, k)
                sa = np.zeros((BM, BK), dtype=np.float32)  # shared memory, OOB filled with zeros
                sb = np.zeros((BK, BN), dtype=np.float32)
                sa[: s.a.shape[0], : s.a.shape[1]] = a[s.a.r0 : s.a.r1, s.a.c0 : s.a.c1]
                sb[: s.b.shape[0], : s.b.shape[1]] = b[s.b.r0 : s.b.r1, s.b.c0 : s.b.c1]
                for kk in range(0, BK, WGMMA_K):  # BK/16 wgmma instructions
                    acc += sa[:, kk : kk + WGMMA_K] @ sb[kk : kk + WGMMA_K, :]
            r = s.c  # the store: only the part of the tile inside C
            c[r.r0 : r.r1, r.c0 : r.c1] = acc[: r.shape[0], : r.shape[1]]
    return c


# -----------------------------------------------------------------------------------------------------------
# the widget
# -----------------------------------------------------------------------------------------------------------
_COLORS = [[0.0, "#eceff4"], [0.33, "#eceff4"], [0.34, "#8fb8de"], [0.66, "#8fb8de"], [0.67, "#f28e2b"],
           [1.0, "#f28e2b"]]


_TITLES = ("A · {}×{} tiles", "B · {}×{} tiles", "C · {}×{} tiles")


def tile_frame(tile: tuple[int, int], fold: tuple[int, int], cells: tuple[int, int]) -> dict[str, float]:
    """The frame drawn around tile (row, column) of a picture folded ``fold`` tiles per cell, ``cells`` cells
    big: the cell's edges, widened to at least 1/16 of the picture so it stays visible in a 128×128 grid."""
    out = {}
    for axis, index, f, n in (("y", tile[0], fold[0], cells[0]), ("x", tile[1], fold[1], cells[1])):
        cell = index // f
        pad = max(0.0, n / 32 - 0.5)  # in cells, each side
        out[f"{axis}0"] = (cell - 0.5 - pad) * f
        out[f"{axis}1"] = (cell + 0.5 + pad) * f
    return out


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def summary_html(plan: TilePlan, bm: int, bn: int, k: int) -> str:
    """The text under the pictures: what this block does now and what the whole GEMM costs."""
    s = block_step(plan, bm, bn, k)
    g, t = gemm_costs(plan.M, plan.N, plan.K), tile_costs(plan)
    from helpers.gpu.hardware import this_gpu

    ridge, part = ridge_point(), this_gpu().name
    edge = "" if s.c.full else " (a partial edge tile: TMA zero-fills the missing rows/columns)"
    after = "then stores its C tile" if s.last else f"{plan.k_steps - 1 - k} more K steps before the store"
    lines = [
        f"<b>{plan.blocks:,} blocks</b> ({plan.grid_m}×{plan.grid_n} tiles of {plan.BM}×{plan.BN}), "
        f"each with <b>{plan.k_steps} K step{'s' if plan.k_steps > 1 else ''}</b> of {plan.BK}.",
        f"Block ({bm}, {bn}) owns C{s.c}{edge}. At K step {k} it reads A{s.a} and B{s.b} "
        f"(TMA coordinates A {s.tma_a}, Bᵀ {s.tma_b}), issues {plan.wgmma_per_step} × wgmma.{plan.wgmma_shape}, "
        f"{after}.",
        f"{plan.accumulators_per_thread} fp32 accumulators per thread · "
        f"{_fmt_bytes(plan.smem_per_stage)} of shared memory per K step.",
        f"Whole GEMM: {g.flops / 1e12:,.3f} TFLOP, at least {_fmt_bytes(g.bytes)} of traffic → "
        f"{g.intensity:,.0f} FLOP/B. One block alone: {t.flops / 1e6:,.1f} MFLOP over "
        f"{_fmt_bytes(t.bytes)} → {t.intensity:,.1f} FLOP/B. {part} ridge point ≈ {ridge:,.0f} FLOP/B.",
    ]
    return "<br>".join(lines)


def tile_grid_widget(M: int = 8192, N: int = 8192, K: int = 8192, BM: int = 64, BN: int = 64, BK: int = 64,
                     block: tuple[int, int] | None = None, k_step: int | None = None):
    """Pick a block and a K step; see which A and B tiles it reads and which C tile it writes.

    ``block`` (tile row, tile column) and ``k_step`` set where the view starts (default: a block in the
    middle of C, halfway through its K loop).
    """
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets.figure import WidgetBox, controls, new_figure

    sizes = [2**i for i in range(6, 15)] + [3000, 5000, 6144, 12288]
    sizes = sorted(set(sizes) | {M, N, K})
    style = {"description_width": "3em"}
    m_s = w.SelectionSlider(options=sizes, value=M, description="M", style=style, continuous_update=False)
    n_s = w.SelectionSlider(options=sizes, value=N, description="N", style=style, continuous_update=False)
    k_s = w.SelectionSlider(options=sizes, value=K, description="K", style=style, continuous_update=False)
    # every slider sends its value when let go: a drag sent each value it passed, and on a busy laptop the redraws
    # queued behind one another (the figure froze for seconds; a slider's readout fell behind its knob)
    bm_s = w.SelectionSlider(options=[64, 128, 192, 256], value=BM, description="BM", style=style,
                             continuous_update=False)
    bn_s = w.SelectionSlider(options=[16, 32, 64, 128, 192, 256], value=BN, description="BN", style=style,
                             continuous_update=False)
    bk_s = w.SelectionSlider(options=[16, 32, 64, 128], value=BK, description="BK", style=style,
                             continuous_update=False)
    start = TilePlan(M, N, K, BM, BN, BK)
    r0, c0 = block if block is not None else (start.grid_m // 3, (2 * start.grid_n) // 3)
    k0 = start.k_steps // 2 if k_step is None else k_step
    start.check_block(r0, c0, k0)
    wide = {"description_width": "5em"}
    row_s = w.IntSlider(r0, 0, max(start.grid_m - 1, 1), description="tile row", style=wide, continuous_update=False)
    col_s = w.IntSlider(c0, 0, max(start.grid_n - 1, 1), description="tile col", style=wide, continuous_update=False)
    step_s = w.IntSlider(k0, 0, max(start.k_steps - 1, 1), description="K step", style=wide,
                         continuous_update=False)
    info = w.HTML()

    fig = new_figure(height=380, rows=1, cols=3, subplot_titles=("A", "B", "C"), horizontal_spacing=0.08)
    for col in (1, 2, 3):
        fig.add_trace(go.Heatmap(z=[[0]], zmin=0, zmax=2, colorscale=_COLORS, showscale=False, xgap=1,
                                 ygap=1, hovertemplate="tile row %{y}, tile col %{x}<extra></extra>"),
                      row=1, col=col)
        fig.update_yaxes(autorange="reversed", row=1, col=col)
    for col, (x, y) in enumerate((("K step", "tile row"), ("tile col", "K step"), ("tile col", "tile row")), 1):
        fig.update_xaxes(title_text=x, title_standoff=4, row=1, col=col)
        fig.update_yaxes(title_text=y, title_standoff=4, row=1, col=col)
    for col in (1, 2, 3):  # a frame around this step's tile, so it is found at any size of the grid
        fig.add_shape(type="rect", x0=0, x1=1, y0=0, y1=1, line={"color": "#d62728", "width": 2}, row=1, col=col)
    def plan() -> TilePlan:
        return TilePlan(m_s.value, n_s.value, k_s.value, bm_s.value, bn_s.value, bk_s.value)

    busy = []

    def redraw(*_):
        if busy:  # slider limits changed by this very function
            return
        busy.append(True)
        try:
            _redraw()
        finally:
            busy.clear()

    def _redraw():
        p = plan()
        for s, top in ((row_s, p.grid_m - 1), (col_s, p.grid_n - 1), (step_s, p.k_steps - 1)):
            s.value = min(s.value, top)
            s.max = max(top, 1)
            s.disabled = top == 0
        bm, bn, k = row_s.value, col_s.value, step_s.value
        cells = grid_cells(p, bm, bn, k)
        folds = (cells.fold_a, cells.fold_b, cells.fold_c)
        dims = ((p.grid_m, p.k_steps), (p.k_steps, p.grid_n), (p.grid_m, p.grid_n))
        now = ((bm, k), (k, bn), (bm, bn))  # (row, column) of this step's tile in each picture
        with fig.batch_update():
            for i, (z, fold) in enumerate(zip((cells.a, cells.b, cells.c), folds, strict=True)):
                fig.data[i].z = z
                fig.data[i].x = np.arange(z.shape[1]) * fold[1]
                fig.data[i].y = np.arange(z.shape[0]) * fold[0]
                fig.layout.shapes[i].update(tile_frame(now[i], fold, z.shape))
                note = "" if fold == (1, 1) else f" ({fold[0]}×{fold[1]} per cell)"
                fig.layout.annotations[i].text = _TITLES[i].format(*dims[i]) + note
        info.value = summary_html(p, bm, bn, k)

    def on_click(trace, points, _state):
        if points.point_inds:
            r, c = points.ys[0], points.xs[0]
            row_s.value, col_s.value = int(r), int(c)

    fig.data[2].on_click(on_click)
    for s in (m_s, n_s, k_s, bm_s, bn_s, bk_s, row_s, col_s, step_s):
        s.observe(redraw, names="value")
    redraw()
    sliders = controls(w.VBox([m_s, n_s, k_s]), w.VBox([bm_s, bn_s, bk_s]), w.VBox([row_s, col_s, step_s]))
    legend = w.HTML("<span style='color:#f28e2b'>■</span> this K step &nbsp; "
                    "<span style='color:#8fb8de'>■</span> earlier K steps (A, B) / accumulating in registers (C)"
                    " &nbsp; <span style='color:#d62728'>□</span> this step's tiles. C turns orange at the last "
                    "K step, when the tile is stored. Click a C cell to pick its block.")
    return WidgetBox([sliders, fig, legend, info])
