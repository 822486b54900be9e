"""Lab 9 (Stream-K) graders, both ways: the solution passes; the stub and plausible wrong answers fail, each named
wrong answer on every one of 200 seeds, with a message that names the mistake. The kernel's wrong versions are the
solution's with one change each: those the PTX shows are rejected statically, those only a run shows are run on the
course's PTX executor (three clusters; first, middle and final splits and whole pairs); the run on an H100 is a
``gpu`` test. Also here: the tiered hints (the stubs show tier 0 only; the kernel's comments do not describe the
fix-up). The kernel is graded on the solutions' wrappers of Labs 1 and 2; no Lab 7 notebook is beside the tests, so
the course's Lab 7 kernel stands in (test_lab9_carry.py covers a student's, and the diff the lab opens with)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from gpu_lab5679 import lab9_run_only
from hinttools import (
    assert_in_order,
    assert_stubs_show_tier_0_only,
    assert_tiered,
    comments_outside_regions,
    graded_ids,
    lab_exercises,
    notebook_regions,
)

from helpers.course import carry, grading, labgen
from helpers.course.checks import lab5, lab9
from helpers.hopper import streamk as sk
from helpers.hopper import striped

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab9_streamk.ipynb"
SOL = labgen.solution_namespace(SOLUTION)
STUB = labgen.solution_namespace(ROOT / "labs" / "lab9_streamk.ipynb")
SEEDS = range(200)
BENCH = (ROOT / "bench" / "kernels" / "lab9_streamk.cu").read_text()


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    """The kernel is built on the wrappers of Labs 1 and 2: here the solutions'. No Lab 7 notebook is beside the
    tests, so the course's Lab 7 kernel stands in."""
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)

GRADERS = [
    (lambda ns, **kw: lab9.check_iteration_space(ns["iteration_space"], **kw)),
    (lambda ns, **kw: lab9.check_stream_k_pieces(ns["stream_k_pieces"], **kw)),
    (lambda ns, **kw: lab9.check_work_list(ns["work_list"], **kw)),
    (lambda ns, **kw: lab9.check_striped(ns["striped_store"], ns["striped_load_add"], **kw)),
    (lambda ns, **kw: lab9.check_fixup_plan(ns["fixup_plan"], **kw)),
    (lambda ns, **kw: lab9.check_packed_reduction(ns["reduce_add_bf16x2"], ns["vector_width"], **kw)),
]


@pytest.mark.parametrize("grader", GRADERS)
@pytest.mark.parametrize("seed", [None, 1, 2])
def test_solution_passes(grader, seed):
    grader(SOL, seed=seed)


@pytest.mark.parametrize("grader", GRADERS)
def test_stub_fails(grader):
    grading.assert_rejects(lambda ns: grader(ns), STUB, "not written yet", "hint")


def _rejected_on_every_seed(grader, answer, *needles: str) -> None:
    for seed in SEEDS:
        grading.assert_rejects(lambda a, seed=seed: grader(a, seed=seed), answer, *needles)


# ------------------------------------------------------------------------------------------- 1 · iteration space
def _space(fn):
    return lambda a, seed: lab9.check_iteration_space(fn if a is None else a, seed=seed)


