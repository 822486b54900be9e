"""Lessons 05 (kernel design) and 06 (the epilogue): the widgets' computations, each quiz's answer re-derived from
the emulator or the measured figures, the measured figures read from bench/results, the notebooks' text rules."""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import plotly.graph_objects as go
import pytest

from helpers import gpu
from helpers.course.quizzes import lesson05, lesson06
from helpers.course.widgets import cluster as cluster_view
from helpers.course.widgets import epilogue as epilogue_view
from helpers.course.widgets import roofline
from helpers.course.widgets import scheduler as schedule_view
from helpers.gpu import probes
from helpers.hopper import cluster, epilogue, scheduler

ROOT = Path(__file__).resolve().parents[2]
LESSONS = [ROOT / "lessons" / "05_kernel_design.ipynb", ROOT / "lessons" / "06_epilogue.ipynb"]


def _ok(quiz, answer) -> bool:
    return quiz.judge(answer)[0]


# ------------------------------------------------------------------------------------------- Lesson 05
def test_ridge_points():
    assert round(gpu.ridge_point()) == 295 and round(roofline.fp32_ridge()) == 20
    assert _ok(lesson05.ridge, str(round(gpu.ridge_point())))


def test_design_numbers():
    d = roofline.design(4096, 4096, 4096, 128, 256)
    assert d.tile_intensity == pytest.approx(128 * 256 / (128 + 256))
    assert d.gemm_intensity == pytest.approx(2 * 4096**3 / (2 * 2 * 4096 * 4096 + 2 * 4096 * 4096))
    assert d.tiles == 512 and d.wave_efficiency == pytest.approx(512 / 528) and d.gemm_bound == "compute"
    assert roofline.design(4096, 4096, 64).gemm_bound == "memory"
    shared = roofline.design(4096, 4096, 4096, 128, 256, share_b=2)
    assert shared.tile_intensity == pytest.approx(128.0)
    assert roofline.design(1000, 1000, 64, 128, 256).padded_efficiency == pytest.approx(1e6 / (1024 * 1024))
    assert _ok(lesson05.tile_intensity, f"{d.tile_intensity:.0f}")
    with pytest.raises(ValueError):
        roofline.design(0, 1, 1)


def test_quiz_answers_from_the_models():
    tm, tn = scheduler.tile_counts(8192, 8192, 128, 256)
    assert _ok(lesson05.waves_8192, str(scheduler.waves(tm * tn).count))
    assert _ok(lesson05.small_c_busy, f"{100 * scheduler.waves(16, 66).efficiency:.1f}")
    pm, pn = scheduler.grouped_coords(9, 16, 16, 8)
    assert _ok(lesson05.grouped_p9, f"{pm}, {pn}")
    assert _ok(lesson05.expect_bytes, str(cluster.LAB7.STAGE_BYTES))
    assert _ok(lesson05.empty_count, str(cluster.LAB7.consumers * cluster.LAB7.size))
    clusters, sms = cluster.CO_RESIDENT[4]
    assert _ok(lesson05.idle_sms, str(132 - sms)) and clusters * 4 == sms
    t = {d: max(s.end for s in schedule_view.consumer_timeline(d, 4, 10, 9)) for d in ("cooperative", "ping-pong")}
    assert t["ping-pong"] < t["cooperative"] and _ok(lesson05.pingpong, "ping-pong")


def test_cluster_size_and_order_figures_come_from_the_h100_run():
    import json

    runs = json.loads((ROOT / "bench" / "results" / "2026-11-26-tried-5-h100.json").read_text())["runs"]
    clusters, hilbert = runs[0]["rows"], runs[1]["rows"]
    assert clusters[0]["active4"] == {"4x1": 30, "2x2": 30} and clusters[0]["active2"] == 66
    assert cluster.CO_RESIDENT[4][0] == 30 and cluster.CO_RESIDENT[2][0] == 66
    assert all(all(r["same_bits"].values()) for r in clusters if "same_bits" in r)
    speed = {(r["what"].split()[0], r["shape"][0]): r["speedup"] for r in clusters if "what" in r}
    assert {round(speed[v, 4096], 2) for v in ("4x1", "2x2")} == {0.80}
    assert {round(speed[v, 8192], 2) for v in ("4x1", "2x2")} == {0.88}
    assert all(0.99 <= round(r["speedup"], 2) <= 1.01 for r in hilbert if r.get("what", "").startswith("hilbert"))
    text = "".join(c.source for c in nbformat.read(LESSONS[0], as_version=4).cells)
    assert "**0.80×** the pairs at 4096³" in text and "**0.88×** at 8192³" in text and "0.99–1.01×" in text


