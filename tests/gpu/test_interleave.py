"""The interleaved measurement without a GPU: fake sides (each returns the milliseconds of its runs) and a fake
clock/power reader stand in for CUDA events and NVML."""

from __future__ import annotations

import ctypes
import itertools

import pytest

from helpers.gpu import clocks, timing
from helpers.gpu.clocks import SideTelemetry, Telemetry
from helpers.gpu.timing import GemmBenchmark, Interleaved, interleave


class Drifting:
    """Two sides on a GPU whose clock falls run after run: every run takes `ms / clock`, clock 1.0 → 0.7."""

    def __init__(self, a_ms: float, b_ms: float, runs: int = 5, drop: float = 0.004) -> None:
        self.ms = {"a": a_ms, "b": b_ms}
        self.runs, self.drop, self.clock, self.log = runs, drop, 1.0, []

    def side(self, name: str):
        def run() -> list[float]:
            self.log.append(name)
            out = []
            for _ in range(self.runs):
                out.append(self.ms[name] / self.clock)
                self.clock = max(0.7, self.clock - self.drop)
            return out

        return run


def test_sides_alternate_which_goes_first_and_each_round_gives_a_ratio():
    gpu = Drifting(1.0, 1.1)
    r = interleave(gpu.side("a"), gpu.side("b"), rounds=7)
    assert r.rounds == 7 and r.first == ["a", "b"] * 3 + ["a"]
    assert gpu.log == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    assert len(r.ratios) == 7 and all(x > 1 for x in r.ratios)  # a is faster in every round


def test_interleaving_cancels_a_clock_that_falls_during_the_run():
    """A is 5 % faster. Timed in two blocks (all of A, then all of B) the drift eats the difference; timed in
    turns, the median per-round ratio stays within 1 % of 1.05."""
    gpu = Drifting(1.0, 1.05)
    blocks_a = [t for _ in range(7) for t in gpu.side("a")()]
    blocks_b = [t for _ in range(7) for t in gpu.side("b")()]
    blocked = (sum(blocks_b) / len(blocks_b)) / (sum(blocks_a) / len(blocks_a))
    gpu = Drifting(1.0, 1.05)
    r = interleave(gpu.side("a"), gpu.side("b"), rounds=9)
    assert abs(r.ratio - 1.05) < 0.01
    assert abs(blocked - 1.05) > 0.04


def test_median_and_range_of_the_per_round_ratios():
    r = Interleaved([1.0, 1.0, 1.0, 2.0, 1.0], [1.1, 0.9, 1.3, 2.0, 1.2], ["a", "b", "a", "b", "a"])
    assert r.ratios == pytest.approx([1.1, 0.9, 1.3, 1.0, 1.2])
    assert r.ratio == pytest.approx(1.1)
    assert r.ratio_range == pytest.approx((0.9, 1.3))
    assert r.a_ms == 1.0 and r.b_ms == pytest.approx(1.2)


def test_a_side_that_ran_at_another_clock_is_flagged():
    same = Interleaved([1.0], [1.0], ["a"], SideTelemetry([1980, 1980]), SideTelemetry([1965, 1980]))
    apart = Interleaved([1.0], [1.0], ["a"], SideTelemetry([1980, 1980]), SideTelemetry([1545, 1600]))
    unknown = Interleaved([1.0], [1.0], ["a"])
    assert same.clock_differs is False and apart.clock_differs is True and unknown.clock_differs is None
    assert "CLOCKS DIFFER" in apart.summary() and "CLOCKS DIFFER" not in same.summary()


def test_telemetry_labels_each_sides_samples():
    reads = itertools.count()

    def read() -> tuple[int, float]:
        next(reads)
        return 1980, 650.0

    gpu = Drifting(1.0, 1.0)
    with Telemetry(period=60, read=read) as tel:  # the thread never fires: only the entry and exit samples
        r = interleave(gpu.side("a"), gpu.side("b"), rounds=7, telemetry=tel, labels=("kernel", "cuBLAS"))
    assert set(tel.sides) == {"kernel", "cuBLAS"}
    assert len(r.a_telemetry.mhz) == 14 and len(r.b_telemetry.watts) == 14  # 2 per round per side
    assert r.a_telemetry.mhz_median == 1980 and r.b_telemetry.watts_median == 650.0
    assert r.clock_differs is False
    assert "kernel: 1980 MHz" in r.summary() and "650 W" in r.summary()


def test_telemetry_samples_in_the_background_while_a_side_runs():
    import time

    with Telemetry(period=0.001, read=lambda: (1755, None)) as tel:
        with tel.side("kernel"):
            time.sleep(0.05)
        time.sleep(0.02)  # unlabelled: not counted
    assert len(tel.sides["kernel"].mhz) > 5 and tel.sides["kernel"].watts == []
    assert "power ?" in tel.sides["kernel"].summary()


def test_interleave_refuses_nonsense():
    gpu = Drifting(1.0, 1.0)
    with pytest.raises(ValueError):
        interleave(gpu.side("a"), gpu.side("b"), rounds=0)
    with pytest.raises(ValueError):
        interleave(gpu.side("a"), gpu.side("b"), labels=("cuBLAS", "cuBLAS"))
    with pytest.raises(ValueError):
        interleave(gpu.side("a"), list, rounds=1)


def test_the_benchmark_reports_the_interleaved_median_not_the_ratio_of_medians():
    inter = Interleaved([1.0, 2.0, 1.0], [1.1, 2.4, 1.0], ["kernel", "cuBLAS", "kernel"])
    b = GemmBenchmark(4096, 4096, 4096, inter.a_ms, inter.b_ms, 3, 0.0, interleaved=inter)
    assert b.ratio == pytest.approx(1.1) and b.ratio_range == pytest.approx((1.0, 1.2))
    assert "interleaved rounds" in b.summary()
    old = GemmBenchmark(4096, 4096, 4096, 1.0, 1.1, 3, 0.0)
    assert old.ratio == pytest.approx(1.1) and old.ratio_range is None


def test_rounds_time_about_repeat_runs():
    assert timing.rounds_for(30, 7) == 5 and timing.rounds_for(5, 7) == 3


def test_nvml_field_value_has_the_c_layout():
    assert ctypes.sizeof(clocks._FieldValue) == 40  # nvmlFieldValue_t: 4+4+8+8+4+4+8


def test_a_side_times_its_batches_on_from_where_the_last_one_stopped(monkeypatch):
    """timing.batches: each call times per_round runs after one untimed run, going on through the input sets."""
    calls = []

    def fake_time_runs(fns, runs, *, start=0, warmup=0):
        calls.append((start, runs, warmup))
        return [1.0] * runs

    monkeypatch.setattr(timing, "time_runs", fake_time_runs)
    side = timing.batches([lambda: None] * 3, 4)
    assert side() == [1.0] * 4 and side() == [1.0] * 4 and side() == [1.0] * 4
    assert calls == [(0, 4, 1), (5, 4, 1), (10, 4, 1)]
