"""The warp-role scheduler: standard mainloop, trace, deadlock and hazards."""

from __future__ import annotations

import pytest

from helpers.hopper import pipeline as pl
from helpers.hopper.mbarrier import Deadlock


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


# ----------------------------------------------------------------------------------------------------------
# ring arithmetic, asynchronous wgmma groups, the tensor cores, the hazards of Lab 4
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stages", [1, 2, 3, 4, 5, 6, 7, 8, 12])
def test_stage_and_phase_follow_a_ring_that_flips_its_parity_on_wrap(stages):
    slot, parity = 0, 0
    for k in range(10 * stages + 3):
        assert pl.stage_and_phase(k, stages) == (slot, parity)
        slot += 1
        if slot == stages:
            slot, parity = 0, parity ^ 1


def _mainloop(stages, consumers=1, k=24, overlap=True, drain=60.0, **kw):
    p = pl.Pipeline(stages, kw.pop("tma", 400), kw.pop("mma", 32), wgmma_drain=drain, **kw)
    p.add_role("producer", pl.producer_program(k, stages, 16384, 16384))
    make = pl.async_consumer_program if overlap else pl.consumer_program
    for c in range(consumers):
        p.add_role(f"consumer{c}", make(k, stages, 4), consumer=True)
    return p


@pytest.mark.parametrize("stages, consumers", [(2, 1), (3, 1), (3, 2), (4, 2), (5, 1), (7, 2)])
def test_overlapped_consumers_release_each_stage_after_its_group_retired(stages, consumers):
    k = 20
    p = _mainloop(stages, consumers, k)
    p.run()
    for c in range(consumers):
        name = f"consumer{c}"
        retires = p.events("retire", role=name)
        releases = p.events("release", role=name)
        assert len(retires) == len(releases) == k
        for n, rel in enumerate(releases):  # use n is released only after group n retired
            assert rel.time >= retires[n].time and rel.stage == n % stages and rel.phase == n // stages
    reads = sorted((e.time, e.end) for e in p.events("read"))
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(reads, reads[1:], strict=False)), \
        "the tensor cores run one wgmma at a time"


def test_keeping_a_group_in_flight_hides_the_drain():
    slow, fast = _mainloop(4, overlap=False), _mainloop(4, overlap=True)
    slow.run()
    fast.run()
    assert fast.elapsed < 0.7 * slow.elapsed
    assert fast.tensor_utilization > 1.3 * slow.tensor_utilization


def test_release_before_retire_is_caught():
    def early(ctx):
        for k in range(6):
            s, ph = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.full[s], ph)
            yield ctx.wgmma_async(s)
            yield ctx.commit_group()
            yield ctx.wait_group(1)
            yield ctx.arrive(ctx.empty[s])  # the group that read s may still be running
        yield ctx.wait_group(0)

    p = pl.Pipeline(3, 200, 30)
    p.add_role("producer", pl.producer_program(6, 3, 8192, 8192))
    p.add_role("consumer", early, consumer=True)
    with pytest.raises(pl.ReleaseBeforeRetire, match=r"empty\[0\].*still running"):
        p.run()


def test_a_role_must_drain_its_groups():
    def no_drain(ctx):
        yield ctx.wait(ctx.full[0], 0)
        yield ctx.wgmma_async(0)
        yield ctx.commit_group()

    p = pl.Pipeline(1, 50, 30)
    p.add_role("producer", pl.producer_program(1, 1, 64, 64))
    p.add_role("consumer", no_drain, consumer=True)
    with pytest.raises(pl.PipelineError, match=r"wait_group\(0\)"):
        p.run()


def test_one_stage_cannot_keep_a_group_in_flight():
    with pytest.raises(Deadlock, match=r"consumer0 waits .* on full\[0\] for parity 1"):
        _mainloop(1, k=4).run()


def test_pre_arrived_empty_barriers_are_the_flipped_parity():
    def producer_plain_parity(ctx):
        for k in range(12):
            s, ph = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.empty[s], ph)
            yield ctx.arrive_expect_tx(ctx.full[s], 32768)
            yield ctx.tma_load(s, ctx.full[s], 16384)
            yield ctx.tma_load(s, ctx.full[s], 16384)

    def pre_arriving(ctx):
        for s in range(ctx.stages):
            yield ctx.arrive(ctx.empty[s])
        yield from pl.async_consumer_program(12, 3)(ctx)

    a = pl.Pipeline(3, 400, 30)
    a.add_role("producer", pl.producer_program(12, 3, 16384, 16384))
    a.add_role("consumer", pl.async_consumer_program(12, 3), consumer=True)
    b = pl.Pipeline(3, 400, 30)
    b.add_role("producer", producer_plain_parity)
    b.add_role("consumer", pre_arriving, consumer=True)
    a.run()
    b.run()
    def story(p):
        return [(e.role, e.kind, e.stage, e.phase) for e in p.trace if e.kind in ("read", "release", "tma_issue")]

    assert story(a) == story(b)
    assert abs(a.elapsed - b.elapsed) <= 3  # the 3 pre-arrivals cost their issue time


