"""Lab 5 (the TMA-store epilogue) graders, both ways: the solution passes; the stubs and the named plausible wrong
answers fail, each on every one of 200 seeds, with a hint that names the mistake. The solution is read from
solutions/lab5_epilogue.ipynb itself; the kernel's wrong versions are the solution kernel with one change each: those
the PTX shows are rejected statically, those only a run shows are run on the course's PTX executor. Also here: the
tiered hints (the stubs show tier 0 only; the kernel's comments do not describe the solution).

Tests marked ``gpu`` run the kernels on an H100 (``pytest -m gpu tests/labs/test_lab5.py``).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from gpu_lab5679 import caught_where, lab5_run_only
from hinttools import (
    assert_stubs_show_tier_0_only,
    assert_tiered,
    code_of,
    comments_outside_regions,
    lab_exercises,
    notebook_regions,
)

from helpers.course import grading, labgen
from helpers.course.checks import lab5
from helpers.course.checks._common import saved_variable
from helpers.hopper import epilogue

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "lab5_epilogue.ipynb"
SEEDS = 200


@pytest.fixture(scope="module")
def sol() -> dict:
    return labgen.solution_namespace(SOLUTION)


@pytest.fixture(scope="module")
def stub() -> dict:
    return labgen.solution_namespace(ROOT / "labs" / "lab5_epilogue.ipynb")


@pytest.fixture(autouse=True)
def course_wrappers(monkeypatch, wrappers):
    """The kernel is built on the wrappers of Labs 1 and 2: here the solutions' (a student's are carried from their
    notebooks beside this one; test_lab5_carry.py covers that). No Lab 4 notebook is beside the tests, so the course's
    Lab 4 kernel stands in."""
    monkeypatch.setattr(lab5, "carry_wrappers", lambda checked=True: wrappers)


def _static_only(monkeypatch) -> None:
    """Grade from the compile report and the PTX only: no GPU, and no PTX executor (where helpers.gpu has one)."""
    monkeypatch.setenv("HELPERS_NO_GPU", "1")
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")


def rejected_on_every_seed(monkeypatch, grader, answer, *needles, seeds: int = SEEDS) -> None:
    """``grader(answer)`` fails on each of ``seeds`` seeds, and every failure names each needle."""
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grading.assert_rejects(grader, answer, *needles)


def passes_on_seeds(monkeypatch, grader, *answer, seeds: int = 20) -> None:
    for seed in range(seeds):
        monkeypatch.setattr(grading, "fresh_rng", lambda seed=seed: grading.SeededRng(seed))
        grader(*answer)


# ------------------------------------------------------------------------------------------- the notebook
def test_kernel_is_the_course_lab4_kernel_with_the_epilogue(sol):
    """The notebook's kernel is the course's Lab 4 kernel (step 8's solution) with this lab's change: merged with the
    course's Lab 4 kernel (a student who wrote the course's Lab 4), it is exactly the cell's code, and the graded
    source is the wrappers and that code."""
    from helpers.course.carry import code_lines, merge
    from helpers.course.checks import lab4
    from helpers.course.checks._common import course_kernel

    course4 = code_lines(course_kernel("lab4"))
    l4 = labgen.solution_namespace(ROOT / "solutions" / "lab4_pipeline.ipynb")
    assert course4 == code_lines(lab4.step8_kernel(l4["PC_KERNEL"], l4["LAB4_KERNEL"]))
    cell = code_lines(sol["LAB5_SRC"])
    m = merge(course4, course4, cell)
    assert m.text == cell and not m.conflicts and not m.kept
    made, source = lab5._carried(sol["LAB5_SRC"], "// the wrappers\n", None, quiet=True)
    assert not made.previous.yours and source == lab5.HEADER + "// the wrappers\n" + cell
    # the student's wrappers where Lab 4 used them, not the header's copies of them
    for mine in ("my_mbar_init(", "my_mbar_wait(", "my_mbar_expect_tx(", "my_mbar_arrive(", "my_tma_load_2d("):
        assert mine in cell, mine
    for theirs in ("hopper::mbar_init(", "HOPPER_WAIT(", "hopper::mbar_arrive_expect_tx(", "hopper::mbar_arrive(",
                   "hopper::tma_load_2d("):
        assert theirs not in cell, theirs


def _epilogue(src: str) -> list[str]:
    """The epilogue's code (the sub-tile writer and the store loop), whitespace collapsed, tid read as t."""
    lines = [re.sub(r"\btid\b", "t", " ".join(ln.split("//")[0].split())) for ln in code_of(src).split("\n")]
    lines = [ln for ln in lines if ln]
    first = next(i for i, ln in enumerate(lines) if ln.startswith("__device__ __forceinline__ void stage_subtile"))
    sub = next(i for i, ln in enumerate(lines) if ln.startswith("unsigned char* mine ="))
    last = next(i for i, ln in enumerate(lines) if "tma_store_wait<0>" in ln)
    return lines[first:first + 10] + lines[sub:last + 1]


