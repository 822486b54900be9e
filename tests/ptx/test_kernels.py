"""The course's kernels on the executor, against numpy: the labs' solutions, the bench kernel, the demo kernels
(with the same failure sentences as the GPU path), a Lab 4-style warp-specialized GEMM; and the wrong answers the
issue lists, each rejected without a GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import gemm_operands, h100_gemm, launch_gemm
from kernels import (
    LAB2_GEMM,
    LAB2_RAW_SPIN,
    LAB2_RELEASE_BEFORE_READ,
    LAB2_WRONG_PARITY,
    WS_GEMM,
    ws_smem,
)

from helpers import gpu
from helpers.course import labgen
from helpers.gpu import examples
from helpers.gpu.executor import numerics as N

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sol() -> dict:
    out = {}
    for nb in ("lab1_tma", "lab2_mbarrier", "lab3_wgmma"):
        out.update(labgen.solution_namespace(ROOT / "solutions" / f"{nb}.ipynb"))
    # each lab's kernel as its grader compiles it: the header, the wrappers carried from the labs before, the kernel
    out["lab1"] = '#include "hopper.cuh"\n' + out["TMA_LOAD"] + out["LAB1_KERNEL"]
    wrappers = '#include "hopper.cuh"\n' + out["TMA_LOAD"] + out["MBAR_INIT_ARRIVE"] + out["MBAR_TX_WAIT"]
    out["lab2"] = wrappers + out["LAB2_KERNEL"]
    out["lab3"] = wrappers + out["WGMMA"] + out["LAB3_KERNEL"]
    return out


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


# ------------------------------------------------------------------------------------------- Lab 1
def test_lab1_copy_kernel_copies_bit_for_bit(sol: dict) -> None:
    k = gpu.compile(sol["lab1"], "lab1_copy")
    rows, cols = 128, 192
    a = gpu.random_host((rows, cols), gpu.bfloat16, seed=4).view(np.uint16)
    da = gpu.to_device(a)
    out = gpu.poison((rows, cols), np.uint16)
    gpu.launch(k, (cols // 64, rows // 64), 128, 0, gpu.tensor_map_2d(da, 64, 64), da, out, np.int32(cols))
    assert np.array_equal(out.to_host(), a)


def test_lab1_copy_that_ignores_the_swizzle_is_wrong(sol: dict) -> None:
    src = sol["lab1"].replace("8 * ((c / 8) ^ (r % 8)) + c % 8", "c")
    assert src != sol["lab1"]
    k = gpu.compile(src, "lab1_copy")
    a = gpu.random_host((64, 64), gpu.bfloat16, seed=5).view(np.uint16)
    da = gpu.to_device(a)
    out = gpu.poison((64, 64), np.uint16)
    gpu.launch(k, (1, 1), 128, 0, gpu.tensor_map_2d(da, 64, 64), da, out, np.int32(64))
    got = out.to_host()
    assert not np.array_equal(got, a)
    assert np.array_equal(got[0], a[0]) and not np.array_equal(got[1], a[1])  # row 0 is the only unswizzled one


# ------------------------------------------------------------------------------------------- Lab 2
def test_lab2_solution_kernel_against_fp64(sol: dict) -> None:
    a, b, c = _lab2(sol["lab2"], 128, 64, 192)
    assert np.allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, atol=1e-3, rtol=1e-4)


def _fma_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What LAB2_GEMM computes: per output, fmaf over k in order, from 0 (exactly rounded fma)."""
    af, bf = a.astype(np.float32), b.astype(np.float32)
    acc = np.zeros((a.shape[0], b.shape[0]), np.float32)
    for kk in range(a.shape[1]):
        acc = N.fma_f32(af[:, kk:kk + 1], bf[None, :, kk], acc)
    return acc