@pytest.mark.parametrize("empty_count, error", [(1, pl.OverwriteBeforeEmpty), (3, Deadlock), (256, Deadlock)])
def test_wrong_empty_count_with_two_consumers(empty_count, error):
    p = _mainloop(3, consumers=2, k=12, empty_count=empty_count)
    with pytest.raises(error):
        p.run()


def test_full_count_that_waits_for_the_tma_to_arrive_deadlocks():
    with pytest.raises(Deadlock, match=r"full\[0\] for parity 0.*1/2 arrivals"):
        _mainloop(3, k=6, full_count=2).run()


def test_producer_that_never_waits_on_empty_overwrites():
    def eager(ctx):
        for k in range(9):
            s, _ = pl.stage_and_phase(k, ctx.stages)
            yield ctx.arrive_expect_tx(ctx.full[s], 16384)
            yield ctx.tma_load(s, ctx.full[s], 16384)

    p = pl.Pipeline(3, 400, 30)
    p.add_role("producer", eager)
    p.add_role("consumer", pl.async_consumer_program(9, 3), consumer=True)
    with pytest.raises(pl.MBarrierError):  # an arrival too many on full[0], or the overwrite itself
        p.run()


def test_ping_pong_consumers_take_turns_on_each_fill():
    tiles, k_tiles, stages = 4, 6, 4

    def producer(ctx):
        for k in range(tiles * k_tiles):
            s, ph = pl.stage_and_phase(k, stages)
            yield ctx.wait(ctx.empty[s], ph ^ 1)
            yield ctx.arrive_expect_tx(ctx.full[s], 32768)
            yield ctx.tma_load(s, ctx.full[s], 32768)

    def consumer(me, turn):
        def program(ctx):  # the consumers take turns issuing their mainloops (an ordered pair of barriers)
            for n, tile in enumerate(range(me, tiles, 2)):
                if me == 1 or n > 0:
                    yield ctx.wait(turn[me], (n - 1 + me) & 1)
                for kk in range(k_tiles):
                    s, ph = pl.stage_and_phase(tile * k_tiles + kk, stages)
                    yield ctx.wait(ctx.full[s], ph)
                    yield ctx.wgmma(s)
                    yield ctx.arrive(ctx.empty[s])
                if tile + 1 < tiles:
                    yield ctx.arrive(turn[1 - me])
                yield ctx.work(300, "epilogue")
        return program

    def build(**kw):
        p = pl.Pipeline(stages, 300, 60, empty_count=1, **kw)
        turn = [p.barrier("turn[0]"), p.barrier("turn[1]")]
        p.add_role("producer", producer)
        p.add_role("consumer0", consumer(0, turn), consumer=True)
        p.add_role("consumer1", consumer(1, turn), consumer=True)
        return p

    p = build(readers=1)
    p.run()
    assert len(p.events("release")) == tiles * k_tiles
    epilogues = p.events("work")
    reads = p.events("read")
    assert any(r.role != e.role and e.time <= r.time < e.end for e in epilogues for r in reads), \
        "one consumer's epilogue overlaps the other's wgmmas"
    with pytest.raises(pl.OverwriteBeforeEmpty, match="has not read and released"):
        build().run()  # without readers=1 each fill is expected to be read by both consumers


def test_copy_into_a_stage_must_complete_on_its_full_barrier():
    def crossed(ctx):
        yield ctx.arrive_expect_tx(ctx.full[0], 64)
        yield ctx.tma_load(0, ctx.full[1], 64)

    p = pl.Pipeline(2, 10, 10)
    p.add_role("producer", crossed)
    with pytest.raises(pl.PipelineError, match=r"names 'full\[1\]'"):
        p.run()


def test_bytes_may_land_before_they_are_expected():
    def copies_first(ctx):  # the order of a common write-up: copies, then arrive.expect_tx
        for k in range(6):
            s, ph = pl.stage_and_phase(k, ctx.stages)
            yield ctx.wait(ctx.empty[s], ph ^ 1)
            yield ctx.tma_load(s, ctx.full[s], 8192)
            yield ctx.work(1000)  # the copy lands before the bytes are announced
            yield ctx.arrive_expect_tx(ctx.full[s], 8192)

    p = pl.Pipeline(2, 10, 10)
    p.add_role("producer", copies_first)
    p.add_role("consumer", pl.consumer_program(6, 2, 1), consumer=True)
    p.run()
    assert len(p.events("release")) == 6


def test_a_waiter_two_phases_ahead_passes_at_once():
    """Parity tells apart only neighbouring phases: a consumer that jumps to fill 1 of a stage whose fill 0 has not
    landed sees parity 1 as complete (the phase before phase 0) and reads too early — why ping-pong consumers
    take turns."""
    def jumps_ahead(ctx):
        s, ph = pl.stage_and_phase(6, 4)  # fill 1 of stage 2
        yield ctx.wait(ctx.full[s], ph)
        yield ctx.wgmma(s)

    p = pl.Pipeline(4, 300, 60)
    p.add_role("producer", pl.producer_program(8, 4, 8192, 8192))
    p.add_role("consumer", jumps_ahead, consumer=True)
    with pytest.raises(pl.ReadBeforeFull, match="stage 2"):
        p.run()
