"""Lab 1 graders, both ways: the solution passes; the stub and each named wrong answer fail on every one of 200
seeds, with the hint that names the mistake actually made. CUDA checks (no randomness) are tried once per answer:
on the compile-only path (``no_gpu``: HELPERS_EXECUTOR=off, their PTX and protocol rules), and on the PTX executor
(``executor``), where the run is the grade and rejects what a run can show; the GPU tests run them on an H100."""

from __future__ import annotations

import re

import numpy as np
import pytest
from labtools import ROOT, accepts, rejected_by_the_run, rejects, swap

from helpers.course import labgen
from helpers.course.checks import lab1
from helpers.hopper import tensormap, tma


# ------------------------------------------------------------------------------------------ solutions and stubs
@pytest.mark.parametrize("grader, names", [
    (lab1.check_map_args, ("tensor_map_args",)), (lab1.check_tile_coords, ("tile_coords",)),
    (lab1.check_smem_image, ("smem_image",)), (lab1.check_max_box, ("max_box_cols",)),
    (lab1.check_diagnose, ("diagnose",)), (lab1.check_wide_box, ("wide_map_args", "wide_coords")),
    (lab1.check_rank3, ("rank3_fix",)),
])
def test_python_solutions_pass_and_stubs_fail(sol1, grader, names):
    accepts(lambda answer, seed: grader(*answer, seed=seed), tuple(sol1[n] for n in names))
    stub = labgen.solution_namespace(ROOT / "labs" / "lab1_tma.ipynb")
    text = rejects(lambda answer, seed: grader(*answer, seed=seed), tuple(stub[n] for n in names),
                   "not written yet", seeds=3)
    assert "lab1.hint(" in text and "stuck?" in text, text


def test_cuda_solutions_pass_and_stubs_fail(sol1, no_gpu):
    accepts(lab1.check_tma_load, sol1["TMA_LOAD"], seeds=None, rank=2)
    accepts(lab1.check_tma_load, sol1["TMA_LOAD_3D"], seeds=None, rank=3)
    out = accepts(lab1.check_copy_kernel, sol1["TMA_LOAD"] + sol1["LAB1_KERNEL"], seeds=None,
                  kernel=sol1["LAB1_KERNEL"])
    assert "run skipped" in out and "XOR of the read is checked when the kernel runs" in out
    stub = labgen.solution_namespace(ROOT / "labs" / "lab1_tma.ipynb")
    rejects(lab1.check_tma_load, stub["TMA_LOAD"], "#error stub", "lab1.hint", seeds=None, rank=2)
    rejects(lab1.check_tma_load, stub["TMA_LOAD_3D"], "#error stub", seeds=None, rank=3)
    rejects(lab1.check_copy_kernel, stub["TMA_LOAD"] + stub["LAB1_KERNEL"], "#error stub", seeds=None)


def test_swizzle_reference_matches_emulator():
    rng = np.random.default_rng(1)
    for mode in ("NONE", "B32", "B64", "B128"):
        width = tensormap.swizzle_span(tensormap.Swizzle[mode]) or 64
        box = np.ascontiguousarray(rng.integers(0, 256, size=(32, width), dtype=np.uint8))
        tmap = tensormap.for_matrix(box.shape, tensormap.DataType.UINT8, *box.shape, swizzle=tensormap.Swizzle[mode])
        np.testing.assert_array_equal(lab1.swizzle_reference(box, mode), tma.load_tile(tmap, box, (0, 0)))


# ------------------------------------------------------------------------------------------ exercise 1
def test_map_args_wrong_answers(sol1):
    sol = sol1["tensor_map_args"]

    def outer_first(a, br, bc):
        d = sol(a, br, bc)
        return {**d, "global_dim": d["global_dim"][::-1]}

    rejects(lab1.check_map_args, outer_first, "innermost first")
    rejects(lab1.check_map_args, lambda a, br, bc: {**sol(a, br, bc), "global_strides": (a.itemsize, a.strides[0])},
            "leave out the innermost stride")
    rejects(lab1.check_map_args, lambda a, br, bc: {**sol(a, br, bc), "global_strides": (a.strides[0] // a.itemsize,)},
            "in bytes, not elements")
    rejects(lab1.check_map_args, lambda a, br, bc: {**sol(a, br, bc), "global_strides": (a.shape[1] * a.itemsize,)},
            r"a\.strides\[0\]")
    rejects(lab1.check_map_args, lambda a, br, bc: {**sol(a, br, bc), "box_dim": (br, bc)}, "box_dim",
            "innermost first")
    rejects(lab1.check_map_args, lambda a, br, bc: {**sol(a, br, bc), "element_strides": (0, 0)}, "element_strides")
    rejects(lab1.check_map_args, lambda a, br, bc: (1, 2), "a dict")
    rejects(lab1.check_map_args, lambda a, br, bc: a[10**6], "raised IndexError", "line [0-9]+ of your cell")


# ------------------------------------------------------------------------------------------ exercise 2
def test_tile_coords_wrong_answers():
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tr * br, tc * bc), "innermost first")
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc, tr), "element indices, not tile indices")
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc * bc, tr), "one coordinate is an element index")
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc, tr * br), "one coordinate is an element index")
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc * br, tr * bc), "box's width")
    rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (0, 0), "first element")