def test_the_epilogue_is_the_measured_kernels(sol):
    """bench/kernels/lab5_epilogue.cu (the course's Lab 5 kernel, measured on the H100) has the same epilogue code as
    the notebook's kernel; their mainloops are Lab 4's, in the header's helpers there and the student's wrappers
    here."""
    bench = (ROOT / "bench" / "kernels" / "lab5_epilogue.cu").read_text()
    assert _epilogue(sol["LAB5_SRC"]) == _epilogue(bench)


def test_stub_kernel_names_its_regions(stub):
    assert stub["LAB5_SRC"].count('#error "not written yet:') == 2
    assert "__floats2bfloat162_rn(d[j]" not in stub["LAB5_SRC"]
    assert "tma_store_wait_read<1>" not in stub["LAB5_SRC"]


# ------------------------------------------------------------------------------------------- tiered hints
def test_every_exercise_has_tiered_hints():
    assert_tiered("lab5")
    assert len(lab_exercises("lab5")["lab5-kernel"].regions) == 2


def test_the_stubs_show_tier_0_only():
    assert assert_stubs_show_tier_0_only("lab5_epilogue.ipynb", "lab5") == notebook_regions("lab5_epilogue.ipynb")


def test_kernel_comments_do_not_describe_the_regions(sol):
    """What the regions do (the chunk formula, the fence / barrier / store / wait order and depth) is in the hints,
    not in the comments a student reads."""
    comments = comments_outside_regions(sol["LAB5_SRC"])
    for phrase in ("(col / 8) ^ (r % 8)", "wait_group.read 1", "fence.proxy.async", "named barrier", "commits"):
        assert phrase not in comments, phrase


def test_kernel_stub_says_what_to_do_and_how_to_ask_for_more(stub):
    msg = grading.assert_rejects(lambda s: lab5.check_epilogue_kernel(s, benchmark=False), stub["LAB5_SRC"],
                                 "not written yet")
    ex = lab_exercises("lab5")["lab5-kernel"]
    assert ex.regions[0].hints[0] in msg and "(stuck? lab5.hint('lab5-kernel', 1))" in msg


def test_hint_and_answer_entry_points(capsys):
    lab5.hint("lab5-kernel")
    lab5.hint("lab5-kernel", 1, part=2)
    lab5.hint("lab5-round", 2)
    lab5.answer("lab5-kernel")
    lab5.answer("lab5-kernel", sure=True)
    out = capsys.readouterr().out
    kernel = lab_exercises("lab5")["lab5-kernel"]
    assert "What to do · lab5-kernel" in out and "part 2 of 2" in out and kernel.regions[1].hints[1] in out
    assert "That was the last hint" in out and "sure=True" in out
    assert "hopper::tma_store_wait_read<1>();" in out.split("The answer · lab5-kernel")[1]


@pytest.mark.parametrize("grader, name", [(lab5.check_to_bf16, "to_bf16"), (lab5.check_smem_offset, "smem_offset"),
                                          (lab5.check_stage_subtile, "stage_subtile"),
                                          (lab5.check_epilogue_ops, "epilogue_ops")])
def test_stubs_fail(stub, grader, name):
    grading.assert_rejects(grader, stub[name], "not written yet", "hint")


