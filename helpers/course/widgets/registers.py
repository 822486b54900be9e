"""The register budget of a warp-specialized block: what ``setmaxnreg`` may ask for, and what breaks.

Pure computation first (tests and the lab's grader call these without a browser):

- :func:`entry_registers` — registers per thread a kernel starts with, from its ``__launch_bounds__``;
- :func:`setmaxnreg_verdict` — do per-warpgroup setmaxnreg counts work in such a block? The first broken rule;
- :func:`budget` — everything the calculator shows for one choice (pool, asked, verdict, what happens).

Then :func:`register_budget_widget`, the ipywidgets + plotly calculator.

The numbers are the H100's: 65536 32-bit registers per SM; setmaxnreg counts are multiples of 8 in 24..256 (ptxas
refuses the others, the multiple-of-8 rule first); with ``__launch_bounds__(threads, 1)`` ptxas starts every thread
with the register file shared out, rounded down to a multiple of 8 (at most 255): 168 for 384 threads (measured with
NVRTC 13 on sm_90a, like the C7508 warning below). Without the minimum-blocks argument ptxas cannot tell the count
at entry and ignores every setmaxnreg (warning C7508). ``setmaxnreg.inc`` waits until the block's pool has the
registers, so counts adding up to more than the pool hang.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REGISTER_FILE",
    "VERDICTS",
    "entry_registers",
    "setmaxnreg_verdict",
    "Budget",
    "budget",
    "register_budget_widget",
    "load_measured",
    "MEASURED",
]

#: what tools/h100/setmaxnreg.py measured on an H100 (budgets that hang, the early-release corruption)
MEASURED = Path(__file__).resolve().parents[3] / "tests" / "data" / "setmaxnreg_h100.json"


def load_measured(path: Path | str = MEASURED) -> dict[str, Any] | None:
    """The H100 capture of setmaxnreg budgets and early releases, or None when it was not captured yet."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None

REGISTER_FILE = 65536  # 32-bit registers per SM
VERDICTS = ("ok", "not a multiple of 8", "outside 24..256", "over the pool")
C7508 = "(C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry."


