"""Lab 2 graders, both ways: the solution passes; the stub and plausible wrong answers fail, helpfully."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import grading
from helpers import labgen
from helpers.checks import lab2

ROOT = Path(__file__).resolve().parents[2]


SOL = labgen.solution_namespace(ROOT / "solutions" / "lab2_mbarrier.ipynb")


GRADERS = [(lab2.check_init_arrive, "MBAR_INIT_ARRIVE"), (lab2.check_tx_wait, "MBAR_TX_WAIT"),
           (lab2.check_barrier_model, "barrier_model"), (lab2.check_ring_parity, "ring_parity"),
           (lab2.check_stream_kernel, "ROW_SUMS"), (lab2.check_bug_diagnosis, "diagnosis"),
           (lab2.check_bug_fix, "fix")]


@pytest.mark.parametrize("grader, name", GRADERS)
def test_solution_passes(grader, name):
    grader(SOL[name])


@pytest.mark.parametrize("grader, name", GRADERS)
def test_student_stub_fails(grader, name):
    stub = labgen.solution_namespace(ROOT / "labs" / "lab2_mbarrier.ipynb")
    grading.assert_rejects(grader, stub[name], "not written yet", "hint")


# ------------------------------------------------------------------------------------------ the reference model
def test_reference_model_matches_emulator():
    """lab2.simulate (the grader's reference) agrees with the course emulator on random event sequences."""
    mbarrier = pytest.importorskip("helpers.mbarrier")
    rng = np.random.default_rng(7)
    for _ in range(200):
        count = int(rng.choice([1, 2, 3, 128]))
        events = lab2.random_events(rng, count, 20)
        bar = mbarrier.MBarrier("bar")
        bar.init(count)
        for (kind, value), (parity, pending, tx) in zip(events, lab2.simulate(count, events), strict=True):
            if kind == "arrive":
                bar.arrive(value)
            else:
                getattr(bar, kind)(value)
            assert (bar.parity, bar.pending_arrivals, bar.tx_count) == (parity, pending, tx), (kind, value)


def test_reference_model_by_hand():
    ev = [("arrive_expect_tx", 8192), ("complete_tx", 4096), ("complete_tx", 4096), ("arrive", 1)]
    assert lab2.simulate(1, ev) == [(0, 0, 8192), (0, 0, 4096), (1, 1, 0), (0, 1, 0)]
    assert lab2.simulate(2, [("arrive", 1), ("arrive", 1)]) == [(0, 1, 0), (1, 2, 0)]


# ------------------------------------------------------------------------------------------ wrong answers
def _sol_src(name: str, old: str, new: str) -> str:
    src = SOL[name]
    assert old in src
    return src.replace(old, new)


def test_init_arrive_wrong_answers():
    addr = '"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count)'
    grading.assert_rejects(lab2.check_init_arrive, _sol_src("MBAR_INIT_ARRIVE", addr,
                                            '"r"(count), "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))'),
           "order of your %0")
    grading.assert_rejects(lab2.check_init_arrive, _sol_src("MBAR_INIT_ARRIVE", addr, '"l"(bar), "r"(count)'), "generic pointer")
    grading.assert_rejects(lab2.check_init_arrive, _sol_src("MBAR_INIT_ARRIVE", "mbarrier.init.shared::cta.b64",
                                            "mbarrier.init.b64"), "❌")
    grading.assert_rejects(lab2.check_init_arrive, _sol_src("MBAR_INIT_ARRIVE", '"mbarrier.arrive.shared::cta.b64 %0, [%1];"',
                                            '"mbarrier.arrive.shared::cta.b64 %0, [%1], 2;"'), "counts one arrival")


def test_tx_wait_wrong_answers():
    grading.assert_rejects(lab2.check_tx_wait, _sol_src("MBAR_TX_WAIT", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;",
                                        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"), "only adds bytes")
    grading.assert_rejects(lab2.check_tx_wait, _sol_src("MBAR_TX_WAIT", "mbarrier.try_wait.parity", "mbarrier.test_wait.parity"),
           "suspends")
    grading.assert_rejects(lab2.check_tx_wait, _sol_src("MBAR_TX_WAIT", '"r"(parity)', '"r"(parity ^ 1u)'), "parity operand")
    grading.assert_rejects(lab2.check_tx_wait, _sol_src("MBAR_TX_WAIT", "p, [%1], %2;", "p, [%2], %1;"), "❌")


def _model(mutate):
    def model(count, events):
        return [mutate(count, ev, st) for ev, st in zip(events, SOL["barrier_model"](count, events), strict=True)]
    return model


def test_barrier_model_wrong_answers():
    grading.assert_rejects(lab2.check_barrier_model, _model(lambda c, ev, st: (st[0] ^ 1, *st[1:])), "parity 0")

    def ignores_tx(count, events):
        phase, pending = 0, count
        out = []
        for kind, value in events:
            pending -= value if kind == "arrive" else (1 if kind == "arrive_expect_tx" else 0)
            if pending == 0:
                phase, pending = phase + 1, count
            out.append((phase % 2, pending, 0))
        return out

    def arrive_before_tx(count, events):
        phase, pending, tx = 0, count, 0
        out = []
        for kind, value in events:
            if kind in ("arrive", "arrive_expect_tx"):
                pending -= value if kind == "arrive" else 1
                if pending == 0 and tx == 0:
                    phase, pending, tx = phase + 1, count, 0
            if kind in ("expect_tx", "arrive_expect_tx"):
                tx += value
            if kind == "complete_tx":
                tx -= value
            if pending == 0 and tx == 0:
                phase, pending, tx = phase + 1, count, 0
            out.append((phase % 2, pending, tx))
        return out

    def no_reset(count, events):
        return [(p, 0 if q == count and i and p != SOL["barrier_model"](count, events[:i])[-1][0] else q, t)
                for i, (p, q, t) in enumerate(SOL["barrier_model"](count, events))]

    grading.assert_rejects(lab2.check_barrier_model, ignores_tx, "❌")
    grading.assert_rejects(lab2.check_barrier_model, arrive_before_tx, "❌")
    grading.assert_rejects(lab2.check_barrier_model, no_reset, "go back to the count")
    grading.assert_rejects(lab2.check_barrier_model, lambda c, e: [(0, c, 0)] * len(e), "❌")


def test_ring_parity_wrong_answers():
    grading.assert_rejects(lab2.check_ring_parity, lambda i, s: (i % 2, (i % 2) ^ 1), "count uses of the stage")
    grading.assert_rejects(lab2.check_ring_parity, lambda i, s: ((i // s) & 1, (i // s) & 1), "deadlock")
    grading.assert_rejects(lab2.check_ring_parity, lambda i, s: (((i // s) & 1) ^ 1, (i // s) & 1), "❌")
    grading.assert_rejects(lab2.check_ring_parity, lambda i, s: ((i // s) & 1, 1), "race")


def test_stream_kernel_static_wrong_answer():
    src = _sol_src("ROW_SUMS", "my_mbar_expect_tx(&full[s], TILE_BYTES);\n      my_mbar_arrive(&full[s]);",
                   "hopper::mbar_arrive_expect_tx(&full[s], TILE_BYTES);")
    grading.assert_rejects(lab2.check_stream_kernel, src, "my_mbar_expect_tx")


def test_bug_diagnosis_wrong_answers():
    for letter in "acd":
        grading.assert_rejects(lab2.check_bug_diagnosis, lambda letter=letter: letter, "hint")
    grading.assert_rejects(lab2.check_bug_diagnosis, lambda: "e", "one of")


def test_bug_fix_wrong_answers():
    grading.assert_rejects(lab2.check_bug_fix, lambda s: s, "bytes full[s] expects", "64 × 64 × 2")
    grading.assert_rejects(lab2.check_bug_fix, lambda s: s.replace("sizeof(float)", "1"), "64 × 64 × 2")
    grading.assert_rejects(lab2.check_bug_fix, lambda s: 42, "returns the kernel source")


def test_emulated_deadlock_report():
    report = lab2.emulate_protocol(lab2.BUGGY_ROW_SUMS)
    assert report is not None and "full[0]" in report and "parity 0" in report
    assert lab2.emulate_protocol(SOL["fix"](lab2.BUGGY_ROW_SUMS)) is None


@pytest.mark.gpu
def test_stream_kernel_wrong_parity_deadlocks_on_gpu():
    src = _sol_src("ROW_SUMS", "HOPPER_WAIT(empty, s, (use & 1) ^ 1);", "HOPPER_WAIT(empty, s, use & 1);")
    grading.assert_rejects(lab2.check_stream_kernel, src, "deadlock", "empty[0]")


@pytest.mark.gpu
def test_stream_kernel_missing_release_deadlocks_on_gpu():
    src = _sol_src("ROW_SUMS", "    my_mbar_arrive(&empty[s]);\n", "    if (t == 0) my_mbar_arrive(&empty[s]);\n")
    grading.assert_rejects(lab2.check_stream_kernel, src, "deadlock")


@pytest.mark.gpu
def test_buggy_kernel_deadlocks_on_gpu(capsys):
    lab2.show_deadlock(lab2.BUGGY_ROW_SUMS)
    out = capsys.readouterr().out
    assert "deadlock" in out and "full[0]" in out, out
