"""ALU numerics: every instruction of the probe kernel (helpers.gpu.executor.probes) run on the executor, element by
element against brute-force references written from the PTX ISA (tests/ptx/reference.py); and the numerics
module's exact fma against exact rationals, ties and every rounding mode included."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from reference import reference, to_f32

from helpers import gpu
from helpers.gpu.executor import numerics as N
from helpers.gpu.executor.probes import ALU_OPS, ALU_PROBE, alu_inputs


@pytest.fixture(scope="module")
def probe_run() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    a, b, c = alu_inputs(768, seed=3)
    n = len(a)
    k = gpu.compile(ALU_PROBE, "alu_probe")
    out = gpu.poison(len(ALU_OPS) * n, np.uint32)
    gpu.launch(k, (n + 127) // 128, 128, 0, gpu.to_device(a), gpu.to_device(b), gpu.to_device(c), out, np.int32(n))
    return a, b, c, out.to_host().reshape(len(ALU_OPS), n)


@pytest.mark.parametrize("k", range(len(ALU_OPS)), ids=[op[0] for op in ALU_OPS])
def test_alu_op_matches_reference(probe_run, k: int) -> None:
    a, b, c, out = probe_run
    name = ALU_OPS[k][0]
    bad = []
    for i in range(len(a)):
        want = reference(name, int(a[i]), int(b[i]), int(c[i]))
        if int(out[k, i]) != want:
            bad.append(f"{name}({a[i]:#010x}, {b[i]:#010x}, {c[i]:#010x}) = {int(out[k, i]):#010x}, want {want:#010x}")
    assert not bad, f"{len(bad)} of {len(a)} wrong, e.g. " + "; ".join(bad[:3])


def _exact_round(x: np.ndarray, y: np.ndarray, z: np.ndarray, mode: str) -> np.ndarray:
    out = []
    for p, q, r in zip(x.tolist(), y.tolist(), z.tolist(), strict=True):
        v = Fraction(p) * Fraction(q) + Fraction(r)
        out.append(to_f32(v, mode) if v != 0 else 0)
    return np.array(out, np.uint32)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("kind", ["random", "bf16", "ties", "tiny", "cancel"])
def test_fma_is_correctly_rounded(mode: str, kind: str) -> None:
    rng = np.random.default_rng(hash((mode, kind)) % 2**32)
    n = 2000
    if kind == "random":
        x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    elif kind == "bf16":  # the course's data: bf16 products added to fp32 sums (many exact fp32 midpoints)
        import ml_dtypes

        x, y = (rng.standard_normal(n).astype(ml_dtypes.bfloat16).astype(np.float32) for _ in range(2))
        z = (rng.standard_normal(n) * 4).astype(np.float32)
    elif kind == "ties":  # a*b has few bits; c a power of two: the fp64 sum lands on fp32 midpoints
        x = (1 + rng.integers(0, 1 << 12, n) / 2.0 ** 12).astype(np.float32)
        y = (1 + rng.integers(0, 1 << 12, n) / 2.0 ** 12).astype(np.float32)
        z = (rng.choice([-1, 1], n) * 2.0 ** rng.integers(-60, -20, n)).astype(np.float32)
    elif kind == "tiny":  # subnormal results
        x = (rng.standard_normal(n) * 2.0 ** -70).astype(np.float32)
        y = (rng.standard_normal(n) * 2.0 ** -70).astype(np.float32)
        z = (rng.standard_normal(n) * 2.0 ** -140).astype(np.float32)
    else:  # c cancels a*b almost exactly
        x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        z = (-(x.astype(np.float64) * y)).astype(np.float32)
    got = N.fma_f32(x, y, z, mode).view(np.uint32)
    want = _exact_round(x, y, z, mode)
    nz = (x.astype(np.float64) * y + z) != 0
    assert np.array_equal(got[nz], want[nz])
    if mode == "rn":  # the fast path the fused fma.rn.f32 takes
        assert np.array_equal(N.fma_rn_fast(x, y, z).view(np.uint32)[nz], want[nz])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_results_are_canonical() -> None:
    inf = np.float32(np.inf)
    r = N.add_f32(np.array([inf, np.nan], np.float32), np.array([-inf, 1], np.float32))
    assert (r.view(np.uint32) == 0x7FFFFFFF).all()
    assert N.fma_f32(np.float32(0), inf, np.float32(1)).view(np.uint32) == 0x7FFFFFFF


def test_conversions() -> None:
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.nan, 3.4e38, 1e-40], np.float32)
    assert N.f32_to_bf16_bits(x).tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7FFF, 0x7F80, 0x0001]
    assert N.f32_to_bf16_bits(x, "rz").tolist()[:3] == [0x3F80, 0x3F80, 0x3F81]
    assert N.f_to_int(np.array([2.5, -2.5, np.nan, 3e9, -3e9]), "rni", np.int32).tolist() == \
        [2, -2, 0, 2**31 - 1, -2**31]
    assert N.f_to_int(np.array([-0.5, 5e9]), "rzi", np.uint32).tolist() == [0, 2**32 - 1]
    big = np.array([2**24 + 1, 2**25 + 3], np.int64)
    assert N.int_to_f32(big, "rz").tolist() == [2.0**24, 2.0**25]
    assert N.int_to_f32(big, "rp").tolist() == [2.0**24 + 2, 2.0**25 + 4]


def test_minmax_nan_and_signed_zero() -> None:
    a = np.array([np.nan, 1.0, -0.0, 0.0, np.nan], np.float32)
    b = np.array([2.0, np.nan, 0.0, -0.0, np.nan], np.float32)
    lo = N.minmax_f(a, b, False)
    assert lo[:2].tolist() == [2.0, 1.0] and np.signbit(lo[2]) and np.signbit(lo[3])
    assert lo.view(np.uint32)[4] == 0x7FFFFFFF
    assert N.minmax_f(a, b, False, nan_propagates=True).view(np.uint32)[:2].tolist() == [0x7FFFFFFF] * 2


def test_fma_store_path_is_fma_rn() -> None:
    """The fused fma.rn.f32 stores the fp64 sum where it rounds correctly: the same fp32 bits as fma_f32, on sums of
    bf16 products (exact fp32 midpoints are frequent there), random values and the probe's special operands."""
    r = np.random.default_rng(5)
    import ml_dtypes

    bf = r.standard_normal((3, 20000)).astype(ml_dtypes.bfloat16).astype(np.float32)
    acc = np.zeros(20000, np.float32)
    for k in range(40):  # running sums of bf16 products, as a CUDA-core GEMM keeps them
        got = np.asarray(N.fma_rn_to_store(bf[0], np.roll(bf[1], k), acc), np.float32)
        want = N.fma_f32(bf[0], np.roll(bf[1], k), acc)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        acc = want
    a, b, c = (x.view(np.float32) for x in alu_inputs(4096, seed=11))
    with np.errstate(all="ignore"):
        got = np.asarray(N.fma_rn_to_store(a, b, c), np.float32)
        want = N.fma_f32(a, b, c)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
