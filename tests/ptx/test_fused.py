"""The fused Lab 5 kernel (bench/kernels/lab5_fused.cu) on the PTX executor: D bit for bit what the numpy model
(helpers.hopper.fused) gives from the H100's fp32 accumulators, at a shape with partial tiles in M and N, with
no hazard; β = 0 never reads C; the launcher with the programmatic-dependent-launch attribute runs the same."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import h100_gemm

from helpers import gpu
from helpers.gpu import TensorMapArg, gemm
from helpers.hopper import fused

ROOT = Path(__file__).resolve().parents[2]

M, N, K = 136, 264, 128  # 2×2 blocks of 128×256: the second row holds 8 rows, the second column 8 columns


def _inputs(seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = gpu.random_host((M, K), gpu.bfloat16, seed=seed)
    b = gpu.random_host((N, K), gpu.bfloat16, seed=seed + 1)
    c = gpu.random_host((M, N), gpu.bfloat16, seed=seed + 2)
    return a, b, c


def test_numpy_model_matches_the_formulas() -> None:
    x = np.linspace(-12, 12, 200001).astype(np.float32)
    ref = np.tanh(x.astype(np.float64))
    assert np.max(np.abs(fused.tanh_rational(x) - ref)) < 1e-6
    g = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    assert np.max(np.abs(fused.gelu_tanh(x) - g)) < 3e-6
    assert fused.relu(np.float32(np.nan)) == 0 and fused.relu(np.float32(-2)) == 0
    acc = np.array([[1.0, -3.0]], np.float32)
    bits = fused.fused_epilogue(acc, alpha=2.0, beta=0.5, c=np.array([[4.0, 4.0]], gpu.bfloat16),
                                bias=np.array([1.0, 0.5], np.float32), act="relu")
    assert fused.to_bf16(bits.view(gpu.bfloat16).astype(np.float32)).tolist() == [[5.0, 0.0]]
    assert fused.row_reduction_needs(4096) == 16


def test_fused_gelu_f32_bias_is_bit_exact_with_no_hazard() -> None:
    a, b, c = _inputs()
    bias = np.random.default_rng(6).standard_normal(N).astype(np.float32)
    d = np.full((M, N), np.nan, gpu.bfloat16)
    res = gpu.run_on_executor(gemm.fused_kernel("gelu", "f32"), (2, 2), 384, gemm.SMEM_BYTES,
                              TensorMapArg(a, (128, 64)), TensorMapArg(b, (256, 64)), TensorMapArg(c, (64, 64)),
                              TensorMapArg(d, (64, 64)), np.int32(M), np.int32(N), np.int32(K), np.float32(1.25),
                              np.float32(-0.5), bias, check=False)
    assert res.hazards == [], "\n".join(str(h) for h in res.hazards[:3])
    assert res.error is None
    want = fused.fused_epilogue(h100_gemm(a, b), alpha=1.25, beta=-0.5, c=c, bias=bias, act="gelu")
    got = res.arrays[3].view(np.uint16)
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {got.size} elements differ"


@pytest.mark.parametrize("programmatic", [False, True])
def test_fused_relu_bf16_bias_without_c_through_the_launcher(programmatic: bool) -> None:
    """β = 0: C is never loaded (a NaN C changes nothing); bf16 bias; ReLU; launched by gemm.fused_launcher."""
    a, b, _ = _inputs(seed=11)
    bias = gpu.random_host((N,), gpu.bfloat16, seed=17)
    da, db, dbias = gpu.to_device(a), gpu.to_device(b), gpu.to_device(bias)
    dc = gpu.poison((M, N), gpu.bfloat16)  # NaN: must not reach D
    dd = gpu.poison((M, N), gpu.bfloat16)
    run = gemm.fused_launcher(gemm.fused_kernel("relu", "bf16"), da, db, dc, dd, alpha=0.75, beta=0.0, bias=dbias,
                              programmatic=programmatic)
    assert run.programmatic is programmatic
    run()
    got = dd.to_host().view(np.uint16)
    want = fused.fused_epilogue(h100_gemm(a, b), alpha=0.75, bias=bias, act="relu")
    assert np.array_equal(got, want)


def test_plain_lab5_launcher_gives_the_h100_bits() -> None:
    a, b, _ = _inputs(seed=21)
    da, db = gpu.to_device(a), gpu.to_device(b)
    dc = gpu.poison((M, N), gpu.bfloat16)
    gemm.lab5_launcher(gpu.compile((gemm.KERNELS_DIR / "lab5_epilogue.cu").read_text(), "lab5_gemm"), da, db, dc)()
    assert np.array_equal(dc.to_host().view(np.uint16), fused.fused_epilogue(h100_gemm(a, b)))


def test_fused_source_rejects_unknown_choices() -> None:
    with pytest.raises(ValueError):
        gemm.fused_source("swish", "f32")
    with pytest.raises(ValueError):
        gemm.fused_source("gelu", "f16")


_RELOAD_WAIT = "        hopper::tma_store_wait_read<0>();\n"
_C_WAIT = ('      hopper::mbar_wait(&cbar[sub % 2], (sub / 2) & 1, "cfull", 2 * c + sub % 2);  '
           "// C's sub-tile has landed\n")


@pytest.mark.parametrize("removed, kind", [(_RELOAD_WAIT, "overwrite-while-read"), (_C_WAIT, "read-before-delivered")])
def test_buffer_reuse_mistakes_are_hazards(removed: str, kind: str) -> None:
    """Loading the next C sub-tile before the store has read the buffer, or reading C before its barrier's phase
    completed: the hazard checker names the mistake."""
    src = gemm.fused_source("gelu", "f32")
    assert removed in src
    a, b, c = _inputs()
    d = np.full((M, N), np.nan, gpu.bfloat16)
    res = gpu.run_on_executor(gpu.compile(src.replace(removed, ""), "lab5_fused"), (2, 2), 384, gemm.SMEM_BYTES,
                              TensorMapArg(a, (128, 64)), TensorMapArg(b, (256, 64)), TensorMapArg(c, (64, 64)),
                              TensorMapArg(d, (64, 64)), np.int32(M), np.int32(N), np.int32(K), np.float32(1),
                              np.float32(1), np.zeros(N, np.float32), check=False)
    assert res.hazards and res.hazards[0].kind == kind, [h.kind for h in res.hazards]
    assert isinstance(res.error, gpu.HazardError)


def test_the_capture_scripts_unfused_path_is_the_model_on_the_rounded_product():
    """tools/h100/fused.py's unfused path (Lab 5's bf16 product, then its elementwise kernel) on the executor: the
    model's bits with the product rounded to bf16 first; its fused path: the model's bits."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fused_capture", ROOT / "tools" / "h100" / "fused.py")
    capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(capture)
    ks = capture.kernels()
    a, b, c = _inputs(seed=41)
    bias = np.random.default_rng(43).standard_normal(N).astype(np.float32)
    da, db, dc, dbias = gpu.to_device(a), gpu.to_device(b), gpu.to_device(c), gpu.to_device(bias)
    dg, du = gpu.poison((M, N), gpu.bfloat16), gpu.poison((M, N), gpu.bfloat16)
    gemm.lab5_launcher(ks["lab5"], da, db, dg)()
    capture.elementwise_launcher(ks["elementwise"], dg, dc, dbias, du, 1.0, 1.0)()
    acc = h100_gemm(a, b)
    want = fused.fused_epilogue(fused.to_bf16(acc), beta=1.0, c=c, bias=bias, act="gelu")
    assert np.array_equal(du.to_host().view(np.uint16), want)
    assert capture.cpu_check(ks) == 0
