"""Lab 8 (ping-pong) graders, both ways: the solution passes; the stubs and named plausible wrong answers fail, each
with a message that names the mistake (the cursor on every one of 200 seeds). The kernel's wrong versions are the
solution's with one change each: those the PTX shows are rejected statically, those only a run shows are run on the
course's PTX executor (two clusters, three tiles per consumer, hazard mode): the two warpgroups' order inverted, a
sequence barrier slot reused a lap early, a warpgroup whose arrivals never complete a slot, both warpgroups in the
epilogue together. Kernels with the right C and the wrong work (a pair computed by both consumers, the persistent
loop one cluster short, the blocks of a cluster or the two consumers swapping tiles) are rejected by the work check,
naming the tile. A simulated H100 run shows the executor's run beside the GPU's and the speed floor. The run on an
H100 is a ``gpu`` test. Also here: the tiered hints and the opening diff.

The kernel cell is the course's Lab 7 cell with the ping-pong change; it is graded on the solutions' wrappers of Labs
1 and 2. No Lab 7 notebook is beside the tests, so the course's Lab 7 kernel stands in (test_lab8_carry.py covers a
student's)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from gpu_lab5679 import lab8_run_only, names_all
from hinttools import (
    assert_in_order,
    assert_stubs_show_tier_0_only,
    assert_tiered,
    comments_outside_regions,
    graded_ids,
    lab_exercises,
    notebook_regions,
)
from labtools import rejected_by_the_run, rejects, swap

from helpers.course import carry, grading, labgen
from helpers.course.checks import lab5, lab8

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab8_pingpong.ipynb"
SOL = labgen.solution_namespace(SOLUTION)
STUB = labgen.solution_namespace(ROOT / "labs" / "lab8_pingpong.ipynb")

EPI_WAIT = "      seq.wait();\n      // ### END SOLUTION\n      // ---- the epilogue"
EPI_ARRIVE = "      seq.arrive();\n      // ### END SOLUTION\n    }"
MMA_ARRIVE = "      seq.arrive();\n      // ### END SOLUTION\n      hopper::wgmma_wait<0>();"


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    """The kernel is built on the wrappers of Labs 1 and 2: here the solutions'. No Lab 7 notebook is beside the
    tests, so the course's Lab 7 kernel stands in."""
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)


def whole(src: str) -> str:
    """The source the check compiles for the cell ``src``: the wrappers, then the course's Lab 7 kernel merged with
    the cell (the cell's code)."""
    return lab8._carried(src, None, None, quiet=True)[1]


# ------------------------------------------------------------------------------------------- the notebook
#: the lines of the course's Lab 7 cell that ping-pong changes (whitespace collapsed): the header comment, the tile's
#: width and the ring's depth, the kernel's name, empty[s]'s count (one consumer per CTA reads a stage), the
#: consumers' comment, accumulators and loop over pairs (every other pair, from the consumer's own), the A rows (the
#: whole tile), the wgmma (two m64n128 halves), the fence of the accumulators, the epilogue's four sub-tiles
LAB7_LINES_CHANGED = [
    "// Lab 7: Lab 6's kernel in clusters of two blocks that multicast B.",
    "// of two: a cluster takes 256 x 256 pairs of tiles in turn (pairs c, c + clusters, … of a grouped raster order), "
    "CTA",
    "// rank r computing the pair's 128 x 256 tile at rows 128·r; each CTA loads half of the pair's B slice for both:",
    "// warpgroup 0 produces (its thread 0 issues the copies), warpgroups 1 and 2 consume (64 rows of the tile each).",
    "constexpr int BM = 128, BN = 256, BK = 64, THREADS = 384, CONSUMERS = 2;", "constexpr int STAGES = 4;",
    "constexpr unsigned A_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2; // A 16 KiB + B 32 KiB per stage",
    "lab7_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,",
    "my_mbar_init(&empty[s], CONSUMERS * CLUSTER);",
    "} else { // ---- the consumer warpgroups: c = 0 takes rows 0-63 of the tile, c = 1 rows 64-127",
    "float d[128]; // this thread's part of the consumer's 64 x 256 fp32 tile, in Lab 3's fragment layout",
    "for (int p = cluster_id; p < pairs; p += clusters) {",
    "const unsigned char* a = smem + s * STAGE_BYTES + c * 64 * 128; // this consumer's 64 rows of A",
    "for (int kk = 0; kk < BK / 16; ++kk) // scale-d = 0 on the tile's first wgmma: D = A·B",
    "hopper::wgmma_m64n256k16_bf16(d, kslice_desc(a, kk), kslice_desc(b, kk), k > 0 || kk > 0);",
    "hopper::wgmma_fence_operands(d); // no accumulator is read before the last wgmma has written it",
    "for (int sub = 0; sub < BN / SUB; ++sub) {", "stage_subtile(buf, d + 32 * sub, t);",
    "hopper::tma_store_2d(&tmap_c, buf, n0 + sub * SUB, m0 + 64 * c);",
]


