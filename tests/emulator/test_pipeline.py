"""The warp-role scheduler: standard mainloop, trace, deadlock and hazards."""

from __future__ import annotations

import pytest

from helpers import pipeline as pl
from helpers.mbarrier import Deadlock


@pytest.mark.parametrize("stages, consumers", [(1, 1), (2, 1), (4, 1), (4, 2), (6, 3)])
def test_standard_pipeline_trace(stages, consumers):
    k = 24
    p = pl.standard_pipeline(k_steps=k, stages=stages, consumers=consumers, tma_latency=300, wgmma_latency=50)
    trace = p.run()
    assert len(p.events("tma_issue")) == 2 * k and len(p.events("tma_landed")) == 2 * k
    assert len(p.events("read")) == 4 * k * consumers and len(p.events("release")) == k * consumers
    times = [e.time for e in trace]
    assert times == sorted(times)
    for s in range(stages):  # every read of a stage follows the landing of its fill
        landed = [e.time for e in p.events("tma_landed", stage=s)][1::2]
        for e in p.events("read", stage=s):
            assert e.time >= landed[e.phase]
    assert all(b.phase == len(range(s, k, stages)) for s, b in enumerate(p.full))


def test_more_stages_hide_latency():
    t1 = pl.standard_pipeline(64, 1, tma_latency=500, wgmma_latency=100)
    t4 = pl.standard_pipeline(64, 4, tma_latency=500, wgmma_latency=100)
    t1.run()
    t4.run()
    assert t4.elapsed < 0.6 * t1.elapsed


def test_deadlock_names_waiters():
    p = pl.Pipeline(stages=2)
    p.add_role("producer", pl.producer_program(4, 2, 8192, 8192))

    def forgets_release(ctx):
        for k in range(4):
            yield ctx.wait(ctx.full[k % 2], (k // 2) & 1)
            yield ctx.wgmma(k % 2)

    p.add_role("consumer", forgets_release, consumer=True)
    with pytest.raises(Deadlock) as e:
        p.run()
    msg = str(e.value)
    assert "producer waits" in msg and "empty[0] for parity 0" in msg and "consumer waits" in msg


def test_read_before_full():
    p = pl.Pipeline(stages=2)
    p.add_role("producer", pl.producer_program(2, 2, 100, 100))

    def eager(ctx):
        yield ctx.wgmma(0)

    p.add_role("consumer", eager, consumer=True)
    with pytest.raises(pl.ReadBeforeFull, match="stage 0"):
        p.run()


def test_overwrite_before_empty():
    p = pl.Pipeline(stages=1, tma_latency=10)

    def impatient(ctx):
        for _k in range(2):
            yield ctx.arrive_expect_tx(ctx.full[0], 64)
            yield ctx.tma_load(0, ctx.full[0], 64)
            yield ctx.work(100)

    def slow(ctx):
        yield ctx.wait(ctx.full[0], 0)
        yield ctx.wgmma(0, duration=1000)
        yield ctx.arrive(ctx.empty[0])

    p.add_role("producer", impatient)
    p.add_role("consumer", slow, consumer=True)
    with pytest.raises(pl.OverwriteBeforeEmpty, match="consumer 'consumer' is still reading"):
        p.run()


def test_bad_yield_is_reported():
    p = pl.Pipeline(stages=1)

    def wrong(ctx):
        yield 5

    p.add_role("r", wrong)
    with pytest.raises(pl.PipelineError, match="yielded 5"):
        p.run()
