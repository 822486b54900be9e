"""Lab 1 graders, both ways: the solution passes; the stub and plausible wrong answers fail, helpfully."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers import grading, tensormap, tma
from helpers import labgen
from helpers.checks import lab1

ROOT = Path(__file__).resolve().parents[2]


SOL = labgen.solution_namespace(ROOT / "solutions" / "lab1_tma.ipynb")


# ------------------------------------------------------------------------------------------ solutions pass
@pytest.mark.parametrize("grader, name", [
    (lab1.check_map_args, "tensor_map_args"), (lab1.check_tile_coords, "tile_coords"),
    (lab1.check_smem_image, "smem_image"), (lab1.check_max_box, "max_box_cols"),
    (lab1.check_diagnose, "diagnose"), (lab1.check_tma_wrapper, "TMA_LOAD"), (lab1.check_copy_kernel, "COPY_TILES"),
])
def test_solution_passes(grader, name):
    grader(SOL[name])


def test_student_stubs_fail():
    stub = labgen.solution_namespace(ROOT / "labs" / "lab1_tma.ipynb")
    for grader, name in [(lab1.check_map_args, "tensor_map_args"), (lab1.check_tile_coords, "tile_coords"),
                         (lab1.check_smem_image, "smem_image"), (lab1.check_max_box, "max_box_cols"),
                         (lab1.check_diagnose, "diagnose")]:
        grading.assert_rejects(grader, stub[name], "not written yet", "hint")
    grading.assert_rejects(lab1.check_tma_wrapper, stub["TMA_LOAD"], "#error stub", "cp.async.bulk.tensor.2d")
    grading.assert_rejects(lab1.check_copy_kernel, stub["COPY_TILES"], "#error stub")


# ------------------------------------------------------------------------------------------ the reference
def test_swizzle_reference_matches_emulator():
    rng = np.random.default_rng(1)
    for mode in ("NONE", "B32", "B64", "B128"):
        box = rng.integers(0, 256, size=(32, 128), dtype=np.uint8)[:, : (tensormap.swizzle_span(
            tensormap.Swizzle[mode]) or 64)]
        box = np.ascontiguousarray(box)
        tmap = tensormap.for_matrix(box.shape, tensormap.DataType.UINT8, *box.shape,
                                    swizzle=tensormap.Swizzle[mode])
        np.testing.assert_array_equal(lab1.swizzle_reference(box, mode), tma.load_tile(tmap, box, (0, 0)))


# ------------------------------------------------------------------------------------------ wrong answers
def test_map_args_wrong_answers():
    sol = SOL["tensor_map_args"]

    def outer_first(a, br, bc):
        d = sol(a, br, bc)
        return {**d, "global_dim": d["global_dim"][::-1]}

    def with_inner_stride(a, br, bc):
        return {**sol(a, br, bc), "global_strides": (a.itemsize, a.strides[0])}

    def in_elements(a, br, bc):
        return {**sol(a, br, bc), "global_strides": (a.strides[0] // a.itemsize,)}

    def box_outer_first(a, br, bc):
        return {**sol(a, br, bc), "box_dim": (br, bc)}

    grading.assert_rejects(lab1.check_map_args, outer_first, "innermost first")
    grading.assert_rejects(lab1.check_map_args, with_inner_stride, "leave out the innermost stride")
    grading.assert_rejects(lab1.check_map_args, in_elements, "global_strides")
    grading.assert_rejects(lab1.check_map_args, box_outer_first, "box_dim")
    grading.assert_rejects(lab1.check_map_args, lambda a, br, bc: (1, 2), "a dict")


def test_map_args_row_pitch_matters():
    """A stride computed from the number of columns fails as soon as a padded view is drawn."""
    def from_cols(a, br, bc):
        return {**SOL["tensor_map_args"](a, br, bc), "global_strides": (a.shape[1] * a.itemsize,)}

    failures = 0
    for _ in range(10):
        try:
            lab1.check_map_args(from_cols)
        except grading.CheckFailed as exc:
            failures += 1
            assert "a.strides[0]" in str(exc)
    assert failures >= 5


def test_tile_coords_wrong_answers():
    grading.assert_rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tr * br, tc * bc), "innermost first")
    grading.assert_rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc, tr), "element indices")
    grading.assert_rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (tc * br, tr * bc), "box's width")
    grading.assert_rejects(lab1.check_tile_coords, lambda tr, tc, br, bc: (0, 0))


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
    grading.assert_rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c), "unswizzled")
    grading.assert_rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ (r % 8)), "address bits 7")
    grading.assert_rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ r), "❌")
    grading.assert_rejects(lab1.check_smem_image, _swz(lambda r, c, n, s: c if s == "NONE" else c ^ (r % n)), "❌")
    grading.assert_rejects(lab1.check_smem_image, lambda box, s: np.ascontiguousarray(box).reshape(-1), "❌")


def test_max_box_wrong_answers():
    grading.assert_rejects(lab1.check_max_box, lambda d, s: 64, "❌")
    grading.assert_rejects(lab1.check_max_box, lambda d, s: {"NONE": 256, "B32": 32, "B64": 64, "B128": 128}[s], "in bytes")
    grading.assert_rejects(lab1.check_max_box, lambda d, s: 128 // SOL["ELEMENT_BYTES"][d], "❌")
    grading.assert_rejects(lab1.check_max_box, lambda d, s: 256, "swizzle span")


def test_diagnose_wrong_answers():
    sol = SOL["diagnose"]

    def no_swizzle_rule(spec):
        r = sol(spec)
        return None if r == "box-inner-exceeds-swizzle" else r

    def inner_in_elements(spec):  # the 16-byte rule checked on elements instead of bytes
        r = sol(spec)
        if r in ("box-inner-multiple-of-16", None, "box-inner-exceeds-swizzle") and spec["box_dim"][0] % 16:
            return "box-inner-multiple-of-16"
        return None if r == "box-inner-multiple-of-16" else r

    def cheat(spec):
        tensormap.encode_tiled(tensormap.DataType[spec["dtype"]], 2, spec["global_address"], spec["global_dim"],
                               spec["global_strides"], spec["box_dim"], (1, 1))
        return None

    grading.assert_rejects(lab1.check_diagnose, no_swizzle_rule, "swizzle span")
    grading.assert_rejects(lab1.check_diagnose, inner_in_elements, "❌")
    grading.assert_rejects(lab1.check_diagnose, cheat, "reason from the rules")
    grading.assert_rejects(lab1.check_diagnose, lambda spec: None, "❌")


def test_tma_wrapper_wrong_answers():
    src = SOL["TMA_LOAD"]
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace('"r"(c0), "r"(c1)', '"r"(c1), "r"(c0)'), "innermost first")
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace('"r"(dst_s), "l"(tmap), "r"(c0), "r"(c1), "r"(bar_s)',
                                               '"r"(bar_s), "l"(tmap), "r"(c0), "r"(c1), "r"(dst_s)'),
           "destination comes first")
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace('"r"(dst_s)', '"l"(dst)'), "generic pointer")
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace("tensor.2d", "tensor.1d").replace("{%2, %3}", "{%2}"), ".2d")
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace(".mbarrier::complete_tx::bytes", ""), "❌")
    grading.assert_rejects(lab1.check_tma_wrapper, src.replace("asm volatile(", "if (0) asm volatile("), "cp.async.bulk")


def test_copy_kernel_without_wait_fails():
    src = SOL["COPY_TILES"].replace("HOPPER_WAIT1(full, 0);", "")
    grading.assert_rejects(lab1.check_copy_kernel, src, "waits on the barrier")


@pytest.mark.gpu
def test_copy_kernel_unswizzled_read_fails_on_gpu():
    src = SOL["COPY_TILES"].replace("8 * ((c / 8) ^ (r % 8)) + c % 8", "c")
    grading.assert_rejects(lab1.check_copy_kernel, src, "still swizzled")


@pytest.mark.gpu
def test_tma_wrapper_swapped_coords_fails_on_gpu():
    """The static check already catches it; on the GPU the self-test would too (a transposed tile)."""
    grading.assert_rejects(lab1.check_tma_wrapper, SOL["TMA_LOAD"].replace('"r"(c0), "r"(c1)', '"r"(c1), "r"(c0)'), "❌")