def test_kernel_stub_fails(stub):
    grading.assert_rejects(lambda src: lab5.check_epilogue_kernel(src, benchmark=False), stub["LAB5_SRC"],
                           "not written yet")


def test_opening_shows_the_diff_and_lab4s_figures(sol):
    text = str(lab5.opening(sol["LAB5_SRC"]))
    assert "+++ Lab 5: the kernel graded (the course's Lab 4 kernel" in text
    assert "--- the course's Lab 4 kernel (Lab 4)" in text and "stands in" in text
    from helpers.course.widgets import roofline

    lab4_4096 = next(m for key, _, m in roofline.ladder(4096) if key == "lab4b")
    assert f"{lab4_4096.tflops:.0f} TFLOP/s" in text and lab4_4096.source in text
    assert "+#include <cuda_bf16.h>" in text


# ------------------------------------------------------------------------------------------- 1 · rounding
def test_rounding_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab5.check_to_bf16, sol["to_bf16"])


def test_rounding_reference_matches_ml_dtypes():
    from ml_dtypes import bfloat16

    x, _ = lab5.rounding_cases(np.random.default_rng(1))
    assert np.array_equal(epilogue.to_bf16_bits(x), x.astype(bfloat16).view(np.uint16))


def test_ml_dtypes_answer_passes():
    from ml_dtypes import bfloat16

    lab5.check_to_bf16(lambda x: x.astype(bfloat16).view(np.uint16))


def test_truncation_fails(monkeypatch):
    rejected_on_every_seed(monkeypatch, lab5.check_to_bf16, epilogue.truncate_bf16_bits, "toward zero")


def test_ties_away_fails(monkeypatch):
    def ties_away(x):
        return ((x.view(np.uint32).astype(np.uint64) + 0x8000) >> 16).astype(np.uint16)

    rejected_on_every_seed(monkeypatch, lab5.check_to_bf16, ties_away, "halfway", "even")


def test_ties_down_fails(monkeypatch):
    def ties_down(x):
        return ((x.view(np.uint32).astype(np.uint64) + 0x7FFF) >> 16).astype(np.uint16)

    rejected_on_every_seed(monkeypatch, lab5.check_to_bf16, ties_down, "halfway cases went down")


def test_rounded_values_instead_of_bits_fail():
    from ml_dtypes import bfloat16

    grading.assert_rejects(lab5.check_to_bf16, lambda x: x.astype(bfloat16).astype(np.float32), "bit patterns")


def test_float16_fails():
    with np.errstate(over="ignore"):
        grading.assert_rejects(lab5.check_to_bf16, lambda x: x.astype(np.float16).view(np.uint16), "hint")


def test_uint32_arithmetic_passes():
    """Adding in uint32 cannot wrap for a finite input (only NaN patterns come near 2**32): a right answer."""
    def uint32_sum(x):
        u = x.view(np.uint32)
        return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    lab5.check_to_bf16(uint32_sum)


# ------------------------------------------------------------------------------------------- 2 · layout
def test_layout_solution_passes(sol):
    lab5.check_smem_offset(sol["smem_offset"])


