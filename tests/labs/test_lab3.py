"""Lab 3 (WGMMA) graders, both ways: the solution passes; stubs and plausible wrong answers fail with a helpful
message. The solution is taken from solutions/lab3_wgmma.ipynb itself, so the tests follow the notebook.

Tests marked ``gpu`` run the kernel on an H100 (run them with ``pytest -m gpu tests/labs/test_lab3.py -s`` to see
the TFLOP/s beside cuBLAS); elsewhere they are skipped.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import grading, wgmma
from helpers.checks import lab3

ROOT = Path(__file__).resolve().parents[2]


def _stub(*_args, **_kwargs):
    raise NotImplementedError("write it")


@functools.cache
def _script():
    """tests/labs/gpu_lab3.py (the H100 script): the solution loader and the wrong kernels."""
    spec = importlib.util.spec_from_file_location("gpu_lab3", Path(__file__).with_name("gpu_lab3.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sol() -> dict:
    """The solution notebook's definitions (every code cell except the graded checks)."""
    return _script().solution_namespace()


def _fails(check, student, *, match: str, capsys=None) -> str:
    with pytest.raises(grading.CheckFailed) as info:
        check(student)
    msg = str(info.value)
    assert re.search(match, msg, re.I | re.S), msg
    return msg


# ------------------------------------------------------------------------------------------- 1 · descriptor
def test_descriptor_solution_passes(sol):
    lab3.check_descriptor(sol["encode_desc"])


def test_descriptor_matches_the_emulator_and_the_header(sol):
    from helpers.tensormap import Swizzle

    for start, lbo, sbo in [(0x7400, 16, 1024), (0x10, 0x3FFF0, 0x20), (0x3FFF0, 0x100, 0x3FFF0)]:
        for sw, mode in ((0, Swizzle.NONE), (32, Swizzle.B32), (64, Swizzle.B64), (128, Swizzle.B128)):
            assert sol["encode_desc"](start, lbo, sbo, sw) == wgmma.make_descriptor(start, lbo, sbo, mode)
    header = (ROOT / "helpers" / "include" / "hopper.cuh").read_text()
    assert "swizzle_bytes == 128 ? 1ull : swizzle_bytes == 64 ? 2ull : swizzle_bytes == 32 ? 3ull" in header


def test_descriptor_stub_fails():
    _fails(lab3.check_descriptor, _stub, match="not written yet")


def test_descriptor_lbo_sbo_swapped_fails():
    def swapped(start, lbo, sbo, swizzle):
        return lab3.reference_descriptor(start, sbo, lbo, swizzle)

    _fails(lab3.check_descriptor, swapped, match="LBO and SBO are swapped")


def test_descriptor_without_shift_fails():
    def unshifted(start, lbo, sbo, swizzle):
        return start | lbo << 16 | sbo << 32 | {0: 0, 128: 1, 64: 2, 32: 3}[swizzle] << 62

    _fails(lab3.check_descriptor, unshifted, match="shift start, LBO and SBO right by 4")


def test_descriptor_wrong_swizzle_modes_fail():
    # the TMA enum's numbers (128B = 3), and the "obvious" increasing order (32B = 1, 128B = 3)
    for table in ({0: 0, 32: 1, 64: 2, 128: 3}, {0: 0, 128: 3, 64: 2, 32: 1}):
        def wrong(start, lbo, sbo, swizzle, table=table):
            return lab3.reference_descriptor(start, lbo, sbo, 0) | table[swizzle] << 62

        _fails(lab3.check_descriptor, wrong, match="bits 62-63")


def test_descriptor_hard_coded_fails():
    _fails(lab3.check_descriptor, lambda *a: 0x4000004000010740, match="expected")


def test_descriptor_float_fails():
    _fails(lab3.check_descriptor, lambda *a: float(lab3.reference_descriptor(*a)), match="int")


# ------------------------------------------------------------------------------------------- 2 · K slices
def test_kslice_solution_passes(sol):
    lab3.check_kslice_descriptor(sol["kslice_desc"])