def entry_registers(threads: int, min_blocks: int | None = 1) -> int | None:
    """Registers per thread at entry for ``__launch_bounds__(threads, min_blocks)``, as ptxas sets them when some
    warpgroup raises its count to 256; None without ``min_blocks`` (ptxas then cannot tell, and ignores
    setmaxnreg). Measured with NVRTC 13: (384, 1) → 168, (384, 2) → 80, (512, 1) → 128, (640, 1) → 96."""
    if min_blocks is None:
        return None
    return min(255, REGISTER_FILE // (threads * min_blocks) // 8 * 8)


def setmaxnreg_verdict(entry: int, counts: list[int]) -> str:
    """Whether per-warpgroup setmaxnreg ``counts`` work in a block whose threads start with ``entry`` registers.

    The first broken rule, in the order ptxas and the hardware apply them: every count a multiple of 8 (a ptxas
    error), every count in 24..256 (a ptxas error), and the counts fitting the block's pool, sum(counts) ≤
    entry × warpgroups (else setmaxnreg.inc waits for registers that never come: a hang)."""
    if any(c % 8 for c in counts):
        return VERDICTS[1]
    if any(not 24 <= c <= 256 for c in counts):
        return VERDICTS[2]
    if sum(counts) > entry * len(counts):
        return VERDICTS[3]
    return VERDICTS[0]


@dataclass(frozen=True)
class Budget:
    """One choice in the calculator and its consequences."""

    threads: int
    counts: tuple[int, ...]  # per warpgroup
    entry: int | None  # registers per thread at entry (None: unknown, setmaxnreg ignored)
    pool: int  # registers the block holds: entry × threads
    asked: int  # registers the counts ask for: sum(counts) × 128
    verdict: str  # one of VERDICTS, or "ignored (C7508)"
    outcome: str  # a sentence: what happens when the kernel runs


def budget(warpgroups: int, counts: list[int], min_blocks: int | None = 1) -> Budget:
    """The calculator's numbers for ``warpgroups`` warpgroups asking for ``counts`` registers per thread each."""
    threads = 128 * warpgroups
    if len(counts) != warpgroups:
        raise ValueError(f"{warpgroups} warpgroups need {warpgroups} counts, got {len(counts)}")
    entry = entry_registers(threads, min_blocks)
    asked = 128 * sum(counts)
    if entry is None:
        return Budget(threads, tuple(counts), None, 0, asked, "ignored (C7508)",
                      f"__launch_bounds__({threads}) without a minimum number of blocks: ptxas prints {C7508} "
                      "Every setmaxnreg is dropped: all warps keep the count ptxas chose.")
    pool = entry * threads
    verdict = setmaxnreg_verdict(entry, counts)
    bad = [c for c in counts if c % 8] if verdict == VERDICTS[1] else [c for c in counts if not 24 <= c <= 256]
    outcome = {
        VERDICTS[0]: f"adds up: {' + '.join(map(str, counts))} = {sum(counts)} ≤ {warpgroups} × {entry} = "
                     f"{warpgroups * entry}. The warpgroups that lower their count hand registers back; the others "
                     "take them.",
        VERDICTS[1]: f"ptxas refuses to compile: {bad} not a multiple of 8.",
        VERDICTS[2]: f"ptxas refuses to compile: {bad} outside 24..256.",
        VERDICTS[3]: f"compiles, then hangs: the counts ask for {sum(counts)} per thread-slot, the block holds "
                     f"{warpgroups} × {entry} = {warpgroups * entry}; setmaxnreg.inc waits for registers nobody "
                     "will hand back.",
    }[verdict]
    return Budget(threads, tuple(counts), entry, pool, asked, verdict, outcome)


_COLORS = {"producer": "#8fb8de", "consumer": "#4c78a8"}
_VERDICT_COLOR = {VERDICTS[0]: "#2ca02c", VERDICTS[3]: "#d62728", "ignored (C7508)": "#f28e2b"}


#: a bar segment narrower than this share of the register file shows its count, not its sentence (which does not fit)
NARROW = 0.3


def register_budget_widget(warpgroups: int = 3, producer: int = 24, consumer: int = 240):
    """Sliders for the warpgroups, the launch bounds' minimum blocks and the counts; a bar of the block's
    registers: what each warpgroup asks for against the pool, and the verdict."""
    import ipywidgets as w
    import plotly.graph_objects as go

    from helpers.course.widgets import figure

    wg = w.IntSlider(value=warpgroups, min=2, max=5, description="warpgroups", style={"description_width": "6em"},
                     layout=w.Layout(width="22em"))
    minb = w.Dropdown(options=[("(threads, 1)", 1), ("(threads, 2)", 2), ("(threads) only", None)], value=1,
                      description="bounds", style={"description_width": "4em"}, layout=w.Layout(width="13em"))
    prod = w.IntSlider(value=producer, min=16, max=264, step=4, description="producer",
                       style={"description_width": "6em"}, layout=w.Layout(width="26em"))
    cons = w.IntSlider(value=consumer, min=16, max=264, step=4, description="consumers",
                       style={"description_width": "6em"}, layout=w.Layout(width="26em"))
    verdict = w.HTML(layout=w.Layout(max_width=f"{figure.COLUMN}px"))
    fig = figure.new_figure(height=250)
    fig.add_trace(go.Bar(orientation="h", y=[], x=[], base=[], marker_color=[], text=[], textposition="inside",
                         insidetextanchor="middle", hovertemplate="%{customdata}<extra></extra>"))
    fig.update_layout(margin={"l": 110}, xaxis_title="registers of the SM (thousands)", bargap=0.35)

    def redraw(_=None):
        counts = [prod.value] + [cons.value] * (wg.value - 1)
        b = budget(wg.value, counts, minb.value)
        names = ["producer"] + [f"consumer {i}" for i in range(1, wg.value)]
        starts, widths, colors, texts, full = [], [], [], [], []
        at = 0.0
        for name, cnt in zip(names, counts, strict=True):
            starts.append(at / 1000)
            widths.append(cnt * 128 / 1000)
            colors.append(_COLORS["producer" if name == "producer" else "consumer"])
            full.append(f"{name}: {cnt} × 128 = {cnt * 128}")
            # a segment too narrow for its sentence shows its count (plotly cut the producer's to "……")
            texts.append(full[-1] if cnt * 128 >= NARROW * REGISTER_FILE else f"{name.split()[0][0].upper()} {cnt}")
            at += cnt * 128
        y = ["asked"] * len(names)
        if b.entry is not None:
            y.append("pool at entry")
            starts.append(0)
            widths.append(b.pool / 1000)
            colors.append("#bbbbbb")
            texts.append(f"{b.entry} × {b.threads} threads = {b.pool}")
            full.append(texts[-1])
        y.append("register file")
        starts.append(0)
        widths.append(REGISTER_FILE / 1000)
        colors.append("#e5e5e5")
        texts.append(f"{REGISTER_FILE} per SM")
        full.append(texts[-1])
        with fig.batch_update():
            fig.data[0].y, fig.data[0].x, fig.data[0].base = y, widths, starts
            fig.data[0].marker.color, fig.data[0].text, fig.data[0].customdata = colors, texts, full
            fig.layout.shapes = ([{"type": "line", "x0": b.pool / 1000, "x1": b.pool / 1000, "y0": -0.5,
                                   "y1": 2.5, "line": {"dash": "dot", "color": "#555"}}] if b.entry else [])
        color = _VERDICT_COLOR.get(b.verdict, "#d62728")
        entry = "unknown" if b.entry is None else f"{b.entry} registers per thread"
        verdict.value = (f"<div style='border-left:4px solid {color};padding-left:6px'>"
                         f"<b>{b.threads} threads</b>, at entry {entry}. <b>{b.verdict}</b>: {b.outcome}</div>")

    for control in (wg, minb, prod, cons):
        control.observe(redraw, names="value")
    redraw()
    return figure.WidgetBox([figure.controls(wg, minb, prod, cons), verdict, fig])
