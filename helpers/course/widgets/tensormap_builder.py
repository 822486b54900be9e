"""Tensor-map builder: every argument of ``cuTensorMapEncodeTiled`` editable, the emulator's verdict in words.

Pure computation first (tests call these without a browser):

- :class:`TensorMapSpec` — the arguments, as the driver takes them (dims innermost first, rank−1 strides);
- :func:`parse_ints` — the text boxes' "64, 64" → (64, 64), with a plain-words error;
- :func:`evaluate` — encodes through :func:`helpers.hopper.tensormap.encode_tiled` and returns a :class:`Verdict`:
  accepted (with what one load moves) or rejected (with the driver rule that failed, in plain words);
- :func:`footprint` — which elements a box at given coordinates covers, and how many fall outside;
- :func:`c_call` — the C call the spec corresponds to.

Then :func:`tensormap_builder_widget`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from helpers.hopper import tensormap

__all__ = [
    "TensorMapSpec",
    "Verdict",
    "Footprint",
    "parse_ints",
    "evaluate",
    "footprint",
    "c_call",
    "View",
    "view",
    "tensormap_builder_widget",
]

DTYPES = tuple(m.name for m in tensormap.DataType)
INTERLEAVES = tuple(m.name for m in tensormap.Interleave)
SWIZZLES = tuple(m.name for m in tensormap.Swizzle)
L2_PROMOTIONS = tuple(m.name for m in tensormap.L2Promotion)
OOB_FILLS = tuple(m.name for m in tensormap.OOBFill)


@dataclass(frozen=True)
class TensorMapSpec:
    """The arguments of ``cuTensorMapEncodeTiled``; the defaults are the course's A operand."""

    dtype: str = "BFLOAT16"  # a tensormap.DataType name
    rank: int = 2
    address: int = 0x7F3A_0000_0000
    global_dim: tuple[int, ...] = (8192, 8192)  # elements, innermost first
    global_strides: tuple[int, ...] = (16384,)  # bytes, of dimensions 1 .. rank-1
    box_dim: tuple[int, ...] = (64, 64)  # elements, innermost first
    element_strides: tuple[int, ...] = (1, 1)
    interleave: str = "NONE"  # a tensormap.Interleave name
    swizzle: str = "B128"  # a tensormap.Swizzle name
    l2_promotion: str = "NONE"  # a tensormap.L2Promotion name
    oob_fill: str = "NONE"  # a tensormap.OOBFill name


@dataclass(frozen=True)
class Verdict:
    """What the driver would say."""

    ok: bool
    message: str  # one sentence in plain words
    rule: str = ""  # the rule that failed (the emulator's TensorMapError.rule), "" when accepted
    facts: list[str] = field(default_factory=list)  # what one load moves, when accepted
    tmap: object | None = None  # the emulator's tensor map, when accepted


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """'64, 64' → (64, 64); hex (0x…) allowed; raises ValueError naming the field."""
    parts = [p for p in text.replace(";", ",").replace(" ", ",").split(",") if p]
    try:
        return tuple(int(p, 0) for p in parts)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a list of whole numbers (write e.g. '64, 64')") from None


def encode(spec: TensorMapSpec) -> tensormap.TensorMap:
    """``tensormap.encode_tiled`` with the spec's arguments (raises ``tensormap.TensorMapError``)."""
    return tensormap.encode_tiled(
        tensormap.DataType[spec.dtype],
        spec.rank,
        spec.address,
        spec.global_dim,
        spec.global_strides,
        spec.box_dim,
        spec.element_strides,
        tensormap.Interleave[spec.interleave],
        tensormap.Swizzle[spec.swizzle],
        tensormap.L2Promotion[spec.l2_promotion],
        tensormap.OOBFill[spec.oob_fill],
    )


