"""Timelines of a student's own kernel: the executor's per-warp events with the pipeline model's
latencies, the converter to the Lesson 04 widget's lanes, and the H100 stamps (HOPPER_STAMP) — written by a
stamped Lab 4 kernel run on the executor, converted, and checked against the executor's own events."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
from kernels import ROOT

from helpers import gpu
from helpers.course.widgets import pipeline as pw
from helpers.course.widgets import trace as TW
from helpers.gpu import TensorMapArg, executor
from helpers.gpu.executor import trace as T
from helpers.hopper import pipeline as pl

RING4 = 4 * 32 * 1024 + 1024
M, N, K = 256, 256, 512  # 2 x 2 blocks of 128 x 128, 8 K steps: every stage of the 4-stage ring used twice
FIXTURE = ROOT / "tests" / "data" / "lab4_trace_h100.json"


def _operands() -> tuple[np.ndarray, np.ndarray]:
    return gpu.random_host((M, K), gpu.bfloat16, seed=1), gpu.random_host((N, K), gpu.bfloat16, seed=2)


@pytest.fixture(scope="module")
def ring_run() -> executor.RunResult:
    """Lab 4's 128x128 ring kernel, traced on the executor."""
    a, b = _operands()
    kern = gpu.compile((ROOT / "bench" / "kernels" / "lab4_128x128.cu").read_text(), "lab4_gemm_128x128")
    return gpu.run_on_executor(kern, (2, 2), 384, RING4, TensorMapArg(a, (128, 64)), TensorMapArg(b, (128, 64)),
                   np.full((M, N), np.nan, np.float32), np.int32(M), np.int32(N), np.int32(K), hazards=False,
                   trace=True)


@pytest.fixture(scope="module")
def stamped_run() -> tuple[executor.RunResult, np.ndarray]:
    """The stamped Lab 4 kernel on the executor, traced too (so stamps and events can be compared)."""
    a, b = _operands()
    kern = gpu.compile(T.stamped_lab4(), "lab4_gemm_128x128")
    res = gpu.run_on_executor(kern, (2, 2), 384, RING4, TensorMapArg(a, (128, 64)), TensorMapArg(b, (128, 64)),
                  np.full((M, N), np.nan, np.float32), np.int32(M), np.int32(N), np.int32(K), T.stamp_buffer(4, 12),
                  hazards=False, trace=True)
    return res, a.astype(np.float64) @ b.astype(np.float64).T


