"""Lessons 02 (mbarrier) and 03 (WGMMA): the widgets' computations, the seed's claims, the quizzes' answers.

The generic quiz test (tests/platform/test_quizzes.py) feeds every quiz its right and wrong answers; here each
answer is re-derived from the emulator, and the widget computations are checked against facts measured on an
H100 (written out below, so the tests do not depend on how the emulator computes them).
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers.course.quizzes import lesson02, lesson03
from helpers.course.widgets import barrier, fragments
from helpers.hopper import mbarrier, wgmma
from helpers.hopper.tensormap import Swizzle

rng = np.random.default_rng()

ALL_N = list(range(8, 257, 8))


# -----------------------------------------------------------------------------------------------------------
# Lesson 03 · fragments
# -----------------------------------------------------------------------------------------------------------
def _h100_layout(t: int, j: int) -> tuple[int, int]:
    """The accumulator layout as written in h100-facts.md (m64n64k16), for any N (measured for N = 8..256)."""
    w, lane = t // 32, t % 32
    return 16 * w + lane // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + (j % 2)


@pytest.mark.parametrize("n", ALL_N)
def test_owner_map_covers_the_tile_once_and_matches_the_h100(n):
    threads, registers = fragments.owner_map(n)
    assert threads.shape == registers.shape == (64, n)
    assert np.bincount(threads.ravel(), minlength=128).tolist() == [n // 2] * 128
    for t in rng.integers(0, 128, size=8):
        for j in range(n // 2):
            r, c = _h100_layout(int(t), j)
            assert (threads[r, c], registers[r, c]) == (t, j)


# The seed's worked examples (document 000, "Visual examples"): rows and the four columns per w.
SEED_EXAMPLES = {
    0: ({0, 8}, [[0, 1, 8, 9], [16, 17, 24, 25], [32, 33, 40, 41], [48, 49, 56, 57]]),
    1: ({0, 8}, [[2, 3, 10, 11], [18, 19, 26, 27], [34, 35, 42, 43], [50, 51, 58, 59]]),
    2: ({0, 8}, [[4, 5, 12, 13], [20, 21, 28, 29], [36, 37, 44, 45], [52, 53, 60, 61]]),
    3: ({0, 8}, [[6, 7, 14, 15], [22, 23, 30, 31], [38, 39, 46, 47], [54, 55, 62, 63]]),
    4: ({1, 9}, [[0, 1, 8, 9], [16, 17, 24, 25], [32, 33, 40, 41], [48, 49, 56, 57]]),
    32: ({16, 24}, [[0, 1, 8, 9], [16, 17, 24, 25], [32, 33, 40, 41], [48, 49, 56, 57]]),
}


@pytest.mark.parametrize("tid", sorted(SEED_EXAMPLES))
def test_seed_worked_examples_agree_with_the_measured_layout(tid):
    rows, cols_per_w = SEED_EXAMPLES[tid]
    elems = fragments.thread_elements(tid, 64)
    assert {r for _, r, _ in elems} == rows
    for w, cols in enumerate(cols_per_w):
        assert sorted({c for j, _, c in elems if j // 8 == w}) == cols


def test_seed_store_writes_every_register_where_the_hardware_put_it():
    seen = set()
    for t in range(128):
        stores = fragments.seed_store(t)
        assert len(stores) == 32
        for s in stores:
            assert (s["row"], s["col"]) == _h100_layout(t, s["register"])
            assert s["offset"] == s["col"] * 64 + s["row"]  # column-major, leading dimension M = 64
            seen.add(s["offset"])
    assert seen == set(range(64 * 64))


def test_seed_store_into_row_major_c_gives_the_transpose():
    frags = rng.standard_normal((128, 32)).astype(np.float32)
    c = np.full(64 * 64, np.nan, np.float32)
    for t in range(128):
        for s in fragments.seed_store(t):
            c[s["offset"]] = frags[t, s["register"]]
    tile = wgmma.fragments_to_tile(frags, 64)
    assert np.array_equal(c.reshape(64, 64), tile.T)


@pytest.mark.parametrize("n", [8, 24, 64, 136, 256])
def test_row_major_store_reproduces_the_tile(n):
    frags = rng.standard_normal((128, n // 2)).astype(np.float32)
    ld = n + int(rng.integers(0, 9))  # a padded leading dimension
    c = np.full(64 * ld, np.nan, np.float32)
    for t in range(128):
        c[fragments.store_offsets(t, n, ld, "row")] = frags[t]
    assert np.array_equal(c.reshape(64, ld)[:, :n], wgmma.fragments_to_tile(frags, n))
    with pytest.raises(ValueError):
        fragments.store_offsets(0, n, ld, "diagonal")


@pytest.mark.parametrize("n", fragments.FRAGMENT_NS)
def test_fragment_picture_marks_the_thread_and_its_quad(n):
    t = int(rng.integers(0, 128))
    pic = fragments.fragment_picture(n, t)
    assert (pic.z == fragments.CHOSEN).sum() == n // 2
    assert (pic.z == fragments.QUAD).sum() == 3 * (n // 2)
    rows = {_h100_layout(t, j)[0] for j in range(n // 2)}
    assert set(np.nonzero(pic.z >= fragments.QUAD)[0]) == rows
    for j in range(n // 2):
        r, c = _h100_layout(t, j)
        assert pic.text[r, c] == str(j)
    background = pic.z < fragments.QUAD
    assert np.array_equal(pic.z[background], (np.arange(64)[:, None] // 16 * np.ones((1, n), int))[background])
    with pytest.raises(ValueError):
        fragments.fragment_picture(n, 128)


def test_descriptor_fields_reassemble_the_descriptor():
    for _ in range(50):
        start, lbo, sbo = (int(v) * 16 for v in rng.integers(0, 1 << 14, size=3))
        sw = Swizzle(int(rng.choice([0, 1, 2, 3])))
        base = int(rng.integers(0, 8))
        desc = wgmma.make_descriptor(start, lbo, sbo, sw, base)
        fields = fragments.descriptor_fields(desc)
        assert sum(f.raw << f.lo for f in fields) == desc
        assert sorted(b for f in fields for b in range(f.lo, f.hi + 1)) == list(range(64))


def test_descriptor_of_the_course_tile_matches_the_h100_fact():
    # h100-facts.md: start >> 4 in bits 0-13, LBO 16 (>> 4) in 16-29, SBO 1024 (>> 4) in 32-45, bit 62 set
    desc = wgmma.make_descriptor(0x400, 16, 1024, Swizzle.B128)
    assert desc == (0x400 >> 4) | (1 << 16) | (64 << 32) | (1 << 62)
    by_name = {f.name: f for f in fragments.descriptor_fields(desc)}
    assert by_name["start address"].raw == 0x40
    assert by_name["layout (swizzle)"].raw == 1 and "128B" in by_name["layout (swizzle)"].meaning


# Measured on an H100 (m64n64k16, 128B-swizzled 64x64 tiles, 1024-aligned): a start offset of 16*s bytes read
# K = 8s .. 8s+15 in every row, for s = 0, 1, 2, 3, 4, 6.
@pytest.mark.parametrize("s", [0, 1, 2, 3, 4, 6])
def test_k_window_of_a_start_offset_matches_the_h100(s):
    cols = fragments.k_columns_read(16 * s)
    assert np.array_equal(cols, np.broadcast_to(np.arange(8 * s, 8 * s + 16), (64, 16)))


def test_sixteen_byte_steps_double_count_and_miss_columns():
    right = np.concatenate(fragments.k_steps_read(32))
    assert sorted(right.tolist()) == list(range(64))
    wrong = np.concatenate(fragments.k_steps_read(16))
    assert set(range(40, 64)).isdisjoint(wrong.tolist())
    assert all((wrong == k).sum() == 2 for k in range(8, 32))
    off_the_row = fragments.k_columns_read(112)
    assert (off_the_row[:, 8:] == -1).all() and np.array_equal(off_the_row[0, :8], np.arange(56, 64))


@pytest.mark.parametrize("step, correct", [(32, True), (16, False)])
def test_four_wgmmas_with_a_step(step, correct):
    a = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    bt = rng.integers(-8, 9, size=(64, 64)).astype(np.float32)
    smem = np.zeros(2 * 8192, np.uint8)
    wgmma.write_kmajor_tile(smem, 0, a, Swizzle.B128)
    wgmma.write_kmajor_tile(smem, 8192, bt, Swizzle.B128)
    d = np.zeros((128, 32), np.float32)
    for k in range(4):
        d = wgmma.mma_async(smem, wgmma.make_descriptor(step * k, 16, 1024, Swizzle.B128),
                            wgmma.make_descriptor(8192 + step * k, 16, 1024, Swizzle.B128), 64, accum=d)
    assert np.array_equal(wgmma.fragments_to_tile(d, 64), a @ bt.T) == correct


def test_fragment_widgets_build_and_redraw():
    pytest.importorskip("ipywidgets")
    box = fragments.fragment_explorer_widget(n=16, thread=5)
    n_pick, t_pick = box.children[0].children
    fig = box.children[1]
    for n in fragments.FRAGMENT_NS:
        n_pick.value = n
        t_pick.value = 77
        assert np.asarray(fig.data[0].z).shape == (64, n)
        assert "thread 77" in box.children[3].value
    d = fragments.descriptor_widget()
    step_pick, k_pick = d.children[0].children
    step_pick.value, k_pick.value = 16, 3
    assert "start = tile + 48 bytes" in d.children[3].value


def test_lesson03_quiz_answers_follow_the_emulator():
    r, c = wgmma.element_of(37, 40, 128)
    assert lesson03.element_n128.judge(f"{r}, {c}")[0]
    assert lesson03.element_n128.judge("(17, 82)")[0] and not lesson03.element_n128.judge("17")[0]
    assert lesson03.registers_n128.right == 64 * 128 // 128
    step = wgmma.make_descriptor(32, 16, 1024, Swizzle.B128) - wgmma.make_descriptor(0, 16, 1024, Swizzle.B128)
    assert lesson03.start_step.right == step
    assert lesson03.sbo.right == wgmma.decode_descriptor(wgmma.make_descriptor(0, 16, 1024, Swizzle.B128)) \
        .stride_byte_offset
    r, c = wgmma.element_of(37, 6, 64)
    assert lesson03.element.judge(f"{r}, {c}")[0]
    t, j = wgmma.thread_register_of(40, 21, 64)
    assert lesson03.owner.judge(f"({t}, {j})")[0]
    assert not lesson03.owner.judge("66")[0]  # one number is not an answer


# -----------------------------------------------------------------------------------------------------------
# Lesson 02 · barrier stepper
# -----------------------------------------------------------------------------------------------------------
def test_a_k_loop_with_the_right_parity_never_races():
    s = barrier.BarrierStepper(count=1)
    parity = 0
    steps = int(rng.integers(2, 9))
    for _ in range(steps):
        nbytes = int(rng.choice([4096, 8192, 16384]))
        assert s.arrive_expect_tx(nbytes).kind == "ok"
        for part in (nbytes // 2, nbytes - nbytes // 2):
            s.issue_tma(part)
        assert s.wait(parity).kind == "passes"
        assert s.bytes_in_flight == 0
        parity ^= 1
    assert s.bar.phase == steps
    last = s.wait(parity)
    assert last.kind == "deadlock" and "parity" in last.outcome


def test_the_expect_tx_race_completes_phase_zero_early():
    steps = barrier.run_script([("arrive", 1), ("expect_tx", 8192), ("issue_tma", 8192), ("wait", 0),
                                ("land", 0), ("wait", 1)])
    assert steps[0].completed == (0,) and steps[0].kind == "complete"
    assert steps[1].state.phase == 1 and steps[1].state.tx_count == 8192
    assert steps[3].kind == "race" and "8192 bytes are still in flight" in steps[3].outcome
    assert steps[4].state.tx_count == 0 and steps[4].state.phase == 1  # counted against phase 1
    assert steps[5].kind == "deadlock"  # phase 1 still waits for an arrival nobody will make


def test_arrive_expect_tx_fixes_the_race():
    steps = barrier.run_script([("arrive_expect_tx", 8192), ("issue_tma", 8192), ("wait", 0)])
    assert steps[-1].kind == "passes" and steps[-1].state.phase == 1


def test_wrong_parity_on_a_fresh_barrier_is_a_race():
    steps = barrier.run_script([("arrive_expect_tx", 8192), ("issue_tma", 8192), ("wait", 1)])
    assert steps[-1].kind == "race"


def test_missing_arrivals_deadlock():
    steps = barrier.run_script([("arrive", 1), ("wait", 0)], count=2)
    assert steps[-1].kind == "deadlock" and "1 more arrival" in steps[-1].outcome


def test_misuse_is_reported_not_modelled():
    steps = barrier.run_script([("arrive", 1), ("arrive", 2)], count=2)
    assert steps[-1].kind == "error" and steps[-1].state.pending_arrivals == 1
    steps = barrier.run_script([("arrive", 1), ("issue_tma", 8192), ("wait", 0)], count=None)
    assert [s.kind for s in steps] == ["error", "error", "error"]
    assert "never initialized" in steps[0].outcome
    with pytest.raises(ValueError):
        barrier.BarrierStepper().do("explode")


def test_bytes_in_flight_land_in_order():
    s = barrier.BarrierStepper(count=1)
    s.arrive_expect_tx(12288)
    s.issue_tma(4096)
    s.issue_tma(8192)
    assert s.land().state.tx_count == 8192
    assert s.land().completed == (0,)
    assert s.land().outcome.startswith("nothing in flight")


def test_timeline_follows_the_steps():
    s = barrier.BarrierStepper(count=1)
    for _ in range(3):
        s.arrive()
    t = barrier.timeline(s.steps)
    assert t["phase"] == [0, 1, 2, 3] and t["x"] == [0, 1, 2, 3]
    assert barrier.state_html(s.steps[-1]).count("<b>") >= 4


# test_wait.parity 0 and 1 after each operation, measured on an H100 with barrier.REPLAY_KERNEL (one thread).
H100_WAIT_BITS = {
    "count2": ([("init", 2), ("arrive", 1), ("arrive", 1), ("arrive", 1), ("arrive", 1)],
               [[0, 1], [0, 1], [1, 0], [1, 0], [0, 1]]),
    "race": ([("init", 1), ("arrive", 1), ("expect_tx", 8192), ("complete_tx", 8192), ("arrive", 1)],
             [[0, 1], [1, 0], [1, 0], [1, 0], [0, 1]]),
    "two_tiles": ([("init", 1), ("arrive_expect_tx", 16384), ("complete_tx", 8192), ("complete_tx", 8192)],
                  [[0, 1], [0, 1], [0, 1], [1, 0]]),
    "bytes_early": ([("init", 1), ("complete_tx", 8192), ("arrive_expect_tx", 8192)], [[0, 1], [0, 1], [1, 0]]),
    "arrive_count": ([("init", 4), ("arrive", 3), ("arrive", 1), ("arrive", 1)],
                     [[0, 1], [0, 1], [1, 0], [1, 0]]),
    "overshoot": ([("init", 1), ("arrive_expect_tx", 8192), ("complete_tx", 16384)], [[0, 1], [0, 1], [0, 1]]),
}


@pytest.mark.parametrize("name", sorted(H100_WAIT_BITS))
def test_emulator_wait_bits_match_the_h100(name):
    script, measured = H100_WAIT_BITS[name]
    assert barrier.wait_bits(script).tolist() == measured


def test_expect_tx_after_overshoot_completes_the_phase_as_on_the_h100():
    script = [("init", 1), ("arrive_expect_tx", 8192), ("complete_tx", 16384), ("expect_tx", 8192)]
    assert barrier.wait_bits(script).tolist() == [[0, 1], [0, 1], [0, 1], [1, 0]]


def test_replay_scripts_are_checked():
    with pytest.raises(ValueError):
        barrier.wait_bits([("arrive", 1)])
    with pytest.raises(ValueError):
        barrier.wait_bits([("init", 1), ("land", 0)])
    with pytest.raises(mbarrier.MBarrierError):
        barrier.wait_bits([("init", 1), ("arrive", 2)])


def test_barrier_widget_buttons():
    pytest.importorskip("ipywidgets")
    box = barrier.barrier_stepper_widget(count=1, nbytes=8192)
    buttons = {b.description: b for row in box.children[:2] for b in row.children if hasattr(b, "click")}
    for name in ("arrive.expect_tx(bytes)", "TMA issue(bytes)", "wait(parity 0)", "wait(parity 0)"):
        buttons[name].click()
    status = box.children[2].value
    assert "wait(parity 0)" in status and "returns at once" in status
    buttons["wait(parity 1)"].click()
    assert "DEADLOCK" in box.children[2].value
    buttons["reset"].click()
    assert "init(1)" in box.children[2].value


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(H100_WAIT_BITS))
def test_replay_kernel_on_the_gpu(name):
    from helpers import gpu

    if not gpu.hopper_available():
        pytest.skip("needs an sm_90 GPU")
    script, measured = H100_WAIT_BITS[name]
    assert barrier.replay_on_gpu(script).tolist() == measured


def test_lesson02_quiz_answers_follow_the_emulator():
    bits = barrier.wait_bits([("init", 1), ("arrive", 1), ("expect_tx", 8192)])[-1]
    assert lesson02.race_bits.judge(f"{bits[0]}, {bits[1]}")[0]
    assert lesson02.race_bits.judge("true, false")[0]
    bar = mbarrier.MBarrier()
    bar.init(1)
    assert bar.test_wait(1) and lesson02.fresh_parity_one.judge("yes")[0]
    for _ in range(5):
        bar.arrive()
    assert lesson02.parity_after.right == bar.parity
    race = barrier.run_script([("arrive", 1), ("expect_tx", 8192)])
    assert race[-1].state.phase == 1 and lesson02.race.right.startswith("the next phase")
    steps = barrier.run_script([("arrive", 3), ("arrive", 1), ("arrive", 1)], count=4)
    assert lesson02.arrivals.right == steps[-1].state.phase
