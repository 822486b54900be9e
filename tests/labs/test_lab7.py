"""Lab 7 (Stream-K) graders, both ways: the solution passes; the stub and plausible wrong answers fail, each named
wrong answer on every one of 200 seeds, with a message that names the mistake. The kernel's static checks are
tested on wrong kernels made from the solution's; the run on an H100 is a ``gpu`` test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from helpers import grading, labgen
from helpers import streamk as sk
from helpers.checks import lab7

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab7_streamk.ipynb"
SOL = labgen.solution_namespace(SOLUTION)
STUB = labgen.solution_namespace(ROOT / "labs" / "lab7_streamk.ipynb")
SEEDS = range(200)

GRADERS = [
    (lambda ns, **kw: lab7.check_iteration_space(ns["iteration_space"], **kw)),
    (lambda ns, **kw: lab7.check_stream_k_pieces(ns["stream_k_pieces"], **kw)),
    (lambda ns, **kw: lab7.check_work_list(ns["work_list"], **kw)),
    (lambda ns, **kw: lab7.check_striped(ns["striped_store"], ns["striped_load_add"], **kw)),
    (lambda ns, **kw: lab7.check_fixup_plan(ns["fixup_plan"], **kw)),
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
    return lambda a, seed: lab7.check_iteration_space(fn if a is None else a, seed=seed)


@pytest.mark.parametrize("wrong, needle", [
    (lambda M, N, K: ((M // 256) * (N // 256), K // 64), "round up"),
    (lambda M, N, K: (math.ceil(M / 128) * math.ceil(N / 256), math.ceil(K / 64)), "PAIR"),
    (lambda M, N, K: (math.ceil(M / 256) * math.ceil(N / 256), math.ceil(K / 128)), "64 wide"),
    (lambda M, N, K: (math.ceil(M / 256), math.ceil(N / 256)), "return (tiles, K steps)"),
])
def test_iteration_space_wrong_answers(wrong, needle):
    _rejected_on_every_seed(lambda a, seed: lab7.check_iteration_space(a, seed=seed), wrong, needle)


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
    _rejected_on_every_seed(lambda a, seed: lab7.check_stream_k_pieces(a, seed=seed), wrong, needle)


def test_floor_ranges_hint_says_round_up():
    msg = grading.assert_rejects(lab7.check_stream_k_pieces, floor_ranges)
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
    _rejected_on_every_seed(lambda a, seed: lab7.check_work_list(a, seed=seed), wrong, needle)


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
    _rejected_on_every_seed(lambda a, seed: lab7.check_striped(*a, seed=seed), (store, load_add), needle)


def test_striped_reference_answers_pass():
    lab7.check_striped(_ok_store, _ok_load_add, seed=5)


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
    _rejected_on_every_seed(lambda a, seed: lab7.check_fixup_plan(a, seed=seed), plan, needle)


def test_fixup_plan_that_returns_garbage():
    grading.assert_rejects(lab7.check_fixup_plan, lambda *a: "epilogue", "list of ops")
    grading.assert_rejects(lab7.check_fixup_plan, lambda *a: ["epilogue"], "streamk functions")


def test_fixup_both_warpgroups_waiting_is_accepted():
    """Both warpgroups acquiring the flag is wasteful but correct: the grader accepts it."""
    def both_wait(ka, kb, n, order, leader):
        ops = sk.ordered_plan(ka, kb, n, order, leader)
        return [sk.wait_flag(order)] + ops if order > 0 and not leader else ops
    lab7.check_fixup_plan(both_wait, seed=3)


def test_fixup_both_warpgroups_releasing_is_rejected():
    """Two writers of one flag: the final split may reset it before the second release lands."""
    def both_release(ka, kb, n, order, leader):
        ops = sk.ordered_plan(ka, kb, n, order, leader)
        return ops + [sk.set_flag(order + 1)] if kb != n and not leader and (ka, kb) != (0, n) else ops
    grading.assert_rejects(lambda p: lab7.check_fixup_plan(p, seed=3), both_release, "❌")


# ------------------------------------------------------------------------------------------- 6 · the kernel
def _strip_markers(src: str) -> str:
    keep = [x for x in src.split("\n") if "### BEGIN SOLUTION" not in x and "### END SOLUTION" not in x
            and not x.strip().startswith("// HINT:")]
    return "\n".join(keep)


def test_notebook_kernel_is_the_measured_reference():
    assert _strip_markers(SOL["LAB7_SRC"]).lstrip("\n") == lab7.lab7_reference_source()


def test_regions_match_the_notebook():
    """lab7.REGIONS (the opening diff's placeholders) are exactly the notebook's solution regions."""
    lines = SOL["LAB7_SRC"].split("\n")
    regions, inside = [], None
    for line in lines:
        if "### BEGIN SOLUTION" in line:
            inside = []
        elif "### END SOLUTION" in line:
            regions.append((inside[0], inside[-1]))
            inside = None
        elif inside is not None and not line.strip().startswith("// HINT:"):
            inside.append(line)
    assert regions == [(first, last) for first, last, _ in lab7.REGIONS]


def test_skeleton_shows_no_solution_line():
    skel = lab7.skeleton()
    assert skel.count("// ✎ you write:") == len(lab7.REGIONS)
    for needle in ("flag_store_release(flag", "flag_wait_geq(flag", "*flag = 0", "W.per = ", "p = p_last -"):
        assert needle not in skel
    text = repr(lab7.opening_diff())
    assert text.startswith("Lab 6 -> Lab 7") and "223 TFLOP/s at 1024×1024×16384" in text


def test_student_kernel_stub_fails():
    grading.assert_rejects(lambda s: lab7.check_streamk_kernel(s, benchmark=False), STUB["LAB7_SRC"],
                           "not written yet", "hint")


def test_solution_kernel_passes_static_checks(capsys):
    lab7.check_streamk_kernel(SOL["LAB7_SRC"], benchmark=False)
    out = capsys.readouterr().out
    assert "bar.sync lies between the workspace stores and the release" in out


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


@pytest.mark.parametrize("name", ["release before the barrier", "relaxed (volatile) flag store", "relaxed flag wait",
                                  "no barrier after the wait", "no flag reset"])
def test_wrong_kernels_fail_statically(name):
    src, needle = wrong_kernels(SOL["LAB7_SRC"])[name]
    grading.assert_rejects(lambda s: lab7.check_streamk_kernel(s, benchmark=False), src, needle)


def test_reference_ptx_protocol_all_pass():
    from helpers import gpu

    k = gpu.compile(lab7.lab7_reference_source(), lab7.KERNEL_NAME)
    assert all(ok for _, ok, _ in lab7.ptx_protocol(k.ptx))
    assert len(lab7.ptx_protocol(k.ptx)) == 7


@pytest.mark.gpu
def test_solution_kernel_on_the_gpu(capsys):
    lab7.check_streamk_kernel(SOL["LAB7_SRC"], benchmark=True)
    print(capsys.readouterr().out)


# ------------------------------------------------------------------------------------------- the notebook
def test_notebook_has_a_graded_check_per_step():
    nb = json.loads(SOLUTION.read_text())
    graded = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]
              if c["metadata"].get("nbgrader", {}).get("grade")]
    assert graded == ["lab7-space", "lab7-ranges", "lab7-hybrid", "lab7-striped", "lab7-fixup", "lab7-kernel"]


# ------------------------------------------------------------------------------------------- several rules at once
def test_answers_breaking_several_rules_at_once():
    def floor_and_forward(cta, ctas, tiles, k_steps):
        return list(reversed(floor_ranges(cta, ctas, tiles, k_steps)))

    # the first case (one CTA) already shows the forward walk; the floor shows from the first uneven case on
    _rejected_on_every_seed(lambda a, seed: lab7.check_stream_k_pieces(a, seed=seed), floor_and_forward, "backwards")
    relaxed_no_reset = _plan(release="relaxed", reset=False)
    _rejected_on_every_seed(lambda a, seed: lab7.check_fixup_plan(a, seed=seed), relaxed_no_reset, "❌")
    _rejected_on_every_seed(lambda a, seed: lab7.check_striped(*a, seed=seed),
                            (last_stripe_left_out, blocked_load_add), "never written")
