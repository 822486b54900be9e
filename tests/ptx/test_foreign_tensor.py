"""Kernels in the idioms of public code around the warp-level tensor cores (tests/ptx/foreign_tensor.py) run on the
executor unchanged and give the exact answer; the fast-exp2 softmax lands within the bound the executor states."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from foreign_tensor import AMPERE_GEMM, CG_PIPELINE, SOFTMAX_EXP2, WMMA_GEMM, cases, softmax_inputs

from helpers import gpu
from helpers.gpu import compiler

CASES = cases()


def _has_mma_h() -> bool:
    import os

    return any(os.path.exists(os.path.join(d, "crt", "mma.h")) for d in compiler.include_dirs())


@pytest.mark.parametrize("name", list(CASES))
def test_public_tensor_idiom_runs_exactly(name: str) -> None:
    if "wmma" in name and not _has_mma_h():
        pytest.skip("<mma.h> needs crt/mma.h: pip install nvidia-cuda-crt")
    _shape, run, want = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run()
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize(("src", "name", "ptx"), [
    (AMPERE_GEMM, "ampere_gemm", ("cp.async.cg.shared.global", "cp.async.wait_group 1",
                                  "ldmatrix.sync.aligned.x4.m8n8.shared.b16",
                                  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")),
    (WMMA_GEMM, "wmma_gemm", ("wmma.load.a.sync.aligned.row.m16n16k16", "wmma.mma.sync.aligned.row.col.m16n16k16")),
    (CG_PIPELINE, "cg_pipeline", ("cp.async",)),
])
def test_each_idiom_leaves_its_instructions(src: str, name: str, ptx: tuple[str, ...]) -> None:
    if name == "wmma_gemm" and not _has_mma_h():
        pytest.skip("<mma.h> needs crt/mma.h: pip install nvidia-cuda-crt")
    text = gpu.compile(src, name).ptx
    missing = [p for p in ptx if not re.search(re.escape(p), text)]
    assert not missing, missing


def test_fast_exp2_softmax_is_within_the_stated_bound_and_says_so() -> None:
    from helpers.gpu.executor.errors import ApproximationWarning

    x = softmax_inputs()
    k = gpu.compile(SOFTMAX_EXP2, "softmax_exp2")
    dy = gpu.poison(x.shape, np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        gpu.launch(k, x.shape[0], 32, 0, gpu.to_device(x), dy, np.int32(x.shape[1]))
    assert any(issubclass(m.category, ApproximationWarning) and "ex2.approx.ftz.f32" in str(m.message) for m in w)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    assert np.allclose(dy.to_host(), e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-9)