def test_kernel_is_the_course_lab7_cell_with_the_pingpong_change():
    """The notebook's kernel is the course's Lab 7 cell with this lab's change: every other line of Lab 7 is there,
    the same (so a student's edits of it are kept); merged with the course's Lab 7 kernel, it is exactly the cell's
    code; the graded source is the wrappers and that code."""
    from difflib import SequenceMatcher

    from helpers.course.checks._common import course_kernel

    course7 = carry.code_lines(course_kernel("lab7"))
    lab7_cell = labgen.solution_namespace(ROOT / "solutions" / "lab7_clusters.ipynb")["LAB7_SRC"]
    assert course7 == carry.code_lines(lab7_cell)
    cell = carry.code_lines(SOL["LAB8_SRC"])
    key = [" ".join(x.split()) for x in course7.split("\n")], [" ".join(x.split()) for x in cell.split("\n")]
    gone = [x for tag, i1, i2, _, _ in SequenceMatcher(None, *key, autojunk=False).get_opcodes() if tag != "equal"
            for x in key[0][i1:i2]]
    assert gone == LAB7_LINES_CHANGED
    m = carry.merge(course7, course7, cell)
    assert m.text == cell and not m.conflicts and not m.kept
    made, source = lab8._carried(SOL["LAB8_SRC"], "// the wrappers\n", None, quiet=True)
    assert not made.previous.yours and source == lab5.HEADER + "// the wrappers\n" + cell
    for mine in ("my_mbar_init(&order[i], 128)", "my_mbar_wait(&order[", "my_mbar_arrive(&order[", "kslice_desc(",
                 "my_tma_load_2d(", "tile_coords(p, pairs_m, pairs_n, pm, pn);"):
        assert mine in cell, mine


def test_the_notebook_kernel_computes_the_bench_kernels_bits(wrappers, executor):
    """bench/kernels/lab8_pingpong.cu (the course's Lab 8 kernel, measured on the H100 and timed beside the
    student's) and the notebook's kernel compute the same C, bit for bit, on the course's PTX executor: two clusters,
    three tiles per consumer, partial tiles."""
    from helpers.course.checks._common import run_gemm
    from helpers.course.checks.lab3 import make_operands

    cases = [make_operands(np.random.default_rng(7), 520, 392, 200)]
    mine = run_gemm(lab5.HEADER + wrappers + carry.code_lines(SOL["LAB8_SRC"]), lab8.LAUNCH, cases, what="notebook")
    bench = run_gemm(lab8.lab8_source(), lab8.LAUNCH, cases, what="bench")
    assert np.isfinite(mine[0].astype(np.float32)).all()
    assert np.array_equal(mine[0].view(np.uint16), bench[0].view(np.uint16))


def test_kernel_comments_do_not_give_the_answers_away():
    comments = comments_outside_regions(SOL["LAB8_SRC"])
    for phrase in ("128 arrivals", "participant count", "1u : 0u", "phase ^= 1", "CONSUMERS * clusters"):
        assert phrase not in comments, phrase


def test_notebook_has_a_graded_check_per_step():
    assert_in_order(graded_ids(SOLUTION.name), ["lab8-cursor", "lab8-kernel"])


def test_every_exercise_has_tiered_hints():
    assert_tiered("lab8")
    assert len(lab_exercises("lab8")["lab8-kernel"].regions) == 9


def test_the_stubs_show_tier_0_only():
    assert assert_stubs_show_tier_0_only("lab8_pingpong.ipynb", "lab8") == notebook_regions("lab8_pingpong.ipynb")