def test_measured_figures_come_from_the_results_files():
    # the clustered kernel (today's Lab 7) was "lab6" in the runs recorded before Labs 6 and 7 were split
    m = roofline.measured("lab7", (8192, 8192, 8192), ("2026-11-22-tune-run2:lab6-g8",))
    assert m.source == "bench/results/2026-11-22-tune-run2.json" and round(m.tflops) == 794
    slow = roofline.measured("lab7", (8192, 8192, 8192), ("2026-11-22-ladder-run1",))
    assert round(slow.tflops) == 547
    assert roofline.measured("lab7", (1, 2, 3)) is None
    assert roofline.measured("lab6", (8192, 8192, 8192), ("2026-11-22-ladder-run1",)) is None
    rows = roofline.ladder(4096)
    assert [k for k, _, _ in rows] == ["lab3", "lab4a", "lab4b", "lab5", "lab6", "lab7", "lab8", "lab9"]
    assert [k for k, _, m in rows if m is None] in ([], ["lab6"])  # Lab 6: not measured yet until the H100 run


def test_ladder_degrades_to_not_measured():
    rows = roofline.ladder(4096, results={})
    assert all(m is None for _, _, m in rows)
    fig = roofline.ladder_figure(results={})
    assert "not measured yet" in fig.data[0].text
    assert fig.layout.width <= 900


def test_ladder_prefers_the_full_run_file():
    fake = {"ladder": {"gpu": "G", "date": "D", "rungs": {"lab5": {"title": "t", "speed": [
        {"shape": [4096, 4096, 4096], "tflops": 1.0, "cublas_tflops": 2.0, "sm_clock_mhz": 1}]}}}}
    rows = dict((k, m) for k, _, m in roofline.ladder(4096, results=fake))
    assert rows["lab5"].tflops == 1.0 and rows["lab5"].source == "bench/results/ladder.json" and rows["lab3"] is None


