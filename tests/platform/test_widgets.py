"""Every widget, without a browser: built in the course's style, no wider than the column, its first drawing in
the state a new view starts from, integer axes, distinct colours, and the pure functions the pictures use.
(The browser test, test_browser.py, checks the same widgets as drawn by plotly in JupyterLab.)"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest
from widget_registry import builders

from helpers.course.widgets import barrier, figure, fragments, registers, swizzle, tensormap_builder, tiles
from helpers.course.widgets import pipeline as timeline

WIDGETS = {
    "tile_grid": lambda: tiles.tile_grid_widget(),
    "swizzle": lambda: swizzle.swizzle_widget(mode="32B"),
    "tensormap_builder": lambda: tensormap_builder.tensormap_builder_widget(),
    "barrier_stepper": lambda: barrier.barrier_stepper_widget(),
    "fragment_explorer": lambda: fragments.fragment_explorer_widget(n=64),
    "descriptor": lambda: fragments.descriptor_widget(),
    "pipeline_timeline": lambda: timeline.pipeline_widget(),
    "register_budget": lambda: registers.register_budget_widget(),
}
WIDGETS.update(builders())  # the widgets registered in widgets.json (author new-widget)


@pytest.mark.parametrize("name", WIDGETS)
def test_every_widget_is_a_widget_box_of_course_figures(name):
    box = WIDGETS[name]()
    assert isinstance(box, figure.WidgetBox)
    figs = figure._figures(box)
    assert figs, f"{name} has no figure"
    for fig in figs:
        assert fig.layout.width <= figure.COLUMN and fig.layout.template.layout.paper_bgcolor == "white"
        assert fig.layout.margin.t >= figure.TOP  # the modebar's room above the titles
        assert fig._config["displaylogo"] is False


@pytest.mark.parametrize("name", WIDGETS)
def test_displaying_a_widget_sends_its_current_drawing(name):
    """The lost-first-drawing bug: what a new view starts from must be the figure as drawn, not as created."""
    box = WIDGETS[name]()
    for fig in figure._figures(box):
        fig._widget_data = []  # as if the first drawing had been lost on its way
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    for fig in figure._figures(box):
        assert len(fig._widget_data) == len(fig.data) > 0
        assert fig._widget_layout == fig._layout_obj._props


def test_barrier_now_bars_reach_the_first_view_with_categories_and_colours():
    box = barrier.barrier_stepper_widget()
    box._repr_mimebundle_()
    fig = figure._figures(box)[0]
    bars = fig._widget_data[1]
    assert list(bars["x"]) == list(barrier.NOW_BARS) and len(set(bars["marker"]["color"])) == 3
    assert list(bars["y"]) == [1, 0, 0] and list(bars["text"]) == ["1", "0 KiB", "0 KiB"]


def test_now_bars_follow_the_barrier():
    steps = barrier.run_script([("arrive_expect_tx", 16384), ("issue_tma", 8192)])
    heights, labels = barrier.now_bars(steps[-1])
    assert heights == [0, 16.0, 8.0] and labels == ["0", "16 KiB", "8 KiB"]


def test_new_figure_refuses_a_figure_wider_than_the_column():
    with pytest.raises(ValueError, match="900-pixel"):
        figure.new_figure(height=300, width=figure.COLUMN + 1)


def test_integer_axis_and_discrete_colours():
    fig = figure.new_figure(height=200)
    figure.integer_axis(fig, "x")
    assert fig.layout.xaxis.dtick == 1 and fig.layout.xaxis.tickformat == "d"
    scale = figure.discrete_colorscale(["#000", "#fff"])
    assert scale == [[0, "#000"], [0.5, "#000"], [0.5, "#fff"], [1.0, "#fff"]]
    assert len(set(figure.CATEGORY_COLORS)) == len(figure.CATEGORY_COLORS)


def test_controls_wrap_inside_the_column():
    row = figure.controls()
    assert row.layout.flex_flow == "row wrap" and row.layout.max_width == f"{figure.COLUMN}px"


# --------------------------------------------------------------------------------------------- swizzle explorer
def test_swizzle_chunks_have_distinct_colours_and_whole_number_axes():
    box = swizzle.swizzle_widget(mode="32B")
    fig = box.children[1]
    z = np.asarray(fig.data[0].z)
    assert z.shape[1] == 2 and set(np.unique(z)) == {0, 1}
    scale = fig.data[0].colorscale

    def color(v):  # the colour a value gets under a discrete scale over [zmin, zmax]
        t = (v - fig.data[0].zmin) / (fig.data[0].zmax - fig.data[0].zmin)
        return next(c for pos, c in reversed(scale) if pos <= t + 1e-9)

    assert color(0) != color(1) and len({color(v) for v in range(8)}) == 8
    assert fig.layout.xaxis.dtick == 1 and tuple(fig.layout.xaxis.range) == (-0.5, 1.5)


def test_swizzle_bank_load_has_a_colour_scale():
    fig = swizzle.swizzle_widget(mode="none").children[1]
    load = fig.data[2]
    assert load.showscale is not False and load.colorbar.title.text == "lines"
    assert load.zmin == -0.5 and load.zmax == swizzle.BANK_LOAD_MAX + 0.5
    assert len(swizzle.BANK_LOAD_COLORS) == swizzle.BANK_LOAD_MAX + 1
    assert np.asarray(load.z).max() == 8  # no swizzle, down a column: 8 lines on the same banks


# --------------------------------------------------------------------------------------------- tensor-map builder
def test_the_builder_zooms_to_a_small_box_and_shows_the_whole_tensor_beside():
    spec = tensormap_builder.TensorMapSpec()  # 8192 × 8192, box 64 × 64
    f = tensormap_builder.footprint(spec, (4096, 128))
    v = tensormap_builder.view(spec, f)
    assert v.zoomed and v.x == (4096 + 32 - 128, 4096 + 32 + 128) and v.y == (128 + 32 - 128, 128 + 32 + 128)
    whole = tensormap_builder.view(spec, f, around_box=False)
    assert not whole.zoomed and whole.x[0] < 0 < 8192 < whole.x[1]


def test_the_builder_shows_the_whole_tensor_when_the_box_is_a_good_part_of_it():
    spec = tensormap_builder.with_changes(tensormap_builder.TensorMapSpec(), global_dim=(128, 128),
                                          global_strides=(256,))
    v = tensormap_builder.view(spec, tensormap_builder.footprint(spec, (0, 0)))
    assert not v.zoomed and v.x[0] <= 0 and v.x[1] >= 128


def test_the_builder_widget_draws_the_zoomed_view_and_its_toggle():
    box = tensormap_builder.tensormap_builder_widget()
    fig, zoom = box.children[0].children[1].children
    assert fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0] == 256 and fig.data[3].visible
    zoom.value = "whole tensor"
    assert fig.layout.xaxis.range[1] > 8192 and fig.data[3].visible is False


# --------------------------------------------------------------------------------------------- tile grid, fragments
def test_tile_frame_marks_the_tile_and_stays_visible():
    assert tiles.tile_frame((3, 5), (1, 1), (8, 8)) == {"y0": -0.5 + 3, "y1": 3.5, "x0": 4.5, "x1": 5.5}
    big = tiles.tile_frame((42, 85), (2, 2), (64, 64))
    assert big["x1"] - big["x0"] >= 64 * 2 / 16 and big["x0"] < 84 < 85 < big["x1"]


def test_tile_grid_frames_this_steps_tiles():
    box = tiles.tile_grid_widget(M=512, N=512, K=512, block=(2, 5), k_step=3)
    shapes = box.children[1].layout.shapes
    assert len(shapes) == 3
    a, b, c = shapes
    assert (a.x0 + a.x1) / 2 == 3 and (a.y0 + a.y1) / 2 == 2  # A: tile row 2, K step 3
    assert (c.x0 + c.x1) / 2 == 5 and (c.y0 + c.y1) / 2 == 2


@pytest.mark.parametrize("n", fragments.FRAGMENT_NS)
def test_fragment_explorer_fits_and_keeps_cells_readable(n):
    width = fragments.fragment_figure_width(n)
    assert width <= figure.COLUMN and (width - 72) / n >= 12


def test_modebar_room_above_column_axes():
    for fig in (fragments.fragment_explorer_widget(n=16).children[1], fragments.descriptor_widget().children[1]):
        assert fig.layout.xaxis.side == "top" and fig.layout.margin.t >= 100


def test_figures_are_figure_widgets():
    for build in WIDGETS.values():
        assert all(isinstance(f, go.FigureWidget) for f in figure._figures(build()))


@pytest.mark.parametrize("name", WIDGETS)
def test_a_first_view_draws_from_a_model_opened_complete(name, monkeypatch):
    """The empty-plot race: on a busy page, messages sent before plotly's widget code loaded were lost, and a view
    drew its model as opened (no traces). When a box is first shown, each figure's model is opened afresh with its
    complete drawing, and the boxes' children name the new models."""
    from ipywidgets.widgets import widget as ipw

    opened: dict[str, dict] = {}
    real = ipw.comm.create_comm

    def record(**kwargs):
        c = real(**kwargs)
        opened[c.comm_id] = kwargs["data"]["state"]
        return c

    box = WIDGETS[name]()
    monkeypatch.setattr(ipw.comm, "create_comm", record)
    sent: list[tuple] = []
    monkeypatch.setattr(ipw.Widget, "send_state", lambda self, key=None: sent.append((self, key)))
    before = {id(f): f.model_id for f in figure._figures(box)}
    box._repr_mimebundle_()
    for fig in figure._figures(box):
        assert fig.model_id != before[id(fig)] and fig.model_id in opened
        state = opened[fig.model_id]
        assert len(state["_widget_data"]) == len(fig.data) > 0
        assert state["_widget_layout"] == fig._layout_obj._props
    assert (box, "children") in sent
    again = dict(opened)
    box._repr_mimebundle_()  # shown a second time: the models stay (the first view keeps working)
    assert opened == again