# ------------------------------------------------------------------------------------------- the executor's events
def test_traced_runs_use_the_pipeline_models_latencies(ring_run: executor.RunResult) -> None:
    defaults = inspect.signature(pl.Pipeline).parameters
    tr = ring_run.trace
    assert tr.meta["tma_latency"] == defaults["tma_latency"].default == 500
    assert tr.meta["wgmma_latency"] == defaults["wgmma_latency"].default == 100
    issued = {e.detail.split(":")[0]: e.time for e in tr.of("tma_issue")}
    landed = {e.detail.split(":")[0]: e.time for e in tr.of("tma_landed")}
    assert len(issued) == 4 * 2 * (K // 64) and landed.keys() == issued.keys()
    assert {landed[k] - issued[k] for k in issued} == {500}
    for cta in tr.blocks():  # one wgmma at a time on a block's tensor cores, 100 cycles each
        spans = sorted((e.time, e.end) for e in tr.block(cta).of("wgmma"))
        assert len(spans) == 2 * 4 * (K // 64) and {e - s for s, e in spans} == {100}
        assert all(s1 >= e0 for (_, e0), (s1, _) in zip(spans, spans[1:], strict=False))


def test_every_warp_records_what_it_issued_waited_for_and_arrived_on(ring_run: executor.RunResult) -> None:
    blk = ring_run.trace.block((0, 0, 0))
    assert blk.roles() == {0: "producer", 1: "consumer", 2: "consumer"}
    assert {e.warp for e in blk.of("tma_issue")} == {0}
    assert {e.warp for e in blk.of("wgmma_issue")} == set(range(4, 12))
    assert len(blk.of("arrive_expect_tx")) == K // 64
    assert sorted({e.barrier for e in blk.of("arrive") if e.warp >= 4}) == [f"empty[{s}]" for s in range(4)]
    for kind in ("wait", "wait_group"):  # every wait that parked ends
        for w in range(12):
            assert len(blk.of(kind, w)) == len(blk.of(f"{kind}_done", w))
    done = blk.of("phase_complete")
    assert {e.barrier for e in done} == {f"full[{s}]" for s in range(4)} | {f"empty[{s}]" for s in range(4)}
    assert all(e.stage == int(e.barrier[-2]) for e in done)
    assert len(blk.of("done")) == 12


def test_trace_round_trips_through_json(ring_run: executor.RunResult) -> None:
    tr = ring_run.trace
    back = T.Trace.from_json(json.loads(json.dumps(tr.to_json())))
    assert back.events == tr.events and back.meta == tr.meta and back.source == "emulator"


def test_a_run_without_trace_records_nothing() -> None:
    assert len(T.Trace.from_machine(None)) == 0


# ------------------------------------------------------------------------------------------- the widget's lanes
def test_bars_and_marks_for_the_pipeline_widget(ring_run: executor.RunResult) -> None:
    bars, marks = TW.trace_bars(ring_run.trace)
    lanes = {b.lane for b in bars}
    assert lanes == {"WG0 producer (warp 0)", "WG1 consumer (warp 4)", "WG2 consumer (warp 8)", "tensor cores",
                     "stage 0", "stage 1", "stage 2", "stage 3"}
    assert {b.kind for b in bars} <= set(pw.KINDS)
    assert all(b.end >= b.start for b in bars)
    flights = [b for b in bars if b.kind == "TMA in flight"]
    assert len(flights) == 2 * (K // 64) and {b.end - b.start for b in flights} == {500}
    held = [b for b in bars if b.kind == "tile in the stage"]
    assert len(held) == K // 64  # each fill, from full completing to the stage's release
    assert any(m.text == "full[0] phase 0 done" and m.lane == "stage 0" for m in marks)
    assert [b for b in bars if b.lane == "tensor cores"] and all(b.kind == "wgmma" for b in bars
                                                                 if b.lane == "tensor cores")


def test_trace_widget_fits_the_column(ring_run: executor.RunResult) -> None:
    from helpers.course.widgets import figure

    box = TW.trace_widget(ring_run.trace)
    assert isinstance(box, figure.WidgetBox)
    fig = box.children[-1]
    assert fig.layout.width <= 900
    picker = box.children[0].children[0]
    assert len(picker.options) == 4
    picker.value = picker.options[-1][1]  # another block redraws
    assert any(t.name == "wgmma" for t in fig.data)
    assert "time waiting on barriers" in box.children[1].value


# ------------------------------------------------------------------------------------------- HOPPER_STAMP
def test_stamped_lab4_is_the_bench_kernel_plus_stamps() -> None:
    src = T.stamped_lab4()
    plain = (ROOT / "bench" / "kernels" / "lab4_128x128.cu").read_text()
    stripped = "\n".join(line for line in src.splitlines() if "HOPPER_STAMP" not in line and "HOPPER_TRACE" not in
                         line and "hopper_trace.cuh" not in line)
    assert stripped == plain.rstrip("\n").replace("int K) {", "int K, unsigned long long* __restrict__ trace) {")
    with pytest.raises(ValueError, match="occurs 0 times"):
        T.add_stamps(plain, [("no such line", "", "")])


def test_stamps_run_on_the_executor_and_convert(stamped_run: tuple) -> None:
    res, ref = stamped_run
    assert np.allclose(res.arrays[2], ref, rtol=2e-2, atol=5e-2)
    st = T.from_stamps(res.arrays[3], (2, 2), 384)
    assert st.unit == "cycles" and st.blocks() == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    blk = st.block((1, 0, 0))
    assert blk.roles() == {0: "producer", 1: "consumer", 2: "consumer"}
    steps = K // 64
    assert len(blk.of("tma_issue", 0)) == steps and len(blk.of("wait", 0)) == steps  # the producer's empty waits
    for w in range(4, 12):
        assert [e.barrier for e in blk.of("wait", w)] == [f"full[{k % 4}]" for k in range(steps)]
        assert len(blk.of("wait_done", w)) == steps and len(blk.of("wgmma_issue", w)) == steps
        assert len(blk.of("wait_group", w)) == steps + 1 and len(blk.of("arrive", w)) == steps - 1
        assert len(blk.of("work", w)) == 1 and len(blk.of("done", w)) == 1
    sms = [{e.detail for e in st.block(b).of("start")} for b in st.blocks()]  # %smid: one SM per block
    assert all(len(x) == 1 for x in sms) and len(set.union(*sms)) == 4
    assert min(e.time for e in blk.events) == 0


def test_stamps_agree_with_the_executors_own_events(stamped_run: tuple) -> None:
    """The stamp before each copy is within a few cycles of the copy's issue; no consumer gets past its wait for
    a stage before that fill's full phase completed."""
    res, _ = stamped_run
    st = T.from_stamps(res.arrays[3], (2, 2), 384, align="none")
    for cta in res.trace.blocks():
        ev = res.trace.block(cta)
        copies = [e.time for e in ev.of("tma_issue")][::2]  # A's copy of each step (the stamp comes before it)
        stamps = [e.time for e in st.block(cta).of("tma_issue")]
        assert len(copies) == len(stamps) and all(0 <= c - s <= 64 for c, s in zip(copies, stamps, strict=True))
        fills = {}
        for e in ev.of("phase_complete"):
            if e.barrier.startswith("full"):
                fills.setdefault(e.stage, []).append(e.time)
        for w in range(4, 12):
            through = st.block(cta).of("wait_done", w)
            for k, e in enumerate(through):
                assert e.time >= fills[k % 4][k // 4], (cta, w, k)


def test_a_null_trace_buffer_turns_stamping_off() -> None:
    a, b = _operands()
    kern = gpu.compile(T.stamped_lab4(), "lab4_gemm_128x128")
    res = gpu.run_on_executor(kern, (2, 2), 384, RING4, TensorMapArg(a, (128, 64)), TensorMapArg(b, (128, 64)),
                  np.full((M, N), np.nan, np.float32), np.int32(M), np.int32(N), np.int32(K), np.uint64(0),
                  hazards=False)
    assert np.allclose(res.arrays[2], a.astype(np.float64) @ b.astype(np.float64).T, rtol=2e-2, atol=5e-2)


def test_stamp_trace_draws_with_the_widget(stamped_run: tuple) -> None:
    res, _ = stamped_run
    st = T.from_stamps(res.arrays[3], (2, 2), 384, meta={"kernel": "lab4_gemm_128x128"})
    bars, marks = TW.trace_bars(st)
    assert {"WG0 producer (warp 0)", "WG1 consumer (warp 4)", "WG2 consumer (warp 8)"} <= {b.lane for b in bars}
    assert [b for b in bars if b.kind == "TMA in flight"] and [b for b in bars if b.kind == "epilogue"]
    assert any(m.text.startswith("wgmmas of stage") for m in marks)


# ------------------------------------------------------------------------------------------- the H100 capture
@pytest.mark.skipif(not FIXTURE.exists(), reason="no H100 trace committed yet: run tools/h100/"
                                                 "pipeline_trace.py on an H100 and commit $OUT/lab4_trace_h100.json")
def test_h100_trace_of_lab4() -> None:
    tr = T.Trace.from_json(FIXTURE)
    assert tr.source == "h100" and tr.meta["gpu"].startswith("NVIDIA H100") and tr.meta["driver"]
    assert tr.meta["date"] and tr.meta["kernel"] == "lab4_gemm_128x128" and tr.meta["correct"]
    blk = tr.block(tr.blocks()[0])
    assert blk.roles() == {0: "producer", 1: "consumer", 2: "consumer"}
    bars, _ = TW.trace_bars(tr)
    assert [b for b in bars if b.kind == "TMA in flight"]


def test_the_h100_job_runs_dry_on_the_emulator(tmp_path) -> None:  # noqa: ANN001
    """tools/h100/pipeline_trace.py --dry: the same steps on the emulator, so the H100 run has no surprise."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, OUT=str(tmp_path), HELPERS_EXECUTOR="force")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "h100" / "pipeline_trace.py"), "--dry"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    tr = T.Trace.from_json(tmp_path / "lab4_trace_h100.json")
    assert tr.meta["kernel"] == "lab4_gemm_128x128" and tr.meta["correct"] and tr.meta["shape"] == [256, 256, 512]
    assert {e.warp for e in tr.events} == {0, 4, 8} and len(tr.blocks()) == 2
    assert set(tr.meta["summary"]) == {"median_cycles_copy_to_first_consumer", "median_cycles_per_k_step",
                                       "consumer_share_waiting_on_full", "consumer_share_in_wait_group"}
    assert "Lab 4 128x128 ring at 256x256x512" in (tmp_path / "trace_summary.txt").read_text()