@pytest.mark.parametrize("wrong, needle", [
    (lambda M, N, K: ((M // 256) * (N // 256), K // 64), "round up"),
    (lambda M, N, K: (math.ceil(M / 128) * math.ceil(N / 256), math.ceil(K / 64)), "PAIR"),
    (lambda M, N, K: (math.ceil(M / 256) * math.ceil(N / 256), math.ceil(K / 128)), "64 wide"),
    (lambda M, N, K: (math.ceil(M / 256), math.ceil(N / 256)), "return (tiles, K steps)"),
])
def test_iteration_space_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_iteration_space(a, seed=seed), wrong, needle)


# ------------------------------------------------------------------------------------------- 2 · ranges
def _pieces_from_range(g0, g1, k_steps, backwards=True):
    out = []
    if g1 > g0:
        tiles = range((g1 - 1) // k_steps, g0 // k_steps - 1, -1)
        for t in (tiles if backwards else reversed(tiles)):
            t0 = t * k_steps
            out.append((t, max(g0, t0) - t0, min(g1, t0 + k_steps) - t0))
    return out


def floor_ranges(cta, ctas, tiles, k_steps):
    """per = total // ctas: the last total % ctas iterations belong to nobody (a skipped K block)."""
    total = tiles * k_steps
    per = max(1, total // ctas)
    return _pieces_from_range(min(total, cta * per), min(total, cta * per + per), k_steps)


def overlapping_ranges(cta, ctas, tiles, k_steps):
    """Each range runs one iteration into the next (an inclusive end): a repeated K block."""
    total = tiles * k_steps
    per = -(-total // ctas)
    g0 = min(total, cta * per)
    return _pieces_from_range(g0, min(total, g0 + per + 1) if g0 < total else g0, k_steps)


def forward_walk(cta, ctas, tiles, k_steps):
    total = tiles * k_steps
    per = -(-total // ctas)
    g0 = min(total, cta * per)
    return _pieces_from_range(g0, min(total, g0 + per), k_steps, backwards=False)


def balanced_ranges(cta, ctas, tiles, k_steps):
    """Floor plus one for the first total % ctas CTAs: covers everything once, but not the kernel's ranges."""
    total = tiles * k_steps
    q, r = divmod(total, ctas)
    g0 = cta * q + min(cta, r)
    return _pieces_from_range(g0, g0 + q + (cta < r), k_steps)


def unsplit_pieces(cta, ctas, tiles, k_steps):
    """The range as one piece of its first tile, not cut at tile boundaries."""
    total = tiles * k_steps
    per = -(-total // ctas)
    g0, g1 = min(total, cta * per), min(total, cta * per + per)
    return [(g0 // k_steps, g0 % k_steps, g0 % k_steps + (g1 - g0))] if g1 > g0 else []


@pytest.mark.parametrize("wrong, needle", [
    (floor_ranges, "computed by no CTA"),
    (overlapping_ranges, "a K block repeated"),
    (forward_walk, "from its END backwards"),
    (balanced_ranges, "not by the kernel's ranges"),
    (unsplit_pieces, "outside"),
])
def test_stream_k_pieces_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_stream_k_pieces(a, seed=seed), wrong, needle)


def test_floor_ranges_hint_says_round_up():
    msg = grading.assert_rejects(lab9.check_stream_k_pieces, floor_ranges)
    assert "round up" in msg


# ------------------------------------------------------------------------------------------- 3 · work list
def pure_stream_k(cta, ctas, tiles, k_steps):
    return sk.stream_k_pieces(cta, ctas, tiles, k_steps)


def whole_waves(cta, ctas, tiles, k_steps):
    dp = (tiles // ctas) * ctas
    return [sk.Piece(t, 0, k_steps) for t in range(cta, dp, ctas)] + sk.stream_k_pieces(cta, ctas, tiles - dp,
                                                                                          k_steps, dp)


def contiguous_blocks(cta, ctas, tiles, k_steps):
    dp = sk.data_parallel_tiles(tiles, ctas)
    each = dp // ctas
    return ([sk.Piece(t, 0, k_steps) for t in range(cta * each, cta * each + each)]
            + sk.stream_k_pieces(cta, ctas, tiles - dp, k_steps, dp))


def not_offset(cta, ctas, tiles, k_steps):
    dp = sk.data_parallel_tiles(tiles, ctas)
    return [sk.Piece(t, 0, k_steps) for t in range(cta, dp, ctas)] + sk.stream_k_pieces(cta, ctas, tiles - dp,
                                                                                          k_steps)


def stream_k_first(cta, ctas, tiles, k_steps):
    dp = sk.data_parallel_tiles(tiles, ctas)
    return sk.stream_k_pieces(cta, ctas, tiles - dp, k_steps, dp) + [sk.Piece(t, 0, k_steps)
                                                                     for t in range(cta, dp, ctas)]


@pytest.mark.parametrize("wrong, needle", [
    (pure_stream_k, "go out whole"),
    (whole_waves, "keep one to two waves"),
    (contiguous_blocks, "round-robin"),
    (not_offset, "numbered from dp"),
    (stream_k_first, "whole tiles first"),
])
def test_work_list_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_work_list(a, seed=seed), wrong, needle)


# ------------------------------------------------------------------------------------------- 4 · striped
def _ok_store(ws, regs):
    T, R = regs.shape
    for j in range(R):
        ws[j * T:(j + 1) * T] = regs[:, j]


def _ok_load_add(ws, regs):
    T, R = regs.shape
    return (regs + ws[:T * R].reshape(R, T).T).astype(np.float32)


def blocked_store(ws, regs):
    ws[:regs.size] = regs.reshape(-1)


def last_stripe_left_out(ws, regs):
    T, R = regs.shape
    for j in range(R - 1):
        ws[j * T:(j + 1) * T] = regs[:, j]


def last_thread_left_out(ws, regs):
    T, R = regs.shape
    for j in range(R):
        ws[j * T:j * T + T - 1] = regs[:T - 1, j]


def store_past_the_end(ws, regs):
    _ok_store(ws, regs)
    ws[regs.size:] = 0.0


def half_precision_store(ws, regs):
    with np.errstate(over="ignore"):
        _ok_store(ws, regs.astype(np.float16).astype(np.float32))


def blocked_load_add(ws, regs):
    return (regs + ws[:regs.size].reshape(regs.shape)).astype(np.float32)


def load_without_add(ws, regs):
    return regs.copy()


def load_add_that_writes(ws, regs):
    out = _ok_load_add(ws, regs)
    ws[:] = 0.0
    return out


def load_add_in_place(ws, regs):
    """Adds into the registers it was given (the caller's array changes) and returns them: bits right."""
    T, R = regs.shape
    regs += ws[:T * R].reshape(R, T).T
    return regs


def load_add_in_float64(ws, regs):
    """The right sums, returned as float64 registers."""
    return _ok_load_add(ws, regs).astype(np.float64)


def load_add_flat(ws, regs):
    """The right registers, flattened."""
    return _ok_load_add(ws, regs).reshape(-1)


def store_that_scales_its_registers(ws, regs):
    """Stores right, but halves the registers it was given on the way."""
    _ok_store(ws, regs)
    regs *= 0.5


@pytest.mark.parametrize("store, load_add, needles", [
    (_ok_store, load_add_in_place, ("changed the registers it was given", "not an addition into regs in place")),
    (_ok_store, load_add_in_float64, ("dtype", "float32")),
    (_ok_store, load_add_flat, ("shape",)),
    (store_that_scales_its_registers, _ok_load_add, ("changed the registers it was given",)),
])
def test_striped_inputs_dtype_and_shape(store, load_add, needles):
    _rejected_on_every_seed(lambda a, seed: lab9.check_striped(*a, seed=seed), (store, load_add), *needles)


@pytest.mark.parametrize("store, load_add, needle", [
    (blocked_store, _ok_load_add, "t·R + j"),
    (last_stripe_left_out, _ok_load_add, "never written"),
    (last_thread_left_out, _ok_load_add, "never written"),
    (store_past_the_end, _ok_load_add, "past T·R"),
    (half_precision_store, _ok_load_add, "bits unchanged"),
    (_ok_store, blocked_load_add, "j·T + t"),
    (_ok_store, load_without_add, "unchanged"),
    (_ok_store, load_add_that_writes, "only reads"),
])
def test_striped_wrong_answers(store, load_add, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_striped(*a, seed=seed), (store, load_add), needle)


def test_striped_reference_answers_pass():
    lab9.check_striped(_ok_store, _ok_load_add, seed=5)


# ------------------------------------------------------------------------------------------- 5 · fix-up
def _plan(*, release="release", wait="acquire", bar_after_wait=True, bar_before_release=True,
          release_first=False, reset=True, reset_first=False, final_adds=True, wait_for_one=False,
          epilogue_everywhere=False):
    def plan(ka, kb, n, order, leader):
        if ka == 0 and kb == n:
            return [sk.epilogue()]
        ops = []
        if reset_first and kb == n and leader:
            ops.append(sk.set_flag(0, "relaxed"))
        if order > 0:
            if leader:
                ops.append(sk.wait_flag(1 if wait_for_one else order, wait))
            if bar_after_wait:
                ops.append(sk.bar_sync())
            if kb != n or final_adds:
                ops.append(sk.load_add())
        if kb != n:
            flag = [sk.set_flag(order + 1, release)] if leader else []
            if release_first:
                ops += flag + [sk.store(), sk.bar_sync()]
            elif bar_before_release:
                ops += [sk.store(), sk.bar_sync()] + flag
            else:
                ops += [sk.store()] + flag + [sk.bar_sync()]
            return ops + ([sk.epilogue()] if epilogue_everywhere else [])
        if reset and not reset_first and leader:
            ops.append(sk.set_flag(0, "relaxed"))
        return ops + [sk.epilogue()]
    return plan


FIXUP_WRONG = {
    "adds out of order (waits for flag >= 1)": (_plan(wait_for_one=True), "reaches its order"),
    "atomic adds in arrival order": (sk.atomic_plan, "out of K order"),
    "flag written before the partials it guards": (_plan(release_first=True), "before the stores"),
    "relaxed flag store": (_plan(release="relaxed"), "relaxed flag"),
    "relaxed flag wait": (_plan(wait="relaxed"), "acquire"),
    "no barrier after the wait": (_plan(bar_after_wait=False), "bar_sync, then load_add"),
    "release before the barrier": (_plan(bar_before_release=False), "both warpgroups' stores are in"),
    "no flag reset": (_plan(reset=False), "resets the tile's flag"),
    "reset before the wait": (_plan(reset_first=True), "❌"),
    "final split forgets the workspace": (_plan(final_adds=False), "never added"),
    "every split runs the epilogue": (_plan(epilogue_everywhere=True), "only the final split"),
}


@pytest.mark.parametrize("name", sorted(FIXUP_WRONG))
def test_fixup_wrong_answers(name):
    plan, needle = FIXUP_WRONG[name]
    _rejected_on_every_seed(lambda a, seed: lab9.check_fixup_plan(a, seed=seed), plan, needle)


def test_fixup_plan_that_returns_garbage():
    grading.assert_rejects(lab9.check_fixup_plan, lambda *a: "epilogue", "list of ops")
    grading.assert_rejects(lab9.check_fixup_plan, lambda *a: ["epilogue"], "streamk functions")


def test_fixup_both_warpgroups_waiting_is_accepted():
    """Both warpgroups acquiring the flag is wasteful but correct: the grader accepts it."""
    def both_wait(ka, kb, n, order, leader):
        ops = sk.ordered_plan(ka, kb, n, order, leader)
        return [sk.wait_flag(order)] + ops if order > 0 and not leader else ops
    lab9.check_fixup_plan(both_wait, seed=3)


def test_fixup_both_warpgroups_releasing_is_rejected():
    """Two writers of one flag: the final split may reset it before the second release lands."""
    def both_release(ka, kb, n, order, leader):
        ops = sk.ordered_plan(ka, kb, n, order, leader)
        return ops + [sk.set_flag(order + 1)] if kb != n and not leader and (ka, kb) != (0, n) else ops
    grading.assert_rejects(lambda p: lab9.check_fixup_plan(p, seed=3), both_release, "❌")


# ------------------------------------------------------------------------------------------- 6 · the kernel
#: the lines of the course's Lab 7 cell that Stream-K changes (whitespace collapsed): the header comment's first line,
#: the kernel's declaration (its name, the workspace and the flags), the loops over pairs (over work items now) and
#: their K loops (over [ka, kb)), scale-d = 0 on a piece's first wgmma, the release inside the K loop
LAB7_LINES_CHANGED = [
    "// Lab 7: Lab 6's kernel in clusters of two blocks that multicast B.",
    "lab7_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,",
    "const __grid_constant__ CUtensorMap tmap_c, int M, int N, int K) {",
    "for (int p = cluster_id; p < pairs; p += clusters) {", "int pm, pn;", "for (int j = 0; j < nk; ++j, ++it) {",
    "for (int p = cluster_id; p < pairs; p += clusters) {", "int pm, pn;", "for (int k = 0; k < nk; ++k, ++it) {",
    "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk), k > 0 || kk > 0);",
    "if (k > 0 && t < CLUSTER) hopper::mbar_arrive_cluster(&empty[(it - 1) % STAGES], t);",
]


def test_kernel_is_the_course_lab7_cell_with_the_streamk_change(wrappers):
    """The notebook's kernel is the course's Lab 7 cell with this lab's change: every other line of Lab 7 is there,
    the same (so a student's edits of it are kept); merged with the course's Lab 7 kernel, it is exactly the cell's
    code; the graded source is the wrappers and that code."""
    from difflib import SequenceMatcher

    from helpers.course.checks._common import course_kernel

    course7 = carry.code_lines(course_kernel("lab7"))
    lab7_cell = labgen.solution_namespace(ROOT / "solutions" / "lab7_clusters.ipynb")["LAB7_SRC"]
    assert course7 == carry.code_lines(lab7_cell)
    cell = carry.code_lines(SOL["LAB9_SRC"])
    key = [" ".join(x.split()) for x in course7.split("\n")], [" ".join(x.split()) for x in cell.split("\n")]
    gone = [x for tag, i1, i2, _, _ in SequenceMatcher(None, *key, autojunk=False).get_opcodes() if tag != "equal"
            for x in key[0][i1:i2]]
    assert gone == LAB7_LINES_CHANGED
    m = carry.merge(course7, course7, cell)
    assert m.text == cell and not m.conflicts and not m.kept
    made, source = lab9._carried(SOL["LAB9_SRC"], "// the wrappers\n", None, quiet=True)
    assert not made.previous.yours and source == lab5.HEADER + "// the wrappers\n" + cell
    for mine in ("my_mbar_init(", "my_mbar_wait(", "my_mbar_expect_tx(", "my_tma_load_2d(", "kslice_desc(",
                 "tile_coords(p, pairs_m, pairs_n, pm, pn);", "stage_subtile(buf, d + 32 * sub, t);"):
        assert mine in cell, mine


def test_the_notebook_kernel_computes_the_bench_kernels_bits(wrappers, monkeypatch):
    """bench/kernels/lab9_streamk.cu (the course's Lab 9 kernel, measured on the H100, what gpu.matmul runs and timed
    beside the student's) and the notebook's kernel compute the same C, bit for bit, on the course's PTX executor:
    three clusters, whole pairs round-robin and first and final splits, partial tiles and a partial K step."""
    from ml_dtypes import bfloat16

    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    rng = np.random.default_rng(7)
    m, n, k = 504, 984, 136
    cases = [(rng.standard_normal((m, k)).astype(bfloat16), rng.standard_normal((n, k)).astype(bfloat16))]
    assert "whole pairs round-robin" in lab9.roles_of(*sk.iteration_space(m, n, k), 3)
    assert "first split" in lab9.roles_of(*sk.iteration_space(m, n, k), 3)
    mine = lab9.gpu_trial(lab5.HEADER + wrappers + carry.code_lines(SOL["LAB9_SRC"]), cases, 0, 3)["results"][0]
    bench = lab9.gpu_trial(BENCH, cases, 0, 3)["results"][0]
    assert np.isfinite(mine[0].astype(np.float32)).all() and mine[3] == bench[3] and mine[3]  # the same slots used
    assert np.array_equal(mine[0].view(np.uint16), bench[0].view(np.uint16))


def test_student_kernel_stub_fails():
    msg = grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False), STUB["LAB9_SRC"],
                                 "not written yet", "hint")
    assert "(stuck? lab9.hint('lab9-kernel', 1))" in msg


# ------------------------------------------------------------------------------------------- tiered hints
def test_every_exercise_has_tiered_hints():
    assert_tiered("lab9")
    assert len(lab_exercises("lab9")["lab9-kernel"].regions) == 5


def test_the_stubs_show_tier_0_only():
    assert assert_stubs_show_tier_0_only("lab9_streamk.ipynb", "lab9") == notebook_regions("lab9_streamk.ipynb")


def test_kernel_comments_do_not_describe_the_fixup():
    comments = comments_outside_regions(SOL["LAB9_SRC"])
    for phrase in ("releases the pair's flag", "flag + 1", "resets the flag", "c·16384 + j·128 + t",
                   "keyed by the lowest cluster"):
        assert phrase not in comments, phrase


def test_hint_and_answer_entry_points(capsys):
    lab9.hint("lab9-kernel")
    lab9.hint("lab9-fixup", 2)
    lab9.answer("lab9-fixup")
    lab9.answer("lab9-kernel", sure=True)
    out = capsys.readouterr().out
    assert "What to do · lab9-kernel" in out and "part 5 of 5" in out and "lab9.hint('lab9-kernel', 1, part=1)" in out
    assert "Hint 2 · lab9-fixup" in out and "That was the last hint" in out and "sure=True" in out
    assert "hopper::flag_store_release(flag, order + 1);" in out.split("The answer · lab9-kernel")[1]


# ------------------------------------------------------------------------------------------- 6 · the kernel, run
def test_solution_kernel_passes_on_the_executor(capsys, monkeypatch):
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    lab9.check_streamk_kernel(SOL["LAB9_SRC"], benchmark=True, seed=5)
    out = capsys.readouterr().out
    assert "bar.sync lies between the workspace stores and the release" in out
    assert out.count("✓ ran on the emulator (") == 18 and "hazard mode" in out and out.count("on 3 clusters") == 3, out
    assert out.count("the protocol, as the emulator recorded it: every wait on full[s] named the phase") == 3, out
    assert out.count("the work, as the emulator recorded it: each of the") == 3, out
    assert out.count("every stage released once per fill, by all its consumers") == 3, out
    assert "1 first split, 1 middle split, 1 final split" in out and "3 whole pairs round-robin" in out
    assert "timing skipped" in out
    assert "✓ graded: the course's Lab 7 kernel + Lab 9's change + your Lab 9 regions (the course's Lab 7 kernel " \
           "stood in: lab7_clusters.ipynb is not beside this notebook)" in out


@pytest.mark.parametrize("seed", range(40))
def test_emulator_cases_exercise_every_role(seed):
    """Whatever the seed, the emulated run has whole pairs round-robin and first, middle and final splits, partial
    tiles in M and N and a partial last K step, and stays small (at most 24 pair × K step iterations a shape)."""
    shapes = lab9.emulator_cases(grading.SeededRng(seed))
    roles = " ".join(lab9.roles_of(*sk.iteration_space(m, n, k), lab9.EMULATED_CLUSTERS) for m, n, k in shapes)
    for role in ("whole pairs round-robin", "first split", "middle split", "final split"):
        assert role in roles
    assert any(m % 256 and n % 256 and k % 64 for m, n, k in shapes)
    for m, n, k in shapes:
        tiles, steps = sk.iteration_space(m, n, k)
        assert tiles * steps <= 24 and m % 8 == n % 8 == k % 8 == 0


def _swap(src: str, old: str, new: str) -> str:
    assert old in src, old
    return src.replace(old, new)


def wrong_kernels(src: str) -> dict[str, tuple[str, str]]:
    """Plausible wrong kernels made from the solution's: name -> (source, words the grader's message must hold)."""
    release = "          if (threadIdx.x == 128) hopper::flag_store_release(flag, order + 1);"
    bar_after_store = "          hopper::named_bar_sync(3, 256);  // every consumer thread has stored"
    wait = 'hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank)'
    return {
        "release before the barrier": (_swap(src, f"{bar_after_store}\n{release}", f"{release}\n{bar_after_store}"),
                                       "between the workspace stores and the release"),
        "relaxed (volatile) flag store": (_swap(src, "hopper::flag_store_release(flag, order + 1)",
                                                "*(volatile unsigned*)flag = order + 1"), "st.release.gpu"),
        "relaxed flag wait": (_swap(src, wait, "while (*(volatile unsigned*)flag < order) {}"), "ld.acquire.gpu"),
        "no barrier after the wait": (_swap(src, "          hopper::named_bar_sync(3, 256);\n#pragma unroll\n"
                                                 "          for (int j = 0; j < BN / 2; ++j) d[j] +=",
                                            "#pragma unroll\n          for (int j = 0; j < BN / 2; ++j) d[j] +="),
                                      "between the acquiring wait and the workspace loads"),
        "no flag reset": (_swap(src, "        if (threadIdx.x == 128) *flag = 0;", ""), "writes 0 to the flag"),
    }


def test_the_bench_kernel_passes_as_a_whole_kernel(monkeypatch):
    """carried=False grades a whole kernel as it is: the course's bench kernel, statically."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    with contextlib.redirect_stdout(io.StringIO()) as buf:
        lab9.check_streamk_kernel(BENCH, benchmark=False, carried=False)
    assert "graded:" not in buf.getvalue()


@pytest.mark.parametrize("name", ["release before the barrier", "relaxed (volatile) flag store", "relaxed flag wait",
                                  "no barrier after the wait", "no flag reset"])
def test_wrong_kernels_fail_statically(name):
    src, needle = wrong_kernels(SOL["LAB9_SRC"])[name]
    grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False), src, needle)


def right_kernels(src: str) -> dict[str, str]:
    """Right fix-ups in other spellings the memory model allows: name -> the kernel."""
    release = "hopper::flag_store_release(flag, order + 1)"
    wait = 'hopper::flag_wait_geq(flag, order, "flags", owner * CLUSTER + rank)'
    reset = "if (threadIdx.x == 128) *flag = 0;"
    return {
        "reset with a release store": _swap(src, reset, "if (threadIdx.x == 128) hopper::flag_store_release(flag, 0);"),
        "reset with an atomic exchange": _swap(src, reset, "if (threadIdx.x == 128) atomicExch(flag, 0u);"),
        "release as a fence and an atomic exchange": _swap(
            src, release, "{ __threadfence(); atomicExch(flag, order + 1); }"),
        "acquire as a volatile spin and a fence": _swap(
            src, wait, "{ while (*(volatile unsigned*)flag < order) {} __threadfence(); }"),
    }


@pytest.mark.parametrize("name", list(right_kernels(SOL["LAB9_SRC"])))
def test_right_kernels_in_other_spellings_pass_statically(name, monkeypatch):
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    with contextlib.redirect_stdout(io.StringIO()):
        lab9.check_streamk_kernel(right_kernels(SOL["LAB9_SRC"])[name], benchmark=False)


def test_reference_ptx_protocol_all_pass():
    from helpers import gpu

    k = gpu.compile(lab9.lab9_reference_source(), lab9.KERNEL_NAME)
    assert all(ok for _, ok, _ in lab9.ptx_protocol(k.ptx))
    assert len(lab9.ptx_protocol(k.ptx)) == 7


@pytest.mark.parametrize("name", list(lab9_run_only(SOL["LAB9_SRC"])))
def test_run_only_wrong_kernels_pass_statically_and_fail_on_the_executor(name, monkeypatch):
    src, needles, _ = lab9_run_only(SOL["LAB9_SRC"])[name]
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    with contextlib.redirect_stdout(io.StringIO()):
        lab9.check_streamk_kernel(src, benchmark=False, seed=0)  # the PTX cannot tell
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")  # the fixed shapes show each mistake, whatever the seed
    grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False, seed=0), src,
                           "on the emulator" if "deadlock" not in needles else "when it ran", *needles)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n, (_, _, on_gpu) in lab9_run_only(SOL["LAB9_SRC"]).items() if on_gpu])
def test_run_only_wrong_kernels_fail_on_the_h100(name):
    src, needles, _ = lab9_run_only(SOL["LAB9_SRC"])[name]
    grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False), src, *needles)


@pytest.mark.gpu
def test_solution_kernel_on_the_gpu(capsys):
    lab9.check_streamk_kernel(SOL["LAB9_SRC"], benchmark=True)
    print(capsys.readouterr().out)


# ------------------------------------------------------------------------------------------- the notebook
def test_notebook_has_a_graded_check_per_step():
    assert_in_order(graded_ids(SOLUTION.name), ["lab9-space", "lab9-ranges", "lab9-hybrid", "lab9-striped",
                                                "lab9-fixup", "lab9-kernel", "lab9-packed"])


# ------------------------------------------------------------------------------------------- several rules at once
def test_answers_breaking_several_rules_at_once():
    def floor_and_forward(cta, ctas, tiles, k_steps):
        return list(reversed(floor_ranges(cta, ctas, tiles, k_steps)))

    # the first case (one CTA) already shows the forward walk; the floor shows from the first uneven case on
    _rejected_on_every_seed(lambda a, seed: lab9.check_stream_k_pieces(a, seed=seed), floor_and_forward, "backwards")
    relaxed_no_reset = _plan(release="relaxed", reset=False)
    _rejected_on_every_seed(lambda a, seed: lab9.check_fixup_plan(a, seed=seed), relaxed_no_reset, "❌")
    _rejected_on_every_seed(lambda a, seed: lab9.check_striped(*a, seed=seed),
                            (last_stripe_left_out, blocked_load_add), "never written")


def test_a_first_split_that_adds_the_workspace_gets_its_own_hint(monkeypatch):
    """The first split also adds the workspace: the first launch is right (the workspace is zero), the next one adds
    what the launch before left there. The hint names that mistake, not the K order."""
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    src = BENCH
    old = "        if (order > 0) {  // wait for every earlier split, then add what they left"
    assert old in src
    text = grading.assert_rejects(lambda s: lab9.check_streamk_kernel(s, benchmark=False, seed=1, carried=False),
                                  src.replace(old, "        {"),
                                  "hazard mode): 136×200×376: 1 more launch gave the same bits",
                                  "a later one is wrong", "only stores its sum")
    assert "K order" not in text


# ------------------------------------------------------------------------------------------- 7 · packed reduction
def _flushing(ws, partials, order):
    striped.reduce_add_bf16x2(ws, partials, order, flush=True)


def _halves_swapped(ws, partials, order):
    striped.reduce_add_bf16x2(ws, partials, order)
    ws[...] = (ws >> 16) | (ws << 16)


def _rounded_once(ws, partials, order):
    halves = []
    for shift in (0, 16):
        total = (((ws >> shift) & 0xFFFF).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        for i in order:
            total = total + (((partials[i] >> shift) & 0xFFFF).astype(np.uint32) << 16).view(np.float32)
        u = total.astype(np.float32).view(np.uint32).astype(np.uint64)
        halves.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32))
    ws[...] = halves[0] | (halves[1] << 16)


def _index_order(ws, partials, order):
    striped.reduce_add_bf16x2(ws, partials, sorted(order))


def _truncated(ws, partials, order):
    for i in order:
        halves = []
        for shift in (0, 16):
            a = (((ws >> shift) & 0xFFFF).astype(np.uint32) << 16).view(np.float32)
            b = (((partials[i] >> shift) & 0xFFFF).astype(np.uint32) << 16).view(np.float32)
            halves.append(((a + b).astype(np.float32).view(np.uint32) >> 16).astype(np.uint32))
        ws[...] = halves[0] | (halves[1] << 16)


def _returns_new(ws, partials, order):
    out = ws.copy()
    striped.reduce_add_bf16x2(out, partials, order)
    return out


@pytest.mark.parametrize("wrong, needle", [
    (_flushing, "noftz keeps subnormals"),
    (_halves_swapped, "halves came back swapped"),
    (_rounded_once, "rounded once"),
    (_index_order, "apply the partials in `order`"),
    (_truncated, "truncated"),
    (_returns_new, "returned a new array"),
])
def test_packed_reduction_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_packed_reduction(a, striped.vector_width, seed=seed), wrong,
                            needle)


@pytest.mark.parametrize("wrong, needle", [
    (lambda e, t, b, max_bytes=16: max_bytes // b, "divides the run"),
    (lambda e, t, b, max_bytes=16: striped.vector_width(e, t, b, max_bytes) * b, "in bytes"),
    (lambda e, t, b, max_bytes=16: striped.vector_width(-(-e // t), 1, b, max_bytes), "not each thread's share"),
    (lambda e, t, b, max_bytes=16: 16 // b if e % (16 // b) == 0 else 1, "halve"),
])
def test_vector_width_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab9.check_packed_reduction(striped.reduce_add_bf16x2, a, seed=seed),
                            wrong, needle)


def test_packed_reduction_model_passes_and_reads_the_h100_words(capsys):
    lab9.check_packed_reduction(striped.reduce_add_bf16x2, striped.vector_width, seed=3)
    out = capsys.readouterr().out
    if (ROOT / "tests" / "data" / "packed_red_h100.json").exists():
        assert "the H100's words, every one" in out
    else:
        assert "not measured yet" in out


def test_packed_named_cases_show_each_mistake_whatever_the_seed():
    """The named cases alone (no random ones) part the model from every wrong answer above."""
    cases = [x for x in lab9._packed_cases(grading.SeededRng(0)) if not x[0].startswith("random")]
    for wrong in (_flushing, _halves_swapped, _rounded_once, _index_order, _truncated):
        differs = False
        for _, ws0, partials, order in cases:
            got, want = ws0.copy(), ws0.copy()
            wrong(got, partials, order)
            striped.reduce_add_bf16x2(want, partials, order)
            differs |= not np.array_equal(got, want)
        assert differs, wrong.__name__


def test_the_power_cells_figures_come_from_the_h100_run():
    import nbformat

    runs = json.loads((ROOT / "bench" / "results" / "2026-11-26-tried-5-h100.json").read_text())["runs"]
    rows = [r for run in runs for r in run["rows"] if "what" in r]
    carried = [r["speedup"] for r in rows if r["what"].startswith("carry3")]
    assert len(carried) == 5 and min(round(s, 2) for s in carried) == 0.98 and max(round(s, 2) for s in carried) == 1.0
    square = [r for r in rows if r["shape"] == [4096, 4096, 4096] and not r["what"].startswith(("4x1", "2x2"))]
    mhz = [m for r in square for m in r["mhz"]]
    watts = [w for r in square for w in r["watts"]]
    assert (min(mhz), max(mhz)) == (1470, 1590) and 640 < min(watts) < 660 and 775 < max(watts) < 785
    cell = next(c for c in nbformat.read(SOLUTION, as_version=4).cells if c.get("id") == "power-md")
    assert "**0.98–1.00×**" in cell.source and "1470–1590 MHz" in cell.source and "650–780 W" in cell.source