def test_the_epilogue_race_shows_each_broken_rule_in_full():
    """The rule sentences were cut at 220 characters, mid-sentence: each now shows whole (the first three)."""
    import html

    from helpers.course.widgets import epilogue

    box = epilogue.epilogue_race_widget()
    pick, _, text = box.children
    for name in epilogue.VARIANTS:
        pick.value = name
        for v in epilogue.race(name).violations[:3]:
            assert html.escape(v.split("] ", 1)[-1]) in text.value, (name, v)


def test_figures_whose_colours_mean_something_explain_them():
    from helpers.course.widgets import epilogue, scheduler, seqbar

    bank = epilogue.bank_figure()
    assert sum(t.showscale is not False for t in bank.data) == 1 and bank.data[0].colorbar.ticktext[0] == "no lane"
    ping = seqbar.pingpong_figure()
    assert ping.layout.showlegend and sorted(t.name for t in ping.data if t.showlegend) == ["MMA", "epilogue"]
    waves = figure._figures(scheduler.scheduler_widget(M=4096, workers=66))[0]
    assert list(waves.data[0].colorbar.tickvals) == [0, 1, 2, 3]  # whole waves, a band each
    assert waves.data[1].marker.symbol == "square-open" and waves.data[1].name  # the wave shown: outlined, named