def test_opening_shows_the_diff_from_lab7_and_its_figures():
    """The diff from Lab 7's kernel: the ping-pong parts only (the producer, the multicast and the releases are Lab
    7's); Lab 7's speed where measured, else "not measured yet"; the stub's regions show as its #error lines."""
    from helpers.course.widgets import roofline

    with contextlib.redirect_stdout(io.StringIO()):
        text = str(lab8.opening(SOL["LAB8_SRC"]))
    lab7_4096 = next(m for key, _, m in roofline.ladder(4096) if key == "lab7")
    assert text.splitlines()[1].startswith("⚠ your Lab 7 kernel was not found")
    assert "--- the course's Lab 7 kernel (Lab 7)" in text and "+++ Lab 8: the kernel graded" in text
    assert (f"{lab7_4096.tflops:.0f} TFLOP/s" in text) if lab7_4096 else \
        "the course's Lab 7 kernel (cooperative) at 4096³: not measured yet" in text
    assert "-lab7_gemm(" in text and "+lab8_gemm(" in text
    assert "+    my_mbar_arrive(&order[index * CONSUMERS + (group + 1) % CONSUMERS]);" in text
    changed = "\n".join(ln for ln in text.splitlines() if ln[:1] in "+-")
    for lab7_code in ("tma_load_2d_multicast(", "mbar_arrive_cluster(", "cluster_sync()"):
        assert lab7_code not in changed, lab7_code
    with contextlib.redirect_stdout(io.StringIO()):
        stub = str(lab8.opening(STUB["LAB8_SRC"]))
    assert stub.count('+#error "not written yet:') + stub.count('+    #error "not written yet:') >= 1
    assert stub.count("#error \"not written yet:") == 9


# ------------------------------------------------------------------------------------------- 1 · the cursor
def test_cursor_solution_passes():
    for seed in (None, 1, 2):
        lab8.check_cursor(SOL["advance"], seed=seed)


def test_cursor_stub_fails():
    grading.assert_rejects(lambda f: lab8.check_cursor(f), STUB["advance"], "not written yet", "hint")


def _no_flip(i, p, d):
    return (i + 1) % d, p


def _flip_always(i, p, d):
    return (i + 1) % d, p ^ 1


def _no_wrap(i, p, d):
    return (i + 1, p ^ 1) if i + 1 == d else (i + 1, p)


def _early_wrap(i, p, d):
    return (0, p ^ 1) if i + 1 >= d - 1 else (i + 1, p)


@pytest.mark.parametrize("wrong, needle", [
    (_no_flip, "a slot reused a lap early"),
    (_flip_always, "only when the index wraps"),
    (_no_wrap, "past the ring's last slot"),
    (_early_wrap, "one slot early"),
    (lambda i, p, d: i + 1, "return the pair"),
])
def test_cursor_wrong_answers(wrong, needle):
    rejects(lab8.check_cursor, wrong, needle)


def test_cursor_written_differently_passes():
    def divmod_cursor(i, p, d):
        laps, index = divmod(i + 1, d)
        return index, (p + laps) % 2

    lab8.check_cursor(divmod_cursor, seed=3)


# ------------------------------------------------------------------------------------------- 2 · the kernel, PTX
def both_in_the_epilogue(src: str) -> str:
    """The epilogue is no section: its wait and its arrive left out."""
    return swap(swap(src, EPI_WAIT, "      // ### END SOLUTION\n      // ---- the epilogue"), EPI_ARRIVE,
                "      // ### END SOLUTION\n    }")


def wrong_static(src: str) -> dict[str, tuple[str, str]]:
    """Wrong kernels the PTX shows: name -> (source, words the failure must hold)."""
    return {
        "participant count 1": (swap(src, "my_mbar_init(&order[i], 128)", "my_mbar_init(&order[i], 1)"),
                                "count of 1 completes a phase"),
        "no wait before the mainloop": (swap(src, "      seq.wait();\n      // ### END SOLUTION\n      for (int k",
                                             "      // ### END SOLUTION\n      for (int k"),
                                        "every wgmma is issued in turn"),
        "no wait before the epilogue": (swap(src, EPI_WAIT, "      // ### END SOLUTION\n      // ---- the epilogue"),
                                        "both consumers can be in the epilogue together"),
        "the mainloop handed on after wgmma_wait<0>": (
            swap(src, MMA_ARRIVE, "      // ### END SOLUTION\n      hopper::wgmma_wait<0>();\n      seq.arrive();"),
            "before wgmma_wait<0>"),
        "only one thread of the warpgroup arrives": (
            swap(src, "    my_mbar_arrive(&order[index * CONSUMERS + (group + 1) % CONSUMERS]);",
                 "    if (threadIdx.x % 128 == 0) my_mbar_arrive(&order[index * CONSUMERS + (group + 1) % "
                 "CONSUMERS]);"), "its phase never completes"),
        "both warpgroups in the epilogue together (its wait and arrive left out)": (both_in_the_epilogue(src),
                                                                                   "in the epilogue together"),
    }


