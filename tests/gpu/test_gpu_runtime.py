"""GPU tests (need an sm_90 GPU; `make gpu-test`). Random inputs, poisoned outputs, every element checked."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from helpers import gpu
from helpers.gpu import examples

pytestmark = pytest.mark.gpu

TMA_COPY = r"""
#include "hopper.cuh"
// Loads one box of `in` at (c0, c1) with TMA into shared memory, writes it to `out` (box-sized, row-major)
// with ordinary stores, and stores it back through `map_out` at (c1, c0) with a TMA store.
extern "C" __global__ void tma_copy(const __grid_constant__ CUtensorMap map_in,
                                    const __grid_constant__ CUtensorMap map_out, unsigned short* out,
                                    int c0, int c1, int box_rows, int box_cols) {
  __shared__ alignas(1024) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long full;
  if (threadIdx.x == 0) { hopper::mbar_init(&full, 1); hopper::mbar_fence_init(); }
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbar_arrive_expect_tx(&full, box_rows * box_cols * 2);
    hopper::tma_load_2d(tile, &map_in, &full, c0, c1);
  }
  HOPPER_WAIT1(full, 0);
  for (int i = threadIdx.x; i < box_rows * box_cols; i += blockDim.x) out[i] = tile[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::tma_store_2d(&map_out, tile, c1, c0);
    hopper::tma_store_commit();
    hopper::tma_store_wait<0>();
  }
}
"""

BIG_SMEM = r"""
extern "C" __global__ void big_smem(const float* in, float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[n - 1 - i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[i];
}
"""

CLUSTER = r"""
#include "hopper.cuh"
extern "C" __global__ void cluster_ids(const __grid_constant__ CUtensorMap unused, int* out) {
  __shared__ int mine;
  if (threadIdx.x == 0) mine = blockIdx.x;
  hopper::cluster_sync();
  if (threadIdx.x == 0) {
    // read the neighbour's shared variable through distributed shared memory
    unsigned peer = (hopper::cluster_ctarank() + 1) % hopper::cluster_nctarank();
    unsigned addr = hopper::map_shared_rank(&mine, peer);
    int v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    out[3 * blockIdx.x + 0] = hopper::cluster_ctarank();
    out[3 * blockIdx.x + 1] = hopper::cluster_nctarank();
    out[3 * blockIdx.x + 2] = v;
  }
  hopper::cluster_sync();
}
"""

SPIN = r"""
extern "C" __global__ void spin(volatile int* flag) { while (*flag == 0) { } }
"""


def test_device_is_hopper() -> None:
    info = gpu.device_info()
    assert info is not None and info.compute_capability == (9, 0) and info.sm_count >= 100
    assert info.max_smem_optin >= 227 * 1024


@pytest.mark.parametrize("dtype", [np.float32, gpu.bfloat16, np.int32])
def test_array_round_trip_and_poison(dtype) -> None:  # noqa: ANN001
    h = gpu.random_host((37, 129), dtype=np.float32, seed=3).astype(dtype) if dtype != np.int32 else \
        np.random.default_rng(1).integers(-1000, 1000, (37, 129), dtype=np.int32)
    d = gpu.to_device(h)
    assert d.shape == h.shape and d.dtype == np.dtype(dtype)
    back = d.to_host()
    assert back.dtype == h.dtype and np.array_equal(back.view(np.uint8), h.view(np.uint8))
    p = gpu.poison(d).to_host()
    if dtype == np.int32:
        assert (p == -1).all()
    else:
        assert np.isnan(p.astype(np.float32)).all()


def test_vector_add_and_argument_errors() -> None:
    out = examples.vector_add_demo(n=5000, seed=7)
    np.testing.assert_array_equal(out["c"], out["a"] + np.float32(2.0) * out["b"])
    k = gpu.compile(examples.VECTOR_ADD)
    a = gpu.to_device(np.ones(8, np.float32))
    with pytest.raises(gpu.LaunchError, match=r"plain Python int .*np\.int32"):
        gpu.launch(k, 1, 32, 0, a, a, a, 8, np.float32(1))
    with pytest.raises(gpu.LaunchError, match="takes 5 arguments"):
        gpu.launch(k, 1, 32, 0, a, a, a)
    with pytest.raises(gpu.LaunchError, match="4 bytes wide"):
        gpu.launch(k, 1, 32, 0, a, a, a, np.int64(8), np.float32(1))
    with pytest.raises(gpu.LaunchError, match="host memory"):
        gpu.launch(k, 1, 32, 0, np.ones(8, np.float32), a, a, np.int32(8), np.float32(1))


def test_dynamic_shared_memory_above_48k() -> None:
    k = gpu.compile(BIG_SMEM)
    n = 50_000  # 200 000 bytes
    x = gpu.random_host(n, np.float32, seed=5)
    out = gpu.poison(n, np.float32)
    gpu.launch(k, 1, 256, n * 4, gpu.to_device(x), out, np.int32(n))
    np.testing.assert_array_equal(out.to_host(), x[::-1])
    with pytest.raises(gpu.LaunchError, match="at most"):
        gpu.launch(k, 1, 256, 300_000, gpu.to_device(x), out, np.int32(n))


@pytest.mark.parametrize("via", ["driver", "core"])
@pytest.mark.parametrize("swizzle", [0, 128])
def test_tma_load_and_store(via: str, swizzle: int) -> None:
    k = gpu.compile(TMA_COPY)
    rows, cols = 256, 192
    src = gpu.random_host((rows, cols), gpu.bfloat16, seed=11)
    d_in = gpu.to_device(src)
    d_t = gpu.to_device(np.full((cols, rows), np.nan, gpu.bfloat16))  # transposed-coordinates target
    out = gpu.poison((64, 64), np.uint16)
    m_in = gpu.tensor_map_2d(d_in, 64, 64, swizzle=swizzle, via=via)
    m_out = gpu.tensor_map(d_t, (64, 64), swizzle=swizzle, via=via)
    gpu.launch(k, 1, 128, 0, m_in, m_out, out, np.int32(64), np.int32(128), np.int32(64), np.int32(64))
    tile = out.to_host().view(gpu.bfloat16)
    want = src[128:192, 64:128]
    if swizzle == 0:
        assert np.array_equal(tile.view(np.uint16), want.view(np.uint16))
    else:  # 16-byte chunk c of row r sits at chunk c ^ (r % 8)
        chunks = tile.view(np.uint16).reshape(64, 8, 8)
        unswizzled = np.stack([chunks[r, [c ^ (r % 8) for c in range(8)]] for r in range(64)]).reshape(64, 64)
        assert np.array_equal(unswizzled, want.view(np.uint16))
    # the TMA store wrote the (swizzled) tile back unswizzled at rows 64.., cols 128..
    back = d_t.to_host()
    assert np.array_equal(back[64:128, 128:192].view(np.uint16), want.view(np.uint16))
    assert np.isnan(back[:64].astype(np.float32)).all()


@pytest.mark.parametrize("via", ["driver", "core"])
def test_reference_gemm_exact_check(reference_source: str, via: str) -> None:
    k = gpu.compile(reference_source, "gemm_64x64")
    m, n, kk = 256, 192, 320
    a = gpu.random_host((m, kk), gpu.bfloat16, seed=1)
    b = gpu.random_host((n, kk), gpu.bfloat16, seed=2)
    da, db = gpu.to_device(a), gpu.to_device(b)
    c = gpu.poison((m, n), np.float32)
    ta, tb = gpu.tensor_map_2d(da, 64, 64, via=via), gpu.tensor_map_2d(db, 64, 64, via=via)
    gpu.launch(k, (n // 64, m // 64), 128, 0, ta, tb, c, np.int32(m), np.int32(n), np.int32(kk))
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    gpu.check_gemm(c.to_host(), ref, kk)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("via", ["driver", "core"])
def test_cluster_launch_grid_counts_blocks(via: str) -> None:
    k = gpu.compile(CLUSTER)
    dummy = gpu.empty((64, 64), np.float32)
    tm = gpu.tensor_map_2d(dummy, 8, 8, swizzle=0, via=via)
    out = gpu.poison((8, 3), np.int32)
    gpu.launch(k, 8, 64, 0, tm, out, cluster=2)
    o = out.to_host()
    blocks = np.arange(8)
    assert np.array_equal(o[:, 0], blocks % 2) and (o[:, 1] == 2).all()
    assert np.array_equal(o[:, 2], blocks ^ 1)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("out_dtype", [np.float32, gpu.bfloat16])
def test_cublas_gemm(layout: str, out_dtype) -> None:  # noqa: ANN001
    m, n, k = 192, 320, 256
    a = gpu.random_host((m, k), gpu.bfloat16, seed=4)
    b = gpu.random_host((n, k) if layout == "nk" else (k, n), gpu.bfloat16, seed=5)
    c = gpu.cublas_gemm(a, b, b_layout=layout, out_dtype=out_dtype)
    bf = b.astype(np.float32)
    ref = a.astype(np.float32) @ (bf.T if layout == "nk" else bf)
    assert c.shape == (m, n) and c.dtype == np.dtype(out_dtype)
    gpu.check_gemm(c, ref, k)


def test_time_kernel_and_gemm_benchmark(reference_source: str) -> None:
    k = gpu.compile(examples.VECTOR_ADD)
    a = gpu.to_device(np.ones(1 << 20, np.float32))
    t = gpu.time_kernel(gpu.prepare(k, 4096, 256, 0, a, a, a, np.int32(1 << 20), np.float32(1)), warmup=2, repeat=5)
    assert len(t.times_ms) == 5 and 0 < t.min_ms <= t.median_ms <= t.max_ms
    ref = gpu.compile(reference_source, "gemm_64x64")

    def make(A, B, C):  # noqa: ANN001, ANN202
        m, kk = A.shape
        n = B.shape[0]
        return gpu.prepare(ref, (n // 64, m // 64), 128, 0, gpu.tensor_map_2d(A, 64, 64), gpu.tensor_map_2d(B, 64, 64),
                           C, np.int32(m), np.int32(n), np.int32(kk))

    r = gpu.gemm_benchmark(make, 512, 512, 512, warmup=1, repeat=3)
    assert r.tflops > 0 and r.cublas_tflops > 0 and r.ratio > 0 and r.input_sets > 1
    assert r.max_abs_error is not None and "cuBLAS" in r.summary()


def test_report_matches_loaded_kernel(reference_source: str) -> None:
    k = gpu.compile(reference_source, "gemm_64x64")
    gpu.launch  # noqa: B018 - load through the public path below
    from helpers.gpu.launch import load

    core = load(k)["core"]
    assert core.attributes.num_regs == k.report.registers
    from helpers.gpu import diagnostics

    assert load(k)["diag"] is True, diagnostics.last_attach_error  # the bounded wait's record is attached


def test_isolated_deadlock_is_reported_and_process_stays_healthy() -> None:
    t0 = time.monotonic()
    with pytest.raises(gpu.KernelDeadlock) as e:
        gpu.run_isolated("helpers.gpu.examples:deadlock_demo", timeout=30)
    seconds = time.monotonic() - t0
    assert re.search(r"^deadlock: block \(3,0\) warp \d waited on full\[2\] for parity 0", str(e.value)), str(e.value)
    assert seconds < 10
    out = examples.vector_add_demo(n=100)  # this process's GPU still works
    np.testing.assert_array_equal(out["c"], out["a"] + 2 * out["b"])


@pytest.mark.parametrize(("demo", "words"), [("out_of_bounds_demo", "illegal address"),
                                             ("misaligned_demo", "misaligned address")])
def test_isolated_faults_are_reported(demo: str, words: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(gpu.KernelFault) as e:
        gpu.run_isolated(f"helpers.gpu.examples:{demo}", timeout=30)
    assert words in str(e.value) and not isinstance(e.value, gpu.KernelDeadlock)
    assert time.monotonic() - t0 < 10
    out = examples.vector_add_demo(n=100)
    np.testing.assert_array_equal(out["c"], out["a"] + 2 * out["b"])


def test_isolated_kernel_launch_and_time_limit() -> None:
    k = gpu.compile(examples.VECTOR_ADD)
    a, b = gpu.random_host(300, np.float32, seed=1), gpu.random_host(300, np.float32, seed=2)
    c = np.full(300, np.nan, np.float32)
    res = gpu.run_isolated(k, 3, 128, 0, a, b, c, np.int32(300), np.float32(0.5), timeout=30)
    np.testing.assert_array_equal(res.arrays[2], a + np.float32(0.5) * b)
    spin = gpu.compile(SPIN)
    t0 = time.monotonic()
    with pytest.raises(gpu.KernelDeadlock, match=r"deadlock: .*(did not finish within 6 s|still running)"):
        gpu.run_isolated(spin, 1, 1, 0, np.zeros(1, np.int32), timeout=6)
    assert time.monotonic() - t0 < 10


def test_isolated_tensor_map_arg(reference_source: str) -> None:
    k = gpu.compile(reference_source, "gemm_64x64")
    a = gpu.random_host((128, 128), gpu.bfloat16, seed=8)
    b = gpu.random_host((64, 128), gpu.bfloat16, seed=9)
    c = np.full((128, 64), np.nan, np.float32)
    res = gpu.run_isolated(k, (1, 2), 128, 0, gpu.TensorMapArg(a, (64, 64)), gpu.TensorMapArg(b, (64, 64)), c,
                           np.int32(128), np.int32(64), np.int32(128), timeout=30)
    assert len(res.arrays) == 1
    gpu.check_gemm(res.arrays[0], a.astype(np.float32) @ b.astype(np.float32).T, 128)