def test_kslice_16_byte_step_fails():
    _fails(lab3.check_kslice_descriptor, lambda tile, k: lab3.reference_descriptor(tile + 16 * k, 16, 1024, 128),
           match="32 bytes")


def test_kslice_lbo_sbo_swapped_fails():
    _fails(lab3.check_kslice_descriptor, lambda tile, k: lab3.reference_descriptor(tile + 32 * k, 1024, 16, 128),
           match="swapped")


def test_kslice_rows_instead_of_columns_fails():
    # the notes' "B slice = rows 16-31": stepping 16 rows of 128 bytes
    _fails(lab3.check_kslice_descriptor, lambda tile, k: lab3.reference_descriptor(tile + 2048 * k, 16, 1024, 128),
           match="inside each 128-byte row")


def test_kslice_wrong_swizzle_bit_fails():
    _fails(lab3.check_kslice_descriptor,
           lambda tile, k: lab3.reference_descriptor(tile + 32 * k, 16, 1024, 0) | 1 << 63, match="bit 62 set")


def test_kslice_same_slice_every_time_fails():
    _fails(lab3.check_kslice_descriptor, lambda tile, k: lab3.reference_descriptor(tile, 16, 1024, 128),
           match="slice 0")


def test_kslice_hard_coded_tile_fails():
    _fails(lab3.check_kslice_descriptor, lambda tile, k: lab3.reference_kslice_descriptor(0, k), match="expected")


def test_kslice_stub_fails():
    _fails(lab3.check_kslice_descriptor, _stub, match="not written yet")


# ------------------------------------------------------------------------------------------- 3 · fragments
def test_fragment_solution_passes(sol):
    lab3.check_fragment_coords(sol["fragment_coords"])


def test_fragment_matches_the_emulator(sol):
    for t in range(128):
        for j in range(32):
            assert sol["fragment_coords"](t, j) == wgmma.element_of(t, j, 64)


def test_fragment_transposed_fails():
    def transposed(t, j):
        r, c = lab3.reference_fragment_coords(t, j)
        return c, r

    _fails(lab3.check_fragment_coords, transposed, match="transposed")


def test_fragment_thread_instead_of_lane_fails():
    def thread_not_lane(t, j):
        return 16 * (t // 32) + t // 4 + 8 * ((j // 2) % 2), 8 * (j // 4) + 2 * (t % 4) + j % 2

    _fails(lab3.check_fragment_coords, thread_not_lane, match=r"lane \(t % 32\)")


def test_fragment_row_and_column_halves_mixed_up_fails():
    # registers 2,3 taken as the next 8 columns and registers 4..7 as the lower 8 rows
    def mixed(t, j):
        w, lane = divmod(t, 32)
        return 16 * w + lane // 4 + 8 * ((j // 4) % 2), 16 * (j // 8) + 8 * ((j // 2) % 2) + 2 * (lane % 4) + j % 2

    _fails(lab3.check_fragment_coords, mixed, match="row of every")


def test_fragment_not_a_pair_fails():
    _fails(lab3.check_fragment_coords, lambda t, j: t * 32 + j, match="pair of ints")


def test_fragment_stub_fails():
    _fails(lab3.check_fragment_coords, _stub, match="not written yet")


# ------------------------------------------------------------------------------------------- 4 · one product
def _one_product_with(sol, kslice, transpose=False, fixed_k=None):
    def one_product(smem, a_addr, b_addr, k):
        kk = k if fixed_k is None else fixed_k
        frags = wgmma.mma_async(smem, kslice(a_addr, kk), kslice(b_addr, kk), 64)
        tile = wgmma.fragments_to_tile(frags, 64)
        return tile.T if transpose else tile

    return one_product


def test_one_product_solution_passes(sol):
    lab3.check_one_product(sol["one_product"])


def test_one_product_16_byte_step_fails(sol):
    def k16(tile, k):
        return lab3.reference_descriptor(tile + 16 * k, 16, 1024, 128)

    _fails(lab3.check_one_product, _one_product_with(sol, k16), match="16 bf16 = 32 bytes")


def test_one_product_transposed_fails(sol):
    _fails(lab3.check_one_product, _one_product_with(sol, lab3.reference_kslice_descriptor, transpose=True),
           match="transposed")


def test_one_product_always_slice_0_fails(sol):
    # k is drawn from 0..3 three times without repeats, so at least two draws are not slice 0
    _fails(lab3.check_one_product, _one_product_with(sol, lab3.reference_kslice_descriptor, fixed_k=0),
           match="slice 0's product")


def test_one_product_swapped_descriptors_fail(sol):
    _fails(lab3.check_one_product,
           _one_product_with(sol, lambda tile, k: lab3.reference_descriptor(tile + 32 * k, 1024, 16, 128)),
           match="LBO and SBO swapped")


def test_one_product_stub_fails():
    _fails(lab3.check_one_product, _stub, match="not written yet")


# ------------------------------------------------------------------------------------------- 5 · the store
def test_store_solution_passes(sol):
    lab3.check_store_tile(sol["store_tile"])


def test_store_transposed_fails():
    def transposed(acc, C, m0, n0):
        C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64).T

    _fails(lab3.check_store_tile, transposed, match="transposed")


