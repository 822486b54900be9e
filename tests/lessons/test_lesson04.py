"""Lesson 04 (pipelines): the widgets' computations, the quizzes' answers re-derived from the emulator, and the
compiler facts the lesson shows (NVRTC runs without a GPU)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from helpers.course.quizzes import all_quizzes, lesson04
from helpers.course.widgets import pipeline as tw
from helpers.course.widgets import registers
from helpers.hopper import pipeline as pl


# ------------------------------------------------------------------------------------------- quizzes
def test_quiz_answers_follow_from_the_emulator():
    assert lesson04.ring_slot.judge("{}, {}".format(*pl.stage_and_phase(13, 5)))[0]
    assert lesson04.empty_count.judge(str(2 * 128))[0]
    entry = registers.entry_registers(512, 1)
    best = max(c for c in range(24, 257, 8) if registers.setmaxnreg_verdict(entry, [24, c, c, c]) == "ok")
    assert lesson04.consumer_count.judge(str(best))[0] and best == 160


def test_first_wait_without_flip_deadlocks_on_the_emulator():
    def producer(ctx):
        yield ctx.wait(ctx.empty[0], 0)

    p = pl.Pipeline(2)
    p.add_role("producer", producer)
    p.add_role("consumer", pl.consumer_program(1, 2), consumer=True)
    with pytest.raises(pl.Deadlock):
        p.run()
    assert lesson04.first_wait.judge(lesson04.first_wait.right)[0]


def test_release_after_wait_group_1_is_the_previous_stage():
    """The quiz's answer is what the pipeline accepts: the previous stage passes, the current one is refused."""
    out = tw.run_scenario("overlapped (wait_group 1)", stages=3, consumers=1, k_tiles=8)
    assert out.ok
    assert tw.run_scenario("bug: release before the wgmma retired", stages=3).error_kind == "ReleaseBeforeRetire"


# ------------------------------------------------------------------------------------------- the timeline
CORRECT = [n for n in tw.SCENARIOS if not n.startswith("bug:")]


@pytest.mark.parametrize("name", CORRECT)
@pytest.mark.parametrize("stages", [2, 3, 4, 7])
def test_correct_scenarios_stream_every_tile(name, stages):
    out = tw.run_scenario(name, stages=stages, consumers=2, k_tiles=12)
    assert out.ok, out.error
    p = out.pipeline
    loads = len(p.events("tma_issue")) // 2
    reads = p.events("read")
    assert reads and all(r.end > r.time for r in reads)
    spans = sorted((r.time, r.end) for r in reads)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)), "one wgmma at a time"
    assert len(p.events("release")) >= loads  # every fill released by the consumer(s) that read it


@pytest.mark.parametrize("name, kind", [
    ("bug: parity not flipped on wrap", "MBarrierError"),
    ("bug: EMPTY count 1 with 2 consumers", "OverwriteBeforeEmpty"),
    ("bug: producer never waits on EMPTY", "MBarrierError"),
    ("bug: release before the wgmma retired", "ReleaseBeforeRetire"),
])
@pytest.mark.parametrize("stages", [2, 3, 4, 6])
def test_bugs_are_caught_as_what_they_are(name, kind, stages):
    out = tw.run_scenario(name, stages=stages, consumers=2, k_tiles=16)
    assert out.error_kind == kind, out.error
    bars, marks = tw.timeline_bars(out.pipeline, out.error)
    assert any(m.error for m in marks)


def test_one_stage_with_a_group_in_flight_deadlocks_and_is_drawn_red():
    out = tw.run_scenario("overlapped (wait_group 1)", stages=1, consumers=1)
    assert out.error_kind == "Deadlock"
    bars, _ = tw.timeline_bars(out.pipeline, out.error)
    assert {b.lane for b in bars if b.kind == "deadlocked"} >= {"producer", "consumer 0"}


def test_the_lab3_scenario_is_the_lab3_kernels_loop():
    """The model of Lab 3's kernel does what the kernel does: thread 0 asks for step k + 1's tiles before everybody
    waits for step k's (one step ahead, so two loads in flight), and every pair of steps then takes one load's
    latency plus one step's work: the load is not hidden."""
    out = tw.run_scenario("Lab 3: one warpgroup, thread 0 produces", stages=2, k_tiles=16, tma_latency=600,
                          wgmma_time=40, drain=60)
    p = out.pipeline
    issued = [e.time for e in p.events("tma_issue")][::2]  # the A copy of each step
    waited = [e.time for e in p.trace if e.kind == "wait_done" and e.barrier and e.barrier.startswith("full")]
    assert len(issued) == len(waited) == 16
    assert all(issued[k + 1] < waited[k] for k in range(15)), "step k + 1's copies go out before step k is read"
    step = 4 * 40 + 60  # one step's wgmmas and their drain
    pairs = [issued[k + 2] - issued[k] for k in range(2, 14)]
    assert all(600 + step <= d <= 600 + step + 10 for d in pairs), pairs
    assert p.tensor_utilization < 0.5