def test_schedule_picture():
    pic = schedule_view.schedule_picture(4096, 4096, workers=66, order="grouped", group=8)
    assert pic.visit.shape == (16, 16) and sorted(pic.visit.ravel().tolist()) == list(range(256))
    assert (pic.wave == pic.visit // 66).all() and pic.waves == 4
    assert (pic.footprints[0].a_panels, pic.footprints[0].b_panels) == (8, 9)
    big = schedule_view.schedule_picture(16384, 16384)
    assert big.visit.shape == (64, 64)  # the widget's heatmap stays at most 64×64


def test_timelines_never_double_book_the_tensor_core():
    for design in ("cooperative", "ping-pong"):
        core = sorted((s.start, s.end) for s in schedule_view.consumer_timeline(design, 5, 10, 4)
                      if s.who == "tensor core")
        assert all(a[1] <= b[0] for a, b in zip(core, core[1:], strict=False))
    coop = schedule_view.consumer_timeline("cooperative", 4, 10, 3)
    assert max(s.end for s in coop) == 4 * 13
    with pytest.raises(ValueError):
        schedule_view.consumer_timeline("solo")


def test_cluster_summary():
    s = cluster_view.cluster_summary(2, 1, "B")
    assert s.saving == pytest.approx(1 / 3) and s.co_resident == (66, 132)
    assert cluster_view.cluster_summary(3, 1, "B").co_resident is None
    assert cluster_view.cluster_summary(1, 1, "none").saving == 0


# ------------------------------------------------------------------------------------------- Lesson 06
def test_bank_figures_and_quizzes():
    plain = epilogue_view.store_banks("st.shared.b32", swizzled=False)
    assert plain.passes == 8 and _ok(lesson06.plain_passes, str(plain.passes))
    assert epilogue_view.store_banks("st.shared.b32", swizzled=True).passes == 1
    st = epilogue_view.store_banks("stmatrix.x4", swizzled=True)
    assert (st.passes, st.per_subtile) == (4, 4) and _ok(lesson06.stmatrix_count, str(st.per_subtile))
    assert epilogue_view.store_banks("stmatrix.x4", swizzled=False).passes == 32
    with pytest.raises(ValueError):
        epilogue_view.store_banks("st.global")


def test_epilogue_quizzes_from_the_model():
    r = epilogue.run(lambda s: epilogue.LAB6_OPS(s, 2), 4, 2, tiles=2)
    assert _ok(lesson06.pending_at_mainloop, str(r.in_flight_at_mainloop[0]))
    assert epilogue.run(lambda s: epilogue.LAB5_OPS(s, 3), 6, 3).ok
    assert _ok(lesson06.wait_depth, "2")
    tie = int(epilogue.to_bf16_bits(np.array([0x3F818000], np.uint32).view(np.float32))[0])
    assert _ok(lesson06.tie, hex(tie))
    assert _ok(lesson06.sub_bytes, str(epilogue.SUB_BYTES))
    assert _ok(lesson06.fence, "fence.proxy.async.shared::cta") and _ok(lesson06.fence, "fence.proxy.async")


def test_race_variants():
    expected = {"Lab 5 (correct)": ([0, 1, 2, 3], set()), "no fence.proxy.async": ([-1] * 4, {"unfenced-store"}),
                "no wait_group.read": ([2, 3, 2, 3], {"overwrite-in-flight"}),
                "wait_group.read 0 (correct, no overlap)": ([0, 1, 2, 3], set()),
                "Lab 6 (correct, persistent, 3 tiles)": ([0, 1, 2, 3], set())}
    for name, (landed, rules) in expected.items():
        r = epilogue_view.race(name)
        assert r.landed == landed and {v.split("]")[0].strip("[") for v in r.violations} == rules, name
    assert epilogue_view.race("wait_group.read 0 (correct, no overlap)").in_flight == [1, 2, 1, 1]
    assert epilogue_view.race("Lab 5's operations, persistent (3 tiles)").violations


# ------------------------------------------------------------------------------------------- the widgets
def test_widgets_build_and_fit_the_column():
    for make in (roofline.roofline_widget, schedule_view.scheduler_widget, cluster_view.cluster_widget,
                 epilogue_view.epilogue_race_widget):
        box = make()
        figs = [c for c in _walk(box) if isinstance(c, go.FigureWidget)]
        assert figs and all((f.layout.width or 0) <= 900 for f in figs)
    assert epilogue_view.bank_figure().layout.width <= 900
    assert schedule_view.timeline_figure().layout.width <= 900


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def test_scheduler_widget_steps_through_waves():
    box = schedule_view.scheduler_widget(M=4096, workers=66)
    controls = box.children[1].children
    wave = controls[4].children[1]
    assert wave.max == 3
    wave.value = 2
    assert "wave 2" in controls[5].value


# ------------------------------------------------------------------------------------------- the notebooks
@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_text_names_no_source_document(path):
    text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    for banned in ("document 00", "Hitchhiker", "Ramblings", "Explore Here", "Lesson 08", "seed"):
        assert banned not in text, banned


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name)
def test_lesson_shows_widgets_and_quizzes(path):
    cells = nbformat.read(path, as_version=4).cells
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    assert "_widget()" in code and code.count("lesson0") >= 5


@pytest.mark.gpu
def test_epilogue_probe_matches_the_emulator_on_the_h100():
    from ml_dtypes import bfloat16

    frags = (np.random.default_rng(3).standard_normal((128, 32)) * 3).astype(np.float32)
    image, c_bits = probes.epilogue_on_gpu(frags, (100, 120), 64, 64)
    assert np.array_equal(image, epilogue.stage_subtile(frags))
    want = np.full((100, 120), 0xFFFF, np.uint16).view(bfloat16)
    epilogue.store_subtile(image, want, 64, 64)
    assert np.array_equal(c_bits, want.view(np.uint16))


@pytest.mark.gpu
def test_co_resident_clusters_on_the_h100():
    from helpers.course.checks import lab5

    k = gpu.compile((ROOT / "bench" / "kernels" / "lab5_epilogue.cu").read_text(), "lab5_gemm")
    for size, (clusters, _) in cluster.CO_RESIDENT.items():
        assert gpu.max_active_clusters(k, 384, lab5.SMEM_BYTES, size) == clusters