def test_store_column_major_as_in_the_notes_fails():
    # the notes store C column-major: C[(n0 + col) * M + m0 + row]
    def column_major(acc, C, m0, n0):
        M = C.shape[0]
        flat = C.reshape(-1)
        for t in range(128):
            for j in range(32):
                r, c = lab3.reference_fragment_coords(t, j)
                flat[(n0 + c) * M + m0 + r] = acc[t, j]

    _fails(lab3.check_store_tile, column_major, match="column-major|outside the tile|raised")


def test_store_half_the_registers_fails():
    def evens(acc, C, m0, n0):
        for t in range(128):
            for j in range(0, 32, 2):
                r, c = lab3.reference_fragment_coords(t, j)
                C[m0 + r, n0 + c] = acc[t, j]

    _fails(lab3.check_store_tile, evens, match="NaN")


def test_store_outside_the_tile_fails():
    def spills_over(acc, C, m0, n0):
        C[m0:m0 + 64, :] = 0.0
        C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64)

    _fails(lab3.check_store_tile, spills_over, match="outside the tile")


def test_store_stub_fails():
    _fails(lab3.check_store_tile, _stub, match="not written yet")


# ------------------------------------------------------------------------------------------- 6 · whole GEMM
def _gemm_with(kslice, reset_each_step=False, first_tile_only=False):
    def emulated_gemm(A, B, C):
        (M, K), N = A.shape, B.shape[0]
        for m0 in range(0, 64 if first_tile_only else M, 64):
            for n0 in range(0, N, 64):
                acc = np.zeros((128, 32), np.float32)
                for k0 in range(0, K, 64):
                    if reset_each_step:
                        acc = np.zeros((128, 32), np.float32)
                    smem = lab3.stage_image(A, B, m0, n0, k0)
                    for k in range(4):
                        acc = wgmma.mma_async(smem, kslice(0, k), kslice(8192, k), 64, acc)
                C[m0:m0 + 64, n0:n0 + 64] = wgmma.fragments_to_tile(acc, 64)

    return emulated_gemm


def test_gemm_solution_passes(sol):
    lab3.check_emulated_gemm(sol["emulated_gemm"])


def test_gemm_reference_pieces_pass():
    lab3.check_emulated_gemm(_gemm_with(lab3.reference_kslice_descriptor))


def test_gemm_16_byte_step_fails():
    _fails(lab3.check_emulated_gemm, _gemm_with(lambda t, k: lab3.reference_descriptor(t + 16 * k, 16, 1024, 128)),
           match="differ")


