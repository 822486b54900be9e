"""Speed targets (pytest-benchmark; run with --benchmark-enable to time them):
64x64 bf16 swizzled TMA load < 5 ms, m64n256k16 WGMMA < 20 ms, 128-step pipeline < 1 s."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from helpers.hopper import pipeline as pl
from helpers.hopper import tensormap as tm
from helpers.hopper import tma
from helpers.hopper import wgmma as wg
from helpers.hopper.tensormap import DataType, Swizzle


def test_bench_tma_load_64x64_bf16_128b(benchmark):
    g = np.random.default_rng(0).standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    m = tm.for_matrix((256, 256), DataType.BFLOAT16, 64, 64, Swizzle.B128)
    img = benchmark(tma.load_tile, m, g, (64, 128))
    assert img.size == 8192


def test_bench_wgmma_m64n256k16(benchmark):
    rng = np.random.default_rng(0)
    smem = np.zeros(64 * 1024, np.uint8)
    wg.write_kmajor_tile(smem, 0, rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16))
    wg.write_kmajor_tile(smem, 8192, rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16))
    acc = rng.standard_normal((128, 128)).astype(np.float32)
    da = wg.make_descriptor(0, 16, 1024, Swizzle.B128)
    db = wg.make_descriptor(8192, 16, 1024, Swizzle.B128)
    out = benchmark(wg.mma_async, smem, da, db, 256, acc)
    assert out.shape == (128, 128)


def test_bench_pipeline_128_steps(benchmark):
    def run():
        return pl.standard_pipeline(k_steps=128, stages=4).run()

    trace = benchmark(run)
    assert len([e for e in trace if e.kind == "read"]) == 512
