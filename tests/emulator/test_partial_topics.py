"""Pipeline counts derived and checked at init, the effective prefetch depth, the sequence barrier's participant
count, and block-striped type variants (vector width, packed bf16x2 reductions without flush): the model, the
course's kernels and the lessons' words agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from helpers.course.checks import lab7
from helpers.course.quizzes import lesson04, lesson07
from helpers.hopper import pipeline as pl
from helpers.hopper import seqbar, striped

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "bench" / "kernels"


# ------------------------------------------------------------------------------------------- counts at init
@pytest.mark.parametrize("warpgroups, cluster, multicast, want", [
    (1, (1, 1), "AB", (1, 1)), (2, (1, 1), "AB", (1, 2)), (2, (2, 1), "B", (1, 4)), (1, (2, 1), "B", (1, 2)),
    (2, (2, 1), "A", (1, 2)), (2, (2, 2), "AB", (1, 6)), (2, (1, 4), "AB", (1, 8)), (3, (2, 2), "", (1, 3)),
])
def test_arrival_counts(warpgroups, cluster, multicast, want):
    assert pl.arrival_counts(warpgroups, cluster, multicast) == want


def test_both_operands_multicast_is_cutlass_formula():
    for cm in (1, 2, 4):
        for cn in (1, 2, 4):
            for wg in (1, 2, 3):
                assert pl.arrival_counts(wg, (cm, cn))[1] == (cm + cn - 1) * wg


def test_verify_init_names_each_broken_rule():
    assert pl.verify_init(4, 1, 2, consumer_warpgroups=2) == []
    low = pl.verify_init(4, 1, 2, consumer_warpgroups=2, cluster=(2, 1), multicast="B")
    assert len(low) == 1 and "EMPTY initialised with 2, but 4" in low[0] and "too early" in low[0]
    high = pl.verify_init(4, 2, 2, consumer_warpgroups=2)
    assert len(high) == 1 and "FULL initialised with 2, but 1" in high[0] and "deadlock" in high[0]
    assert "at least one" in pl.verify_init(0, 1, 2, consumer_warpgroups=2)[0]
    bars = pl.verify_init(4, 1, 2, consumer_warpgroups=2, named_barriers={1: 256, 2: 176, 16: 128, 3: 0})
    assert len(bars) == 3 and any("176" in b for b in bars) and any("barrier 16" in b for b in bars)
    with pytest.raises(ValueError):
        pl.arrival_counts(0)


@pytest.mark.parametrize("path", sorted(p.name for p in KERNELS.glob("lab*.cu")))
def test_the_course_kernels_init_the_derived_counts(path):
    """Each course kernel's mbar_init counts, read from its source by the reader Lab 7's step uses
    (checks.lab7.kernel_init), are the counts the model derives from its roles."""
    ring = lab7.kernel_init((KERNELS / path).read_text(), path)
    if ring is None:
        pytest.skip(f"{path} has no full/empty ring")
    got = (ring.full, ring.empty)
    assert got == pl.arrival_counts(ring.consumer_warpgroups, ring.cluster, ring.multicast), path
    assert pl.verify_init(ring.stages, *got, consumer_warpgroups=ring.consumer_warpgroups, cluster=ring.cluster,
                          multicast=ring.multicast) == []


def test_the_reader_finds_every_ring():
    names = [k.name for k in lab7.course_kernel_inits()]
    assert "lab7_clusters.cu" in names and "lab8_pingpong.cu" in names and len(names) >= 6
    lab7_ring = next(k for k in lab7.course_kernel_inits() if k.name == "lab7_clusters.cu")
    assert (lab7_ring.cluster, lab7_ring.multicast, lab7_ring.empty) == ((2, 1), "B", 4)


# ------------------------------------------------------------------------------------------- prefetch depth
@pytest.mark.parametrize("stages", [2, 3, 4, 6])
@pytest.mark.parametrize("tma", [50, 600])
def test_prefetch_depth_is_s_minus_one_or_two(stages, tma):
    for overlap, held in ((False, 1), (True, 2)):
        p = pl.standard_pipeline(k_steps=24, stages=stages, tma_latency=tma, wgmma_latency=40, overlap=overlap)
        p.run()
        assert pl.prefetch_depth(p) == stages - held


def test_lesson04_quiz_answer_is_the_models():
    p = pl.standard_pipeline(k_steps=24, stages=4, tma_latency=600, wgmma_latency=40, overlap=True)
    p.run()
    assert lesson04.prefetch_ahead.right == pl.prefetch_depth(p) == 2


# ------------------------------------------------------------------------------------------- participant count
def test_handoff():
    assert "exactly one turn" in seqbar.handoff(128, 128)
    assert "exactly one turn" in seqbar.handoff(1, 1)
    assert "waits forever" in seqbar.handoff(128, 1) and "127 more" in seqbar.handoff(128, 1)
    assert "128 phases complete" in seqbar.handoff(1, 128)
    assert "64 phases" in seqbar.handoff(2, 128)
    assert "sit in the next" in seqbar.handoff(2, 3)


def test_pingpong_kernel_order_slots_count_every_arriving_thread():
    src = next(KERNELS.glob("lab*_pingpong.cu")).read_text()
    count = int(re.search(r"mbar_init\(&order\[i\],\s*(\d+)\)", src).group(1))
    arrive = re.search(r"hopper::mbar_arrive\(&order\[", src)
    assert arrive and "if (" not in src[src.rfind("\n", 0, arrive.start()):arrive.start()]  # every thread arrives
    assert count == lesson07.participants.right == 128
    assert "exactly one turn" in seqbar.handoff(count, 128)


# ------------------------------------------------------------------------------------------- striped variants
@pytest.mark.parametrize("elements, threads, nbytes, width", [
    (128 * 256, 256, 4, 4), (128 * 256, 256, 2, 8), (100, 32, 4, 4), (6, 32, 2, 2), (7, 32, 4, 1), (8, 1, 8, 2),
    (12, 4, 2, 4),
])
def test_vector_width(elements, threads, nbytes, width):
    w = striped.vector_width(elements, threads, nbytes)
    assert w == width and elements % w == 0 and w * nbytes <= 16
    assert striped.accesses_per_thread(elements, threads, nbytes) == -(-(elements // w) // threads)
    with pytest.raises(striped.StripeError):
        striped.vector_width(elements, threads, 1)


def _bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint32)


def test_packed_add_rounds_each_half_and_keeps_subnormals():
    rng = np.random.default_rng(5)
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    ws = (_bits(a) | (_bits(a * 2) << 16)).astype(np.uint32)
    part = (_bits(b) | (_bits(b * 3) << 16)).astype(np.uint32)
    out = ws.copy()
    striped.reduce_add_bf16x2(out, [part], [0])
    from helpers.hopper.epilogue import bf16_bits_to_f32, to_bf16_bits

    for shift in (0, 16):
        x = bf16_bits_to_f32((ws >> shift) & 0xFFFF).astype(np.float64)
        y = bf16_bits_to_f32((part >> shift) & 0xFFFF).astype(np.float64)
        assert np.array_equal((out >> shift) & 0xFFFF, to_bf16_bits((x + y).astype(np.float32)))
    tiny = np.full(4, 0x00010001, np.uint32)
    kept, flushed = np.zeros(4, np.uint32), np.zeros(4, np.uint32)
    striped.reduce_add_bf16x2(kept, [tiny] * 3, range(3))
    striped.reduce_add_bf16x2(flushed, [tiny] * 3, range(3), flush=True)
    assert (kept == 0x00030003).all() and (flushed == 0).all()


@pytest.mark.timeout(600)
def test_executor_runs_the_packed_reduction_like_the_model(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("packed_red", ROOT / "tools" / "h100" / "packed_red.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from helpers import gpu

    kernel = gpu.compile(mod.KERNEL, "packed_red")
    parts = mod.partials(np.random.default_rng(3))[:4]  # 4 blocks keep it quick
    ws = gpu.to_device(np.zeros(mod.WORDS, np.uint32))
    gpu.launch(kernel, 4, 128, 0, ws, gpu.to_device(parts.reshape(-1)), np.int32(mod.WORDS))
    want = np.zeros(mod.WORDS, np.uint32)
    striped.reduce_add_bf16x2(want, list(parts), range(4))
    assert np.array_equal(gpu.to_host(ws), want)


def test_packed_reduction_fixture_from_the_h100():
    path = ROOT / "tests" / "data" / "packed_red_h100.json"
    if not path.exists():
        pytest.skip("tests/data/packed_red_h100.json is written on an H100 by tools/h100/packed_red.py")
    rec = json.loads(path.read_text())
    assert "H100" in rec["meta"]["gpu"]
    parts = np.array(rec["partials"], np.uint32).reshape(64, -1)
    want = np.zeros(parts.shape[1], np.uint32)
    striped.reduce_add_bf16x2(want, list(parts), range(64))
    assert np.array_equal(np.array(rec["words"], np.uint32), want)
    assert rec["model_agrees"] and rec["subnormal_halves_kept"] > 0
