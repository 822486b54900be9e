"""A sequence-barrier stepper: hand the turn between warp groups by hand and watch the ring of slots.

Pure computation first (tests call these without a browser), built on :class:`helpers.hopper.seqbar.SeqBarStepper`:

- :data:`PRESETS` — scripted runs: the correct ping-pong, and one per broken invariant;
- :func:`play` — a preset (or any programs) on a fresh stepper;
- :func:`slot_grid` — what the slot picture shows after a step (phase and pending arrivals of every slot, where
  each group's cursor points);
- :func:`step_timeline` — one point per step (group, kind, colour).

Then :func:`seqbar_stepper_widget` (buttons per group) and :func:`pingpong_figure` (the two consumers' sections
over time, with and without the barrier).
"""

from __future__ import annotations

from helpers.course.widgets import figure
from helpers.hopper.seqbar import SeqBarStepper, SeqStep, pingpong_programs, run_programs

__all__ = ["PRESETS", "play", "slot_grid", "step_timeline", "seqbar_stepper_widget", "pingpong_figure"]

_OK = ["wait", "arrive"] * 4

#: name -> (stepper arguments, programs per group, what it shows, step kinds that end the run)
PRESETS: dict[str, tuple[dict, list[list[str]], str, tuple[str, ...]]] = {
    "ping-pong (correct)": ({}, [_OK, _OK], "MMA and epilogue alternate between the groups, in order",
                            ("violation", "lapped", "error")),
    "group 0 leaves out its last arrive": (
        {}, [_OK[:-1], _OK], "group 1 waits for a turn that never comes: deadlock", ("violation", "lapped", "error")),
    "group 1's cursor built for depth 1": (
        {"cursor_depths": (2, 1)}, [_OK * 2, _OK * 2], "the groups wait on different slots: deadlock",
        ("violation", "lapped", "error")),
    "group 0 arrives without waiting": (
        {}, [["arrive", "arrive"], _OK], "group 0 hands on a turn it never had: order broken",
        ("violation", "lapped", "error")),
    "group 0 waits twice": ({}, [["wait", "wait", "arrive"], _OK], "it re-enters without handing on: order broken",
                            ("violation", "lapped", "error")),
    "group 0 runs ahead, never waiting": (
        {}, [["arrive"] * 3, []], "its third arrival laps a slot whose phase group 1 never consumed",
        ("lapped", "error")),
}

_KIND_COLOR = {"passes": "#2ca02c", "unblocked": "#2ca02c", "arrive": "#4c78a8", "blocked": "#f2b134",
               "deadlock": "#d62728", "violation": "#d62728", "lapped": "#d62728", "error": "#d62728"}


def play(preset: str | None = None, programs: list[list[str]] | None = None, **kwargs) -> SeqBarStepper:
    """Run a preset (or ``programs`` with stepper ``kwargs``) on a fresh stepper; returns it (``.steps``)."""
    stop: tuple[str, ...] = ("violation", "lapped", "error")
    if preset is not None:
        kwargs, programs, _, stop = PRESETS[preset]
    stepper = SeqBarStepper(**kwargs)
    stepper.run(programs or [], stop=stop)
    return stepper


def slot_grid(step: SeqStep) -> dict[str, list]:
    """For the slot picture: ``z`` (completed phases, [index][group]), ``text`` (phase and pending arrivals),
    ``cursors`` ((group, index) each group's cursor points at) and ``inside`` ((group, index) sections in use)."""
    z = [[s.phase for s in row] for row in step.slots]
    cursors = [(g, c.index) for g, c in enumerate(step.cursors)]
    # short lines: a cell is about 190 px wide, and a longer line runs into the next group's cell
    text = [[f"{s.name}<br>phase {s.phase} · parity {s.parity}<br>{s.pending_arrivals}/{s.expected} pending"
             + (f"<br><b>waits: parity {step.cursors[g].phase}</b>" if (g, i) in cursors else "")
             for g, s in enumerate(row)] for i, row in enumerate(step.slots)]
    inside = [(g, i) for g, i in enumerate(step.inside) if i is not None]
    return {"z": z, "text": text, "cursors": cursors, "inside": inside}


def step_timeline(steps: list[SeqStep]) -> dict[str, list]:
    """One marker per step: x = step number, y = group, colour by what happened."""
    return {"x": list(range(len(steps))), "y": [s.group for s in steps],
            "color": [_KIND_COLOR.get(s.kind, "#999") for s in steps],
            "text": [f"{s.action}: {s.outcome}" for s in steps]}


