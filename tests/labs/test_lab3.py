"""Lab 3 (WGMMA) graders, both ways: the solution passes; the stub and each named wrong answer fail on every one of
200 seeds (Python) or once (CUDA: on the compile-only path, ``no_gpu``, through the PTX and its protocol; on the PTX
executor, ``executor``, through the run, with the PTX as the explanation), with the hint that names the mistake."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import ROOT, accepts, rejected_by_the_run, rejects, swap

from helpers import gpu
from helpers.course import labgen
from helpers.course.checks import lab3
from helpers.hopper import wgmma


def _stub() -> dict:
    return labgen.solution_namespace(ROOT / "labs" / "lab3_wgmma.ipynb")


# ------------------------------------------------------------------------------------------ solutions and stubs
PYTHON = [(lab3.check_descriptor, "encode_desc"), (lab3.check_kslice_descriptor, "kslice_desc"),
          (lab3.check_fragment_coords, "fragment_coords"), (lab3.check_one_product, "one_product"),
          (lab3.check_store_tile, "store_tile"), (lab3.check_emulated_gemm, "emulated_gemm")]


@pytest.mark.parametrize("grader, name", PYTHON)
def test_python_solutions_pass_and_stubs_fail(sol3, grader, name):
    accepts(grader, sol3[name], seeds=2)
    text = rejects(grader, _stub()[name], "not written yet", "lab3.hint", seeds=2)
    assert "stuck?" in text


def test_cuda_solutions_pass_and_stubs_fail(sol3, wrappers, no_gpu):
    accepts(lab3.check_wgmma_asm, sol3["WGMMA"], seeds=None)
    out = accepts(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + sol3["LAB3_KERNEL"], seeds=None,
                  kernel=sol3["LAB3_KERNEL"])
    assert "compiled for sm_90a" in out and "wgmma" in out and "0 spills" in out and out.count("run skipped") == 1
    stub = _stub()
    rejects(lab3.check_wgmma_asm, stub["WGMMA"], "not written yet", seeds=None)
    rejects(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + stub["LAB3_KERNEL"], "not written yet", seeds=None)


def test_the_references_match_the_emulator_and_the_header(sol3):
    from helpers.hopper.tensormap import Swizzle

    for start, lbo, sbo in [(0x7400, 16, 1024), (0x10, 0x3FFF0, 0x20), (0x3FFF0, 0x100, 0x3FFF0)]:
        for sw, mode in ((0, Swizzle.NONE), (32, Swizzle.B32), (64, Swizzle.B64), (128, Swizzle.B128)):
            assert sol3["encode_desc"](start, lbo, sbo, sw) == wgmma.make_descriptor(start, lbo, sbo, mode)
    header = (ROOT / "helpers" / "include" / "hopper.cuh").read_text()
    assert "swizzle_bytes == 128 ? 1ull : swizzle_bytes == 64 ? 2ull : swizzle_bytes == 32 ? 3ull" in header
    for t in range(128):
        for j in range(32):
            assert lab3.reference_fragment_coords(t, j) == wgmma.element_of(t, j, 64)


# ------------------------------------------------------------------------------------------ 1 · descriptor
def test_descriptor_wrong_answers():
    ref = lab3.reference_descriptor
    rejects(lab3.check_descriptor, lambda s, lbo, sbo, sw: ref(s, sbo, lbo, sw), "LBO and SBO are swapped")
    rejects(lab3.check_descriptor, lambda s, lbo, sbo, sw: s | lbo << 16 | sbo << 32 | {0: 0, 128: 1, 64: 2, 32: 3}[sw]
            << 62, "shift start, LBO and SBO right by 4")
    for table in ({0: 0, 32: 1, 64: 2, 128: 3}, {0: 0, 128: 3, 64: 2, 32: 1}):  # the TMA enum; increasing order
        rejects(lab3.check_descriptor, lambda s, lbo, sbo, sw, t=table: ref(s, lbo, sbo, 0) | t[sw] << 62,
                "bits 62-63")
    rejects(lab3.check_descriptor, lambda *a: 0x4000004000010740, "expected")
    modes = {0: 0, 128: 1, 64: 2, 32: 3}
    no_start_mask = lambda s, lbo, sbo, sw: (s >> 4) | ref(0, lbo, sbo, sw)  # noqa: E731
    rejects(lab3.check_descriptor, no_start_mask, "0xfffffff0", "low 18 bits")
    no_mask = lambda s, lbo, sbo, sw: (s >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | modes[sw] << 62  # noqa: E731
    rejects(lab3.check_descriptor, no_mask, "low 18 bits")
    rejects(lab3.check_descriptor, lambda s, lbo, sbo, sw: ref(s & 0x3FFFF, lbo & 0xFFFF, sbo, sw), "expected")
    rejects(lab3.check_descriptor, lambda *a: float(ref(*a)), "an int")


# ------------------------------------------------------------------------------------------ 2 · K slices
def test_kslice_wrong_answers():
    ref = lab3.reference_descriptor
    rejects(lab3.check_kslice_descriptor, lambda t, k: ref(t + 16 * k, 16, 1024, 128), "32 bytes")
    rejects(lab3.check_kslice_descriptor, lambda t, k: ref(t + 32 * k, 1024, 16, 128), "swapped")
    rejects(lab3.check_kslice_descriptor, lambda t, k: ref(t + 2048 * k, 16, 1024, 128), "inside each 128-byte row")
    rejects(lab3.check_kslice_descriptor, lambda t, k: ref(t + 32 * k, 16, 1024, 0) | 1 << 63, "bit 62 set")
    rejects(lab3.check_kslice_descriptor, lambda t, k: ref(t, 16, 1024, 128), "slice 0")
    rejects(lab3.check_kslice_descriptor, lambda t, k: lab3.reference_kslice_descriptor(0, k), "tile_addr")


# ------------------------------------------------------------------------------------------ 3 · fragments
def test_fragment_wrong_answers():
    def transposed(t, j):
        r, c = lab3.reference_fragment_coords(t, j)
        return c, r

    def thread_not_lane(t, j):
        return 16 * (t // 32) + t // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (t % 4) + j % 2

    def mixed(t, j):  # registers 2, 3 taken as the next 8 columns and 4..7 as the lower 8 rows
        w, lane = divmod(t, 32)
        return 16 * w + lane // 4 + 8 * ((j // 4) % 2), 16 * (j // 8) + 8 * ((j // 2) % 2) + 2 * (lane % 4) + j % 2

    rejects(lab3.check_fragment_coords, transposed, "transposed", seeds=None)
    rejects(lab3.check_fragment_coords, thread_not_lane, r"lane \(t % 32\)", seeds=None)
    rejects(lab3.check_fragment_coords, mixed, "row of every", seeds=None)
    rejects(lab3.check_fragment_coords, lambda t, j: t * 32 + j, "pair of ints", seeds=None)


# ------------------------------------------------------------------------------------------ 4 · one product
def _one_product_with(kslice, transpose=False, fixed_k=None, swap_ab=False):
    def one_product(smem, a_addr, b_addr, k):
        kk = k if fixed_k is None else fixed_k
        da, db = kslice(a_addr, kk), kslice(b_addr, kk)
        tile = wgmma.fragments_to_tile(wgmma.mma_async(smem, *((db, da) if swap_ab else (da, db)), 64), 64)
        return tile.T if transpose else tile
    return one_product


def test_one_product_wrong_answers():
    ref = lab3.reference_descriptor
    rejects(lab3.check_one_product, _one_product_with(lambda t, k: ref(t + 16 * k, 16, 1024, 128)),
            "16 bf16 = 32 bytes")
    rejects(lab3.check_one_product, _one_product_with(lab3.reference_kslice_descriptor, transpose=True),
            "descriptors swapped", r"\(col, row\)")
    rejects(lab3.check_one_product, _one_product_with(lab3.reference_kslice_descriptor, fixed_k=0), "slice 0's")
    rejects(lab3.check_one_product, _one_product_with(lambda t, k: ref(t + 32 * k, 1024, 16, 128)),
            "LBO and SBO swapped")
    rejects(lab3.check_one_product, _one_product_with(lambda t, k: ref(t + 32 * k, 16, 1024, 0)),
            "without the 128B swizzle")
    rejects(lab3.check_one_product, _one_product_with(lab3.reference_kslice_descriptor, swap_ab=True),
            "descriptors swapped", "fragment_coords")  # the same output as the transposed placement: both named


# ------------------------------------------------------------------------------------------ 5 · the store
def test_store_wrong_answers():
    def transposed(acc, C, m0, n0):
        C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64).T

    def column_major(acc, C, m0, n0):  # a common write-up's store: C[(n0 + col) * M + m0 + row]
        flat = C.reshape(-1)
        for t in range(128):
            for j in range(32):
                r, c = lab3.reference_fragment_coords(t, j)
                flat[(n0 + c) * C.shape[0] + m0 + r] = acc[t, j]

    def evens(acc, C, m0, n0):
        for t in range(128):
            for j in range(0, 32, 2):
                r, c = lab3.reference_fragment_coords(t, j)
                C[m0 + r, n0 + c] = acc[t, j]

    def spills_over(acc, C, m0, n0):
        C[m0:m0 + 64, :] = 0.0
        C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64)

    def swapped_origin(acc, C, m0, n0):
        C[n0:n0 + 64, m0:m0 + 64] = wgmma.fragments_to_tile(acc, 64)

    rejects(lab3.check_store_tile, transposed, "transposed")
    rejects(lab3.check_store_tile, column_major, "column-major|outside the tile|raised")
    rejects(lab3.check_store_tile, evens, "NaN")
    rejects(lab3.check_store_tile, spills_over, "outside the tile")
    rejects(lab3.check_store_tile, swapped_origin, "❌")


# ------------------------------------------------------------------------------------------ 6 · whole GEMM
def _gemm_with(kslice, reset_each_step=False, first_tile_only=False, first_step_only=False):
    def emulated_gemm(A, B, C):
        (M, K), N = A.shape, B.shape[0]
        for m0 in range(0, 64 if first_tile_only else M, 64):
            for n0 in range(0, N, 64):
                acc = np.zeros((128, 32), np.float32)
                for k0 in range(0, 64 if first_step_only else K, 64):
                    if reset_each_step:
                        acc = np.zeros((128, 32), np.float32)
                    smem = lab3.stage_image(A, B, m0, n0, k0)
                    for k in range(4):
                        acc = wgmma.mma_async(smem, kslice(0, k), kslice(8192, k), 64, acc)
                C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64)
    return emulated_gemm


def _numpy_gemm(step):
    """A wrong GEMM computed in numpy (fast enough for 200 seeds): ``step(a, b, k0)`` is what one K step adds."""
    def emulated_gemm(A, B, C):
        a, b = np.asarray(A, np.float32), np.asarray(B, np.float32)
        out = step(a, b)
        C[:out.shape[0], :out.shape[1]] = out
    return emulated_gemm


def _16_byte_step(a, b):
    """What descriptors stepped by 16 bytes read: slice s covers K columns 8s..8s+15 of each 64-wide step (measured
    on the H100), so every step sums columns 0-15, 8-23, 16-31 and 24-39."""
    out = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for k0 in range(0, a.shape[1], 64):
        for s in range(4):
            cols = slice(k0 + 8 * s, k0 + 8 * s + 16)
            out += a[:, cols] @ b[:, cols].T
    return out


def test_gemm_wrong_answers():
    rejects(lab3.check_emulated_gemm, _numpy_gemm(_16_byte_step), "differ")
    rejects(lab3.check_emulated_gemm, _numpy_gemm(lambda a, b: a[:, -64:] @ b[:, -64:].T), "only the last K step")
    rejects(lab3.check_emulated_gemm, _numpy_gemm(lambda a, b: a[:, :64] @ b[:, :64].T), "only the first K step")
    rejects(lab3.check_emulated_gemm, _numpy_gemm(lambda a, b: (a @ b.T)[:64]), "never written")


def test_gemm_wrong_answers_on_the_emulator():
    """The same mistakes written with the emulator, as a student would (fewer seeds: each run takes 0.2 s)."""
    ref = lab3.reference_descriptor
    rejects(lab3.check_emulated_gemm, _gemm_with(lambda t, k: ref(t + 16 * k, 16, 1024, 128)), "differ", seeds=3)
    rejects(lab3.check_emulated_gemm, _gemm_with(lab3.reference_kslice_descriptor, reset_each_step=True),
            "only the last K step", seeds=3)
    rejects(lab3.check_emulated_gemm, _gemm_with(lab3.reference_kslice_descriptor, first_tile_only=True),
            "never written", seeds=3)


def test_gemm_reference_pieces_pass():
    accepts(lab3.check_emulated_gemm, _gemm_with(lab3.reference_kslice_descriptor), seeds=2)


# ------------------------------------------------------------------------------------------ 7 · your wgmma
@pytest.mark.parametrize("change, needle", [
    (("p, 1, 1, 0, 0", "p, -1, 1, 0, 0"), "imm-scale-a"),
    (("p, 1, 1, 0, 0", "p, 1, 1, 1, 0"), "imm-trans-a"),
    (("p, 1, 1, 0, 0", "p, 1, 1, 0, 1"), "imm-trans-b"),
    (("p, 1, 1, 0, 0", "1, 1, 1, 0, 0"), "scale-d"),
    (('"l"(desc_a), "l"(desc_b)', '"l"(desc_b), "l"(desc_a)'), "the A descriptor comes first"),
    (('"+f"(d[0]), "+f"(d[1])', '"+f"(d[1]), "+f"(d[0])'), r"d\[0\] … d\[31\], in order"),
    (("setp.ne.b32 p, %34, 0;", "setp.eq.b32 p, %34, 0;"), "❌|scale"),
])
def test_wgmma_asm_wrong_answers(sol3, no_gpu, change, needle):
    rejects(lab3.check_wgmma_asm, swap(sol3["WGMMA"], *change), needle, seeds=None)


def test_wgmma_asm_wrong_shape_does_not_compile(sol3, no_gpu):
    rejects(lab3.check_wgmma_asm, swap(sol3["WGMMA"], "m64n64k16", "m64n32k16"), "does not compile", seeds=None)


def test_wgmma_asm_right_variant(sol3, no_gpu):
    accepts(lab3.check_wgmma_asm, swap(sol3["WGMMA"], "setp.ne.b32 p, %34, 0;", "setp.ne.u32 p, %34, 0;"),
            seeds=None)


# ------------------------------------------------------------------------------------------ 8 · the kernel
RELEASE = "    my_mbar_arrive(&empty[s]);\n"
WAIT0 = "    hopper::wgmma_wait<0>();\n"


@pytest.mark.parametrize("change, needle", [
    ((WAIT0, "    hopper::wgmma_wait<1>();\n"), "wait_group 0"),
    (("    hopper::wgmma_fence();\n", ""), "before any wgmma.fence"),
    (("    hopper::wgmma_commit();\n", ""), "never committed"),
    (("    my_mbar_wait(&full[s], (k / STAGES) & 1, \"full\", s);\n", ""), "before waiting on full"),
    ((RELEASE, ""), "every step releases its stage"),
])
def test_kernel_wrong_answers(sol3, wrappers, no_gpu, change, needle):
    kernel = swap(sol3["LAB3_KERNEL"], *change)
    rejects(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + kernel, needle, seeds=None, kernel=kernel)


def test_kernel_release_before_the_wait_is_named(sol3, wrappers, no_gpu):
    kernel = swap(swap(sol3["LAB3_KERNEL"], RELEASE, ""), WAIT0, RELEASE + WAIT0)
    text = rejects(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + kernel, "may still read it", seeds=None,
                   kernel=kernel)
    assert "my_mbar_arrive(&empty[s])" in text


def test_kernel_compile_error_is_reported(sol3, wrappers, no_gpu):
    kernel = swap(sol3["LAB3_KERNEL"], "hopper::wgmma_commit();", "hopper::wgmma_commit()")
    rejects(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + kernel, "does not compile", seeds=None)


def test_kernel_failure_diagnoses():
    rng = np.random.default_rng(3)
    expected = rng.standard_normal((128, 192))
    from helpers.course.checks import _common

    assert "transposed" in lab3._diagnose_kernel(_common.tiles_transposed(expected), expected)
    half = expected.copy()
    half[64:] = np.nan
    assert "never written" in lab3._diagnose_kernel(half, expected)
    assert "descriptor bits" in lab3._diagnose_kernel(rng.standard_normal((128, 192)), expected)


# ------------------------------------------------------------------------------------------ on the PTX executor
def test_cuda_solutions_run_on_the_emulator(sol3, wrappers, executor):
    out = accepts(lab3.check_wgmma_asm, sol3["WGMMA"], seeds=None)
    assert out.count("✓ ran on the emulator") == 4, out
    out = accepts(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + sol3["LAB3_KERNEL"], seeds=None,
                  kernel=sol3["LAB3_KERNEL"])
    assert "not timed: the emulator does not time kernels): M=128, N=192, K=320" in out and "timed on" not in out


def _kernel(sol3, wrappers, change):
    kernel = swap(sol3["LAB3_KERNEL"], *change)
    return wrappers + sol3["WGMMA"] + kernel, kernel


@pytest.mark.parametrize("change, needles", [
    (("32u * k", "16u * k"), ("differ",)),  # the 16-byte K step: nothing in the protocol shows it
    (("    hopper::wgmma_commit();\n", ""), ("differ|never committed", "never committed")),
    ((WAIT0, "    hopper::wgmma_wait<1>();\n"), ("differ|released the stage on empty", "wait_group 0")),
    (("((j / STAGES) & 1) ^ 1", "(j / STAGES) & 1"), ("deadlock", "first wait on empty is for parity 0")),
])
def test_kernel_mistakes_are_rejected_by_the_run(sol3, wrappers, executor, change, needles):
    source, kernel = _kernel(sol3, wrappers, change)
    rejected_by_the_run(lab3.check_gemm_kernel, source, *needles, kernel=kernel)


def test_missing_wgmma_fence_is_rejected_by_the_run(sol3, wrappers, executor):
    """ptxas serializes the wgmmas of a kernel without a fence (C7519 in its log), so on the H100 the C comes out
    right; on the emulator the run is in hazard mode, which names the wgmma issued with no fence before it."""
    source, kernel = _kernel(sol3, wrappers, ("    hopper::wgmma_fence();\n", ""))
    text = rejected_by_the_run(lab3.check_gemm_kernel, source, "issued without wgmma.fence", kernel=kernel)
    assert "before any wgmma.fence" in text  # the PTX's explanation follows the run's failure


def test_missing_wgmma_fence_passes_a_plain_run_and_fails_on_the_ptx(sol3, wrappers, executor, monkeypatch):
    """Without hazard mode (as on the H100, where the run comes out right) the PTX still fails it."""
    monkeypatch.setenv("HELPERS_EXECUTOR_HAZARDS", "0")
    source, kernel = _kernel(sol3, wrappers, ("    hopper::wgmma_fence();\n", ""))
    text = rejects(lab3.check_gemm_kernel, source, "before any wgmma.fence", "the run above gave the right result",
                   seeds=None, kernel=kernel)
    assert "ran on the emulator" not in text.split("\n", 1)[0]


@pytest.mark.parametrize("change, needle", [
    (('"l"(desc_a), "l"(desc_b)', '"l"(desc_b), "l"(desc_a)'), "the A descriptor comes first"),
    (('"+f"(d[0]), "+f"(d[1])', '"+f"(d[1]), "+f"(d[0])'), r"d\[0\] … d\[31\], in order"),
    (("setp.ne.b32 p, %34, 0;", "setp.eq.b32 p, %34, 0;"), "scale"),
])
def test_wgmma_asm_mistakes_are_rejected_by_the_run(sol3, executor, change, needle):
    text = rejected_by_the_run(lab3.check_wgmma_asm, swap(sol3["WGMMA"], *change), "differ", needle)
    assert "what the PTX shows" in text


# ------------------------------------------------------------------------------------------ on an H100
@pytest.mark.gpu
def test_gpu_wgmma_asm_matches_the_header(sol3):
    accepts(lab3.check_wgmma_asm, sol3["WGMMA"], seeds=None)


@pytest.mark.gpu
def test_gpu_kernel_passes_and_is_timed(sol3, wrappers):
    out = accepts(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + sol3["LAB3_KERNEL"], seeds=None)
    print(out)
    assert f"✓ ran on {gpu.where_name()}: M=128, N=192, K=320" in out, out
    assert f"✓ timed on {gpu.where_name()} at 4096³" in out, out


@pytest.mark.gpu
def test_gpu_kernel_16_byte_step_fails(sol3, wrappers):
    kernel = swap(sol3["LAB3_KERNEL"], "32u * k", "16u * k")
    rejected_on_the_h100 = rejects(lab3.check_gemm_kernel, wrappers + sol3["WGMMA"] + kernel, "differ", seeds=None,
                                   benchmark=False)
    assert f"ran on {gpu.where_name()}" in rejected_on_the_h100.split("\n", 1)[0]