def evaluate(spec: TensorMapSpec) -> Verdict:
    """Encode ``spec`` with the emulator; accepted → facts about one load, rejected → the rule in words."""
    try:
        tmap = encode(spec)
    except tensormap.TensorMapError as exc:
        message = str(exc).removeprefix(f"[{exc.rule}] ")
        return Verdict(False, message, rule=exc.rule)
    item = tmap.element_size
    loaded = tmap.smem_box_dim
    box_bytes = tmap.box_bytes
    covers = [-(-d // b) for d, b in zip(tmap.global_dim, tmap.box_dim, strict=True)]
    align = {0: 128, 32: 256, 64: 512, 128: 1024}[tmap.swizzle_span]
    facts = [
        f"one load writes {' × '.join(map(str, reversed(loaded)))} elements = {box_bytes:,} bytes of shared "
        f"memory, and reports exactly that many bytes to the mbarrier (expect_tx)",
        f"{math.prod(covers):,} boxes cover the tensor ({' × '.join(map(str, reversed(covers)))}, outermost "
        "first)",
        f"destination in shared memory: {align}-byte aligned"
        + (f" (the swizzle pattern repeats every {align} bytes)" if tmap.swizzle_span else ""),
        f"each box row is {loaded[0] * item} bytes"
        + (f"; {spec.swizzle} swizzle permutes its 16-byte chunks" if tmap.swizzle_span else ""),
    ]
    if any(e != 1 for e in tmap.element_strides[1:]):
        facts.append("element strides > 1 skip elements along dims ≥ 1: fewer elements land than the box spans")
    if tmap.element_strides[0] != 1:
        facts.append(f"the element stride of dim 0 ({tmap.element_strides[0]}) is accepted but ignored by the "
                     "hardware: dim 0 always moves box_dim[0] contiguous elements")
    return Verdict(True, "The driver would accept this tensor map.", facts=facts, tmap=tmap)


@dataclass(frozen=True)
class Footprint:
    """The elements a box at ``coords`` covers, in the first two dimensions."""

    lo: tuple[int, int]  # first element (dim 0, dim 1)
    hi: tuple[int, int]  # one past the last
    inside: int  # elements loaded from the tensor
    outside: int  # elements filled (zero, or NaN with NAN_REQUEST_ZERO_FMA)


def footprint(spec: TensorMapSpec, coords: tuple[int, ...]) -> Footprint:
    """Which elements a load at ``coords`` (innermost first) covers; counts those inside and outside."""
    if len(coords) != spec.rank or len(spec.box_dim) != spec.rank or len(spec.global_dim) != spec.rank:
        raise ValueError(f"a rank-{spec.rank} load takes {spec.rank} coordinates, got {len(coords)}")
    inside_per_dim, total_per_dim = [], []
    for i, (c, b, e, d) in enumerate(zip(coords, spec.box_dim, spec.element_strides, spec.global_dim,
                                         strict=True)):
        e = 1 if i == 0 else max(e, 1)  # the hardware ignores dim 0's element stride
        idx = c + e * np.arange(-(-b // e))
        inside_per_dim.append(int(((idx >= 0) & (idx < d)).sum()))
        total_per_dim.append(len(idx))
    inside, total = math.prod(inside_per_dim), math.prod(total_per_dim)
    lo = (coords[0], coords[1] if spec.rank > 1 else 0)
    hi = (coords[0] + spec.box_dim[0], (coords[1] + spec.box_dim[1]) if spec.rank > 1 else 1)
    return Footprint(lo, hi, inside, total - inside)


def c_call(spec: TensorMapSpec) -> str:
    """The ``cuTensorMapEncodeTiled`` call for ``spec``, as C."""
    dt = {"U4_16_ALIGN8B": "16U4_ALIGN8B", "U4_16_ALIGN16B": "16U4_ALIGN16B",
          "U6_16_ALIGN16B": "16U6_ALIGN16B"}.get(spec.dtype, spec.dtype)
    il = {"B16": "16B", "B32": "32B"}.get(spec.interleave, spec.interleave)
    sw = spec.swizzle  # B128 -> 128B, B128_ATOM_32B -> 128B_ATOM_32B
    if spec.swizzle.startswith("B"):
        head, _, rest = spec.swizzle[1:].partition("_")
        sw = head + "B" + ("_" + rest if rest else "")

    def arr(values: tuple[int, ...], ctype: str) -> str:
        return f"({ctype}[]){{{', '.join(str(v) for v in values)}}}"

    return "\n".join([
        "cuTensorMapEncodeTiled(&tmap,",
        f"    CU_TENSOR_MAP_DATA_TYPE_{dt}, /*rank*/ {spec.rank}, (void*){spec.address:#x},",
        f"    /*globalDim*/     {arr(spec.global_dim, 'cuuint64_t')},",
        f"    /*globalStrides*/ {arr(spec.global_strides, 'cuuint64_t')},   // rank-1 of them, bytes",
        f"    /*boxDim*/        {arr(spec.box_dim, 'cuuint32_t')},",
        f"    /*elementStrides*/{arr(spec.element_strides, 'cuuint32_t')},",
        f"    CU_TENSOR_MAP_INTERLEAVE_{il}, CU_TENSOR_MAP_SWIZZLE_{sw},",
        f"    CU_TENSOR_MAP_L2_PROMOTION_{spec.l2_promotion}, CU_TENSOR_MAP_FLOAT_OOB_FILL_{spec.oob_fill});",
    ])


# -----------------------------------------------------------------------------------------------------------
# the widget
# -----------------------------------------------------------------------------------------------------------
def _rect(lo: tuple[float, float], hi: tuple[float, float]) -> tuple[list[float], list[float]]:
    x0, y0 = lo
    x1, y1 = hi
    return [x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0]


@dataclass(frozen=True)
class View:
    """What the builder's picture shows: the x and y ranges of the main plot, and whether the whole tensor is
    drawn beside it (when the main plot is zoomed to the box)."""

    x: tuple[float, float]
    y: tuple[float, float]
    zoomed: bool


def view(spec: TensorMapSpec, f: Footprint, around_box: bool = True) -> View:
    """Zoom to the box (it then takes about a quarter of each side) when the whole tensor would make it a dot;
    else, or when ``around_box`` is False, show the whole tensor and the box."""
    d0, d1 = spec.global_dim[0], (spec.global_dim[1] if spec.rank > 1 else 1)
    (bx0, by0), (bx1, by1) = f.lo, f.hi
    bw, bh = max(bx1 - bx0, 1), max(by1 - by0, 1)
    side = max(4 * bw, 4 * bh)  # a square window, centred on the box
    cx, cy = (bx0 + bx1) / 2, (by0 + by1) / 2
    window = ((cx - side / 2, cx + side / 2), (cy - side / 2, cy + side / 2))
    whole = ((min(0, bx0), max(d0, bx1)), (min(0, by0), max(d1, by1)))
    covers = window[0][0] <= whole[0][0] and window[0][1] >= whole[0][1] and \
        window[1][0] <= whole[1][0] and window[1][1] >= whole[1][1]
    if not around_box or covers:
        pad = 0.04 * max(whole[0][1] - whole[0][0], whole[1][1] - whole[1][0])
        return View((whole[0][0] - pad, whole[0][1] + pad), (whole[1][0] - pad, whole[1][1] + pad), False)
    return View(window[0], window[1], True)


def tensormap_builder_widget(spec: TensorMapSpec | None = None):
    """Edit every argument of a tiled tensor map; see the driver's verdict and where a box lands."""
    import ipywidgets as w

    from helpers.course.widgets.figure import WidgetBox, new_figure

    spec = spec or TensorMapSpec()
    lay = w.Layout(width="21em")
    sty = {"description_width": "8em"}
    dtype_w = w.Dropdown(options=DTYPES, value=spec.dtype, description="dataType", style=sty, layout=lay)
    rank_w = w.BoundedIntText(spec.rank, min=0, max=6, description="tensorRank", style=sty, layout=lay)
    addr_w = w.Text(f"{spec.address:#x}", description="globalAddress", style=sty, layout=lay)
    dim_w = w.Text(", ".join(map(str, spec.global_dim)), description="globalDim", style=sty, layout=lay)
    stride_w = w.Text(", ".join(map(str, spec.global_strides)), description="globalStrides", style=sty, layout=lay)
    box_w = w.Text(", ".join(map(str, spec.box_dim)), description="boxDim", style=sty, layout=lay)
    es_w = w.Text(", ".join(map(str, spec.element_strides)), description="elementStrides", style=sty, layout=lay)
    il_w = w.Dropdown(options=INTERLEAVES, value=spec.interleave, description="interleave", style=sty, layout=lay)
    sw_w = w.Dropdown(options=SWIZZLES, value=spec.swizzle, description="swizzle", style=sty, layout=lay)
    l2_w = w.Dropdown(options=L2_PROMOTIONS, value=spec.l2_promotion, description="l2Promotion", style=sty,
                      layout=lay)
    oob_w = w.Dropdown(options=OOB_FILLS, value=spec.oob_fill, description="oobFill", style=sty, layout=lay)
    coord_w = w.Text("0, 0", description="load at coords", style=sty, layout=lay)
    zoom_w = w.ToggleButtons(options=["around the box", "whole tensor"], value="around the box",
                             style={"button_width": "auto"}, layout=w.Layout(margin="0 0 0 56px"))
    verdict = w.HTML()
    code = w.HTML()

    fig = new_figure(height=390, width=540)
    styles = [("tensor", "#4c78a8", "rgba(76,120,168,0.12)"), ("box: filled (out of bounds)", "#e45756",
              "rgba(228,87,86,0.35)"), ("box: loaded from the tensor", "#54a24b", "rgba(84,162,75,0.6)")]
    for axes in ("", "2"):  # the main plot, then the whole tensor beside it
        for name, line, fill in styles:
            fig.add_scatter(x=[], y=[], mode="lines", fill="toself", name=name, line={"color": line, "width": 1.5},
                            fillcolor=fill, showlegend=not axes, xaxis=f"x{axes}", yaxis=f"y{axes}",
                            hoverinfo="skip")
    fig.add_scatter(x=[], y=[], mode="lines", name="zoomed window", line={"color": "#d62728", "width": 1.5},
                    showlegend=False, xaxis="x2", yaxis="y2", hoverinfo="skip")
    fig.update_layout(
        showlegend=True, legend={"orientation": "h", "y": -0.16, "x": 0},
        margin={"t": 64, "b": 70},
        title_text="where the box lands (dimensions 0 and 1)",
        xaxis={"title_text": "dimension 0 (elements along a row)", "domain": [0, 0.7]},
        yaxis={"title_text": "dimension 1 (rows)"},
        xaxis2={"domain": [0.78, 1], "anchor": "y2", "showticklabels": False, "showgrid": False, "zeroline": False,
                "title_text": "whole tensor", "title_font_size": 11},
        yaxis2={"domain": [0.55, 1], "anchor": "x2", "autorange": "reversed", "showticklabels": False,
                "showgrid": False, "zeroline": False, "scaleanchor": "x2"},
    )

    def current() -> TensorMapSpec:
        return TensorMapSpec(
            dtype=dtype_w.value,
            rank=rank_w.value,
            address=parse_ints(addr_w.value, "globalAddress")[0] if addr_w.value.strip() else 0,
            global_dim=parse_ints(dim_w.value, "globalDim"),
            global_strides=parse_ints(stride_w.value, "globalStrides"),
            box_dim=parse_ints(box_w.value, "boxDim"),
            element_strides=parse_ints(es_w.value, "elementStrides"),
            interleave=il_w.value,
            swizzle=sw_w.value,
            l2_promotion=l2_w.value,
            oob_fill=oob_w.value,
        )

    def draw(s: TensorMapSpec, f: Footprint) -> None:
        d0, d1 = s.global_dim[0], (s.global_dim[1] if s.rank > 1 else 1)
        ilo = (max(f.lo[0], 0), max(f.lo[1], 0))
        ihi = (min(f.hi[0], d0), min(f.hi[1], d1))
        inside = _rect(ilo, ihi) if ilo[0] < ihi[0] and ilo[1] < ihi[1] else ([], [])
        v = view(s, f, zoom_w.value == "around the box")
        with fig.batch_update():
            for base in (0, 3):
                fig.data[base].x, fig.data[base].y = _rect((0, 0), (d0, d1))
                fig.data[base + 1].x, fig.data[base + 1].y = _rect(f.lo, f.hi)
                fig.data[base + 2].x, fig.data[base + 2].y = inside
            fig.data[6].x, fig.data[6].y = _rect((v.x[0], v.y[0]), (v.x[1], v.y[1]))
            for trace in fig.data[3:]:
                trace.visible = v.zoomed
            fig.layout.xaxis2.visible = fig.layout.yaxis2.visible = v.zoomed
            fig.layout.xaxis.domain = [0, 0.7] if v.zoomed else [0, 1]
            fig.layout.xaxis.autorange = False
            fig.layout.xaxis.range = list(v.x)
            fig.layout.yaxis.autorange = False
            fig.layout.yaxis.range = [v.y[1], v.y[0]]  # reversed: row 0 at the top
            fig.layout.title.text = ("where the box lands, zoomed (dimensions 0 and 1)" if v.zoomed else
                                     "where the box lands (dimensions 0 and 1)")

    def redraw(*_):
        try:
            s = current()
        except ValueError as exc:
            verdict.value = f"<b style='color:#c0392b'>✗ Cannot read the arguments.</b> {exc}"
            return
        v = evaluate(s)
        code.value = f"<pre style='font-size:11px;line-height:1.3'>{c_call(s)}</pre>"
        if not v.ok:
            verdict.value = (f"<b style='color:#c0392b'>✗ The driver would reject this</b> "
                             f"(CUDA_ERROR_INVALID_VALUE). Rule <code>{v.rule}</code>: {v.message}")
            return
        html = "<b style='color:#2e7d32'>✓ The driver would accept this.</b><ul>"
        html += "".join(f"<li>{f}</li>" for f in v.facts)
        try:
            coords = parse_ints(coord_w.value, "coords")
            f = footprint(s, coords)
        except ValueError as exc:
            verdict.value = html + f"</ul>{exc}"
            return
        html += (f"<li>a load at {coords}: {f.inside:,} elements from the tensor, {f.outside:,} filled with "
                 f"{'NaN' if s.oob_fill != 'NONE' else 'zeros'}; the mbarrier still counts the whole box</li></ul>")
        verdict.value = html
        draw(s, f)

    for c in (dtype_w, rank_w, addr_w, dim_w, stride_w, box_w, es_w, il_w, sw_w, l2_w, oob_w, coord_w, zoom_w):
        c.observe(redraw, names="value")
    redraw()
    left = w.VBox([dtype_w, rank_w, addr_w, dim_w, stride_w, box_w, es_w, il_w, sw_w, l2_w, oob_w, coord_w])
    return WidgetBox([w.HBox([left, w.VBox([fig, zoom_w])]), verdict, code])


def with_changes(spec: TensorMapSpec, **changes) -> TensorMapSpec:
    """A copy of ``spec`` with some arguments changed (for "try it yourself" cells)."""
    return replace(spec, **changes)