# ------------------------------------------------------------------------------------------ exercise 3
def _swz(rule):
    def image(box, swizzle):
        raw = np.ascontiguousarray(box).view(np.uint8).reshape(box.shape[0], -1, 16)
        out = np.empty_like(raw)
        n = raw.shape[1]
        for r in range(raw.shape[0]):
            for c in range(n):
                out[r, rule(r, c, n, swizzle) % n] = raw[r, c]
        return out.reshape(-1)
    return image


def test_smem_image_wrong_answers():
    rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c), "unswizzled")
    # the 128B rule (row % 8, or row % chunks) used for every mode: the hint gives the mode's own rule
    rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ (r % 8)), r"\(row // 2\) % 4")
    rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ (r % n)), r"\(row // 2\) % 4")
    rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ ((r // 2) % n)),
            r"row % 8 for B128|c XOR \(row % 8\)")
    rejects(lab1.check_smem_image, lambda box, s: np.ascontiguousarray(box).reshape(-1), "dtype|uint8")
    rejects(lab1.check_smem_image, lambda box, s: np.zeros(16, np.uint8), "as many bytes as the box")


# ------------------------------------------------------------------------------------------ exercise 4
def test_max_box_wrong_answers(sol1):
    rejects(lab1.check_max_box, lambda d, s: 64, "❌")
    rejects(lab1.check_max_box, lambda d, s: {"NONE": 256, "B32": 32, "B64": 64, "B128": 128}[s], "in bytes")
    rejects(lab1.check_max_box, lambda d, s: 128 // sol1["ELEMENT_BYTES"][d], "256 elements")
    rejects(lab1.check_max_box, lambda d, s: 256, "swizzle span")


def test_diagnose_wrong_answers(sol1):
    sol = sol1["diagnose"]
    elem = sol1["ELEMENT_BYTES"]
    span = sol1["SPAN_BYTES"]

    def no_swizzle_rule(spec):
        r = sol(spec)
        return None if r == "box-inner-exceeds-swizzle" else r

    def inner_in_elements(spec):  # the 16-byte rule checked on elements instead of bytes
        r = sol(spec)
        if r in ("box-inner-multiple-of-16", None, "box-inner-exceeds-swizzle") and spec["box_dim"][0] % 16:
            return "box-inner-multiple-of-16"
        return None if r == "box-inner-multiple-of-16" else r

    def box_range_first(spec):  # checks the box before the stride
        if any(not 1 <= b <= 256 for b in spec["box_dim"]):
            return "address-alignment" if spec["global_address"] % 16 else "box-range"
        return sol(spec)

    def span_exclusive(spec):  # an inner row exactly as wide as the span refused
        inner = spec["box_dim"][0] * elem[spec["dtype"]]
        r = sol(spec)
        return "box-inner-exceeds-swizzle" if r is None and span[spec["swizzle"]] and inner == span[spec["swizzle"]] \
            else r

    def box_255(spec):
        return "box-range" if sol(spec) is None and max(spec["box_dim"]) == 256 else sol(spec)

    def address_8(spec):
        return None if sol(spec) == "address-alignment" and spec["global_address"] % 8 == 0 else sol(spec)

    def cheat(spec):
        tensormap.encode_tiled(tensormap.DataType[spec["dtype"]], 2, spec["global_address"], spec["global_dim"],
                               spec["global_strides"], spec["box_dim"], (1, 1))

    rejects(lab1.check_diagnose, no_swizzle_rule, "swizzle span")
    rejects(lab1.check_diagnose, inner_in_elements, "❌")
    rejects(lab1.check_diagnose, box_range_first, "name the first in the order of the table")
    rejects(lab1.check_diagnose, span_exclusive, "exactly the span is fine")
    rejects(lab1.check_diagnose, box_255, "both ends included")
    rejects(lab1.check_diagnose, address_8, "multiple of 16 bytes")
    rejects(lab1.check_diagnose, cheat, "reason from the rules")
    rejects(lab1.check_diagnose, lambda spec: None, "❌")


def test_diagnose_cases_cover_every_rule_and_combination():
    rules = [lab1._emulator_rule(s) for s in lab1.DIAGNOSE_CASES]
    assert set(rules) == {None, *lab1.RULES}
    assert sum(len(lab1._broken_rules(s)) >= 2 for s in lab1.DIAGNOSE_CASES) >= 4
    for spec, rule in zip(lab1.DIAGNOSE_CASES, rules, strict=True):  # the first broken rule is the emulator's
        broken = lab1._broken_rules(spec)
        assert (broken[0] if broken else None) == rule, spec


# ------------------------------------------------------------------------------------------ exercise 5
def test_wide_box_wrong_answers(sol1):
    args, coords = sol1["wide_map_args"], sol1["wide_coords"]

    def with_args(**change):
        return lambda a, br, bc: {**args(a, br, bc), **{k: f(a, br, bc) for k, f in change.items()}}

    grader = lab1.check_wide_box
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(global_strides=lambda a, br, bc: (128, a.strides[0])), "row pitch away")
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(global_strides=lambda a, br, bc: (a.shape[1] * 2, 128)), r"a\.strides\[0\]")
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(global_dim=lambda a, br, bc: (a.shape[1] // 64, a.shape[0], 64)), "innermost first")
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(global_dim=lambda a, br, bc: (a.shape[1], a.shape[0], 1)), "64 columns of one strip")
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(box_dim=lambda a, br, bc: (64, br, bc)), "counts strips")
    rejects(lambda f, seed: grader(f, coords, seed=seed),
            with_args(global_strides=lambda a, br, bc: (a.strides[0], 64)), "in bytes")
    rejects(lambda f, seed: grader(args, f, seed=seed), lambda r, c: (0, r, c), "col0 // 64")
    rejects(lambda f, seed: grader(args, f, seed=seed), lambda r, c: (c // 64, r, 0), "innermost first")
    rejects(lambda f, seed: grader(args, f, seed=seed), lambda r, c: (c, r, 0), "❌")


def test_rank3_wrong_answers():
    for letter, why in (("b", "nothing pads it"), ("c", "element indices"), ("d", "does not read coordinates")):
        rejects(lab1.check_rank3, lambda letter=letter: letter, why, seeds=None)
    rejects(lab1.check_rank3, lambda: "e", "one of", seeds=None)


# ------------------------------------------------------------------------------------------ exercises 6-7 (CUDA)
OPERANDS = '"r"(dst_s), "l"(tmap), "r"(c0), "r"(c1), "r"(bar_s)'


@pytest.mark.parametrize("change, needle", [
    (('"r"(c0), "r"(c1)', '"r"(c1), "r"(c0)'), "innermost first"),
    ((OPERANDS, '"r"(bar_s), "l"(tmap), "r"(c0), "r"(c1), "r"(dst_s)'), "destination comes first"),
    (('"r"(dst_s)', '"l"(dst)'), "generic pointer"),
    (("tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes\"\n      \" [%0], [%1, {%2, %3}]",
      "tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes\"\n      \" [%0], [%1, {%2}]"),
     "the map and the load are rank 2"),
    (("tile.mbarrier", "im2col.mbarrier"), "does not compile.*im2col"),  # ptxas itself refuses it
    (("asm volatile(", "if (c0 == -7) asm volatile("), "cp.async.bulk"),
])
def test_tma_load_wrong_answers(sol1, no_gpu, change, needle):
    rejects(lab1.check_tma_load, swap(sol1["TMA_LOAD"], *change), needle, seeds=None, rank=2)


@pytest.mark.parametrize("change", [
    ("shared::cluster.global.tile", "shared::cta.global.tile"),  # the PTX 8.6 destination, same load
    ("global.tile.mbarrier", "global.mbarrier"),  # .tile is the default load mode
])
def test_tma_load_right_variants(sol1, no_gpu, change):
    accepts(lab1.check_tma_load, swap(sol1["TMA_LOAD"], *change), seeds=None, rank=2)


def test_tma_load_3d_wrong_answers(sol1, no_gpu):
    src = sol1["TMA_LOAD_3D"]
    rejects(lab1.check_tma_load, swap(src, '"r"(c0), "r"(c1), "r"(c2)', '"r"(c2), "r"(c1), "r"(c0)'),
            "innermost first", seeds=None, rank=3)
    rejects(lab1.check_tma_load, sol1["TMA_LOAD"].replace("my_tma_load_2d", "my_tma_load_3d"), "❌", seeds=None,
            rank=3)


# ------------------------------------------------------------------------------------------ exercise 8 (CUDA)
@pytest.mark.parametrize("change, needle", [
    (("  HOPPER_WAIT1(full, 0);\n", ""), "read the tile before waiting"),
    (("sizeof(tile));", "sizeof(tile) / 2);"), "8192 bytes"),
    (("hopper::mbar_arrive_expect_tx(&full, sizeof(tile));",
      "hopper::mbar_arrive(&full);\n    hopper::mbar_expect_tx(&full, sizeof(tile));"), "before its bytes"),
    (("    my_tma_load_2d(tile, &src_map, &full, col0, row0);\n", ""), "issues a TMA load"),
])
def test_copy_kernel_wrong_answers(sol1, no_gpu, change, needle):
    kernel = swap(sol1["LAB1_KERNEL"], *change)
    rejects(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel, needle, seeds=None, kernel=kernel)


@pytest.mark.parametrize("change", [
    ("hopper::mbar_arrive_expect_tx(&full, sizeof(tile));",  # bytes first, then the arrival: the same protocol
     "hopper::mbar_expect_tx(&full, sizeof(tile));\n    hopper::mbar_arrive(&full);"),
    ("    hopper::mbar_arrive_expect_tx(&full, sizeof(tile));\n    my_tma_load_2d(tile, &src_map, &full, col0, row0);",
     "    my_tma_load_2d(tile, &src_map, &full, col0, row0);\n    hopper::mbar_arrive_expect_tx(&full, sizeof(tile));"),
])
def test_copy_kernel_right_variants(sol1, no_gpu, change):
    """Bytes may land before they are announced (the H100 completes the phase when they balance)."""
    kernel = swap(sol1["LAB1_KERNEL"], *change)
    accepts(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel, seeds=None, kernel=kernel)


def test_copy_kernel_names_the_line(sol1, no_gpu):
    kernel = swap(sol1["LAB1_KERNEL"], "  HOPPER_WAIT1(full, 0);\n", "")
    text = rejects(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel, "of the kernel", seeds=None, kernel=kernel)
    assert "tile[r * BK + 8 * ((c / 8) ^ (r % 8)) + c % 8]" in text


# ------------------------------------------------------------------------------------------ on the PTX executor
def test_cuda_solutions_run_on_the_emulator(sol1, executor):
    for rank, name in ((2, "TMA_LOAD"), (3, "TMA_LOAD_3D")):
        out = accepts(lab1.check_tma_load, sol1[name], seeds=None, rank=rank)
        assert "ran on the emulator" in out and "bit for bit: all" in out and "run skipped" not in out, out
    out = accepts(lab1.check_copy_kernel, sol1["TMA_LOAD"] + sol1["LAB1_KERNEL"], seeds=None,
                  kernel=sol1["LAB1_KERNEL"])
    assert re.search(r"✓ ran on the emulator \(no sm_90 GPU|HELPERS_EXECUTOR=force\): a \d+×\d+ bf16 matrix", out), out


def test_copy_ignoring_the_swizzle_is_rejected_by_the_run(sol1, executor):
    """The PTX cannot tell which element a read picks: the run does (the issue's first named mistake)."""
    kernel = swap(sol1["LAB1_KERNEL"], "8 * ((c / 8) ^ (r % 8)) + c % 8", "c")
    rejected_by_the_run(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel, "still swizzled", "differ", kernel=kernel)


def test_a_read_before_the_wait_fails_the_run_and_the_ptx_says_why(sol1, executor):
    kernel = swap(sol1["LAB1_KERNEL"], "  HOPPER_WAIT1(full, 0);\n", "")
    text = rejected_by_the_run(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel,
                               "differ|read before the barrier phase that delivers it", kernel=kernel)
    assert re.search(r"what the PTX shows \(the likely cause\): a thread can read the tile before waiting", text)


@pytest.mark.parametrize("change, needle", [
    (('"r"(c0), "r"(c1)', '"r"(c1), "r"(c0)'), "innermost first"),
    (('"r"(dst_s)', '"l"(dst)'), "generic pointer"),
])
def test_tma_load_mistakes_are_rejected_by_the_run(sol1, executor, change, needle):
    text = rejected_by_the_run(lab1.check_tma_load, swap(sol1["TMA_LOAD"], *change), needle, rank=2)
    assert "what the PTX shows" in text


# ------------------------------------------------------------------------------------------ on an H100
@pytest.mark.gpu
def test_copy_kernel_unswizzled_read_fails_on_gpu(sol1):
    kernel = swap(sol1["LAB1_KERNEL"], "8 * ((c / 8) ^ (r % 8)) + c % 8", "c")
    rejects(lab1.check_copy_kernel, sol1["TMA_LOAD"] + kernel, "still swizzled", seeds=None)


@pytest.mark.gpu
def test_cuda_solutions_run_on_gpu(sol1):
    accepts(lab1.check_tma_load, sol1["TMA_LOAD"], seeds=None, rank=2)
    accepts(lab1.check_tma_load, sol1["TMA_LOAD_3D"], seeds=None, rank=3)
    accepts(lab1.check_copy_kernel, sol1["TMA_LOAD"] + sol1["LAB1_KERNEL"], seeds=None)