def test_the_lab3_source_of_the_h100_timeline_is_the_course_kernel():
    """tools/h100/wgmma_timeline.py stamps the course's own Lab 3 kernel (solutions/), and it compiles."""
    import importlib.util

    from helpers import gpu
    from helpers.course import labgen

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("timeline_job", root / "tools" / "h100" / "wgmma_timeline.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    source = job.lab3_source()
    assert labgen.solution_namespace(root / "solutions" / "lab3_wgmma.ipynb")["LAB3_KERNEL"] in source
    stamped = job.instrumented(source)
    assert stamped.count("clock64()") == source.count("clock64()") + 3 and "%%smid" in stamped
    assert gpu.compile(stamped, "lab3_gemm").report.uses_wgmma


def test_the_timeline_shows_what_the_lesson_says():
    lab3 = tw.run_scenario("Lab 3: one warpgroup, thread 0 produces", stages=2)
    ring = tw.run_scenario("overlapped (wait_group 1)", stages=4, consumers=2)
    assert lab3.pipeline.tensor_utilization < 0.5 < 0.8 < ring.pipeline.tensor_utilization
    coop = tw.run_scenario("cooperative consumers (epilogue per tile)", stages=4, k_tiles=24, tma_latency=300,
                           epilogue=1500)
    pong = tw.run_scenario("ping-pong consumers (epilogue per tile)", stages=4, k_tiles=24, tma_latency=300,
                           epilogue=1500)
    assert pong.pipeline.tensor_utilization > coop.pipeline.tensor_utilization + 0.03
    wait0 = tw.run_scenario("wait for every group (wait_group 0)", stages=4, consumers=1, k_tiles=32)
    wait1 = tw.run_scenario("overlapped (wait_group 1)", stages=4, consumers=1, k_tiles=32)
    assert wait1.pipeline.elapsed < wait0.pipeline.elapsed


def test_bars_cover_the_trace():
    out = tw.run_scenario("overlapped (wait_group 1)", stages=3, consumers=2, k_tiles=6)
    bars, marks = tw.timeline_bars(out.pipeline)
    p = out.pipeline
    assert sum(b.kind == "wgmma" and b.lane == "tensor cores" for b in bars) == len(p.events("read"))
    assert sum(b.kind == "TMA in flight" for b in bars) == len(p.events("tma_issue"))
    assert sum(b.kind == "tile in the stage" for b in bars) == 6
    assert len(marks) == len([e for e in p.events("phase_complete") if e.stage is not None])
    assert all(b.end >= b.start for b in bars)
    fig = tw.timeline_figure(bars, marks)
    assert fig.layout.width <= 900


def test_measured_bars_from_a_capture():
    data = {"meta": {"gpu": "x", "driver": "y", "date": "z"}, "how": "test",
            "blocks": [{"block": [0, 0], "sm": 0, "steps": [[0, 900, 1000], [1000, 1900, 2000]]},
                       {"block": [1, 0], "sm": 0, "steps": [[50, 950, 1100]]}]}
    bars, marks = tw.measured_bars(data)
    assert len(bars) == 3 * 3 and not marks
    assert {b.lane for b in bars} == {"block [0, 0]", "block [1, 0]", "tensor cores"}


def test_the_committed_capture_if_any_is_consistent():
    data = tw.load_measured()
    if data is None:
        pytest.skip("tests/data/lab3_timeline_h100.json not captured yet (tools/h100/wgmma_timeline.py)")
    assert {"gpu", "driver", "date"} <= set(data["meta"]) and "H100" in data["meta"]["gpu"]
    for b in data["blocks"]:
        for issue, full, done in b["steps"]:
            assert issue <= full <= done
    json.dumps(data)


# ------------------------------------------------------------------------------------------- registers
def test_register_budget_calculator():
    b = registers.budget(3, [24, 240, 240])
    assert (b.entry, b.pool, b.asked, b.verdict) == (168, 168 * 384, 504 * 128, "ok")
    assert registers.budget(3, [24, 248, 240]).verdict == "over the pool"
    assert "hangs" in registers.budget(3, [24, 248, 248]).outcome
    assert registers.budget(3, [20, 240, 240]).verdict == "not a multiple of 8"
    assert registers.budget(3, [24, 264, 240]).verdict == "outside 24..256"
    assert registers.budget(3, [24, 240, 240], None).verdict == "ignored (C7508)"
    with pytest.raises(ValueError):
        registers.budget(3, [24, 240])


@pytest.mark.parametrize("threads, minb, entry", [(384, 1, 168), (384, 2, 80), (512, 1, 128), (640, 1, 96)])
def test_entry_registers_match_nvrtc(threads, minb, entry):
    """The rule the calculator uses, against what ptxas reports for a kernel raising a warpgroup to 256."""
    from helpers import gpu

    src = f"""#include "hopper.cuh"
extern "C" __global__ void __launch_bounds__({threads}, {minb}) k(float* out) {{
  if (threadIdx.x / 128 == 0) hopper::setmaxnreg_dec<24>(); else hopper::setmaxnreg_inc<256>();
  out[threadIdx.x] = threadIdx.x;
}}"""
    report = gpu.compile(src, "k").report
    assert registers.entry_registers(threads, minb) == report.registers == entry
    assert not report.setmaxnreg_ignored


def test_c7508_as_the_lesson_shows_it():
    from helpers import gpu

    src = """#include "hopper.cuh"
extern "C" __global__ void BOUNDS demo(float* out) {
  if (threadIdx.x / 128 == 0) hopper::setmaxnreg_dec<24>();
  else hopper::setmaxnreg_inc<240>();
  out[threadIdx.x] = threadIdx.x;
}"""
    pinned = gpu.compile(src.replace("BOUNDS", "__launch_bounds__(384, 1)"), "demo").report
    free = gpu.compile(src.replace("BOUNDS", "__launch_bounds__(384)"), "demo").report
    assert (pinned.registers, pinned.setmaxnreg_ignored) == (168, False)
    assert free.setmaxnreg_ignored and "C7508" in free.log
    with pytest.raises(gpu.CompileError, match="multiple of 8"):
        gpu.compile(src.replace("BOUNDS", "__launch_bounds__(384, 1)").replace("<24>", "<20>"), "demo")


# ------------------------------------------------------------------------------------------- the notebook's rules
LESSON = Path(__file__).resolve().parents[2] / "lessons" / "04_pipelines.ipynb"


def _quiz_name(cell) -> str | None:
    m = re.fullmatch(r"\s*lesson04\.(\w+)\s*", cell.source) if cell.cell_type == "code" else None
    return m.group(1) if m else None


def test_every_lesson04_quiz_is_shown_once():
    nb = nbformat.read(LESSON, as_version=4)
    shown = [q for q in map(_quiz_name, nb.cells) if q]
    defined = {k.split(".")[1] for k in all_quizzes() if k.startswith("lesson04.")}
    assert len(shown) == len(set(shown)) and set(shown) == defined


def test_no_source_document_is_named():
    pattern = re.compile(r"source document|\bseeds?\b|study notes|\b00[0-4]_|\bgist\b|fast\.cu", re.I)
    for path in (LESSON, LESSON.parents[1] / "solutions" / "lab4_pipeline.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            assert not pattern.search(cell.source), f"{path.name} {cell.id}: {pattern.search(cell.source)}"


def test_no_quiz_answer_is_printed_above_its_quiz():
    """Run the lesson's code cells in order (no kernel needed: they print text) and look at what the code cell above
    each quiz printed."""
    import contextlib
    import io

    nb = nbformat.read(LESSON, as_version=4)
    ns: dict = {}
    printed: list[tuple[str | None, str]] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        q = _quiz_name(cell)
        if q:
            printed.append((q, ""))
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(cell.source, cell.id, "exec"), ns)
        printed.append((None, buf.getvalue()))
    quizzes = all_quizzes()
    last = ""
    for q, text in printed:
        if q is None:
            last = text
            continue
        right = str(quizzes[f"lesson04.{q}"].right)  # numbers and pairs (choices may be named in the output)
        spellings = [right, f"({right})"] if re.fullmatch(r"\d+, \d+", right) else (
            [right] if re.fullmatch(r"\d\d+", right) else [])
        for s in spellings:
            assert not re.search(rf"(?<![\d.]){re.escape(s)}(?![\d.])", last), f"{q}: {s!r} printed above it"


def test_the_try_it_yourself_claims():
    """The widget's prompts: the parity bug needs the ring to wrap (S + 1 K tiles); EMPTY count 1 is right with one
    consumer."""
    for stages in (2, 3, 4, 6):
        name = "bug: parity not flipped on wrap"
        assert tw.run_scenario(name, stages=stages, k_tiles=stages).ok
        assert not tw.run_scenario(name, stages=stages, k_tiles=stages + 1).ok
    assert tw.run_scenario("bug: EMPTY count 1 with 2 consumers", consumers=1).ok
    assert not tw.run_scenario("overlapped (wait_group 1)", stages=1).ok


def test_the_committed_setmaxnreg_capture_if_any_is_consistent():
    data = registers.load_measured()
    if data is None:
        pytest.skip("tests/data/setmaxnreg_h100.json not captured yet (tools/h100/setmaxnreg.py)")
    assert "H100" in data["meta"]["gpu"]
    for run in data["budgets"]:
        assert run["adds_up"] == (run["producer"] + 2 * run["consumers"] <= 3 * run["entry"])