def _lab2(src: str, m: int = 64, n: int = 64, k: int = 192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kern = gpu.compile(src, "lab2_gemm")
    a, b = gemm_operands(m, n, k, seed=7)
    return a, b, launch_gemm(kern, a, b, (n // 64, m // 64), 128, 0)


def test_lab2_gemm_two_stage_load_loop_is_exact() -> None:
    a, b, c = _lab2(LAB2_GEMM, 128, 64, 192)
    assert np.array_equal(_bits(c), _bits(_fma_gemm(a, b)))


def test_lab2_empty_wait_with_the_wrong_parity_deadlocks_naming_empty() -> None:
    with pytest.raises(gpu.KernelDeadlock) as e:
        _lab2(LAB2_WRONG_PARITY)
    assert str(e.value).startswith("deadlock: block (0,0) warp 0 waited on empty[0] for parity 0 (thread 0; gave up "
                                   "after 2.0e+09 cycles). That phase never completed")
    assert "[kernel lab2_gemm (grid (1, 1, 1), block (128, 1, 1), 0 B dynamic smem)]" in str(e.value)


def test_lab2_stage_released_before_it_is_read_gives_wrong_numbers() -> None:
    a, b, c = _lab2(LAB2_RELEASE_BEFORE_READ, 64, 64, 256)
    assert not np.allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, atol=1e-2)


def test_raw_spin_on_a_barrier_is_reported_as_a_deadlock_naming_it() -> None:
    with pytest.raises(gpu.KernelDeadlock, match=r"deadlock: block \(0,0\) warp \d waited on (empty|full)\[0\] for "
                                                  r"parity 0"):
        _lab2(LAB2_RAW_SPIN)


# ------------------------------------------------------------------------------------------- Lab 3 and the bench kernel
def _lab3(src: str, m: int = 128, n: int = 192, k: int = 192) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kern = gpu.compile(src, "lab3_gemm")
    a, b = gemm_operands(m, n, k, seed=8)
    return a, b, launch_gemm(kern, a, b, (n // 64, m // 64), 128, 0)


def test_lab3_gemm_is_bit_exact_with_the_h100_numerics(sol: dict) -> None:
    a, b, c = _lab3(sol["lab3"])
    assert np.array_equal(_bits(c), _bits(h100_gemm(a, b)))


@pytest.mark.parametrize("mistake, edit", [
    ("16-byte K step", ("32u * k", "16u * k")),
    ("missing commit", ("hopper::wgmma_commit();", "")),
    ("missing wait", ("hopper::wgmma_wait<0>();", "")),
    ("LBO/SBO swapped", ("(unsigned long long)(16 >> 4) << 16;\n  desc |= (unsigned long long)(1024 >> 4) << 32;",
                         "(unsigned long long)(1024 >> 4) << 16;\n  desc |= (unsigned long long)(16 >> 4) << 32;")),
])
def test_lab3_mistakes_give_wrong_numbers(sol: dict, mistake: str, edit: tuple[str, str]) -> None:
    src = sol["lab3"]
    assert edit[0] in src, mistake
    a, b, c = _lab3(src.replace(*edit), 64, 64, 128)
    assert not np.allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, atol=1e-2), mistake


def test_bench_gemm_64x64_is_bit_exact() -> None:
    kern = gpu.compile((ROOT / "bench" / "kernels" / "gemm_64x64.cu").read_text(), "gemm_64x64")
    a, b = gemm_operands(128, 128, 128, seed=9)
    c = launch_gemm(kern, a, b, (2, 2), 128, 0)
    assert np.array_equal(_bits(c), _bits(h100_gemm(a, b)))


# ------------------------------------------------------------------------------------------- Lab 4 style
@pytest.mark.parametrize("bn", [128, 256])
def test_warp_specialized_gemm_with_setmaxnreg(bn: int) -> None:
    stages = 4 if bn == 128 else 3
    src = f"#define BN {bn}\n#define STAGES {stages}\n#define CONSUMER_REGS {232 if bn == 128 else 240}\n" \
          f"#define PRODUCER_REGS {40 if bn == 128 else 24}\n" + WS_GEMM
    kern = gpu.compile(src, "ws_gemm")
    assert kern.report.uses_setmaxnreg and not kern.report.setmaxnreg_ignored
    a, b = gemm_operands(256, 256, 320, seed=10)
    c = launch_gemm(kern, a, b, (256 // bn, 2), 384, ws_smem(bn, stages), box_a=(128, 64), box_b=(bn, 64))
    assert np.array_equal(_bits(c), _bits(h100_gemm(a, b)))


def test_register_budget_that_does_not_add_up_is_a_deadlock_naming_setmaxnreg() -> None:
    src = "#define BN 256\n#define STAGES 3\n#define CONSUMER_REGS 240\n#define PRODUCER_REGS 40\n" + WS_GEMM
    kern = gpu.compile(src, "ws_gemm")
    a, b = gemm_operands(128, 256, 64, seed=11)
    with pytest.raises(gpu.KernelDeadlock, match="setmaxnreg.inc to 240 registers per thread.*must add up"):
        launch_gemm(kern, a, b, (1, 1), 384, ws_smem(256, 3), box_a=(128, 64), box_b=(256, 64))


# ------------------------------------------------------------------------------------------- the demo kernels
def test_demo_vector_add() -> None:
    r = examples.vector_add_demo(1000, seed=3)
    want = N.fma_f32(np.float32(2.0), r["b"], r["a"])
    assert np.array_equal(_bits(r["c"]), _bits(want))


def test_demo_deadlock_sentence_is_the_gpu_paths() -> None:
    with pytest.raises(gpu.KernelDeadlock) as e:
        examples.deadlock_demo()
    assert str(e.value) == (
        "deadlock: block (3,0) warp 0 waited on full[2] for parity 0 (thread 0; gave up after 2.0e+09 cycles). That "
        "phase never completed: check the barrier's arrival count, the bytes expected with expect_tx, and the parity "
        "you wait for. [kernel stuck (grid (8, 1, 1), block (256, 1, 1), 0 B dynamic smem)]")


@pytest.mark.parametrize("demo, error, line", [
    ("out_of_bounds_demo", "CUDA_ERROR_ILLEGAL_ADDRESS", 3),
    ("misaligned_demo", "CUDA_ERROR_MISALIGNED_ADDRESS", 4),
])
def test_demo_faults_give_the_gpu_sentence_and_the_line(demo: str, error: str, line: int) -> None:
    from helpers.gpu import diagnostics

    with pytest.raises(gpu.KernelFault) as e:
        getattr(examples, demo)()
    msg = str(e.value)
    name = {"out_of_bounds_demo": "oob", "misaligned_demo": "misaligned"}[demo]

    class Err:
        pass

    err = Err()
    err.name = error  # type: ignore[attr-defined]
    assert msg.startswith(f"kernel {name} (grid (1, 1, 1), block (32, 1, 1), 0 B dynamic smem) failed: "
                          f"{diagnostics.describe_error(err)}. On the emulator: ")
    assert f"at line {line} of the CUDA source" in msg and "block (0,0), thread 0" in msg
    assert not isinstance(e.value, gpu.KernelDeadlock)