def test_gemm_accumulators_reset_every_k_step_fails():
    _fails(lab3.check_emulated_gemm, _gemm_with(lab3.reference_kslice_descriptor, reset_each_step=True),
           match="only the last K step")


def test_gemm_missing_tiles_fail():
    _fails(lab3.check_emulated_gemm, _gemm_with(lab3.reference_kslice_descriptor, first_tile_only=True),
           match="never written")


def test_gemm_shapes_are_random_and_non_square():
    rng = np.random.default_rng(7)
    shapes = {lab3._random_shape(rng) for _ in range(50)}
    assert len(shapes) > 10
    for m, n, k in shapes:
        assert m % 64 == n % 64 == k % 64 == 0 and m != n and k != n and k >= 128


def test_gemm_stub_fails():
    _fails(lab3.check_emulated_gemm, _stub, match="not written yet")


# ------------------------------------------------------------------------------------------- 7 · the kernel
@pytest.fixture()
def no_gpu(monkeypatch):
    from helpers.gpu import device

    monkeypatch.setattr(device, "_probe", lambda: ("no NVIDIA driver (pretend, for the test)", None))
    monkeypatch.setenv("HELPERS_EXECUTOR", "off")  # the compile-only path (tests/ptx runs kernels on the emulator)


def test_kernel_compiles_and_reports_without_gpu(sol, no_gpu, capsys):
    lab3.check_gemm_kernel(sol["GEMM_SRC"])
    out = capsys.readouterr().out
    assert "compiled for sm_90a" in out and "wgmma" in out and "0 spills" in out
    assert "run skipped: no sm_90 GPU" in out
    assert out.count("run skipped") == 1


def test_kernel_stub_fails(sol, no_gpu):
    from helpers.labgen import _clear_regions

    student, regions = _clear_regions(sol["GEMM_SRC"], "kernel", markdown=False)
    assert regions == 3 and student.count("#error") == 3
    _fails(lab3.check_gemm_kernel, student, match="not written yet")


def test_kernel_without_wgmma_fails(sol, no_gpu):
    src = sol["GEMM_SRC"]
    start, end = src.index("hopper::wgmma_fence();"), src.index("hopper::wgmma_wait<0>();")
    src = src[:start] + "d[0] += 1.0f;" + src[end + len("hopper::wgmma_wait<0>();"):]
    _fails(lab3.check_gemm_kernel, src, match="wgmma.mma_async m64n64k16")


def test_kernel_compile_error_is_reported(sol, no_gpu):
    src = sol["GEMM_SRC"].replace("hopper::wgmma_commit();", "hopper::wgmma_commit()")
    _fails(lab3.check_gemm_kernel, src, match="does not compile")


def test_kernel_failure_diagnoses():
    rng = np.random.default_rng(3)
    expected = rng.standard_normal((128, 192))
    assert "transposed" in lab3._diagnose_kernel(lab3._tiles_transposed(expected), expected)
    half = expected.copy()
    half[64:] = np.nan
    assert "never written" in lab3._diagnose_kernel(half, expected)
    assert "descriptor bits" in lab3._diagnose_kernel(rng.standard_normal((128, 192)), expected)


@pytest.mark.gpu
def test_gpu_kernel_solution_passes_and_is_timed(sol, capsys):
    lab3.check_gemm_kernel(sol["GEMM_SRC"], benchmark=True, size=4096)
    out = capsys.readouterr().out
    print(out)
    m = re.search(r"4096×4096×4096: (\d+) TFLOP/s.*cuBLAS (\d+) TFLOP/s", out)
    assert m, out
    assert int(m.group(1)) >= 200, out


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(_script().wrong_kernels(_script().solution_namespace()["GEMM_SRC"])))
def test_gpu_kernel_wrong_answers_fail(sol, name):
    src, pattern = _script().wrong_kernels(sol["GEMM_SRC"])[name]
    _fails(lambda s: lab3.check_gemm_kernel(s, benchmark=False), src, match=pattern)