def test_a_figure_shown_by_itself_opens_its_model_complete(monkeypatch):
    """Lesson 04's first figure (a timeline, a cell's last line) drew plotly's default empty plot: its model was
    opened before it had traces or the course's style, and the page lost the later messages while plotly's widget
    code loaded. Shown by itself, a course figure opens its model afresh with its complete drawing, once."""
    from ipywidgets.widgets import widget as ipw

    from helpers.course.widgets import pipeline as timeline

    opened: dict[str, dict] = {}
    real = ipw.comm.create_comm

    def record(**kwargs):
        c = real(**kwargs)
        opened[c.comm_id] = kwargs["data"]["state"]
        return c

    run = timeline.run_scenario("Lab 3: one warpgroup, thread 0 produces", stages=2, k_tiles=8)
    fig = timeline.timeline_figure(*timeline.timeline_bars(run.pipeline), title="the Lab 3 loop, modelled")
    assert isinstance(fig, figure.CourseFigure)
    monkeypatch.setattr(ipw.comm, "create_comm", record)
    first = fig.model_id
    fig._repr_mimebundle_()
    assert fig.model_id != first and fig.model_id in opened
    state = opened[fig.model_id]
    assert len(state["_widget_data"]) == len(fig.data) > 0
    assert state["_widget_layout"]["template"] and state["_config"]["displaylogo"] is False
    fig._repr_mimebundle_()
    assert list(opened) == [fig.model_id]


def test_figures_shown_without_a_widget_are_in_the_course_style():
    """A plain figure (``fig.show()``, a ``go.Figure`` as a cell's value) has the white template and no plotly logo."""
    import plotly.io as pio

    from helpers.course.widgets import scheduler

    bundle = pio.renderers._build_mime_bundle(scheduler.timeline_figure().to_dict(), "plotly_mimetype")
    shown = bundle["application/vnd.plotly.v1+json"]
    assert shown["config"]["displaylogo"] is False
    assert shown["layout"]["template"]["layout"]["plot_bgcolor"] == "white"


def test_the_register_budget_labels_fit_their_segments():
    """The producer's segment (24 × 128 registers) is too narrow for its sentence, which plotly cut to "……": it shows
    its count; the whole sentence is in its hover."""
    from helpers.course.widgets import registers

    bar = figure._figures(registers.register_budget_widget())[0].data[0]
    assert bar.text[0] == "P 24" and bar.customdata[0] == "producer: 24 × 128 = 3072"
    assert bar.text[1] == "consumer 1: 240 × 128 = 30720"


def test_the_tile_grid_sliders_send_their_value_when_let_go():
    """A drag sent every value it passed; on a busy laptop the redraws queued (the figure froze, a readout fell
    behind its knob)."""
    from helpers.course.widgets import tiles

    box = tiles.tile_grid_widget()
    sliders = [s for row in box.children[0].children for s in row.children]
    assert len(sliders) == 9 and not any(s.continuous_update for s in sliders)


def test_the_ladder_figures_are_in_the_course_style():
    """Labs 6 and 7 showed the ladder in plotly's default look (its logo, the blue-grey plotting area)."""
    from helpers.course import ladder
    from helpers.course.widgets import roofline

    for fig in (roofline.ladder_figure(), ladder.figure()):
        assert fig.layout.template.layout.plot_bgcolor == "white" and fig._config["displaylogo"] is False
