"""Lab 2 graders, both ways: the solution passes; the stub and each named wrong answer fail on every one of 200
seeds (Python) or once (CUDA: on the compile-only path, ``no_gpu``, through the PTX and its protocol; on the PTX
executor, ``executor``, through the run, with the PTX as the explanation), with the hint that names the mistake made.
Right answers written differently (the header's combined arrive.expect_tx, one arrival per warp with a count, a
block barrier instead of a late release) must pass."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import ROOT, accepts, rejected_by_the_run, rejects, swap

from helpers.course import labgen
from helpers.course.checks import lab2


def _stub() -> dict:
    return labgen.solution_namespace(ROOT / "labs" / "lab2_mbarrier.ipynb")


# ------------------------------------------------------------------------------------------ solutions and stubs
@pytest.mark.parametrize("grader, name", [(lab2.check_barrier_model, "barrier_model"),
                                          (lab2.check_ring_parity, "ring_parity")])
def test_python_solutions_pass_and_stubs_fail(sol2, grader, name):
    accepts(grader, sol2[name])
    text = rejects(grader, _stub()[name], "not written yet", "lab2.hint", seeds=3)
    assert "stuck?" in text


@pytest.mark.parametrize("grader, name", [(lab2.check_init_arrive, "MBAR_INIT_ARRIVE"),
                                          (lab2.check_tx_wait, "MBAR_TX_WAIT"),
                                          (lab2.check_bug_diagnosis, "diagnosis"), (lab2.check_bug_fix, "fix")])
def test_other_solutions_pass_and_stubs_fail(sol2, no_gpu, grader, name):
    accepts(grader, sol2[name], seeds=None)
    rejects(grader, _stub()[name], "not written yet", seeds=None)


def test_gemm_solution_passes_and_stub_fails(sol2, wrappers, no_gpu):
    out = accepts(lab2.check_gemm, wrappers + sol2["LAB2_KERNEL"], seeds=None, kernel=sol2["LAB2_KERNEL"])
    assert "run skipped" in out and "parities and counts are checked when the kernel runs" in out
    stub = _stub()
    rejects(lab2.check_gemm, wrappers + stub["LAB2_KERNEL"], "not written yet", "lab2.hint", seeds=None)


# ------------------------------------------------------------------------------------------ the reference model
def test_reference_model_matches_emulator():
    """lab2.simulate (the grader's reference) agrees with the course emulator on the fixed and random sequences."""
    from helpers.hopper import mbarrier

    rng = np.random.default_rng(7)
    cases = list(lab2.MODEL_CASES) + [(c, lab2.random_events(rng, c, 20)) for c in rng.choice([1, 2, 3, 128], 200)]
    for count, events in cases:
        bar = mbarrier.MBarrier("bar", allow_negative_tx=True) if _negative(events) else mbarrier.MBarrier("bar")
        bar.init(int(count))
        for (kind, value), (parity, pending, tx) in zip(events, lab2.simulate(int(count), events), strict=True):
            if kind == "arrive":
                bar.arrive(value)
            else:
                getattr(bar, kind)(value)
            assert (bar.parity, bar.pending_arrivals, bar.tx_count) == (parity, pending, tx), (kind, value)


def _negative(events):
    tx = 0
    for kind, value in events:
        tx += value if kind in ("expect_tx", "arrive_expect_tx") else -value if kind == "complete_tx" else 0
        if tx < 0:
            return True
    return False


def test_reference_model_by_hand():
    ev = [("arrive_expect_tx", 8192), ("complete_tx", 4096), ("complete_tx", 4096), ("arrive", 1)]
    assert lab2.simulate(1, ev) == [(0, 0, 8192), (0, 0, 4096), (1, 1, 0), (0, 1, 0)]
    assert lab2.simulate(2, [("arrive", 1), ("arrive", 1)]) == [(0, 1, 0), (1, 2, 0)]
    assert lab2.simulate(1, [("complete_tx", 512), ("arrive_expect_tx", 512)]) == [(0, 1, -512), (1, 1, 0)]


# ------------------------------------------------------------------------------------------ exercise 3
def _model(sol2, mutate):
    def model(count, events):
        return [mutate(count, ev, st) for ev, st in zip(events, sol2["barrier_model"](count, events), strict=True)]
    return model


def test_barrier_model_wrong_answers(sol2):
    def ignores_tx(count, events):
        phase, pending, out = 0, count, []
        for kind, value in events:
            pending -= value if kind == "arrive" else (1 if kind == "arrive_expect_tx" else 0)
            if pending == 0:
                phase, pending = phase + 1, count
            out.append((phase % 2, pending, 0))
        return out

    def arrive_before_tx(count, events):
        phase, pending, tx, out = 0, count, 0, []
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
        phase, pending, tx, out = 0, count, 0, []
        for kind, value in events:
            tx += value if kind in ("expect_tx", "arrive_expect_tx") else -value if kind == "complete_tx" else 0
            pending -= value if kind == "arrive" else 1 if kind == "arrive_expect_tx" else 0
            if pending == 0 and tx == 0:
                phase += 1
            out.append((phase % 2, pending, tx))
        return out

    def phase_number(count, events):
        phase, pending, tx, out = 0, count, 0, []
        for kind, value in events:
            tx += value if kind in ("expect_tx", "arrive_expect_tx") else -value if kind == "complete_tx" else 0
            pending -= value if kind == "arrive" else 1 if kind == "arrive_expect_tx" else 0
            if pending == 0 and tx == 0:
                phase, pending, tx = phase + 1, count, 0
            out.append((phase, pending, tx))
        return out

    def no_early_bytes(count, events):  # clamps the byte count at zero: bytes landing early are lost
        phase, pending, tx, out = 0, count, 0, []
        for kind, value in events:
            tx = max(0, tx + (value if kind in ("expect_tx", "arrive_expect_tx") else -value if kind == "complete_tx"
                              else 0))
            pending -= value if kind == "arrive" else 1 if kind == "arrive_expect_tx" else 0
            if pending == 0 and tx == 0:
                phase, pending, tx = phase + 1, count, 0
            out.append((phase % 2, pending, tx))
        return out

    rejects(lab2.check_barrier_model, _model(sol2, lambda c, ev, st: (st[0] ^ 1, *st[1:])), "❌")
    rejects(lab2.check_barrier_model, ignores_tx, "track the pending bytes")
    rejects(lab2.check_barrier_model, arrive_before_tx, "adds the bytes first")
    rejects(lab2.check_barrier_model, no_reset, "go back to the count")
    rejects(lab2.check_barrier_model, phase_number, "the parity")
    rejects(lab2.check_barrier_model, no_early_bytes, "below zero")
    rejects(lab2.check_barrier_model, lambda c, e: [(0, c, 0)] * len(e), "❌")
    rejects(lab2.check_barrier_model, lambda c, e: [(0, c, 0)], "one state per event")


# ------------------------------------------------------------------------------------------ exercise 4
def test_ring_parity_wrong_answers():
    rejects(lab2.check_ring_parity, lambda i, s: (i % 2, (i % 2) ^ 1), "count the uses of the stage")
    rejects(lab2.check_ring_parity, lambda i, s: ((i // s) & 1, (i // s) & 1), "flip the full parity")
    rejects(lab2.check_ring_parity, lambda i, s: (((i // s) & 1) ^ 1, (i // s) & 1), "❌")
    rejects(lab2.check_ring_parity, lambda i, s: ((i // s) & 1, 1), "race")
    rejects(lab2.check_ring_parity, lambda i, s: (((i - 1) // s) & 1, (((i - 1) // s) & 1) ^ 1), "❌")
    rejects(lab2.check_ring_parity, lambda i, s: ((i // 2) & 1, ((i // 2) & 1) ^ 1), "❌")  # two stages assumed
    rejects(lab2.check_ring_parity, lambda i, s: 0, "a pair")


# ------------------------------------------------------------------------------------------ exercises 1-2 (CUDA)
ADDR = '"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count)'


@pytest.mark.parametrize("change, needle", [
    ((ADDR, '"r"(count), "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))'), "order of your %0"),
    ((ADDR, '"l"(bar), "r"(count)'), "generic pointer"),
    (('"mbarrier.arrive.shared::cta.b64 %0, [%1];"', '"mbarrier.arrive.shared::cta.b64 %0, [%1], 2;"'),
     "arrives once"),
    (('"mbarrier.arrive.shared::cta.b64 %0, [%1], %2;"\n               : "=l"(state) : '
      '"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))), "r"(count)',
      '"mbarrier.arrive.shared::cta.b64 %0, [%1];"\n               : "=l"(state) : '
      '"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))'), "state token, \\[addr\\], count"),
    (('"mbarrier.init.shared::cta.b64 [%0], %1;"', '"mbarrier.init.shared::cta.b64 [%0], 1;"'), "arrival count"),
])
def test_init_arrive_wrong_answers(sol2, no_gpu, change, needle):
    rejects(lab2.check_init_arrive, swap(sol2["MBAR_INIT_ARRIVE"], *change), needle, seeds=None)


def test_init_arrive_right_variants(sol2, no_gpu):
    src = sol2["MBAR_INIT_ARRIVE"].replace("mbarrier.arrive.shared::cta.b64",
                                           "mbarrier.arrive.release.cta.shared::cta.b64")
    accepts(lab2.check_init_arrive, src, seeds=None)
    accepts(lab2.check_init_arrive, sol2["MBAR_INIT_ARRIVE"].replace("shared::cta.b64", "shared.b64"), seeds=None)


@pytest.mark.parametrize("change, needle", [
    (("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;",
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"), "only adds bytes"),
    (("mbarrier.try_wait.parity", "mbarrier.test_wait.parity"), "answers at once"),
    (('"r"(parity) : "memory");', '"r"(parity ^ 1u) : "memory");'), "parity operand"),
    (("p, [%1], %2;", "p, [%2], %1;"), "❌"),
    (("  while (!my_mbar_try_wait(bar, parity)) {", "  if (!my_mbar_try_wait(bar, parity)) {"),
     "a loop around try_wait"),
    (("    if (waited > HOPPER_WAIT_BUDGET) hopper::report_stuck(bar, parity, label, index, waited);\n", ""),
     "report_stuck"),
    (("while (!my_mbar_try_wait(bar, parity))", "while (!my_mbar_try_wait(bar, 0u))"), "the parity it is given"),
])
def test_tx_wait_wrong_answers(sol2, no_gpu, change, needle):
    rejects(lab2.check_tx_wait, swap(sol2["MBAR_TX_WAIT"], *change), needle, seeds=None)


# ------------------------------------------------------------------------------------------ exercise 5 (the kernel)
PRODUCER = ("    my_mbar_expect_tx(&full[s], STAGE_BYTES);\n    my_mbar_arrive(&full[s]);\n")
RELEASE = "    my_mbar_arrive(&empty[s]);\n"
PRODUCT_END = "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n"


@pytest.mark.parametrize("change, needle", [
    (("    my_mbar_wait(&empty[s], ((j / STAGES) & 1) ^ 1, \"empty\", s);\n", ""), "producer waits on empty"),
    ((PRODUCER, "    my_mbar_arrive(&full[s]);\n    my_mbar_expect_tx(&full[s], STAGE_BYTES);\n"),
     "before the stage's bytes are announced"),
    (("my_mbar_expect_tx(&full[s], STAGE_BYTES);", "my_mbar_expect_tx(&full[s], STAGE_BYTES / 2);"),
     "bytes announced per stage"),
    (("    my_mbar_wait(&full[s], (k / STAGES) & 1, \"full\", s);\n", ""), "before waiting on full"),
    ((RELEASE, ""), "every step releases its stage"),
    (("((j / STAGES) & 1) ^ 1", "(j / STAGES) & 1"), "first wait on empty is for parity 0"),
    (("    my_tma_load_2d(sB[s], &tmap_b, &full[s], j * BK, n0);\n", ""), "2 TMA loads"),
])
def test_gemm_wrong_answers(sol2, wrappers, no_gpu, change, needle):
    kernel = swap(sol2["LAB2_KERNEL"], *change)
    rejects(lab2.check_gemm, wrappers + kernel, needle, seeds=None, kernel=kernel)


def test_gemm_early_release_is_named(sol2, wrappers, no_gpu):
    wait = "    my_mbar_wait(&full[s], (k / STAGES) & 1, \"full\", s);\n"
    kernel = swap(swap(sol2["LAB2_KERNEL"], RELEASE, ""), wait, wait + RELEASE)
    rejects(lab2.check_gemm, wrappers + kernel, "reads a stage after releasing it", "line [0-9]+ of the kernel",
            seeds=None, kernel=kernel)


@pytest.mark.parametrize("change", [
    (PRODUCER, "    hopper::mbar_arrive_expect_tx(&full[s], STAGE_BYTES);\n"),  # the header's one instruction
    (RELEASE, "    __syncwarp();\n    if (t % 32 == 0) my_mbar_arrive(&empty[s], 32u);\n"),  # one arrival per warp
])
def test_gemm_right_variants(sol2, wrappers, no_gpu, change):
    kernel = swap(sol2["LAB2_KERNEL"], *change)
    accepts(lab2.check_gemm, wrappers + kernel, seeds=None, kernel=kernel)


# ------------------------------------------------------------------------------------------ exercise 6 (bug hunt)
EARLY = "    hopper::mbar_arrive(&empty[s]);  // got the tile: the producer may go on\n"
BUG_END = "      for (int j = 0; j < 32; ++j) acc[j] += a * bf16_at(sB[s], col0 + j, kk);\n    }\n"
LOOP_TOP = "    if (t == 0 && k + 1 < nk) produce(k + 1);\n"


def test_buggy_kernel_compiles_and_races_in_the_replay():
    from helpers import gpu

    gpu.compile(lab2.HEADER + lab2.BUGGY_KERNEL, lab2.KERNEL_NAME)


def _roles(release_after_read: bool):
    def warp(w, read_time):
        def program(ctx):
            def produce(j):
                s = j % 2
                yield ctx.wait(ctx.empty[s], ((j // 2) & 1) ^ 1)
                yield ctx.arrive_expect_tx(ctx.full[s], 16384)
                yield ctx.tma_load(s, ctx.full[s], 8192)
                yield ctx.tma_load(s, ctx.full[s], 8192)
            if w == 0:
                yield from produce(0)
            for k in range(6):
                s = k % 2
                if w == 0 and k + 1 < 6:
                    yield from produce(k + 1)
                yield ctx.wait(ctx.full[s], (k // 2) & 1)
                if not release_after_read:
                    yield ctx.arrive(ctx.empty[s], 32)
                yield ctx.wgmma(s, read_time(w, k))
                if release_after_read:
                    yield ctx.arrive(ctx.empty[s], 32)
        return program
    return warp


def test_replay_flags_the_race_on_every_schedule_and_clears_the_fix(capsys):
    for seed in range(0, 200, 20):
        assert not lab2.replay(_roles(False), seed=seed)
        assert "OverwriteBeforeEmpty" in capsys.readouterr().out
    assert lab2.replay(_roles(True), runs=200)
    out = capsys.readouterr().out
    assert "200 schedules: every tile streamed through" in out


def test_replay_tells_the_stage_story(capsys):
    lab2.replay(_roles(False))
    out = capsys.readouterr().out
    assert "what happened to stage 0" in out
    assert out.index("arrives on empty[0]") < out.index("reads the stage (fill 0)")


def test_bug_diagnosis_wrong_answers():
    hints = {"a": "ask who completed it", "c": "exactly what the loads", "d": "rarer"}
    for letter, needle in hints.items():
        rejects(lab2.check_bug_diagnosis, lambda letter=letter: letter, needle, seeds=None)
    rejects(lab2.check_bug_diagnosis, lambda: "e", "one of", seeds=None)


@pytest.mark.parametrize("name, fix, needle", [
    ("unchanged", lambda s: s, "reads a stage after releasing it"),
    ("released before the wait, same step", lambda s: s.replace(EARLY, "").replace(
        "    HOPPER_WAIT(full, s,", "    hopper::mbar_arrive(&empty[s]);\n    HOPPER_WAIT(full, s,"),
     "releases stage s before it waits"),
    ("never released", lambda s: s.replace(EARLY, ""), "every step releases its stage"),
    ("released once after the loop", lambda s: s.replace(EARLY, "").replace(
        "#pragma unroll\n  for (int j = 0; j < 32; ++j) C[", "  hopper::mbar_arrive(&empty[0]);\n#pragma unroll\n"
        "  for (int j = 0; j < 32; ++j) C["), "every step releases its stage"),
    ("a third stage, still released early", lambda s: s.replace("STAGES = 2", "STAGES = 3"),
     "reads a stage after releasing it"),
    ("released late but the parity unflipped", lambda s: s.replace("((j / STAGES) & 1) ^ 1", "(j / STAGES) & 1")
     .replace(EARLY, "").replace(BUG_END, BUG_END + "    hopper::mbar_arrive(&empty[s]);\n"),
     "first wait on empty is for parity 0"),
    ("not a source", lambda s: 42, "returns the kernel's source"),
])
def test_bug_fix_wrong_answers(no_gpu, name, fix, needle):
    rejects(lab2.check_bug_fix, fix, needle, seeds=None)


@pytest.mark.parametrize("name, fix", [
    ("release moved after the product", lambda s: s.replace(EARLY, "").replace(
        BUG_END, BUG_END + "    hopper::mbar_arrive(&empty[s]);\n")),
    ("a block barrier after the product", lambda s: s.replace(BUG_END, BUG_END + "    __syncthreads();\n")),
    ("a block barrier before the producer", lambda s: s.replace(LOOP_TOP, "    __syncthreads();\n" + LOOP_TOP)),
    ("one arrival per warp after the product", lambda s: s.replace(EARLY, "").replace(
        BUG_END, BUG_END + "    __syncwarp();\n    if (t % 32 == 0) hopper::mbar_arrive(&empty[s], 32u);\n")),
    ("the previous stage released at the top of the next step", lambda s: s.replace(EARLY, "").replace(
        LOOP_TOP, "    if (k > 0) hopper::mbar_arrive(&empty[(k + 1) % STAGES]);\n" + LOOP_TOP)),
])
def test_bug_fix_right_variants(no_gpu, name, fix):
    accepts(lab2.check_bug_fix, fix, seeds=None)


# ------------------------------------------------------------------------------------------ on the PTX executor
def test_cuda_solutions_run_on_the_emulator(sol2, wrappers, executor):
    for grader, name in ((lab2.check_init_arrive, "MBAR_INIT_ARRIVE"), (lab2.check_tx_wait, "MBAR_TX_WAIT"),
                         (lab2.check_bug_fix, "fix")):
        out = accepts(grader, sol2[name], seeds=None)
        assert "✓ ran on the emulator" in out and "run skipped" not in out, out
    out = accepts(lab2.check_gemm, wrappers + sol2["LAB2_KERNEL"], seeds=None, kernel=sol2["LAB2_KERNEL"])
    assert "M=128, N=192, K=320 (2×3 tiles, 5 K steps): every element against fp64" in out, out


def test_empty_wait_with_the_wrong_parity_is_rejected_by_the_run(sol2, wrappers, executor):
    """The producer's first wait on a fresh EMPTY barrier for parity 0: the run deadlocks, the report names the
    barrier, and the PTX says why."""
    kernel = swap(sol2["LAB2_KERNEL"], "((j / STAGES) & 1) ^ 1", "(j / STAGES) & 1")
    text = rejected_by_the_run(lab2.check_gemm, wrappers + kernel, r"deadlock: block \(\d+,\d+\) warp 0 waited on "
                               r"empty\[0\] for parity 0", "first wait on empty is for parity 0", kernel=kernel)
    assert "Traceback" not in text


def test_full_wait_with_the_wrong_parity_is_rejected_by_the_run(sol2, wrappers, executor):
    kernel = swap(sol2["LAB2_KERNEL"], "my_mbar_wait(&full[s], (k / STAGES) & 1,", "my_mbar_wait(&full[s], 1,")
    rejected_by_the_run(lab2.check_gemm, wrappers + kernel, "deadlock|differ|read before the barrier phase",
                        kernel=kernel)


def test_stage_released_before_it_was_read_is_rejected_by_the_run(executor):
    """The bug hunt's kernel unchanged: its consumers release a stage before reading it; on the emulator the producer
    refills it under the slower warps, and the PTX names the line."""
    text = rejected_by_the_run(lab2.check_bug_fix, lambda s: s, "differ|a stage overwritten",
                               "reads a stage after releasing it")
    assert "what the PTX shows (the likely cause)" in text


def test_a_wrong_init_count_is_rejected_by_the_run(sol2, executor):
    src = swap(sol2["MBAR_INIT_ARRIVE"], '"mbarrier.init.shared::cta.b64 [%0], %1;"',
               '"mbarrier.init.shared::cta.b64 [%0], 1;"')
    rejected_by_the_run(lab2.check_init_arrive, src, "deadlock|differ|failed", "arrival count")


def test_a_wait_that_tries_once_is_rejected_by_the_run(sol2, executor):
    """try_wait may return false before the phase completes (its time limit is the hardware's): hazard mode answers
    the first try with false, so a wait that tries once reads the tile before it lands; the PTX names the loop."""
    src = swap(sol2["MBAR_TX_WAIT"], "  while (!my_mbar_try_wait(bar, parity)) {",
               "  if (!my_mbar_try_wait(bar, parity)) {")
    rejected_by_the_run(lab2.check_tx_wait, src, "hazard mode", "read before the barrier phase that delivers it",
                        "a loop around try_wait")


def test_a_wait_that_ignores_the_predicate_is_rejected_by_the_run(sol2, executor):
    """selp always 1: the loop leaves after the first try_wait whatever it answered, and the tile is read early."""
    src = swap(sol2["MBAR_TX_WAIT"], "selp.u32 %0, 1, 0, p;", "selp.u32 %0, 1, 1, p;")
    rejected_by_the_run(lab2.check_tx_wait, src, "hazard mode", "read before the barrier phase that delivers it",
                        "tile byte 0")


def test_a_test_wait_used_once_is_rejected_by_the_run(sol2, executor):
    """test_wait answers at once; used once, without a loop, the tile is read before it lands."""
    src = swap(sol2["MBAR_TX_WAIT"], "mbarrier.try_wait.parity", "mbarrier.test_wait.parity")
    src = swap(src, "  while (!my_mbar_try_wait(bar, parity)) {", "  if (!my_mbar_try_wait(bar, parity)) {")
    rejected_by_the_run(lab2.check_tx_wait, src, "read before the barrier phase that delivers it",
                        "uses mbarrier.test_wait")


def test_a_test_wait_in_a_loop_passes_the_run(sol2, executor):
    """A loop on test_wait is a correct (if wasteful) wait: the run passes; the PTX asks for try_wait."""
    src = swap(sol2["MBAR_TX_WAIT"], "mbarrier.try_wait.parity", "mbarrier.test_wait.parity")
    text = rejects(lab2.check_tx_wait, src, "uses mbarrier.test_wait", "the run above gave the right result",
                   seeds=None)
    assert "ran on the emulator" not in text.split("\n", 1)[0]


def test_run_many_runs_once_on_the_emulator(capsys, executor):
    lab2.run_many()
    out = capsys.readouterr().out
    assert "ran on the emulator" in out and "1 run at M=128, N=64, K=256" in out and "1 of 1 run gave a wrong C" in out
    assert "in hazard mode" in out and "a stage overwritten" in out and "release a stage only after reading it" in out


def test_run_many_says_it_skipped_without_a_gpu_or_the_emulator(capsys, no_gpu):
    lab2.run_many()
    assert "run skipped" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ on an H100
@pytest.mark.gpu
def test_gpu_solutions_run(sol2, wrappers):
    for grader, name in ((lab2.check_init_arrive, "MBAR_INIT_ARRIVE"), (lab2.check_tx_wait, "MBAR_TX_WAIT"),
                         (lab2.check_bug_fix, "fix")):
        accepts(grader, sol2[name], seeds=None)
    accepts(lab2.check_gemm, wrappers + sol2["LAB2_KERNEL"], seeds=None)


@pytest.mark.gpu
def test_gpu_wrong_parity_deadlocks(sol2, wrappers):
    kernel = swap(sol2["LAB2_KERNEL"], "my_mbar_wait(&full[s], (k / STAGES) & 1,", "my_mbar_wait(&full[s], 1,")
    rejects(lab2.check_gemm, wrappers + kernel, "deadlock|differ", seeds=None)


def test_bug_hunt_text_matches_the_h100_race_rates():
    """Exercise 6 says what the H100 did with the colleague's kernel (tests/data/lab2_race_rates_h100.json, 20 runs
    per size): right on every run at 256³ and 512³, wrong on every run at 1024³ and 2048³."""
    import json

    rates = json.loads((ROOT / "tests" / "data" / "lab2_race_rates_h100.json").read_text())
    race = rates["variants"]["release_before_read"]
    assert rates["meta"]["gpu"].startswith("NVIDIA H100") and rates["meta"]["runs"] == 20
    assert race["256"]["wrong_runs"] == race["512"]["wrong_runs"] == 0
    assert race["1024"]["wrong_runs"] == race["2048"]["wrong_runs"] == 20
    lo, hi = min(race["1024"]["wrong_elements"]), max(race["1024"]["wrong_elements"])
    cells = json.loads((ROOT / "solutions" / "lab2_mbarrier.ipynb").read_text())["cells"]
    text = " ".join("".join(c["source"]).replace("\n", " ") for c in cells)
    assert "at 256³ and 512³ all 20 runs" in text and "at 1024³ all 20 were wrong" in text
    assert f"{round(lo, -3):,} to {round(hi, -3):,} wrong elements" in text
