"""helpers.hopper.cluster: the multicast plan (who loads what, who receives it, what each CTA expects), the two-CTA
mainloop
model (the reference protocol survives every timing, the early-bytes timing really lands bytes early, every rule
is reported in words), the co-resident counts and the SASS of the two remote-arrive forms against their captures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers.course.checks import lab7
from helpers.hopper import cluster
from helpers.hopper.mbarrier import Deadlock

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "tests" / "data" / "lab56_h100.json"
SASS = ROOT / "tests" / "data" / "lab6_arrive_sass.json"


# ------------------------------------------------------------------------------------------- the plan
def test_lab7_plan():
    plans = cluster.multicast_plan(2, 1, share="B")
    assert [p.expect_tx for p in plans] == [49152, 49152] and [p.l2_bytes for p in plans] == [32768, 32768]
    b_loads = [ld for p in plans for ld in p.issues if ld.operand == "B"]
    assert [ld.rows for ld in b_loads] == [(0, 128), (128, 256)]
    assert all(cluster.rank_mask(ld.receivers, 2) == 0b11 for ld in b_loads)
    a_loads = [ld for p in plans for ld in p.issues if ld.operand == "A"]
    assert [cluster.rank_mask(ld.receivers, 2) for ld in a_loads] == [0b01, 0b10]


def test_plans_of_other_shapes():
    for cm, cn, share in ((1, 1, "none"), (2, 2, "both"), (4, 1, "B"), (1, 2, "A"), (2, 2, "B")):
        plans = cluster.multicast_plan(cm, cn, share=share)
        assert len(plans) == cm * cn and sorted(p.rank for p in plans) == list(range(cm * cn))
        assert all(p.expect_tx == (128 + 256) * 64 * 2 for p in plans)  # every CTA gets a whole stage
        received = sum(ld.nbytes * len(ld.receivers) for p in plans for ld in p.issues)
        assert received == sum(p.expect_tx for p in plans)
    assert sum(p.l2_bytes for p in cluster.multicast_plan(2, 2, share="both")) == 4 * 24576
    with pytest.raises(cluster.ClusterError):
        cluster.multicast_plan(4, 8)


def test_geometry_is_the_kernels():
    from helpers.course.checks.lab7 import source_constants

    consts = source_constants((ROOT / "bench" / "kernels" / "lab7_clusters.cu").read_text())
    assert {k: consts[k] for k in ("BM", "BN", "BK", "CONSUMERS", "CLUSTER")} == {
        "BM": 128, "BN": 256, "BK": 64, "CONSUMERS": 2, "CLUSTER": 2}
    g = cluster.LAB7
    assert (g.A_BYTES, g.B_BYTES, g.STAGE_BYTES, g.B_HALF, g.B_ROWS) == (16384, 32768, 49152, 16384, 128)


# ------------------------------------------------------------------------------------------- the model
def test_reference_survives_every_timing_and_early_bytes_really_come_early():
    rng = np.random.default_rng(4)
    for _ in range(10):
        a, b, pairs = lab7.model_problem(rng)
        models = cluster.run_mainloop(a, b, pairs, cluster.reference_init, cluster.reference_produce,
                                      cluster.reference_release)
        by = {m.schedule.name: m for m in models}
        assert by["multicast bytes arrive early"].early_landings > 0
        assert all(m.remote_arrivals == 2 * 2 * len(pairs) * m.steps for m in models)  # 2 CTAs × 2 consumers
        assert all(m.multicasts == 2 * len(pairs) * m.steps for m in models)


def _problem():
    return lab7.model_problem(np.random.default_rng(0))


def _run(init=cluster.reference_init, produce=cluster.reference_produce, release=cluster.reference_release):
    return cluster.run_mainloop(*_problem(), init, produce, release)


def _rule(**kw) -> str:
    with pytest.raises(cluster.ClusterError) as info:
        _run(**kw)
    return info.value.rule


def _produce_with(**change):
    def produce(ctx, s, k, m0, n0):
        base = s * ctx.STAGE_BYTES
        ctx.arrive_expect_tx(ctx.full[s], ctx.STAGE_BYTES)
        ctx.tma_load("A", base, (k * ctx.BK, m0), ctx.full[s])
        dst = change["dst"](ctx, s) if "dst" in change else base + ctx.A_BYTES + ctx.rank * ctx.B_HALF
        ctx.tma_load("B", dst,
                     (k * ctx.BK, n0 + ctx.rank * ctx.B_ROWS), change.get("bar", ctx.full[s]),
                     mask=change.get("mask", 3))

    return produce


def test_rules_in_words():
    assert _rule(produce=_produce_with(mask=0b111)) == "multicast-mask"
    assert _rule(produce=_produce_with(mask=0)) == "multicast-mask"
    assert _rule(release=lambda ctx, s: ctx.arrive(ctx.mapa(ctx.empty[s], 2))) == "mapa-rank"
    assert _rule(produce=lambda ctx, s, k, m0, n0: ctx.arrive_expect_tx(ctx.mapa(ctx.full[s], 1 - ctx.rank), 1)) \
        == "remote-barrier"
    assert _rule(produce=lambda ctx, s, k, m0, n0: ctx.tma_load("B", 0, (0, 0), ctx.mapa(ctx.full[s], 1 - ctx.rank),
                                                                mask=3)) == "remote-barrier"
    assert _rule(produce=lambda ctx, s, k, m0, n0: ctx.tma_load("C", 0, (0, 0), ctx.full[s])) == "operand"
    assert _rule(produce=lambda ctx, s, k, m0, n0: ctx.tma_load("A", 4 * 49152, (0, 0), ctx.full[s])) == "smem-range"
    assert _rule(init=lambda ctx: ctx.init(ctx.full[0], 1)) == "barrier-init"
    assert _rule(init=lambda ctx: [ctx.init(ctx.mapa(b, 1 - ctx.rank), 1) for b in ctx.full + ctx.empty]) \
        == "barrier-init"


def test_deadlock_names_cta_barrier_and_bytes():
    with pytest.raises(Deadlock) as info:
        _run(produce=_produce_with(mask=1))
    text = str(info.value)
    assert "CTA 1 consumer 0 waits" in text and "full[0] of CTA 1" in text and "bytes still missing" in text


def test_wrong_offset_reads_as_wrong_data_naming_the_part():
    with pytest.raises(cluster.ClusterError, match="wrong bytes in B"):
        _run(produce=_produce_with(dst=lambda ctx, s: s * ctx.STAGE_BYTES + ctx.A_BYTES))  # both halves at one place


def test_recording_context():
    calls = cluster.record(cluster.reference_produce, 1, 2, 3, 128, 512)
    assert calls[0] == ("arrive_expect_tx", cluster.BarrierRef(1, "full", 2), 49152)
    assert calls[2][1:] == ("B", 2 * 49152 + 16384 + 16384, (192, 640), cluster.BarrierRef(1, "full", 2), 3)
    assert [c[1].rank for c in cluster.record(cluster.reference_release, 0, 1)] == [0, 1]


# ------------------------------------------------------------------------------------------- measured facts
def test_co_resident_counts_agree_with_the_h100_capture():
    if not H100.exists():
        pytest.skip("tests/data/lab56_h100.json not captured yet; CO_RESIDENT comes from the measured facts note")
    data = json.loads(H100.read_text())["clusters"]
    for size, (clusters, sms) in cluster.CO_RESIDENT.items():
        assert data["lab5_gemm"][str(size)] == clusters and clusters * size == sms
    assert data["lab6_gemm_cluster2"] == cluster.CO_RESIDENT[2][0]


def test_sass_capture_claims():
    data = json.loads(SASS.read_text())
    def remote(windows):  # the consumers' arrives (SYNCS.ARRIVE...RED); the producer's arrive.expect_tx is another
        return [w for w in windows if w[-1].startswith("SYNCS.ARRIVE.TRANS64.RED")]

    release = remote(data["release_cluster"]["arrive_windows"])
    assert release and all(w[-5:-1] == ["MEMBAR.ALL.CTA", "MEMBAR.ALL.GPU", "ERRBAR", "CGAERRBAR"] for w in release)
    assert all(w[-1].startswith("SYNCS.ARRIVE") for w in release)
    bare = remote(data["bare"]["arrive_windows"])
    assert bare and not any("MEMBAR" in ins for w in bare for ins in w)
    assert data["release_cluster"]["ptx_arrive"][0].startswith("mbarrier.arrive.release.cluster.shared::cluster")


def test_sass_still_so_with_this_toolchain():
    import importlib.util

    spec = importlib.util.spec_from_file_location("arrive_sass", ROOT / "tools" / "h100" / "arrive_sass.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    nvdisasm = tool.find_nvdisasm()
    if not nvdisasm:
        pytest.skip("no nvdisasm here (pip install nvidia-cuda-nvdisasm to re-check the SASS capture)")
    fresh = tool.capture(nvdisasm)
    assert all(w[-5:-1] == ["MEMBAR.ALL.CTA", "MEMBAR.ALL.GPU", "ERRBAR", "CGAERRBAR"]
               for w in fresh["release_cluster"]["arrive_windows"] if w[-1].startswith("SYNCS.ARRIVE.TRANS64.RED"))
    assert not any("MEMBAR" in ins for w in fresh["bare"]["arrive_windows"] for ins in w)