# check_smem_offset draws no random input: it asks all 4096 (row, col), so one run covers every seed
@pytest.mark.parametrize("wrong, needle", [
    (lambda r, c: r * 128 + c * 2, "plain row-major"),
    (lambda r, c: r * 128 + (((c // 8) ^ (r // 8) % 8) * 16) + (c % 8) * 2, "row modulo 8"),
    (lambda r, c: r * 128 + ((c ^ (r % 8)) * 2), "whole 16-byte chunks"),
    (lambda r, c: r * 64 + (((c // 8) ^ (r % 8)) * 8) + c % 8, "element index"),
    (lambda r, c: c * 128 + (((r // 8) ^ (c % 8)) * 16) + (r % 8) * 2, "swapped"),
    (lambda r, c: r * 128 + ((c // 8) ^ (r % 8)) * 16, "row·128 bytes"),
])
def test_layout_wrong_answers_fail(wrong, needle):
    grading.assert_rejects(lab5.check_smem_offset, wrong, needle)


def test_layout_float_fails():
    grading.assert_rejects(lab5.check_smem_offset, lambda r, c: float(epilogue.subtile_offset(r, c)), "an int")


# ------------------------------------------------------------------------------------------- 3 · the image
def test_image_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab5.check_stage_subtile, sol["stage_subtile"], seeds=3)


def test_image_vectorised_reference_passes(monkeypatch):
    passes_on_seeds(monkeypatch, lab5.check_stage_subtile, epilogue.stage_subtile)


@pytest.mark.parametrize("wrong, needle", [
    (lambda f: epilogue.stage_subtile(f, swizzle=False), "plain row-major"),
    (lambda f: epilogue.stage_subtile(f, rounding="truncate"), "truncated"),
    (lambda f: epilogue.stage_subtile(f, swizzle=False, rounding="truncate"), "truncated"),
    (lambda f: epilogue.stage_subtile(f).reshape(-1, 2)[:, ::-1].reshape(-1), "little-endian"),
    (lambda f: epilogue.stage_subtile(np.ascontiguousarray(
        np.asarray(f)[:, [j ^ 1 for j in range(32)]])), "hint"),  # registers j and j+1 swapped
    (lambda f: epilogue.stage_subtile(f).astype(np.uint16), "np.uint8"),
])
def test_image_wrong_answers_fail(monkeypatch, wrong, needle):
    rejected_on_every_seed(monkeypatch, lab5.check_stage_subtile, wrong, needle)


def test_image_transposed_fails(monkeypatch):
    def transposed(f):
        bits = epilogue.subtile_from_image(epilogue.stage_subtile(f)).T
        img = np.zeros(8192, np.uint8)
        r, c = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
        off = epilogue.subtile_offset(r, c)
        img[off], img[off + 1] = bits & 0xFF, bits >> 8
        return img

    rejected_on_every_seed(monkeypatch, lab5.check_stage_subtile, transposed, "transposed")


# ------------------------------------------------------------------------------------------- 4 · the order
def _without(op):
    return lambda s, b: [o for o in epilogue.LAB5_OPS(s, b) if o != op]


def _depth(n):
    return lambda s, b: [("wait_read", n(b)) if o[0] == "wait_read" else o for o in epilogue.LAB5_OPS(s, b)]


def _fence_after_bar(s, b):
    ops = epilogue.LAB5_OPS(s, b)
    i = ops.index(("fence",))
    ops.pop(i)
    ops.insert(i + 1, ("fence",))
    return ops


def _no_bar_after_wait(s, b):
    ops = epilogue.LAB5_OPS(s, b)
    return ops[:1] + ops[2:] if s >= b else ops


def _no_bar_before_store(s, b):
    ops = epilogue.LAB5_OPS(s, b)
    i = len(ops) - 1 - ops[::-1].index(("bar",))
    return ops[:i] + ops[i + 1:]


def _store_other_buffer(s, b):
    return [("store", (s + 1) % b) if o[0] == "store" else o for o in epilogue.LAB5_OPS(s, b)]


def test_order_solution_passes(sol, monkeypatch):
    passes_on_seeds(monkeypatch, lab5.check_epilogue_ops, sol["epilogue_ops"])


def test_order_lab6_form_passes():
    """Waiting before every sub-tile (Lab 6's form) is correct here too: the first waits find nothing pending."""
    lab5.check_epilogue_ops(epilogue.LAB6_OPS)


@pytest.mark.parametrize("wrong, needles", [
    (_without(("fence",)), ("unfenced-store", "fence.proxy.async")),
    (_fence_after_bar, ("fence-after-barrier",)),
    (lambda s, b: [o for o in epilogue.LAB5_OPS(s, b) if o[0] != "wait_read"], ("overwrite-in-flight",
                                                                                 "wait_group.read")),
    (_depth(lambda b: b), ("overwrite-in-flight",)),
    (_depth(lambda b: 0), ("waits for more than it must",)),
    (_depth(lambda b: 1), ("hint",)),  # hard-coded depth 1: right for 2 buffers only
    (_no_bar_after_wait, ("overwrite-in-flight", "barrier")),
    (_no_bar_before_store, ("unsynced-store",)),
    (_without(("commit",)), ("overwrite-in-flight", "commit")),
    (_store_other_buffer, ("store-unwritten",)),
    (lambda s, b: epilogue.LAB5_OPS(s, b) + epilogue.LAB5_OPS(s, b)[-2:], ("stored exactly once",)),
    (lambda s, b: ["write", "fence"], ("bad-op",)),
])
def test_order_wrong_answers_fail(monkeypatch, wrong, needles):
    rejected_on_every_seed(monkeypatch, lab5.check_epilogue_ops, wrong, *needles)


# ------------------------------------------------------------------------------------------- 5 · the kernel
def _swap(src: str, old: str, new: str) -> str:
    assert src.count(old) >= 1, old
    return src.replace(old, new)


def wrong_kernels(src: str) -> dict[str, tuple[str, str]]:
    """Plausible wrong versions of the Lab 5 kernel: name -> (source, words the failure must contain)."""
    return {
        "no fence": (_swap(src, "      hopper::fence_proxy_async();        // these", "      // these"),
                     "unfenced-store"),
        "fence after the barrier": (_swap(
            src, "      hopper::fence_proxy_async();        // these generic stores, before the TMA (async proxy) "
                 "reads them\n      hopper::named_bar_sync(1 + c, 128);  // every",
            "      hopper::named_bar_sync(1 + c, 128);\n      hopper::fence_proxy_async();  // every"),
            "fence-after-barrier"),
        "no wait_group.read": (_swap(src, "        if (t == 0) hopper::tma_store_wait_read<1>();\n", ""),
                               "overwrite-in-flight"),
        "wait_group.read 2": (_swap(src, "tma_store_wait_read<1>", "tma_store_wait_read<2>"), "overwrite-in-flight"),
        "wait_group.read 0": (_swap(src, "tma_store_wait_read<1>", "tma_store_wait_read<0>"), "waits more than"),
        "no commit": (_swap(src, "        hopper::tma_store_commit();\n", ""), "overwrite-in-flight"),
        "no barrier before the store": (_swap(
            src, "      hopper::named_bar_sync(1 + c, 128);  // every thread of the warpgroup has written and fenced\n",
            ""), "unsynced-store"),
        "__syncthreads instead of the named barrier": (_swap(src, "hopper::named_bar_sync(1 + c, 128);  // every",
                                                             "__syncthreads();  // every"), "whole-block barrier"),
        "truncating conversion": (_swap(src, "__floats2bfloat162_rn(d[j], d[j + 1])",
                                        "__halves2bfloat162(__float2bfloat16_rz(d[j]), __float2bfloat16_rz(d[j + 1]))"),
                                  "cvt.rz"),
        "truncating by a shift": (_swap(src, "__nv_bfloat162 v = __floats2bfloat162_rn(d[j], d[j + 1]);",
                                        "unsigned v = (__float_as_uint(d[j]) >> 16) | "
                                        "(__float_as_uint(d[j + 1]) & 0xFFFF0000u);").replace(
            "*reinterpret_cast<__nv_bfloat162*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) = v;",
            "*reinterpret_cast<unsigned*>(buf + r * 128 + chunk * 16 + 4 * (l % 4)) = v;"), "cvt.rn.bf16x2.f32"),
        "no final wait": (_swap(src, "    if (t == 0) hopper::tma_store_wait<0>();  // shared memory", "    // shared"),
                          "wait_group 0"),
        "the sub-tile loop kept as a loop": (_swap(src, "#pragma unroll\n    for (int sub", "#pragma unroll 1\n    for "
                                                   "(int sub"), "did not unroll"),
    }


@pytest.fixture(scope="module")
def wrong(sol) -> dict:
    return wrong_kernels(sol["LAB5_SRC"])


def test_kernel_solution_passes_without_gpu(sol, monkeypatch):
    _static_only(monkeypatch)
    lab5.check_epilogue_kernel(sol["LAB5_SRC"])


#: the solution kernel's text, read without running the notebook (for the test names)
SOLUTION_SRC = saved_variable(SOLUTION.name, "LAB5_SRC", SOLUTION.parent)[1]


@pytest.mark.parametrize("name", list(wrong_kernels(SOLUTION_SRC)))
def test_kernel_wrong_versions_fail_statically(wrong, name, monkeypatch):
    """Static checks read the PTX, which is the same on every seed: one run covers them all."""
    _static_only(monkeypatch)
    src, needle = wrong[name]
    grading.assert_rejects(lambda s: lab5.check_epilogue_kernel(s, benchmark=False), src, needle)


def test_epilogue_extraction_reads_the_solution(sol, wrappers):
    from helpers import gpu

    k = gpu.compile(lab5.HEADER + wrappers + sol["LAB5_SRC"], lab5.KERNEL_NAME)
    chunks, final, notes = lab5.epilogue_ops_from_ptx(k.ptx, lab5.KERNEL_NAME)
    assert [c[0] for c in chunks] == [("write", 0), ("write", 1), ("write", 0), ("write", 1)]
    assert ("wait_read", 1) in chunks[1] and ("wait", 0) in final and not notes


@pytest.mark.gpu
def test_kernel_solution_runs_on_the_h100(sol):
    lab5.check_epilogue_kernel(sol["LAB5_SRC"], sizes=(4096,))


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(lab5_run_only(SOLUTION_SRC)))
def test_run_only_wrong_kernels_fail_on_the_h100(sol, name):
    src, needles, every_time = lab5_run_only(sol["LAB5_SRC"])[name]
    grading.assert_rejects(lambda s: lab5.check_epilogue_kernel(s, benchmark=False), src, caught_where(every_time),
                           *needles)


# ------------------------------------------------------------------------------------------- on the PTX executor
def _executor(monkeypatch) -> None:
    """Run kernels on the course's PTX executor (the default without a GPU; forced here even beside one)."""
    monkeypatch.setenv("HELPERS_EXECUTOR", "force")


def test_kernel_solution_passes_on_the_executor(sol, monkeypatch, capsys):
    _executor(monkeypatch)
    lab5.check_epilogue_kernel(sol["LAB5_SRC"])
    out = capsys.readouterr().out
    assert len(re.findall(r"✓ ran on the emulator \([^)]*hazard mode\): M=\d+, N=\d+, K=\d+ \(\d+ blocks of 128×256\)",
                          out)) == 2, out
    assert out.count("the work, as the emulator recorded it: each of the") == 2, out
    assert out.count("no stage released more times than it was filled") == 2, out
    assert "timing skipped" in out


@pytest.mark.parametrize("name", list(lab5_run_only(SOLUTION_SRC)))
def test_run_only_wrong_kernels_pass_statically_and_fail_on_the_executor(sol, monkeypatch, name):
    src, needles, _ = lab5_run_only(sol["LAB5_SRC"])[name]
    _static_only(monkeypatch)
    with contextlib.redirect_stdout(io.StringIO()):
        lab5.check_epilogue_kernel(src, benchmark=False)  # the PTX cannot tell
    _executor(monkeypatch)
    grading.assert_rejects(lambda s: lab5.check_epilogue_kernel(s, benchmark=False), src, "on the emulator", *needles)


def test_result_hint_names_the_8_row_half_from_stale_shared_memory():
    """On the H100 the rows a dropped 8-row half never writes hold stale shared memory, not NaN: rows r % 16 < 8
    then hold rows r + 8's values, and the hint still names the 8-row half."""
    from helpers.course.checks import lab5 as checks

    rng = np.random.default_rng(0)
    m, n = 776, 200
    ref = rng.standard_normal((m, n))
    tol = np.full_like(ref, 1e-3)
    got = rng.standard_normal((m, n)) * 7  # stale bytes
    rows = np.arange(m - 8)
    rows = rows[rows % 16 < 8]
    got[rows] = ref[rows + 8]
    spec = None  # only a never-written sub-tile's hint reads the launch
    assert "8-row half" in checks._result_hint(got, ref, tol, spec)
    got[rows] = ref[rows]  # only rows 8-15 wrong: not this mistake
    assert "8-row half" not in checks._result_hint(got, ref, tol, spec)
