"""The corrections to Lessons 00-07, the labs, the kernels' header comments and the quizzes, each tied to the
computation or the H100 fixture that backs it: Stream-K's first pieces, ordered atomics, tile intensities,
ping-pong's tile and when it wins, the cross-block reader of C, one-run comparisons, wait_group's scope, the launch's
driver calls, the CUTLASS name tables, and text hygiene (no unnamed source, no repeated prompt)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers.course.quizzes import lesson05
from helpers.course.widgets import roofline
from helpers.course.widgets import scheduler as schedule_view
from helpers.hopper import streamk, striped

ROOT = Path(__file__).resolve().parents[2]
HEADLINE = (1024, 1024, 16384)
CLUSTERS = 66


def _nb(path: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / path, as_version=4)


def _cell(path: str, cell_id: str) -> str:
    return next(c.source for c in _nb(path).cells if c.get("id") == cell_id)


def _text(path: str) -> str:
    return "\n".join(c.source for c in _nb(path).cells)


NOTEBOOKS = sorted(str(p.relative_to(ROOT)) for d in ("lessons", "solutions", "labs")
                   for p in (ROOT / d).glob("*.ipynb"))


def _only_middle(schedule: str = "hybrid") -> list[int]:
    tiles, steps = streamk.iteration_space(*HEADLINE)
    return [c for c in range(CLUSTERS)
            if [streamk.role(a, b, steps) for _, a, b in streamk.work_list(c, CLUSTERS, tiles, steps, schedule)]
            == ["middle"]]


# ------------------------------------------------------------------------------------------- 1 · Stream-K
def test_at_the_headline_shape_many_clusters_start_with_a_waiting_middle_split():
    tiles, steps = streamk.iteration_space(*HEADLINE)
    assert (tiles, steps, -(-tiles * steps // CLUSTERS)) == (16, 256, 63)
    middle = _only_middle()
    assert middle[:4] == [1, 2, 3, 5] and len(middle) == 49 == len(_only_middle("stream-k"))
    for c in middle:  # each waits, and only for lower clusters
        (t, a, _), = streamk.work_list(c, CLUSTERS, tiles, steps)
        assert a > 0 and streamk.owner(t, CLUSTERS, tiles, steps) < c


def test_the_texts_say_a_first_piece_may_wait_and_why_nothing_deadlocks():
    lesson = _cell("lessons/07_sequence_barriers.ipynb", "l07-24")
    lab = _cell("solutions/lab9_streamk.ipynb", "ranges-md")
    header = (ROOT / "bench/kernels/lab9_streamk.cu").read_text().split("#include")[0]
    for text in (lesson, lab, header):
        assert not re.search(r"a first split never waits|it never waits|which never waits", text)
        assert "middle" in text and "lower" in text
    assert "49 of the 66" in lab and "49 of 66" in header
    src = _cell("lessons/07_sequence_barriers.ipynb", "l07-25a")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(src, {"streamk": streamk})  # noqa: S102 - the lesson's own cell
    assert f"{len(_only_middle())} clusters have one piece, a middle split: [1, 2, 3, 5" in out.getvalue()


# ------------------------------------------------------------------------------------------- 2 · atomics
def test_ordered_red_gives_the_bits_of_ordered_load_add_store_and_arrival_order_does_not():
    rng = np.random.default_rng(0)
    parts = [(rng.standard_normal((32, 4)) * np.exp2(rng.integers(-20, 20, (32, 4)))).astype(np.float32)
             for _ in range(4)]
    chain = np.zeros(128, np.float32)
    striped.store(chain, parts[0])
    for p in parts[1:]:
        striped.store(chain, striped.load_add(chain, p))
    in_turn = np.zeros(128, np.float32)
    striped.reduce_add(in_turn, parts, [0, 1, 2, 3])
    assert np.array_equal(chain.view(np.uint32), in_turn.view(np.uint32))
    shuffled = np.zeros(128, np.float32)
    striped.reduce_add(shuffled, parts, [3, 2, 1, 0])
    assert not np.array_equal(chain.view(np.uint32), shuffled.view(np.uint32))


def test_lesson07_teaches_both_ordered_forms_and_reads_the_fixup_capture():
    text = _text("lessons/07_sequence_barriers.ipynb")
    for needle in ("ReductionMode::Deterministic", "ReductionMode::Nondeterministic", "BlockStripedReduce",
                   "not from avoiding atomics", "fixup_h100.json", "not measured on an H100 yet"):
        assert needle in text, needle


def test_the_fixup_capture_compiles_three_fixups_with_and_without_red():
    sys.path.insert(0, str(ROOT / "tools" / "h100"))
    import fixup

    srcs = fixup.variants()
    assert set(srcs) == {"ordered load-add-store", "ordered red", "red in arrival order"}
    assert "red.global.add.f32" not in srcs["ordered load-add-store"]
    assert "flag_wait_geq(flag, order" in srcs["ordered red"].split("red.global.add.f32")[0]
    assert "flag_add_release" in srcs["red in arrival order"]


def test_the_fixup_variants_run_on_the_executor_and_ordered_red_keeps_the_bits():
    from ml_dtypes import bfloat16

    from helpers.course.checks import lab9

    sys.path.insert(0, str(ROOT / "tools" / "h100"))
    import fixup

    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((256, 64 * 9)).astype(bfloat16) for _ in range(2))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    bits = {}
    for name, src in fixup.variants().items():  # one pair of 9 K steps on 4 clusters: every role occurs
        c, same, flags_left, *_ = lab9.gpu_trial(src, [(a, b)], repeats=1, clusters=4)["results"][0]
        assert same and flags_left == 0, name
        assert np.abs(np.asarray(c).astype(np.float64) - ref).max() < 0.5, name
        bits[name] = np.asarray(c).view(np.uint16)
    assert np.array_equal(bits["ordered red"], bits["ordered load-add-store"])


@pytest.mark.parametrize("name", ["fixup_h100.json", "lab6_arrive_speed_h100.json"])
def test_captures_when_present_name_the_gpu_driver_and_date(name):
    path = ROOT / "tests" / "data" / name
    if not path.exists():
        pytest.skip(f"{name} not captured yet (tools/h100/run.sh)")
    data = json.loads(path.read_text())
    assert {"gpu", "driver", "date"} <= set(data["meta"]) and "H100" in data["meta"]["gpu"]
    assert data["summary"]


# ------------------------------------------------------------------------------------------- 3 · reuse
def _intensity(bm: int, bn: int) -> float:
    return bm * bn / (bm + bn)


def test_tile_intensities_and_their_ratios():
    assert [_intensity(*t) for t in ((64, 64), (128, 128), (128, 256), (256, 256))] == [32, 64, 256 / 3, 128]
    assert round(_intensity(128, 256) / _intensity(128, 128), 2) == 1.33
    assert _intensity(256, 256) / _intensity(128, 256) == 1.5
    for bm, bn in ((128, 128), (128, 256), (256, 256)):
        assert roofline.design(4096, 4096, 4096, bm, bn).tile_intensity == pytest.approx(_intensity(bm, bn))


def test_no_text_doubles_the_reuse():
    wrong = re.compile(r"twice as often|feeds twice the math|halve the traffic again|51 FLOP/B instead of 85")
    for path in NOTEBOOKS:
        found = wrong.search(_text(path))
        assert not found, f"{path}: {found.group(0)!r}"
    assert "85.3" in _cell("lessons/04_pipelines.ipynb", "lesson04-28")
    assert "1.33" in _cell("lessons/05_kernel_design.ipynb", "l05-09")
    assert "1.5" in _cell("lessons/05_kernel_design.ipynb", "l05-09")
    assert "85.3 FLOP/B against 64" in _cell("solutions/lab4_pipeline.ipynb", "lab4-31")


# ------------------------------------------------------------------------------------------- 4 · ping-pong
def test_a_pingpong_consumer_owns_a_128x128_tile_at_64_flop_per_byte():
    assert 128 * 128 // 128 == 128  # accumulators per thread of one warpgroup
    assert _intensity(128, 128) == 64 and round(_intensity(64, 256), 1) == 51.2
    assert lesson05.pingpong_intensity.judge("64")[0]
    assert not lesson05.pingpong_intensity.judge("51.2")[0]
    assert "64 FLOP/B instead of the cooperative's 85.3" in _cell("lessons/05_kernel_design.ipynb", "l05-39")


@pytest.mark.parametrize("epilogue", [1, 3, 5, 10, 15, 20])
def test_the_pingpong_model_in_the_text_is_the_widgets(epilogue):
    def end(design: str, tiles: int) -> float:
        return max(s.end for s in schedule_view.consumer_timeline(design, tiles, 10, epilogue))

    per_tile = {d: (end(d, 16) - end(d, 8)) / 8 for d in ("cooperative", "ping-pong")}
    assert per_tile["cooperative"] == pytest.approx(10 + epilogue)
    assert per_tile["ping-pong"] == pytest.approx(max(10, (10 + epilogue) / 2))
    text = _cell("lessons/05_kernel_design.ipynb", "l05-41")
    assert "max(mainloop, (mainloop +\nepilogue) / 2)" in text and "K must be large" in text


# ------------------------------------------------------------------------------------------- 5 · reader of C
def test_lab9_fixup_moves_partials_through_a_workspace_not_through_c():
    kernel = (ROOT / "bench/kernels/lab9_streamk.cu").read_text()
    assert "__ldcg(ws" in kernel and "__stcg(ws" in kernel
    text = _cell("lessons/06_epilogue.ipynb", "l06-16")
    assert "never reads C" in text and "release at GPU scope" in text and "__stcg" in text


# ------------------------------------------------------------------------------------------- 6 · one run
def test_the_arrive_comparison_is_one_run_or_says_it_is_not():
    cell = _cell("lessons/05_kernel_design.ipynb", "l05-37")
    assert "lab6_arrive_speed_h100.json" in cell and "not measured on an H100 yet" in cell
    lab7 = _cell("solutions/lab7_clusters.ipynb", "kernel-check-md")
    assert "says exactly that" not in lab7 and "ClusterBarrier::arrive" in lab7 and "measured in one run" in lab7
    assert "ClusterBarrier::arrive" in _cell("lessons/05_kernel_design.ipynb", "l05-34")
    assert "547 vs 794" not in lesson05.remote_arrive.explanation
    sys.path.insert(0, str(ROOT / "tools" / "h100"))
    import arrive_speed

    forms = arrive_speed.variants()
    assert "mbar_arrive_cluster_release(" in forms[".release.cluster arrive"]
    assert "mbar_arrive_cluster_release(" not in forms["plain arrive"]


# ------------------------------------------------------------------------------------------- 7 · wait_group
def test_one_threads_wait_group_is_called_undocumented():
    for path, cid in (("lessons/04_pipelines.ipynb", "lesson04-15"), ("solutions/lab4_pipeline.ipynb", "lab4-06")):
        text = _cell(path, cid)
        assert "finishes as one operation" not in text
        assert "CUTLASS" in text and re.search(r"does not document|undocumented", text)


# ------------------------------------------------------------------------------------------- 8 · launch
def test_the_launch_cell_builds_the_real_driver_objects():
    src = _cell("lessons/05_kernel_design.ipynb", "l05-25b")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(src, {})  # noqa: S102 - the lesson's own cell, no GPU needed
    text = out.getvalue()
    assert "cuFuncSetAttribute(lab7_gemm, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 230400)" in text
    assert "cuLaunchKernelEx" in text and "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = (2, 1, 1)" in text
    road = _cell("lessons/00_big_picture.ipynb", "l00-31")
    assert re.search(r"\| 04 \|[^\n]*warp specialization", road)
    assert not re.search(r"\| 05 \|[^\n]*warp specialization", road)


# ------------------------------------------------------------------------------------------- 9 · editing
@pytest.mark.parametrize("path", NOTEBOOKS)
def test_no_unnamed_write_up_and_no_repeated_paragraph(path):
    for cell in _nb(path).cells:
        assert not re.search(r"write-up", cell.source, re.I), f"{path} {cell.get('id')}"
        if cell.cell_type == "markdown":
            paras = [p.strip() for p in cell.source.split("\n\n") if len(p.strip()) > 40]
            assert len(paras) == len(set(paras)), f"{path} {cell.get('id')}: a paragraph is repeated"
            items = [ln for ln in cell.source.splitlines() if ln.startswith("- ") and len(ln) > 40]
            assert len(items) == len(set(items)), f"{path} {cell.get('id')}: a list item is repeated"


def test_quizzes_name_no_unnamed_write_up():
    for p in (ROOT / "helpers/course/quizzes").glob("lesson*.py"):
        assert "write-up" not in p.read_text(), p.name


def test_lab3_closing_note_has_measured_figures():
    for path in ("solutions/lab3_wgmma.ipynb", "labs/lab3_wgmma.ipynb"):
        text = _text(path)
        assert "⟨" not in text and re.search(r"\d+ TFLOP/s beside cuBLAS's \d+ in the same run", text)


# ------------------------------------------------------------------------------------------- the bridge
BRIDGE = {"00": {"GemmUniversal", "CollectiveMma", "CollectiveBuilder", "TileShape", "ClusterShape",
                 "CollectiveEpilogue", "PersistentScheduler"},
          "01": {"TmaDescriptor", "make_tma_copy", "SM90_TMA_LOAD", "SM90_TMA_LOAD_MULTICAST", "SM90_TMA_STORE",
                 "prefetch_tma_descriptor", "Swizzle<3,4,3>"},
          "02": {"ClusterBarrier", "ClusterTransactionBarrier", "fence_barrier_init", "NamedBarrier"},
          "03": {"SM90_64x256x16_F32BF16BF16_SS", "GmmaDescriptor", "warpgroup_arrive", "warpgroup_commit_batch",
                 "warpgroup_wait", "warpgroup_fence_operand", "ScaleOut::Zero"},
          "04": {"PipelineTmaAsync", "PipelineState", "ClusterBarrier", "elect_one_sync",
                 "KernelTmaWarpSpecializedCooperative", "KernelTmaWarpSpecializedPingpong"},
          "05": {"KernelTmaWarpSpecializedCooperative", "KernelTmaWarpSpecializedPingpong", "ClusterBarrier",
                 "PersistentTileSchedulerSm90StreamK"},
          "06": {"Swizzle<3,4,3>"},
          "07": {"OrderedSequenceBarrier", "PipelineState", "ClusterBarrier", "KernelTmaWarpSpecializedPingpong",
                 "PersistentTileSchedulerSm90StreamK", "ReductionMode", "BlockStripedReduce"}}


@pytest.mark.parametrize("lesson", sorted(BRIDGE))
def test_each_lesson_ends_with_a_table_of_cutlass_names(lesson):
    path = next((ROOT / "lessons").glob(f"{lesson}_*.ipynb"))
    last = nbformat.read(path, as_version=4).cells[-1]
    assert last.cell_type == "markdown" and last.source.startswith("## From the course's names to CUTLASS's")
    assert "| in this course | in CUTLASS / CuTe (sm90) |" in last.source
    for name in BRIDGE[lesson]:
        assert name in last.source, (lesson, name)