def right_static(src: str) -> dict[str, str]:
    """Right kernels in other spellings: name -> source."""
    return {
        "participant count from the block's size": swap(src, "my_mbar_init(&order[i], 128)",
                                                        "my_mbar_init(&order[i], blockDim.x / 3)"),
        "participant count as warps times lanes": swap(src, "my_mbar_init(&order[i], 128)",
                                                       "my_mbar_init(&order[i], 4 * 32)"),
    }


@pytest.mark.parametrize("name", list(right_static(SOL["LAB8_SRC"])))
def test_right_kernels_in_other_spellings_pass_statically(name, no_gpu):
    with contextlib.redirect_stdout(io.StringIO()):
        lab8.check_pingpong_kernel(right_static(SOL["LAB8_SRC"])[name], benchmark=False)


def test_kernel_stub_fails():
    msg = grading.assert_rejects(lambda s: lab8.check_pingpong_kernel(s, benchmark=False), STUB["LAB8_SRC"],
                                 "not written yet", "hint")
    assert "(stuck? lab8.hint('lab8-kernel', 1))" in msg


def test_reference_ptx_order_all_pass():
    from helpers import gpu

    k = gpu.compile(lab8.lab8_source(), lab8.KERNEL_NAME)
    checks = lab8.ptx_order(k.ptx)
    assert len(checks) == 6 and all(ok for _, ok, _ in checks), checks


@pytest.mark.parametrize("name", list(wrong_static(SOL["LAB8_SRC"])))
def test_wrong_kernels_fail_statically(name, no_gpu):
    src, needle = wrong_static(SOL["LAB8_SRC"])[name]
    rejects(lab8.check_pingpong_kernel, src, needle, seeds=None, benchmark=False)


def test_solution_passes_statically(no_gpu, capsys):
    lab8.check_pingpong_kernel(SOL["LAB8_SRC"], benchmark=False)
    assert "run skipped" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- the kernel, run