def seqbar_stepper_widget(depth: int = 2, groups: int = 2):
    """Buttons "group g: wait / arrive", presets that break an invariant, the ring of slots and a step log."""
    import ipywidgets as w
    import plotly.graph_objects as go

    state = {"s": SeqBarStepper(depth, groups)}
    preset = w.Dropdown(options=["(by hand)"] + list(PRESETS), value="(by hand)", description="preset",
                        layout=w.Layout(width="26em"), style={"description_width": "4em"})
    play_button = w.Button(description="play preset", button_style="info")
    reset = w.Button(description="reset", button_style="danger")
    buttons = []
    for g in range(groups):
        for action in ("wait", "arrive"):
            b = w.Button(description=f"group {g}: {action}", layout=w.Layout(width="10em"),
                         button_style="warning" if action == "wait" else "")
            b.on_click(lambda _b, g=g, action=action: (state["s"].do(g, action), redraw()))
            buttons.append(b)
    status, log = w.HTML(), w.HTML()
    fig = figure.new_figure(height=340, rows=1, cols=2, column_widths=[0.5, 0.5], horizontal_spacing=0.1,
                            subplot_titles=("slots [section][group]; red: where each group waits",
                                            "steps (colour: what happened)"))
    fig.add_trace(go.Heatmap(z=[[0]], text=[[""]], texttemplate="%{text}", textfont={"size": 11}, colorscale="Blues",
                             showscale=False, xgap=2, ygap=2, hoverinfo="skip", zmin=0), row=1, col=1)
    fig.add_trace(go.Scatter(x=[], y=[], mode="markers", marker={"size": 12}, hovertemplate="%{text}<extra></extra>"),
                  row=1, col=2)
    figure.integer_axis(fig, "x", title_text="group", row=1, col=1)
    figure.integer_axis(fig, "y", title_text="section", autorange="reversed", row=1, col=1)
    figure.integer_axis(fig, "x", title_text="step", rangemode="nonnegative", row=1, col=2)
    figure.integer_axis(fig, "y", title_text="group", range=[groups - 0.5, -0.5], row=1, col=2)

    def redraw():
        s = state["s"]
        steps = s.steps
        with fig.batch_update():
            if steps:
                grid = slot_grid(steps[-1])
            else:
                snap = SeqStep("", 0, "", "passes", tuple(s.cursors),
                               tuple(tuple(b.state() for b in row) for row in s.bar.slots), tuple(s.inside),
                               tuple(s.blocked))
                grid = slot_grid(snap)
            fig.data[0].z, fig.data[0].text = grid["z"], grid["text"]
            fig.layout.shapes = [{"type": "rect", "xref": "x", "yref": "y", "x0": g - 0.47, "x1": g + 0.47,
                                  "y0": i - 0.47, "y1": i + 0.47, "line": {"color": "#d62728", "width": 3}}
                                 for g, i in grid["cursors"]]
            t = step_timeline(steps)
            fig.data[1].x, fig.data[1].y, fig.data[1].text = t["x"], t["y"], t["text"]
            fig.data[1].marker.color = t["color"]
            fig.layout.xaxis2.range = [-0.5, max(len(steps), 8) - 0.5]  # whole steps: never a tick at 0.5
        if steps:
            last = steps[-1]
            color = _KIND_COLOR.get(last.kind, "#999")
            status.value = (f"<div style='border-left:4px solid {color};padding-left:6px'><b>{last.action}</b>: "
                            f"{last.outcome}<br>cursors: "
                            + ", ".join(f"group {g} {c}" for g, c in enumerate(last.cursors)) + "</div>")
        else:
            status.value = "<i>fresh ring: group 0 holds the turn of every section (its cursor starts on phase 1)</i>"
        rows = "".join(f"<tr><td>{i}</td><td><code>{x.action}</code></td>"
                       f"<td style='color:{_KIND_COLOR.get(x.kind, '#999')}'>{x.outcome}</td></tr>"
                       for i, x in enumerate(steps[-8:], start=max(0, len(steps) - 8)))
        head = "<tr><th>#</th><th>action</th><th>what happened</th></tr>"
        log.value = f"<table style='font-size:85%'>{head}{rows}</table>"

    def on_play(_):
        if preset.value in PRESETS:
            state["s"] = play(preset.value)
        redraw()

    def on_reset(_):
        state["s"] = SeqBarStepper(depth, groups)
        redraw()

    play_button.on_click(on_play)
    reset.on_click(on_reset)
    redraw()
    return figure.WidgetBox([figure.controls(*buttons), figure.controls(preset, play_button, reset), status, fig, log])


def pingpong_figure(tiles_per_group: int = 3, mma: float = 4.0, epi: float = 2.0):
    """Two consumer warpgroups' MMA and epilogue sections over time, with the sequence barrier and without."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.18,
                        subplot_titles=("with the ordered sequence barrier: MMAs take turns",
                                        "without it: both MMAs at once share the tensor cores"))
    colors = {"MMA": "#4c78a8", "epilogue": "#f58518"}
    shown: set[str] = set()
    for row, ordered in ((1, True), (2, False)):
        for sec in run_programs(pingpong_programs(tiles_per_group, mma, epi), ordered=ordered):
            fig.add_trace(go.Bar(x=[sec.end - sec.start], base=[sec.start], y=[f"group {sec.group}"],
                                 orientation="h", marker_color=colors[sec.name], name=sec.name, legendgroup=sec.name,
                                 showlegend=sec.name not in shown,
                                 hovertemplate=f"{sec.name} of group {sec.group}: {sec.start:g}–{sec.end:g}"
                                 "<extra></extra>"), row=row, col=1)
            shown.add(sec.name)
    fig.update_layout(height=330, width=880, barmode="overlay", margin={"l": 60, "r": 10, "t": figure.TOP, "b": 30})
    fig.update_xaxes(title="time (MMA = 4 units, epilogue = 2)", row=2, col=1)
    figure.legend_below(fig)
    return figure.styled(figure.CourseFigure(fig))