def wrong_run_only(src: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Wrong kernels whose PTX passes every static check; the run (hazard mode, the trace) rejects each. The kernels
    are the H100 script's (gpu_lab5679.lab8_run_only)."""
    table = lab8_run_only(src)
    return {name: (table[name][0], needles) for name, needles in {
        "the two warpgroups' order inverted": ("read before the barrier phase that delivers it completed",),
        "a slot reused a lap early (the phase never flips)": ("read before the barrier phase",),
        "a warpgroup that never arrives on the other's slot (it arrives on its own)": ("deadlock", "order"),
    }.items()}


#: protocol mistakes of the sequence barrier and the ring: the turn order can still come out right on the executor's
#: schedule; the record of every wait (its slot and phase) and every arrival shows the mistake (the kernels are the
#: H100 script's, gpu_lab5679.lab8_run_only)
PROTOCOL_MISTAKES = {
    "a section entered through the other section's slot": (
        r"warp 4 \(warpgroup 1\) of block \(0,0\).*: entered its section 0 with a wait on order\[2\]; the protocol "
        r"admits warpgroup 1 to section 0 through order\[0\]",),
    "the arrival after the cursor moved on": (
        r"handed its section 0 on through order\[3\]; the protocol hands it on through order\[1\]",),
    "a tile's last stage released through a stale index (it, not it - 1)": ("deadlock", r"empty\[\d\]"),
}


@pytest.mark.parametrize("name", list(PROTOCOL_MISTAKES))
def test_protocol_mistakes_are_rejected_on_the_executor(name, monkeypatch):
    src = lab8_run_only(SOL["LAB8_SRC"])[name][0]
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    text = rejects(lab8.check_pingpong_kernel, src, *PROTOCOL_MISTAKES[name], seeds=None, benchmark=False)
    assert "on the emulator" in text.split("\n", 1)[0], text
    assert names_all(text, lab8_run_only(SOL["LAB8_SRC"])[name][1]), text  # what the H100 script looks for


def test_solution_kernel_passes_on_the_executor(executor, capsys):
    lab8.check_pingpong_kernel(SOL["LAB8_SRC"], benchmark=True, seed=5)
    out = capsys.readouterr().out
    assert out.count("against fp64") == 2 and "hazard mode" in out
    assert "consumer 0 first, then the two in turn" in out and "timing skipped" in out
    assert out.count("the work, as the emulator recorded it: each of the") == 2, out
    assert out.count("wgmmas issued by the consumer whose tile it is") == 2, out
    assert out.count("every stage released once per fill, by all its consumers") == 2, out
    assert all("hazard mode" in line for line in out.splitlines() if line.startswith("   ✓ ran on")), out


@pytest.mark.parametrize("name", list(wrong_run_only(SOL["LAB8_SRC"])))
def test_run_only_wrong_kernels(name, monkeypatch):
    src, needles = wrong_run_only(SOL["LAB8_SRC"])[name]
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")
    with contextlib.redirect_stdout(io.StringIO()):
        lab8.check_pingpong_kernel(src, benchmark=False, seed=0)  # the PTX cannot tell
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    text = rejected_by_the_run(lab8.check_pingpong_kernel, src, *needles, benchmark=False)
    assert names_all(text, lab8_run_only(SOL["LAB8_SRC"])[name][1]), text  # what the H100 script looks for


def test_the_trace_shows_both_warpgroups_in_the_epilogue_together(executor):
    """Beside the PTX's finding, the run's own trace shows the mistake: the results are right, the order is not."""
    m, n, k = 520, 392, 136
    rng = grading.SeededRng(0)
    cases = [lab8.C.make_operands(rng, m, n, k)]
    out = lab8._pingpong_trial(whole(both_in_the_epilogue(SOL["LAB8_SRC"])), cases)
    problems = lab8.order_problems(out["sections"][0], m, n, lab8.EMULATED_CLUSTERS)
    assert problems and "together" in problems[0], problems
    ok = lab8._pingpong_trial(whole(SOL["LAB8_SRC"]), cases)
    assert not lab8.order_problems(ok["sections"][0], m, n, lab8.EMULATED_CLUSTERS)


# ------------------------------------------------------------------------------------------- the work
def wrong_work(src: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Wrong kernels whose C comes out right on the executor (hazard mode, the trace in order): only the work (or the
    ring's releases) shows the mistake, naming the tile (the block and the stage). The kernels are the H100 script's
    (gpu_lab5679.lab8_run_only)."""
    table = lab8_run_only(src)
    return {name: (table[name][0], needles) for name, needles in {
        "both consumers compute each pair (the block takes every pair twice)": (
            r"the 64×64 tile of C at rows 0–63, columns 0–63 \(pair 0, which the schedule gives cluster 0 as its "
            r"tile 0: consumer 0, warpgroup 1\) was computed and stored 2 times, by block \(0,0\)", "C is right"),
        "the persistent loop steps by one cluster too few": (
            r"was computed and stored 2 times, by block \(0,0\) \(cluster 0, rank 0\), block \(2,0\) \(cluster 1, "
            r"rank 0\)", r"c \+ clusters"),
        "the two blocks of a cluster swap their tiles": (
            r"rows 0–63, columns 0–63 \(pair 0.*was stored by block \(1,0\) \(cluster 0, rank 1\); the schedule "
            r"gives it to block \(0,0\) \(cluster 0, rank 0\)",),
        "the two consumers swap their tiles (consumer 1 takes tile 0 and goes first)": (
            r"\(pair 0, which the schedule gives cluster 0 as its tile 0: consumer 0, warpgroup 1\) was computed by "
            r"warpgroup 2 \(consumer 1\) of block \(0,0\) \(cluster 0, rank 0\); the schedule gives that tile to "
            r"consumer 0",),
        "a tile's last stage released only when another pair follows (the block's last tile holds it)": (
            r"block \(0,0\) \(cluster 0, rank 0\): empty\[\d\] completed \d+ phases \(0 of 2 arrivals of the next\) "
            r"for \d+ fills of its stage \(full\[\d\]\): each fill is released once",),
    }.items()}


@pytest.mark.parametrize("name", list(wrong_work(SOL["LAB8_SRC"])))
def test_right_c_with_the_wrong_work_is_rejected_on_the_executor(name, monkeypatch):
    """C comes out right (the first ✓ of the run says so); the work does not: a tile computed twice, by the wrong
    block or by the wrong consumer, or a stage left held."""
    src, needles = wrong_work(SOL["LAB8_SRC"])[name]
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        with pytest.raises(grading.CheckFailed) as exc:
            lab8.check_pingpong_kernel(src, benchmark=False, seed=0)
    text = str(exc.value)
    assert "ran on the emulator (no sm_90 GPU; hazard mode): 520×392×400: " in text.split("\n", 1)[0], text
    for needle in needles:
        assert re.search(needle, text, re.S), f"{needle!r} not in:\n{text}"
    assert names_all(text, lab8_run_only(SOL["LAB8_SRC"])[name][1]), text  # what the H100 script looks for
    assert "every element against fp64: all 203840 elements match" in out.getvalue()


# ------------------------------------------------------------------------------------------- on an H100 (simulated)
def _pretend_h100(monkeypatch) -> list:
    """The GPU's runs replaced (C computed in numpy, small shapes, fixed timings); every run inside
    ``_common.emulated()`` is the executor's, in hazard mode."""
    import numpy as np
    from ml_dtypes import bfloat16

    from helpers import gpu
    from helpers.course.checks import _common as C

    calls: list = []
    real = C.run

    def forced() -> bool:
        return os.environ.get("HELPERS_EXECUTOR") == "force"

    def run(target, *args, **kw):
        if forced():
            return real(target, *args, **kw)
        calls.append(target.__name__)
        if target is lab8._speed_child:
            shapes = args[1]
            assert args[3] == lab8.lab8_source(), "the course's Lab 8 kernel is timed in the same run"
            return [{"shape": s, "lab8": 500.0, "lab7": 600.0, "cublas8": 700.0, "cublas6": 700.0, "ratio8": 0.71,
                     "ratio6": 0.86, "course": 550.0 if s[2] > 1024 else 700.0} for s in shapes]
        outs = [(a.astype(np.float64) @ b.astype(np.float64).T).astype(bfloat16) for a, b in args[1]]
        return {"outs": outs, "sections": [None] * len(outs), "work": [None] * len(outs)}

    monkeypatch.setenv("HELPERS_EXECUTOR", "auto")
    monkeypatch.setattr(C, "run", run)
    monkeypatch.setattr(C, "on_h100", lambda: not forced())
    monkeypatch.setattr(C, "runnable", lambda kernel, checked: True)
    monkeypatch.setattr(gpu, "hopper_available", lambda: True)
    monkeypatch.setattr(gpu, "device_info", lambda: type("I", (), {"name": "NVIDIA H100 80GB HBM3"})())
    monkeypatch.setattr(lab8, "_gpu_cases", lambda rng: [(392, 264, 136), (264, 520, 72)])
    return calls


def test_on_an_h100_the_kernel_also_runs_on_the_executor_and_is_timed_against_the_course(monkeypatch, capsys):
    """A student with a GPU gets the executor's verdict too (the first emulator shape, hazard mode, the work and the
    trace), then the timing beside Lab 7 and the course's Lab 8 kernel, graded against the speed floor: 500 against
    550 TFLOP/s passes (0.91×), 500 against 700 (0.71×) fails and says how far off it is."""
    calls = _pretend_h100(monkeypatch)
    msg = ""
    try:
        lab8.check_pingpong_kernel(SOL["LAB8_SRC"], benchmark=True, seed=5)
    except grading.CheckFailed as exc:
        msg = str(exc)
    out = capsys.readouterr().out
    assert calls == ["_pingpong_trial", "_speed_child"], calls
    from helpers import gpu

    here = gpu.where_name()  # how the check names the GPU it pretends to have
    assert out.count(f"✓ ran on {here}: ") == 2, out
    beside = f"✓ ran on the emulator (beside {here}, the same kernel on a small shape; hazard mode): 520×392×400: "
    for what in ("12 pairs of 128×128 tiles", "the work, as the emulator recorded it: each of the 96 tiles",
                 "each of the 1344 wgmmas issued by the consumer whose tile it is", "the trace shows consumer 0 first"):
        assert beside + what in out, out
    assert "768×336×96" not in out  # only the first emulator shape beside the GPU
    assert "4096×4096×4096: Lab 8 500 TFLOP/s (0.71× cuBLAS), Lab 7 600" in out, out
    assert ("✓ 4096×4096×4096: your kernel 500 TFLOP/s, the course's 550 TFLOP/s in the same run (0.91×; the floor "
            "is 0.80×)") in out, out
    assert "8192×8192×512: your kernel 500 TFLOP/s, the course's 700 TFLOP/s in the same run (0.71×" in msg, msg
    assert "your kernel runs at 0.71× the course's (500 against 700 TFLOP/s, 29% slower)" in msg, msg


def test_on_an_h100_the_wrong_work_is_rejected_beside_the_gpu(monkeypatch):
    """Two blocks swapping their tiles give the right C on the GPU; the same kernel on the executor beside it
    rejects the work, before any timing."""
    calls = _pretend_h100(monkeypatch)
    src, needles = wrong_work(SOL["LAB8_SRC"])["the two blocks of a cluster swap their tiles"]
    with contextlib.redirect_stdout(io.StringIO()):
        with pytest.raises(grading.CheckFailed) as exc:
            lab8.check_pingpong_kernel(src, benchmark=True, seed=5)
    text = str(exc.value)
    assert calls == ["_pingpong_trial"], calls
    assert "ran on the emulator (beside the H100, the same kernel on a small shape; hazard mode): 520×392×400: " in text
    assert re.search(needles[0], text, re.S), text


def test_the_speed_floor_was_measured_for_lab8():
    """The floor holds for Lab 8 too: the course's Lab 8 kernel timed against itself on an H100 the grader's way
    (tools/h100/speed_floor.py, lab8) never falls within 0.05 of the floor, at every shape the grader times."""
    from helpers.course.checks import _common as C

    fixture = ROOT / "tests" / "data" / "speed_floor_h100.json"
    labs = json.loads(fixture.read_text())["labs"] if fixture.exists() else {}
    if "lab8" not in labs:
        pytest.skip("Lab 8 is not in tests/data/speed_floor_h100.json yet: on an H100, `SPEED_FLOOR_LABS=lab8 "
                    "SPEED_FLOOR_ROUNDS=9 bash tools/h100/run.sh speed_floor` writes it to $OUT; copy it to "
                    "tests/data/")
    entry = labs["lab8"]
    assert "H100" in entry["gpu"] and entry["driver"] and entry["date"] and entry["rounds"] >= 9, entry
    assert set(entry["shapes"]) == {"×".join(map(str, s)) for s in lab8.SQUARE + lab8.SHORT_K}
    low = min(v["min"] for v in entry["shapes"].values())
    assert C.SPEED_FLOOR <= low - 0.05, f"Lab 8's course kernel against itself fell to {low:.3f}"


@pytest.mark.gpu
def test_solution_kernel_on_the_h100(capsys):
    lab8.check_pingpong_kernel(SOL["LAB8_SRC"], benchmark=True)
    print(capsys.readouterr().out)


def test_the_lab_says_what_the_h100_measured():
    """The lab's closing words follow the newest committed ping-pong run: the cooperative kernel won every shape."""
    import json

    runs = sorted((ROOT / "bench" / "results").glob("*pingpong*.json"))
    if not runs:
        pytest.skip("no ping-pong run committed")
    shapes = json.loads(runs[-1].read_text())["shapes"]
    text = "".join(c["source"] if isinstance(c["source"], str) else "".join(c["source"])
                   for c in json.loads((ROOT / "solutions" / "lab8_pingpong.ipynb").read_text())["cells"])
    # runs recorded before the labs were renumbered call the cooperative kernel (today's Lab 7) "lab6"
    ratios = [r.get("lab8_vs_lab7", r.get("lab8_vs_lab6")) for r in shapes]
    assert all(x < 1 for x in ratios) == ("the cooperative kernel won at every shape measured" in text)
    for r, x in zip(shapes, ratios, strict=True):
        assert f"{x:.2f}×" in text, f"the lab quotes Lab 8 / Lab 7 at {r['shape']}"
